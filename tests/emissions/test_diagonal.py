"""Tests of the DiagonalGaussian (Normal-Gamma per dimension) emission family.

Reference values come from scipy (numerical integration on a grid, ``scipy.stats`` densities)
or Monte Carlo with numpy, never from the code under test; MC tolerances are 5 standard errors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import integrate, stats

from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.diagonal import DiagonalGaussian

LOC = np.array([0.5, -1.0])
KAPPA = np.array([0.7, 2.0])
ALPHA = np.array([2.5, 5.0])
BETA = np.array([1.5, 3.0])


def family():
    return DiagonalGaussian(LOC, KAPPA, ALPHA, BETA)


def stats_of(fam, y, z, K):
    x, valid = fam.prepare(y)
    return fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, K))


def log_evidence_grid(y, w, m0, k0, a0, b0):
    """log int prod_t N(y_t | mu, 1/tau)^w_t NG(mu, tau) dmu dtau by Simpson's rule on a
    (mu, log tau) grid built around the integrand's peak (found on a coarse grid)."""

    def log_f(mu, lt):
        tau = np.exp(lt)
        sd = 1.0 / np.sqrt(tau)
        ll = sum(wi * stats.norm.logpdf(yi, mu, sd) for yi, wi in zip(y, w))
        return (
            ll
            + stats.gamma.logpdf(tau, a0, scale=1.0 / b0)
            + stats.norm.logpdf(mu, m0, sd / np.sqrt(k0))
            + lt  # Jacobian of tau = exp(lt)
        )

    mu_c, lt_c = np.meshgrid(np.linspace(-30, 30, 601), np.linspace(-12, 8, 401), indexing="ij")
    lf_c = log_f(mu_c, lt_c)
    peak = lf_c.max()
    keep = lf_c > peak - 45.0
    mu_lo, mu_hi = mu_c[keep].min() - 0.2, mu_c[keep].max() + 0.2
    lt_lo, lt_hi = lt_c[keep].min() - 0.2, lt_c[keep].max() + 0.2
    mus = np.linspace(mu_lo, mu_hi, 1601)
    lts = np.linspace(lt_lo, lt_hi, 1601)
    lf = log_f(mus[:, None], lts[None, :])
    inner = integrate.simpson(np.exp(lf - peak), x=lts, axis=1)
    return peak + np.log(integrate.simpson(inner, x=mus))


# ---------------------------------------------------------------------- closed forms
def test_log_marginal_matches_numerical_integration():
    rng = np.random.default_rng(1)
    y = rng.normal([1.0, -2.0], [0.8, 0.5], size=(6, 2))
    w = np.array([1.0, 1.0, 0.0, 0.5, 1.0, 0.25])  # fractional weights: tempered likelihood
    fam = family()
    stats_ = fam.sufficient_statistics(jnp.asarray(y), jnp.asarray(w)[:, None])
    got = float(fam.log_marginal_likelihood(stats_)[0])
    want = sum(log_evidence_grid(y[:, d], w, LOC[d], KAPPA[d], ALPHA[d], BETA[d]) for d in range(2))
    assert abs(got - want) < 1e-6, (got, want)


def test_chain_rule_sequential_predictives():
    rng = np.random.default_rng(2)
    T, K = 25, 3
    y = rng.normal(0.0, 2.0, size=(T, 2))
    y[[4, 11], 0] = np.nan  # missing rows: skipped by the predictive and the marginal alike
    z = rng.integers(0, K, T)
    fam = family()
    x, valid = fam.prepare(y)
    w = state_weights(jnp.asarray(z), valid, K)
    prefix = jnp.arange(T)[:, None] > jnp.arange(T)[None, :]  # prefix[t, s] = s < t

    def pred(t):
        return fam.log_predictive(x[t], fam.sufficient_statistics(x, w * prefix[t][:, None]))

    lp = jax.vmap(pred)(jnp.arange(T))  # (T, K)
    chain = float(jnp.sum(jnp.where(valid, lp[jnp.arange(T), z], 0.0)))
    total = float(jnp.sum(fam.log_marginal_likelihood(fam.sufficient_statistics(x, w))))
    assert abs(chain - total) < 1e-9 * max(1.0, abs(total))


def test_log_predictive_of_empty_state_is_prior_predictive_t():
    fam = family()
    x = jnp.array([0.3, 2.0])
    zero = fam.sufficient_statistics(jnp.zeros((1, 2)), jnp.zeros((1, 1)))
    got = float(fam.log_predictive(x, zero)[0])
    want = stats.t.logpdf(
        np.asarray(x), df=2 * ALPHA, loc=LOC, scale=np.sqrt(BETA * (KAPPA + 1) / (ALPHA * KAPPA))
    ).sum()
    assert abs(got - want) < 1e-10


def test_posterior_matches_importance_sampling():
    rng = np.random.default_rng(3)
    y = rng.normal([1.0, -2.0], [1.0, 0.7], size=(5, 2))
    n = 400_000
    tau = rng.gamma(ALPHA, 1.0 / BETA, size=(n, 2))
    mu = rng.normal(LOC, 1.0 / np.sqrt(KAPPA * tau))
    logw = stats.norm.logpdf(y[None], mu[:, None], 1.0 / np.sqrt(tau[:, None])).sum(1)  # (n, D)
    fam = family()
    stats_ = fam.sufficient_statistics(jnp.asarray(y), jnp.ones((5, 1)))
    post = fam.posterior(stats_)
    mn, kn, an, bn = (np.asarray(getattr(post, k))[0] for k in post._hyper_names)
    # Normal-Gamma posterior moments: E mu, E tau, E mu^2 = Var mu + (E mu)^2
    exact = {"mu": mn, "tau": an / bn, "mu2": bn / (kn * (an - 1)) + mn**2}
    for d in range(2):
        wd = np.exp(logw[:, d] - logw[:, d].max())
        wd /= wd.sum()
        for key, f in (("mu", mu[:, d]), ("tau", tau[:, d]), ("mu2", mu[:, d] ** 2)):
            est = np.sum(wd * f)
            se = np.sqrt(np.sum(wd**2 * (f - est) ** 2))
            assert abs(est - exact[key][d]) < 5 * se, (key, d, est, exact[key][d], se)
        # evidence: log of the mean unnormalized weight
        ratio = np.exp(logw[:, d] - logw[:, d].max())
        log_ev = logw[:, d].max() + np.log(ratio.mean())
        se_log = ratio.std() / ratio.mean() / np.sqrt(n)
        per_dim = DiagonalGaussian(LOC[d : d + 1], KAPPA[d], ALPHA[d], BETA[d])
        got = float(per_dim.log_marginal_likelihood(
            per_dim.sufficient_statistics(jnp.asarray(y[:, d : d + 1]), jnp.ones((5, 1)))
        )[0])
        assert abs(got - log_ev) < 5 * se_log


def test_zero_statistics_give_the_prior():
    fam = family()
    zero = fam.sufficient_statistics(jnp.zeros((3, 2)), jnp.zeros((3, 4)))
    post = fam.posterior(zero)
    assert post.batch_shape == (4,)
    for k in fam._hyper_names:
        np.testing.assert_allclose(getattr(post, k), np.broadcast_to(getattr(fam, k), (4, 2)))
    np.testing.assert_allclose(fam.log_marginal_likelihood(zero), 0.0, atol=1e-12)


def test_zero_weights_and_nan_rows_are_ignored():
    rng = np.random.default_rng(4)
    y = rng.normal(size=(12, 2))
    z = rng.integers(0, 2, 12)
    fam = family()
    y_bad = y.copy()
    y_bad[[2, 7], 1] = np.nan
    y_bad[[5], 0] = np.nan
    x, valid = fam.prepare(y_bad)
    np.testing.assert_array_equal(valid, ~np.isnan(y_bad).any(1))
    assert np.all(np.isfinite(x)) and np.all(np.asarray(x)[~np.asarray(valid)] == 0.0)
    got = fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, 2))
    keep = np.asarray(valid)
    want = stats_of(fam, y[keep], z[keep], 2)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=1e-12)
    # garbage at zero-weight steps does not matter
    w = state_weights(jnp.asarray(z), jnp.asarray(keep), 2)
    y_garbage = np.where(keep[:, None], y, 1e6)
    lml = fam.log_marginal_likelihood(fam.sufficient_statistics(jnp.asarray(y_garbage), w))
    np.testing.assert_allclose(lml, fam.log_marginal_likelihood(want), rtol=1e-12)
    # pointwise log likelihood is 0 at missing steps
    params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
    pw = fam.pointwise_log_likelihood(jnp.asarray(y_bad), params, jnp.asarray(z))
    assert np.all(np.asarray(pw)[~keep] == 0.0) and np.all(np.isfinite(pw))


# ---------------------------------------------------------------------- sampling & densities
def test_sample_parameters_distribution():
    n = 100_000
    fam = family()
    p = fam.sample_parameters(jax.random.PRNGKey(5), (n,))
    tau, mu = np.asarray(p["precision"]), np.asarray(p["mu"])
    assert tau.shape == mu.shape == (n, 2)
    for d in range(2):
        assert stats.kstest(tau[:, d], stats.gamma(ALPHA[d], scale=1 / BETA[d]).cdf).pvalue > 1e-4
        marg = stats.t(df=2 * ALPHA[d], loc=LOC[d], scale=np.sqrt(BETA[d] / (ALPHA[d] * KAPPA[d])))
        assert stats.kstest(mu[:, d], marg.cdf).pvalue > 1e-4
        # conditional structure: (mu - loc) sqrt(kappa tau) is standard normal
        zs = (mu[:, d] - LOC[d]) * np.sqrt(KAPPA[d] * tau[:, d])
        assert stats.kstest(zs, stats.norm.cdf).pvalue > 1e-4
        m = tau[:, d].mean()
        assert abs(m - ALPHA[d] / BETA[d]) < 5 * tau[:, d].std() / np.sqrt(n)


def test_batched_sample_shapes_and_sample_posterior():
    fam = family()
    stats_ = stats_of(fam, np.random.default_rng(0).normal(size=(9, 2)), np.arange(9) % 3, 3)
    p = fam.sample_posterior(jax.random.PRNGKey(0), stats_)
    assert p["mu"].shape == p["precision"].shape == (3, 2)
    p2 = fam.posterior(stats_).sample_parameters(jax.random.PRNGKey(1), (7,))
    assert p2["mu"].shape == (7, 3, 2)


def test_log_prior_and_log_likelihoods_match_scipy():
    rng = np.random.default_rng(6)
    fam = family()
    K, T = 4, 7
    params = {"mu": rng.normal(size=(K, 2)), "precision": rng.gamma(2.0, 1.0, size=(K, 2))}
    want_prior = (
        stats.gamma.logpdf(params["precision"], ALPHA, scale=1 / BETA)
        + stats.norm.logpdf(params["mu"], LOC, 1 / np.sqrt(KAPPA * params["precision"]))
    ).sum(-1)
    np.testing.assert_allclose(fam.log_prior(params), want_prior, rtol=1e-12)
    x = rng.normal(size=(T, 2))
    want_ll = stats.norm.logpdf(
        x[:, None, :], params["mu"][None], 1 / np.sqrt(params["precision"][None])
    ).sum(-1)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    np.testing.assert_allclose(fam.log_likelihoods(jnp.asarray(x), jparams), want_ll, rtol=1e-12)


def test_sample_observations_moments():
    fam = family()
    params = {"mu": jnp.array([[0.0, 10.0], [-5.0, 3.0]]), "precision": jnp.array([[1.0, 4.0], [0.25, 1.0]])}
    T = 40_000
    states = jnp.arange(T) % 2
    y = np.asarray(fam.sample_observations(jax.random.PRNGKey(7), params, states))
    assert y.shape == (T, 2)
    for k in range(2):
        yk = y[k::2]
        sd = 1 / np.sqrt(np.asarray(params["precision"][k]))
        assert np.all(np.abs(yk.mean(0) - np.asarray(params["mu"][k])) < 5 * sd / np.sqrt(len(yk)))
        # variance: SE of a normal sample variance is var * sqrt(2 / n)
        assert np.all(np.abs(yk.var(0) - sd**2) < 5 * sd**2 * np.sqrt(2 / len(yk)))


def test_sample_sites_declares_sites():
    fam = family()
    K = 5
    with numpyro.handlers.trace() as tr, numpyro.handlers.seed(rng_seed=0):
        out = fam.sample_sites("em", K)
    assert list(tr) == ["em_precision", "em_mu"]
    for site in tr.values():
        assert site["value"].shape == (K, 2)
        assert site["fn"].batch_shape == (K,) and site["fn"].event_shape == (2,)
        assert site["infer"].get("hdphmm_role") == "emission"
    np.testing.assert_array_equal(out["mu"], tr["em_mu"]["value"])
    tau = np.asarray(tr["em_precision"]["value"])
    base = tr["em_mu"]["fn"].base_dist
    assert isinstance(base, dist.Normal)
    np.testing.assert_allclose(base.scale, 1 / np.sqrt(KAPPA * tau), rtol=1e-12)
    np.testing.assert_allclose(base.loc, np.broadcast_to(LOC, (K, 2)))
    gam = tr["em_precision"]["fn"].base_dist
    np.testing.assert_allclose(gam.concentration, np.broadcast_to(ALPHA, (K, 2)))
    np.testing.assert_allclose(gam.rate, np.broadcast_to(BETA, (K, 2)))
    # the site log densities agree with log_prior
    lp = tr["em_precision"]["fn"].log_prob(out["precision"]) + tr["em_mu"]["fn"].log_prob(out["mu"])
    np.testing.assert_allclose(lp, fam.log_prior(out), rtol=1e-10)


# ---------------------------------------------------------------------- JAX transformations
def test_jit_vmap_eval_shape():
    fam = family()
    rng = np.random.default_rng(8)
    y = jnp.asarray(rng.normal(size=(10, 2)))
    z = jnp.asarray(rng.integers(0, 3, 10))
    s = stats_of(fam, y, z, 3)
    want = fam.log_marginal_likelihood(s)
    got = jax.jit(lambda f, st: f.log_marginal_likelihood(st))(fam, s)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # vmap over a stack of families
    fam2 = DiagonalGaussian(LOC + 1.0, KAPPA * 2, ALPHA, BETA * 0.5)
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), fam, fam2)
    out = jax.vmap(lambda f: f.log_marginal_likelihood(s))(stacked)
    np.testing.assert_allclose(out[1], fam2.log_marginal_likelihood(s), rtol=1e-12)
    # vmap over sequences (prepare + statistics)
    ys = jnp.stack([y, y + 1.0])
    xs, valids = jax.vmap(fam.prepare)(ys)
    assert xs.shape == (2, 10, 2) and valids.shape == (2, 10)
    shape = jax.eval_shape(lambda f, st: f.posterior(st), fam, s)
    assert isinstance(shape, DiagonalGaussian) and shape.loc.shape == (3, 2)
    # constructing inside jit (tracers skip value checks)
    made = jax.jit(lambda c: DiagonalGaussian(jnp.zeros(2), 1.0, c, 1.0).concentration)(2.0)
    np.testing.assert_allclose(made, [2.0, 2.0])


def test_float32():
    with jax.enable_x64(False):
        fam = DiagonalGaussian(np.zeros(2, np.float32), 1.0, 2.0, 1.0)
        y = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
        x, valid = fam.prepare(y)
        s = fam.sufficient_statistics(x, state_weights(jnp.arange(20) % 2, valid, 2))
        lml = fam.log_marginal_likelihood(s)
        params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
        for out in (lml, fam.log_predictive(x[0], s), fam.log_likelihoods(x, params), fam.log_prior(params)):
            assert out.dtype == jnp.float32 and np.all(np.isfinite(out))


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(loc=0.0), "loc"),
        (dict(loc=[0.0, np.inf]), "loc"),
        (dict(mean_precision=0.0), "mean_precision"),
        (dict(mean_precision=[1.0, -1.0]), "mean_precision"),
        (dict(concentration=-2.0), "concentration"),
        (dict(rate=0.0), "rate"),
        (dict(rate=np.ones(3)), "rate"),
    ],
)
def test_bad_arguments(kwargs, name):
    args = dict(loc=np.zeros(2), mean_precision=1.0, concentration=1.0, rate=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        DiagonalGaussian(**args)


def test_check_observations():
    fam = family()
    fam.check_observations(np.array([[0.0, np.nan], [1.0, 2.0]]), name="y")
    with pytest.raises(ValueError, match="y"):
        fam.check_observations(np.zeros((4, 3)), name="y")
    with pytest.raises(ValueError, match="y"):
        fam.check_observations(np.zeros(4), name="y")
    with pytest.raises(ValueError, match="y"):
        fam.check_observations(np.array([[0.0, np.inf]]), name="y")


def test_weakly_informative():
    rng = np.random.default_rng(9)
    data = rng.normal([3.0, -20.0], [2.0, 0.1], size=(2, 50, 2))
    data[0, 3, 1] = np.nan
    fam = DiagonalGaussian.weakly_informative(data)
    np.testing.assert_allclose(fam.loc, np.nanmean(data.reshape(-1, 2), 0), rtol=1e-12)
    np.testing.assert_allclose(fam.rate / fam.concentration, np.nanvar(data.reshape(-1, 2), 0), rtol=1e-12)
    assert fam.event_shape == (2,) and fam.batch_shape == ()
    over = DiagonalGaussian.weakly_informative(data, mean_precision=0.5, concentration=3.0)
    np.testing.assert_allclose(over.mean_precision, 0.5)
    np.testing.assert_allclose(over.rate, 3.0 * np.nanvar(data.reshape(-1, 2), 0), rtol=1e-12)
    const = DiagonalGaussian.weakly_informative(np.ones((5, 1)))
    np.testing.assert_allclose(const.rate, 1.0)
    with pytest.raises(ValueError, match="data"):
        DiagonalGaussian.weakly_informative(np.zeros(5))
    with pytest.raises(TypeError):
        DiagonalGaussian.weakly_informative(data, scale=1.0)
    assert "DiagonalGaussian(loc=(2,)" in repr(fam)
