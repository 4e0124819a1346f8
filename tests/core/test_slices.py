"""The slice pieces of the beam sampler (:mod:`numpyro_hdphmm._core.slices`): the slice FFBS
against the core HMM routines and exact enumeration, its cost in the instantiated states, and
its exactness for extreme log-likelihood spreads in float32 against a float64 log-space reference
(issue 21)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_hdphmm._core import slices
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik


def tv_bound(probs, num_draws, delta=1e-4):
    """High-probability bound on the TV distance of ``num_draws`` draws from ``probs`` (see
    ``tests/infer/_checks.py``)."""
    p = np.asarray(list(probs))
    return 0.5 * np.sum(np.sqrt(p * (1 - p) / num_draws)) + np.sqrt(np.log(1 / delta) / (2 * num_draws))


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
    _, log_mass, ok = slices.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, inst, log_lik, obs, lengths)
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
    draws = jax.vmap(lambda k: slices.slice_ffbs(k, jnp.log(trans), log_u, inst, log_lik, obs, lengths)[0][0])(keys)
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
    assert slices.ffbs_sizes(K) == (16, 32, 40)
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
    run = jax.vmap(lambda key, p, u, i: slices.slice_ffbs(key, p, u, i, log_lik, obs, lengths))
    states, log_mass, ok = jax.jit(run)(keys, log_pi, log_u, inst)
    assert str(jax.make_jaxpr(run)(keys, log_pi, log_u, inst)).count("cond[") == 1
    for c in range(2):
        full = slices.ffbs_at_size(40, jax.random.split(keys[c], 2), log_pi[c], log_u[c], inst[c], log_lik, obs, lengths)
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
    states, log_mass, ok = slices.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, jnp.array([True, True]),
                                           log_lik, jnp.ones((1, 4), bool), jnp.array([4]))
    assert bool(ok[0]) and float(log_mass[0]) == 0.0
    np.testing.assert_array_equal(states[0], [0, 0, 0, 0])
    # with the start row admitting both states, 1111 is the only good path (2000 nats better)
    log_u = log_u.at[0, 0].set(jnp.log(0.2))
    states, log_mass, ok = slices.slice_ffbs(jax.random.key(0), jnp.log(trans), log_u, jnp.array([True, True]),
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
    _, log_mass, ok = slices.slice_ffbs(jax.random.key(0), *args)
    expected = np.logaddexp(base[:, 0].sum(), base[:, 1].sum())
    assert np.all(np.asarray(ok))
    np.testing.assert_allclose(log_mass, [expected, expected], rtol=1e-6)
    draws = np.asarray(jax.vmap(lambda k: slices.slice_ffbs(k, *args)[0])(jax.random.split(jax.random.key(1), n)))
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
        states, log_mass, ok = slices.slice_ffbs(
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
    states, log_mass, ok = slices.slice_ffbs(
        jax.random.key(0), jnp.log(jnp.asarray(trans, jnp.float32)), jnp.asarray(log_u, jnp.float32),
        jnp.ones(K, bool), jnp.asarray(log_lik, jnp.float32), jnp.asarray(obs), jnp.asarray(lengths))
    assert np.all(np.asarray(ok))
    log_pi = np.log(trans)
    for n in range(num_seq):
        expected = _log_mass_float64(trans, log_u[n], log_lik[n].astype(np.float32), obs[n], lengths[n])
        np.testing.assert_allclose(float(log_mass[n]), expected, rtol=2e-5, atol=1e-3)
        z = np.asarray(states[n])[:lengths[n]]
        assert log_pi[K, z[0]] > log_u[n, 0] and np.all(log_pi[z[:-1], z[1:]] > log_u[n, 1:lengths[n]])
