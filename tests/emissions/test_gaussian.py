"""GaussianNIW: closed forms checked against scipy, quadrature and Monte Carlo.

References never call the code under test: scipy densities, ``scipy.integrate`` quadrature,
numpy/scipy prior draws.  Monte Carlo tolerances are 5 standard errors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.integrate as integrate
import scipy.stats as st
from numpyro import handlers
from scipy.special import gammaln, logsumexp

from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.gaussian import GaussianNIW


def _spd(rng, d, scale=1.0):
    a = rng.normal(size=(d, d))
    return scale * (a @ a.T / d + np.eye(d))


def _family(rng, d, df=None, kappa=0.7):
    return GaussianNIW(
        loc=rng.normal(size=d), mean_precision=kappa, df=d + 3.0 if df is None else df, scale=_spd(rng, d)
    )


def _stats_one(fam, y):
    x, valid = fam.prepare(y)
    return fam.sufficient_statistics(x, valid[:, None].astype(x.dtype))


def _prior_draws_numpy(rng, fam, n):
    """(mu, Sigma) from the NIW prior with scipy/numpy only."""
    loc, kappa, df, scale = (np.asarray(a) for a in (fam.loc, fam.mean_precision, fam.df, fam.scale))
    sig = st.invwishart.rvs(df=float(df), scale=scale, size=n, random_state=rng)
    sig = sig.reshape(n, scale.shape[0], scale.shape[0])
    chol = np.linalg.cholesky(sig / kappa)
    mu = loc + np.einsum("nij,nj->ni", chol, rng.normal(size=(n, scale.shape[0])))
    return mu, sig


def _mvn_loglik(y, mu, sig):
    """sum_t log N(y_t | mu_n, sig_n) for every draw n: y (T, D), mu (n, D), sig (n, D, D)."""
    d = y.shape[1]
    chol = np.linalg.cholesky(sig)
    diff = y[None, :, :] - mu[:, None, :]  # (n, T, D)
    z = np.linalg.solve(chol[:, None], diff[..., None])[..., 0]
    logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    return (-0.5 * (z**2).sum(-1) - 0.5 * logdet[:, None] - 0.5 * d * np.log(2 * np.pi)).sum(1)


# ---------------------------------------------------------------------------- densities
def test_log_likelihoods_match_scipy(rng):
    fam = _family(rng, 3)
    K, T = 4, 50
    mu = rng.normal(size=(K, 3))
    cov = np.stack([_spd(rng, 3) for _ in range(K)])
    y = rng.normal(size=(T, 3)) * 2
    ll = np.asarray(fam.log_likelihoods(jnp.asarray(y), {"mu": mu, "cov": cov}))
    ref = np.stack([st.multivariate_normal(mu[k], cov[k]).logpdf(y) for k in range(K)], axis=1)
    np.testing.assert_allclose(ll, ref, rtol=1e-10)


def test_log_prior_matches_scipy(rng):
    fam = _family(rng, 2)
    mu, sig = _prior_draws_numpy(rng, fam, 5)
    ref = [
        st.invwishart(df=float(fam.df), scale=np.asarray(fam.scale)).logpdf(sig[k])
        + st.multivariate_normal(np.asarray(fam.loc), sig[k] / float(fam.mean_precision)).logpdf(mu[k])
        for k in range(5)
    ]
    np.testing.assert_allclose(fam.log_prior({"mu": mu, "cov": sig}), ref, rtol=1e-10)


# ---------------------------------------------------------------------------- marginal likelihood
def test_log_marginal_1d_quadrature():
    """D = 1: integrate prior x likelihood over (mu, log sigma^2) with scipy.integrate.dblquad.

    In one dimension InvWishart(nu, psi) is InvGamma(nu / 2, psi / 2) (scale form)."""
    loc, kappa, df, psi = 0.3, 0.7, 3.0, 1.5
    y = np.array([0.9, -0.4, 1.7, 0.2])
    n, ybar, s2hat = len(y), y.mean(), y.var() + 0.1
    h = 1 / np.sqrt(n + kappa)

    a, b = df / 2, psi / 2
    log_ig_const = a * np.log(b) - gammaln(a)
    # the scipy densities agree with the hand-written ones used in the (hot) integrand
    assert np.isclose(st.invgamma.logpdf(0.7, a, scale=b), log_ig_const - (a + 1) * np.log(0.7) - b / 0.7)

    def logjoint(v, u):  # mu = ybar + sqrt(s2) h v, s2 = exp(u)
        s2 = np.exp(u)
        mu = ybar + np.sqrt(s2) * h * v
        lp = log_ig_const - (a + 1) * u - b / s2  # InvGamma(s2 | a, b)
        lp += -0.5 * np.log(2 * np.pi * s2 / kappa) - 0.5 * kappa * (mu - loc) ** 2 / s2  # N(mu | loc, s2/kappa)
        lp += -0.5 * n * np.log(2 * np.pi * s2) - 0.5 * np.sum((y - mu) ** 2) / s2  # prod_t N(y_t | mu, s2)
        return lp + u + 0.5 * u + np.log(h)  # Jacobian ds2 dmu = s2 * sqrt(s2) h du dv

    c = logjoint(0.0, np.log(s2hat))
    val, err = integrate.dblquad(
        lambda v, u: np.exp(logjoint(v, u) - c), np.log(s2hat) - 12, np.log(s2hat) + 12, -12, 12, epsabs=0, epsrel=1e-10
    )
    ref = c + np.log(val)
    fam = GaussianNIW(np.array([loc]), kappa, df, np.array([[psi]]))
    got = float(fam.log_marginal_likelihood(_stats_one(fam, y[:, None]))[0])
    assert abs(got - ref) < 1e-7


@pytest.mark.parametrize("d", [1, 2])
def test_log_marginal_monte_carlo(d):
    """log p(y) = log E_prior[prod_t N(y_t | mu, Sigma)] with prior draws from scipy."""
    rng = np.random.default_rng(10 + d)
    fam = _family(rng, d, df=d + 4.0, kappa=1.0)
    y = rng.normal(size=(4, d)) + np.asarray(fam.loc)
    n = 200_000
    mu, sig = _prior_draws_numpy(rng, fam, n)
    lw = _mvn_loglik(y, mu, sig)
    w = np.exp(lw - lw.max())
    est = lw.max() + np.log(w.mean())
    se = w.std() / (w.mean() * np.sqrt(n))
    got = float(fam.log_marginal_likelihood(_stats_one(fam, y))[0])
    assert se < 0.05
    assert abs(got - est) < 5 * se, (got, est, se)


def test_chain_rule_predictive_student_t(rng):
    """sum_t log p(y_t | y_<t) = log p(y_1:T); the predictive is a directly coded Student-t."""
    fam = _family(rng, 3)
    T = 9
    y = jnp.asarray(rng.normal(size=(T, 3)))

    @jax.jit
    def sequential(fam, y):
        x, _ = fam.prepare(y)
        prefix = (jnp.arange(T)[None, :] < jnp.arange(T)[:, None]).astype(x.dtype)  # (t, s): s < t
        stats = jax.vmap(lambda w: fam.sufficient_statistics(x, w[:, None]))(prefix)  # leaves (T, 1, ...)
        seq = jax.vmap(lambda xt, s: fam.log_predictive(xt, s)[0])(x, stats)
        return jnp.sum(seq), fam.log_marginal_likelihood(_stats_one(fam, y))[0]

    seq, total = sequential(fam, y)
    np.testing.assert_allclose(seq, total, rtol=1e-10)
    # the one-step predictive is the Student-t of Murphy (2007) sec. 9, checked with scipy
    post = fam.posterior(_stats_one(fam, y[:4]))
    kn, nun = float(post.mean_precision[0]), float(post.df[0])
    dof = nun - 3 + 1
    shape = np.asarray(post.scale[0]) * (kn + 1) / (kn * dof)
    ref = st.multivariate_t(np.asarray(post.loc[0]), shape, df=dof).logpdf(np.asarray(y[5]))
    np.testing.assert_allclose(fam.log_predictive(y[5], _stats_one(fam, y[:4]))[0], ref, rtol=1e-10)


# ---------------------------------------------------------------------------- posterior
def test_posterior_matches_importance_sampling():
    """Posterior moments from prior draws weighted by the likelihood (scipy only) against the
    closed-form posterior hyperparameters; tolerance 5 standard errors (effective sample size)."""
    rng = np.random.default_rng(3)
    d = 2
    fam = _family(rng, d, df=6.0, kappa=0.5)
    mu0, sig0 = _prior_draws_numpy(rng, fam, 1)
    y = rng.multivariate_normal(mu0[0], sig0[0], size=3)  # data from the model
    n = 200_000
    mu, sig = _prior_draws_numpy(rng, fam, n)
    lw = _mvn_loglik(y, mu, sig)
    w = np.exp(lw - logsumexp(lw))
    ess = 1.0 / np.sum(w**2)
    assert ess > 5000

    post = fam.posterior(_stats_one(fam, y))
    kn, nun = float(post.mean_precision[0]), float(post.df[0])
    mean_sigma = np.asarray(post.scale[0]) / (nun - d - 1)
    checks = [
        (mu, np.asarray(post.loc[0])),  # E[mu | y] = m_n
        (sig.reshape(n, -1), mean_sigma.ravel()),  # E[Sigma | y] = Psi_n / (nu_n - D - 1)
        # Cov[mu | y] = E[Sigma | y] / kappa_n
        (np.einsum("ni,nj->nij", mu - post.loc[0], mu - post.loc[0]).reshape(n, -1), (mean_sigma / kn).ravel()),
    ]
    for draws, expected in checks:
        est = w @ draws
        se = np.sqrt((w @ (draws - est) ** 2) / ess)
        assert np.all(np.abs(est - expected) < 5 * se), (est, expected, se)


def test_sample_parameters_moments_and_marginals():
    """Prior draws vs E[Sigma] = Psi/(nu-D-1), E[mu] = loc, Cov[mu] = E[Sigma]/kappa, and KS
    tests of Sigma_11 ~ InvGamma((nu-D+1)/2, Psi_11/2), (Sigma^-1)_11 ~ (Psi^-1)_11 chi2(nu)."""
    rng = np.random.default_rng(4)
    d, df, kappa = 3, 8.0, 0.5
    fam = GaussianNIW(rng.normal(size=d), kappa, df, _spd(rng, d))
    n = 20_000
    draws = jax.jit(fam.sample_parameters, static_argnums=1)(jax.random.key(0), (n,))
    mu, sig = np.asarray(draws["mu"]), np.asarray(draws["cov"])
    assert mu.shape == (n, d) and sig.shape == (n, d, d)
    psi, loc = np.asarray(fam.scale), np.asarray(fam.loc)
    mean_sigma = psi / (df - d - 1)
    centred = np.einsum("ni,nj->nij", mu - loc, mu - loc)
    for sample, expected in [(sig, mean_sigma), (mu, loc), (centred, mean_sigma / kappa)]:
        est = sample.mean(0)
        se = sample.std(0) / np.sqrt(n)
        assert np.all(np.abs(est - expected) < 5 * se), (est, expected)
    assert st.kstest(sig[:, 0, 0], st.invgamma((df - d + 1) / 2, scale=psi[0, 0] / 2).cdf).pvalue > 1e-3
    prec = np.linalg.inv(sig)
    assert st.kstest(prec[:, 2, 2] / np.linalg.inv(psi)[2, 2], st.chi2(df).cdf).pvalue > 1e-3
    # standardized mu (given Sigma) is N(0, I)
    z = np.linalg.solve(np.linalg.cholesky(sig / kappa), (mu - loc)[..., None])[..., 0]
    assert st.kstest(z[:, 1], "norm").pvalue > 1e-3


def test_sample_posterior_shapes_and_mean(rng):
    fam = _family(rng, 2)
    states = jnp.asarray(rng.integers(0, 3, size=400))
    params = {"mu": jnp.asarray([[-5.0, 0.0], [0.0, 5.0], [5.0, 5.0]]), "cov": jnp.stack([jnp.eye(2) * 0.3] * 3)}

    @jax.jit
    def run(fam, params, states):
        y = fam.sample_observations(jax.random.key(1), params, states)
        x, valid = fam.prepare(y)
        stats = fam.sufficient_statistics(x, state_weights(states, valid, 3))
        return y, fam.sample_posterior(jax.random.key(2), stats)

    y, draws = run(fam, params, states)
    assert y.shape == (400, 2)
    assert draws["mu"].shape == (3, 2) and draws["cov"].shape == (3, 2, 2)
    # per-state sample means of the generated data are within 5 SE of the true means
    for k in range(3):
        yk = np.asarray(y)[np.asarray(states) == k]
        assert np.all(np.abs(yk.mean(0) - np.asarray(params["mu"][k])) < 5 * np.sqrt(0.3 / len(yk)))


# ---------------------------------------------------------------------------- data handling
def test_prepare_and_check_observations():
    fam = GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2))
    y = np.array([[1.0, 2.0], [np.nan, 1.0], [3.0, 4.0]])
    x, valid = fam.prepare(y)
    np.testing.assert_array_equal(valid, [True, False, True])
    np.testing.assert_array_equal(x, [[1.0, 2.0], [0.0, 0.0], [3.0, 4.0]])
    fam.check_observations(y)
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="data"):
        fam.check_observations(np.array([[1.0, np.inf]]), name="data")
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(np.zeros(2))


def test_masks_and_empty_statistics(rng):
    fam = _family(rng, 2)
    y = jnp.asarray(rng.normal(size=(10, 2)))

    @jax.jit
    def run(fam, y):
        x, _ = fam.prepare(y)
        keep = jnp.arange(10) < 6
        w = jnp.stack([keep, ~keep, jnp.zeros(10, bool)], axis=1).astype(x.dtype)
        stats = fam.sufficient_statistics(x, w)
        sub = _stats_one(fam, y[:6])
        return stats, sub, fam.log_marginal_likelihood(stats), fam.log_marginal_likelihood(sub), fam.posterior(stats)

    stats, sub, lm, lm_sub, post = run(fam, y)
    for a, b in zip(jax.tree_util.tree_leaves(stats), jax.tree_util.tree_leaves(sub)):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-12)
    np.testing.assert_allclose(lm[0], lm_sub[0], rtol=1e-12)
    assert float(lm[2]) == pytest.approx(0.0, abs=1e-12)
    for name in fam._hyper_names:
        np.testing.assert_allclose(getattr(post, name)[2], getattr(fam, name), rtol=1e-12, atol=1e-12)


def test_weakly_informative_with_nan_rows(rng):
    data = rng.normal(size=(2, 40, 3)) * np.array([1.0, 5.0, 0.2]) + 3.0
    data[0, 5] = np.nan
    data[1, 7, 2] = np.nan
    fam = GaussianNIW.weakly_informative(data)
    rows = data.reshape(-1, 3)
    rows = rows[~np.isnan(rows).any(1)]
    np.testing.assert_allclose(fam.loc, rows.mean(0), rtol=1e-10)
    cov = np.cov(rows.T)  # plus the documented 1e-6 ridge
    np.testing.assert_allclose(fam.scale, cov, rtol=1e-10, atol=2e-6 * np.trace(cov) / 3)
    assert float(fam.df) == 5.0 and fam.batch_shape == ()
    x, valid = jax.vmap(fam.prepare)(jnp.asarray(data))
    stats = fam.sufficient_statistics(x.reshape(-1, 3), valid.reshape(-1, 1).astype(float))
    assert np.isfinite(float(fam.log_marginal_likelihood(stats)[0]))
    assert float(GaussianNIW.weakly_informative(data, mean_precision=2.0).mean_precision) == 2.0
    with pytest.raises(ValueError, match="bogus"):
        GaussianNIW.weakly_informative(data, bogus=1.0)
    # constant data still gives a valid (positive-definite) prior; all-missing data cannot scale one
    assert np.all(np.isfinite(np.asarray(GaussianNIW.weakly_informative(np.ones((5, 2))).scale)))
    with pytest.raises(ValueError, match="`data` has no observed value"):
        GaussianNIW.weakly_informative(np.full((5, 2), np.nan))


# ---------------------------------------------------------------------------- NumPyro / JAX
def test_sample_sites_declare_inverse_wishart_then_normal(rng):
    fam = _family(rng, 2)
    seen = {}

    @jax.jit  # one compilation instead of op-by-op dispatch of numpyro's samplers
    def run(key):
        tr = handlers.trace(handlers.seed(lambda: fam.sample_sites("emis", 4), key)).get_trace()
        seen.update(names=list(tr), fns={n: tr[n]["fn"] for n in tr}, infer={n: tr[n]["infer"] for n in tr})
        return {n: (tr[n]["value"], tr[n]["fn"].log_prob(tr[n]["value"])) for n in tr}

    out = run(jax.random.key(0))
    assert seen["names"] == ["emis_cov", "emis_mu"]
    (cov, lp_cov), (mu, lp_mu) = out["emis_cov"], out["emis_mu"]
    assert cov.shape == (4, 2, 2) and mu.shape == (4, 2)
    unwrap = lambda fn: fn.base_dist if isinstance(fn, numpyro.distributions.ExpandedDistribution) else fn
    assert isinstance(unwrap(seen["fns"]["emis_cov"]), numpyro.distributions.InverseWishart)
    assert isinstance(unwrap(seen["fns"]["emis_mu"]), numpyro.distributions.MultivariateNormal)
    assert seen["fns"]["emis_cov"].batch_shape == (4,) and seen["fns"]["emis_mu"].batch_shape == (4,)
    assert all(seen["infer"][n]["hdphmm_role"] == "emission" for n in seen["names"])
    # the sites' density equals log_prior (numpyro's distributions vs our closed form)
    np.testing.assert_allclose(lp_cov + lp_mu, jax.jit(fam.log_prior)({"mu": mu, "cov": cov}), rtol=1e-9)


def test_jit_vmap_eval_shape_and_unflatten(rng):
    fam = _family(rng, 2)
    y = jnp.asarray(rng.normal(size=(6, 2)))
    stats = _stats_one(fam, y)
    f = jax.jit(lambda fam, s: fam.log_marginal_likelihood(s))
    fams = jax.tree_util.tree_map(lambda a: jnp.stack([a, 2 * a]), fam)
    out = jax.jit(jax.vmap(f, in_axes=(0, None)))(fams, stats)
    assert out.shape == (2, 1)
    np.testing.assert_allclose(out[0], f(fam, stats), rtol=1e-12)
    post_shape = jax.eval_shape(fam.posterior, stats)
    assert isinstance(post_shape, GaussianNIW) and post_shape.scale.shape == (1, 2, 2)
    sentinel = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(fam), [object()] * 4)
    assert isinstance(sentinel, GaussianNIW)
    draws = jax.jit(fam.sample_parameters, static_argnums=1)(jax.random.key(0), (3,))
    assert draws["cov"].shape == (3, 2, 2)
    assert "GaussianNIW" in repr(fam)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(mean_precision=0.0), "mean_precision"),
        (dict(mean_precision=-1.0), "mean_precision"),
        (dict(df=1.0), "df"),  # D = 2 needs df > 1
        (dict(scale=np.array([[1.0, 2.0], [2.0, 1.0]])), "scale"),
        (dict(scale=np.eye(3)), "scale"),
        (dict(loc=np.zeros(3)), "scale"),  # D from loc is 3, scale is 2 x 2
        (dict(loc=np.array([0.0, np.inf])), "loc"),
    ],
)
def test_bad_arguments(kwargs, name):
    args = dict(loc=np.zeros(2), mean_precision=1.0, df=4.0, scale=np.eye(2))
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        GaussianNIW(**args)


def test_float32():
    with jax.enable_x64(False):
        fam = GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2))
        assert fam.scale.dtype == jnp.float32
        y = jnp.asarray(np.random.default_rng(0).normal(size=(20, 2)), jnp.float32)

        @jax.jit
        def run(fam, y):
            x, valid = fam.prepare(y)
            stats = fam.sufficient_statistics(x, valid[:, None].astype(jnp.float32))
            draws = fam.sample_posterior(jax.random.key(0), stats)
            return (fam.log_marginal_likelihood(stats), fam.log_likelihoods(x, draws), draws["cov"],
                    fam.log_predictive(x[0], stats), fam.log_prior(draws))

        for a in run(fam, y):
            assert a.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(a)))
