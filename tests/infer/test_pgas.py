"""PGAS (particle Gibbs with ancestor sampling, Tripuraneni et al. 2015): the conditional SMC
with transitions and emissions held fixed against the exact posterior over state sequences
(with negative controls), exact enumeration of the infinite model's partition posterior (both
proposals, N = 2 and 10, sticky and not), Geweke, agreement with WeakLimitGibbs, several
sequences with missing data, input validation.

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
from numpyro_hdphmm.infer import PGAS, WeakLimitGibbs, weak_limit
from numpyro_hdphmm.infer import pgas

from _checks import empirical_tv, exact_infinite_posterior, final_states, geweke_z_scores, printed_gamma_update, tv_bound


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


@pytest.mark.parametrize("proposal", ["posterior", "prior"])
def test_conditional_smc_fixed_parameters_exact(proposal):
    """With transitions and emissions held fixed (no mass on new states), the conditional SMC
    with ancestor sampling leaves ``p(s_{1:T} | y)`` invariant: after 15 sweeps the paths of
    4000 chains match the enumerated posterior over all 3^4 paths (N = 2 particles, where
    ancestor sampling matters most)."""
    tv, bound = _fixed_tv(proposal, 2)
    print(f"fixed parameters, {proposal}: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)


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
    kernel = PGAS(_model(kappa), num_particles=num_particles, proposal=proposal)
    draws = final_states(kernel, (np.array(EXACT_Y),), num_chains=NUM_CHAINS, num_warmup=NUM_WARMUP)
    return empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))


@pytest.mark.slow
@pytest.mark.parametrize("proposal,num_particles,kappa",
                         [("posterior", 2, 1.5), ("prior", 2, 1.5), ("posterior", 10, 0.0), ("prior", 10, 0.0)])
def test_enumeration_single_sequence(proposal, num_particles, kappa):
    """The full kernel (states by conditional SMC over the infinite state space, new states by
    stick-breaking, then the shared global step) against the exact partition posterior of the
    infinite model, T = 5 (52 partitions)."""
    tv, bound = _enumeration_tv(proposal, num_particles, kappa)
    print(f"{proposal}, N={num_particles}, kappa={kappa}: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)


@pytest.mark.slow
def test_enumeration_detects_missing_transition_term(monkeypatch):
    """Negative control of the enumeration test: the ancestor weight without the transition."""
    monkeypatch.setattr(pgas, "ancestor_sample", drop_transition_term(pgas.ancestor_sample))
    tv, bound = _enumeration_tv("posterior", 2, 1.5)
    print(f"ancestor weight without pi(s'_t | .): TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound, (tv, bound)
