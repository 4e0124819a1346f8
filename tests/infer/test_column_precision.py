"""Fox et al.'s (2011) ARD column precisions of autoregressive dynamics
(:mod:`numpyro_hdphmm.infer.moves.column_precision`): the recognition of the site, the update
against the analytic conditional, the update's invariance of the prior (with negative controls
that must fail it) and, slow, the whole kernel's Geweke test with the site.

Model: ``lambda_j ~ Gamma(a, b)`` (``j = 1..m``, or one ``lambda`` for every column),
``Sigma_k ~ IW(df, scale)``, ``A_k | Sigma_k ~ MN(loc, Sigma_k, diag(lambda)^{-1})``; the full
conditional is ``lambda_j | A, Sigma ~ Gamma(a + K D / 2, b + 1/2 sum_k (a_kj - m_j)^T
Sigma_k^{-1} (a_kj - m_j))``.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, PGAS, RCDSampler, WeakLimitGibbs
from numpyro_hdphmm.infer.moves.column_precision import column_precision_posterior, sample_column_precision

from _checks import geweke_z_scores

D, K = 2, 3
M = D + 1  # order 1 with an intercept
A0, B0 = 2.0, 0.5  # the Gamma(shape, rate) prior of every column precision
DF, SCALE = D + 2.0, 0.5
CENTER = np.array([3.0, -2.0])
Y = np.cumsum(np.random.default_rng(0).standard_normal((30, D)), 0) * 0.1


def family(col_precision, center=None, loc=None):
    loc = jnp.zeros((D, M)) if loc is None else loc
    return nh.emissions.AutoRegressive(1, loc=loc, col_precision=col_precision, df=DF, scale=SCALE * jnp.eye(D),
                                       center=center)


def ar_model(form="vector", center=None, max_states=4):
    """An AR-HMM whose dynamics' column precisions are the site ``ard`` (``form``: ``"vector"``
    a precision per column, ``"scalar"`` one for all columns, ``"centred"`` the diagonal given in
    the centred coordinates, ``"feeds_kappa"`` the site also in ``kappa``, ``"feeds_loc"`` in the
    dynamics' ``loc``, ``"hyperprior"`` a
    Gamma whose rate is another site)."""

    def model(y):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 4.0)) if form == "hyperprior" else B0
        prior = dist.Gamma(A0, rate)
        ard = numpyro.sample("ard", prior if form == "scalar" else prior.expand([M]).to_event(1))
        col_precision = ard * jnp.eye(M) if form == "scalar" else jnp.diag(ard)
        if form == "centred":
            dyn = nh.emissions.AutoRegressive.centred(1, jnp.zeros((D, M)), col_precision, DF, SCALE * jnp.eye(D),
                                                      center=CENTER)
        else:
            dyn = family(col_precision, center, ard[0] * jnp.ones((D, M)) if form == "feeds_loc" else None)
        kappa = 5.0 + (jnp.sum(ard) if form == "feeds_kappa" else 0.0)
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, kappa, dyn, max_states=max_states), obs=y)

    return model


def slds_model(y):
    ard = numpyro.sample("ard", dist.Gamma(A0, B0).expand([M]).to_event(1))
    obs = nh.LinearGaussianObservation(D, D, C=np.eye(D), noise="diagonal", scale=0.02 * np.eye(D))
    nh.sample("y", nh.HDPSLDS(1.0, 1.0, 5.0, family(jnp.diag(ard)), obs, max_states=4), obs=y)


def row(kernel, site="ard"):
    return {u.site: u for u in kernel.update_plan(Y)}[site]


# ------------------------------------------------------------------------------ recognition
@pytest.mark.parametrize("model", [ar_model(), ar_model(center=CENTER), ar_model("scalar"), slds_model],
                         ids=["ar_hmm", "centred_family", "one_precision", "slds"])
def test_plan_lists_the_site_as_exact(model):
    """A precision per column (``diag``), also for a family centred far from zero (the density is the
    same function of ``diag(lambda)`` in the original coordinates), and one precision for every
    column (``lambda I``); on an AR-HMM and on an HDP-SLDS."""
    u = row(WeakLimitGibbs(model))
    assert u.update == "exact" and "ARD" in u.reason and "Fox et al. 2011" in u.reason, u


def test_the_kernels_that_keep_the_parameters_explicit_draw_it():
    for kernel in (BeamSampler, PGAS):
        assert row(kernel(ar_model())).update == "exact"
    for kernel in (DirectAssignmentGibbs, RCDSampler):  # A integrated out in the sweep: the inner kernel's
        u = row(kernel(ar_model()))
        assert u.update == "inner" and "integrates A out" in u.reason, u


@pytest.mark.parametrize("form, why", [("feeds_kappa", "also enters other sites"),
                                       ("feeds_loc", "the emission's other hyperparameters"),
                                       ("hyperprior", "parameters depend on other sites"),
                                       ("centred", "not as its diagonal")])
def test_other_forms_go_to_the_inner_kernel(form, why):
    """A site that also sets ``kappa`` or the dynamics' ``loc``, a Gamma whose rate is another site, a
    diagonal given in the centred coordinates of a family with a center (not diagonal in the
    original ones)."""
    u = row(WeakLimitGibbs(ar_model(form)))
    assert u.update == "inner" and why in u.reason, u


def test_tempering_refuses_the_site():
    with pytest.raises(NotImplementedError, match="ARD column precisions"):
        WeakLimitGibbs(ar_model(), tempering=3).update_plan(Y)


# ----------------------------------------------------------------------- the update itself
def _quadratic_forms(A, cov, loc):
    """``q_j = sum_k (a_kj - m_j)^T Sigma_k^{-1} (a_kj - m_j)``, with numpy, column by column."""
    q = np.zeros(A.shape[-1])
    for k in range(A.shape[0]):
        for j in range(A.shape[-1]):
            e = A[k, :, j] - loc[:, j]
            q[j] += e @ np.linalg.solve(cov[k], e)
    return q


@pytest.mark.parametrize("shared", [False, True], ids=["per_column", "one_precision"])
def test_update_matches_the_analytic_conditional(shared):
    """4000 draws given fixed ``A, Sigma`` (``K = 3`` slots, a family centred away from zero with a
    non-zero ``loc``): every column's draws against ``scipy.stats.gamma`` with the shape and rate of
    the conditional computed here with numpy (KS tests), and the posterior's parameters exactly."""
    rng = np.random.default_rng(1)
    loc = rng.standard_normal((D, M))
    fam = family(jnp.eye(M), CENTER, loc)
    params = fam.sample_parameters(jax.random.key(2), (K,))
    A, cov = np.asarray(params["A"]), np.asarray(params["cov"])
    q = _quadratic_forms(A, cov, loc)
    shape, rate = (A0 + K * D * M / 2, B0 + q.sum() / 2) if shared else (A0 + K * D / 2 * np.ones(M), B0 + q / 2)
    prior = (jnp.asarray(A0), jnp.asarray(B0)) if shared else (jnp.full(M, A0), jnp.full(M, B0))
    got = column_precision_posterior(fam, params, prior)
    np.testing.assert_allclose(got[0], shape, rtol=1e-10)
    np.testing.assert_allclose(got[1], rate, rtol=1e-8)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample_column_precision(k, fam, params, prior)))(
        jax.random.split(jax.random.key(3), 4000)))
    draws = draws[:, None] if shared else draws
    shape, rate = np.broadcast_to(shape, draws.shape[1:]), np.broadcast_to(rate, draws.shape[1:])
    p = [stats.kstest(draws[:, j], stats.gamma(shape[j], scale=1.0 / rate[j]).cdf).pvalue for j in range(draws.shape[1])]
    print("KS p-values against the analytic conditional:", np.round(p, 3))
    assert min(p) > 1e-3, p


def _wrong_count(emission, params, prior):
    """Wrong: ``K D`` in the shape instead of ``K D / 2``."""
    shape, rate = column_precision_posterior(emission, params, prior)
    return shape + params["A"].shape[0] * emission.dim / 2.0, rate


def _sigma_ignored(emission, params, prior):
    """Wrong: the quadratic forms without ``Sigma_k^{-1}`` (``Sigma_k = I``)."""
    eye = jnp.broadcast_to(jnp.eye(emission.dim), params["cov"].shape)
    return column_precision_posterior(emission, {**params, "cov": eye}, prior)


VARIANTS = {"exact": column_precision_posterior, "wrong_count": _wrong_count, "sigma_ignored": _sigma_ignored}


def prior_invariance(num_draws=4000, seed=0):
    """``{(family, variant): draws (num_draws, m)}`` of ``lambda'`` after one update from the joint
    prior: ``lambda ~ Gamma(a, b)`` per column, ``(A, Sigma) ~ MNIW(loc, diag(lambda), df, scale)``
    over ``K`` slots, ``lambda' | A, Sigma`` by each of :data:`VARIANTS` (``(emission, params,
    prior) -> (shape, rate)``) on the same draws, for a plain family (``"plain"``) and one centred
    far from zero (``"centred"``).  An exact update leaves the prior invariant: ``lambda'`` is
    ``Gamma(a, b)`` again."""
    loc = jnp.asarray(np.random.default_rng(5).standard_normal((D, M)))
    prior = (jnp.full(M, A0), jnp.full(M, B0))

    def one(key):
        out = {}
        for i, (name, center) in enumerate((("plain", None), ("centred", jnp.asarray(CENTER)))):
            k_lam, k_par, k_up = jax.random.split(jax.random.fold_in(key, i), 3)
            lam = jax.random.gamma(k_lam, jnp.full(M, A0)) / B0
            fam = family(jnp.diag(lam), center, loc)
            params = fam.sample_parameters(k_par, (K,))
            for variant, posterior in VARIANTS.items():
                shape, rate = posterior(fam, params, prior)
                out[name, variant] = jax.random.gamma(k_up, shape) / rate
        return out

    draws = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), num_draws))
    return {k: np.asarray(d) for k, d in draws.items()}


def invariance_scores(draws):
    """``(KS p-values, z of the mean, z of the variance)`` of each column's draws against ``Gamma(a, b)``."""
    n = draws.shape[0]
    mean, var = A0 / B0, A0 / B0 ** 2
    ks = np.array([stats.kstest(draws[:, j], stats.gamma(A0, scale=1.0 / B0).cdf).pvalue for j in range(M)])
    z_mean = (draws.mean(0) - mean) / np.sqrt(var / n)
    # the sample variance's standard error from the Gamma's fourth central moment 3 a (a + 2) / b^4
    mu4 = 3 * A0 * (A0 + 2) / B0 ** 4
    z_var = (draws.var(0, ddof=1) - var) / np.sqrt((mu4 - var ** 2) / n)
    return ks, z_mean, z_var


def test_update_leaves_the_prior_invariant():
    """Prior invariance (a joint check of the conditional): ``lambda`` from the prior, ``A, Sigma``
    given it, ``lambda'`` by the update must be ``Gamma(a, b)`` again (per column: KS test, z-scores
    of the mean and variance; 10000 draws), for a plain family and one centred far from zero.
    Negative controls on the same draws: ``K D`` for ``K D / 2`` in the shape, and ``Sigma`` left
    out of the quadratic forms, fail the same check."""
    for (fam, variant), d in prior_invariance(num_draws=10000, seed=1).items():
        ks, z_mean, z_var = invariance_scores(d)
        print(f"{fam}, {variant}: KS p {ks}, z(mean) {np.round(z_mean, 2)}, z(var) {np.round(z_var, 2)}")
        if variant == "exact":
            assert ks.min() > 1e-3 and np.abs(z_mean).max() < 4 and np.abs(z_var).max() < 4, (fam, ks, z_mean, z_var)
        else:
            assert ks.max() < 1e-6 and np.abs(z_mean).min() > 6, (fam, variant, ks, z_mean, z_var)


# ---------------------------------------------------------------------- the kernel's sweep
@pytest.mark.slow
def test_the_sweep_draws_it():
    """In a WeakLimitGibbs run the site moves every sweep (no inner kernel is left: the model has no
    other site)."""
    kernel = WeakLimitGibbs(ar_model(max_states=3))
    assert kernel.update_plan(Y).sites("inner") == ()
    mcmc = numpyro.infer.MCMC(kernel, num_warmup=0, num_samples=4, progress_bar=False)
    mcmc.run(jax.random.key(0), Y)
    ard = np.asarray(mcmc.get_samples()["ard"])
    assert np.all(np.isfinite(ard)) and np.all(ard > 0) and np.all(np.diff(ard, axis=0) != 0), ard


def ard_geweke(seed=0):
    """Geweke z-scores of the whole WeakLimitGibbs sweep with the ARD site on a short AR-HMM (``L =
    3``, ``T = 8``): the column precisions and entries of the first slot's ``A``."""
    L, T = 3, 8

    def model(y=None, num_steps=T):
        ard = numpyro.sample("ard", dist.Gamma(A0, B0).expand([M]).to_event(1))
        dyn = family(jnp.diag(ard))
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 2.0, dyn, max_states=L, num_steps=num_steps), obs=y)

    statistics = {
        **{f"log_ard_{j}": (lambda z, j=j: jnp.log(z["ard"][j])) for j in range(M)},
        "ard_0": lambda z: z["ard"][0],
        "A_lag": lambda z: z["y_A"][0, 0, 0],
        "A_intercept": lambda z: z["y_A"][0, 1, -1],
    }
    weak = nh.infer.weak_limit(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return geweke_z_scores(WeakLimitGibbs(model, init_strategy="prior"), weak, statistics, num_steps=T,
                               num_iterations=4000, num_prior=4000, seed=seed)


@pytest.mark.slow
@pytest.mark.statistical
def test_geweke_weak_limit_with_ard():
    """The whole WeakLimitGibbs sweep with the ARD site (FFBS, MNIW conditionals of every slot, the
    column precisions given them, the global step) by Geweke's joint-distribution test."""
    z = ard_geweke()
    print("ARD Geweke z (WeakLimitGibbs):", {k: round(float(v), 2) for k, v in z.items()})
    assert max(abs(v) for v in z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_negative_control(monkeypatch):
    """The same Geweke test catches a sweep whose column precisions are drawn with ``K D`` instead
    of ``K D / 2`` in the Gamma shape."""
    import numpyro_hdphmm.infer.moves.column_precision as moves

    monkeypatch.setattr(moves, "column_precision_posterior", _wrong_count)
    z = ard_geweke()
    print("ARD Geweke z, K D for K D / 2:", {k: round(float(v), 2) for k, v in z.items()})
    assert max(abs(v) for v in z.values()) > 4.0, z
