"""PGAS (particle Gibbs with ancestor sampling, Tripuraneni et al. 2015): the conditional SMC
with transitions and emissions held fixed against the exact posterior over state sequences
(with negative controls), negative controls of the enumeration and Geweke checks, custom
emissions against enumeration, several sequences with missing data, input validation.  (The
enumeration of the infinite model's partition posterior (both proposals, N = 2 and 10, sticky
and not), Geweke, agreement with WeakLimitGibbs, BeamSampler and DirectAssignmentGibbs, and the
model check are the conformance suite's, ``test_conformance.py``, driven by
``tests/kernel_registry.py``.)

Each exact check compares independent draws (the last sweep of many vectorized chains) with the
enumerated posterior in total variation against :func:`_checks.tv_bound`."""

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import crp
from numpyro_hdphmm.infer import PGAS, HDPKernel
from numpyro_hdphmm.infer.algorithms import pgas

from kernel_registry import first_state_statistics, geweke_model
from _checks import (three_regime_model, collapsed_jacobian_counted_twice, empirical_tv, exact_infinite_posterior, final_states,
                     geweke_z_scores, printed_gamma_update, tv_bound)


def pgas_kernel(model, num_particles, proposal, hyperparameters="auxiliary"):
    """The algorithm behind ``PGAS`` built directly on ``HDPKernel`` (any proposal, any particle
    count), with the global step's ``hyperparameters`` update (the auxiliary one, which the tests
    below were written for, unless asked)."""

    class Kernel(HDPKernel):
        algorithm = pgas.ParticleGibbs(num_particles, proposal)

    return Kernel(model, hyperparameters=hyperparameters)


def drop_transition_term(real):
    """Negative control: the reference's ancestor drawn with ``P(a = i) ∝ w^i_{t-1}`` only (the
    transition into the reference state left out)."""
    return lambda u, log_w, log_to_ref: real(u, log_w, jnp.zeros_like(log_to_ref))


# ------------------------------------------- conditional SMC with fixed transitions / emissions
FIX_K, FIX_C = 3, 2
FIX_Y = np.array([0, 1, 1, 0])
FIX_CHAINS, FIX_SWEEPS = 4000, 15


def _fixed_problem():
    """A finite HMM: 3 states, no mass left for new states (``beta_rem = 0``, remainder column
    0), categorical emissions."""
    init = np.array([0.5, 0.3, 0.2])
    trans = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]])
    probs = np.array([[0.8, 0.2], [0.3, 0.7], [0.5, 0.5]])
    full = np.zeros((FIX_K + 1, FIX_K + 1))
    full[:FIX_K, :FIX_K] = trans
    full[FIX_K, :FIX_K] = init
    beta = np.array([0.4, 0.3, 0.3, 0.0])
    return init, trans, probs, full, beta


def _exact_sequences():
    """``p(s | y) ∝ init(s_0) f(y_0|s_0) prod_t trans(s_{t-1}, s_t) f(y_t|s_t)``, all ``K^T`` paths."""
    init, trans, probs, _, _ = _fixed_problem()
    out = {}
    for s in itertools.product(range(FIX_K), repeat=len(FIX_Y)):
        p = init[s[0]] * probs[s[0], FIX_Y[0]]
        for t in range(1, len(FIX_Y)):
            p *= trans[s[t - 1], s[t]] * probs[s[t], FIX_Y[t]]
        out[s] = p
    total = sum(out.values())
    return {k: v / total for k, v in out.items()}


def _fixed_smc_draws(proposal, num_particles, seed=0):
    """The last of ``FIX_SWEEPS`` conditional-SMC sweeps (each sweep's reference: the previous
    path) in ``FIX_CHAINS`` independent chains started at the all-zero path."""
    _, _, probs, full, beta = _fixed_problem()
    emission = nh.emissions.Categorical(FIX_C, 1.0)
    graph = pgas.StateGraph(jnp.asarray(beta), jnp.asarray(full), jnp.ones(FIX_K, bool), jnp.zeros((), jnp.int32),
                            jnp.zeros((), bool))
    explicit = jnp.ones(FIX_K, bool)
    x, valid = emission.prepare(jnp.asarray(FIX_Y))
    hyper = crp.Concentrations(jnp.asarray(1.0), jnp.asarray(1.0), jnp.asarray(0.0))
    params = {"probs": jnp.asarray(probs)}

    def chain(key):
        def sweep(ref, k):
            out = pgas.conditional_smc(k, ref, graph, explicit, params, emission, x, valid, len(FIX_Y), hyper, k,
                                       num_particles=num_particles, proposal=proposal)
            return out.states, None

        path, _ = jax.lax.scan(sweep, jnp.zeros(len(FIX_Y), jnp.int32), jax.random.split(key, FIX_SWEEPS))
        return path

    keys = jax.random.split(jax.random.key(seed), FIX_CHAINS)
    return [tuple(int(v) for v in d) for d in np.asarray(jax.jit(jax.vmap(chain))(keys))]


def _fixed_tv(proposal, num_particles):
    exact = _exact_sequences()
    draws = _fixed_smc_draws(proposal, num_particles)
    counts = {}
    for d in draws:
        counts[d] = counts.get(d, 0) + 1
    tv = 0.5 * sum(abs(exact[k] - counts.get(k, 0) / len(draws)) for k in exact)
    return tv, tv_bound(exact.values(), len(draws))


@pytest.mark.statistical
@pytest.mark.parametrize("proposal", ["posterior", "prior"])
def test_conditional_smc_fixed_parameters_exact(proposal):
    """With transitions and emissions held fixed (no mass on new states), the conditional SMC
    with ancestor sampling leaves ``p(s_{1:T} | y)`` invariant: after 15 sweeps the paths of
    4000 chains match the enumerated posterior over all 3^4 paths (N = 2 particles, where
    ancestor sampling matters most)."""
    tv, bound = _fixed_tv(proposal, 2)
    print(f"fixed parameters, {proposal}: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_conditional_smc_fixed_parameters_detects_missing_transition_term(monkeypatch):
    """Negative control: without the transition into the reference state in the ancestor
    weights the same check fails."""
    monkeypatch.setattr(pgas, "ancestor_sample", drop_transition_term(pgas.ancestor_sample))
    tv, bound = _fixed_tv("posterior", 2)
    print(f"fixed parameters, ancestor weight without pi(s'_t | .): TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound, (tv, bound)


# --------------------------------------------------------------------- exact enumeration
GAMMA, ALPHA, C = 0.5, 2.0, 2
CAPACITY = 10
NUM_CHAINS, NUM_WARMUP = 2000, 30
EXACT_Y = [0, 0, 1, 1, 0]


def _model(kappa):
    def model(y, lengths=None):
        hmm = nh.StickyHDPHMM(GAMMA, ALPHA, kappa, nh.emissions.Categorical(C, 1.0), max_states=CAPACITY)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    return model


def _enumeration_tv(proposal, num_particles, kappa):
    exact = exact_infinite_posterior([EXACT_Y], GAMMA, ALPHA, kappa, C, 1.0)
    kernel = pgas_kernel(_model(kappa), num_particles, proposal)
    draws = final_states(kernel, (np.array(EXACT_Y),), num_chains=NUM_CHAINS, num_warmup=NUM_WARMUP)
    return empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))


@pytest.mark.slow  # negative control of test_conformance.py::test_enumeration[PGAS-posterior-single-N2]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_missing_transition_term(monkeypatch):
    """Negative control of the enumeration test: the ancestor weight without the transition."""
    monkeypatch.setattr(pgas, "ancestor_sample", drop_transition_term(pgas.ancestor_sample))
    tv, bound = _enumeration_tv("posterior", 2, 1.5)
    print(f"ancestor weight without pi(s'_t | .): TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound, (tv, bound)



ETA = 0.3  # the custom emission's Dirichlet prior (sharp: informative)


def custom_model(y):
    """Categorical emissions with the user's Dirichlet(ETA) site (the parameters stay explicit,
    states keep their slots): the same partition posterior as ``Categorical(C, ETA)``."""
    probs = numpyro.sample("probs", dist.Dirichlet(jnp.full(C, ETA)).expand([CAPACITY]).to_event(1))
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, 1.5, lambda k: dist.Categorical(probs=probs[k]), max_states=CAPACITY)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("proposal", ["posterior", "prior"])
def test_enumeration_custom_emission(proposal):
    """Custom emissions (new states' parameters: the free slots' current values; posterior
    proposal with the free-slot estimate of the prior predictive) against the exact posterior."""
    exact = exact_infinite_posterior([EXACT_Y], GAMMA, ALPHA, 1.5, C, ETA)
    draws = final_states(pgas_kernel(custom_model, 4, proposal), (np.array(EXACT_Y),),
                         num_chains=1000, num_warmup=40)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    print(f"custom emission, {proposal}: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)

# ---------------------------------------------------------------------------- Geweke
# the Geweke model and label-invariant statistics of the conformance suite's beam and PGAS entries
hyper_model = geweke_model(30, gamma_prior=(2.0, 2.0))


GEWEKE_LIMIT = 4.5
GEWEKE_RUN = dict(num_steps=8, num_chains=16, num_iterations=3000, num_prior=20000)


def _geweke(proposal, hyperparameters="auxiliary"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # MarkovChain escapes are ~1e-6 at this capacity
        return geweke_z_scores(pgas_kernel(hyper_model, 4, proposal, hyperparameters), hyper_model, first_state_statistics(30),
                               **GEWEKE_RUN)


@pytest.mark.slow  # negative control of test_conformance.py::test_geweke[PGAS-prior-N4-collapsed]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_detects_collapsed_jacobian_counted_twice(monkeypatch):
    """Negative control of the collapsed test: the ``(alpha, kappa)`` target with the log
    transform's Jacobian ``alpha kappa`` counted twice."""
    collapsed_jacobian_counted_twice(monkeypatch)
    z = _geweke("prior", "collapsed")
    print("Geweke z (collapsed, Jacobian twice):", {k: round(float(v), 2) for k, v in z.items()})
    assert max(abs(z["alpha"]), abs(z["kappa"])) > GEWEKE_LIMIT, z


@pytest.mark.slow  # negative control of test_conformance.py::test_geweke[PGAS-prior-N4-auxiliary]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_detects_printed_gamma_update(monkeypatch):
    """Negative control: Fox et al.'s printed mixing weight for the gamma update."""
    monkeypatch.setattr(crp, "resample_gamma", printed_gamma_update)
    z = _geweke("prior")
    print("Geweke z (printed gamma update):", {k: round(float(v), 2) for k, v in z.items()})
    assert abs(z["gamma"]) > GEWEKE_LIMIT, z


# ------------------------------------------------------------ the posterior proposal's sizes
def clusters_model(num_clusters, concentration):
    def model(y):
        emission = nh.emissions.GaussianNIW(jnp.array([4.0 * num_clusters]), 0.001, 3.0, jnp.eye(1))
        nh.sample("y", nh.StickyHDPHMM(concentration, concentration, 1.0, emission, max_states=24), obs=y)

    return model


@pytest.mark.parametrize("num_clusters,concentration,num_chains,redone", [
    # few states created per sweep: sweeps that fit their small size (slow: 171 s in the default run)
    pytest.param(4, 1.0, 2, False, marks=pytest.mark.slow),
    # many: the sweeps outgrow their size and are redone at the capacity (slow: 119 s)
    pytest.param(12, 20.0, None, True, marks=pytest.mark.slow),
    pytest.param(4, 1.0, None, False, marks=pytest.mark.slow),
    pytest.param(12, 20.0, 2, True, marks=pytest.mark.slow),
])
def test_posterior_proposal_at_a_size_is_the_full_run(monkeypatch, num_clusters, concentration, num_chains, redone):
    """The posterior proposal runs the conditional SMC over the first ``S`` slots only (the
    smallest of a few sizes that holds the states in use with room for new ones: ``O(T N k)``,
    not ``O(T N capacity)``), and redoes the sweep at the full capacity when it instantiated so
    many states that no slot below ``S`` stayed free.  Every draw is keyed by global slot
    indices, so the run at ``S`` is the full run restricted to those slots: with sizes 4, 6, 8
    (and the capacity 24) the draws equal those of the full capacity alone, sweep for sweep,
    from one state, for one chain and for vectorized chains (where every chain runs at the
    largest size any needs, and all are redone when one outgrew it)."""
    y = (np.repeat(np.arange(num_clusters) * 8.0, 120 // num_clusters)
         + np.random.default_rng(0).normal(size=120))[:, None]
    start = numpyro.infer.init_to_value(values={"y_states": np.zeros(120, np.int32)})
    key = jax.random.key(3) if num_chains is None else jax.random.split(jax.random.key(3), num_chains)
    model = clusters_model(num_clusters, concentration)
    def draws(sizes):
        monkeypatch.setattr(pgas, "state_sizes", sizes)
        kernel = PGAS(model, proposal="posterior", init_strategy=start)
        state = kernel.init(key, 0, None, (jnp.asarray(y),), {})
        out, ran = [], []
        for _ in range(5):
            beta = np.asarray(state.z["y_beta"])[..., :-1].reshape(-1, 24)
            in_use = int(np.max(np.nonzero(beta > 0)[1])) + 1  # all chains: their largest bucket
            state = kernel.sample(state, (jnp.asarray(y),), {})
            out.append(np.asarray(state.z["y_states"]))
            ran.append((next(s for s in sizes(24) if s >= in_use + max(4, in_use // 4) or s == 24),
                        int(np.max(state.info.smc_size))))
        return np.stack(out), np.asarray(state.z["y_beta"]), np.asarray(state.z["y_trans"]), ran

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        full = draws(lambda capacity: (capacity,))
        sized = draws(lambda capacity: (4, 6, 8, capacity))
    np.testing.assert_array_equal(sized[0], full[0])
    np.testing.assert_allclose(sized[1], full[1], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(sized[2], full[2], rtol=1e-12, atol=1e-300)
    below = [chosen == ran for chosen, ran in sized[3] if chosen < 24]  # sweeps started below the capacity: fit?
    assert below and (not all(below) if redone else any(below)), sized[3]


# ------------------------------------------------------------------- plumbing, validation
def poisson_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(1.0, 2.0, 1.0, nh.emissions.Poisson(1.0, 0.2), max_states=8)
    nh.sample("y", hmm, obs=y, lengths=lengths)


def test_several_sequences_missing_values_diagnostics():
    """Two padded sequences with a missing observation, prior proposal: valid compacted states,
    padding copies the last valid state, beta and rows on the simplex, diagnostics in range."""
    rng = np.random.default_rng(0)
    y = rng.poisson(rng.choice([1.0, 8.0, 20.0], size=(2, 30))).astype(float)
    y[0, 3] = np.nan
    lengths = np.array([30, 22])
    mcmc = MCMC(PGAS(poisson_model, num_particles=3, proposal="prior"), num_warmup=5, num_samples=10,
                progress_bar=False)
    fields = ("ess_mean", "ess_min", "reference_kept", "states_created", "num_instantiated", "update_rate")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mcmc.run(jax.random.key(0), y, lengths, extra_fields=fields)
    s, info = mcmc.get_samples(), mcmc.get_extra_fields()
    states = np.asarray(s["y_states"])
    assert states.shape == (10, 2, 30) and states.min() >= 0 and states.max() < 8
    np.testing.assert_array_equal(states[:, 1, 22:], np.repeat(states[:, 1, 21:22], 8, 1))
    for z in states:  # canonical labels: first appearance order
        seen = [int(v) for v in dict.fromkeys(np.concatenate([z[0], z[1, :22]]))]
        assert seen == list(range(len(seen)))
    np.testing.assert_allclose(np.asarray(s["y_beta"]).sum(-1), 1.0, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(s["y_trans"]).sum(-1), 1.0, rtol=1e-10)
    ess_mean, ess_min = np.asarray(info["ess_mean"]), np.asarray(info["ess_min"])
    assert np.all((ess_min > 0) & (ess_min <= ess_mean + 1e-12) & (ess_mean <= 1 + 1e-12))
    assert np.all(np.asarray(info["num_instantiated"]) >= np.asarray(s["y_num_states"]))
    rate = np.asarray(info["update_rate"])
    assert np.all((rate >= 0) & (rate <= 1)) and np.all((rate == 0) == np.asarray(info["reference_kept"]))


@pytest.mark.parametrize("kwargs,match", [({"num_particles": 1}, "num_particles"),
                                          ({"num_particles": 2.0}, "num_particles"),
                                          ({"proposal": "optimal"}, "proposal")])
def test_input_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PGAS(_model(0.0), **kwargs)


def test_posterior_proposal_runs_through_pgas():
    """``PGAS(proposal="posterior")`` is the fully adapted proposal of the algorithm the exact
    tests check (it was refused while its per-particle collapsed variant failed the Geweke test)."""
    kernel = PGAS(_model(0.0), num_particles=3, proposal="posterior")
    assert kernel.algorithm.proposal == "posterior"


@pytest.mark.slow
@pytest.mark.parametrize("family,proposal", [
    ("gaussian", "posterior"), ("diagonal", "posterior"), ("autoregressive", "posterior"), ("vmf", "posterior"),
    ("dp_mixture", "posterior"), ("gaussian", "prior"), ("categorical", "prior")])
def test_emission_families_run(family, proposal):
    """Every family runs (finite log joint, a plausible number of states on 3-regime data)."""
    model, y = three_regime_model(family)
    mcmc = MCMC(pgas_kernel(model, 5, proposal), num_warmup=30, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    assert np.all(np.isfinite(np.asarray(mcmc.get_extra_fields()["lp"])))
    assert 1 <= np.median(np.asarray(mcmc.get_samples()["y_num_states"])) <= 6
