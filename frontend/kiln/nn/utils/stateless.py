"""functional_call (torch.nn.utils.stateless): call a module with other tensors standing in
for its parameters and buffers, restoring the originals afterwards.

Names are those of ``named_parameters()``/``named_buffers()``; any other tensor attribute
reachable by a dotted path may be swapped too (e.g. a parametrized ``weight``, which, as in
torch, goes through the parametrization's ``right_inverse`` on the way in and out). With
``tie_weights`` a value given for one of several tied names applies to all of them.
"""

from __future__ import annotations

import contextlib
import warnings

import kiln
from kiln.nn.modules.module import Module, _bump_version

__all__ = ["functional_call"]

_MISSING = object()


def _untie_named_tensors_map(module: Module, parameters_and_buffers: dict) -> dict:
    """``parameters_and_buffers`` extended to every name tied to a given one; several
    different values for one tied tensor are an error."""
    all_named = dict(module.named_parameters(remove_duplicate=False))
    all_named.update(module.named_buffers(remove_duplicate=False))
    names_by_tensor: dict[int, set[str]] = {}
    for name, tensor in all_named.items():
        names_by_tensor.setdefault(id(tensor), set()).add(name)
    tied_names_map = {
        name: names for names in names_by_tensor.values() if len(names) > 1 for name in names
    }
    given_tied = {name for name in parameters_and_buffers if name in tied_names_map}
    for given_name in given_tied:
        tied_names = tied_names_map[given_name]
        given_for_tensor = tied_names & given_tied
        values = {id(parameters_and_buffers[n]) for n in given_for_tensor}
        if len(given_for_tensor) > 1 and len(values) != 1:
            raise ValueError(
                f"functional_call got multiple values for keys {sorted(tied_names)}, "
                f"which are tied. Consider using tie_weights=False"
            )
    untied = dict(parameters_and_buffers)
    for given_name in given_tied:
        for tied_name in tied_names_map[given_name]:
            untied[tied_name] = parameters_and_buffers[given_name]
    return untied


def _swap_tensor(module: Module, name: str, tensor, allow_missing: bool = False):
    """Puts ``tensor`` (``_MISSING`` deletes) at ``module.<name>`` and returns what was there."""
    if tensor is not _MISSING and tensor is not None and not isinstance(tensor, kiln.Tensor):
        raise TypeError(f"{tensor} is not an instance of kiln.Tensor")
    _bump_version(module)
    for table in (module._parameters, module._buffers):
        if name in table:
            orig = table[name]
            if tensor is _MISSING:
                del table[name]
            else:
                table[name] = tensor
            return orig
    if hasattr(module, name):
        orig = getattr(module, name)
    elif allow_missing:
        orig = _MISSING
    else:
        raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
    if orig is not _MISSING and orig is not None and not isinstance(orig, kiln.Tensor):
        raise TypeError(f"attribute `{name}`: {orig} is not an instance of kiln.Tensor")
    if tensor is not _MISSING:
        setattr(module, name, tensor)
    elif hasattr(module, name):
        delattr(module, name)
    return orig


def _swap_path(root: Module, path: str, tensor):
    prefix, _, name = path.rpartition(".")
    owner = root
    if prefix:
        for item in prefix.split("."):
            owner = getattr(owner, item, None)
            if not isinstance(owner, Module):
                if tensor is _MISSING:
                    return _MISSING
                raise AttributeError(f"`{item}` of `{path}` is not an nn.Module")
    return _swap_tensor(owner, name, tensor, allow_missing=True)


def _swap_tensors_dict(root: Module, named_tensors: dict) -> dict:
    """Swaps every entry in; on an error the ones already swapped are put back."""
    orig = {}
    try:
        for name, tensor in named_tensors.items():
            orig[name] = _swap_path(root, name, tensor)
    except Exception:
        for name, tensor in orig.items():
            _swap_path(root, name, tensor)
        raise
    return orig


@contextlib.contextmanager
def _reparametrize_module(
    module: Module, parameters_and_buffers: dict, tie_weights: bool = False, strict: bool = False
):
    if tie_weights:
        untied = _untie_named_tensors_map(module, parameters_and_buffers)
    else:
        untied = parameters_and_buffers
    if strict:
        valid = {n for n, _ in module.named_parameters(remove_duplicate=False)}
        valid |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
        missing_keys = sorted(valid - set(untied))
        unexpected_keys = sorted(set(untied) - valid)
        error_msgs = []
        if unexpected_keys:
            error_msgs.append(f"Unexpected key(s): {', '.join(map(repr, unexpected_keys))}.")
        if missing_keys:
            error_msgs.append(f"Missing key(s): {', '.join(map(repr, missing_keys))}.")
        if error_msgs:
            raise RuntimeError(
                "Error(s) in reparametrizing for {}:\n\t{}".format(
                    module._get_name(), "\n\t".join(error_msgs)
                )
            )
    orig: dict = {}
    try:
        orig = _swap_tensors_dict(module, untied)
        yield
    finally:
        current = _swap_tensors_dict(module, orig)
        # A module that assigned new tensors in place of the swapped-in ones (rather than
        # mutating them) reports them back through the caller's dict, as torch does.
        parameters_and_buffers.update(
            {
                k: current[k]
                for k in parameters_and_buffers
                if k in current and current[k] is not _MISSING
            }
        )


def functional_call(
    module: Module,
    parameters_and_buffers: dict,
    args=None,
    kwargs=None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """``module(*args, **kwargs)`` with ``parameters_and_buffers`` (name -> tensor) in place of
    the module's own; the module is unchanged afterwards. A non-tuple ``args`` is one argument.
    ``strict`` requires exactly the module's parameter and buffer names. Deprecated (warns),
    as torch's is, in favour of ``kiln.func.functional_call``."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 "
        "and will be removed in a future version of PyTorch. "
        "Please use `torch.func.functional_call` instead which is a drop-in replacement.",
        FutureWarning,
        stacklevel=2,
    )
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(
        module, parameters_and_buffers, tie_weights=tie_weights, strict=strict
    ):
        return module(*args, **kwargs)
