"""gradcheck / gradgradcheck: derivatives checked against central finite differences.

As torch's slow mode: the full Jacobian of every (output, input) pair that requires grad is
built twice, once column by column from perturbed inputs and once row by row from backward
passes, and the two must agree within ``atol + rtol * |numerical|``. Use float64 inputs.
"""

from __future__ import annotations

from kiln import _C
from kiln._grad_mode import enable_grad, no_grad

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """A Jacobian mismatch found by gradcheck."""


def _tuple(x):
    return (x,) if isinstance(x, _C.Tensor) else tuple(x)


def _differentiable_outputs(func, inputs):
    """The outputs that require grad, and their positions among func's outputs."""
    outs = _tuple(func(*inputs))
    keep = [k for k, o in enumerate(outs) if isinstance(o, _C.Tensor) and o.requires_grad]
    return [outs[k] for k in keep], keep


def _unravel(j, shape):
    at = []
    for size in reversed(shape):
        at.append(j % size)
        j //= size
    return tuple(reversed(at))


def _numerical_jacobian(func, inputs, index, eps, keep):
    """d outputs[keep] / d inputs[index] by central differences: one column per input element."""
    import kiln

    x = inputs[index]

    def values():
        outs = _tuple(func(*inputs))
        return [outs[k].detach().clone() for k in keep]

    with no_grad():
        columns = []
        for j in range(x.numel()):
            at = _unravel(j, tuple(x.shape))  # element by element: x may be non-contiguous
            orig = x[at].item()
            x[at] = orig + eps
            plus = values()
            x[at] = orig - eps
            minus = values()
            x[at] = orig
            columns.append(
                [((p - m) / (2 * eps)).reshape(-1) for p, m in zip(plus, minus, strict=True)]
            )
    n_out = len(columns[0]) if columns else 0
    return [kiln.stack([c[k] for c in columns], 1) if columns else None for k in range(n_out)]


def _analytical_jacobian(outputs, inputs, index):
    import kiln

    x = inputs[index]
    rows_per_output = []
    for o in outputs:
        rows = []
        flat_o = o.reshape(-1)
        for k in range(flat_o.numel()):
            g = kiln.zeros_like(o).reshape(-1)
            g[k] = 1.0
            (d,) = _C._autograd.grad([o], [x], [g.reshape(o.shape)], True, False, True)
            rows.append(kiln.zeros(x.numel(), dtype=x.dtype) if d is None else d.reshape(-1))
        rows_per_output.append(kiln.stack(rows, 0) if rows else kiln.zeros(0, x.numel()))
    return rows_per_output


def gradcheck(
    func,
    inputs,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    raise_exception=True,
    nondet_tol=0.0,
    check_undefined_grad=True,
    check_grad_dtypes=False,
    check_batched_grad=False,
    check_batched_forward_grad=False,
    check_forward_ad=False,
    check_backward_ad=True,
    fast_mode=False,
    masked=None,
):
    """True when the analytical Jacobians of ``func`` at ``inputs`` match finite differences."""
    inputs = _tuple(inputs)
    outputs, keep = _differentiable_outputs(func, inputs)
    checked = [i for i, x in enumerate(inputs) if isinstance(x, _C.Tensor) and x.requires_grad]
    # Every backward first: the finite differences write into the inputs, which the recorded
    # graph saved.
    analytical_all = {i: _analytical_jacobian(outputs, inputs, i) for i in checked}
    for i in checked:
        x = inputs[i]
        if x.dtype != _C.dtype.float64:
            import warnings

            warnings.warn(
                f"gradcheck: input {i} is {x.dtype}, not float64; the check may fail from "
                "rounding alone",
                stacklevel=2,
            )
        analytical = analytical_all[i]
        numerical = _numerical_jacobian(func, inputs, i, eps, keep)
        for k, (a, n) in enumerate(zip(analytical, numerical, strict=False)):
            if n is None:
                continue
            bad = ((a - n).abs() > atol + rtol * n.abs()).any().item()
            if bad:
                if not raise_exception:
                    return False
                raise GradcheckError(
                    f"Jacobian mismatch for output {k} with respect to input {i},\n"
                    f"numerical:{n}\nanalytical:{a}\n"
                )
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps=1e-6,
    atol=1e-5,
    rtol=1e-3,
    gen_non_contig_grad_outputs=False,
    raise_exception=True,
    nondet_tol=0.0,
    check_undefined_grad=True,
    check_grad_dtypes=False,
    check_batched_grad=False,
    check_fwd_over_rev=False,
    check_rev_over_rev=True,
    fast_mode=False,
    masked=False,
):
    """gradcheck of the backward: second derivatives against finite differences of the first."""
    import kiln

    inputs = _tuple(inputs)
    outputs, _ = _differentiable_outputs(func, inputs)
    if grad_outputs is None:
        gen = kiln.Generator().manual_seed(0)
        grad_outputs = tuple(
            kiln.randn(o.shape, generator=gen, dtype=o.dtype).requires_grad_() for o in outputs
        )
    grad_outputs = _tuple(grad_outputs)
    n_in = len(inputs)

    def first_derivative(*args):
        ins, gos = args[:n_in], args[n_in:]
        with enable_grad():  # the finite differences call this under no_grad
            outs, _ = _differentiable_outputs(func, ins)
            diff = [x for x in ins if isinstance(x, _C.Tensor) and x.requires_grad]
            grads = _C._autograd.grad(outs, diff, list(gos), True, True, True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(
        first_derivative,
        inputs + grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
    )
