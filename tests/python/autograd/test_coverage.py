"""No Tensor method silently drops autograd history.

Every public method is called on a float64 tensor that requires grad (with no argument, a
tensor, 1 or 0, whichever it accepts first); a floating result must require grad, unless the
method is listed below: torch's non-differentiable ops, and the ops whose derivative kiln does
not have yet (the list a new rule shrinks).
"""

import warnings

import pytest

import kiln

# Not differentiable in torch either: fresh tensors, samples, detached results, integer math.
NON_DIFFERENTIABLE = {
    "detach",
    "new",  # the legacy x.new(sizes or data): a fresh tensor
    "new_empty",
    "new_full",
    "new_ones",
    "new_tensor",
    "new_zeros",
    "bernoulli",
    "unique",
    "unique_consecutive",
    "floor_divide",
    "heaviside",  # a step function: torch has no derivative for it
    "histc",  # counts
    "histogram",
}
# Differentiable in torch, no derivative rule in kiln yet.
NOT_YET: set = set()  # every method that should differentiate does
SKIP = {"backward", "register_hook", "retain_grad"}  # the autograd API itself


def methods():
    for name in sorted(dir(kiln.Tensor)):
        if name.startswith("_") or name.endswith("_") or name in SKIP:
            continue
        if callable(getattr(kiln.Tensor, name, None)):
            yield name


def first_result(name):
    x = kiln.randn(3, 4, dtype=kiln.float64).requires_grad_()
    y = kiln.randn(3, 4, dtype=kiln.float64)
    v = kiln.randn(4, dtype=kiln.float64)
    fn = getattr(kiln.Tensor, name)
    # matrix forms, then vector ones (dot, outer) and matrix-vector ones (mv)
    for self, args in ((x, ()), (x, (y,)), (x, (1,)), (x, (0,)), (x, (v,)), (x[0], (v,)),
                       (x, (0, 1)), (x, (y > 0,))):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fn(self, *args)
        except Exception:  # noqa: BLE001 - this argument list does not fit the method
            continue
    return None


def test_no_method_silently_drops_history():
    lost = []
    for name in methods():
        r = first_result(name)
        results = r if isinstance(r, (tuple, list)) else (r,)
        floating = [t for t in results if isinstance(t, kiln.Tensor) and t.dtype.is_floating_point]
        if any(not t.requires_grad for t in floating):
            lost.append(name)
    unexpected = sorted(set(lost) - NON_DIFFERENTIABLE - NOT_YET)
    assert not unexpected, f"these methods drop autograd history: {unexpected}"
    now_differentiable = sorted(NOT_YET - set(lost))
    assert not now_differentiable, f"remove from NOT_YET: {now_differentiable}"


@pytest.mark.parametrize("name", sorted(NON_DIFFERENTIABLE - {"detach", "bernoulli"}))
def test_listed_ops_exist(name):
    assert hasattr(kiln.Tensor, name)


# kiln.* and kiln.nn.functional.* functions called on a 4-d float64 tensor that requires grad.
FUNCTIONS_NON_DIFFERENTIABLE = {
    # the legacy typed constructors: FloatTensor(data) is fresh data, as kiln.tensor
    "kiln.BFloat16Tensor",
    "kiln.DoubleTensor",
    "kiln.FloatTensor",
    "kiln.HalfTensor",
    "kiln.bernoulli",
    "kiln.detach",
    "kiln.empty_like",
    "kiln.full_like",
    "kiln.floor_divide",
    "kiln.histc",
    "kiln.histogram",
    "kiln.normal",
    "kiln.ones_like",
    "kiln.rand_like",
    "kiln.randint_like",
    "kiln.randn_like",
    "kiln.tensor",
    "kiln.unique",
    "kiln.unique_consecutive",
    "kiln.zeros_like",
}
FUNCTIONS_NOT_YET: set = set()
NOT_OPS = {
    "manual_seed",
    "seed",
    "set_num_threads",
    "compile",
    "export",
    "load",
    "save",
    "set_default_dtype",
    "set_printoptions",
    "use_deterministic_algorithms",
}


def test_no_function_silently_drops_history():
    import inspect

    import kiln.nn.functional as F

    x = kiln.randn(2, 3, 4, 4, dtype=kiln.float64).requires_grad_()
    lost = []
    for mod, prefix in ((kiln, "kiln."), (F, "F.")):
        for name in sorted(dir(mod)):
            fn = getattr(mod, name)
            if (
                name.startswith("_")
                or name.endswith("_")
                or name in NOT_OPS
                or not callable(fn)
                or inspect.isclass(fn)
                or inspect.ismodule(fn)
            ):
                continue
            r = None
            m, v = x[0, 0], x[0, 0, 0]  # a matrix and a vector (products: mv, dot, addmv)
            probes = ((x,), (x, x), (x, 1), (x, 2), (m, v), (v, v), ("ij->j", m),
                      (v[:4], m, v), (x[0], x[0], x[0]), (m, m, x[0, :, :, :4]), (m, 0, 1),
                      (m, m > 0), (m, m[:1]), (m[:1], m))
            for args in probes:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        r = fn(*args)
                    break
                except Exception:  # noqa: BLE001 - this argument list does not fit
                    continue
            results = r if isinstance(r, (tuple, list)) else (r,)
            floating = [
                t for t in results if isinstance(t, kiln.Tensor) and t.dtype.is_floating_point
            ]
            if any(not t.requires_grad for t in floating):
                lost.append(prefix + name)
    known = FUNCTIONS_NON_DIFFERENTIABLE | FUNCTIONS_NOT_YET
    assert not sorted(set(lost) - known), f"drop autograd history: {sorted(set(lost) - known)}"
    assert not sorted(FUNCTIONS_NOT_YET - set(lost)), "now differentiable: remove from NOT_YET"
