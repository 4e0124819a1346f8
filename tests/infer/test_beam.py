"""BeamSampler: the slice FFBS against the core HMM routines, exact enumeration of the infinite
model's partition posterior (with negative controls), Geweke, agreement with
DirectAssignmentGibbs and WeakLimitGibbs, emission families, overflow and plumbing."""

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
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, WeakLimitGibbs, weak_limit
from numpyro_hdphmm.infer import beam

from _checks import empirical_tv, exact_infinite_posterior, final_states, geweke_z_scores, tv_bound

GAMMA, ALPHA, KAPPA, C = 0.5, 2.0, 1.5, 2
CAPACITY = 10  # measured: the capacity is reached in 2e-4 of the sweeps (0.8% of chains over 40 sweeps)
NUM_CHAINS, NUM_WARMUP = 2000, 30


# ------------------------------------------------------------------------ slice FFBS vs core
def _random_problem(rng, num_seq=2, num_steps=6, num_states=4):
    trans = rng.dirichlet(np.ones(num_states + 1), size=num_states + 1)
    trans[:, 3] = 0.0  # slot 3 is free: never reachable
    trans /= trans.sum(-1, keepdims=True)
    inst = np.arange(num_states) != 3
    # slices given a random path over the instantiated states (so an admissible path exists)
    path = np.flatnonzero(inst)[rng.integers(0, inst.sum(), size=(num_seq, num_steps))]
    prev = np.concatenate([np.full((num_seq, 1), num_states), path[:, :-1]], 1)
    log_u = np.log(trans[prev, path]) + np.log(rng.uniform(size=(num_seq, num_steps)))
    log_lik = rng.normal(scale=3.0, size=(num_seq, num_steps, num_states))
    obs = rng.uniform(size=(num_seq, num_steps)) > 0.2
    lengths = np.array([num_steps, num_steps - 2])
    return trans, inst, log_u, log_lik, obs, lengths


def _core_log_transitions(trans, inst, log_u):
    k = inst.size
    trans = np.maximum(trans, 1e-300)
    allowed = (np.log(trans[None, None, :k, :k]) > log_u[..., None, None]) & inst[:, None] & inst[None, :]
    log_a = np.where(allowed, 0.0, -np.inf)
    log_init = np.where((np.log(trans[k, :k]) > log_u[:, :1]) & inst, 0.0, -np.inf)
    return log_init, log_a


@pytest.mark.parametrize("num_states", [4, 21])  # 21: padded to 24, blocked sums (K > 16)
def test_slice_ffbs_marginal_matches_core(rng, num_states):
    trans, inst, log_u, log_lik, obs, lengths = _random_problem(rng, num_states=num_states)
    _, log_mass, ok = beam.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, inst, log_lik, obs, lengths)
    log_init, log_a = _core_log_transitions(trans, inst, log_u)
    expected = hmm_marginal_loglik(log_init, log_a, np.where(inst, log_lik, -np.inf), mask=obs, length=lengths)
    assert np.all(np.asarray(ok))
    np.testing.assert_allclose(log_mass, expected, rtol=1e-10)


@pytest.mark.parametrize("num_states, num_steps", [(4, 4), (21, 3)])  # 21: two-level inverse CDF
def test_slice_ffbs_samples_exact_distribution(rng, num_states, num_steps):
    """Draws of one sequence (``num_states - 1`` instantiated states) against the enumerated posterior."""
    trans, inst, log_u, log_lik, obs, lengths = _random_problem(rng, num_seq=1, num_steps=num_steps, num_states=num_states)
    lengths = np.array([num_steps])
    num_draws = 20000
    keys = jax.random.split(jax.random.key(1), num_draws)
    draws = jax.vmap(lambda k: beam.slice_ffbs(k, jnp.log(trans), log_u, inst, log_lik, obs, lengths)[0][0])(keys)
    log_init, log_a = _core_log_transitions(trans, inst, log_u)
    lem = np.where(obs[0][:, None], log_lik[0], 0.0)
    probs = {}
    for z in itertools.product(np.flatnonzero(inst), repeat=num_steps):
        lp = log_init[0, z[0]] + lem[0, z[0]] + sum(log_a[0, t, z[t - 1], z[t]] + lem[t, z[t]] for t in range(1, num_steps))
        probs[z] = np.exp(lp)
    total = sum(probs.values())
    probs = {z: p / total for z, p in probs.items() if p > 0}
    counts = {}
    for z in map(tuple, np.asarray(draws)):
        counts[z] = counts.get(z, 0) + 1
    tv = 0.5 * sum(abs(probs.get(z, 0.0) - counts.get(z, 0) / num_draws) for z in set(probs) | set(counts))
    assert set(counts) <= set(probs)  # never an inadmissible path
    print(f"K = {num_states}: {len(probs)} admissible paths, TV {tv:.4f}, bound {tv_bound(probs.values(), num_draws):.4f}")
    assert tv < tv_bound(probs.values(), num_draws), tv


def test_slice_ffbs_cost_follows_instantiated_states(rng):
    """Capacity 40 compiles sizes 16, 32, 40; a chain with 5 instantiated states runs at 16, one
    with 17 at 32.  Vmapped over the two chains (one branch, at the larger size, no select over
    all sizes), each gives the marginal and draws of the full-capacity recursion."""
    K, T = 40, 30
    assert beam.ffbs_sizes(K) == (16, 32, 40)
    log_lik = jnp.asarray(rng.normal(scale=2.0, size=(2, T, K)), jnp.float32)
    obs, lengths = jnp.ones((2, T), bool), jnp.array([T, T - 4])
    chains = []
    for k in (5, 17):
        trans = rng.dirichlet(np.ones(K + 1), size=K + 1)
        trans[:, k:K] = 0.0
        trans /= trans.sum(-1, keepdims=True)
        path = rng.integers(0, k, size=(2, T))
        prev = np.concatenate([np.full((2, 1), K), path[:, :-1]], 1)
        log_u = np.log(trans[prev, path]) + np.log(rng.uniform(size=(2, T)))
        chains.append((jnp.log(jnp.asarray(trans, jnp.float32)), jnp.asarray(log_u, jnp.float32), jnp.arange(K) < k))
    log_pi, log_u, inst = (jnp.stack(a) for a in zip(*chains))
    keys = jax.random.split(jax.random.key(2), 2)
    run = jax.vmap(lambda key, p, u, i: beam.slice_ffbs(key, p, u, i, log_lik, obs, lengths))
    states, log_mass, ok = jax.jit(run)(keys, log_pi, log_u, inst)
    assert str(jax.make_jaxpr(run)(keys, log_pi, log_u, inst)).count("cond[") == 1
    for c in range(2):
        full = beam._slice_ffbs_sized(40, jax.random.split(keys[c], 2), log_pi[c], log_u[c], inst[c], log_lik, obs, lengths)
        assert np.all(np.asarray(ok[c])) and np.all(np.asarray(full[2]))
        np.testing.assert_allclose(log_mass[c], full[1], rtol=1e-5)
        assert np.mean(np.asarray(states[c]) == np.asarray(full[0])) > 0.95


def test_slice_ffbs_float32_large_emission_spread():
    """The best-fitting instantiated state is unreachable (the start row admits only state 0,
    then only self-transitions) and 1e3 nats better: float32 stays exact.  (Before issue 21 this
    case let the start row reach state 1, whose path 1111 is 2000 nats better, and asserted the
    probability-space fallback's answer 0000, which had flushed state 1 to zero at t = 0.)"""
    trans = jnp.array([[0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.7, 0.3, 0.0]], jnp.float32)
    log_u = jnp.log(jnp.array([[0.5, 0.5, 0.5, 0.5]], jnp.float32))  # start: state 0; then self-transitions
    log_lik = jnp.tile(jnp.array([0.0, 1000.0], jnp.float32), (1, 4, 1))
    log_lik = log_lik.at[0, 0].set(jnp.array([0.0, -1000.0], jnp.float32))
    states, log_mass, ok = beam.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, jnp.array([True, True]),
                                           log_lik, jnp.ones((1, 4), bool), jnp.array([4]))
    assert bool(ok[0]) and float(log_mass[0]) == 0.0
    np.testing.assert_array_equal(states[0], [0, 0, 0, 0])
    # with the start row admitting both states, 1111 is the only good path (2000 nats better)
    log_u = log_u.at[0, 0].set(jnp.log(0.2))
    states, log_mass, ok = beam.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, jnp.array([True, True]),
                                           log_lik, jnp.ones((1, 4), bool), jnp.array([4]))
    expected = _log_mass_float64(np.asarray(trans), np.asarray(log_u[0]), np.asarray(log_lik[0]), np.ones(4, bool), 4)
    assert bool(ok[0])
    np.testing.assert_allclose(float(log_mass[0]), expected, rtol=1e-6)
    np.testing.assert_array_equal(states[0], [1, 1, 1, 1])


def test_slice_ffbs_exact_pass_when_rescaled_pass_underflows():
    """Only the paths 0000 and 1111 are admissible; instantiated state 2, which no path reaches,
    fits 500 nats better in sequence 0 (the rescaled pass underflows and the exact pass takes
    over) and not in sequence 1 (the rescaled pass): both give the enumerated marginal and draw
    frequencies, in one vmapped call."""
    T, n = 5, 4000
    trans = np.array([[0.9, 1e-6, 0.05, 0.05], [1e-6, 0.9, 0.05, 0.05], [0.3, 0.3, 0.3, 0.1], [0.5, 0.5, 1e-6, 0.0]])
    log_u = np.log(np.tile(np.array([0.25] + [0.45] * (T - 1)), (2, 1)))
    base = np.random.default_rng(3).normal(size=(T, 3))
    base[:, 1] = base[:, 0] + 0.1  # log P(0000) - log P(1111) = -0.5
    log_lik = np.stack([base + np.array([0.0, 0.0, 500.0]), base]).astype(np.float32)
    args = (jnp.log(jnp.asarray(trans, jnp.float32)), jnp.asarray(log_u, jnp.float32), jnp.ones(3, bool), log_lik,
            jnp.ones((2, T), bool), jnp.array([T, T]))
    _, log_mass, ok = beam.slice_ffbs(jax.random.key(0), *args)
    expected = np.logaddexp(base[:, 0].sum(), base[:, 1].sum())
    assert np.all(np.asarray(ok))
    np.testing.assert_allclose(log_mass, [expected, expected], rtol=1e-6)
    draws = np.asarray(jax.vmap(lambda k: beam.slice_ffbs(k, *args)[0])(jax.random.split(jax.random.key(1), n)))
    p_zero = 1.0 / (1.0 + np.exp(0.5))
    for s in range(2):
        assert np.all(np.all(draws[:, s] == 0, -1) | np.all(draws[:, s] == 1, -1))
        freq = np.mean(draws[:, s, 0] == 0)
        assert abs(freq - p_zero) < 5 * np.sqrt(p_zero * (1 - p_zero) / n), (s, freq, p_zero)


def _log_mass_float64(trans, log_u, log_lik, obs, length):
    """Reference of the slice FFBS's log-mass in float64 and log space throughout (numpy):
    ``log sum_z 1[u_0 < pi_{0 z_0}] prod_t 1[u_t < pi_{z_{t-1} z_t}] f(y_t | z_t)`` over the
    ``K`` states of ``log_lik (T, K)``."""
    log_pi = np.log(np.maximum(np.asarray(trans, np.float64), 1e-300))
    k = log_lik.shape[-1]
    lem = np.where(obs[:, None], np.asarray(log_lik, np.float64), 0.0)
    log_a = np.where(log_pi[k, :k] > log_u[0], 0.0, -np.inf) + lem[0]
    total = 0.0
    for t in range(length):
        if t > 0:
            scores = np.where(log_pi[:k, :k] > log_u[t], log_a[:, None], -np.inf)
            log_a = np.logaddexp.reduce(scores, axis=0) + lem[t]
        c = np.logaddexp.reduce(log_a)
        total, log_a = total + c, log_a - c
    return total


def test_slice_ffbs_keeps_filtered_mass_below_float32_range():
    """Issue 21: state 0 fits 6 nats per step worse than state 1 for 20 steps (its filtered
    probability e^-120 is below float32's range), then an outlier that only state 2 fits
    (log-likelihood -23 against -1e10), and only state 0 may move to state 2.  The exact
    log-mass is -143; the probability-space fallback flushed state 0 to zero and returned
    -1e10 (the outlier given to state 1) with ``ok`` True."""
    T = 21
    trans = np.array([[0.5, 0.01, 0.49, 0.0], [0.01, 0.98, 0.01, 0.0], [0.3, 0.3, 0.4, 0.0], [0.5, 0.5, 0.0, 0.0]])
    log_u = np.log(np.array([[0.4] + [0.45] * (T - 1)]))
    log_lik = np.zeros((1, T, 4))
    log_lik[0, :20, 0], log_lik[0, :20, 2] = -6.0, -1e10
    log_lik[0, 20, :3] = [-1e10, -1e10, -23.0]
    inst = jnp.arange(4) < 3
    expected = _log_mass_float64(trans, log_u[0], log_lik[0, :, :3], np.ones(T, bool), T)
    np.testing.assert_allclose(expected, -143.0, rtol=1e-12)
    for dtype in (jnp.float32, jnp.float64):
        states, log_mass, ok = beam.slice_ffbs(
            jax.random.key(0), jnp.log(jnp.asarray(trans, dtype)), jnp.asarray(log_u, dtype), inst,
            jnp.asarray(log_lik, dtype), jnp.ones((1, T), bool), jnp.array([T]))
        assert bool(ok[0])
        np.testing.assert_allclose(float(log_mass[0]), expected, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(states[0]), [0] * 20 + [2])


@pytest.mark.parametrize("spread", [1e2, 1e5, 1e10])
def test_slice_ffbs_float32_matches_float64_reference_on_extreme_spreads(spread):
    """Random problems whose log-likelihoods spread over ``spread`` nats (a few entries per step
    near 0, the rest down to -spread), with slices from a random admissible path: the float32
    slice FFBS gives the float64 log-space log-mass, ``ok`` is True and every draw is admissible
    with a finite log-likelihood at each step."""
    rng = np.random.default_rng(int(np.log10(spread)))
    num_seq, T, K = 12, 40, 6
    trans = rng.dirichlet(np.full(K + 1, 0.5), size=K + 1)
    path = rng.integers(0, K, size=(num_seq, T))
    prev = np.concatenate([np.full((num_seq, 1), K), path[:, :-1]], 1)
    log_u = np.log(trans[prev, path]) + np.log(rng.uniform(size=(num_seq, T)))
    log_lik = -spread * rng.uniform(size=(num_seq, T, K)) ** 4
    obs = rng.uniform(size=(num_seq, T)) > 0.1
    lengths = rng.integers(T // 2, T + 1, size=num_seq)
    states, log_mass, ok = beam.slice_ffbs(
        jax.random.key(0), jnp.log(jnp.asarray(trans, jnp.float32)), jnp.asarray(log_u, jnp.float32),
        jnp.ones(K, bool), jnp.asarray(log_lik, jnp.float32), jnp.asarray(obs), jnp.asarray(lengths))
    assert np.all(np.asarray(ok))
    log_pi = np.log(trans)
    for n in range(num_seq):
        expected = _log_mass_float64(trans, log_u[n], log_lik[n].astype(np.float32), obs[n], lengths[n])
        np.testing.assert_allclose(float(log_mass[n]), expected, rtol=2e-5, atol=1e-3)
        z = np.asarray(states[n])[:lengths[n]]
        assert log_pi[K, z[0]] > log_u[n, 0] and np.all(log_pi[z[:-1], z[1:]] > log_u[n, 1:lengths[n]])


def outlier_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 1.0))
    emission = nh.emissions.GaussianNIW(jnp.array([2.5]), 0.01, 3.0, jnp.eye(1))
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=20), obs=y)


def test_outliers_get_their_own_state_float32():
    """Issue 21's end-to-end case: two regimes 5 sd apart, T = 400, four observations at 1e6,
    float32.  Before the log-space fallback the sampler lost the admissible path in about one
    sweep in five (``ffbs_ok`` False) and collapsed into one state of variance ~1e10 holding data
    and outliers.  Now every sweep's FFBS succeeds and the outliers end in states of their own
    (no state holds both an outlier and more than 20 regular steps)."""
    rng = np.random.default_rng(0)
    y = rng.normal(5.0 * ((np.arange(400) // 100) % 2), 1.0)[:, None]
    outliers = [50, 150, 250, 350]
    y[outliers] = 1e6
    with jax.enable_x64(False):
        mcmc = MCMC(BeamSampler(outlier_model), num_warmup=0, num_samples=100, progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            mcmc.run(jax.random.key(0), jnp.asarray(y, jnp.float32), extra_fields=("aux.ffbs_ok",))
    assert np.all(np.asarray(mcmc.get_extra_fields()["aux.ffbs_ok"]))
    states = np.asarray(mcmc.get_samples()["y_states"])
    for z in states[-20:]:
        for k in np.unique(z[outliers]):
            assert np.sum(z == k) <= 20 + len(outliers), np.sum(z == k)


def test_log_gamma_variates_moments():
    """E[log G] = digamma(a), Var[log G] = trigamma(a) for G ~ Gamma(a), including tiny a."""
    from scipy.special import digamma, polygamma

    a = np.array([1e-3, 0.3, 1.0, 3.7, 50.0])
    n = 40000
    draws = np.asarray(beam.log_gamma_variates(jax.random.key(0), jnp.broadcast_to(jnp.asarray(a), (n, a.size))))
    assert np.all(np.isfinite(draws))
    mean_se = np.sqrt(polygamma(1, a) / n)
    np.testing.assert_array_less(np.abs(draws.mean(0) - digamma(a)), 5 * mean_se)
    np.testing.assert_allclose(draws.var(0), polygamma(1, a), rtol=0.1)


# --------------------------------------------------------------------- exact enumeration
def fixed_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=CAPACITY)
    nh.sample("y", hmm, obs=y, lengths=lengths)


@pytest.fixture(scope="module")
def exact_single():
    y = [0, 0, 1, 1, 0]
    return y, exact_infinite_posterior([y], GAMMA, ALPHA, KAPPA, C, 1.0)


def _single_tv(exact_single, num_chains=NUM_CHAINS):
    y, exact = exact_single
    draws = final_states(BeamSampler(fixed_model), (np.array(y),), num_chains=num_chains, num_warmup=NUM_WARMUP)
    return empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))


def test_enumeration_single_sequence(exact_single):
    tv, bound = _single_tv(exact_single)
    print(f"single sequence: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)


@pytest.mark.slow
def test_enumeration_detects_slices_ignoring_pi(exact_single, monkeypatch):
    """u_t ~ U(0, 1) independently of pi (the FFBS then misses the transition probabilities)."""

    def broken(rng_key, states, trans, lengths):
        log_u = jnp.log(jax.random.uniform(rng_key, states.shape, trans.dtype, minval=1e-300))
        return jnp.where(jnp.arange(states.shape[1]) < lengths[:, None], log_u, jnp.inf)

    monkeypatch.setattr(beam, "draw_slices", broken)
    tv, bound = _single_tv(exact_single)
    print(f"slices ignoring pi: TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound, (tv, bound)


@pytest.mark.slow
def test_enumeration_detects_new_row_without_sticky_term(exact_single, monkeypatch):
    """New states' rows drawn from Dir(alpha beta) instead of Dir(alpha beta + kappa e_k)."""
    real = beam.extend_sticks
    monkeypatch.setattr(beam, "extend_sticks", lambda *args: real(*args[:-1], 0.0 * args[-1]))
    tv, bound = _single_tv(exact_single)
    print(f"new row without kappa: TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound, (tv, bound)


@pytest.mark.slow
def test_enumeration_several_sequences_with_padding():
    seqs = [[0, 1, 1], [1, 0]]
    exact = exact_infinite_posterior(seqs, GAMMA, ALPHA, KAPPA, C, 1.0)
    y = np.array([[0, 1, 1], [1, 0, 0]])
    lengths = np.array([3, 2])
    draws = final_states(BeamSampler(fixed_model), (y, lengths), num_chains=NUM_CHAINS, num_warmup=NUM_WARMUP)
    flat = [np.concatenate([d.reshape(2, 3)[0], d.reshape(2, 3)[1, :2]]) for d in draws]
    tv, bound = empirical_tv(exact, flat), tv_bound(exact.values(), len(flat))
    print(f"two padded sequences: TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound, (tv, bound)


# ---------------------------------------------------------------------------- Geweke
GEWEKE_CAPACITY = 30


def hyper_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 2.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(3, 1.0), max_states=GEWEKE_CAPACITY,
                          num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


def _stats():
    """Label-invariant statistics (the beam sampler relabels states by first appearance)."""
    k = GEWEKE_CAPACITY

    def first(z):
        return z["y_states"][0]

    return {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "beta_first": lambda z: z["y_beta"][first(z)],
        "pi_first_self": lambda z: z["y_trans"][first(z), first(z)],
        "pi_start_first": lambda z: z["y_trans"][k, first(z)],
        "probs_first": lambda z: z["y_probs"][first(z), 0],
        "self_rate": lambda z: jnp.mean(z["y_states"][1:] == z["y_states"][:-1]),
        "num_states": lambda z: jnp.sum(jnp.zeros(k, bool).at[z["y_states"]].set(True)),
    }


GEWEKE_LIMIT = 4.5
# 16 vmapped successive-conditional chains: the printed gamma update shifts gamma's stationary
# mean by ~0.1 prior standard deviations here, which one chain of 6000 could not resolve
GEWEKE_RUN = dict(num_steps=8, num_chains=16, num_iterations=3000, num_prior=20000)


@pytest.mark.slow
def test_geweke_with_hyperparameter_updates():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # MarkovChain escapes are ~1e-6 at this capacity
        z = geweke_z_scores(BeamSampler(hyper_model), hyper_model, _stats(), **GEWEKE_RUN)
    print("Geweke z:", {k: round(float(v), 2) for k, v in z.items()})
    assert max(abs(v) for v in z.values()) < GEWEKE_LIMIT, z


@pytest.mark.slow
def test_geweke_detects_printed_gamma_update(monkeypatch):
    """Negative control: Fox et al.'s printed mixing weight for the gamma update (the odds used
    as a probability).  Measured: z_gamma 5.53 with 16 chains x 3000 iterations (correct code:
    max |z| 1.91 over the nine statistics), 1.08 with the earlier single chain of 6000."""
    real = crp.resample_gamma
    monkeypatch.setattr(crp, "resample_gamma", lambda *args, **kwargs: real(*args[:6], printed_typo=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        z = geweke_z_scores(BeamSampler(hyper_model), hyper_model, _stats(), **GEWEKE_RUN)
    print("Geweke z (printed gamma update):", {k: round(float(v), 2) for k, v in z.items()})
    assert abs(z["gamma"]) > GEWEKE_LIMIT, z


# ------------------------------------- agreement with DirectAssignmentGibbs and WeakLimitGibbs
def gauss_model(y):
    emission = nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, jnp.eye(1))
    nh.sample("y", nh.StickyHDPHMM(1.0, 3.0, 5.0, emission, max_states=20), obs=y)


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(1)
    return np.concatenate([rng.normal(-3, 1, 30), rng.normal(3, 1, 30), rng.normal(0, 1, 20)])[:, None]


@pytest.mark.slow
def test_agrees_with_direct_assignment_and_weak_limit(small_data):
    """Posterior means of num_states and of the log-likelihood: BeamSampler (infinite model)
    against DirectAssignmentGibbs (the same infinite model, collapsed) and WeakLimitGibbs with
    L = 20 (its approximation error is far below the Monte Carlo error), within 4 standard
    errors (ArviZ ESS over 4 chains)."""
    import arviz as az

    out = {}
    for cls in (BeamSampler, DirectAssignmentGibbs, WeakLimitGibbs):
        mcmc = MCMC(cls(gauss_model), num_warmup=500, num_samples=2000, num_chains=4, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.key(0), small_data)
        samples = mcmc.get_samples()
        ll = jax.vmap(lambda mu, cov, s: nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, jnp.eye(1))
                      .pointwise_log_likelihood(jnp.asarray(small_data), {"mu": mu, "cov": cov}, s).sum())(
            samples["y_mu"], samples["y_cov"], samples["y_states"])
        out[cls.__name__] = (np.asarray(samples["y_num_states"], float), np.asarray(ll))
    for other in ("DirectAssignmentGibbs", "WeakLimitGibbs"):
        for i, stat in enumerate(("num_states", "log-likelihood")):
            a, b = out["BeamSampler"][i], out[other][i]
            se = np.sqrt(a.var() / az.ess(a.reshape(4, -1)) + b.var() / az.ess(b.reshape(4, -1)))
            print(f"{stat}: beam {a.mean():.3f}, {other} {b.mean():.3f}, z {(a.mean() - b.mean()) / se:.2f}")
            assert abs(a.mean() - b.mean()) < 4 * se + 1e-9, (other, stat, a.mean(), b.mean(), se)


# ------------------------------------------------------------------------ families, overflow
def poisson_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(5.0, 2.0, 1.0, nh.emissions.Poisson(1.0, 0.2), max_states=3)
    nh.sample("y", hmm, obs=y, lengths=lengths)


def test_overflow_flag_several_sequences_missing_values():
    """Capacity 3 with gamma = 5 overflows: flagged, warned, and the sweep stays valid."""
    rng = np.random.default_rng(0)
    y = rng.poisson(rng.choice([1.0, 8.0, 20.0], size=(2, 30))).astype(float)
    y[0, 3] = np.nan  # a missing observation
    lengths = np.array([30, 22])
    mcmc = MCMC(BeamSampler(poisson_model), num_warmup=5, num_samples=20, progress_bar=False)
    with pytest.warns(RuntimeWarning, match="max_states"):
        mcmc.run(jax.random.key(0), y, lengths, extra_fields=("overflow",))
    assert np.any(np.asarray(mcmc.get_extra_fields()["overflow"]))
    s = mcmc.get_samples()
    states = np.asarray(s["y_states"])
    assert states.shape == (20, 2, 30) and states.min() >= 0 and states.max() < 3
    np.testing.assert_array_equal(states[:, 1, 22:], np.repeat(states[:, 1, 21:22], 8, 1))  # padding copies
    for z in states:  # canonical labels: first appearance order
        seen = [int(v) for v in dict.fromkeys(np.concatenate([z[0], z[1, :22]]))]
        assert seen == list(range(len(seen)))
    beta = np.asarray(s["y_beta"])
    np.testing.assert_allclose(beta.sum(-1), 1.0, rtol=1e-10)
    used = np.asarray(s["y_num_states"])
    assert all(np.all(b[u:3] == 0.0) and np.all(b[:u] > 0) for b, u in zip(beta, used))
    np.testing.assert_allclose(np.asarray(s["y_trans"]).sum(-1), 1.0, rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gaussian", "diagonal", "autoregressive", "vmf", "categorical"])
def test_emission_families_run(family):
    rng = np.random.default_rng(0)
    seg = np.repeat([0, 1, 0, 2], 15)
    if family == "categorical":
        y = (seg + rng.integers(0, 2, seg.size)) % 4
        emission = nh.emissions.Categorical(4, 0.5)
    else:
        means = np.array([[3.0, 0.0], [-3.0, 1.0], [0.0, -3.0]])
        y = means[seg] + rng.normal(scale=0.5, size=(seg.size, 2))
        if family == "vmf":
            y = y / np.linalg.norm(y, axis=-1, keepdims=True)
        cls = {"gaussian": nh.emissions.GaussianNIW, "diagonal": nh.emissions.DiagonalGaussian,
               "autoregressive": nh.emissions.AutoRegressive, "vmf": nh.emissions.VonMisesFisher}[family]
        emission = cls.weakly_informative(y)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 2.0, 5.0, emission, max_states=12), obs=y)

    mcmc = MCMC(BeamSampler(model), num_warmup=30, num_samples=30, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    s = mcmc.get_samples()
    assert np.all(np.isfinite(np.asarray(mcmc.get_extra_fields()["lp"])))
    assert 1 <= np.median(np.asarray(s["y_num_states"])) <= 6


def test_weak_limit_model_is_rejected():
    with pytest.raises(NotImplementedError, match="GEM"):
        MCMC(BeamSampler(weak_limit(fixed_model)), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0), np.array([0, 1]))
