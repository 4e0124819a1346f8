"""Replica exchange (``tempering=``) and the stepping-stone evidence.

The exactness of the untempered rung is checked by the conformance suite
(``test_conformance.py::test_enumeration[WeakLimitGibbs-tempered-*]``, negative control
``OneSidedWeakLimitGibbs-tempered``); here: the evidence against the exact ``log p(y)``, the ladder's
adaptation, the collected fields and the refusals.
"""

import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer.moves import tempering
from numpyro_hdphmm.infer.plumbing import reporting
from numpyro_hdphmm.results import evidence

from _checks import exact_weak_limit_log_evidence

GAMMA, ALPHA, KAPPA, L, C = 3.0, 2.0, 1.5, 3, 2
Y = np.array([0, 0, 1, 1, 0])


def fixed_model(y):
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=L)
    nh.sample("y", hmm, obs=y)


def _run(kernel, num_warmup, num_samples, num_chains=2, seed=0, y=Y):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(seed), y)
    return mcmc


@pytest.fixture(scope="module")
def evidence_run():
    """8 rungs, 8 chains: warmup adapts the ladder, 1500 draws per chain."""
    return _run(nh.infer.WeakLimitGibbs(fixed_model, tempering=8), 200, 1500, num_chains=8)


@pytest.mark.statistical
def test_log_evidence_matches_exact(evidence_run):
    """The stepping-stone ``log p(y)`` within 4 Monte Carlo standard errors of the exact evidence
    (every labelling summed, ``beta`` by quadrature)."""
    exact = exact_weak_limit_log_evidence([list(Y)], L, GAMMA, ALPHA, KAPPA, C, 1.0)
    est = nh.log_evidence(evidence_run)
    print(f"log p(y): exact {exact:.4f}, stepping stones {est.log_evidence:.4f} +- {est.mc_error:.4f}")
    assert est.mc_error < 0.05
    assert abs(est.log_evidence - exact) < 4 * est.mc_error + 1e-3


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_log_evidence_detects_wrong_rung(evidence_run, monkeypatch):
    """Negative control: each step's expectation taken over the upper rung's draws instead of the
    lower's is rejected by the same bound."""
    def upper(ladder, ll):
        steps = np.diff(ladder)
        return evidence.logsumexp(steps[None, :] * ll[:, 1:], axis=0) - np.log(ll.shape[0])

    monkeypatch.setattr(evidence, "_stepping_stones", upper)
    exact = exact_weak_limit_log_evidence([list(Y)], L, GAMMA, ALPHA, KAPPA, C, 1.0)
    est = nh.log_evidence(evidence_run)
    print(f"wrong rung: exact {exact:.4f}, estimate {est.log_evidence:.4f} +- {est.mc_error:.4f}")
    assert abs(est.log_evidence - exact) > 4 * est.mc_error + 1e-3


def test_collected_fields_and_ladder(evidence_run):
    """The ladder is fixed after warmup, runs from 0 to 1, and its swap rates are about equal
    (the adaptation's aim); each pair proposes every other sweep."""
    f = evidence_run.get_extra_fields(group_by_chain=True)
    ladder, swaps, ll = (np.asarray(f[k]) for k in ("inverse_temperatures", "swap_accept", "replica_log_likelihood"))
    assert ladder.shape == ll.shape == (8, 1500, 8) and swaps.shape == (8, 1500, 7)
    assert np.all(ladder == ladder[:, :1]) and np.all(ladder[..., 0] == 0) and np.all(ladder[..., -1] == 1)
    assert np.all(np.diff(ladder, axis=-1) > 0)
    untried = np.sum(np.isnan(swaps), axis=-1)  # pairs (0, 2, 4, 6) and (1, 3, 5) alternate
    assert set(np.unique(untried)) == {3, 4} and np.all(np.abs(np.diff(untried, axis=1)) == 1)
    rates = np.nanmean(swaps, axis=(0, 1))
    print("swap rates", np.round(rates, 3), "ladder", np.round(ladder[0, 0], 4))
    assert rates.min() > 0.5 and rates.max() - rates.min() < 0.2
    assert np.all(ll <= 0)  # categorical log-likelihoods
    samples = evidence_run.get_samples()
    assert samples["y_states"].shape == (8 * 1500, 5)
    # the run's counters (reporting.Events) saw the same swaps: attempts and summed acceptance per pair
    events = evidence_run.last_state.events
    attempts = np.asarray(events.swap_attempts).sum(0)
    milli = np.asarray(events.swap_milli).sum(0)
    np.testing.assert_array_equal(attempts, np.sum(~np.isnan(swaps), axis=(0, 1)))
    np.testing.assert_allclose(milli / 1000, np.nansum(swaps, axis=(0, 1)), atol=0.0005 * attempts.max() + 1e-9)
    assert not reporting.swaps_stalled(attempts, milli).any()  # so the run did not warn


def test_stalled_swaps_rule():
    """The warning's rule: a pair below a mean acceptance of 1% over at least 20 attempts after
    warmup (all chains) warns, once per run; a pair at 1% or with fewer attempts does not."""
    token = reporting.new_token()
    rep = reporting.Report("WeakLimitGibbs", 3, ("y_probs", "lp"), False, token, 3)

    def check(attempts, milli, new_run=True):
        if new_run:
            reporting.start_run(token)
        events = reporting.Events.zeros(rep).add(False, False, False, False, False, [0, 0], np.asarray(attempts),
                                                 np.asarray(milli))
        leaves, tree = jax.tree_util.tree_flatten(events)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jax.tree_util.tree_unflatten(tree, [np.asarray(v) for v in leaves])
        return [str(w.message) for w in caught if "exchanged" in str(w.message)]

    assert check([100, 100, 100], [50000, 1000, 60000]) == []  # pair 1-2 at exactly 1%: quiet
    msg = check([100, 100, 100], [50000, 999, 60000])
    assert len(msg) == 1 and "1-2: 0.010 over 100" in msg[0] and "0-1" not in msg[0] and "tempering=" in msg[0]
    assert check([100, 100, 100], [0, 0, 0], new_run=False) == []  # once per run
    assert check([19, 19, 19], [0, 0, 0]) == []  # too few attempts to judge
    assert len(check([[10, 50, 50], [10, 50, 50]], [[0, 9000, 9000], [0, 9000, 9000]])) == 1  # two chains: 20


@pytest.mark.slow
def test_stalled_swaps_warn_end_to_end():
    """Two rungs, prior and posterior, on 300 steps that the posterior fits far better than any prior
    draw: their swaps are never accepted and the run says so."""
    y = np.repeat([0, 1], 150)
    with pytest.warns(RuntimeWarning, match="almost never exchanged"):
        mcmc = _run(nh.infer.WeakLimitGibbs(fixed_model, tempering=[0.0, 1.0]), 20, 30, y=y)
    rates = np.nanmean(np.asarray(mcmc.get_extra_fields()["swap_accept"]))
    assert rates < 0.01


def test_inference_data_and_pickle(evidence_run):
    """ArviZ's ``sample_stats`` carries the tempering fields; the kernel pickles."""
    idata = nh.to_inference_data(evidence_run)
    assert "swap_accept" in idata.sample_stats and "inverse_temperatures" in idata.sample_stats
    kernel = pickle.loads(pickle.dumps(nh.infer.WeakLimitGibbs(fixed_model, tempering=3)))
    assert kernel.algorithm.num_replicas == 3 and "swap_accept" in kernel.default_fields


def test_adapted_ladder_equalizes_barrier():
    """One adaptation: rungs placed at equal cumulative rejection; the end points stay."""
    ladder = np.array([0.0, 0.25, 0.5, 0.75, 1.0])
    new = np.asarray(tempering.adapted_ladder(jax.numpy.asarray(ladder), jax.numpy.asarray([0.9, 0.1, 0.1, 0.1])))
    assert new[0] == 0.0 and new[-1] == 1.0 and np.all(np.diff(new) > 0)
    assert new[1] < 0.25  # the first pair rejected most: its rungs move together
    barrier = np.concatenate([[0], np.cumsum([0.9, 0.1, 0.1, 0.1])])
    assert np.allclose(np.interp(new, ladder, barrier), np.linspace(0, 1.2, 5))


@pytest.mark.parametrize("bad", [1, 0, True, [0.0, 0.5], [0.1, 1.0], [0.0, 0.7, 0.5, 1.0], "4", [[0.0, 1.0]]])
def test_bad_tempering_is_refused(bad):
    with pytest.raises(ValueError, match="tempering"):
        nh.infer.WeakLimitGibbs(fixed_model, tempering=bad)


@pytest.mark.parametrize("cls", [nh.infer.DirectAssignmentGibbs, nh.infer.BeamSampler, nh.infer.RCDSampler, nh.infer.PGAS])
def test_kernels_without_tempering_refuse_it(cls):
    with pytest.raises(NotImplementedError, match="WeakLimitGibbs"):
        cls(fixed_model, tempering=4)


def test_models_without_exact_tempering_are_refused():
    with pytest.raises(NotImplementedError, match="split_merge=0"):
        nh.infer.WeakLimitGibbs(fixed_model, split_merge=2, tempering=4)

    def mixture(y):
        base = nh.emissions.GaussianNIW(np.zeros(1), 0.1, 3.0, np.eye(1))
        hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.DPMixture(base, 1.0, 3), max_states=L)
        nh.sample("y", hmm, obs=y)

    with pytest.raises(NotImplementedError, match="DPMixture"):
        _run(nh.infer.WeakLimitGibbs(mixture, tempering=3), 1, 1, num_chains=1, y=np.zeros((6, 1)))

    def hyper_mean(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.GaussianNIW(mu[None], 0.1, 3.0, np.eye(1)), max_states=L)
        nh.sample("y", hmm, obs=y)

    with pytest.raises(NotImplementedError, match="inner kernel"):
        nh.infer.WeakLimitGibbs(hyper_mean, tempering=3).update_plan(np.zeros((6, 1)))


def test_log_evidence_refuses_untempered_runs():
    mcmc = _run(nh.infer.WeakLimitGibbs(fixed_model), 2, 3, num_chains=1)
    with pytest.raises(ValueError, match="tempering"):
        nh.log_evidence(mcmc)
    f = {"inverse_temperatures": np.tile([0.0, 0.5, 1.0], (10, 1)), "replica_log_likelihood": np.zeros((10, 3))}
    f["inverse_temperatures"][0, 1] = 0.4
    with pytest.raises(ValueError, match="post-warmup"):
        nh.log_evidence(f)


# --------------------------------------------------------------------------- concentrations per rung
ALPHA_PRIOR = (2.0, 1.0)  # alpha ~ Gamma(2, 1) (rate): the site with an exact update


def alpha_model(y):
    alpha = numpyro.sample("alpha", dist.Gamma(*ALPHA_PRIOR))
    hmm = nh.StickyHDPHMM(GAMMA, alpha, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=L)
    nh.sample("y", hmm, obs=y)


def _exact_with_alpha_prior(num_nodes=40):
    """``p(partition | y)`` and ``E[alpha | y]`` with ``alpha`` integrated out: generalized
    Gauss-Laguerre quadrature of ``int p(y, partition | alpha) Gamma(alpha | 2, 1) d alpha``."""
    from scipy.special import gammaln, roots_genlaguerre

    from _checks import _weak_limit_log_joints

    a, b = ALPHA_PRIOR
    nodes, weights = roots_genlaguerre(num_nodes, a - 1.0)  # int x^(a-1) e^(-x) f(x) dx, x = b alpha
    log_w = np.log(weights) - gammaln(a)
    joints = [_weak_limit_log_joints([list(Y)], L, GAMMA, x / b, KAPPA, C, 1.0) for x in nodes]
    keys = list(joints[0])
    logs = np.array([[j[k] for k in keys] for j in joints]) + log_w[:, None]  # (nodes, partitions)
    total = np.logaddexp.reduce(logs.ravel())
    probs = np.exp(np.logaddexp.reduce(logs, axis=0) - total)
    mean_alpha = float(np.sum(np.exp(logs - total) * (nodes / b)[:, None]))
    return dict(zip(keys, probs)), mean_alpha


def _tempered_final(num_chains=2000, num_warmup=30):
    mcmc = MCMC(nh.infer.WeakLimitGibbs(alpha_model, tempering=4), num_warmup=num_warmup, num_samples=1,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(3), Y)
    s = mcmc.get_samples()
    return np.asarray(s["y_states"]).reshape(num_chains, -1), np.asarray(s["alpha"]).ravel()


def test_every_rung_sweeps_with_its_own_concentrations(monkeypatch):
    """Each rung's sweep sees the concentrations of its own state (a rung samples ``p(x) p(y | x)^b``
    with ``x`` its own concentrations too), not the untempered rung's that the view holds: the
    ``alpha`` each rung's sweep receives, recorded, is its own; the old wiring (the view's on every
    rung), built here, fails the same check."""
    kernel = nh.infer.WeakLimitGibbs(alpha_model, tempering=3)
    state = kernel.init(jax.random.key(0), 0, None, (Y,), {})
    algo, inner = kernel.algorithm, state.algorithm
    alphas = [0.5, 1.5, 4.0]
    replicas = inner.replicas._replace(hyper={**inner.replicas.hyper, "alpha": jnp.asarray(alphas)})
    inner = inner._replace(replicas=replicas)
    spec, view = kernel._spec, kernel._view((Y,), {}, state.z)
    seen = []
    base_step = algo.base.step

    def spy(key, replica, spec, view):
        jax.debug.callback(lambda a: seen.append(float(a)), view.hyper.alpha)
        return base_step(key, replica, spec, view)

    monkeypatch.setattr(algo.base, "step", spy)

    def received():
        seen.clear()
        jax.block_until_ready(algo.step(jax.random.key(1), inner, spec, view))
        jax.effects_barrier()
        return sorted(seen)

    np.testing.assert_allclose(received(), alphas, rtol=1e-6)
    monkeypatch.setattr(tempering, "concentrations_of_sites", lambda spec, values, current: current)
    old = received()
    assert not np.allclose(np.resize(old, 3), alphas), old


@pytest.mark.slow
@pytest.mark.statistical
def test_tempered_rungs_with_a_concentration_prior_match_the_exact_posterior():
    """With ``alpha ~ Gamma(2, 1)`` (an exact update) the untempered rung's partitions and ``alpha``
    match the exact posterior, ``alpha`` integrated out by quadrature (the wiring that gives each
    rung its own concentrations: :func:`test_every_rung_sweeps_with_its_own_concentrations`)."""
    from _checks import empirical_tv, tv_bound

    exact, mean_alpha = _exact_with_alpha_prior()
    states, alpha = _tempered_final()
    tv, bound = empirical_tv(exact, states), tv_bound(exact.values(), len(states))
    z = (alpha.mean() - mean_alpha) / (alpha.std() / np.sqrt(len(alpha)))
    print(f"tempered, alpha with a prior: TV {tv:.4f} (bound {bound:.4f}), alpha z {z:.2f} (exact E {mean_alpha:.3f})")
    assert tv < bound and abs(z) < 4.0
