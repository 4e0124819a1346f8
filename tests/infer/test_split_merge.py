"""Split-merge moves shared by the restricted collapsed draw, DirectAssignmentGibbs and
BeamSampler (``split_merge=n``): exact enumeration with the moves on, the moves alone (the
kernel's own state update switched off) against the exact posterior, a negative control that
drops a term of the acceptance ratio, the ``split_merge_accept`` field with vectorized chains."""

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, WeakLimitGibbs
from numpyro_hdphmm.infer.algorithms import beam
from numpyro_hdphmm.infer.algorithms import direct_assignment as da
from numpyro_hdphmm.infer.moves import split_merge as sm
from numpyro_hdphmm.infer.contract import flatten_time

from _checks import empirical_tv, exact_infinite_posterior, exact_weak_limit_posterior, tv_bound

C, CAPACITY = 2, 8
# the beam sampler instantiates every stick a slice can reach: under STICKY (gamma = 3) far more
# than the 5 steps use; capacity 8 overflows in ~65% of sweeps (a truncated, biased draw), 32 in ~1%
BEAM_CAPACITY = 32
STICKY = (3.0, 2.0, 1.5)  # gamma, alpha, kappa
PLAIN = (0.7, 1.0, 0.0)
Y5 = [0, 0, 1, 1, 0]


def fixed_model(gamma, alpha, kappa, capacity=CAPACITY):
    def model(y):
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(C, 1.0), max_states=capacity)
        nh.sample("y", hmm, obs=y)

    return model


def last_states(kernel, y, num_chains, num_warmup, seed=0):
    """The last states of ``num_chains`` vectorized chains and the mean ``split_merge_accept``."""
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=1, num_chains=num_chains, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.key(seed), np.asarray(y), extra_fields=("split_merge_accept",))
    states = np.asarray(mcmc.get_samples()["y_states"]).reshape(num_chains, -1)
    accept = np.asarray(mcmc.get_extra_fields()["split_merge_accept"])
    return states, accept


def moves_only(rng_key, states, beta, params, view, statistics):
    """``assignment_sweep`` switched off: the states and ``beta`` pass through unchanged (with
    the statistics of the states), so a sweep is the split-merge moves and the global step."""
    dtype = jnp.result_type(beta.dtype, float)
    est = statistics.init(rng_key, flatten_time(view.data.x), view.data.valid.reshape(-1), states.reshape(-1), params,
                          dtype)
    return da.AssignmentSweep(states, beta, est, jnp.zeros((), bool))


def moves_only_tv(monkeypatch, hyper, num_chains=2000, num_warmup=40):
    monkeypatch.setattr(da, "assignment_sweep", moves_only)
    exact = exact_infinite_posterior([Y5], *hyper, C, 1.0)
    states, accept = last_states(DirectAssignmentGibbs(fixed_model(*hyper), split_merge=2), Y5, num_chains,
                                 num_warmup)
    tv, bound = empirical_tv(exact, list(states)), tv_bound(exact.values(), num_chains)
    print("moves only: TV", tv, "bound", bound, "accept", accept.mean())
    return tv, bound, accept


# ------------------------------------------------------------------------------ enumeration
@pytest.mark.slow
@pytest.mark.statistical
def test_direct_assignment_with_split_merge_enumeration():
    """DirectAssignmentGibbs(split_merge=2), sticky, T = 5 (52 partitions): the last states of
    2000 vectorized chains match the exact posterior; ``split_merge_accept`` is a rate in [0, 1]
    per chain and sweep, and moves are accepted."""
    exact = exact_infinite_posterior([Y5], *STICKY, C, 1.0)
    states, accept = last_states(DirectAssignmentGibbs(fixed_model(*STICKY), split_merge=2), Y5, 2000, 20)
    tv, bound = empirical_tv(exact, list(states)), tv_bound(exact.values(), len(states))
    print("DA + split-merge: TV", tv, "bound", bound, "accept", accept.mean())
    assert tv < bound, (tv, bound)
    assert accept.shape == (2000,) and np.all((accept >= 0) & (accept <= 1)) and accept.mean() > 0.05


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("hyper", [STICKY, PLAIN], ids=["sticky", "plain"])
def test_moves_alone_enumeration(monkeypatch, hyper):
    """The moves alone (the step-wise updates switched off; the global step redraws the tables
    and ``beta``): split-merge moves reach every partition, so the chain must have the exact
    posterior by itself; this isolates the move's acceptance ratio and the conversion between
    the explicit ``beta`` and the collapsed seating."""
    tv, bound, _ = moves_only_tv(monkeypatch, hyper)
    assert tv < bound, (tv, bound)


def _without_proposal_terms(restricted_ffbs):
    def patched(*args, **kwargs):
        path, log_q = restricted_ffbs(*args, **kwargs)
        return path, jnp.zeros_like(log_q)

    return patched


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_negative_control_without_proposal_probabilities(monkeypatch):
    """Negative control: the restricted FFBS's proposal probabilities dropped from the ratio
    (``q*`` of a split, ``q_old`` of a merge) make the same test fail."""
    monkeypatch.setattr(sm, "restricted_ffbs", _without_proposal_terms(sm.restricted_ffbs))
    tv, bound, _ = moves_only_tv(monkeypatch, STICKY)
    assert tv > bound, (tv, bound)


def test_bad_argument():
    with pytest.raises(ValueError, match="split_merge"):
        DirectAssignmentGibbs(fixed_model(*STICKY), split_merge=-1)
    with pytest.raises(ValueError, match="split_merge"):
        DirectAssignmentGibbs(fixed_model(*STICKY), split_merge=1.5)


# ------------------------------------------------------------------------------ beam sampler
def test_beam_bad_argument():
    with pytest.raises(ValueError, match="split_merge"):
        BeamSampler(fixed_model(*STICKY), split_merge=True)


@pytest.mark.slow
@pytest.mark.statistical
def test_beam_with_split_merge_enumeration():
    """BeamSampler(split_merge=2): the moves at the start of the sweep, then the rows redrawn
    given the moved states (stale rows would bias the slices): the exact posterior by the TV
    bound.  Capacity 32 (``BEAM_CAPACITY``): at capacity 8 the slices overflow the slots in
    ~65% of sweeps and 4000 chains fail a chi-square test (p 1e-6 with the moves, 4e-20
    without); at 32, 4000 chains (seed 5) give TV 0.029 (bound 0.080), p 0.59 (docs/rcd.md)."""
    exact = exact_infinite_posterior([Y5], *STICKY, C, 1.0)
    states, accept = last_states(BeamSampler(fixed_model(*STICKY, BEAM_CAPACITY), split_merge=2), Y5, 2000, 30,
                                 seed=1)
    tv, bound = empirical_tv(exact, list(states)), tv_bound(exact.values(), len(states))
    print("beam + split-merge: TV", tv, "bound", bound, "accept", accept.mean())
    assert tv < bound, (tv, bound)
    assert np.all((accept >= 0) & (accept <= 1)) and accept.mean() > 0.05


@pytest.mark.slow
@pytest.mark.statistical
def test_beam_moves_alone_enumeration(monkeypatch):
    """The beam sampler with its FFBS switched off (the states kept): the moves, the compaction,
    the emission parameters and the global step alone have the exact posterior."""

    def keep_states(rng_key, log_pi, log_u, inst, log_lik, obs, lengths):
        return jnp.zeros(log_u.shape, jnp.int32), None, jnp.zeros(log_u.shape[:1], bool)

    monkeypatch.setattr(beam, "slice_ffbs", keep_states)
    exact = exact_infinite_posterior([Y5], *STICKY, C, 1.0)
    states, accept = last_states(BeamSampler(fixed_model(*STICKY), split_merge=2), Y5, 2000, 40, seed=2)
    tv, bound = empirical_tv(exact, list(states)), tv_bound(exact.values(), len(states))
    print("beam, moves alone: TV", tv, "bound", bound, "accept", accept.mean())
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
def test_direct_assignment_dp_mixture_with_split_merge_enumeration():
    """DP-mixture emissions (the component indicators drawn given the carried parameters before
    the moves, the parameters redrawn given the moved states and indicators after them): the
    partition of the states matches the exact posterior (measured TV 0.089, bound 0.163)."""
    from test_direct_assignment import exact_mixture_posterior, mixture_model

    from _checks import final_states

    y = [0, 2, 1, 1, 0]
    exact = exact_mixture_posterior(y, 3, 0.5)
    draws = final_states(DirectAssignmentGibbs(mixture_model, split_merge=2), (np.asarray(y),), num_chains=1000,
                         num_warmup=20, seed=3)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    print("DP mixture + split-merge: TV", tv, "bound", bound)
    assert tv < bound, (tv, bound)


# ------------------------------------------------------------------------------ weak limit
L_WEAK = 3
weak_limit = importlib.import_module("numpyro_hdphmm.infer.algorithms.weak_limit")  # the module, not the function


def weak_model(y):
    gamma, alpha, kappa = STICKY
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(C, 1.0), max_states=L_WEAK)
    nh.sample("y", hmm, obs=y)


def weak_moves_only(monkeypatch):
    """WeakLimitGibbs with its FFBS switched off (every sequence reports an underflow, so the
    states are kept): a sweep is the moves, the emission parameters and the global step."""

    def keep_states(emission):
        def ffbs(rows, shared):
            keys, x, valid, lengths = rows
            return jnp.zeros(valid.shape, jnp.int32), jnp.zeros(valid.shape[:1], bool)

        return ffbs

    monkeypatch.setattr(weak_limit, "_ffbs_rows", keep_states)


def weak_tv(num_chains, num_warmup, seed, moves=2):
    exact = exact_weak_limit_posterior([Y5], L_WEAK, *STICKY, C, 1.0)
    states, accept = last_states(WeakLimitGibbs(weak_model, split_merge=moves), Y5, num_chains, num_warmup, seed=seed)
    tv, bound = empirical_tv(exact, list(states)), tv_bound(exact.values(), num_chains)
    print("weak limit: TV", tv, "bound", bound, "accept", np.nanmean(accept))
    return tv, bound, accept


@pytest.mark.slow
@pytest.mark.statistical
def test_weak_limit_with_split_merge_enumeration():
    """WeakLimitGibbs(split_merge=2), L = 3, T = 5 (243 labelled sequences): the last states of
    3000 vectorized chains match the exact weak-limit posterior."""
    tv, bound, accept = weak_tv(3000, 30, seed=4)
    assert tv < bound, (tv, bound)
    assert np.all((accept >= 0) & (accept <= 1)) and np.mean(accept) > 0.05


@pytest.mark.slow
@pytest.mark.statistical
def test_weak_limit_moves_alone_enumeration(monkeypatch):
    """The weak limit's FFBS switched off: the moves (labelled: the new label's proposal
    probability in the ratio), beta, the parameters and the rows alone have the exact
    weak-limit posterior over labelled state sequences."""
    weak_moves_only(monkeypatch)
    tv, bound, _ = weak_tv(3000, 60, seed=5)
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_weak_limit_negative_control_without_label_choice(monkeypatch):
    """Negative control: the moves alone with the infinite model's ratio (no ``log F`` term for
    the new label's uniform choice) fail the same test."""
    weak_moves_only(monkeypatch)
    real = sm.log_label_choice
    monkeypatch.setattr(sm, "log_label_choice", lambda num_free, split, weak: real(num_free, split, False))
    tv, bound, _ = weak_tv(3000, 60, seed=5)
    assert tv > bound, (tv, bound)


def test_weak_limit_bad_argument():
    with pytest.raises(ValueError, match="split_merge"):
        WeakLimitGibbs(weak_model, split_merge=-2)


def test_log_label_choice():
    """The weak limit's label term: ``+log F`` for a split, ``-log F`` for a merge; 0 in the
    infinite model (whose target is a law on partitions)."""
    np.testing.assert_allclose(sm.log_label_choice(jnp.asarray(3), jnp.asarray(True), True), np.log(3.0), rtol=1e-6)
    np.testing.assert_allclose(sm.log_label_choice(jnp.asarray(4), jnp.asarray(False), True), -np.log(4.0), rtol=1e-6)
    assert float(sm.log_label_choice(jnp.asarray(3), jnp.asarray(True), False)) == 0.0


@pytest.mark.slow
def test_weak_limit_split_merge_runs_vectorized():
    """WeakLimitGibbs(split_merge=2) with vectorized chains: the acceptance rate is collected per
    chain and sweep, lies in [0, 1], and moves are accepted on a tiny problem."""
    states, accept = last_states(WeakLimitGibbs(weak_model, split_merge=2), Y5, 8, 10, seed=6)
    assert states.shape == (8, len(Y5)) and np.all((states >= 0) & (states < L_WEAK))
    assert accept.shape == (8,) and np.all((accept >= 0) & (accept <= 1)) and accept.mean() > 0
