"""DistributedDataParallel: torch's data-parallel wrapper on kiln.distributed (Open MPI).

At construction the parameters and buffers are broadcast from rank 0, so every process starts from
the same model. The parameters that require grad are grouped into buckets of about ``bucket_cap_mb``
megabytes (the first at most 1 MiB, as torch's), in reverse registration order (the order the
backward produces their gradients). A post-accumulate-grad hook on each parameter counts it ready;
when a bucket's last gradient has accumulated, the bucket is flattened and its all-reduce starts
without waiting (kiln.distributed's progress thread moves it along), so the next layers' backward
runs while it travels. When the last bucket has started, all are waited for and each ``.grad``
becomes the average over ranks. ``no_sync()`` skips the reduction (gradients accumulate locally, and
the next synchronized backward averages the sum), and ``find_unused_parameters=True`` marks the
parameters the forward's outputs do not reach ready at the end of the forward, as torch does.
Buffers (BatchNorm statistics) are broadcast from rank 0 before each synchronized training forward
when ``broadcast_buffers`` (the default); a forward under no_grad or with the reduction off runs
locally, with no collective.

Under ``kiln.compile`` (of the DDP module, or of code that calls it) the training graph is cut
at gradient-bucket boundaries (kiln/_capture/ddp_split.py), so each compiled part's backward
fills its buckets and their all-reduces start while the earlier parts' backwards compute.
"""

from __future__ import annotations

import contextlib
import time
import weakref

import kiln
import kiln.distributed as dist
from kiln.distributed import _groups
from kiln.nn.modules.module import Module

__all__ = ["DistributedDataParallel"]

_UNFINISHED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This "
    "error indicates that your module has parameters that were not used in producing loss. You "
    "can enable unused parameter detection by passing the keyword argument "
    "`find_unused_parameters=True` to `kiln.nn.parallel.DistributedDataParallel`, and by making "
    "sure all `forward` function outputs participate in calculating loss. Parameters that did "
    "not receive a gradient on this rank: {names}"
)


class _Bucket:
    def __init__(self, indices):
        self.indices = indices
        self.pending = len(indices)
        self.flat = None
        self.work = None


class DistributedDataParallel(Module):
    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None):  # fmt: skip
        super().__init__()
        if not dist.is_initialized():
            raise ValueError(
                "Default process group has not been initialized, please make sure to call "
                "init_process_group."
            )
        self.module = module
        self.process_group = process_group  # None: the world; else a group from new_group
        if process_group is not None and dist.get_rank(process_group) < 0:
            raise ValueError("DistributedDataParallel: this rank is not in process_group")
        self._src = _groups.source_rank(process_group)
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self._sync = True
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module doesn't have any parameter "
                "that requires a gradient."
            )
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        with kiln.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.detach(), src=self._src, group=process_group)
        self._bucket_bytes = (25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024
        self._buckets, self._bucket_of = self._make_buckets(self._bucket_bytes)
        self._ready = [False] * len(self._params)
        self._started = 0
        self._expect_reduction = False
        self._comm_wait_seconds = 0.0
        _LIVE.add(self)
        me = weakref.ref(self)  # the hooks must not keep the wrapper (and model) alive
        self._handles = [
            p.register_post_accumulate_grad_hook(lambda _, i=i: _on_ready(me, i))
            for i, p in enumerate(self._params)
        ]

    def _make_buckets(self, cap):
        buckets, current, size, dtype = [], [], 0, None
        for i in reversed(range(len(self._params))):
            p = self._params[i]
            nbytes = p.numel() * p.element_size()
            # as torch's: the first bucket (the last layers) holds at most 1 MiB, so the first
            # all-reduce starts early in the backward
            limit = min(cap, FIRST_BUCKET_BYTES) if not buckets else cap
            if current and (size + nbytes > limit or p.dtype != dtype):
                buckets.append(_Bucket(current))
                current, size = [], 0
            current.append(i)
            size += nbytes
            dtype = p.dtype
        if current:
            buckets.append(_Bucket(current))
        bucket_of = {}
        for b, bucket in enumerate(buckets):
            for i in bucket.indices:
                bucket_of[i] = b
        return buckets, bucket_of

    # --- the reduction --------------------------------------------------------------------------

    def _param_ready(self, i):
        if not self._sync or self._ready[i]:
            return
        self._ready[i] = True
        bucket = self._buckets[self._bucket_of[i]]
        bucket.pending -= 1
        if bucket.pending == 0:
            self._start(bucket)

    def _start(self, bucket):
        grads = []
        for i in bucket.indices:
            p = self._params[i]
            g = p.grad if p.grad is not None else kiln.zeros_like(p)
            grads.append(g.detach().reshape(-1))
        bucket.flat = kiln.cat(grads) if len(grads) > 1 else grads[0].clone()
        bucket.work = dist.all_reduce(bucket.flat, op=dist.ReduceOp.AVG, group=self.process_group,
                                      async_op=True)
        # MPI moves a non-blocking collective along only inside MPI calls: polling the ones in
        # flight at each start lets them advance while the backward computes
        for b in self._buckets:
            if b.work is not None:
                b.work.is_completed()
        self._started += 1
        if self._started == len(self._buckets):
            self._finish()

    def _finish(self):
        start = time.perf_counter()
        for bucket in self._buckets:
            bucket.work.wait()
        # what the backward waited for communication, after all its compute (bench/distributed.py)
        self._comm_wait_seconds += time.perf_counter() - start
        with kiln.no_grad():
            for bucket in self._buckets:
                offset = 0
                for i in bucket.indices:
                    p = self._params[i]
                    n = p.numel()
                    averaged = bucket.flat[offset : offset + n].view(p.shape)
                    if self.gradient_as_bucket_view:
                        p.grad = averaged  # a view of the bucket: no copy into a second tensor
                    elif p.grad is None:
                        p.grad = averaged.clone()
                    else:
                        p.grad.copy_(averaged)
                    offset += n
                bucket.flat = bucket.work = None
                bucket.pending = len(bucket.indices)
        self._ready = [False] * len(self._params)
        self._started = 0
        self._expect_reduction = False

    def _mark_unused(self, outputs):
        """Parameters the outputs' autograd graph does not reach count as ready now."""
        reached = reached_leaves(outputs)
        for i, p in enumerate(self._params):
            if p._impl_id not in reached:
                self._param_ready(i)

    # --- Module ---------------------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        if self._expect_reduction and self._started < len(self._buckets):
            missing = [self._names[i] for i, r in enumerate(self._ready) if not r]
            raise RuntimeError(_UNFINISHED.format(names=", ".join(missing)))
        training = kiln.is_grad_enabled() and self._sync
        if self.broadcast_buffers and training:
            # Only synchronized training forwards talk to the other ranks: an evaluation under
            # no_grad on one rank (nanoGPT's estimate_loss on the master) must not wait for
            # the others.
            with kiln.no_grad():
                for b in self.module.buffers():
                    dist.broadcast(b, src=self._src, group=self.process_group)
        out = self.module(*inputs, **kwargs)
        if training:
            self._expect_reduction = True
            if self.find_unused_parameters:
                self._mark_unused(out)
        return out

    @property
    def require_backward_grad_sync(self) -> bool:
        """torch's switch (nanoGPT sets it per micro-step): False skips the reduction, as
        inside no_sync()."""
        return self._sync

    @require_backward_grad_sync.setter
    def require_backward_grad_sync(self, value: bool) -> None:
        self._sync = bool(value)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients accumulate locally inside; the first backward after it averages them."""
        before = self._sync
        self._sync = False
        try:
            yield
        finally:
            self._sync = before


FIRST_BUCKET_BYTES = 1024 * 1024
_LIVE: weakref.WeakSet = weakref.WeakSet()  # every DistributedDataParallel alive


def bucketed_parameters(tensors) -> tuple[int, set[int]]:
    """For the compiler's bucket split (kiln/_capture/ddp_split.py): the bucket size in bytes of
    the live DistributedDataParallel whose parameters are among `tensors`, and the ids of those
    tensors; (0, empty) when none is."""
    ids = {id(t) for t in tensors}
    for ddp in list(_LIVE):
        mine = {id(p) for p in ddp._params} & ids
        if mine:
            return ddp._bucket_bytes, mine
    return 0, set()


def _on_ready(ref, i):
    ddp = ref()
    if ddp is not None:
        ddp._param_ready(i)


def reached_leaves(outputs) -> set:
    """The identities (`_impl_id`) of the leaves whose gradients the outputs' autograd graph
    accumulates (what a backward from them reaches); data pointers would not do: released FSDP
    buffers have none."""
    # `seen` keeps the node objects alive: an id is only unique while its object lives, and a
    # live node's wrapper is the one returned for it again.
    reached, seen, stack = set(), {}, []
    for t in _tensors(outputs):
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if node.name() == "AccumulateGrad":
            reached.add(node.variable._impl_id)
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return reached


def _tensors(obj):
    if isinstance(obj, kiln.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)
