"""Tests of the HMM core against brute-force enumeration of all K^T state sequences."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_hdphmm._core.hmm import (
    HMMFilter,
    hmm_backward_sample,
    hmm_filter,
    hmm_marginal_loglik,
    hmm_posterior_sample,
    hmm_posterior_sample_fast,
    hmm_smoother,
    hmm_viterbi,
)

METHODS = ["sequential", "parallel"]


# ------------------------------------------------------------------ brute force (numpy, float64)
def _lse(x):
    x = np.asarray(x, float)
    m = np.max(x)
    if not np.isfinite(m):
        return m
    return m + np.log(np.sum(np.exp(x - m)))


def _seq_logweights(li, la, ll, mask, L):
    """log weight of every state sequence of length L (valid steps only)."""
    K = li.shape[0]
    keep = np.ones(ll.shape[0], bool) if mask is None else np.asarray(mask, bool)
    seqs = list(itertools.product(range(K), repeat=L))
    lw = []
    for z in seqs:
        w = li[z[0]] + (ll[0, z[0]] if keep[0] else 0.0)
        for t in range(1, L):
            a = la[t] if la.ndim == 3 else la
            w += a[z[t - 1], z[t]] + (ll[t, z[t]] if keep[t] else 0.0)
        lw.append(w)
    return seqs, np.array(lw)


def brute(li, la, ll, mask=None, length=None):
    T, K = ll.shape
    L = T if length is None else int(length)
    seqs, lw = _seq_logweights(li, la, ll, mask, L)
    logZ = _lse(lw)
    p = np.exp(lw - logZ)
    smoothed = np.zeros((L, K))
    counts = np.zeros((K, K))
    for z, pz in zip(seqs, p):
        for t in range(L):
            smoothed[t, z[t]] += pz
        for t in range(1, L):
            counts[z[t - 1], z[t]] += pz
    filtered = np.zeros((L, K))
    for t in range(L):
        s_t, lw_t = _seq_logweights(li, la, ll, mask, t + 1)
        pt = np.exp(lw_t - _lse(lw_t))
        for z, pz in zip(s_t, pt):
            filtered[t, z[t]] += pz
    best = seqs[int(np.argmax(lw))]
    return dict(logZ=logZ, filtered=filtered, smoothed=smoothed, counts=counts, viterbi=best,
                seqs=seqs, probs=p, L=L)


def _random_problem(rng, T, K, kind):
    li = np.log(rng.dirichlet(np.ones(K)))
    la = np.log(rng.dirichlet(np.ones(K), size=K))
    ll = rng.normal(size=(T, K)) * 2
    mask, length = None, None
    if kind == "mask":
        mask = np.array([True, False, True, True, False, True][:T])
    elif kind == "length":
        length = T - 2
    elif kind == "timevarying":
        la = np.log(rng.dirichlet(np.ones(K), size=(T, K)))
    elif kind == "substochastic":
        # 0/1 indicator matrices (beam sampler slices) times sub-stochastic weights
        ind = rng.uniform(size=(T, K, K)) < 0.6
        ind[:, np.arange(K), np.arange(K)] = True  # keep a feasible path
        la = np.where(ind, np.log(rng.uniform(0.05, 0.5, size=(T, K, K))), -np.inf)
        li = li - 0.7
    elif kind == "all":
        mask = np.array([True, True, False, True, True, False][:T])
        length = T - 1
        la = np.log(rng.dirichlet(np.ones(K), size=(T, K))) - 0.3
    return li, la, ll, mask, length


KINDS = ["plain", "mask", "length", "timevarying", "substochastic", "all"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", KINDS)
def test_deterministic_against_enumeration(kind, method):
    rng = np.random.default_rng(hash(kind) % 2**32)
    T, K = 6, 3
    li, la, ll, mask, length = _random_problem(rng, T, K, kind)
    ref = brute(li, la, ll, mask, length)
    L = ref["L"]
    f = hmm_filter(li, la, ll, mask=mask, length=length, method=method)
    np.testing.assert_allclose(f.marginal_loglik, ref["logZ"], atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.exp(f.log_filtered[:L]), ref["filtered"], atol=1e-6)
    np.testing.assert_allclose(np.sum(f.log_normalizers), ref["logZ"], atol=1e-6)
    s = hmm_smoother(li, la, ll, mask=mask, length=length, method=method)
    np.testing.assert_allclose(s.marginal_loglik, ref["logZ"], atol=1e-6)
    np.testing.assert_allclose(np.exp(s.log_smoothed[:L]), ref["smoothed"], atol=1e-6)
    np.testing.assert_allclose(s.expected_transition_counts, ref["counts"], atol=1e-6)
    if L < T:  # padding copies the last valid step and contributes nothing
        np.testing.assert_allclose(f.log_normalizers[L:], 0.0)
        np.testing.assert_allclose(f.log_filtered[L:], np.broadcast_to(f.log_filtered[L - 1], (T - L, K)))
        np.testing.assert_allclose(s.log_smoothed[L:], np.broadcast_to(s.log_smoothed[L - 1], (T - L, K)))
    np.testing.assert_allclose(hmm_marginal_loglik(li, la, ll, mask, length, method=method),
                               ref["logZ"], atol=1e-6)
    if method == "sequential":
        v = np.asarray(hmm_viterbi(li, la, ll, mask=mask, length=length))
        np.testing.assert_array_equal(v[:L], ref["viterbi"])
        np.testing.assert_array_equal(v[L:], v[L - 1])


def _tv_bound(p, n):
    """E[TV] <= 0.5 sum sqrt(p(1-p)/n); McDiarmid adds sqrt(log(1e6)/(2n)) (fail prob 1e-6)."""
    return 0.5 * np.sum(np.sqrt(p * (1 - p) / n)) + np.sqrt(np.log(1e6) / (2 * n))


def _assert_path_law(states, mll, ref):
    """``states (n, T)`` drawn paths: the marginal likelihood is the enumeration's, padded steps copy
    the last valid state, no impossible path is drawn and the paths' law is within the TV bound."""
    states = np.asarray(states)
    n, T = states.shape
    L = ref["L"]
    np.testing.assert_allclose(mll[0], ref["logZ"], atol=1e-6)
    np.testing.assert_array_equal(states[:, L:], np.repeat(states[:, L - 1:L], T - L, axis=1))
    index = {z: i for i, z in enumerate(ref["seqs"])}
    codes = np.array([index[tuple(s[:L])] for s in states])
    emp = np.bincount(codes, minlength=len(ref["seqs"])) / n
    p = ref["probs"]
    assert np.all(emp[p == 0] == 0), "sampled an impossible sequence"
    tv = 0.5 * np.abs(emp - p).sum()
    assert tv < _tv_bound(p, n), (tv, _tv_bound(p, n))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("kind", ["plain", "all", "substochastic"])
def test_ffbs_distribution_against_enumeration(kind, method):
    rng = np.random.default_rng(1 + len(kind))
    T, K = 4, 3
    li, la, ll, mask, length = _random_problem(rng, T, K, kind)
    ref = brute(li, la, ll, mask, length)
    n = 20000
    keys = jax.random.split(jax.random.key(42), n)
    states, mll = jax.jit(jax.vmap(
        lambda k: hmm_posterior_sample(k, li, la, ll, mask=mask, length=length, method=method)
    ))(keys)
    _assert_path_law(states, mll, ref)


@pytest.mark.parametrize("T, length, masked", [(5, None, False), (5, None, True), (5, 4, True), (5, 2, False),
                                               (5, 1, False)])
def test_two_way_ffbs_against_enumeration(T, length, masked):
    """The two-way FFBS (filtering from both ends, ``z`` drawn at the midpoint first, then outwards;
    ``hmm_posterior_sample_fast`` and the sequential ``hmm_posterior_sample`` at 9 to 16 states)
    draws exactly the posterior path law, with padding, missing steps, odd and even lengths and
    the one- and two-step sequences.  K = 9 states with banded transitions (self, neighbours, and
    one impossible step) keep the enumeration small.  (Drawing the midpoint from ``alpha_m`` alone,
    without ``beta_m``, fails 4 of these 5 cases, TV 0.15-0.36 against bounds 0.03-0.05; the
    one-step case has ``beta_m = 1``.)"""
    rng = np.random.default_rng(T + 10 * (length or 0) + masked)
    K = 9
    li = np.log(rng.dirichlet(np.ones(K)))
    offsets = (np.arange(K)[None, :] - np.arange(K)[:, None]) % K
    la = np.where((offsets <= 1) | (offsets == K - 1), np.log(rng.dirichlet(np.ones(K), size=K)), -np.inf)
    la[0, 1] = -np.inf  # an impossible transition
    ll = rng.normal(size=(T, K)) * 2
    mask = np.array([True, True, False, True, False, True][:T]) if masked else None
    ref = brute(li, la, ll, mask, length)
    n = 20000
    keys = jax.random.split(jax.random.key(7), n)
    states, mll, ok = jax.jit(jax.vmap(
        lambda k: hmm_posterior_sample_fast(k, li, la, ll, mask=mask, length=length, method="sequential")))(keys)
    assert bool(np.all(ok))
    seq_states, seq_mll = jax.jit(jax.vmap(
        lambda k: hmm_posterior_sample(k, li, la, ll, mask=mask, length=length, method="sequential")))(keys[:100])
    np.testing.assert_array_equal(seq_states, states[:100])
    np.testing.assert_allclose(seq_mll, mll[:100])
    _assert_path_law(states, mll, ref)


@pytest.mark.parametrize("method", METHODS)
def test_backward_sample_given_filter(method):
    rng = np.random.default_rng(5)
    li, la, ll, mask, length = _random_problem(rng, 4, 2, "timevarying")
    ref = brute(li, la, ll)
    f = hmm_filter(li, la, ll, method=method)
    assert isinstance(f, HMMFilter)
    n = 20000
    keys = jax.random.split(jax.random.key(3), n)
    states = np.asarray(jax.jit(jax.vmap(lambda k: hmm_backward_sample(k, f, la, method=method)))(keys))
    index = {z: i for i, z in enumerate(ref["seqs"])}
    emp = np.bincount([index[tuple(s)] for s in states], minlength=len(ref["seqs"])) / n
    assert 0.5 * np.abs(emp - ref["probs"]).sum() < _tv_bound(ref["probs"], n)


@pytest.mark.slow
def test_sequential_matches_parallel_longer():
    rng = np.random.default_rng(7)
    T, K = 60, 4
    li = np.log(rng.dirichlet(np.ones(K)))
    la = np.log(rng.dirichlet(np.ones(K), size=(T, K)))
    ll = rng.normal(size=(T, K)) * 3
    mask = rng.uniform(size=T) < 0.8
    for length in [41]:
        a = hmm_smoother(li, la, ll, mask, length, method="sequential")
        b = hmm_smoother(li, la, ll, mask, length, method="parallel")
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, atol=1e-8, rtol=1e-8)
        fa = hmm_filter(li, la, ll, mask, length, method="sequential")
        fb = hmm_filter(li, la, ll, mask, length, method="parallel")
        for x, y in zip(fa, fb):
            np.testing.assert_allclose(x, y, atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("method", ["sequential", pytest.param("parallel", marks=pytest.mark.slow)])
def test_batched_matches_loop(method):
    rng = np.random.default_rng(11)
    N, T, K = 3, 7, 3
    li = np.log(rng.dirichlet(np.ones(K), size=N))
    la = np.log(rng.dirichlet(np.ones(K), size=K))  # shared
    ll = rng.normal(size=(N, T, K))
    mask = rng.uniform(size=(N, T)) < 0.8
    length = np.array([7, 5, 1])
    f = hmm_filter(li, la, ll, mask, length, method=method)
    s = hmm_smoother(li, la, ll, mask, length, method=method)
    v = hmm_viterbi(li, la, ll, mask, length)
    st, mll = hmm_posterior_sample(jax.random.key(0), li, la, ll, mask, length, method=method)
    assert f.log_filtered.shape == (N, T, K) and st.shape == (N, T) and mll.shape == (N,)
    for i in range(N):
        fi = hmm_filter(li[i], la, ll[i], mask[i], length[i], method=method)
        si = s._replace(expected_transition_counts=s.expected_transition_counts[i])
        if i == 1:
            si = hmm_smoother(li[i], la, ll[i], mask[i], length[i], method=method)
        np.testing.assert_allclose(f.log_filtered[i], fi.log_filtered, atol=1e-10)
        np.testing.assert_allclose(f.marginal_loglik[i], fi.marginal_loglik, atol=1e-10)
        np.testing.assert_allclose(mll[i], fi.marginal_loglik, atol=1e-10)
        np.testing.assert_allclose(s.expected_transition_counts[i], si.expected_transition_counts,
                                   atol=1e-10)
        if method == "sequential":
            np.testing.assert_array_equal(v[i], hmm_viterbi(li[i], la, ll[i], mask[i], length[i]))
        np.testing.assert_array_equal(st[i, length[i]:], st[i, length[i] - 1])
    # batched transition matrices and a 2-d batch
    la_b = np.log(rng.dirichlet(np.ones(K), size=(N, K)))
    f2 = hmm_filter(li, la_b, ll, method=method)
    np.testing.assert_allclose(f2.marginal_loglik[1], hmm_filter(li[1], la_b[1], ll[1]).marginal_loglik,
                               atol=1e-10)
    f3 = jax.eval_shape(lambda x: hmm_filter(li[0], la, x, method=method), ll.reshape(1, N, T, K))
    assert f3.log_filtered.shape == (1, N, T, K)


def test_jit_and_vmap_with_traced_length():
    rng = np.random.default_rng(2)
    T, K = 6, 3
    li, la, ll, _, _ = _random_problem(rng, T, K, "plain")
    lengths = jnp.array([6, 4, 2])
    out = jax.jit(jax.vmap(lambda L: hmm_marginal_loglik(li, la, ll, length=L)))(lengths)
    for L, o in zip([6, 4, 2], out):
        np.testing.assert_allclose(o, brute(li, la, ll, length=L)["logZ"], atol=1e-8)


def test_underflow_fallback_sparse_transitions():
    # identity transitions (0/1) and emission spreads of 1e4: the rescaled pass underflows and
    # the exact log-space fallback must give the enumeration answer.
    li = np.log(np.array([0.5, 0.5]))
    la = np.where(np.eye(2, dtype=bool), 0.0, -np.inf)
    ll = np.array([[0.0, -1e4], [-1e4, 0.0], [-1e4, 0.0]])
    ref = brute(li, la, ll)
    for dtype in [np.float64, np.float32]:
        args = [np.asarray(x, dtype) for x in (li, la, ll)]
        f = hmm_filter(*args, method="sequential")
        np.testing.assert_allclose(f.marginal_loglik, ref["logZ"], rtol=1e-6)
        st, _ = hmm_posterior_sample(jax.random.key(0), *args, method="sequential")
        np.testing.assert_array_equal(st, [1, 1, 1])
        np.testing.assert_array_equal(hmm_viterbi(*args), [1, 1, 1])


def _f64_reference_loglik(li, la, ll):
    """Independent float64 numpy forward pass (log space, vectorized over states)."""
    lf = li + ll[0]
    A = np.exp(la)
    parts = []
    for t in range(ll.shape[0]):
        if t > 0:
            m = lf.max()
            lf = np.log(np.exp(lf - m) @ A) + m + ll[t]
        m = lf.max()
        z = m + np.log(np.exp(lf - m).sum())
        parts.append(z)
        lf = lf - z
    return np.sum(parts)


@pytest.mark.parametrize("case", ["uniform", "dominant"])
def test_float32_long_sequence_extreme(case):
    T, K = 10**6, 3
    rng = np.random.default_rng(0)
    if case == "uniform":
        ll = rng.uniform(-1e4, 0, size=(T, K))
    else:
        ll = np.full((T, K), -1e4) + rng.uniform(0, 1, size=(T, K))
        ll[:, 0] = rng.uniform(-1, 0, size=T)
    li = np.log(np.full(K, 1.0 / K))
    la = np.log(np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.25, 0.25, 0.5]]))
    li32, la32, ll32 = (np.asarray(x, np.float32) for x in (li, la, ll))
    # float64 reference of the SAME float32 inputs
    ref_ll = hmm_marginal_loglik(li32.astype(np.float64), la32.astype(np.float64),
                                 ll32.astype(np.float64), method="sequential")
    f = hmm_filter(li32, la32, ll32, method="sequential")
    assert f.log_filtered.dtype == np.float32
    assert np.isfinite(f.marginal_loglik)
    assert np.all(np.isfinite(f.log_normalizers))
    assert abs(float(f.marginal_loglik) - float(ref_ll)) <= 1e-5 * abs(float(ref_ll))
    st, mll = hmm_posterior_sample(jax.random.key(0), li32, la32, ll32, method="sequential")
    assert np.all((np.asarray(st) >= 0) & (np.asarray(st) < K))
    assert abs(float(mll) - float(ref_ll)) <= 1e-5 * abs(float(ref_ll))
    v32 = np.asarray(hmm_viterbi(li32, la32, ll32))
    v64 = np.asarray(hmm_viterbi(li32.astype(np.float64), la32.astype(np.float64), ll32.astype(np.float64)))
    srt = np.sort(ll32.astype(np.float64), axis=1)
    unambiguous = (srt[:, -1] - srt[:, -2]) > 10.0  # transitions cannot flip these steps
    assert unambiguous.mean() > 0.5
    np.testing.assert_array_equal(v32[unambiguous], v64[unambiguous])


def test_float32_reference_numpy_short():
    # the float64 reference used above agrees with an independent numpy forward pass
    rng = np.random.default_rng(3)
    T, K = 2000, 3
    ll = rng.uniform(-1e4, 0, size=(T, K))
    li = np.log(np.full(K, 1.0 / K))
    la = np.log(rng.dirichlet(np.ones(K), size=K))
    np.testing.assert_allclose(hmm_marginal_loglik(li, la, ll), _f64_reference_loglik(li, la, ll),
                               rtol=1e-12)


def test_input_validation():
    li, la, ll = np.zeros(3), np.zeros((3, 3)), np.zeros((5, 3))
    with pytest.raises(ValueError, match="log_initial_probs"):
        hmm_filter(np.zeros(2), la, ll)
    with pytest.raises(ValueError, match="log_transition_matrix"):
        hmm_filter(li, np.zeros((3, 2)), ll)
    with pytest.raises(ValueError, match="log_transition_matrix"):
        hmm_filter(li, np.zeros((4, 3, 3)), ll)
    with pytest.raises(ValueError, match="log_likelihoods"):
        hmm_filter(li, la, np.zeros(3))
    with pytest.raises(ValueError, match="mask"):
        hmm_filter(li, la, ll, mask=np.ones(4, bool))
    with pytest.raises(ValueError, match="length"):
        hmm_filter(li, la, ll, length=np.array([1, 2]))
    with pytest.raises(ValueError, match="length"):
        hmm_filter(li, la, ll, length=7)
    with pytest.raises(ValueError, match="method"):
        hmm_filter(li, la, ll, method="fast")
    with pytest.raises(ValueError, match="filter_result_or_log_filtered"):
        hmm_backward_sample(jax.random.key(0), np.zeros(3), la)
