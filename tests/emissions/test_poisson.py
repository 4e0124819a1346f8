"""Tests of the Poisson (Gamma-Poisson) emission family.

Reference values: ``scipy.integrate.quad`` over the rate, ``scipy.stats`` (poisson, gamma,
nbinom) and Monte Carlo with numpy (tolerance 5 standard errors).
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import integrate, stats

from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.poisson import Poisson

A = np.array([2.0, 0.7, 5.0])
B = np.array([1.0, 0.2, 4.0])


def stats_of(fam, y, z, K):
    x, valid = fam.prepare(y)
    return fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, K))


def log_evidence_quad(y, w, a, b):
    """log int prod_t Poisson(y_t | lam)^w_t Gamma(lam | a, b) dlam, integrating over log lam."""

    def log_f(u):
        lam = np.exp(u)
        return (w * stats.poisson.logpmf(y, lam)).sum() + stats.gamma.logpdf(lam, a, scale=1 / b) + u

    grid = np.linspace(-30, 10, 4001)
    vals = np.array([log_f(u) for u in grid])
    peak = vals.max()
    support = grid[vals > peak - 50]
    value, _ = integrate.quad(lambda u: np.exp(log_f(u) - peak), support[0] - 1, support[-1] + 1,
                              epsabs=0, epsrel=1e-11, limit=200)
    return peak + np.log(value)


# ---------------------------------------------------------------------- closed forms
def test_log_marginal_matches_numerical_integration_scalar():
    y = np.array([3, 0, 1, 4, 2, 7])
    w = np.array([1.0, 1.0, 0.5, 0.0, 1.0, 0.25])
    fam = Poisson(2.0, 0.5)
    got = float(fam.log_marginal_likelihood(fam.sufficient_statistics(jnp.asarray(y), jnp.asarray(w)[:, None]))[0])
    assert abs(got - log_evidence_quad(y, w, 2.0, 0.5)) < 1e-7


def test_log_marginal_matches_numerical_integration_vector():
    rng = np.random.default_rng(0)
    y = rng.poisson([1.0, 6.0, 0.3], size=(8, 3))
    fam = Poisson(A, B, event_shape=(3,))
    got = float(fam.log_marginal_likelihood(fam.sufficient_statistics(jnp.asarray(y), jnp.ones((8, 1))))[0])
    want = sum(log_evidence_quad(y[:, d], np.ones(8), A[d], B[d]) for d in range(3))
    assert abs(got - want) < 1e-7


@pytest.mark.parametrize("event_shape", [(), (3,)])
def test_chain_rule_sequential_predictives(event_shape):
    rng = np.random.default_rng(1)
    T, K = 30, 3
    y = rng.poisson(3.0, size=(T,) + event_shape).astype(float)
    y[[2, 9]] = np.nan
    z = rng.integers(0, K, T)
    fam = Poisson(A if event_shape else 1.5, B if event_shape else 0.5, event_shape=event_shape)
    x, valid = fam.prepare(y)
    w = state_weights(jnp.asarray(z), valid, K)
    prefix = jnp.arange(T)[:, None] > jnp.arange(T)[None, :]

    def pred(t):
        return fam.log_predictive(x[t], fam.sufficient_statistics(x, w * prefix[t][:, None]))

    lp = jax.vmap(pred)(jnp.arange(T))
    assert lp.shape == (T, K)
    chain = float(jnp.sum(jnp.where(valid, lp[jnp.arange(T), z], 0.0)))
    total = float(jnp.sum(fam.log_marginal_likelihood(fam.sufficient_statistics(x, w))))
    assert abs(chain - total) < 1e-9 * max(1.0, abs(total))


def test_log_predictive_is_negative_binomial():
    y = np.array([[3, 0, 1], [4, 2, 7]])
    fam = Poisson(A, B, event_shape=(3,))
    s = fam.sufficient_statistics(jnp.asarray(y), jnp.ones((2, 1)))
    a_n, b_n = A + y.sum(0), B + 2
    for x_new in (np.array([0, 5, 2]), np.array([11, 0, 0])):
        want = stats.nbinom.logpmf(x_new, a_n, b_n / (b_n + 1)).sum()
        assert abs(float(fam.log_predictive(jnp.asarray(x_new), s)[0]) - want) < 1e-10


def test_posterior_matches_importance_sampling():
    rng = np.random.default_rng(2)
    y = np.array([3, 0, 1, 4, 2])
    a, b = 2.0, 0.5
    n = 400_000
    lam = rng.gamma(a, 1 / b, size=n)
    logw = stats.poisson.logpmf(y[None], lam[:, None]).sum(1)
    wts = np.exp(logw - logw.max())
    wts /= wts.sum()
    fam = Poisson(a, b)
    post = fam.posterior(fam.sufficient_statistics(jnp.asarray(y), jnp.ones((5, 1))))
    an, bn = float(post.concentration[0]), float(post.rate[0])
    for f, exact in ((lam, an / bn), (lam**2, an / bn**2 + (an / bn) ** 2)):
        est = np.sum(wts * f)
        se = np.sqrt(np.sum(wts**2 * (f - est) ** 2))
        assert abs(est - exact) < 5 * se, (est, exact, se)


def test_zero_statistics_give_the_prior():
    fam = Poisson(A, B, event_shape=(3,))
    zero = fam.sufficient_statistics(jnp.zeros((2, 3)), jnp.zeros((2, 4)))
    post = fam.posterior(zero)
    assert post.batch_shape == (4,) and post.event_shape == (3,)
    np.testing.assert_allclose(post.concentration, np.broadcast_to(A, (4, 3)))
    np.testing.assert_allclose(post.rate, np.broadcast_to(B, (4, 3)))
    np.testing.assert_allclose(fam.log_marginal_likelihood(zero), 0.0, atol=1e-12)


def test_zero_weights_and_nan_are_ignored():
    rng = np.random.default_rng(3)
    y = rng.poisson(2.0, size=(15, 3)).astype(float)
    z = rng.integers(0, 2, 15)
    fam = Poisson(A, B, event_shape=(3,))
    y_bad = y.copy()
    y_bad[[1, 6], 2] = np.nan
    x, valid = fam.prepare(y_bad)
    keep = ~np.isnan(y_bad).any(1)
    np.testing.assert_array_equal(valid, keep)
    assert np.all(np.asarray(x)[~keep] == 0.0)
    got = fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, 2))
    want = stats_of(fam, y[keep], z[keep], 2)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-12)
    params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
    pw = fam.pointwise_log_likelihood(jnp.asarray(y_bad), params, jnp.asarray(z))
    assert np.all(np.asarray(pw)[~keep] == 0.0) and np.all(np.isfinite(pw))
    # scalar event: NaN steps
    fam1 = Poisson(1.0, 1.0)
    x1, v1 = fam1.prepare(np.array([1.0, np.nan, 2.0]))
    np.testing.assert_array_equal(v1, [True, False, True])


# ---------------------------------------------------------------------- sampling & densities
def test_sample_parameters_distribution():
    n = 100_000
    fam = Poisson(A, B, event_shape=(3,))
    lam = np.asarray(fam.sample_parameters(jax.random.PRNGKey(4), (n,))["rate"])
    assert lam.shape == (n, 3)
    for d in range(3):
        assert stats.kstest(lam[:, d], stats.gamma(A[d], scale=1 / B[d]).cdf).pvalue > 1e-4
        assert abs(lam[:, d].mean() - A[d] / B[d]) < 5 * np.sqrt(A[d] / B[d] ** 2 / n)
    tiny = Poisson(1e-3, 1.0).sample_parameters(jax.random.PRNGKey(0), (5,))
    ll = Poisson(1e-3, 1.0).log_likelihoods(jnp.array([0.0, 3.0]), tiny)
    assert np.all(np.isfinite(ll))


def test_log_prior_and_log_likelihoods_match_scipy():
    rng = np.random.default_rng(5)
    K, T = 4, 9
    fam = Poisson(A, B, event_shape=(3,))
    lam = rng.gamma(2.0, 1.0, size=(K, 3))
    np.testing.assert_allclose(
        fam.log_prior({"rate": jnp.asarray(lam)}), stats.gamma.logpdf(lam, A, scale=1 / B).sum(-1), rtol=1e-12
    )
    x = rng.poisson(2.0, size=(T, 3))
    want = stats.poisson.logpmf(x[:, None, :], lam[None]).sum(-1)
    np.testing.assert_allclose(fam.log_likelihoods(jnp.asarray(x), {"rate": jnp.asarray(lam)}), want, rtol=1e-12)
    fam1 = Poisson(2.0, 3.0)
    np.testing.assert_allclose(
        fam1.log_likelihoods(jnp.asarray(x[:, 0]), {"rate": jnp.asarray(lam[:, 0])}),
        stats.poisson.logpmf(x[:, :1], lam[None, :, 0]),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        fam1.log_prior({"rate": jnp.asarray(lam[:, 0])}), stats.gamma.logpdf(lam[:, 0], 2.0, scale=1 / 3.0)
    )


def test_sample_observations_moments():
    fam = Poisson(1.0, 1.0)
    lam = jnp.array([0.5, 20.0])
    T = 40_000
    y = np.asarray(fam.sample_observations(jax.random.PRNGKey(6), {"rate": lam}, jnp.arange(T) % 2))
    assert y.shape == (T,)
    for k in range(2):
        yk = y[k::2]
        assert abs(yk.mean() - lam[k]) < 5 * np.sqrt(lam[k] / len(yk))


@pytest.mark.parametrize("event_shape", [(), (3,)])
def test_sample_sites_declares_sites(event_shape):
    fam = Poisson(A if event_shape else 2.0, B if event_shape else 1.0, event_shape=event_shape)
    K = 5
    with numpyro.handlers.trace() as tr, numpyro.handlers.seed(rng_seed=0):
        out = fam.sample_sites("counts", K)
    assert list(tr) == ["counts_rate"]
    site = tr["counts_rate"]
    assert site["value"].shape == (K,) + event_shape
    assert site["fn"].batch_shape == (K,) and site["fn"].event_shape == event_shape
    assert site["infer"].get("hdphmm_role") == "emission"
    gam = site["fn"].base_dist if event_shape else site["fn"]
    assert isinstance(gam, dist.Gamma)
    np.testing.assert_allclose(site["fn"].log_prob(out["rate"]), fam.log_prior(out), rtol=1e-10)


# ---------------------------------------------------------------------- JAX transformations
def test_jit_vmap_eval_shape():
    rng = np.random.default_rng(7)
    fam = Poisson(A, B, event_shape=(3,))
    s = stats_of(fam, rng.poisson(2.0, size=(12, 3)), rng.integers(0, 3, 12), 3)
    want = fam.log_marginal_likelihood(s)
    np.testing.assert_allclose(jax.jit(lambda f, st: f.log_marginal_likelihood(st))(fam, s), want, rtol=1e-12)
    fam2 = Poisson(2 * A, B, event_shape=(3,))
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), fam, fam2)
    out = jax.vmap(lambda f: f.log_marginal_likelihood(s))(stacked)
    np.testing.assert_allclose(out[1], fam2.log_marginal_likelihood(s), rtol=1e-12)
    shape = jax.eval_shape(lambda f, st: f.posterior(st), fam, s)
    assert isinstance(shape, Poisson) and shape.concentration.shape == (3, 3) and shape.event_shape == (3,)
    xs, valids = jax.vmap(fam.prepare)(jnp.zeros((2, 12, 3)))
    assert xs.shape == (2, 12, 3) and valids.shape == (2, 12)
    made = jax.jit(lambda a: Poisson(a, 1.0).concentration)(2.0)
    assert float(made) == 2.0


def test_float32():
    with jax.enable_x64(False):
        fam = Poisson(np.float32(2.0), 1.0, event_shape=(2,))
        y = np.array([[1, 0], [np.nan, 2], [5, 3]], dtype=np.float32)
        x, valid = fam.prepare(y)
        s = fam.sufficient_statistics(x, state_weights(jnp.arange(3) % 2, valid, 2))
        params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
        for out in (fam.log_marginal_likelihood(s), fam.log_predictive(x[0], s),
                    fam.log_likelihoods(x, params), fam.log_prior(params)):
            assert out.dtype == jnp.float32 and np.all(np.isfinite(out))


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(concentration=0.0), "concentration"),
        (dict(concentration=[1.0, -1.0, 1.0], event_shape=(3,)), "concentration"),
        (dict(rate=-1.0), "rate"),
        (dict(rate=np.inf), "rate"),
        (dict(event_shape=(2, 2)), "event_shape"),
        (dict(event_shape=(0,)), "event_shape"),
        (dict(concentration=np.ones(4), event_shape=(3,)), "concentration"),
    ],
)
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Poisson(**kwargs)


@pytest.mark.parametrize(
    "y", [np.array([1, -1]), np.array([0.5, 1.0]), np.array([np.inf, 1.0]), np.array(3)]
)
def test_check_observations_rejects(y):
    with pytest.raises(ValueError, match="counts"):
        Poisson(1.0, 1.0).check_observations(y, name="counts")


def test_check_observations_accepts():
    Poisson(1.0, 1.0).check_observations(np.array([0.0, np.nan, 3.0]), name="counts")
    Poisson(1.0, 1.0, event_shape=(2,)).check_observations(np.array([[0, 1], [2, 3]]), name="counts")
    with pytest.raises(ValueError, match="counts"):
        Poisson(1.0, 1.0, event_shape=(2,)).check_observations(np.zeros((3, 4)), name="counts")


def test_weakly_informative():
    rng = np.random.default_rng(8)
    data = rng.poisson([2.0, 30.0], size=(40, 2)).astype(float)
    data[3, 0] = np.nan
    fam = Poisson.weakly_informative(data, event_shape=(2,))
    mean = np.nanmean(data, 0)
    np.testing.assert_allclose(fam.concentration / fam.rate, mean, rtol=1e-12)
    assert fam.event_shape == (2,) and fam.batch_shape == ()
    fam1 = Poisson.weakly_informative(data[:, 1], concentration=3.0)
    np.testing.assert_allclose(fam1.rate, 3.0 / np.nanmean(data[:, 1]), rtol=1e-12)
    np.testing.assert_allclose(Poisson.weakly_informative(np.zeros(5)).rate, 1.0)
    with pytest.raises(ValueError, match="data"):
        Poisson.weakly_informative(np.array([1, -2]))
    with pytest.raises(ValueError, match="data"):
        Poisson.weakly_informative(np.zeros((4, 3)), event_shape=(2,))
    with pytest.raises(TypeError):
        Poisson.weakly_informative(data, scale=1.0)
    assert repr(fam) == "Poisson(concentration=(2,), rate=(2,))"
