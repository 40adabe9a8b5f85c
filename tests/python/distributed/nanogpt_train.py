"""nanoGPT's train.py, condensed (its structure and the torch calls it makes) with `import torch`
swapped for kiln: np.memmap batches, a nullcontext autocast on CPU, a disabled GradScaler,
torch.compile, DDP with require_backward_grad_sync for gradient accumulation (under kilnrun),
evaluation under no_grad on the master only, checkpoints with torch.save / torch.load.

    python nanogpt_train.py OUT_DIR            (one process)
    tools/kilnrun --nproc-per-node 2 nanogpt_train.py OUT_DIR
"""
# ruff: noqa: E401, E501, E701, E702, I001 - kept in the shape of the original script
import math, os, sys
from contextlib import nullcontext
import numpy as np
import kiln as torch
from kiln.nn.parallel import DistributedDataParallel as DDP
from kiln.distributed import init_process_group, destroy_process_group
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench"))
from train_models import gpt_classes

out_dir = sys.argv[1]
gradient_accumulation_steps = 2; batch_size = 4; block_size = 16; max_iters = 6
learning_rate = 6e-4; warmup_iters = 2; lr_decay_iters = 6; min_lr = 6e-5
device = 'cpu'; dtype = 'float32'; compile = True; backend = 'gloo'
ddp = int(os.environ.get('RANK', -1)) != -1 # is this a ddp run?
if ddp:
    init_process_group(backend=backend)
    ddp_rank = int(os.environ['RANK'])
    ddp_local_rank = int(os.environ['LOCAL_RANK'])
    ddp_world_size = int(os.environ['WORLD_SIZE'])
    master_process = ddp_rank == 0; seed_offset = ddp_rank
    gradient_accumulation_steps //= ddp_world_size
else:
    master_process = True; seed_offset = 0; ddp_world_size = 1
torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device_type = 'cuda' if 'cuda' in device else 'cpu'
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
data_path = os.path.join(out_dir, 'train.bin')
if not os.path.exists(data_path):
    np.random.default_rng(0).integers(0, 48, 5000).astype(np.uint16).tofile(data_path)
def get_batch(split):
    data = np.memmap(data_path, dtype=np.uint16, mode='r')
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
    y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
    return x.to(device), y.to(device)
model = gpt_classes(torch, vocab=48, block=block_size, n_embd=32, n_head=4, n_layer=2)()
model.to(device)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16')) if hasattr(torch.cuda, 'amp') else torch.amp.GradScaler('cuda', enabled=(dtype == 'float16'))
optimizer = model.configure_optimizers(0.1, learning_rate, (0.9, 0.95))
if compile:
    unoptimized_model = model
    model = torch.compile(model)
if ddp:
    model = DDP(model, device_ids=[0])
@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    losses = torch.zeros(3)
    for k in range(3):
        X, Y = get_batch('val')
        with ctx:
            logits, loss = model(X, Y)
        losses[k] = loss.item()
    out['val'] = losses.mean()
    model.train()
    return out
def get_lr(it):
    if it < warmup_iters: return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters: return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)
X, Y = get_batch('train')
raw_model = model.module if ddp else model
for iter_num in range(max_iters):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    if iter_num % 3 == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: val loss {losses['val']:.4f}")
        checkpoint = {'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(), 'iter_num': iter_num}
        torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))
    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = (micro_step == gradient_accumulation_steps - 1)
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch('train')
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if master_process:
        print(f"iter {iter_num}: loss {loss.item() * gradient_accumulation_steps:.4f}")
ck = torch.load(os.path.join(out_dir, 'ckpt.pt'), map_location=device)
print(f"checkpoint iter {ck['iter_num']}")
if ddp:
    destroy_process_group()
