r"""Random draws used by every sampler, written once.

``categorical(weights, u)``
    inverse-CDF draw of an index from unnormalized weights, given a uniform ``u`` in ``(0, 1]``;
    a zero-weight index is never drawn.
``uniform_open(key, shape, dtype)``
    uniforms on ``(0, 1]`` (what :func:`categorical` takes).
``log_gamma(key, a)``
    ``log G`` with ``G ~ Gamma(a, 1)``, finite for tiny ``a``.
``gamma(key, a, rate)``, ``beta(key, a, b)``, ``dirichlet(key, concentration)``
    built on :func:`log_gamma`.
``log_stick_remainder(key, gamma, shape)``
    ``log(1 - v)`` for a stick-breaking proportion ``v ~ Beta(1, gamma)``.

All functions are pure, jittable and vmappable.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from numpyro_hdphmm._core.reduce import block_sum, pad_last, padded_size

__all__ = ["categorical", "uniform_open", "log_gamma", "gamma", "beta", "dirichlet", "log_stick_remainder"]


def _upper(n: int, inclusive: bool):
    """``(n, n)`` constant ``1[i <= j]`` (``inclusive``) or ``1[i < j]``."""
    return np.triu(np.ones((n, n), bool), 0 if inclusive else 1)


def categorical(weights, u):
    """Index drawn with probabilities proportional to ``weights (K,) >= 0``.

    ``u`` uniform on ``(0, 1]`` (:func:`uniform_open`); the draw is ``#{k : cs_k < u cs_{K-1}}``
    with ``cs`` the cumulative sums (inverse CDF).  A zero-weight entry is never drawn: its
    cumulative sum equals the previous one bitwise, and ``u cs_{K-1} <= cs_{K-1}``.  For more than
    16 weights the cumulative sums are two-level (within blocks of 8, plus the earlier blocks'
    totals, each taken in index order with masked sums rather than scans), which XLA:CPU runs
    2-4x faster inside loops than ``jnp.cumsum``.  Returns an int32 scalar in ``[0, K)``.
    """
    size = weights.shape[-1]
    if size <= 16:
        cs = jnp.cumsum(weights)
    else:
        padded = pad_last(weights, padded_size(size))
        n = padded.shape[-1]
        blocks = padded.reshape(n // 8, 8)
        within = jnp.sum(jnp.where(_upper(8, True)[None], blocks[:, :, None], 0.0), 1)  # (n/8, 8)
        before = jnp.sum(jnp.where(_upper(n // 8, False), within[:, -1][:, None], 0.0), 0)  # (n/8,)
        cs = (before[:, None] + within).reshape(n)
    return jnp.minimum(block_sum((cs < u * cs[-1]).astype(jnp.int32)), size - 1).astype(jnp.int32)


def uniform_open(rng_key, shape=(), dtype=None):
    """Uniform draws on ``(0, 1]`` (``1 - U`` with ``U`` uniform on ``[0, 1)``)."""
    dtype = dtype or jnp.result_type(float)
    return 1.0 - random.uniform(rng_key, shape, dtype)


@jax.jit
def log_gamma(rng_key, a):
    r"""``log G`` with ``G ~ Gamma(a, 1)`` elementwise, ``a > 0`` of any shape.

    Marsaglia & Tsang (2000), "A simple method for generating gamma variables", ACM TOMS 26(3):
    with ``d = a - 1/3``, ``c = 1/sqrt(9 d)``, ``x ~ N(0, 1)``, ``v = (1 + c x)^3``, accept ``d v``
    when ``v > 0`` and ``log U < x^2/2 + d - d v + d log v``; for ``a < 1`` the boost
    ``G = G' U^{1/a}``, ``G' ~ Gamma(a + 1)`` (their Sec. 6), applied in log space so that tiny
    ``a`` (``1e-30``) gives finite logs.  Exact.  A non-finite or non-positive ``a`` gives NaN
    (never an endless rejection loop).  The rejection rounds run over the whole array
    at once (each round redraws every still-rejected entry; acceptance >= 95% per entry), which
    on CPU is several times faster than :func:`jax.random.loggamma`'s per-element loops.  Jitted,
    so that eager calls (a model's prior draws while it is traced) reuse one compiled program per
    shape.
    """
    a = jnp.asarray(a)
    dtype = a.dtype if jnp.issubdtype(a.dtype, jnp.floating) else jnp.result_type(float)
    a = a.astype(dtype)
    tiny = jnp.finfo(dtype).tiny
    k_boost, k_loop = random.split(rng_key)
    boost = a < 1.0
    a1 = jnp.where(boost, a + 1.0, a)
    d = a1 - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)

    def cond(carry):
        return ~jnp.all(carry[1])

    def body(carry):
        value, done, i = carry
        k_n, k_u = random.split(random.fold_in(k_loop, i))
        x = random.normal(k_n, a.shape, dtype)
        log_u = jnp.log(random.uniform(k_u, a.shape, dtype, minval=tiny))
        v = (1.0 + c * x) ** 3
        log_v = jnp.log(jnp.where(v > 0, v, 1.0))
        accept = (v > 0) & (log_u < 0.5 * x * x + d - d * v + d * log_v)
        value = jnp.where(done | ~accept, value, jnp.log(d) + log_v)
        return value, done | accept, i + 1

    # a non-finite or non-positive shape has no draw: NaN, and no rejection round waits for it
    bad = ~(jnp.isfinite(a) & (a > 0))
    value, _, _ = lax.while_loop(cond, body, (jnp.full(a.shape, jnp.nan, dtype), bad, 0))
    log_u = jnp.log(random.uniform(k_boost, a.shape, dtype, minval=tiny))
    return jnp.where(boost, value + log_u / jnp.where(boost, a, 1.0), value)


def gamma(rng_key, a, rate=1.0):
    """``G ~ Gamma(a, rate)`` (shape ``a``, rate ``rate``), elementwise over the broadcast shape."""
    a, rate = jnp.broadcast_arrays(jnp.asarray(a, jnp.result_type(a, rate, float)), jnp.asarray(rate, jnp.result_type(a, rate, float)))
    return jnp.exp(log_gamma(rng_key, a)) / rate


def beta(rng_key, a, b):
    """``B ~ Beta(a, b)`` elementwise as ``G_a / (G_a + G_b)`` from :func:`log_gamma` (finite in
    ``(0, 1)`` up to underflow for tiny ``a`` or ``b``)."""
    dtype = jnp.result_type(a, b, float)
    a, b = jnp.broadcast_arrays(jnp.asarray(a, dtype), jnp.asarray(b, dtype))
    log_g = log_gamma(rng_key, jnp.stack([a, b]))
    return jnp.exp(log_g[0] - jnp.logaddexp(log_g[0], log_g[1]))


@functools.partial(jax.jit, static_argnames="interior")
def dirichlet(rng_key, concentration, interior: bool = False):
    """Dirichlet draws along the last axis from :func:`log_gamma`.

    An entry with concentration exactly 0 is a point mass at 0 (e.g. a slot holding no state);
    tiny concentrations give (possibly underflowed) zeros, never NaN.  The weights are normalized
    after exponentiation (``w / sum(w)``, ``w = exp(log_g - max log_g)``), so that they sum to one
    to rounding (``exp(log_g - logsumexp(log_g))`` is off by up to ~2e-6 in float32, outside
    NumPyro's simplex tolerance of 1e-6 when validation is enabled).

    ``interior=True`` (every concentration positive): entries that underflowed are raised to
    ``finfo.tiny``, so that the draw lies inside the simplex, where the Dirichlet density is
    finite (at an exact 0 under a concentration below 1 it is ``+inf``).
    """
    concentration = jnp.asarray(concentration)
    positive = concentration > 0
    log_g = jnp.where(positive, log_gamma(rng_key, jnp.where(positive, concentration, 1.0)), -jnp.inf)
    w = jnp.exp(log_g - jnp.max(log_g, -1, keepdims=True))
    w = w / jnp.sum(w, -1, keepdims=True)
    return jnp.maximum(w, jnp.finfo(w.dtype).tiny) if interior else w


def log_stick_remainder(rng_key, concentration, shape=()):
    """``log(1 - v)`` for stick-breaking proportions ``v ~ Beta(1, concentration)`` (the step of
    ``GEM(c)``, Sethuraman 1994), by inversion: ``1 - v = U^{1/c}`` with ``U`` uniform on
    ``[tiny, 1)``, so ``0 < v`` always (a broken-off stick is never empty).  ``shape``: the draws'
    shape (``concentration`` broadcasts against it)."""
    dtype = jnp.result_type(concentration, float)
    u = random.uniform(rng_key, shape, dtype, minval=jnp.finfo(dtype).tiny)
    return jnp.log(u) / concentration
