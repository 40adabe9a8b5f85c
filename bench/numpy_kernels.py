"""NumPy kernels in the NPBench style, written as plain NumPy (no kiln in them).

Each `Kernel` names a function, how to make its inputs at a size, and which inputs it writes
in place. bench/numpy_suite.py times them under NumPy, `kiln.compile`, `torch.compile` and
`numba.njit`; tests/python/numpy/test_numpy_kernels.py checks kiln's results against NumPy's.
"""

from __future__ import annotations

# ruff: noqa: B007, E741 - the kernels are kept as NPBench writes them
from dataclasses import dataclass, field

import numpy as np


# -- the kernels (unmodified NumPy code) ------------------------------------------------------
def softmax(x):
    tmp_max = np.max(x, axis=-1, keepdims=True)
    tmp_out = np.exp(x - tmp_max)
    tmp_sum = np.sum(tmp_out, axis=-1, keepdims=True)
    return tmp_out / tmp_sum


def mlp(x, w1, b1, w2, b2):
    h = np.maximum(x @ w1 + b1, 0.0)
    logits = h @ w2 + b2
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def arc_distance(theta_1, phi_1, theta_2, phi_2):
    temp = np.sin((theta_2 - theta_1) / 2) ** 2 + np.cos(theta_1) * np.cos(theta_2) * np.sin(
        (phi_2 - phi_1) / 2) ** 2
    distance_matrix = 2 * (np.arctan2(np.sqrt(temp), np.sqrt(1 - temp)))
    return distance_matrix


def nbody_step(pos, vel, mass, dt, softening):
    x = pos[:, 0:1]
    y = pos[:, 1:2]
    z = pos[:, 2:3]
    dx = x.T - x
    dy = y.T - y
    dz = z.T - z
    inv_r3 = (dx ** 2 + dy ** 2 + dz ** 2 + softening ** 2) ** (-1.5)
    ax = (dx * inv_r3) @ mass
    ay = (dy * inv_r3) @ mass
    az = (dz * inv_r3) @ mass
    acc = np.hstack((ax, ay, az))
    vel += acc * dt
    pos += vel * dt
    ke = 0.5 * np.sum(mass * vel ** 2)
    return ke


def mandelbrot(xmin, xmax, ymin, ymax, xn, yn, maxiter, horizon=2.0):
    X = np.linspace(xmin, xmax, xn)
    Y = np.linspace(ymin, ymax, yn)
    cr = X[np.newaxis, :]
    ci = Y[:, np.newaxis]
    zr = np.zeros((yn, xn))
    zi = np.zeros((yn, xn))
    N = np.zeros((yn, xn), dtype=np.int64)
    for n in range(maxiter):
        inside = zr * zr + zi * zi < horizon * horizon
        N[inside] = n
        zr, zi = (np.where(inside, zr * zr - zi * zi + cr, zr),
                  np.where(inside, 2.0 * zr * zi + ci, zi))
    return N


def row_norms(x):
    return np.sqrt(np.sum(x ** 2, axis=1)) / x.shape[1]


def atax(A, x):
    return (A @ x) @ A


def bicg(A, p, r):
    return r @ A, A @ p


def mvt(x1, x2, y_1, y_2, A):
    x1 += A @ y_1
    x2 += y_2 @ A


def gemm(alpha, beta, C, A, B):
    C[:] = alpha * A @ B + beta * C


def hdiff(in_field, out_field, coeff):
    I, J = out_field.shape[0], out_field.shape[1]
    lap_field = 4.0 * in_field[1:I + 3, 1:J + 3, :] - (
        in_field[2:I + 4, 1:J + 3, :] + in_field[0:I + 2, 1:J + 3, :] +
        in_field[1:I + 3, 2:J + 4, :] + in_field[1:I + 3, 0:J + 2, :])
    res = lap_field[1:, 1:J + 1, :] - lap_field[:-1, 1:J + 1, :]
    flx_field = np.where(
        (res * (in_field[2:I + 3, 2:J + 2, :] - in_field[1:I + 2, 2:J + 2, :])) > 0, 0, res)
    res = lap_field[1:I + 1, 1:, :] - lap_field[1:I + 1, :-1, :]
    fly_field = np.where(
        (res * (in_field[2:I + 2, 2:J + 3, :] - in_field[2:I + 2, 1:J + 2, :])) > 0, 0, res)
    out_field[:, :, :] = in_field[2:I + 2, 2:J + 2, :] - coeff[:, :, :] * (
        flx_field[1:, :, :] - flx_field[:-1, :, :] + fly_field[:, 1:, :] - fly_field[:, :-1, :])


def jacobi_1d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])


def jacobi_2d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] +
                               A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] +
                               B[:-2, 1:-1])


def heat_3d(TSTEPS, A, B):
    for t in range(1, TSTEPS):
        B[1:-1, 1:-1, 1:-1] = (
            0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1]) +
            0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1]) +
            0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, 0:-2]) +
            A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (
            0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1]) +
            0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1]) +
            0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, 0:-2]) +
            B[1:-1, 1:-1, 1:-1])


def jacobi_solve(b, R, D, tol, maxiter):
    x = np.zeros_like(b)
    for _ in range(maxiter):
        x_new = (b - R @ x) / D
        if np.abs(x_new - x).max() < tol:
            break
        x = x_new
    return x


def _jacobi_system(rng, s):
    n = 100 * s
    A = rng.random((n, n)) + np.eye(n) * (n * 0.6)  # diagonally dominant: ~90 iterations
    D = np.diag(A).copy()
    return (rng.random(n), A - np.diag(D), D, 1e-10, 1000)


def clip_compute(array_1, array_2, a, b, c):
    return np.clip(array_1, 2, 10) * a + array_2 * b + c


def lstsq_gd(X, y, lr, steps):
    w = np.zeros(X.shape[1])
    for _ in range(steps):
        grad = X.T @ (X @ w - y) / X.shape[0]
        w -= lr * grad
    return w, np.mean((X @ w - y) ** 2)


def sir_history(sus, inf, rec, beta, gamma, steps):
    n = sus + inf + rec
    hist = np.empty((steps, 3, sus.shape[0]))
    for t in range(steps):
        new_inf = beta * sus * inf / n
        new_rec = gamma * inf
        sus, inf, rec = sus - new_inf, inf + new_inf - new_rec, rec + new_rec
        hist[t, 0] = sus
        hist[t, 1] = inf
        hist[t, 2] = rec
    return hist


def logistic_gd(X, y, lr, steps):
    w = np.zeros(X.shape[1])
    b = 0.0
    for _ in range(steps):
        g = 1.0 / (1.0 + np.exp(-(X @ w + b))) - y
        w -= lr * (X.T @ g) / len(y)
        b -= lr * g.mean()
    return w, b


def maxpool2d(x):
    """NPBench's lenet/resnet pooling: the output filled slot by slot."""
    output = np.empty([x.shape[0], x.shape[1] // 2, x.shape[2] // 2, x.shape[3]], dtype=x.dtype)
    for i in range(x.shape[1] // 2):
        for j in range(x.shape[2] // 2):
            output[:, i, j, :] = np.max(x[:, 2 * i:2 * i + 2, 2 * j:2 * j + 2, :], axis=(1, 2))
    return output


def rescale_reverse(x):
    lo = x.min(axis=0)
    hi = x.max(axis=0)
    y = (x - lo) / (hi - lo)
    return y[::-1, :].astype(np.float32)


# -- inputs -----------------------------------------------------------------------------------
@dataclass
class Kernel:
    name: str
    fn: object
    make: object  # (rng, scale) -> tuple of arguments
    writes: tuple = ()  # positions of arguments the kernel updates in place
    numba_ok: bool = True  # numba.njit compiles it unmodified
    notes: str = ""
    sizes: dict = field(default_factory=dict)


def _f64(rng, *shape):
    return rng.random(shape)


def _mandel_args(rng, s):
    return (-2.25, 0.75, -1.25, 1.25, 64 * s, 64 * s, 20)


KERNELS = [
    Kernel("softmax", softmax, lambda r, s: (_f64(r, 64 * s, 256),)),
    Kernel("mlp", mlp, lambda r, s: (_f64(r, 32 * s, 128), _f64(r, 128, 256) - 0.5,
                                     _f64(r, 256), _f64(r, 256, 10) - 0.5, _f64(r, 10))),
    Kernel("arc_distance", arc_distance,
           lambda r, s: tuple(_f64(r, 50_000 * s) for _ in range(4))),
    Kernel("nbody_step", nbody_step,
           lambda r, s: (_f64(r, 64 * s, 3), _f64(r, 64 * s, 3), _f64(r, 64 * s, 1) + 1.0,
                         0.01, 0.1), writes=(0, 1)),
    Kernel("mandelbrot", mandelbrot, _mandel_args, numba_ok=False),
    Kernel("row_norms", row_norms, lambda r, s: (_f64(r, 256 * s, 512),)),
    Kernel("atax", atax, lambda r, s: (_f64(r, 200 * s, 240), _f64(r, 240))),
    Kernel("bicg", bicg, lambda r, s: (_f64(r, 240 * s, 200), _f64(r, 200), _f64(r, 240 * s))),
    Kernel("mvt", mvt, lambda r, s: (_f64(r, 200 * s), _f64(r, 200 * s), _f64(r, 200 * s),
                                     _f64(r, 200 * s), _f64(r, 200 * s, 200 * s)),
           writes=(0, 1)),
    Kernel("gemm", gemm, lambda r, s: (1.5, 1.2, _f64(r, 100 * s, 110), _f64(r, 100 * s, 120),
                                       _f64(r, 120, 110)), writes=(2,)),
    Kernel("hdiff", hdiff, lambda r, s: (_f64(r, 16 * s + 4, 16 * s + 4, 16),
                                         np.zeros((16 * s, 16 * s, 16)),
                                         _f64(r, 16 * s, 16 * s, 16)), writes=(1,)),
    Kernel("jacobi_1d", jacobi_1d, lambda r, s: (20, _f64(r, 2000 * s), _f64(r, 2000 * s)),
           writes=(1, 2)),
    Kernel("jacobi_2d", jacobi_2d, lambda r, s: (10, _f64(r, 60 * s, 60 * s),
                                                 _f64(r, 60 * s, 60 * s)), writes=(1, 2)),
    # jacobi_2d's stencil for 500 time steps: a loop node in kiln (one body, compiled once);
    # unrolled by torch.compile (a 2,000-op graph)
    Kernel("jacobi_2d_500", jacobi_2d, lambda r, s: (500, _f64(r, 32 * s, 32 * s),
                                                     _f64(r, 32 * s, 32 * s)), writes=(1, 2)),
    Kernel("heat_3d", heat_3d, lambda r, s: (5, _f64(r, 12 * s, 12 * s, 12 * s),
                                             _f64(r, 12 * s, 12 * s, 12 * s)), writes=(1, 2)),
    # an iterative solver that stops when it converges: a loop node with a break in kiln
    Kernel("jacobi_solve", jacobi_solve, _jacobi_system),
    Kernel("clip_compute", clip_compute,
           lambda r, s: (r.integers(0, 20, (300 * s, 300)), r.integers(0, 20, (300 * s, 300)),
                         4, 3, 9)),
    Kernel("maxpool2d", maxpool2d, lambda r, s: (_f64(r, 4, 4 * s + 8, 4 * s + 8, 16),)),
    Kernel("rescale_reverse", rescale_reverse, lambda r, s: (_f64(r, 256 * s, 128),)),
    Kernel("lstsq_gd", lstsq_gd, lambda r, s: (_f64(r, 100 * s, 32), _f64(r, 100 * s), 0.1, 100)),
    # an epidemic model writing one row of a preallocated history per step (a loop node whose
    # row writes go into the history in place)
    Kernel("sir_history", sir_history,
           lambda r, s: (np.full(64 * s, 990.0), 1 + 9 * _f64(r, 64 * s), np.zeros(64 * s),
                         0.3, 0.1, 200)),
    # an accumulator that starts as a Python float (b = 0.0): the first step is peeled off
    Kernel("logistic_gd", logistic_gd,
           lambda r, s: (_f64(r, 200 * s, 8) - 0.5, (_f64(r, 200 * s) > 0.5) * 1.0, 0.1, 100)),
]


def by_name(name: str) -> Kernel:
    return next(k for k in KERNELS if k.name == name)


def copy_args(args):
    return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in args)
