"""Samplers and reparameterization gradients that torch implements as ATen kernels
(_standard_gamma, _standard_gamma_grad, _dirichlet_grad, poisson, binomial), written
in vectorized kiln ops.

Rejection samplers keep a compacted list of still-pending elements and redraw only
those, so the cost is a handful of full-size passes. All arithmetic runs in float64
and is cast back, matching torch's use of a wider accumulator type on CPU.
"""

from __future__ import annotations

import math

import kiln

_MAX_REJECTION_ROUNDS = 10000


def _f64(t):
    return t.detach().to(kiln.float64)


def _rejection_fill(params, propose, fallback):
    """Per element, draw proposals until one is accepted.

    ``params`` are flat float64 tensors of equal length; ``propose(*params)`` returns
    (values, accepted). Elements with a non-finite parameter get ``fallback``.
    """
    n = params[0].numel()
    out = kiln.full((n,), fallback, dtype=kiln.float64)
    finite = kiln.ones(n, dtype=kiln.bool)
    for p in params:
        finite = finite & kiln.isfinite(p)
    idx = kiln.arange(n)[finite]
    params = [p[finite] for p in params]
    rounds = 0
    while idx.numel() > 0:
        rounds += 1
        if rounds > _MAX_REJECTION_ROUNDS:
            raise RuntimeError("rejection sampler did not converge")
        values, accepted = propose(*params)
        if bool(accepted.any()):
            out[idx[accepted]] = values[accepted]
        pending = ~accepted
        idx = idx[pending]
        params = [p[pending] for p in params]
    return out


def _marsaglia_tsang(d, c):
    x = kiln.randn(d.shape, dtype=kiln.float64)
    y = 1.0 + c * x
    positive = y > 0
    v = kiln.where(positive, y * y * y, kiln.ones_like(y))
    u = 1.0 - kiln.rand(d.shape, dtype=kiln.float64)
    xx = x * x
    squeeze = u < 1.0 - 0.0331 * xx * xx
    full = kiln.log(u) < 0.5 * xx + d * (1.0 - v + kiln.log(v))
    return d * v, positive & (squeeze | full)


def standard_gamma(concentration):
    """Gamma(concentration, 1) draws (Marsaglia & Tsang 2000), no gradient."""
    alpha = _f64(concentration).reshape(-1)
    small = alpha < 1.0
    # Boost alpha < 1: Gamma(a) = Gamma(a + 1) * U^(1/a), U in (0, 1].
    boost_u = 1.0 - kiln.rand(alpha.shape, dtype=kiln.float64)
    scale = kiln.where(small, boost_u.pow(1.0 / alpha), kiln.ones_like(alpha))
    alpha = kiln.where(small, alpha + 1.0, alpha)
    d = alpha - 1.0 / 3.0
    c = 1.0 / kiln.sqrt(9.0 * d)
    draws = _rejection_fill([d, c], _marsaglia_tsang, float("nan"))
    out = scale * draws
    out = kiln.where(_f64(concentration).reshape(-1) == 0, kiln.zeros_like(out), out)
    out = out.to(concentration.dtype).reshape(concentration.shape)
    return out.clamp(min=kiln.finfo(concentration.dtype).tiny)


def standard_gamma_grad(alpha, x):
    """d x / d alpha for x ~ Gamma(alpha, 1), holding the CDF fixed (torch's
    ``_standard_gamma_grad``: Taylor series for small x, Rice saddle point for
    large alpha, a fitted rational function otherwise)."""
    out_dtype = x.dtype
    alpha = _f64(alpha)
    x = _f64(x)
    alpha, x = kiln.broadcast_tensors(alpha, x)

    # Small x: series for the incomplete gamma function and its alpha-derivative.
    numer = kiln.ones_like(x)
    denom = alpha.clone()
    series1 = numer / denom
    series2 = numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / i)
        denom = denom + 1
        series1 = series1 + numer / denom
        series2 = series2 + numer / (denom * denom)
    pow_x_alpha = x.pow(alpha)
    gamma_pdf = x.pow(alpha - 1) * kiln.exp(-x)
    gamma_cdf = pow_x_alpha * series1
    gamma_cdf_alpha = (kiln.log(x) - kiln.digamma(alpha)) * gamma_cdf - pow_x_alpha * series2
    small_x = -gamma_cdf_alpha / gamma_pdf
    small_x = kiln.where(kiln.isnan(small_x), kiln.zeros_like(small_x), small_x)

    # Large alpha, x near alpha: expansion that avoids the 0/0 at x == alpha.
    numer_1 = 1 + 24 * alpha * (1 + 12 * alpha)
    numer_2 = (
        1440 * (alpha * alpha)
        + 6 * x * (53 - 120 * x)
        - 65 * x * x / alpha
        + alpha * (107 + 3600 * x)
    )
    near = numer_1 * numer_2 / (1244160 * (alpha * alpha) * (alpha * alpha))
    # Large alpha, x away from alpha.
    denom_r = kiln.sqrt(8 * alpha)
    term2 = denom_r / (alpha - x)
    base = (x - alpha - alpha * kiln.log(x / alpha)).clamp(min=0)
    term3 = base.pow(-1.5)
    term23 = kiln.where(x < alpha, term2 - term3, term2 + term3)
    term1 = kiln.log(x / alpha) * term23 - math.sqrt(2) * kiln.rsqrt(alpha) * (alpha + x) / (
        (alpha - x) * (alpha - x)
    )
    stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    far = -stirling * x * term1 / denom_r
    is_near = (0.9 * alpha <= x) & (x <= 1.1 * alpha)
    large_alpha = kiln.where(is_near, near, far)

    # Bivariate rational approximation in log(x / alpha) and log(alpha).
    coef_uv = (
        (0.16009398, -0.094634809, 0.025146376, -0.0030648343,
         1, 0.32668115, 0.10406089, 0.0014179084),
        (0.53487893, 0.1298071, 0.065735949, -0.0015649758,
         0.16639465, 0.020070113, -0.0035938915, -0.00058392623),
        (0.040121004, -0.0065914022, -0.0026286047, -0.0013441777,
         0.017050642, -0.0021309326, 0.00085092367, -1.5247877e-07),
    )  # fmt: skip
    u = kiln.log(x / alpha)
    v = kiln.log(alpha)
    coef_v = [coef_uv[0][i] + u * (coef_uv[1][i] + u * coef_uv[2][i]) for i in range(8)]
    p = coef_v[0] + v * (coef_v[1] + v * (coef_v[2] + v * coef_v[3]))
    q = coef_v[4] + v * (coef_v[5] + v * (coef_v[6] + v * coef_v[7]))
    rational = kiln.exp(p / q)

    result = kiln.where(x < 0.8, small_x, kiln.where(alpha > 8.0, large_alpha, rational))
    return result.to(out_dtype)


class _StandardGamma(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, concentration):
        x = standard_gamma(concentration)
        ctx.save_for_backward(concentration, x)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        concentration, x = ctx.saved_tensors
        return grad_output * standard_gamma_grad(concentration, x)


def rsample_standard_gamma(concentration):
    """Gamma(concentration, 1) draws with torch's implicit reparameterization gradient."""
    return _StandardGamma.apply(concentration)


def _beta_grad_alpha_small(x, alpha, beta):
    factor = kiln.digamma(alpha) - kiln.digamma(alpha + beta) - kiln.log(x)
    numer = kiln.ones_like(x)
    series = numer / alpha * (factor + 1 / alpha)
    for i in range(1, 11):
        numer = numer * ((i - beta) * x / i)
        denom = alpha + i
        series = series + numer / denom * (factor + 1 / denom)
    result = x * (1 - x).pow(-beta) * series
    return kiln.where(kiln.isnan(result), kiln.zeros_like(result), result)


def _beta_grad_beta_small(x, alpha, beta):
    factor = kiln.digamma(alpha + beta) - kiln.digamma(beta)
    numer = kiln.ones_like(x)
    betas = kiln.ones_like(x)
    dbetas = kiln.zeros_like(x)
    series = factor / alpha
    for i in range(1, 9):
        numer = numer * (-x / i)
        dbetas = dbetas * (beta - i) + betas
        betas = betas * (beta - i)
        series = series + numer / (alpha + i) * (dbetas + factor * betas)
    result = -(1 - x).pow(1 - beta) * series
    return kiln.where(kiln.isnan(result), kiln.zeros_like(result), result)


def _beta_grad_alpha_mid(x, alpha, beta):
    total = alpha + beta
    mean = alpha / total
    std = kiln.sqrt(alpha * beta / (total + 1)) / total
    b2 = beta * beta
    poly = 47 * x * b2 * b2 + alpha * (
        (43 + 20 * (16 + 27 * beta) * x) * b2 * beta
        + alpha * (
            3 * (59 + 180 * beta - 90 * x) * b2
            + alpha * (
                (453 + 1620 * beta * (1 - x) - 455 * x) * beta
                + alpha * (8 * (1 - x) * (135 * beta - 11))
            )
        )
    )
    prefactor_num = (1 + 12 * alpha) * (1 + 12 * beta) / (total * total)
    prefactor_den = 12960 * alpha * alpha * alpha * beta * beta * (1 + 12 * total)
    at_mean = prefactor_num / (1 - x) * poly / prefactor_den

    prefactor = -x / kiln.sqrt(2 * alpha * beta / total)
    stirling = (
        (1 + 1 / (12 * alpha) + 1 / (288 * alpha * alpha))
        * (1 + 1 / (12 * beta) + 1 / (288 * beta * beta))
        / (1 + 1 / (12 * total) + 1 / (288 * total * total))
    )
    term1_num = 2 * (alpha * alpha) * (x - 1) + alpha * beta * (x - 1) - x * b2
    axbx = alpha * (x - 1) + beta * x
    term1_den = kiln.sqrt(2 * alpha / beta) * total.pow(1.5) * axbx * axbx
    term1 = term1_num / term1_den
    term2 = 0.5 * kiln.log(alpha / (total * x))
    term3 = kiln.sqrt(8 * alpha * beta / total) / (beta * x + alpha * (x - 1))
    term4_base = beta * kiln.log(beta / (total * (1 - x))) + alpha * kiln.log(alpha / (total * x))
    term4 = term4_base.clamp(min=0).pow(-1.5)
    term1234 = term1 + term2 * (term3 + kiln.where(x < mean, term4, -term4))
    away = stirling * prefactor * term1234
    return kiln.where((mean - 0.1 * std <= x) & (x <= mean + 0.1 * std), at_mean, away)


_DIRICHLET_COEF = (
    (((1.003668233, -0.01061107488, -0.0657888334, 0.01201642863),
      (0.6336835991, -0.3557432599, 0.05486251648, -0.001465281033),
      (-0.03276231906, 0.004474107445, 0.002429354597, -0.0001557569013)),
     ((0.221950385, -0.3187676331, 0.01799915743, 0.01074823814),
      (-0.2951249643, 0.06219954479, 0.01535556598, 0.001550077057),
      (0.02155310298, 0.004170831599, 0.001292462449, 6.976601077e-05)),
     ((-0.05980841433, 0.008441916499, 0.01085618172, 0.002319392565),
      (0.02911413504, 0.01400243777, -0.002721828457, 0.000751041181),
      (0.005900514878, -0.001936558688, -9.495446725e-06, 5.385558597e-05))),
    (((1, -0.02924021934, -0.04438342661, 0.007285809825),
      (0.6357567472, -0.3473456711, 0.05454656494, -0.002407477521),
      (-0.03301322327, 0.004845219414, 0.00231480583, -0.0002307248149)),
     ((0.5925320577, -0.1757678135, 0.01505928619, 0.000564515273),
      (0.1014815858, -0.06589186703, 0.01272886114, -0.0007316646956),
      (-0.007258481865, 0.001096195486, 0.0003934994223, -4.12701925e-05)),
     ((0.06469649321, -0.0236701437, 0.002902096474, -5.896963079e-05),
      (0.001925008108, -0.002869809258, 0.0008000589141, -6.063713228e-05),
      (-0.0003477407336, 6.959756487e-05, 1.097287507e-05, -1.650964693e-06))),
)  # fmt: skip


def dirichlet_grad(x, concentration, total):
    """Scaled implicit-reparameterization gradient of a Beta(alpha, total - alpha)
    draw, elementwise (torch's ``_dirichlet_grad``)."""
    out_dtype = x.dtype
    x, alpha, total = kiln.broadcast_tensors(_f64(x), _f64(concentration), _f64(total))
    beta = total - alpha
    boundary = total * x * (1 - x)

    near_zero = _beta_grad_alpha_small(x, alpha, beta)
    near_one = -_beta_grad_beta_small(1 - x, beta, alpha)
    mid = _beta_grad_alpha_mid(x, alpha, beta)

    u = kiln.log(x)
    a = kiln.log(alpha) - u
    b = kiln.log(total) - a
    pow_u = (1.0, u, u * u)
    pow_a = (1.0, a, a * a)
    p = kiln.zeros_like(x)
    q = kiln.zeros_like(x)
    for i in range(3):
        for j in range(3):
            ua = pow_u[i] * pow_a[j]
            cp = _DIRICHLET_COEF[0][i][j]
            cq = _DIRICHLET_COEF[1][i][j]
            p = p + ua * (cp[0] + b * (cp[1] + b * (cp[2] + b * cp[3])))
            q = q + ua * (cq[0] + b * (cq[1] + b * (cq[2] + b * cq[3])))
    approx = x * (kiln.digamma(total) - kiln.digamma(alpha)) / beta
    rational = p / q * approx

    result = kiln.where(
        (x <= 0.5) & (boundary < 2.5),
        near_zero,
        kiln.where(
            (x >= 0.5) & (boundary < 0.75),
            near_one,
            kiln.where((alpha > 6) & (beta > 6), mid, rational),
        ),
    )
    return result.to(out_dtype)


class _Dirichlet(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, concentration):
        gammas = standard_gamma(concentration)
        x = gammas / gammas.sum(-1, keepdim=True)
        ctx.save_for_backward(x, concentration)
        return x

    @staticmethod
    def backward(ctx, grad_output):
        x, concentration = ctx.saved_tensors
        total = concentration.sum(-1, keepdim=True).expand_as(concentration)
        grad = dirichlet_grad(x, concentration, total)
        return grad * (grad_output - (x * grad_output).sum(-1, keepdim=True))


def rsample_dirichlet(concentration):
    """Dirichlet draws (normalized gammas) with torch's reparameterization gradient."""
    return _Dirichlet.apply(concentration)


def _poisson_multiplication(lam):
    """Count uniforms until their running product drops below exp(-lam); for lam < 10."""
    n = lam.numel()
    out = kiln.zeros(n, dtype=kiln.float64)
    idx = kiln.arange(n)
    enlam = kiln.exp(-lam)
    prod = kiln.ones(n, dtype=kiln.float64)
    while idx.numel() > 0:
        prod = prod * kiln.rand(idx.numel(), dtype=kiln.float64)
        more = prod > enlam
        out[idx[more]] = out[idx[more]] + 1
        idx, enlam, prod = idx[more], enlam[more], prod[more]
    return out


def _ptrs(lam):
    """Transformed rejection with squeeze (Hoermann 1993) for lam >= 10."""
    slam = kiln.sqrt(lam)
    loglam = kiln.log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    invalpha = 1.1239 + 1.1328 / (b - 3.4)
    vr = 0.9277 - 3.6224 / (b - 2)

    def propose(lam, loglam, a, b, invalpha, vr):
        u = kiln.rand(lam.shape, dtype=kiln.float64) - 0.5
        v = kiln.rand(lam.shape, dtype=kiln.float64)
        us = 0.5 - u.abs()
        k = kiln.floor((2 * a / us + b) * u + lam + 0.43)
        quick = (us >= 0.07) & (v <= vr)
        valid = (k >= 0) & ~((us < 0.013) & (v > us))
        log_ratio = kiln.log(v) + kiln.log(invalpha) - kiln.log(a / (us * us) + b)
        target = -lam + k * loglam - kiln.lgamma(k.clamp(min=0) + 1)
        return k, quick | (valid & (log_ratio <= target))

    return _rejection_fill([lam, loglam, a, b, invalpha, vr], propose, float("nan"))


def poisson(rate):
    """Poisson draws with the given rates (torch.poisson), as ``rate``'s dtype."""
    lam = _f64(rate).reshape(-1)
    out = kiln.zeros_like(lam)
    small = (lam > 0) & (lam < 10)
    large = lam >= 10
    if bool(small.any()):
        out[small] = _poisson_multiplication(lam[small])
    if bool(large.any()):
        out[large] = _ptrs(lam[large])
    out = kiln.where(kiln.isnan(lam), lam, out)
    return out.to(rate.dtype).reshape(rate.shape)


_STIRLING_TAIL = (
    0.0810614667953272,
    0.0413406959554092,
    0.0276779256849983,
    0.02079067210376509,
    0.0166446911898211,
    0.0138761288230707,
    0.0118967099458917,
    0.0104112652619720,
    0.00925546218271273,
    0.00833056343336287,
)


def _stirling_approx_tail(k):
    table = kiln.tensor(_STIRLING_TAIL, dtype=kiln.float64)
    kp1sq = (k + 1) * (k + 1)
    approx = (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)
    tabled = table[k.clamp(min=0, max=9).long()]
    return kiln.where(k < 10, tabled, approx)


def _btrs(count, prob):
    """Transformed rejection (Hoermann 1993) for count * prob >= 10, prob <= 0.5."""
    stddev = kiln.sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = kiln.floor((count + 1) * prob)

    def propose(count, a, b, c, v_r, r, alpha, m):
        u = kiln.rand(count.shape, dtype=kiln.float64) - 0.5
        v = kiln.rand(count.shape, dtype=kiln.float64)
        us = 0.5 - u.abs()
        k = kiln.floor((2 * a / us + b) * u + c)
        in_range = (k >= 0) & (k <= count)
        quick = (us >= 0.07) & (v <= v_r)
        kc = k.clamp(min=0)
        kc = kiln.minimum(kc, count)
        log_v = kiln.log(v * alpha / (a / (us * us) + b))
        upperbound = (
            (m + 0.5) * kiln.log((m + 1) / (r * (count - m + 1)))
            + (count + 1) * kiln.log((count - m + 1) / (count - kc + 1))
            + (kc + 0.5) * kiln.log(r * (count - kc + 1) / (kc + 1))
            + _stirling_approx_tail(m)
            + _stirling_approx_tail(count - m)
            - _stirling_approx_tail(kc)
            - _stirling_approx_tail(count - kc)
        )
        return k, in_range & (quick | (log_v <= upperbound))

    return _rejection_fill([count, a, b, c, v_r, r, alpha, m], propose, float("nan"))


def _binomial_inversion(count, prob):
    """Count geometric waiting times that fit in ``count`` trials; for count * prob < 10."""
    n = count.numel()
    out = kiln.zeros(n, dtype=kiln.float64)
    idx = kiln.arange(n)
    logprob = kiln.log1p(-prob)
    geom_sum = kiln.zeros(n, dtype=kiln.float64)
    while idx.numel() > 0:
        u = kiln.rand(idx.numel(), dtype=kiln.float64)
        geom_sum = geom_sum + kiln.ceil(kiln.log(u) / logprob)
        more = geom_sum <= count
        out[idx[more]] = out[idx[more]] + 1
        idx, count, logprob, geom_sum = idx[more], count[more], logprob[more], geom_sum[more]
    return out


def binomial(count, prob):
    """Binomial draws (torch.binomial) for broadcast-equal ``count`` and ``prob``."""
    count_f = _f64(count).reshape(-1)
    prob_f = _f64(prob).reshape(-1)
    flip = prob_f > 0.5
    p = kiln.where(flip, 1 - prob_f, prob_f)
    out = kiln.zeros_like(count_f)
    active = (count_f > 0) & (p > 0)
    use_btrs = active & (count_f * p >= 10)
    use_inv = active & (count_f * p < 10)
    if bool(use_btrs.any()):
        out[use_btrs] = _btrs(count_f[use_btrs], p[use_btrs])
    if bool(use_inv.any()):
        out[use_inv] = _binomial_inversion(count_f[use_inv], p[use_inv])
    out = kiln.where(flip & (count_f > 0), count_f - out, out)
    out = kiln.where(kiln.isnan(prob_f), prob_f, out)
    return out.to(prob.dtype).reshape(prob.shape)


def gammainc(a, x):
    """Regularized lower incomplete gamma P(a, x) (torch.special.gammainc), no gradient.

    Series expansion where x < a + 1, Lentz's continued fraction for Q = 1 - P elsewhere.
    """
    out_dtype = kiln.promote_types(a.dtype, x.dtype)
    a, x = kiln.broadcast_tensors(_f64(a), _f64(x))
    log_prefactor = a * kiln.log(x.clamp(min=1e-300)) - x - kiln.lgamma(a)
    eps = 1e-16
    tiny = 1e-300
    use_series = x < a + 1

    # Series: P = e^{-x} x^a / Gamma(a) * sum_n x^n / (a (a+1) ... (a+n)).
    ap = a.clone()
    term = 1.0 / a
    total = term.clone()
    for i in range(1, 100001):
        ap = ap + 1
        term = term * x / ap
        total = total + term
        if i % 16 == 0:
            done = (term.abs() <= total.abs() * eps) | ~use_series
            if bool(done.all()):
                break
    series = total * kiln.exp(log_prefactor)

    # Continued fraction for Q (modified Lentz).
    xs = kiln.where(use_series, a + 1, x)
    b = xs + 1 - a
    c = kiln.full_like(b, 1.0 / tiny)
    d = 1.0 / b
    h = d.clone()
    for i in range(1, 100001):
        an = -i * (i - a)
        b = b + 2
        d = an * d + b
        d = kiln.where(d.abs() < tiny, kiln.full_like(d, tiny), d)
        c = b + an / c
        c = kiln.where(c.abs() < tiny, kiln.full_like(c, tiny), c)
        d = 1.0 / d
        delta = d * c
        h = h * delta
        if i % 16 == 0:
            done = ((delta - 1).abs() <= eps) | use_series
            if bool(done.all()):
                break
    cont_frac = 1.0 - kiln.exp(log_prefactor) * h

    result = kiln.where(use_series, series, cont_frac)
    result = kiln.where(x <= 0, kiln.zeros_like(result), result)
    result = kiln.where(kiln.isinf(x) & (x > 0), kiln.ones_like(result), result)
    return result.to(out_dtype)


class _GammaIncLower(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, a, x):
        ctx.save_for_backward(a, x)
        return gammainc(a, x)

    @staticmethod
    def backward(ctx, grad_output):
        a, x = ctx.saved_tensors
        if ctx.needs_input_grad[0]:
            raise NotImplementedError(
                "the derivative of gammainc with respect to its first argument is not "
                "implemented (as in torch.special.gammainc)"
            )
        pdf = kiln.exp((a - 1) * kiln.log(x) - x - kiln.lgamma(a))
        return None, grad_output * pdf


def gammainc_differentiable(a, x):
    """``gammainc`` with a gradient in ``x`` only, like torch.special.gammainc."""
    a, x = kiln.broadcast_tensors(a, x)
    return _GammaIncLower.apply(a, x)
