"""kiln.linalg's LAPACK-backed solvers beside NumPy's and torch's, one run, medians, float64:
solve, inv, cholesky, eigh and slogdet at n = 50 and 200, a compiled NumPy least-squares fit
(np.linalg.solve of the normal equations) against NumPy, and SiLU's forward and backward (the
pointwise chain whose value is read twice) eager and compiled. Run with KILN_NUM_THREADS=1
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread:

    python bench/linalg.py
"""

from __future__ import annotations

import numpy as np
import torch
from training_idioms import median_ms  # (bench/ is the script's directory: on sys.path)

import kiln


def normal_equations(x, y):
    return np.linalg.solve(x.T @ x + 1e-3 * np.eye(x.shape[1]), x.T @ y)


def main() -> None:
    g = np.random.default_rng(0)
    print("| op | n | NumPy ms | kiln ms | torch ms |")
    print("|---|---|---|---|---|")
    for n in (50, 200):
        a = g.standard_normal((n, n)) + n * np.eye(n)
        b = g.standard_normal((n, 4))
        s = a @ a.T
        pairs = {"solve": ((a, b), np.linalg.solve, kiln.linalg.solve, torch.linalg.solve),
                 "inv": ((a,), np.linalg.inv, kiln.linalg.inv, torch.linalg.inv),
                 "cholesky": ((s,), np.linalg.cholesky, kiln.linalg.cholesky,
                              torch.linalg.cholesky),
                 "eigh": ((s,), np.linalg.eigh, kiln.linalg.eigh, torch.linalg.eigh),
                 "slogdet": ((a,), np.linalg.slogdet, kiln.linalg.slogdet, torch.linalg.slogdet)}
        for name, (args, np_fn, k_fn, t_fn) in pairs.items():
            ks = [kiln.tensor(v) for v in args]
            ts = [torch.tensor(v) for v in args]
            print(f"| {name} | {n} | {median_ms(lambda: np_fn(*args)):.3f} | "
                  f"{median_ms(lambda: k_fn(*ks)):.3f} | {median_ms(lambda: t_fn(*ts)):.3f} |")
    x, y = g.standard_normal((2000, 64)), g.standard_normal(2000)
    compiled = kiln.compile(normal_equations)
    print(f"\nleast squares through np.linalg.solve (2000 x 64): NumPy "
          f"{median_ms(lambda: normal_equations(x, y)):.3f} ms, kiln.compile "
          f"{median_ms(lambda: compiled(x, y)):.3f} ms")
    w = kiln.randn(32, 16, 12, 12).requires_grad_()

    def silu_step(fn):
        fn(w).backward()
        w.grad = None

    eager = lambda t: kiln.nn.functional.silu(t * 1.0).sum()  # noqa: E731
    compiled_silu = kiln.compile(eager)
    print(f"SiLU forward+backward [32, 16, 12, 12]: eager "
          f"{median_ms(lambda: silu_step(eager)):.3f} ms, compiled "
          f"{median_ms(lambda: silu_step(compiled_silu)):.3f} ms")


if __name__ == "__main__":
    main()
