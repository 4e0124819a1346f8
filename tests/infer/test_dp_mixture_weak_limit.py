"""WeakLimitGibbs with DP-mixture emissions (Fox et al. Alg. 4): exact enumeration, recognition
of the concentration site, Geweke, and Fox et al.'s experiment B."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from scipy.special import gammaln, logsumexp, roots_genlaguerre

import numpyro_hdphmm as nh
from numpyro_hdphmm.emissions import Categorical, DPMixture, dp_mixture
from numpyro_hdphmm.infer import WeakLimitGibbs, discover
from numpyro_hdphmm.infer import weak_limit  # the function (the module of the same name is numpyro_hdphmm.infer.algorithms.weak_limit)

from _checks import _log_dirmult_rows, _simplex_rule, empirical_tv, geweke_z_scores, partition_key, tv_bound

GAMMA, ALPHA, KAPPA, L, LC, C = 3.0, 2.0, 1.5, 2, 2, 2
SIGMA_SHAPE, SIGMA_RATE = 2.0, 1.0
Y = [0, 0, 1, 1, 0]
Y_RUN = [0, 0, 0, 0, 0]  # one long run: the weights' posterior is far from their prior


def dp_model(y):
    sigma = numpyro.sample("sigma", dist.Gamma(SIGMA_SHAPE, SIGMA_RATE))
    emission = DPMixture(Categorical(C, 1.0), sigma, LC)
    nh.sample("y", nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, emission, max_states=L), obs=y)


def exact_dp_posterior(y):
    """Exact posterior of the weak-limit sticky HDP-HMM with DP-mixture (Dir(sigma/L')) categorical
    emissions: component indicators enumerated, psi and theta integrated (Dirichlet-multinomial),
    rows integrated, beta ~ Dir(gamma/L) by quadrature, sigma ~ Gamma by generalized Gauss-Laguerre.

    Returns ``{partition: prob}`` and the exact posterior means of two label-invariant statistics:
    ``sigma`` and ``pred`` = the predictive probability that the next observation is 0,
    ``sum_k pi_{z_T k} sum_j psi_kj theta_kj0`` (rows, weights and components all enter), and
    ``purity`` = ``sum_j psi_{z_T j}^2`` (how concentrated the last state's mixture weights are)."""
    y = np.asarray(y)
    T = len(y)
    nodes, weights = _simplex_rule(L)
    log_prior_beta = gammaln(GAMMA) - L * gammaln(GAMMA / L) + np.sum((GAMMA / L - 1) * np.log(nodes), -1)
    s_nodes, s_wts = roots_genlaguerre(80, SIGMA_SHAPE - 1.0)
    sigma = s_nodes / SIGMA_RATE  # prior normalizing constants cancel
    sg = sigma[:, None, None]
    post, log_total, e_sigma, e_pred, e_purity = {}, [], [], [], []
    for z in itertools.product(range(L), repeat=T):
        z = np.array(z)
        n = np.zeros((L, L))
        np.add.at(n, (z[:-1], z[1:]), 1)
        first = np.zeros(L)
        first[z[0]] = 1
        log_pz_b = np.log(weights) + log_prior_beta + np.array([
            _log_dirmult_rows(first[None], ALPHA * b[None]) + _log_dirmult_rows(n, ALPHA * b[None] + KAPPA * np.eye(L))
            for b in nodes
        ])
        last = z[-1]
        e_pi = (ALPHA * nodes + KAPPA * np.eye(L)[last] + n[last]) / (ALPHA + KAPPA + n[last].sum())  # (nodes, L)
        w_b = np.exp(log_pz_b - logsumexp(log_pz_b))
        a = w_b @ e_pi  # E[pi_{z_T k} | z]
        log_w, pred_k, purity = [], [], []
        for s in itertools.product(range(LC), repeat=T):
            s = np.array(s)
            counts = np.zeros((L, LC))
            np.add.at(counts, (z, s), 1)
            cy = np.zeros((L, LC, C))
            np.add.at(cy, (z, s, y), 1)
            log_py = _log_dirmult_rows(cy.reshape(L * LC, C), np.ones((L * LC, C)))
            nk = counts.sum(-1)
            log_ps = np.sum(gammaln(sg[..., 0]) - gammaln(sg[..., 0] + nk), -1) + np.sum(
                gammaln(sg / LC + counts) - gammaln(sg / LC), (-1, -2))
            log_w.append(np.log(s_wts) + log_ps + log_py)
            e_psi = (sg / LC + counts) / (sg[..., 0] + nk)[..., None]  # (sigma nodes, L, L')
            e_theta0 = (1.0 + cy[..., 0]) / (C + counts)
            pred_k.append(np.sum(e_psi * e_theta0, -1))  # (sigma nodes, L)
            a_post = (sg / LC + counts)[:, last]  # Dirichlet parameters of psi_{z_T}
            a_sum = sg[:, 0, 0] + nk[last]
            purity.append(np.sum(a_post * (a_post + 1), -1) / (a_sum * (a_sum + 1)))
        log_w, pred_k = np.array(log_w), np.array(pred_k)  # (s, nodes), (s, nodes, L)
        w_s = np.exp(log_w - logsumexp(log_w))
        log_joint = logsumexp(log_pz_b) + logsumexp(log_w)
        key = partition_key(z)
        post[key] = np.logaddexp(post.get(key, -np.inf), log_joint)
        log_total.append(log_joint)
        e_sigma.append(np.sum(w_s * sigma[None]))
        e_pred.append(np.sum(w_s[..., None] * pred_k, (0, 1)) @ a)
        e_purity.append(np.sum(w_s * np.array(purity)))
    log_total = np.array(log_total)
    norm = logsumexp(log_total)
    w_z = np.exp(log_total - norm)
    probs = {k: float(np.exp(v - norm)) for k, v in post.items()}
    return probs, {"sigma": float(w_z @ np.array(e_sigma)), "pred": float(w_z @ np.array(e_pred)),
                   "purity": float(w_z @ np.array(e_purity))}


def _final_draws(model, y, num_chains=3000, num_warmup=40, seed=0):
    mcmc = MCMC(WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=1, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(seed), np.asarray(y))
    s = {k: np.asarray(v).reshape((num_chains,) + np.shape(v)[1:]) for k, v in mcmc.get_samples().items()}
    last = s["y_states"][:, -1]
    pi_last = s["y_trans"][np.arange(num_chains), last, :L]
    pred = np.sum(pi_last * np.sum(s["y_weights"] * s["y_probs"][..., 0], -1), -1)
    purity = np.sum(s["y_weights"][np.arange(num_chains), last] ** 2, -1)
    return s["y_states"], {"sigma": s["sigma"], "pred": pred, "purity": purity}


@pytest.fixture(scope="module")
def exact():
    return exact_dp_posterior(Y)


@pytest.fixture(scope="module")
def exact_run():
    return exact_dp_posterior(Y_RUN)


def _compare(exact, draws):
    probs, means = exact
    states, stats = draws
    tv, bound = empirical_tv(probs, states), tv_bound(probs.values(), len(states))
    z = {k: (v.mean() - means[k]) / (v.std() / np.sqrt(len(v))) for k, v in stats.items()}
    return tv, bound, z


Z_LIMIT = 4.0


@pytest.mark.slow  # 58 s; the family's update is checked exactly in tests/emissions/test_dp_mixture.py
@pytest.mark.statistical
def test_enumeration_states_concentration_and_predictive(exact):
    tv, bound, z = _compare(exact, _final_draws(dp_model, Y))
    assert tv < bound and max(abs(v) for v in z.values()) < Z_LIMIT, (tv, bound, z, exact[1])


@pytest.mark.slow
@pytest.mark.statistical
def test_enumeration_single_run_of_symbols(exact_run):
    """The same check on the data of the negative control below (the correct sampler passes)."""
    tv, bound, z = _compare(exact_run, _final_draws(dp_model, Y_RUN))
    assert tv < bound and max(abs(v) for v in z.values()) < Z_LIMIT, (tv, bound, z, exact_run[1])


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_psi_without_counts(exact_run, monkeypatch):
    """Negative control: psi_k ~ Dir(sigma/L') ignoring the indicator counts (eq. 65 wrong)."""
    monkeypatch.setattr(dp_mixture, "_psi_posterior_concentration", lambda c, n, counts: c / n + 0.0 * counts)
    tv, bound, z = _compare(exact_run, _final_draws(dp_model, Y_RUN))
    print("negative control:", tv, bound, z)
    assert tv > bound or max(abs(v) for v in z.values()) > Z_LIMIT, (tv, bound, z)


# ----------------------------------------------------------------------------- recognition
def _recognized(model, *args, own_dp_concentration=True):
    spec = discover(weak_limit(model), args, {}, own_dp_concentration=own_dp_concentration)
    return spec.hyper


def test_concentration_site_recognition():
    y = np.array(Y)
    hyper = _recognized(dp_model, y)
    assert hyper.dp_concentration == "sigma" and "sigma" in hyper.sites
    # an algorithm that does not update the concentration exactly leaves it to the inner kernel
    assert _recognized(dp_model, y, own_dp_concentration=False).dp_concentration is None

    def shared(y):  # sigma also sets the base prior: it feeds something else
        sigma = numpyro.sample("sigma", dist.Gamma(2.0, 1.0))
        emission = DPMixture(Categorical(C, sigma), sigma, LC)
        nh.sample("y", nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, emission, max_states=L), obs=y)

    assert _recognized(shared, y).dp_concentration is None

    def same_as_gamma(y):  # one site for gamma and sigma: neither update applies alone
        g = numpyro.sample("g", dist.Gamma(2.0, 1.0))
        emission = DPMixture(Categorical(C, 1.0), g, LC)
        nh.sample("y", nh.StickyHDPHMM(g, ALPHA, KAPPA, emission, max_states=L), obs=y)

    hyper = _recognized(same_as_gamma, y)
    assert hyper.dp_concentration is None and hyper.gamma is None

    def transformed(y):  # any way of writing the model: sigma passed through arithmetic
        s = numpyro.sample("s", dist.Gamma(2.0, 1.0))
        emission = DPMixture(Categorical(C, 1.0), 1.0 * s, LC)
        nh.sample("y", nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, emission, max_states=L), obs=y)

    assert _recognized(transformed, y).dp_concentration == "s"


# ---------------------------------------------------------------------------------- Geweke
def geweke_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
    sigma = numpyro.sample("sigma", dist.Gamma(2.0, 1.0))
    emission = DPMixture(Categorical(3, 1.0), sigma, 2)
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=3, num_steps=num_steps), obs=y)


def _geweke_stats():
    def self_rate(z):
        s = z["y_states"]
        return jnp.mean(s[1:] == s[:-1])

    return {
        "sigma": lambda z: z["sigma"],
        "gamma": lambda z: z["gamma"],
        "kappa": lambda z: z["kappa"],
        "psi00": lambda z: z["y_weights"][0, 0],
        "psi_max": lambda z: jnp.max(z["y_weights"][0]),
        "probs000": lambda z: z["y_probs"][0, 0, 0],
        "self_rate": self_rate,
    }


GEWEKE_LIMIT = 4.5


@pytest.mark.slow
@pytest.mark.statistical
def test_geweke_dp_emissions_with_all_hyperparameters():
    z = geweke_z_scores(WeakLimitGibbs(geweke_model), weak_limit(geweke_model), _geweke_stats(), num_steps=8,
                        num_iterations=6000, num_prior=6000)
    print("Geweke z-scores:", z)
    assert max(abs(v) for v in z.values()) < GEWEKE_LIMIT, z


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_detects_concentration_update_without_tables(monkeypatch):
    """Negative control: sigma updated with components in use instead of CRP tables."""
    monkeypatch.setattr(dp_mixture.crp, "sample_crp_tables",
                        lambda key, counts, conc, total: (jnp.asarray(counts) > 0).astype(jnp.int32))
    z = geweke_z_scores(WeakLimitGibbs(geweke_model), weak_limit(geweke_model), _geweke_stats(), num_steps=8,
                        num_iterations=6000, num_prior=6000)
    print("Geweke z-scores (broken sigma update):", z)
    assert abs(z["sigma"]) > GEWEKE_LIMIT, z


# ------------------------------------------------------------------- Fox et al. experiment B
@pytest.mark.slow
@pytest.mark.paper
def test_fox_experiment_b():
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    from experiment_b import run_variants

    results = run_variants(num_steps=1000, num_sweeps=150, num_chains=4, seed=0)
    print({k: (np.median(r["hamming"]), np.median(r["num_states"])) for k, r in results.items()})
    sticky_dp = results["sticky + DP"]
    assert np.median(sticky_dp["num_states"]) == 2, results
    for single in ("sticky, single Gaussian", "non-sticky, single Gaussian"):
        assert np.median(sticky_dp["hamming"]) < np.median(results[single]["hamming"]), results
    assert np.median(sticky_dp["hamming"]) < 0.1, results
