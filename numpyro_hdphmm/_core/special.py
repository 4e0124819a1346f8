"""Numerically stable special functions that ``jax.scipy.special`` does not provide.

``log_bessel_iv(order, x)``
    ``log I_nu(x)``, the logarithm of the modified Bessel function of the first kind, for real
    ``nu >= 0`` and ``x >= 0``, evaluated entirely in log space (finite for ``x`` up to ~1e4 in
    float32 and far beyond in float64, orders up to a few hundred and more).
``log_bessel_iv_ratio(order, x)``
    ``log(I_{nu+1}(x) / I_nu(x))`` without cancellation of the ``~x`` leading parts.
``vmf_log_normalizer(dim, kappa)``
    ``log C_d(kappa)``, the log normalizing constant of the von Mises-Fisher density on the
    unit sphere ``S^{d-1}`` (with respect to surface measure), including the ``kappa -> 0``
    limit ``log Gamma(d/2) - log 2 - (d/2) log pi`` (the uniform density).
``vmf_mean_resultant_length(dim, kappa)``
    ``A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa)``.

Algorithm (``log_bessel_iv``)
-----------------------------
With ``h = sqrt(nu^2 + x^2)``, two regions, selected per element with :func:`jax.numpy.where`
(both branches run on "safe" inputs so that values AND gradients are finite everywhere):

1. **Power series** (Abramowitz & Stegun 9.6.10) where ``h < 25`` or ``x^2/4 <= nu + 1``::

       I_nu(x) = (x/2)^nu sum_k (x^2/4)^k / (k! Gamma(nu + k + 1))

   The ``k``-th term relative to the first is at most ``(x^2/4)^k / k!^2`` (and at most
   ``1/k!`` when ``x^2/4 <= nu + 1``), so 48 terms exhaust double precision for
   ``x^2/4 < 157``.  The sum (positive terms, no cancellation) is accumulated relative to
   the leading term and enters through ``log1p``, so ``log I_0(x) ~ x^2/4`` keeps full
   *relative* accuracy as ``x -> 0``.

2. **Uniform asymptotic (Debye) expansion** elsewhere (``h >= 25``; A&S 9.7.7, DLMF 10.41.3)::

       I_nu(nu z) ~ exp(nu eta) / (sqrt(2 pi nu) (1 + z^2)^{1/4}) sum_k u_k(t) / nu^k,
       t = 1/sqrt(1 + z^2),   eta = sqrt(1 + z^2) + log(z / (1 + sqrt(1 + z^2))).

   Departures from the printed form: it is rewritten without overflow or division by
   ``nu`` as ``nu eta = h - nu asinh(nu / x)``, ``sqrt(nu) (1 + z^2)^{1/4} = sqrt(h)`` and
   ``u_k(t) / nu^k = v_k(t) / h^k`` with the polynomial ``v_k(t) = u_k(t) / t^k`` (``u_k``
   has no powers of ``t`` below ``t^k``).  In this form the expansion holds for every order
   including ``nu = 0``, where it reduces to Hankel's large-argument expansion (A&S 9.7.1);
   its truncation error after ``k = 14`` terms is below
   ``max_t |v_15(t)| / h^15 < 1e-15`` for ``h >= 25`` (``max_t |v_k(t)| = |v_k(0)|``, the
   Hankel coefficients).  The polynomials ``u_k`` (DLMF 10.41.9-10,
   ``u_{k+1} = t^2 (1 - t^2) u_k'/2 + (1/8) int_0^t (1 - 5 s^2) u_k ds``) are generated
   exactly with rational arithmetic at import time.

Accuracy (tests/core/test_special.py, against ``scipy.special.ive`` on orders
``nu = d/2 - 1, d = 2..101`` and ``x = logspace(-6, 4)``): the error of ``log I`` relative to
``max(1, |log I|)`` is ~1e-13 in float64 (the level of the reference itself); in float32 it
is ~1e-6 relative to ``max(1, |log I|, nu)``: for large orders ``log I`` crosses zero as the
difference of two terms of size ``~nu``, an unavoidable float32 cancellation.

The gradient with respect to ``x`` (and ``order``) is obtained by automatic differentiation
through the chosen branch.  At ``x = 0`` the value is ``0`` for ``nu = 0`` and ``-inf`` for
``nu > 0``; there the gradient is set to zero (the true derivative ``nu / x`` is infinite).
"""

from __future__ import annotations

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

__all__ = ["log_bessel_iv", "log_bessel_iv_ratio", "vmf_log_normalizer", "vmf_mean_resultant_length"]

#: the Debye expansion is used where sqrt(nu^2 + x^2) >= this (power series below it)
_DEBYE_MIN_H = 25.0
#: number of Debye correction terms v_1..v_K
_DEBYE_TERMS = 14
#: number of power-series terms after the leading one
_SERIES_TERMS = 48


def _debye_polynomials(num_terms: int):
    """Exact coefficients of the Debye polynomials ``u_0..u_num_terms`` (DLMF 10.41.10).

    Returns a list of float64 numpy arrays, ``coeffs[k][j]`` the coefficient of ``t^j`` in
    ``u_k(t)`` (ascending powers; ``u_k`` has degree ``3k`` and no powers below ``t^k``).
    """

    def deriv(p):
        return [i * c for i, c in enumerate(p)][1:] or [Fraction(0)]

    def mul(p, q):
        out = [Fraction(0)] * (len(p) + len(q) - 1)
        for i, a in enumerate(p):
            for j, b in enumerate(q):
                out[i + j] += a * b
        return out

    def integrate(p):
        return [Fraction(0)] + [c / (i + 1) for i, c in enumerate(p)]

    def add(p, q):
        n = max(len(p), len(q))
        return [(p[i] if i < len(p) else 0) + (q[i] if i < len(q) else 0) for i in range(n)]

    half_t2_1mt2 = [Fraction(0), Fraction(0), Fraction(1, 2), Fraction(0), Fraction(-1, 2)]
    one_m5t2 = [Fraction(1), Fraction(0), Fraction(-5)]
    polys = [[Fraction(1)]]
    for _ in range(num_terms):
        u = polys[-1]
        nxt = add(mul(half_t2_1mt2, deriv(u)), [c / 8 for c in integrate(mul(one_m5t2, u))])
        while len(nxt) > 1 and nxt[-1] == 0:
            nxt.pop()
        polys.append(nxt)
    return [np.array([float(c) for c in p], dtype=np.float64) for p in polys]


def _debye_v_matrix():
    """``(K, 2K + 1)`` matrix: row ``k - 1`` holds the coefficients of ``v_k(t) = u_k(t) / t^k``
    (degree ``2k``), highest power first, zero-padded on the left (for a joint Horner pass)."""
    rows = [c[k:][::-1] for k, c in enumerate(_debye_polynomials(_DEBYE_TERMS))][1:]
    width = 2 * _DEBYE_TERMS + 1
    return np.stack([np.concatenate([np.zeros(width - len(r)), r]) for r in rows])


_DEBYE_V = _debye_v_matrix()


def _debye_log_correction(t, s):
    """``log sum_{k=0}^{K} v_k(t) s^k`` with ``s = 1/h`` (DLMF 10.41.3 correction factor)."""
    coeffs = jnp.asarray(_DEBYE_V, dtype=t.dtype)  # (K, 2K+1)
    tt = t[..., None]
    v = jnp.zeros(t.shape + (coeffs.shape[0],), t.dtype)
    for j in range(coeffs.shape[1]):  # Horner in t, all v_k at once
        v = v * tt + coeffs[:, j]
    powers = jnp.cumprod(jnp.broadcast_to(s[..., None], v.shape), axis=-1)  # s^1..s^K
    return jnp.log1p(jnp.sum(v * powers, axis=-1))


def _debye_parts(nu, x):
    """Debye expansion of ``log I_nu(x)`` split as ``(h, rest)``, ``h = sqrt(nu^2 + x^2)``.

    ``log I_nu(x) = h + rest`` (A&S 9.7.7 in the rewritten form of the module docstring).
    Requires ``x > 0``; accurate to ~1e-15 for ``h >= 25``.
    """
    h = jnp.hypot(nu, x)
    rest = (
        -nu * jnp.arcsinh(nu / x)
        - 0.5 * jnp.log(2.0 * jnp.pi * h)
        + _debye_log_correction(nu / h, 1.0 / h)
    )
    return h, rest


def _series_log_sum(nu, x):
    """``log sum_k (x^2/4)^k Gamma(nu+1) / (k! Gamma(nu+k+1))`` (A&S 9.6.10 over its first term).

    Terms ``k = 1.._SERIES_TERMS`` as the cumulative product of their ratios
    ``(x^2/4) / (k (nu + k))``.
    """
    k = jnp.arange(1, _SERIES_TERMS + 1, dtype=x.dtype)
    ratios = (0.25 * x * x)[..., None] / (k * (nu[..., None] + k))
    return jnp.log1p(jnp.sum(jnp.cumprod(ratios, axis=-1), axis=-1))


def _broadcast_float(order, x):
    dtype = jnp.result_type(order, x, float)
    order = jnp.asarray(order, dtype)
    x = jnp.asarray(x, dtype)
    shape = jnp.broadcast_shapes(order.shape, x.shape)
    return jnp.broadcast_to(order, shape), jnp.broadcast_to(x, shape)


def _series_region(nu, x):
    return (jnp.hypot(nu, x) < _DEBYE_MIN_H) | (0.25 * x * x <= nu + 1.0)


def _safe_split(nu, x):
    """Per-element region mask and safe arguments for the two branches (``x >= 0``)."""
    small = _series_region(nu, x)
    x_series = jnp.where(small, x, 0.0)
    # a point inside the Debye region for the elements that use the series
    x_debye = jnp.where(small, _DEBYE_MIN_H + 2.0 * jnp.sqrt(nu + 1.0), x)
    return small, x_series, x_debye


def _log_iv_reduced(nu, x):
    """``g(nu, x) = log I_nu(x) - nu log(x/2)``, finite and smooth down to ``x = 0``.

    ``g(nu, 0) = -log Gamma(nu + 1)``.  Both branches run on safe inputs (module docstring).
    """
    small, x_series, x_debye = _safe_split(nu, x)
    # log Gamma(1) = log Gamma(2) = 0 exactly (XLA's float32 lgamma(1) is ~5e-7, which would
    # swamp log I_0(x) ~ x^2/4 at small x)
    lgam = jnp.where((nu == 0) | (nu == 1), 0.0, gammaln(nu + 1.0))
    g_series = _series_log_sum(nu, x_series) - lgam
    h, rest = _debye_parts(nu, x_debye)
    g_debye = h + rest - nu * jnp.log(0.5 * x_debye)
    return jnp.where(small, g_series, g_debye)


@jax.jit
def log_bessel_iv(order, x):
    """``log I_nu(x)``: log of the modified Bessel function of the first kind.

    Args:
        order: ``nu >= 0``, real (array, broadcasts against ``x``).
        x: argument ``>= 0`` (array).

    Returns:
        ``log I_nu(x)``, broadcast shape, floating dtype of the inputs.  ``log I_0(0) = 0``;
        ``log I_nu(0) = -inf`` for ``nu > 0``.  NaN for negative ``x`` or ``nu``.

    Power series (A&S 9.6.10) for ``sqrt(nu^2 + x^2) < 25`` or ``x^2/4 <= nu + 1``,
    otherwise the uniform asymptotic (Debye) expansion (A&S 9.7.7); see the module docstring.  Not in the printed formulas: the log-space/overflow-free rewriting.
    """
    nu, x = _broadcast_float(order, x)
    positive = x > 0
    x_safe = jnp.where(positive, x, 1.0)
    lead = jnp.where(nu > 0, nu * jnp.log(0.5 * x_safe), 0.0)
    value = _log_iv_reduced(nu, jnp.where(positive, x, 0.0)) + jnp.where(positive, lead, 0.0)
    at_zero = jnp.where(nu > 0, -jnp.inf, 0.0).astype(value.dtype)
    value = jnp.where(positive, value, at_zero)
    bad = (x < 0) | (nu < 0) | jnp.isnan(x) | jnp.isnan(nu)
    return jnp.where(bad, jnp.nan, value)


@jax.jit
def log_bessel_iv_ratio(order, x):
    """``log(I_{nu+1}(x) / I_nu(x))``, shape of the broadcast inputs (``-inf`` at ``x = 0``).

    Series region: ``log(x/2) - log(nu+1) + log S_{nu+1}(x) - log S_nu(x)`` with ``S`` the
    normalized series sums (A&S 9.6.10).  Debye region: the difference of two expansions at
    orders ``nu`` and ``nu + 1`` with the large parts differenced analytically,
    ``h_{nu+1} - h_nu = (2 nu + 1) / (h_{nu+1} + h_nu)``.
    """
    nu, x = _broadcast_float(order, x)
    positive = x > 0
    x_pos = jnp.where(positive, x, 1.0)
    small, x_series, x_debye = _safe_split(nu, x_pos)
    ratio_series = (
        jnp.log(0.5 * jnp.where(small, x_pos, 1.0))
        - jnp.log(nu + 1.0)
        + _series_log_sum(nu + 1.0, x_series)
        - _series_log_sum(nu, x_series)
    )
    h0, rest0 = _debye_parts(nu, x_debye)
    h1, rest1 = _debye_parts(nu + 1.0, x_debye)
    ratio_debye = (2.0 * nu + 1.0) / (h0 + h1) + (rest1 - rest0)
    value = jnp.where(small, ratio_series, ratio_debye)
    value = jnp.where(positive, value, -jnp.inf)
    bad = (x < 0) | (nu < 0) | jnp.isnan(x) | jnp.isnan(nu)
    return jnp.where(bad, jnp.nan, value)


@jax.jit
def vmf_mean_resultant_length(dim, kappa):
    """``A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa)``: ``E[x] = A_d(kappa) mu`` under vMF.

    Equals ``0`` at ``kappa = 0`` (the uniform distribution); shape of ``kappa``.
    (Mardia & Jupp 2000, eq. 9.3.9.)
    """
    kappa = jnp.asarray(kappa, jnp.result_type(kappa, float))
    return jnp.exp(log_bessel_iv_ratio(0.5 * dim - 1.0, kappa))


@jax.jit
def vmf_log_normalizer(dim, kappa):
    """``log C_d(kappa)`` of the von Mises-Fisher density ``C_d(kappa) exp(kappa mu^T x)``.

    ``C_d(kappa) = kappa^{d/2-1} / ((2 pi)^{d/2} I_{d/2-1}(kappa))`` (Mardia & Jupp 2000,
    eq. 9.3.4; vmf.md eq. 1), density with respect to the surface measure on ``S^{d-1}``.

    Args:
        dim: the ambient dimension ``d >= 2`` (int or array broadcasting against ``kappa``).
        kappa: concentration ``>= 0``, any shape.

    Returns:
        ``log C_d(kappa)``, shape of the broadcast inputs.  Departure from the printed formula:
        with ``nu = d/2 - 1`` and ``g = log I_nu(kappa) - nu log(kappa/2)`` (computed directly,
        finite at ``kappa = 0``) this is ``nu log 2 - (nu + 1) log(2 pi) - g``, so the
        ``kappa -> 0`` limit ``log Gamma(d/2) - log 2 - (d/2) log pi`` (uniform density) is
        exact and has finite gradient.
    """
    nu, kappa = _broadcast_float(0.5 * jnp.asarray(dim) - 1.0, kappa)
    g = _log_iv_reduced(nu, jnp.maximum(kappa, 0.0))
    value = nu * jnp.log(2.0) - (nu + 1.0) * jnp.log(2.0 * jnp.pi) - g
    return jnp.where((kappa < 0) | jnp.isnan(kappa), jnp.nan, value)
