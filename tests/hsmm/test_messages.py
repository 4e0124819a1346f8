"""The explicit-duration HSMM messages (numpyro_hdphmm._core.hsmm) against brute-force enumeration
of labelled segmentations, and against the HMM forward algorithm for geometric durations."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from jax.scipy.special import logsumexp

from numpyro_hdphmm._core import hsmm
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik


def _problem(seed, k=3, t=6, d=4):
    rng = np.random.default_rng(seed)
    init = np.log(rng.dirichlet(np.ones(k)))
    rows = rng.dirichlet(np.ones(k), size=k)
    log_trans = hsmm.without_self_transitions(jnp.asarray(rows))
    log_pmf = np.log(rng.dirichlet(np.ones(d), size=k))
    ll = rng.normal(size=(t, k)) * 2.0
    return jnp.asarray(init), log_trans, jnp.asarray(log_pmf), jnp.asarray(ll)


def _enumerate(init, log_trans, log_dur, log_surv, ll, length, right_censored, first=None):
    k = ll.shape[1]
    paths = np.array(list(itertools.product(range(k), repeat=int(length))))
    pad = ll.shape[0] - int(length)
    full = np.concatenate([paths, np.repeat(paths[:, -1:], pad, 1)], 1) if pad else paths
    lp = jax.vmap(lambda z: hsmm.hsmm_log_prob(z, init, log_trans, log_dur, log_surv, length,
                                               right_censored=right_censored, first=first))(jnp.asarray(full))
    em = jnp.sum(jnp.where(jnp.arange(ll.shape[0]) < length, ll[jnp.arange(ll.shape[0]), jnp.asarray(full)], 0.0), -1)
    return full, np.asarray(lp + em)


@pytest.mark.parametrize("right_censored", [True, False])
@pytest.mark.parametrize("left", [False, True])
@pytest.mark.parametrize("length", [6, 4])
def test_marginal_likelihood_matches_enumeration(right_censored, left, length):
    init, log_trans, log_pmf, ll = _problem(0)
    log_dur, log_surv = hsmm.duration_tables(log_pmf)
    first = hsmm.left_censored_tables(log_surv) if left else None
    _, joint = _enumerate(init, log_trans, log_dur, log_surv, ll, length, right_censored, first)
    msgs = hsmm.hsmm_backward(init, log_trans, log_dur, log_surv, ll, length=length, right_censored=right_censored,
                              first=first)
    np.testing.assert_allclose(msgs.marginal_loglik, logsumexp(joint), rtol=1e-5)


def test_censored_and_complete_last_segments_differ():
    """Negative control of the censoring term: scoring the censored last segment as complete changes
    the marginal likelihood (so the enumeration test above can tell them apart)."""
    init, log_trans, log_pmf, ll = _problem(1)
    log_dur, log_surv = hsmm.duration_tables(log_pmf)
    a = hsmm.hsmm_backward(init, log_trans, log_dur, log_surv, ll, right_censored=True).marginal_loglik
    b = hsmm.hsmm_backward(init, log_trans, log_dur, log_surv, ll, right_censored=False).marginal_loglik
    assert abs(float(a - b)) > 1e-2


def test_segmentations_sampled_from_their_posterior():
    init, log_trans, log_pmf, ll = _problem(2, k=2, t=5, d=3)
    log_dur, log_surv = hsmm.duration_tables(log_pmf)
    paths, joint = _enumerate(init, log_trans, log_dur, log_surv, ll, 5, True)
    exact = np.exp(joint - logsumexp(joint))
    n = 20000
    draws, _ = jax.jit(jax.vmap(lambda key: hsmm.hsmm_sample(key, init, log_trans, log_dur, log_surv, ll)))(
        random.split(random.key(0), n))
    codes = np.asarray(draws) @ (2 ** np.arange(5)[::-1])
    freq = np.bincount(codes, minlength=32) / n
    exact_by_code = np.zeros(32)
    exact_by_code[paths @ (2 ** np.arange(5)[::-1])] = exact
    tv = 0.5 * np.abs(freq - exact_by_code).sum()
    assert tv < 0.02, tv  # MC bound: 0.5 * sum sqrt(p (1-p) / n) ~ 0.01 for 32 cells
    assert np.all(exact_by_code[freq > 0] > 0)  # no impossible path (segment longer than D)


@pytest.mark.parametrize("right_censored", [True, False])
@pytest.mark.parametrize("left", [False, True])
def test_rescaled_messages_are_the_log_space_messages(right_censored, left):
    """The sampler's rescaled probability-space messages (``hsmm_sample_fast``) against the log-space
    ones (``hsmm_backward``): every start and end message and the marginal likelihood to 1e-12
    (float64), with missing and padded steps and emission spreads of 10 nats per step."""
    rng = np.random.default_rng(5)
    k, t, d = 4, 40, 12
    init = jnp.log(jnp.asarray(rng.dirichlet(np.ones(k))))
    log_trans = hsmm.without_self_transitions(jnp.asarray(rng.dirichlet(np.ones(k), size=k)))
    log_dur, log_surv = hsmm.duration_tables(jnp.asarray(np.log(rng.dirichlet(np.ones(d), size=k))))
    first = hsmm.left_censored_tables(log_surv) if left else None
    ll = jnp.asarray(rng.normal(size=(t, k)) * 5.0)
    mask = jnp.asarray(rng.uniform(size=t) > 0.2)
    for length in (40, 25, 1):
        want = hsmm.hsmm_backward(init, log_trans, log_dur, log_surv, ll, mask, length, right_censored=right_censored,
                                  first=first)
        prepared, n = hsmm.masked_likelihoods(ll, mask, length)
        got, ok = hsmm._scaled_backward(init, log_trans, log_dur, log_surv, prepared, n, right_censored, first)
        assert bool(ok)
        for a, b in ((got.log_start, want.log_start), (got.log_end, want.log_end)):
            a, b = np.asarray(a), np.asarray(b)
            assert np.array_equal(np.isfinite(a), np.isfinite(b))
            np.testing.assert_allclose(a[np.isfinite(b)], b[np.isfinite(b)], rtol=0, atol=1e-12)
        assert abs(float(got.marginal_loglik - want.marginal_loglik)) < 1e-12
        assert float(jnp.max(jnp.abs(got.log_start_first - want.log_start_first))) < 1e-12


def test_fast_sampler_draws_the_posterior_and_flags_underflow():
    """``hsmm_sample_fast``'s segmentations against enumeration (as ``hsmm_sample``'s above), and
    ``ok`` False when an emission is impossible under every reachable segmentation (the messages
    vanish), where the log-space marginal is ``-inf`` too."""
    init, log_trans, log_pmf, ll = _problem(2, k=2, t=5, d=3)
    log_dur, log_surv = hsmm.duration_tables(log_pmf)
    paths, joint = _enumerate(init, log_trans, log_dur, log_surv, ll, 5, True)
    exact = np.exp(joint - logsumexp(joint))
    n = 20000
    draws, _, ok = jax.jit(jax.vmap(lambda key: hsmm.hsmm_sample_fast(key, init, log_trans, log_dur, log_surv, ll)))(
        random.split(random.key(0), n))
    assert bool(jnp.all(ok))
    codes = np.asarray(draws) @ (2 ** np.arange(5)[::-1])
    freq = np.bincount(codes, minlength=32) / n
    exact_by_code = np.zeros(32)
    exact_by_code[paths @ (2 ** np.arange(5)[::-1])] = exact
    assert 0.5 * np.abs(freq - exact_by_code).sum() < 0.02
    impossible = ll.at[2].set(-jnp.inf)
    _, marginal, ok = hsmm.hsmm_sample_fast(random.key(1), init, log_trans, log_dur, log_surv, impossible)
    assert not bool(ok) and not np.isfinite(float(marginal))


def test_geometric_durations_give_the_hmm_likelihood():
    """An HSMM with geometric durations (untruncated, D >= T) and transitions A_jk / (1 - A_jj) is the
    HMM with transition matrix A: the same marginal likelihood (float64: to 1e-10)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(3)
        k, t = 3, 12
        a = rng.dirichlet(np.ones(k), size=k)
        init = rng.dirichlet(np.ones(k))
        ll = jnp.asarray(rng.normal(size=(t, k)) * 3.0)
        stay = np.diag(a)
        d = np.arange(1, t + 1)
        log_dur = jnp.asarray(np.log1p(-stay)[:, None] + (d - 1)[None] * np.log(stay)[:, None])
        log_surv = jnp.asarray((d - 1)[None] * np.log(stay)[:, None])
        log_trans = hsmm.without_self_transitions(jnp.asarray(a))
        ours = hsmm.hsmm_backward(jnp.log(init), log_trans, log_dur, log_surv, ll).marginal_loglik
        ref = hmm_marginal_loglik(jnp.log(init), jnp.log(jnp.asarray(a)), ll)
        assert abs(float(ours - ref)) < 1e-10
        short = hsmm.hsmm_backward(jnp.log(init), log_trans, log_dur, log_surv, ll, length=7).marginal_loglik
        assert abs(float(short - hmm_marginal_loglik(jnp.log(init), jnp.log(jnp.asarray(a)), ll, length=7))) < 1e-10


def test_segments_and_log_prob_of_a_path():
    states = jnp.array([0, 0, 1, 1, 1, 2, 2, 2])
    ends, dur = hsmm.segments(states, 7)
    assert list(np.asarray(ends)) == [False, True, False, False, True, False, True, False]
    assert list(np.asarray(dur)) == [0, 2, 0, 0, 3, 0, 2, 0]
    init, log_trans, log_pmf, _ = _problem(4, k=3, d=3)
    log_dur, log_surv = hsmm.duration_tables(log_pmf)
    lp = hsmm.hsmm_log_prob(states, init, log_trans, log_dur, log_surv, 7)
    expect = init[0] + log_trans[0, 1] + log_trans[1, 2] + log_dur[0, 1] + log_dur[1, 2] + log_surv[2, 1]
    np.testing.assert_allclose(lp, expect, rtol=1e-6)
    too_long = hsmm.hsmm_log_prob(jnp.zeros(8, jnp.int32), init, log_trans, log_dur, log_surv)
    assert np.isneginf(too_long)
