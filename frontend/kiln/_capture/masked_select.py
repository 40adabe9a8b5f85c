"""Boolean-mask selections whose values only reach reductions, rewritten so they compile.

``x[mask]`` has as many rows as the mask has true values, a size known only when the program
runs, so the node stays an eager call and splits the compiled program. Most model code reduces
the selection at once: ``loss[mask].mean()``, ``(pred[m] - target[m]).abs().sum()``,
``F.cross_entropy(logits[m], labels[m])``. Such a region is computed at the full shape
instead and the mask applied by the reduction, which needs no data-dependent size:

- every selection ``x[m]`` (``m`` covering ``x``'s leading dims) becomes
  ``where(m, x, x_ref)``, where ``x_ref`` is ``x`` at the mask's first true position: the
  positions the mask drops then compute what a kept position computes, so they can neither
  raise (integer division) nor make a gradient NaN (``0 * inf``), even when the dropped values
  are NaN or out of an op's domain;
- elementwise ops of such values (and of tensors that broadcast over their trailing dims only)
  run at the full shape, unchanged;
- ``sum()`` becomes ``where(m, v, 0).sum()``, ``mean()`` that sum divided by the number of kept
  elements (also over the selected rows only: ``sum(0)``, ``mean(0)``), ``mse_loss``/``l1_loss``
  their elementwise loss reduced the same way, and ``cross_entropy``/``nll_loss`` of selected
  rows the loss over all rows with the dropped rows' targets set to ``ignore_index`` (torch then
  leaves them out of the sum and the mean's divisor);
- ``max()``/``min()``/``amax``/``amin`` reduce ``where(m, v, lowest or highest value)``; an
  assertion node (an eager node) raises eager's error when nothing is kept;
- ``x[m] = v[m]`` writes ``where(m, v, x)`` into ``x``, and ``x[m] *= c`` (an in-place update
  of the selection, then its assignment) is ``x[m] = x[m] * c``;
- softmax, log_softmax and reductions along the trailing (unselected) dims stay row-wise ops.

``masked_select(x, m)`` with ``m`` of ``x``'s shape is the selection ``x[m]``.

A region with any other use (returned, indexed, reshaped, reduced along a dim, written in
place) is left alone: its selection stays an eager node, reported with the reason.
"""

from __future__ import annotations

import inspect
import math
import operator

import kiln
from kiln._capture.graph import Graph, Node, nodes_in, replace_nodes

__all__ = ["rewrite_masked_reductions"]

_CASTS = ("float", "double", "half", "bfloat16", "long", "int", "bool")


def rewrite_masked_reductions(graph: Graph) -> int:
    """Rewrites every region of `graph` that qualifies (see the module docstring); returns how
    many masks were rewritten."""
    if not _ELEMENTWISE:
        _load_targets()
    _forward_selection_updates(graph)
    seeds: dict[int, list[Node]] = {}
    for node in graph.nodes:
        mask = _selection_mask(node)
        if mask is not None:
            seeds.setdefault(id(mask), []).append(node)
    rewritten = 0
    for group in seeds.values():
        region = _region(graph, group)
        if region is not None:
            _Rewrite(graph, group[0].args[1], region).run()
            rewritten += 1
    return rewritten


def _forward_selection_updates(graph: Graph) -> None:
    """`x[m] *= c` records `t = x[m]; u = t * c; copy_(t, u); x[m] = t`. A selection is a fresh
    copy: while nothing holds it (it is not returned), only its own later uses see the update,
    so they read `u` and the copy goes; the region is then the assignment `x[m] = u`."""
    for node in list(graph.nodes):
        if node.op != "call" or node.target is not kiln.Tensor.copy_ or node.kwargs or \
                len(node.args) != 2:
            continue
        dst, src = node.args
        if not (isinstance(dst, Node) and isinstance(src, Node)) or _selection_mask(dst) is None:
            continue
        ed, es = _example(dst), _example(src)
        if not isinstance(es, kiln.Tensor) or es.shape != ed.shape or es.dtype != ed.dtype:
            continue
        if any(u.op != "call" for u in dst.users + node.users):
            continue  # returned: the caller holds the updated object
        later = graph.nodes[graph.nodes.index(node) + 1:]
        for user in [u for u in dict.fromkeys(dst.users + node.users) if u in later]:
            _read_instead(graph, user, {id(dst): src, id(node): src})
        if not node.users:
            graph._erase(node)


def _read_instead(graph: Graph, user: Node, swaps: dict) -> None:
    """`user` with its operands named in `swaps` (by id) replaced."""
    for n in nodes_in((user.args, user.kwargs)):
        n.users.remove(user)

    def swap(n):
        return swaps.get(id(n), n)

    user.args = replace_nodes(user.args, swap)
    user.kwargs = replace_nodes(user.kwargs, swap)
    for n in nodes_in((user.args, user.kwargs)):
        n.users.append(user)
    graph._forward = None


def _example(value):
    return value.meta.get("example") if isinstance(value, Node) else value


def _selected(node: Node) -> tuple | None:
    """(x, mask) of ``x[mask]`` or ``masked_select(x, mask)``, else None."""
    if node.op != "call" or len(node.args) != 2 or node.kwargs:
        return None
    if node.target is operator.getitem:
        return node.args
    if node.target in (kiln.masked_select, kiln.Tensor.masked_select):
        x, mask = node.args  # the same selection when nothing broadcasts
        same = isinstance(x, Node) and isinstance(mask, Node) and (
            tuple(getattr(_example(x), "shape", ())) == tuple(getattr(_example(mask), "shape", ())))
        return node.args if same else None
    return None


def _selection_mask(node: Node) -> Node | None:
    """The mask node of a selection (a bool tensor covering x's leading dims), else None."""
    pair = _selected(node)
    if pair is None:
        return None
    x, mask = pair
    ex, em = _example(x), _example(mask)
    if not (isinstance(x, Node) and isinstance(mask, Node)):
        return None
    if not (isinstance(ex, kiln.Tensor) and isinstance(em, kiln.Tensor)):
        return None
    if em.dtype != kiln.bool or em.dim() == 0 or ex.dim() < em.dim() or em.numel() == 0:
        return None  # (no rows: nothing to take the reference row from)
    return mask if tuple(ex.shape[: em.dim()]) == tuple(em.shape) else None


class _Terminal:
    """A use that reduces a region: how to rewrite it once the region is at full shape."""

    def __init__(self, kind: str, bound: dict | None = None):
        self.kind = kind  # "sum", "mean", "pointwise_loss", "class_loss"
        self.bound = bound or {}


def _region(graph: Graph, seeds: list[Node]) -> dict | None:
    """{id(node): node or _Terminal} for the region grown from `seeds`; None if any value of it
    escapes to a use the rewrite cannot take."""
    members: dict[int, Node] = {id(s): s for s in seeds}
    terminals: dict[int, _Terminal] = {}
    rows: dict[int, _Terminal] = {}  # row-wise members, with their dims counted from the end
    first = min(graph.nodes.index(s) for s in seeds)
    for node in graph.nodes[first:]:
        if id(node) in members or node.op != "call":
            continue
        inside = [n for n in nodes_in((node.args, node.kwargs)) if id(n) in members]
        if not inside:
            continue
        terminal = _terminal(node, members)
        rowwise = _rowwise(node, members) if terminal is None else None
        if terminal is not None:
            terminals[id(node)] = terminal
        elif rowwise is not None:
            members[id(node)] = node
            rows[id(node)] = rowwise
        elif _elementwise(node, members):
            members[id(node)] = node
        else:
            return None
    for node in members.values():
        if any(id(u) not in members and id(u) not in terminals for u in node.users):
            return None
    return {**members, **rows, **terminals} if terminals else None


def _region_mask(members: dict) -> Node | None:
    """The mask the region's selections use (they all share it)."""
    for node in members.values():
        pair = _selected(node)
        if pair is not None:
            return pair[1]
    return None


def _row_ndim(node: Node) -> int:
    return _example(node).dim() - 1


def _elementwise(node: Node, members: dict) -> bool:
    """An elementwise op whose region operands have the result's rank and whose other tensors
    broadcast over trailing dims only (so the selected dim stays the first)."""
    if not _is_elementwise_target(node):
        return False
    result = _example(node)
    if not isinstance(result, kiln.Tensor) or result.dim() == 0:
        return False
    for v in nodes_in((node.args, node.kwargs)):
        ev = _example(v)
        if id(v) in members:
            if ev.dim() != result.dim():
                return False
        elif isinstance(ev, kiln.Tensor) and ev.dim() > result.dim() - 1:
            return False
    return True


def _terminal(node: Node, members: dict) -> _Terminal | None:
    t = node.target
    if t in (kiln.sum, kiln.Tensor.sum, kiln.mean, kiln.Tensor.mean):
        kind = "sum" if t in (kiln.sum, kiln.Tensor.sum) else "mean"
        if len(node.args) == 1 and not node.kwargs:
            return _Terminal(kind)
        bound = _reduction_dims(node)
        if bound is not None and bound[0] == [0] and not bound[1]:
            return _Terminal(kind + "_rows")  # over the selected rows only
        return None
    if t in _EXTREMES:
        if len(node.args) == 1 and not node.kwargs:
            return _Terminal("extreme")
        bound = _reduction_dims(node)
        if t in (kiln.amax, kiln.Tensor.amax, kiln.amin, kiln.Tensor.amin) and bound is not None \
                and bound[0] == [0] and not bound[1]:
            return _Terminal("extreme_rows")
        return None
    if t is operator.setitem and len(node.args) == 3 and id(node.args[2]) in members and (
            id(node.args[0]) not in members):
        x, mask, value = node.args  # x[m] = v[m]: the kept elements of v written into x
        if mask is not _region_mask(members) or not isinstance(_example(x), kiln.Tensor):
            return None  # another index: the values land elsewhere
        full = tuple(_example(mask).shape) + tuple(_example(value).shape[1:])
        return _Terminal("assign") if tuple(_example(x).shape) == full else None
    kind = _LOSSES.get(id(t))
    if kind is None:
        return None
    bound = _bind(t, node)
    if bound is None or bound.get("reduction", "mean") not in ("mean", "sum"):
        return None
    if any(bound.get(k) is not None for k in ("size_average", "reduce")):
        return None
    a, b = bound["input"], bound["target"]
    if kind == "pointwise_loss":
        if bound.get("weight") is not None:
            return None
        inside = [v for v in (a, b) if isinstance(v, Node) and id(v) in members]
        rank = _example(inside[0]).dim() if inside else 0
        for v in (a, b):
            ev = _example(v)
            if id(v) not in members and isinstance(ev, kiln.Tensor) and ev.dim() > rank - 1:
                return None
        return _Terminal(kind, bound) if inside else None
    # A class loss: the logits' rows and the targets must both be selected by the mask.
    if not (id(a) in members and id(b) in members):
        return None
    if _row_ndim(a) != 1 or _row_ndim(b) != 0 or _example(b).is_floating_point():
        return None
    w = bound.get("weight")
    if isinstance(w, Node) and id(w) in members:
        return None
    return _Terminal(kind, bound)


_ROWWISE = ("softmax", "log_softmax", "sum", "mean", "amax", "amin", "logsumexp")


def _reduction_dims(node: Node) -> tuple[list[int], bool] | None:
    """(dims, keepdim) of a call to a table op that takes ``dim``, its only tensor the input;
    the dims normalized to the input's rank. None when it is not such a call."""
    spelling = _SPELLINGS.get(id(node.target))
    if spelling is None or spelling.op not in _ROWWISE:
        return None
    try:
        bound = spelling.signature.bind(*node.args, **node.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    args = bound.arguments
    if any(isinstance(v, Node) for k, v in args.items() if k != "input"):
        return None
    if any(k not in ("input", "dim", "keepdim", "_stacklevel") and v is not None
           for k, v in args.items()):  # fmt: skip
        return None  # a dtype= argument
    dim, rank = args.get("dim"), _example(args["input"]).dim()
    dims = [dim] if isinstance(dim, int) else list(dim or [])
    if not dims or not all(isinstance(d, int) and -rank <= d < rank for d in dims):
        return None
    return sorted(d % rank for d in dims), bool(args.get("keepdim", False))


def _rowwise(node: Node, members: dict) -> _Terminal | None:
    """A softmax or a reduction along dims other than the selected one: the same op at full
    shape, its dims counted from the end."""
    found = _reduction_dims(node)
    if found is None or id(node.args[0] if node.args else None) not in members:
        return None
    dims, keepdim = found
    rank = _example(node.args[0]).dim()
    if 0 in dims:
        return None
    return _Terminal("rowwise", {"dims": [d - rank for d in dims], "keepdim": keepdim})


def _bind(target, node: Node) -> dict | None:
    try:
        sig = inspect.signature(target)
        bound = sig.bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


_EXTREMES = (kiln.amax, kiln.Tensor.amax, kiln.amin, kiln.Tensor.amin, kiln.max, kiln.Tensor.max,
             kiln.min, kiln.Tensor.min)
_EMPTY = ("max(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
          "reduction dim with the 'dim' argument.")
_ELEMENTWISE: set[int] = set()
_LOSSES: dict[int, str] = {}


def _is_elementwise_target(node: Node) -> bool:
    t = node.target
    if id(t) in _ELEMENTWISE:
        return True
    if t is kiln.Tensor.to:  # a cast to a dtype only
        args = node.args[1:] + tuple(node.kwargs.values())
        return len(args) == 1 and isinstance(args[0], kiln.dtype)
    return False


def _load_targets() -> None:
    from kiln._capture import op_table
    from kiln._capture.lowerings import _resolve

    traits = {row["op"]: row["traits"] for row in kiln._C._ir.op_table()}
    for spelling in op_table.spellings():
        try:
            target = _resolve(spelling.path)
        except (AttributeError, ImportError):
            continue
        _SPELLINGS[id(target)] = spelling
        if "elementwise" in traits.get(spelling.op, ()) and not spelling.inplace:
            _ELEMENTWISE.add(id(target))
    _ELEMENTWISE.update(id(getattr(kiln.Tensor, name)) for name in _CASTS)
    F = kiln.nn.functional
    _LOSSES.update({id(F.mse_loss): "pointwise_loss", id(F.l1_loss): "pointwise_loss",
                    id(F.cross_entropy): "class_loss", id(F.nll_loss): "class_loss"})


_SPELLINGS: dict[int, object] = {}  # id(target) -> op_table.Spelling


class _Rewrite:
    """Rewrites one accepted region in place (graph order: operands before their users)."""

    def __init__(self, graph: Graph, mask: Node, region: dict):
        self.graph, self.mask, self.region = graph, mask, region
        self.kept: dict[int, Node] = {}  # row rank -> the mask with that many trailing dims
        self.first: Node | None = None  # the mask's first true position, as a [1] index

    def run(self) -> None:
        for node in list(self.graph.nodes):
            entry = self.region.get(id(node))
            if entry is None:
                continue
            if isinstance(entry, _Terminal) and entry.kind == "rowwise":
                self._rowwise(node, entry)
            elif isinstance(entry, _Terminal):
                self._terminal(node, entry)
            elif (pair := _selected(node)) is not None and pair[1] is self.mask:
                self._selection(node)
            else:
                self.graph.set_call(node, node.target, node.args, node.kwargs, _run(node))

    # -- helpers that add nodes before `at` ---------------------------------------------------
    def _add(self, at: Node, target, *args, **kwargs) -> Node:
        example = _run_call(at, target, args, kwargs)
        return self.graph.insert_call(at, target, args, kwargs, example, at)

    def _kept(self, at: Node, row_ndim: int) -> Node:
        """The mask with `row_ndim` trailing dims of one, to broadcast against a region value."""
        node = self.kept.get(row_ndim)
        if node is None:
            node = self.mask
            for _ in range(row_ndim):
                node = self._add(at, kiln.Tensor.unsqueeze, node, -1)
            self.kept[row_ndim] = node
        return node

    def _selection(self, node: Node) -> None:
        x = node.args[0]
        k = _example(self.mask).dim()
        if self.first is None:
            flat = self._add(node, kiln.Tensor.reshape, self.mask, -1)
            ints = self._add(node, kiln.Tensor.to, flat, kiln.int32)
            self.first = self._add(node, kiln.Tensor.argmax, ints, 0, True)
        rows = self._add(node, kiln.Tensor.flatten, x, 0, k - 1) if k > 1 else x
        ref = self._add(node, kiln.Tensor.index_select, rows, 0, self.first)
        for _ in range(k - 1):
            ref = self._add(node, kiln.Tensor.unsqueeze, ref, 0)
        kept = self._kept(node, _example(x).dim() - k)
        self._set(node, kiln.where, kept, x, ref)

    def _set(self, node: Node, target, *args, **kwargs) -> None:
        self.graph.set_call(node, target, args, kwargs, _run_call(node, target, args, kwargs))

    def _masked_reduce(self, node: Node, value: Node, mean: bool, rows_only=False) -> None:
        """sum or mean of the kept elements of `value`: all of them, or (`rows_only`) over the
        selected rows, leaving the other dims."""
        kept = self._kept(node, _row_ndim_full(value, self.mask))
        zeroed = self._add(node, kiln.where, kept, value, 0)
        dims = list(range(_example(self.mask).dim())) if rows_only else None
        if not mean:
            self._set(node, kiln.Tensor.sum, zeroed, *([dims] if dims else []))
            return
        dtype = _example(value).dtype
        narrow = dtype in (kiln.float16, kiln.bfloat16)  # summed in float32, as eager's mean
        total = self._add(node, kiln.Tensor.sum, zeroed, *([dims] if dims else []),
                          **({"dtype": kiln.float32} if narrow else {}))
        count = self._add(node, kiln.Tensor.sum, self.mask) if rows_only else self._add(
            node, kiln.Tensor.sum, self._add(node, kiln.Tensor.expand_as, kept, value))
        if not narrow:
            self._set(node, operator.truediv, total, count)
            return
        mean_value = self._add(node, operator.truediv, total, count)
        self._set(node, kiln.Tensor.to, mean_value, dtype)

    def _rowwise(self, node: Node, entry: _Terminal) -> None:
        spelling = _SPELLINGS[id(node.target)]
        bound = spelling.signature.bind(*node.args, **node.kwargs)
        dims = entry.bound["dims"]
        bound.arguments["dim"] = dims[0] if isinstance(bound.arguments["dim"], int) else dims
        self._set(node, node.target, *bound.args, **bound.kwargs)

    def _terminal(self, node: Node, entry: _Terminal) -> None:
        if entry.kind in ("sum", "mean"):
            self._masked_reduce(node, node.args[0], entry.kind == "mean")
            return
        if entry.kind in ("sum_rows", "mean_rows"):
            self._masked_reduce(node, node.args[0], entry.kind == "mean_rows", rows_only=True)
            return
        if entry.kind in ("extreme", "extreme_rows"):
            # The dropped positions take the extreme's identity (so they neither win nor share
            # a tie's gradient); none kept raises as eager does.
            kept = self._add(node, kiln.Tensor.any, self.mask)
            message = _EMPTY.replace("max()", f"{node.target.__name__}()")
            self.graph.insert_call(node, kiln._assert, (kept, message), {}, None, node)
            value = node.args[0]
            largest = node.target.__name__ in ("max", "amax")
            filled = self._add(node, kiln.where, self._kept(node, _row_ndim_full(value, self.mask)),
                               value, _identity(_example(value).dtype, largest))
            if entry.kind == "extreme":
                self._set(node, node.target, filled)
            else:
                self._set(node, node.target, filled, list(range(_example(self.mask).dim())))
            return
        if entry.kind == "assign":
            x, value = node.args[0], node.args[2]
            kept = self._kept(node, _row_ndim_full(value, self.mask))
            merged = self._add(node, kiln.where, kept, value, x)
            self.graph.set_call(node, kiln.Tensor.copy_, (x, merged), {},
                                _example(merged).clone())
            return
        b = entry.bound
        if entry.kind == "pointwise_loss":
            each = self._add(node, node.target, b["input"], b["target"], reduction="none")
            self._masked_reduce(node, each, b["reduction"] == "mean")
            return
        k = _example(self.mask).dim()
        logits, labels = b["input"], b["target"]
        ignore = b["ignore_index"]
        labels = self._add(node, kiln.where, self.mask, labels, ignore)
        if k > 1:
            logits = self._add(node, kiln.Tensor.flatten, logits, 0, k - 1)
            labels = self._add(node, kiln.Tensor.flatten, labels)
        kwargs = {key: b[key] for key in ("weight", "ignore_index", "reduction", "label_smoothing")
                  if key in b}  # fmt: skip
        self._set(node, node.target, logits, labels, **kwargs)


def _identity(dtype, largest: bool):
    """What a max (`largest`) or a min ignores: the lowest or highest value of `dtype`."""
    if dtype.is_floating_point:
        return -math.inf if largest else math.inf
    if dtype == kiln.bool:
        return not largest
    info = kiln.iinfo(dtype)
    return info.min if largest else info.max


def _row_ndim_full(value: Node, mask: Node) -> int:
    return _example(value).dim() - _example(mask).dim()


def _grad_mode(node: Node) -> bool:
    return node.meta.get("grad_enabled", node.graph.grad_enabled if node.graph else True)


def _run_call(at: Node, target, args, kwargs):
    ex_args = replace_nodes(tuple(args), _example)
    ex_kwargs = replace_nodes(dict(kwargs), _example)
    with kiln.set_grad_enabled(_grad_mode(at)):
        return target(*ex_args, **ex_kwargs)


def _run(node: Node):
    return _run_call(node, node.target, node.args, node.kwargs)
