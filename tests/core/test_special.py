"""Stable special functions: log I_nu(x), its ratio, and the vMF log normalizer.

Oracles: ``scipy.special.ive`` (``log I_nu(x) = log ive(nu, x) + x``), the leading terms of
the power series where ``ive`` underflows, the ``d = 3`` closed form
``C_3(k) = k / (4 pi sinh k)``, ``scipy.stats.vonmises_fisher``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special as sps
from scipy import stats

from numpyro_hdphmm._core.special import (
    log_bessel_iv,
    log_bessel_iv_ratio,
    vmf_log_normalizer,
    vmf_mean_resultant_length,
)

NUS = np.arange(2, 102) / 2.0 - 1.0  # nu = d/2 - 1, d = 2..101
XS = np.logspace(-6, 4, 241)


def reference_log_iv(nu, x):
    """log I_nu(x) from scipy's ive; where ive underflows (tiny x relative to nu) the power
    series A&S 9.6.10 summed term by term in log space with scipy's logsumexp (200 terms)."""
    with np.errstate(all="ignore"):
        v = sps.ive(nu, x)
        ref = np.log(v) + x
    under = v < 1e-290
    k = np.arange(200.0)
    n, xx = nu[under][:, None], x[under][:, None]
    terms = (n + 2 * k) * np.log(xx / 2.0) - sps.gammaln(k + 1.0) - sps.gammaln(n + k + 1.0)
    ref[under] = sps.logsumexp(terms, axis=1)
    return ref, under


@pytest.fixture(scope="module")
def grid():
    N, X = np.meshgrid(NUS, XS, indexing="ij")
    ref, under = reference_log_iv(N, X)
    assert np.all(np.isfinite(ref))
    return N, X, ref, under


def _err(got, ref, scale):
    return np.max(np.abs(got - ref) / scale)


def test_log_bessel_iv_float64_grid(grid):
    N, X, ref, _ = grid
    got = np.asarray(jax.jit(log_bessel_iv)(jnp.asarray(N), jnp.asarray(X)))
    assert got.dtype == np.float64
    assert np.all(np.isfinite(got))
    err = _err(got, ref, np.maximum(1.0, np.abs(ref)))
    # achieved ~6e-14 (the level of scipy's own rounding)
    assert err < 1e-11, err


def test_log_bessel_iv_float32_grid(grid):
    N, X, ref, _ = grid
    with jax.enable_x64(False):
        got = np.asarray(jax.jit(log_bessel_iv)(jnp.asarray(N, jnp.float32), jnp.asarray(X, jnp.float32)))
    assert got.dtype == np.float32
    assert np.all(np.isfinite(got))
    got = got.astype(np.float64)
    # log I is the difference of terms of size ~nu and ~x: float32-level relative to those
    err = _err(got, ref, np.maximum.reduce([np.ones_like(ref), np.abs(ref), N, X]))
    assert err < 5e-6, err  # achieved ~6e-7
    small = N <= 2
    assert _err(got[small], ref[small], np.maximum(1.0, np.abs(ref[small]))) < 5e-6


def test_log_bessel_iv_large_orders():
    nu = np.array([60.0, 75.5, 99.0, 100.0, 150.0])[:, None]
    x = np.logspace(-6, 4, 81)[None, :]
    ref, _ = reference_log_iv(*np.broadcast_arrays(nu, x))
    got = np.asarray(log_bessel_iv(jnp.asarray(nu), jnp.asarray(x)))
    assert _err(got, ref, np.maximum(1.0, np.abs(ref))) < 1e-11


def test_log_bessel_iv_small_x_relative_accuracy():
    # log I_0(x) = x^2/4 - x^4/64 + ... must keep relative accuracy as x -> 0
    x = np.logspace(-6, -1, 11)
    exact = np.log1p(x**2 / 4 + x**4 / 64 + x**6 / 2304)
    got = np.asarray(log_bessel_iv(0.0, jnp.asarray(x)))
    np.testing.assert_allclose(got, exact, rtol=1e-10)
    with jax.enable_x64(False):
        got32 = np.asarray(log_bessel_iv(0.0, jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got32, exact, rtol=1e-5)


def test_log_bessel_iv_at_zero_and_invalid():
    got = np.asarray(log_bessel_iv(jnp.array([0.0, 0.5, 3.0]), 0.0))
    assert got[0] == 0.0 and np.all(got[1:] == -np.inf)
    assert np.isnan(log_bessel_iv(1.0, -1.0)) and np.isnan(log_bessel_iv(-1.0, 1.0))
    # broadcasting
    assert log_bessel_iv(jnp.zeros((3, 1)), jnp.ones(4)).shape == (3, 4)


def test_log_bessel_iv_gradient(grid):
    N, X, _, under = grid
    n, x = jnp.asarray(N.ravel()), jnp.asarray(X.ravel())
    g = np.asarray(jax.jit(jax.vmap(jax.grad(log_bessel_iv, argnums=1)))(n, x))
    assert np.all(np.isfinite(g))
    # d/dx log I_nu(x) = I_{nu+1}/I_nu + nu/x
    with np.errstate(all="ignore"):
        ratio = sps.ive(N + 1, X) / sps.ive(N, X)
    ok = (~under & (sps.ive(N + 1, X) > 1e-290)).ravel()
    ref = (ratio + N / X).ravel()
    assert np.max(np.abs(g[ok] - ref[ok]) / np.abs(ref[ok])) < 1e-10
    with jax.enable_x64(False):
        g32 = jax.jit(jax.vmap(jax.grad(log_bessel_iv, argnums=1)))(n.astype(jnp.float32), x.astype(jnp.float32))
    assert np.all(np.isfinite(np.asarray(g32)))
    # finite gradient at x = 0 for order 0 (true value 0)
    assert float(jax.grad(log_bessel_iv, argnums=1)(0.0, 0.0)) == 0.0


def test_log_bessel_iv_ratio(grid):
    N, X, _, under = grid
    with np.errstate(all="ignore"):
        ratio = sps.ive(N + 1, X) / sps.ive(N, X)
    ok = ~under & (sps.ive(N + 1, X) > 1e-290)
    got = np.exp(np.asarray(log_bessel_iv_ratio(jnp.asarray(N), jnp.asarray(X))))
    assert np.max(np.abs(got[ok] - ratio[ok]) / ratio[ok]) < 1e-11
    # A_d(kappa) = I_{d/2}/I_{d/2-1}; d = 3: coth(k) - 1/k
    k = np.array([1e-3, 0.5, 2.0, 30.0, 1e3])
    a3 = 1 / np.tanh(k) - 1 / k
    np.testing.assert_allclose(np.asarray(vmf_mean_resultant_length(3, jnp.asarray(k))), a3, rtol=1e-9)
    assert float(vmf_mean_resultant_length(3, 0.0)) == 0.0


KAPPAS = np.concatenate([[0.0], np.logspace(-6, 4, 41)])


def log_c3(k):
    """log(k / (4 pi sinh k)), overflow-free."""
    with np.errstate(divide="ignore"):
        return np.where(
            k > 0,
            np.log(np.where(k > 0, k, 1.0)) - np.log(2 * np.pi) - k - np.log1p(-np.exp(-2 * np.where(k > 0, k, 1.0))),
            -np.log(4 * np.pi),
        )


def test_vmf_log_normalizer_d3_closed_form():
    k = KAPPAS
    ref = log_c3(k)
    ref[1:4] = -np.log(4 * np.pi) - k[1:4] ** 2 / 6  # log(k/sinh k) ~ -k^2/6 for tiny k
    got = np.asarray(vmf_log_normalizer(3, jnp.asarray(k)))
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    with jax.enable_x64(False):
        got32 = np.asarray(vmf_log_normalizer(3, jnp.asarray(k, jnp.float32)))
    assert np.all(np.isfinite(got32))
    np.testing.assert_allclose(got32, ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("d", [2, 3, 5, 10, 50, 100, 101])
def test_vmf_log_normalizer_small_kappa_limit(d):
    limit = sps.gammaln(d / 2) - np.log(2) - d / 2 * np.log(np.pi)  # -log |S^{d-1}|
    assert float(vmf_log_normalizer(d, 0.0)) == pytest.approx(limit, abs=1e-13)
    # log C_d(k) = limit - k^2 / (2d) + O(k^4)
    k = np.array([1e-8, 1e-6, 1e-4])
    np.testing.assert_allclose(np.asarray(vmf_log_normalizer(d, jnp.asarray(k))), limit - k**2 / (2 * d), rtol=0, atol=1e-13)
    g = jax.grad(lambda t: vmf_log_normalizer(d, t))(0.0)
    assert float(g) == 0.0


@pytest.mark.parametrize("d", [2, 3, 5, 10, 50, 100])
def test_vmf_log_normalizer_vs_scipy(d):
    mu = np.zeros(d)
    mu[0] = 1.0
    k = np.logspace(-3, 4, 15)
    # scipy.stats.vonmises_fisher.logpdf(mu) = log C_d(k) + k
    ref = np.array([stats.vonmises_fisher(mu, kk).logpdf(mu) - kk for kk in k])
    got = np.asarray(vmf_log_normalizer(d, jnp.asarray(k)))
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    with jax.enable_x64(False):
        got32 = np.asarray(vmf_log_normalizer(d, jnp.asarray(k, jnp.float32)))
    assert np.all(np.isfinite(got32))
    assert np.max(np.abs(got32 - ref) / np.maximum.reduce([np.ones_like(ref), np.abs(ref), np.full_like(ref, d)])) < 5e-6
