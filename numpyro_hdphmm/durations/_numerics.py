r"""Log probabilities of counts that stay accurate in float32 for large counts (Loader 2000).

``gammaln(x + 1)`` of a count ``x = 10^5`` is about ``10^6``; in float32 its rounding error alone
is ~0.1 nats, and the textbook formulas ``x log(lam) - lam - gammaln(x + 1)`` cancel such terms
down to a result of a few nats.  Loader's saddle-point form (C. Loader, "Fast and Accurate
Computation of Binomial Probabilities", 2000; the algorithm behind R's ``dpois``/``dbinom``/
``dnbinom`` and scipy's) writes every term at the size of the result:

``stirling_error(z) = log Gamma(z + 1) - (z + 1/2) log z + z - log(2 pi) / 2``
    Stirling's series ``1/(12 z) - 1/(360 z^3) + 1/(1260 z^5) - 1/(1680 z^7)`` for ``z >= 15``
    (next term ``< 3e-14``), the definition below.
``deviance(x, m) = x log(x / m) + m - x``
    (Loader's ``bd0``) for ``|x - m| < 0.1 (x + m)`` by the series ``(x - m) v + 2 x sum_j
    v^(2j+1) / (2j + 1)``, ``v = (x - m) / (x + m)`` (no cancellation), else directly.
``poisson_log_pmf(x, lam) = -stirling_error(x) - deviance(x, lam) - log(2 pi x) / 2``
    (``x >= 1``; ``-lam`` at ``x = 0``).
``log_count_coefficient(x, r) = log [Gamma(x + r) / (Gamma(r) x!)]``
    the negative-binomial pmf at the saddle point ``p = x / (x + r)`` less its ``p``-terms
    ``x log p + r log(1 - p)``, which there are of size ``r log(1 + x / r)``, not ``x log x``.
``negative_binomial_log_pmf(x, r, p)``
    ``log [Gamma(x + r) / (Gamma(r) x!) p^x (1 - p)^r]`` as ``r / (x + r)`` times the binomial
    saddle-point form of ``C(x + r, r) (1 - p)^r p^x`` (Loader Sec. 2-3; R's ``dnbinom``).

Every function is elementwise, jittable and differentiable in the real arguments, with the
branches evaluated at safe inputs (no NaN gradients from the branch not taken).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.scipy.special import gammaln

__all__ = ["stirling_error", "deviance", "poisson_log_pmf", "negative_binomial_log_pmf", "log_count_coefficient",
           "integer_count_coefficients"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SERIES_FROM = 15.0
_DEVIANCE_TERMS = 8


def stirling_error(z):
    """``log Gamma(z + 1) - (z + 1/2) log z + z - log(2 pi)/2`` for ``z > 0`` (module docstring)."""
    z = jnp.asarray(z)
    big = jnp.maximum(z, _SERIES_FROM)
    inv = 1.0 / big
    inv2 = inv * inv
    series = inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)))
    small = jnp.minimum(z, _SERIES_FROM)
    direct = gammaln(small + 1.0) - (small + 0.5) * jnp.log(small) + small - _HALF_LOG_2PI
    return jnp.where(z >= _SERIES_FROM, series, direct)


def deviance(x, m):
    """``x log(x / m) + m - x`` for ``x > 0``, ``m > 0`` (Loader's ``bd0``; module docstring)."""
    x, m = jnp.asarray(x), jnp.asarray(m)
    dtype = jnp.result_type(x, m)
    near = jnp.abs(x - m) < 0.1 * (x + m)
    # series, at inputs where it converges (the other branch's inputs replaced by x itself)
    ms = jnp.where(near, m, x)
    v = (x - ms) / (x + ms)
    v2 = v * v
    term = 2.0 * x * v
    total = (x - ms) * v
    for j in range(1, _DEVIANCE_TERMS + 1):
        term = term * v2
        total = total + term / (2 * j + 1)
    # direct: log(x / m) from the ratio (one rounding), unless the ratio would overflow or underflow
    info = jnp.finfo(dtype)
    finite_ratio = (m * info.max > x * 4.0) & (x * info.max > m * 4.0)
    md = jnp.where(near | ~finite_ratio, x, m)
    log_ratio = jnp.where(finite_ratio, jnp.log(x / md), jnp.log(x) - jnp.log(jnp.where(near, x, m)))
    direct = x * log_ratio + jnp.where(near, x, m) - x
    return jnp.where(near, total, direct)


def poisson_log_pmf(x, lam):
    """``log Poisson(x | lam)`` for integers ``x >= 0`` (float array), ``lam > 0``."""
    x, lam = jnp.asarray(x), jnp.asarray(lam)
    xs = jnp.maximum(x, 1.0)
    positive = -stirling_error(xs) - deviance(xs, lam) - 0.5 * jnp.log(xs) - _HALF_LOG_2PI
    return jnp.where(x >= 1.0, positive, -lam)


def _negative_binomial_saddle(x, r, p, q):
    """The ``x >= 1`` branch of :func:`negative_binomial_log_pmf` with ``q = 1 - p`` given (so that a
    caller who knows ``q`` more accurately than ``1 - p`` can pass it)."""
    n = x + r
    return (
        jnp.log(r / n)
        + stirling_error(n) - stirling_error(r) - stirling_error(x)
        - deviance(r, n * q) - deviance(x, n * p)
        + 0.5 * (jnp.log(n) - jnp.log(r) - jnp.log(x)) - _HALF_LOG_2PI
    )


def negative_binomial_log_pmf(x, r, p):
    """``log [Gamma(x + r) / (Gamma(r) x!) p^x (1 - p)^r]`` for integers ``x >= 0`` (float array),
    real ``r > 0`` and ``0 < p < 1``: the number ``x`` of successes (probability ``p``) before the
    ``r``-th failure.  ``r log(1 - p)`` by ``log1p``."""
    x, r, p = jnp.asarray(x), jnp.asarray(r), jnp.asarray(p)
    xs = jnp.maximum(x, 1.0)
    return jnp.where(x >= 1.0, _negative_binomial_saddle(xs, r, p, 1.0 - p), r * jnp.log1p(-p))


def log_count_coefficient(x, r):
    """``log Gamma(x + r) - log Gamma(r) - log x!`` for integers ``x >= 0`` (float array) and real
    ``r > 0``, accurate in float32 for large ``x`` (module docstring); 0 at ``x = 0``."""
    x, r = jnp.asarray(x), jnp.asarray(r)
    xs = jnp.maximum(x, 1.0)
    p, q = xs / (xs + r), r / (xs + r)  # q directly: 1 - p rounds to 0 for x >> r
    # x log p = -x log1p(r / x) and r log q = -r log1p(x / r): exact logs of the ratios (log p of a
    # rounded p near 1 would be off by x eps)
    value = _negative_binomial_saddle(xs, r, p, q) + xs * jnp.log1p(r / xs) + r * jnp.log1p(xs / r)
    return jnp.where(x >= 1.0, value, 0.0)


def integer_count_coefficients(x, r_values):
    """``log Gamma(x + r) - log Gamma(r) - log x! = log C(x + r - 1, x)`` for integers ``x >= 0``
    (float array ``(M,)``) and each integer ``r`` of ``r_values`` (static): ``(M, len(r_values))``.

    ``log C(x + r - 1, x) = sum_{i=1}^{r-1} log(1 + x / i)``: one ``log1p`` per ``(x, i)`` and a
    cumulative sum over ``i < max(r_values)``, several times cheaper than :func:`log_count_coefficient`
    at every candidate (the relative rounding error grows like ``r eps``, immaterial for the
    ``r <= 10s`` of a finite prior)."""
    x = jnp.asarray(x)
    top = max(r_values)
    i = jnp.arange(1, top, dtype=x.dtype)
    terms = jnp.log1p(x[:, None] / i[None, :])  # (M, top - 1)
    cum = jnp.concatenate([jnp.zeros_like(x)[:, None], jnp.cumsum(terms, axis=-1)], -1)  # column r - 1: r
    return cum[:, jnp.asarray(r_values) - 1]
