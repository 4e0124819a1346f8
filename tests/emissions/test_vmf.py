"""von Mises-Fisher distribution (sampler, density) and the VonMisesFisher emission family.

Oracles: scipy.stats.vonmises_fisher (density, prior draws, MLE), scipy.special.ive
(A_d = I_{d/2}/I_{d/2-1}), numerical quadrature on the circle and the sphere, Monte Carlo
over the prior with standard-error-based tolerances.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro import handlers
from scipy import integrate, special as sps, stats

from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.vmf import VonMisesFisher, VonMisesFisherDistribution, sample_von_mises_fisher


def unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def A(d, k):
    return sps.ive(d / 2, k) / sps.ive(d / 2 - 1, k)


def scipy_draws(mu, kappa, n, seed):
    return stats.vonmises_fisher(unit(mu), kappa).rvs(n, random_state=np.random.default_rng(seed))


# ------------------------------------------------------------------------------------------------
# distribution
# ------------------------------------------------------------------------------------------------
SAMPLE_KAPPAS = np.array([1e-3, 1.0, 30.0, 1e3])


@pytest.mark.parametrize("d", [2, 3, 10, 50])
def test_sample_mean_is_A_d_mu(d):
    n = 20000
    mu = unit(np.arange(1, d + 1) * (-1.0) ** np.arange(d))
    fn = VonMisesFisherDistribution(jnp.asarray(mu), jnp.asarray(SAMPLE_KAPPAS))
    x = np.asarray(fn.sample(jax.random.PRNGKey(d), (n,)))  # (n, 4, d)
    assert x.shape == (n, 4, d)
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-12)
    for j, k in enumerate(SAMPLE_KAPPAS):
        m = x[:, j].mean(0)
        se = x[:, j].std(0) / np.sqrt(n)
        expected = A(d, k) * mu
        assert np.all(np.abs(m - expected) < 5 * se + 1e-12), (d, k, np.max(np.abs(m - expected) / se))
    np.testing.assert_allclose(np.asarray(fn.mean), A(d, SAMPLE_KAPPAS)[:, None] * mu, rtol=1e-10)


@pytest.mark.parametrize("d,kappa", [(3, 5.0), (5, 0.3), (10, 40.0), (2, 2.0)])
def test_sample_cosine_distribution_ks(d, kappa):
    """t = mu^T x has density prop. to exp(kappa t) (1 - t^2)^{(d-3)/2} on [-1, 1]."""
    mu = unit(np.ones(d))
    x = np.asarray(VonMisesFisherDistribution(jnp.asarray(mu), kappa).sample(jax.random.PRNGKey(7), (4000,)))
    t = np.clip(x @ mu, -1, 1)

    def dens(s):
        return np.exp(kappa * (s - 1)) * (1 - s * s) ** ((d - 3) / 2)

    z = integrate.quad(dens, -1, 1, limit=200)[0]

    def cdf(v):
        return np.array([integrate.quad(dens, -1, vi, limit=200)[0] for vi in np.atleast_1d(v)]) / z

    assert stats.kstest(t, cdf).pvalue > 1e-3


@pytest.mark.slow
@pytest.mark.robustness
def test_sample_float32_extremes():
    with jax.enable_x64(False):
        for d in (2, 3, 100):
            mu = jnp.asarray(unit(np.ones(d)), jnp.float32)
            ks = jnp.asarray([0.0, 1e-6, 1e4], jnp.float32)
            x = VonMisesFisherDistribution(mu, ks).sample(jax.random.PRNGKey(0), (500,))
            assert x.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(x)))
            np.testing.assert_allclose(np.linalg.norm(np.asarray(x), axis=-1), 1.0, atol=1e-5)
            cos = np.asarray(x @ mu)
            assert cos[:, 2].mean() > 0.99


@pytest.mark.parametrize("kappa", [1e-3, 1.0, 50.0])
def test_log_prob_integrates_to_one_circle(kappa):
    mu = unit([0.3, -0.8])
    fn = VonMisesFisherDistribution(jnp.asarray(mu), kappa)
    f = jax.jit(lambda th: jnp.exp(fn.log_prob(jnp.stack([jnp.cos(th), jnp.sin(th)], -1))))
    val = integrate.quad(lambda th: float(f(th)), 0, 2 * np.pi, limit=400, points=[np.arctan2(mu[1], mu[0]) % (2 * np.pi)])[0]
    assert val == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("kappa", [1e-3, 1.0, 20.0])
def test_log_prob_integrates_to_one_sphere(kappa):
    mu = unit([0.2, -0.5, 0.7])
    fn = VonMisesFisherDistribution(jnp.asarray(mu), kappa)
    # Gauss-Legendre in cos(theta) x trapezoid (periodic) in phi
    c, wc = np.polynomial.legendre.leggauss(300)
    phi = np.linspace(0, 2 * np.pi, 300, endpoint=False)
    C, P = np.meshgrid(c, phi, indexing="ij")
    s = np.sqrt(1 - C * C)
    pts = np.stack([s * np.cos(P), s * np.sin(P), C], -1)
    dens = np.exp(np.asarray(fn.log_prob(jnp.asarray(pts))))
    val = np.sum(wc[:, None] * dens) * (2 * np.pi / 300)
    assert val == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("d", [2, 3, 5, 10, 50])
def test_log_prob_vs_scipy(d):
    rng = np.random.default_rng(d)
    mu = unit(rng.normal(size=d))
    x = unit(rng.normal(size=(6, d)))
    for k in (1e-4, 0.7, 25.0, 3e3):
        ref = stats.vonmises_fisher(mu, k).logpdf(x)
        got = np.asarray(VonMisesFisherDistribution(jnp.asarray(mu), k).log_prob(jnp.asarray(x)))
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)


def test_distribution_shapes_expand_pytree_validation():
    mu = jnp.asarray(unit(np.ones((4, 3))))
    fn = VonMisesFisherDistribution(mu, jnp.array([1.0, 2.0, 3.0, 4.0]))
    assert fn.batch_shape == (4,) and fn.event_shape == (3,)
    assert fn.sample(jax.random.PRNGKey(0), (2, 5)).shape == (2, 5, 4, 3)
    fn2 = VonMisesFisherDistribution(mu[0], jnp.ones((2, 1)))
    assert fn2.batch_shape == (2, 1)
    assert fn2.log_prob(mu).shape == (2, 4)
    ex = VonMisesFisherDistribution(mu[0], 2.0).expand((6,))
    assert ex.batch_shape == (6,) and ex.sample(jax.random.PRNGKey(1), (3,)).shape == (3, 6, 3)
    assert ex.log_prob(mu[0]).shape == (6,)
    assert VonMisesFisherDistribution.infer_shapes((4, 3), ()) == ((4,), (3,))
    # pytree: through jit and tree_map
    lp = jax.jit(lambda f, v: f.log_prob(v))(fn, mu)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(fn.log_prob(mu)))
    leaves, tree = jax.tree_util.tree_flatten(fn)
    assert len(leaves) == 2
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.batch_shape == (4,) and back.event_shape == (3,)
    # constraints
    assert VonMisesFisherDistribution.support is numpyro.distributions.constraints.sphere
    with pytest.raises(ValueError):
        VonMisesFisherDistribution(jnp.array([1.0, 1.0]), 1.0, validate_args=True)
    with pytest.raises(ValueError):
        VonMisesFisherDistribution(jnp.array([1.0, 0.0]), -1.0, validate_args=True)
    with pytest.raises(ValueError, match="mean_direction"):
        VonMisesFisherDistribution(jnp.array([1.0]), 1.0)
    assert np.isfinite(float(VonMisesFisherDistribution(jnp.array([0.0, 1.0]), 0.0).log_prob(jnp.array([1.0, 0.0]))))


def test_sampler_vmap_jit():
    mu = jnp.asarray(unit(np.ones((3, 4))))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    out = jax.jit(jax.vmap(lambda k, m: sample_von_mises_fisher(k, m, 5.0, (7,))))(keys, mu)
    assert out.shape == (3, 7, 4)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(out), axis=-1), 1.0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# emission family
# ------------------------------------------------------------------------------------------------
def make_family(d, kappa=5.0, kappa0=2.0, seed=0):
    mu0 = unit(np.random.default_rng(seed).normal(size=d))
    return VonMisesFisher(kappa, jnp.asarray(mu0), kappa0), mu0


def stats_of(fam, x, w=None):
    x = jnp.asarray(x)
    w = jnp.ones((x.shape[0], 1)) if w is None else jnp.asarray(w)
    return fam.sufficient_statistics(x, w)


@pytest.mark.parametrize("d", [3, 5, 10])
def test_marginal_vs_monte_carlo(d):
    kappa, kappa0, n = 3.0, 1.5, 4
    fam, mu0 = make_family(d, kappa, kappa0, seed=d)
    x = scipy_draws(np.roll(mu0, 1), 4.0, n, seed=1)
    got = float(fam.log_marginal_likelihood(stats_of(fam, x))[0])
    M = 200000
    mus = scipy_draws(mu0, kappa0, M, seed=2)
    logc = stats.vonmises_fisher(mu0, kappa).logpdf(mu0) - kappa  # log C_d(kappa)
    logw = n * logc + kappa * (mus @ x.sum(0))
    w = np.exp(logw - logw.max())
    est = np.log(w.mean()) + logw.max()
    se = w.std() / (w.mean() * np.sqrt(M))  # delta method, log scale
    assert abs(got - est) < 5 * se, (got, est, se)


def test_marginal_d3_closed_form():
    kappa, kappa0 = 4.0, 0.5
    fam, mu0 = make_family(3, kappa, kappa0)
    x = scipy_draws(mu0, 3.0, 6, seed=3)
    R = np.linalg.norm(kappa0 * mu0 + kappa * x.sum(0))

    def log_c3(k):
        return np.log(k / (4 * np.pi * np.sinh(k)))

    ref = log_c3(kappa0) + 6 * log_c3(kappa) - log_c3(R)
    assert float(fam.log_marginal_likelihood(stats_of(fam, x))[0]) == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("d,kappa,kappa0", [(3, 5.0, 2.0), (10, 20.0, 1e-5), (100, 1e4, 1e-6), (2, 1e-6, 1e-6)])
def test_chain_rule(d, kappa, kappa0):
    fam, mu0 = make_family(d, kappa, kappa0, seed=1)
    x = jnp.asarray(scipy_draws(np.roll(mu0, 1), max(kappa, 1.0), 12, seed=4))
    total = 0.0
    for t in range(x.shape[0]):
        st = stats_of(fam, x[:t]) if t else {"count": jnp.zeros(1), "sum": jnp.zeros((1, d))}
        lp = fam.log_predictive(x[t], st)
        assert lp.shape == (1,)
        total += float(lp[0])
    full = float(fam.log_marginal_likelihood(stats_of(fam, x))[0])
    assert np.isfinite(full)
    assert total == pytest.approx(full, rel=1e-10, abs=1e-8)


@pytest.mark.parametrize("d", [3, 10])
def test_posterior_by_importance_sampling(d):
    kappa, kappa0, n = 2.0, 1.0, 5
    fam, mu0 = make_family(d, kappa, kappa0, seed=d + 1)
    x = scipy_draws(np.roll(mu0, 2), 3.0, n, seed=5)
    post = fam.posterior(stats_of(fam, x))
    mt, kt = np.asarray(post.prior_mean[0]), float(post.prior_concentration[0])
    M = 200000
    mus = scipy_draws(mu0, kappa0, M, seed=6)
    logw = kappa * (mus @ x.sum(0))
    w = np.exp(logw - logw.max())
    w /= w.sum()
    est = w @ mus
    se = np.sqrt(np.sum(w[:, None] ** 2 * (mus - est) ** 2, axis=0))
    expected = A(d, kt) * mt
    assert np.all(np.abs(est - expected) < 5 * se), (est, expected, se)
    # closed form of the update (notes/vmf.md §1.3)
    R = kappa0 * mu0 + kappa * x.sum(0)
    np.testing.assert_allclose(kt, np.linalg.norm(R), rtol=1e-12)
    np.testing.assert_allclose(mt, R / np.linalg.norm(R), rtol=1e-12)


def test_posterior_of_zero_stats_is_prior_and_zero_resultant():
    fam, mu0 = make_family(4, 3.0, 0.7)
    st = {"count": jnp.zeros(3), "sum": jnp.zeros((3, 4))}
    post = fam.posterior(st)
    assert post.batch_shape == (3,) and post.event_shape == (4,)
    np.testing.assert_allclose(np.asarray(post.prior_mean), np.broadcast_to(mu0, (3, 4)), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(post.prior_concentration), 0.7, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(fam.log_marginal_likelihood(st)), 0.0, atol=1e-13)
    # resultant cancels exactly: uniform posterior, finite everything
    st0 = {"count": jnp.ones(1), "sum": jnp.asarray(-0.7 / 3.0 * mu0)[None]}
    p0 = fam.posterior(st0)
    assert float(p0.prior_concentration[0]) == pytest.approx(0.0, abs=1e-15)
    assert np.all(np.isfinite(np.asarray(p0.prior_mean)))
    assert np.isfinite(float(fam.log_marginal_likelihood(st0)[0]))
    g = jax.grad(lambda s: fam.log_marginal_likelihood({"count": jnp.ones(1), "sum": s}).sum())(st0["sum"])
    assert np.all(np.isfinite(np.asarray(g)))
    draws = p0.sample_parameters(jax.random.PRNGKey(0))["mu"]
    assert draws.shape == (1, 4)
    # posterior of a posterior = posterior of the summed statistics
    s1 = {"count": jnp.array([2.0]), "sum": jnp.asarray(unit([[1.0, 2, 0, 1]]))}
    s2 = {"count": jnp.array([1.0]), "sum": jnp.asarray(unit([[0.0, 1, 1, -1]]))}
    a = fam.posterior(s1).posterior(s2)
    b = fam.posterior(jax.tree_util.tree_map(jnp.add, s1, s2))
    np.testing.assert_allclose(np.asarray(a.prior_mean), np.asarray(b.prior_mean), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(a.prior_concentration), np.asarray(b.prior_concentration), rtol=1e-12)


def test_likelihoods_prior_sampling_vs_scipy():
    d, K, T = 5, 3, 7
    fam, mu0 = make_family(d, 8.0, 1.5)
    params = fam.sample_parameters(jax.random.PRNGKey(0), (K,))
    mu = np.asarray(params["mu"])
    assert mu.shape == (K, d)
    np.testing.assert_allclose(np.linalg.norm(mu, axis=-1), 1.0, atol=1e-12)
    x = scipy_draws(mu0, 3.0, T, seed=9)
    ll = np.asarray(fam.log_likelihoods(jnp.asarray(x), params))
    ref = np.stack([stats.vonmises_fisher(m, 8.0).logpdf(x) for m in mu], -1)
    np.testing.assert_allclose(ll, ref, rtol=1e-10)
    lp = np.asarray(fam.log_prior(params))
    np.testing.assert_allclose(lp, stats.vonmises_fisher(mu0, 1.5).logpdf(mu), rtol=1e-10)
    states = jnp.array([0, 1, 2, 2, 1, 0, 0] * 300)
    y = np.asarray(fam.sample_observations(jax.random.PRNGKey(1), params, states))
    assert y.shape == (2100, d)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 1.0, atol=1e-12)
    for k in range(K):
        yk = y[np.asarray(states) == k]
        m, se = yk.mean(0), yk.std(0) / np.sqrt(len(yk))
        assert np.all(np.abs(m - A(d, 8.0) * mu[k]) < 5 * se)


def test_masks_and_prepare():
    d = 3
    fam, mu0 = make_family(d)
    y = scipy_draws(mu0, 5.0, 6, seed=0)
    y[2] = np.nan
    y[4, 1] = np.nan
    x, valid = fam.prepare(jnp.asarray(y))
    np.testing.assert_array_equal(np.asarray(valid), [True, True, False, True, False, True])
    np.testing.assert_allclose(np.linalg.norm(np.asarray(x), axis=-1), 1.0, atol=1e-14)
    states = jnp.array([0, 1, 1, 0, 1, 1])
    w = state_weights(states, valid, 2)
    st = fam.sufficient_statistics(x, w)
    np.testing.assert_allclose(np.asarray(st["count"]), [2.0, 2.0])
    np.testing.assert_allclose(np.asarray(st["sum"][1]), y[1] + y[5], rtol=1e-12)
    params = {"mu": jnp.asarray(unit([[1.0, 0, 0], [0, 1.0, 1.0]]))}
    pw = np.asarray(fam.pointwise_log_likelihood(jnp.asarray(y), params, states))
    assert pw[2] == 0.0 and pw[4] == 0.0 and np.all(np.isfinite(pw))
    g = jax.grad(lambda m: fam.pointwise_log_likelihood(jnp.asarray(y), {"mu": m}, states).sum())(params["mu"])
    assert np.all(np.isfinite(np.asarray(g)))


def test_sample_sites_trace():
    d, K = 4, 5
    fam, mu0 = make_family(d, 10.0, 3.0)

    def model():
        return fam.sample_sites("emit", K)

    tr = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace()
    assert list(tr) == ["emit_mu"]
    site = tr["emit_mu"]
    assert site["infer"].get("hdphmm_role") == "emission"
    assert isinstance(site["fn"], VonMisesFisherDistribution)
    assert site["fn"].batch_shape == (K,) and site["fn"].event_shape == (d,)
    assert site["value"].shape == (K, d)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(site["value"]), axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(
        np.asarray(site["fn"].log_prob(site["value"])), stats.vonmises_fisher(mu0, 3.0).logpdf(np.asarray(site["value"])), rtol=1e-10
    )
    out = handlers.seed(model, rng_seed=0)()
    assert set(out) == {"mu"} and out["mu"].shape == (K, d)


def test_jit_vmap_eval_shape_pytree():
    d, K = 3, 4
    fam, mu0 = make_family(d)
    st = {"count": jnp.arange(K, dtype=float), "sum": jnp.asarray(unit(np.ones((K, d)))) * 2.0}
    lml = jax.jit(lambda f, s: f.log_marginal_likelihood(s))(fam, st)
    np.testing.assert_allclose(np.asarray(lml), np.asarray(fam.log_marginal_likelihood(st)), rtol=1e-12)
    post = jax.jit(lambda f, s: f.posterior(s))(fam, st)
    assert isinstance(post, VonMisesFisher) and post.batch_shape == (K,)
    shp = jax.eval_shape(lambda s: fam.posterior(s), st)
    assert shp.prior_mean.shape == (K, d) and shp.prior_concentration.shape == (K,)
    # vmap over a leading batch of statistics
    stb = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a]), st)
    out = jax.vmap(fam.log_marginal_likelihood)(stb)
    assert out.shape == (2, K)
    np.testing.assert_allclose(np.asarray(out[1]), np.asarray(fam.log_marginal_likelihood(jax.tree_util.tree_map(lambda a: 2 * a, st))))
    x = jnp.asarray(unit(np.ones((6, d))))
    assert jax.vmap(lambda xi: fam.log_predictive(xi, st))(x).shape == (6, K)
    leaves, tree = jax.tree_util.tree_flatten(fam)
    assert len(leaves) == 3
    assert jax.tree_util.tree_unflatten(tree, leaves).batch_shape == ()
    assert "VonMisesFisher" in repr(fam)
    assert fam.sample_posterior(jax.random.PRNGKey(0), st)["mu"].shape == (K, d)


def test_float32_extremes():
    with jax.enable_x64(False):
        for d in (2, 100):
            mu0 = jnp.asarray(unit(np.ones(d)), jnp.float32)
            for kappa, kappa0 in ((1e-6, 1e-6), (1e4, 1e-6), (20.0, 1e4)):
                fam = VonMisesFisher(jnp.float32(kappa), mu0, jnp.float32(kappa0))
                x = jnp.asarray(scipy_draws(np.ones(d), kappa, 50, seed=0), jnp.float32)
                st = fam.sufficient_statistics(x, jnp.ones((50, 2), jnp.float32))
                for v in (fam.log_marginal_likelihood(st), fam.log_predictive(x[0], st), fam.log_likelihoods(x, {"mu": x[:2]})):
                    assert v.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(v)))


def test_validation_errors():
    mu0 = jnp.array([0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="concentration"):
        VonMisesFisher(0.0, mu0, 1.0)
    with pytest.raises(ValueError, match="concentration"):
        VonMisesFisher(jnp.ones(2), mu0, 1.0)
    with pytest.raises(ValueError, match="prior_concentration"):
        VonMisesFisher(1.0, mu0, -1.0)
    with pytest.raises(ValueError, match="prior_mean"):
        VonMisesFisher(1.0, jnp.array([0.0, 1.1, 0.0]), 1.0)
    with pytest.raises(ValueError, match="prior_mean"):
        VonMisesFisher(1.0, jnp.array([1.0]), 1.0)
    fam = VonMisesFisher(1.0, mu0, 1.0)
    good = unit(np.ones((4, 3)))
    fam.check_observations(good)
    bad = good.copy()
    bad[1] = np.nan
    fam.check_observations(bad)  # NaN rows are missing
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(good[:, :2])
    with pytest.raises(ValueError, match="y"):
        fam.check_observations(good * 1.01, name="y")
    inf = good.copy()
    inf[0, 0] = np.inf
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(inf)
    fam.check_observations(good * (1 + 5e-5))  # within tolerance


def test_weakly_informative():
    kappa = 20.0
    mu = unit([1.0, 2.0, -1.0])
    data = scipy_draws(mu, kappa, 5000, seed=11)
    fam = VonMisesFisher.weakly_informative(data)
    np.testing.assert_allclose(np.asarray(fam.prior_mean), unit(data.mean(0)), rtol=1e-10)
    assert float(fam.prior_concentration) == pytest.approx(1e-2)
    _, kappa_mle = stats.vonmises_fisher.fit(data)
    assert float(fam.concentration) == pytest.approx(kappa_mle, rel=0.05)
    data2 = data.copy().reshape(2, 2500, 3)
    data2[0, 3] = np.nan
    fam2 = VonMisesFisher.weakly_informative(data2, concentration=7.0, prior_concentration=0.5)
    assert float(fam2.concentration) == 7.0 and float(fam2.prior_concentration) == 0.5
    with pytest.raises(ValueError, match="data"):
        VonMisesFisher.weakly_informative(data * 2)
    with pytest.raises(ValueError, match="data"):
        VonMisesFisher.weakly_informative(data[:, :1])
