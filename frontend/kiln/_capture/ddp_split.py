"""Compiled DistributedDataParallel: a training graph split at gradient-bucket boundaries.

A compiled part's backward is one autograd node, so every parameter gradient it computes is
accumulated when it ends. Were a DDP model's whole forward one part, no bucket's all-reduce could
start before the whole backward had run. As TorchDynamo's DDPOptimizer does, the partitioner
therefore cuts the graph where the parameters used since the end of the graph fill a bucket of DDP's
``bucket_cap_mb``: walking the calls from the last, each call joins the current segment and adds the
bytes of the DDP parameters it reads first; once a segment holds a bucket's worth (the first, as
DDP's first bucket, at most 1 MiB), the next call (earlier in the program) starts a new one. The
last segment's backward runs first, its gradients fill DDP's last-registered buckets, and their
all-reduces travel while the earlier segments' backwards compute. ``kiln._dynamo.config.optimize_ddp
= False`` turns it off.
"""

from __future__ import annotations

from kiln._capture.graph import Node, nodes_in


def bucket_splits(calls: list[Node], inputs: list[Node]) -> set[int]:
    """The ids of the calls that start a new part: empty unless some graph input is a parameter
    of a live DistributedDataParallel (and optimize_ddp is on)."""
    from kiln._dynamo import config
    from kiln.nn.parallel.distributed import FIRST_BUCKET_BYTES, bucketed_parameters

    if not config.optimize_ddp:
        return set()
    examples = [n.meta.get("example") for n in inputs]
    cap, params = bucketed_parameters(examples)
    if not params:
        return set()
    param_bytes = {id(n): ex.numel() * ex.element_size()
                   for n, ex in zip(inputs, examples, strict=True) if id(ex) in params}
    splits: set[int] = set()
    counted: set[int] = set()
    size = 0
    for i in range(len(calls) - 1, -1, -1):
        # the last segment is cut like DDP's first bucket, at most 1 MiB, so its all-reduce
        # starts early (a cap of 0 puts each parameter's uses in a part of its own)
        limit = min(cap, FIRST_BUCKET_BYTES) if not splits else cap
        if size and size >= limit:
            splits.add(id(calls[i + 1]))
            size = 0
        for a in nodes_in((calls[i].args, calls[i].kwargs)):
            if id(a) in param_bytes and id(a) not in counted:
                counted.add(id(a))
                size += param_bytes[id(a)]
    return splits
