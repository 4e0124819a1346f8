"""AutoRegressive (MNIW) emissions: closed forms checked against scipy and Monte Carlo.

Regressors are built by hand in numpy here (presample zeros), prior draws come from scipy, so
the references do not use the code under test.  Monte Carlo tolerances are 5 standard errors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.stats as st
from numpyro import handlers
from scipy.special import logsumexp

from numpyro_hdphmm.emissions.autoregressive import ARInputs, AutoRegressive
from numpyro_hdphmm.emissions.base import state_weights


def _spd(rng, d, scale=1.0):
    a = rng.normal(size=(d, d))
    return scale * (a @ a.T / d + np.eye(d))


def _family(rng, d, order=1, affine=True, df=None):
    m = d * order + int(affine)
    return AutoRegressive(
        order=order,
        loc=0.3 * rng.normal(size=(d, m)),
        col_precision=_spd(rng, m, 2.0),
        df=d + 3.0 if df is None else df,
        scale=_spd(rng, d, 0.5),
        affine=affine,
    )


def _regressors(y, order, affine):
    """Hand-built lagged regressors with zero presample values: (T, D * order + affine)."""
    T, d = y.shape
    ypad = np.vstack([np.zeros((order, d)), y])
    cols = [ypad[order - j : order - j + T] for j in range(1, order + 1)]
    if affine:
        cols.append(np.ones((T, 1)))
    return np.hstack(cols)


def _hyper(fam):
    return tuple(np.asarray(a) for a in (fam.loc, fam.col_precision, fam.df, fam.scale))


def _prior_draws_numpy(rng, fam, n):
    """(A, Sigma) from the MNIW prior with scipy/numpy only."""
    M0, K0, df, psi = _hyper(fam)
    d, m = M0.shape
    sig = st.invwishart.rvs(df=float(df), scale=psi, size=n, random_state=rng).reshape(n, d, d)
    col_chol = np.linalg.cholesky(np.linalg.inv(K0))
    A = M0 + np.linalg.cholesky(sig) @ rng.normal(size=(n, d, m)) @ col_chol.T
    return A, sig


def _loglik(y, X, A, sig):
    """sum_t log N(y_t | A_n x_t, sig_n) for every draw n."""
    d = y.shape[1]
    chol = np.linalg.cholesky(sig)
    diff = y[None] - np.einsum("ndm,tm->ntd", A, X)
    z = np.linalg.solve(chol[:, None], diff[..., None])[..., 0]
    logdet = 2 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(1)
    return (-0.5 * (z**2).sum(-1) - 0.5 * logdet[:, None] - 0.5 * d * np.log(2 * np.pi)).sum(1)


@jax.jit
def _stats_one(fam, y):
    x, valid = fam.prepare(y)
    return fam.sufficient_statistics(x, valid[:, None].astype(x.y.dtype))


# ---------------------------------------------------------------------------- data handling
def test_prepare_presample_zeros_and_nan_propagation():
    fam = AutoRegressive(2, np.zeros((2, 5)), np.eye(5), 4.0, np.eye(2), affine=True)
    y = np.arange(16.0).reshape(8, 2) + 1
    y[3, 1] = np.nan
    x, valid = fam.prepare(jnp.asarray(y))
    y0 = np.where(np.isnan(y), 0.0, y)
    y0[3] = 0.0  # the whole row is replaced
    np.testing.assert_array_equal(x.y, y0)
    np.testing.assert_array_equal(x.regressor, _regressors(y0, 2, True))
    np.testing.assert_array_equal(x.regressor[0], [0, 0, 0, 0, 1])  # y_{-1} = y_{-2} = 0
    np.testing.assert_array_equal(x.regressor[1], [1, 2, 0, 0, 1])
    # NaN in y_3 invalidates steps 3, 4, 5 (order 2); the presample steps stay valid
    np.testing.assert_array_equal(valid, [True, True, True, False, False, False, True, True])
    fam1 = AutoRegressive(1, np.zeros((2, 2)), np.eye(2), 4.0, np.eye(2), affine=False)
    x1, valid1 = fam1.prepare(jnp.asarray(y))
    assert x1.regressor.shape == (8, 2)
    np.testing.assert_array_equal(valid1, [True, True, True, False, False, True, True, True])
    fam.check_observations(y)
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="obs"):
        fam.check_observations(np.array([[0.0, -np.inf]]))


def test_masked_steps_ignore_data_but_feed_regressors(rng):
    """A zero-weight step's target is ignored; its value still enters the next regressors."""
    fam = _family(rng, 2, order=1)
    y = rng.normal(size=(10, 2))
    keep = np.arange(10) % 3 != 0
    y_changed = y.copy()
    y_changed[~keep] += 5.0  # changes both targets at dropped steps and regressors after them

    @jax.jit
    def marginal(fam, y):
        x, valid = fam.prepare(y)
        w = (valid & jnp.asarray(keep))[:, None].astype(x.y.dtype)
        return fam.log_marginal_likelihood(fam.sufficient_statistics(x, w))[0]

    # reference: only the kept (target, regressor) pairs, built by hand
    X = _regressors(y, 1, True)
    sub_y, sub_x = y[keep], X[keep]
    fam_ref = jax.jit(lambda fam, yy, xx: fam.log_marginal_likelihood(
        fam.sufficient_statistics(ARInputs(yy, xx), jnp.ones((len(yy), 1))))[0])
    np.testing.assert_allclose(marginal(fam, y), fam_ref(fam, sub_y, sub_x), rtol=1e-12)
    assert abs(float(marginal(fam, y)) - float(marginal(fam, y_changed))) > 1e-3


# ---------------------------------------------------------------------------- densities
@pytest.mark.parametrize("blocks", [False, True])
def test_log_likelihoods_match_scipy(rng, blocks, monkeypatch):
    """``blocks``: the CPU path that computes the residuals in blocks of steps (forced here by a
    small block size: 64-step blocks, the last one padded)."""
    from numpyro_hdphmm.emissions import autoregressive

    if blocks:
        monkeypatch.setattr(autoregressive, "LIKELIHOOD_BLOCK_SIZE", 64 * 6)
        assert autoregressive._likelihood_block(150, 6) == 64 or jax.default_backend() != "cpu"
    fam = _family(rng, 2, order=2)
    K, T = 3, 150 if blocks else 30
    A = rng.normal(size=(K, 2, 5)) * 0.3
    cov = np.stack([_spd(rng, 2) for _ in range(K)])
    y = rng.normal(size=(T, 2))
    X = _regressors(y, 2, True)
    x, _ = fam.prepare(jnp.asarray(y))
    ll = np.asarray(jax.jit(fam.log_likelihoods)(x, {"A": A, "cov": cov}))
    ref = np.stack(
        [[st.multivariate_normal(A[k] @ X[t], cov[k]).logpdf(y[t]) for k in range(K)] for t in range(T)]
    )
    np.testing.assert_allclose(ll, ref, rtol=1e-10)
    # the pointwise density of each step's own state (gathered, not the (T, K) matrix), 0 at missing
    # steps: the missing row and the p = 2 rows after it (their regressors are unknown)
    states = rng.integers(0, K, size=T)
    y_bad = y.copy()
    y_bad[7] = np.nan
    pw = np.asarray(jax.jit(fam.pointwise_log_likelihood)(jnp.asarray(y_bad), {"A": A, "cov": cov}, states))
    x_bad, valid = fam.prepare(jnp.asarray(y_bad))
    want = np.where(valid, np.asarray(fam.log_likelihoods(x_bad, {"A": A, "cov": cov}))[np.arange(T), states], 0.0)
    assert not valid[7:10].any() and valid[10:].all()
    np.testing.assert_allclose(pw, want, rtol=1e-10)
    np.testing.assert_allclose(pw[:7], ref[np.arange(7), states[:7]], rtol=1e-10)


def test_log_prior_matches_scipy(rng):
    fam = _family(rng, 2, order=1)
    A, sig = _prior_draws_numpy(rng, fam, 4)
    M0, K0, df, psi = _hyper(fam)
    ref = [
        st.invwishart(df=float(df), scale=psi).logpdf(sig[k])
        + st.matrix_normal(mean=M0, rowcov=sig[k], colcov=np.linalg.inv(K0)).logpdf(A[k])
        for k in range(4)
    ]
    np.testing.assert_allclose(jax.jit(fam.log_prior)({"A": A, "cov": sig}), ref, rtol=1e-10)


# ---------------------------------------------------------------------------- marginal likelihood
@pytest.mark.parametrize("d, order, affine", [(1, 2, True), (2, 1, True)])
def test_log_marginal_monte_carlo(d, order, affine):
    """log p(Y | X) = log E_prior[prod_t N(y_t | A x_t, Sigma)], prior draws from scipy/numpy."""
    rng = np.random.default_rng(20 + d)
    fam = _family(rng, d, order=order, affine=affine, df=d + 4.0)
    y = 0.5 * rng.normal(size=(4, d))
    X = _regressors(y, order, affine)
    n = 200_000
    A, sig = _prior_draws_numpy(rng, fam, n)
    lw = _loglik(y, X, A, sig)
    w = np.exp(lw - lw.max())
    est = lw.max() + np.log(w.mean())
    se = w.std() / (w.mean() * np.sqrt(n))
    got = float(jax.jit(lambda f, s: f.log_marginal_likelihood(s))(fam, _stats_one(fam, jnp.asarray(y)))[0])
    assert se < 0.05
    assert abs(got - est) < 5 * se, (got, est, se)


def test_chain_rule_and_student_t_predictive(rng):
    """sum_t log p(y_t | x_t, data_<t) = log p(Y | X); one predictive checked with scipy's t."""
    fam = _family(rng, 2, order=2)
    T = 10
    y = jnp.asarray(rng.normal(size=(T, 2)))

    @jax.jit
    def sequential(fam, y):
        x, _ = fam.prepare(y)
        prefix = (jnp.arange(T)[None, :] < jnp.arange(T)[:, None]).astype(y.dtype)
        stats = jax.vmap(lambda w: fam.sufficient_statistics(x, w[:, None]))(prefix)
        seq = jax.vmap(lambda xt, s: fam.log_predictive(xt, s)[0])(x, stats)
        return jnp.sum(seq), fam.log_marginal_likelihood(_stats_one(fam, y))[0], fam.log_predictive(
            jax.tree_util.tree_map(lambda a: a[6], x), _stats_one(fam, y[:5])
        )[0], fam.posterior(_stats_one(fam, y[:5]))

    seq, total, pred6, post = sequential(fam, y)
    np.testing.assert_allclose(seq, total, rtol=1e-10)
    Mn, Kn, nun, Psin = (np.asarray(a)[0] for a in (post.loc, post.col_precision, post.df, post.scale))
    x6 = _regressors(np.asarray(y), 2, True)[6]
    dof = nun - 2 + 1
    shape = Psin * (1 + x6 @ np.linalg.solve(Kn, x6)) / dof
    ref = st.multivariate_t(Mn @ x6, shape, df=dof).logpdf(np.asarray(y[6]))
    np.testing.assert_allclose(pred6, ref, rtol=1e-10)


# ---------------------------------------------------------------------------- posterior
def test_posterior_matches_importance_sampling():
    """E[A | Y], E[Sigma | Y] and Var[A | Y] from likelihood-weighted prior draws (scipy only)
    against M_n, Psi_n / (nu_n - D - 1), and E[Sigma_ii] (K_n^{-1})_jj; 5 SE (by ESS)."""
    rng = np.random.default_rng(5)
    d = 2
    fam = _family(rng, d, order=1, df=6.0)
    A0, sig0 = _prior_draws_numpy(rng, fam, 1)
    y = np.zeros((4, d))
    for t in range(4):  # simulate from the model, presample zeros
        x = _regressors(y[: t + 1], 1, True)[t]
        y[t] = rng.multivariate_normal(A0[0] @ x, sig0[0])
    X = _regressors(y, 1, True)
    n = 200_000
    A, sig = _prior_draws_numpy(rng, fam, n)
    lw = _loglik(y, X, A, sig)
    w = np.exp(lw - logsumexp(lw))
    ess = 1.0 / np.sum(w**2)
    assert ess > 5000

    post = fam.posterior(_stats_one(fam, jnp.asarray(y)))
    Mn, Kn, nun, Psin = (np.asarray(a)[0] for a in (post.loc, post.col_precision, post.df, post.scale))
    mean_sigma = Psin / (nun - d - 1)
    var_A = np.diag(mean_sigma)[:, None] * np.diag(np.linalg.inv(Kn))[None, :]
    checks = [
        (A.reshape(n, -1), Mn.ravel()),
        (sig.reshape(n, -1), mean_sigma.ravel()),
        (((A - Mn) ** 2).reshape(n, -1), var_A.ravel()),
    ]
    for draws, expected in checks:
        est = w @ draws
        se = np.sqrt((w @ (draws - est) ** 2) / ess)
        assert np.all(np.abs(est - expected) < 5 * se), (est, expected, se)


def test_sample_parameters_moments():
    """Prior draws: E[A] = M0, Var[A_ij] = E[Sigma_ii] (K0^{-1})_jj, E[Sigma] = Psi/(nu-D-1),
    and the standardized A (given Sigma) is N(0, 1) (KS test)."""
    rng = np.random.default_rng(6)
    K0 = np.array([[2.0, 1.2, 0.5], [1.2, 2.0, 0.8], [0.5, 0.8, 1.5]])  # strongly correlated columns
    fam = AutoRegressive(1, rng.normal(size=(2, 3)), K0, 7.0, _spd(rng, 2))
    M0, K0, df, psi = _hyper(fam)
    n = 20_000
    draws = jax.jit(fam.sample_parameters, static_argnums=1)(jax.random.key(3), (n,))
    A, sig = np.asarray(draws["A"]), np.asarray(draws["cov"])
    assert A.shape == (n, 2, 3) and sig.shape == (n, 2, 2)
    mean_sigma = psi / (df - 2 - 1)
    var_A = np.diag(mean_sigma)[:, None] * np.diag(np.linalg.inv(K0))[None, :]
    for sample, expected in [(A, M0), (sig, mean_sigma), ((A - M0) ** 2, var_A)]:
        est, se = sample.mean(0), sample.std(0) / np.sqrt(n)
        assert np.all(np.abs(est - expected) < 5 * se), (est, expected)
    # whiten: L_S^{-1} (A - M0) C where C C^T = K0 has iid N(0, 1) entries
    C = np.linalg.cholesky(K0)
    Z = np.linalg.solve(np.linalg.cholesky(sig), A - M0) @ C
    assert st.kstest(Z[:, 1, 2], "norm").pvalue > 1e-3
    assert st.kstest(Z[:, 0, 0], "norm").pvalue > 1e-3
    for a, b in [((0, 1), (1, 0)), ((0, 0), (0, 1)), ((1, 1), (1, 2)), ((0, 2), (1, 2))]:
        assert abs(np.corrcoef(Z[:, a[0], a[1]], Z[:, b[0], b[1]])[0, 1]) < 5 / np.sqrt(n)


def test_sample_observations_least_squares_recovers_A():
    """Long simulated sequences: per-state OLS on hand-built regressors recovers A_k within
    5 standard errors (asymptotic Cov(vec A_hat) = (X^T X)^{-1} kron Sigma)."""
    d, order, T = 2, 2, 6000
    fam = AutoRegressive(order, np.zeros((d, d * order + 1)), np.eye(d * order + 1), d + 2.0, np.eye(d))
    A = np.array(
        [
            [[0.5, 0.1, 0.2, 0.0, 1.0], [-0.2, 0.4, 0.0, 0.1, -1.0]],
            [[-0.3, 0.0, 0.1, 0.2, 0.0], [0.1, 0.6, -0.2, 0.0, 2.0]],
        ]
    )
    cov = np.stack([np.array([[0.5, 0.1], [0.1, 0.3]]), np.array([[0.2, 0.0], [0.0, 0.4]])])
    states = np.repeat(np.arange(T // 100) % 2, 100)  # blocks of 100 steps
    y = np.asarray(jax.jit(fam.sample_observations)(jax.random.key(4), {"A": A, "cov": cov}, jnp.asarray(states)))
    assert y.shape == (T, d)
    X = _regressors(y, order, True)
    for k in range(2):
        sel = states == k
        Xk, yk = X[sel], y[sel]
        A_hat = np.linalg.lstsq(Xk, yk, rcond=None)[0].T
        se = np.sqrt(np.outer(np.diag(cov[k]), np.diag(np.linalg.inv(Xk.T @ Xk))))
        assert np.all(np.abs(A_hat - A[k]) < 5 * se), (A_hat, A[k])
        resid = yk - Xk @ A_hat.T
        np.testing.assert_allclose(np.cov(resid.T), cov[k], atol=5 * 0.5 * np.sqrt(2 / sel.sum()))
    # the first step uses zero presample values: y_0 = intercept + noise, deterministic given key
    y_again = np.asarray(jax.jit(fam.sample_observations)(jax.random.key(4), {"A": A, "cov": cov}, jnp.asarray(states)))
    np.testing.assert_array_equal(y, y_again)


# ---------------------------------------------------------------------------- misc protocol
def test_masks_and_empty_statistics(rng):
    fam = _family(rng, 2, order=1)
    y = jnp.asarray(rng.normal(size=(10, 2)))

    @jax.jit
    def run(fam, y):
        x, _ = fam.prepare(y)
        w = jnp.zeros((10, 2)).at[:, 0].set(1.0)
        stats = fam.sufficient_statistics(x, w)
        return fam.log_marginal_likelihood(stats), fam.posterior(stats), _stats_one(fam, y)

    lm, post, st_all = run(fam, y)
    assert float(lm[1]) == pytest.approx(0.0, abs=1e-12)
    for name in fam._hyper_names:
        np.testing.assert_allclose(getattr(post, name)[1], getattr(fam, name), rtol=1e-12, atol=1e-12)
    X = _regressors(np.asarray(y), 1, True)
    np.testing.assert_allclose(st_all.sum_xx[0], X.T @ X, rtol=1e-12)
    np.testing.assert_allclose(st_all.sum_yx[0], np.asarray(y).T @ X, rtol=1e-12)
    # a centred family's statistics are those of the centred targets and regressors (its
    # presample value is the center: zeros in centred coordinates)
    c = np.array([0.5, -2.0])
    cen = AutoRegressive(1, fam.loc, fam.col_precision, fam.df, fam.scale, center=c)
    st_c = _stats_one(cen, y)
    Xc = _regressors(np.asarray(y) - c, 1, True)
    np.testing.assert_allclose(st_c.sum_xx[0], Xc.T @ Xc, rtol=1e-12)
    np.testing.assert_allclose(st_c.sum_yx[0], (np.asarray(y) - c).T @ Xc, rtol=1e-12)


def test_weakly_informative_with_nan_rows(rng):
    d = 2
    A = np.array([[0.8, 0.1, 1.0], [0.0, 0.5, -2.0]])
    y = np.zeros((3, 200, d))
    for t in range(1, 200):
        y[:, t] = y[:, t - 1] @ A[:, :2].T + A[:, 2] + rng.normal(size=(3, d)) * np.array([0.3, 0.6])
    y[0, 17] = np.nan
    y[2, 50, 1] = np.nan
    fam = AutoRegressive.weakly_informative(y, order=1)
    assert fam.order == 1 and fam.affine and fam.batch_shape == ()
    # centred at the data mean: no dynamics around it (lag blocks 0, intercept = mean)
    rows = y.reshape(-1, d)
    mean = rows[~np.isnan(rows).any(1)].mean(0)
    np.testing.assert_allclose(fam.center, mean, rtol=1e-12)
    np.testing.assert_allclose(fam.loc, np.concatenate([np.zeros((2, 2)), mean[:, None]], 1), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(fam.loc_centred, np.zeros((2, 3)))
    assert float(fam.df) == d + 2.0
    # the residual covariance of the pooled fit is close to the innovation covariance
    np.testing.assert_allclose(np.diag(fam.scale), [0.09, 0.36], rtol=0.25)
    assert np.all(np.linalg.eigvalsh(np.asarray(fam.col_precision)) > 0)
    fam2 = AutoRegressive.weakly_informative(y, order=3, affine=False, df=10.0)
    assert fam2.loc.shape == (2, 6) and float(fam2.df) == 10.0
    stats = _stats_one(fam2, jnp.asarray(y[0]))
    assert np.isfinite(float(fam2.log_marginal_likelihood(stats)[0]))
    with pytest.raises(ValueError, match="bogus"):
        AutoRegressive.weakly_informative(y, bogus=1)
    with pytest.raises(ValueError, match="`data` has no observed value"):
        AutoRegressive.weakly_informative(np.full((4, 2), np.nan))


def test_sample_sites_declare_inverse_wishart_then_matrix_normal(rng):
    fam = _family(rng, 2, order=1)
    seen = {}

    @jax.jit
    def run(key):
        tr = handlers.trace(handlers.seed(lambda: fam.sample_sites("ar", 3), key)).get_trace()
        seen.update(names=list(tr), fns={n: tr[n]["fn"] for n in tr}, infer={n: tr[n]["infer"] for n in tr})
        return {n: (tr[n]["value"], tr[n]["fn"].log_prob(tr[n]["value"])) for n in tr}

    out = run(jax.random.key(0))
    assert seen["names"] == ["ar_cov", "ar_A"]
    (cov, lp_cov), (A, lp_A) = out["ar_cov"], out["ar_A"]
    assert cov.shape == (3, 2, 2) and A.shape == (3, 2, 3)
    unwrap = lambda fn: fn.base_dist if isinstance(fn, numpyro.distributions.ExpandedDistribution) else fn
    assert isinstance(unwrap(seen["fns"]["ar_A"]), numpyro.distributions.MatrixNormal)
    assert isinstance(unwrap(seen["fns"]["ar_cov"]), numpyro.distributions.InverseWishart)
    assert all(seen["infer"][n]["hdphmm_role"] == "emission" for n in seen["names"])
    np.testing.assert_allclose(lp_cov + lp_A, jax.jit(fam.log_prior)({"A": A, "cov": cov}), rtol=1e-9)


def test_jit_vmap_eval_shape_and_unflatten(rng):
    fam = _family(rng, 2, order=2)
    ys = jnp.asarray(rng.normal(size=(3, 12, 2)))
    stats = jax.jit(jax.vmap(_stats_one, in_axes=(None, 0)))(fam, ys)
    assert stats.sum_xx.shape == (3, 1, 5, 5)
    post_shape = jax.eval_shape(fam.posterior, jax.tree_util.tree_map(lambda a: a[0], stats))
    assert isinstance(post_shape, AutoRegressive) and post_shape.loc.shape == (1, 2, 5) and post_shape.order == 2
    n_leaves = len(jax.tree_util.tree_leaves(fam))
    sentinel = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(fam), [object()] * n_leaves)
    assert isinstance(sentinel, AutoRegressive) and sentinel.order == 2
    fams = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), fam)
    out = jax.jit(jax.vmap(lambda f: f.log_marginal_likelihood(jax.tree_util.tree_map(lambda a: a[0], stats))))(fams)
    assert out.shape == (2, 1) and np.all(np.isfinite(np.asarray(out)))
    assert "AutoRegressive" in repr(fam)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(order=0), "order"),
        (dict(order=1.5), "order"),
        (dict(loc=np.zeros((2, 4))), "loc"),
        (dict(col_precision=np.eye(4)), "col_precision"),
        (dict(col_precision=-np.eye(3)), "col_precision"),
        (dict(df=0.5), "df"),
        (dict(scale=np.array([[1.0, 3.0], [3.0, 1.0]])), "scale"),
        (dict(scale=np.eye(3)), "scale"),
        (dict(affine=False), "loc"),  # loc has the intercept column
    ],
)
def test_bad_arguments(kwargs, name):
    args = dict(order=1, loc=np.zeros((2, 3)), col_precision=np.eye(3), df=4.0, scale=np.eye(2), affine=True)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        AutoRegressive(**args)


def test_float32():
    with jax.enable_x64(False):
        fam = AutoRegressive(1, np.zeros((2, 3)), np.eye(3), 4.0, np.eye(2))
        assert fam.loc.dtype == jnp.float32

        @jax.jit
        def run(fam):
            params = fam.sample_parameters(jax.random.key(0), (2,))
            states = jnp.arange(30) % 2
            y = fam.sample_observations(jax.random.key(1), params, states)
            x, valid = fam.prepare(y)
            stats = fam.sufficient_statistics(x, state_weights(states, valid, 2))
            return (y, fam.log_marginal_likelihood(stats), fam.log_likelihoods(x, params),
                    fam.log_predictive(jax.tree_util.tree_map(lambda a: a[0], x), stats), fam.log_prior(params))

        for a in run(fam):
            assert a.dtype == jnp.float32 and np.all(np.isfinite(np.asarray(a)))
