r"""Explicit-duration hidden semi-Markov model message passing: backward messages, forward
sampling of segmentations, the log probability of a segmentation.

A segmentation of a sequence of length ``n`` is a run of segments ``(z_1, d_1), (z_2, d_2), ...``
(``sum d = n``, consecutive states differ): ``z_1 ~ pi``, ``z_{s+1} ~ A[z_s]`` (``A`` has a zero
diagonal), ``d_s ~ p_{z_s}`` on ``{1, ..., D}``, and every step of segment ``s`` emits from state
``z_s``.  All inputs are in LOG space:

``log_init (K,)``
    ``log pi``.
``log_trans (K, K)``
    ``log A`` with ``-inf`` on the diagonal (:func:`without_self_transitions`).
``log_dur (K, D)``, ``log_surv (K, D)``
    ``log p_k(d)`` and ``log P_k(D >= d)`` for ``d = 1..D`` (:func:`duration_tables`; column
    ``d - 1`` holds duration ``d``).
``ll (T, K)``
    emission log-likelihoods; ``mask (T,)`` False drops a missing step's term; steps ``t >= length``
    are padding: they contribute nothing and their sampled states copy the last valid one.
``right_censored``
    the last segment is only known to last at least until the end: its term is ``log_surv``
    (Johnson & Willsky 2013, Sec. 3.2) instead of ``log_dur`` (the sequence ends with a segment).
``first``
    ``None`` or ``(log_dur_first, log_surv_first)``: the law of the first segment's duration
    when the first segment is left-censored (the process was running before the first step;
    :func:`left_censored_tables`).

Backward messages (Johnson & Willsky 2013, eqs. 4-5; Murphy 2002), with time ``0..n-1``:

.. math::

    E_t(i) = p(y_{t+1:n-1} \mid \text{a segment of } i \text{ ends at } t)
           = \sum_j A_{ij} S_{t+1}(j), \qquad E_{n-1} = 1,

    S_t(j) = p(y_{t:n-1} \mid \text{a segment of } j \text{ starts at } t)
           = \sum_{d=1}^{\min(D, n-t)} p_j(d) \Big(\prod_{s=t}^{t+d-1} e_s(j)\Big) E_{t+d-1}(j),

with ``P_j(D >= d)`` for ``p_j(d)`` in the term ``d = n - t`` when right-censored, and
``p(y) = sum_j pi_j S_0(j)``.  One ``lax.scan`` from the end carries the last ``D`` values of
``E`` and the window sums ``sum_{s=t}^{t+d-1} log e_s(j)`` (``d = 1..D``), updated by one shift and
one addition per step: ``O(T K (D + K))`` work, ``O(D K)`` memory in the loop, ``O(T K)`` stored.
Forward sampling draws ``z_1 ∝ pi S_0``, ``d ∝`` the terms of ``S_t(z)``, the next state
``∝ A[z] S_{t+d}``, ... (one pass over the steps with a draw where a segment starts).
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import logsumexp
from numpyro_hdphmm._core.reduce import cumulative_logsumexp

__all__ = [
    "HSMMMessages",
    "duration_tables",
    "left_censored_tables",
    "without_self_transitions",
    "hsmm_backward",
    "hsmm_sample",
    "hsmm_sample_fast",
    "masked_likelihoods",
    "hsmm_log_prob",
    "segments",
    "sample_segments",
    "HSMMPosterior",
    "HSMMFilter",
    "hsmm_viterbi",
    "hsmm_forward",
    "hsmm_smoother",
]


class HSMMMessages(NamedTuple):
    """Result of :func:`hsmm_backward`: ``log_end (T, K)`` (``log E_t``), ``log_start (T, K)``
    (``log S_t``; ``-inf`` on padding), ``log_start_first (K,)`` (``log S_0`` with the first
    segment's own duration law; ``log_start[0]`` when there is none) and ``marginal_loglik``
    (``log p(y)``)."""

    log_end: jax.Array
    log_start: jax.Array
    log_start_first: jax.Array
    marginal_loglik: jax.Array


def _neg_inf(dtype):
    return jnp.array(-jnp.inf, dtype)


def duration_tables(log_pmf) -> Tuple[jax.Array, jax.Array]:
    r"""``(log_dur, log_surv)`` of durations truncated to ``{1..D}`` and renormalized, from the
    untruncated ``log_pmf (K, D)`` of ``d = 1..D``: ``log p(d) - log sum_{d'<=D} p(d')`` and the
    survival ``log P(D >= d) = logsumexp_{d' >= d} log p(d')`` (reverse cumulative, in log space)."""
    log_pmf = jnp.asarray(log_pmf)
    log_dur = log_pmf - logsumexp(log_pmf, axis=-1, keepdims=True)
    log_surv = cumulative_logsumexp(log_dur, axis=-1, reverse=True)
    return log_dur, log_surv


def left_censored_tables(log_surv) -> Tuple[jax.Array, jax.Array]:
    r"""The first segment's duration law when it is left-censored (the process ran before the first
    step, in equilibrium): the residual life ``p(d) = P(D >= d) / sum_{d'} P(D >= d')`` and its
    survival, from ``log_surv (K, D)`` of :func:`duration_tables`."""
    return duration_tables(log_surv)


def without_self_transitions(rows):
    r"""``log A (K, K)`` from transition rows ``(K, C)``, ``C >= K`` (a last column beyond ``K`` is the
    mass of the states not represented): the self-transition removed and each row divided by the
    rest of its mass, ``A_ij = pi_ij / (1 - pi_ii)`` (``-inf`` on the diagonal; Johnson & Willsky
    2013, eq. 9).  Under the weak limit the rows give no mass beyond ``K`` and each row of ``A``
    sums to one."""
    rows = jnp.asarray(rows)
    k = rows.shape[0]
    off = rows.at[jnp.arange(k), jnp.arange(k)].set(0.0)
    tiny = jnp.finfo(off.dtype).tiny
    log_off = jnp.where(off > 0, jnp.log(jnp.maximum(off, tiny)), -jnp.inf)
    total = logsumexp(log_off, axis=-1, keepdims=True)
    # a row whose self-transition took all its mass in floating point (pi_ii = 1, a measure-zero
    # event): its departures are uniform over the other states
    uniform = jnp.where(jnp.eye(k, dtype=bool), -jnp.inf, -jnp.log(jnp.maximum(k - 1, 1)))
    return jnp.where(jnp.isfinite(total), log_off[:, :k] - total, uniform)


def masked_likelihoods(ll, mask=None, length=None):
    """``(ll (T, K), length)``: the emission log-likelihoods with missing steps (``mask`` False) and
    padding (``t >= length``) set to 0, and ``length`` as an int32 scalar (``T`` when None)."""
    t_max = ll.shape[0]
    length = jnp.asarray(t_max if length is None else length, jnp.int32)
    keep = jnp.arange(t_max) < length
    if mask is not None:
        keep = keep & jnp.asarray(mask, bool)
    return jnp.where(keep[:, None], ll, 0.0), length


def _segment_terms(log_dur, log_surv, window, ends, t, length, right_censored):
    """The ``(D, K)`` log terms of ``S_t``: duration, emissions of the window, ``E`` at its end;
    ``-inf`` past the sequence's end."""
    num_d = log_dur.shape[-1]
    d = jnp.arange(1, num_d + 1)
    reaches_end = (t + d - 1) == (length - 1)
    law = jnp.where((reaches_end & right_censored)[:, None], log_surv.T, log_dur.T)
    fits = (d <= length - t)[:, None]
    return jnp.where(fits, law + window + ends, -jnp.inf)


def hsmm_backward(log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                  right_censored: bool = True, first: Optional[Tuple] = None) -> HSMMMessages:
    """Backward messages of one sequence (module docstring): :class:`HSMMMessages`.

    ``log_init (K,)``, ``log_trans (K, K)``, ``log_dur``/``log_surv (K, D)``, ``ll (T, K)``,
    ``mask (T,)``, ``length`` (scalar, may be traced)."""
    ll, length = masked_likelihoods(ll, mask, length)
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    ninf = _neg_inf(dtype)

    def body(carry, t):
        window, ends, start_next = carry  # window[d-1] = sum_{s=t+1}^{t+d} ll[s]; ends[d-1] = E_{t+d}
        end_t = jnp.where(t == length - 1, jnp.zeros((k,), dtype),
                          logsumexp(log_trans + start_next[None, :], axis=-1))
        end_t = jnp.where(t < length, end_t, ninf)
        window = jnp.concatenate([jnp.zeros((1, k), dtype), window[:-1]], 0) + ll[t][None, :]
        ends = jnp.concatenate([end_t[None], ends[:-1]], 0)
        terms = _segment_terms(log_dur, log_surv, window, ends, t, length, right_censored)
        start_t = logsumexp(terms, axis=0)
        return (window, ends, start_t), (end_t, start_t)

    init = (jnp.zeros((num_d, k), dtype), jnp.full((num_d, k), ninf), jnp.full((k,), ninf))
    (window, ends, _), (log_end, log_start) = lax.scan(body, init, jnp.arange(t_max), reverse=True)
    if first is None:
        start_first = log_start[0]
    else:
        start_first = logsumexp(_segment_terms(*first, window, ends, 0, length, right_censored), axis=0)
    marginal = logsumexp(log_init + start_first)
    return HSMMMessages(log_end, log_start, start_first, marginal)


def _categorical(key, logits):
    return random.categorical(key, jnp.where(jnp.isnan(logits), -jnp.inf, logits))


def hsmm_sample(rng_key, log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                right_censored: bool = True, first: Optional[Tuple] = None):
    r"""A segmentation of one sequence from its posterior: ``(states (T,), marginal_loglik)``.

    Backward messages (:func:`hsmm_backward`), then forward sampling: at each segment start ``t``
    the state (``∝ pi S_0`` at ``t = 0``, else ``∝ A[z_prev] S_t``) and the duration (``∝`` the
    terms of ``S_t(z)``), one ``lax.while_loop`` iteration per segment (``O(D + K)`` each).  Padded
    steps copy the last valid state."""
    msgs = hsmm_backward(log_init, log_trans, log_dur, log_surv, ll, mask, length,
                         right_censored=right_censored, first=first)
    ll, length = masked_likelihoods(ll, mask, length)
    return _sample_forward(rng_key, msgs, log_init, log_trans, log_dur, log_surv, ll, length, right_censored,
                           first), msgs.marginal_loglik


def hsmm_sample_fast(rng_key, log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                     right_censored: bool = True, first: Optional[Tuple] = None):
    r""":func:`hsmm_sample` with the backward messages in rescaled probability space
    (:func:`_scaled_backward`): ``(states (T,), marginal_loglik, ok)``.  ``ok`` is False when a
    step's messages underflowed or overflowed, and then ``states`` must not be used (the samplers
    keep the previous ones: ``ok`` depends only on the conditioning values, so skipping the update
    leaves the target invariant, as with :func:`numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`)."""
    ll, length = masked_likelihoods(ll, mask, length)
    msgs, ok = _scaled_backward(log_init, log_trans, log_dur, log_surv, ll, length, right_censored, first)
    states = _sample_forward(rng_key, msgs, log_init, log_trans, log_dur, log_surv, ll, length, right_censored, first)
    return states, msgs.marginal_loglik, ok


def _scaled_backward(log_init, log_trans, log_dur, log_surv, ll, length, right_censored, first):
    r"""The recursions of :func:`hsmm_backward` in rescaled probability space: ``(HSMMMessages, ok)``.

    With per-step constants ``c_s > 0`` and ``C_t = prod_{s >= t} c_s``, the scaled messages
    ``S^_t = S_t / C_t`` and ``E^_t = E_t / C_{t+1}`` obey the same recursions with the emissions
    ``e_s / c_s``: ``E^_t = A S^_{t+1}`` and ``S^_t(j) = sum_d p_j(d) X_t(d, j)``, where ``X_t(d, j) =
    prod_{s=t}^{t+d-1} (e_s(j) / c_s) E^_{t+d-1}(j)`` (the window and its end in one array) obeys
    ``X_t(1) = (e_t / c_t) E^_t`` and ``X_t(d) = (e_t / c_t) X_{t+1}(d - 1)``: one shift and one
    product per step.  ``c_t = max_k e_t(k) sigma_t`` with ``sigma_t`` the largest unscaled
    ``S^_t(j)``, so that ``max S^_t = 1``.  ``E^`` is 0 past the end, so windows that run past it
    vanish by themselves; the censored last segment's term swaps ``p_j(d)`` for ``P_j(D >= d)`` at
    ``d = n - t``.  The transitions, duration laws and ``e_t / max_k e_t`` are exponentiated once,
    outside the loop; a step costs ``O(D K + K^2)`` multiplications and additions, no ``exp`` or
    ``log``.  The log messages are ``log S^_t + log C_t`` and ``log E^_t + log C_{t+1}``.  ``ok`` is
    False when some ``sigma_t`` fell below ``sqrt(tiny)`` or was not finite."""
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    trans = jnp.exp(log_trans)
    law, surv = jnp.exp(log_dur), jnp.exp(log_surv)  # (K, D): durations along the last (vectorized) axis
    top = jnp.max(ll, axis=-1)
    emit = jnp.exp(ll - top[:, None])
    threshold = jnp.sqrt(jnp.finfo(dtype).tiny)

    def starts(law_t, surv_t, x, t):
        raw = jnp.sum(law_t * x, axis=-1)
        if not right_censored:
            return raw
        at = jnp.clip(length - t - 1, 0, num_d - 1)  # the censored last segment: d = length - t
        fix = (surv_t[:, at] - law_t[:, at]) * x[:, at]
        return raw + jnp.where((length - t >= 1) & (length - t <= num_d), fix, 0.0)

    def body(carry, t):
        x_next, start_next, scale_next = carry  # X_{t+1} (K, D), not yet divided by sigma_{t+1}
        end_t = jnp.where(t == length - 1, jnp.ones((k,), dtype), trans @ start_next)
        end_t = jnp.where(t < length, end_t, 0.0)
        x = jnp.concatenate([end_t[:, None], x_next[:, :-1] / scale_next], -1) * emit[t][:, None]
        raw = starts(law, surv, x, t)
        sigma = jnp.max(raw)
        valid = t < length
        good = jnp.isfinite(sigma) & (sigma >= threshold)
        scale = jnp.where(valid & (sigma > 0) & jnp.isfinite(sigma), sigma, 1.0)
        start_t = raw / scale
        log_c = jnp.where(valid, top[t] + jnp.log(scale), 0.0)
        return (x, start_t, scale), (end_t, start_t, log_c, ~valid | good)

    init = (jnp.zeros((k, num_d), dtype), jnp.zeros((k,), dtype), jnp.ones((), dtype))
    (x, _, scale0), (end, start, log_c, good) = lax.scan(body, init, jnp.arange(t_max), reverse=True)
    log_scale = jnp.flip(jnp.cumsum(jnp.flip(log_c)))  # log C_t
    log_scale_next = jnp.concatenate([log_scale[1:], jnp.zeros((1,), dtype)])  # log C_{t+1}
    tiny = jnp.finfo(dtype).tiny
    safe_log = lambda v: jnp.where(v > 0, jnp.log(jnp.maximum(v, tiny)), -jnp.inf)
    log_start = safe_log(start) + log_scale[:, None]
    log_end = safe_log(end) + log_scale_next[:, None]
    if first is None:
        start_first = log_start[0]
    else:
        first_dur, first_surv = (jnp.exp(a) for a in first)
        start_first = safe_log(starts(first_dur, first_surv, x / scale0, 0)) + log_scale[0]
    marginal = logsumexp(log_init + start_first)
    ok = jnp.all(good) & jnp.isfinite(marginal)
    return HSMMMessages(log_end, log_start, start_first, marginal), ok


def _sample_forward(rng_key, msgs: HSMMMessages, log_init, log_trans, log_dur, log_surv, ll, length, right_censored,
                    first):
    """The forward sampling of :func:`hsmm_sample` from its backward messages (``ll`` prepared)."""
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    pad = lambda a, fill: jnp.concatenate([a, jnp.full((num_d, k), fill, dtype)], 0)
    ll_pad, end_pad = pad(ll, 0.0), pad(msgs.log_end, -jnp.inf)
    first_dur, first_surv = (log_dur, log_surv) if first is None else first

    def body(carry):
        t, prev, key, seg_state, is_start = carry
        key, k_state, k_dur = random.split(key, 3)
        state_logits = jnp.where(t == 0, log_init + msgs.log_start_first, log_trans[prev] + msgs.log_start[t])
        state = _categorical(k_state, state_logits).astype(jnp.int32)
        zero = jnp.zeros((), t.dtype)
        window = jnp.cumsum(lax.dynamic_slice(ll_pad, (t, zero), (num_d, k))[:, state])
        ends = lax.dynamic_slice(end_pad, (t, zero), (num_d, k))[:, state]
        dur_row = jnp.where(t == 0, first_dur[state], log_dur[state])
        surv_row = jnp.where(t == 0, first_surv[state], log_surv[state])
        terms = _segment_terms(dur_row[None], surv_row[None], window[:, None], ends[:, None], t, length,
                               right_censored)[:, 0]
        duration = (_categorical(k_dur, terms) + 1).astype(jnp.int32)
        return (t + duration).astype(jnp.int32), state, key, seg_state.at[t].set(state), is_start.at[t].set(True)

    # one iteration per segment (not per step): a while loop from segment start to segment start,
    # then every step takes the state of the last segment that started at or before it
    init = (jnp.int32(0), jnp.int32(0), rng_key, jnp.zeros((t_max,), jnp.int32), jnp.zeros((t_max,), bool))
    _, _, _, seg_state, is_start = lax.while_loop(lambda c: c[0] < length, body, init)
    last_start = lax.cummax(jnp.where(is_start, jnp.arange(t_max), 0), axis=0)
    return seg_state[last_start].astype(jnp.int32)


def segments(states, length=None):
    r"""The segments of a state sequence ``states (T,)``: ``(ends (T,) bool, durations (T,) int)``,
    ``ends[t]`` True where a segment ends at ``t`` (the state changes at ``t + 1`` or ``t`` is the
    last valid step) and ``durations[t]`` its duration there (0 elsewhere)."""
    states = jnp.asarray(states)
    t_max = states.shape[-1]
    length = jnp.asarray(t_max if length is None else length, jnp.int32)
    t = jnp.arange(t_max)
    valid = t < length
    change = jnp.concatenate([jnp.ones((1,), bool), states[1:] != states[:-1]])
    start = lax.cummax(jnp.where(change, t, 0), axis=0)
    last = t == length - 1
    ends = valid & (last | jnp.concatenate([states[1:] != states[:-1], jnp.ones((1,), bool)]))
    return ends, jnp.where(ends, t - start + 1, 0)


def hsmm_log_prob(states, log_init, log_trans, log_dur, log_surv, length=None, *, right_censored: bool = True,
                  first: Optional[Tuple] = None):
    r"""``log p(z)`` of a state sequence ``states (T,)`` under the segment process (module
    docstring): the first state, the transitions at the segment boundaries and each segment's
    duration term (the last one's survival when right-censored; the first one's own law with
    ``first``); ``-inf`` when a segment is longer than ``D``."""
    states = jnp.asarray(states, jnp.int32)
    t_max = states.shape[-1]
    num_d = log_dur.shape[-1]
    length = jnp.asarray(t_max if length is None else length, jnp.int32)
    t = jnp.arange(t_max)
    ends, durations = segments(states, length)
    boundary = (t > 0) & (t < length) & jnp.concatenate([jnp.zeros((1,), bool), states[1:] != states[:-1]])
    prev = jnp.concatenate([states[:1], states[:-1]])
    trans_terms = jnp.where(boundary, log_trans[prev, states], 0.0)
    col = jnp.clip(durations - 1, 0, num_d - 1)
    censored = right_censored & (t == length - 1)
    first_dur, first_surv = (log_dur, log_surv) if first is None else first
    is_first = (t - durations + 1) == 0
    dur = jnp.where(is_first, first_dur[states, col], log_dur[states, col])
    surv = jnp.where(is_first, first_surv[states, col], log_surv[states, col])
    term = jnp.where(censored, surv, dur)
    term = jnp.where(durations > num_d, -jnp.inf, term)
    dur_terms = jnp.where(ends, term, 0.0)
    return log_init[states[0]] + jnp.sum(trans_terms) + jnp.sum(dur_terms)


def sample_segments(rng_key, log_init, log_rows, log_dur, num_steps: int, *, first: Optional[Tuple] = None):
    r"""A state sequence from the segment process (the prior): ``(states (T,), escapes)``.

    ``log_init (C,)`` and ``log_rows (K, C)`` (``C = K`` or ``K + 1``; a last column beyond ``K``
    is the mass of the states not represented, whose draws are redrawn among the represented ones
    and counted in ``escapes``, as :func:`numpyro_hdphmm.distributions.sample_markov_chain` does);
    the self-transitions of ``log_rows`` are removed.  ``log_dur (K, D)``: durations on ``1..D``
    (``first``: the first segment's, :func:`left_censored_tables`).  Durations beyond the end are
    cut at ``T`` (the last segment is censored)."""
    k = log_rows.shape[0]
    cols = log_rows.shape[-1]
    log_rows = jnp.where(jnp.eye(k, cols, dtype=bool), -jnp.inf, log_rows)
    first_dur = log_dur if first is None else first[0]

    def draw_state(key, logits):
        k_main, k_redraw = random.split(key)
        z = _categorical(k_main, logits)
        escaped = z >= k
        return jnp.where(escaped, _categorical(k_redraw, logits[:k]), z).astype(jnp.int32), escaped.astype(jnp.int32)

    def body(carry, inputs):
        state, remaining, escapes = carry
        t, key = inputs
        k_state, k_dur = random.split(key)
        new_state, escaped = draw_state(k_state, jnp.where(t == 0, log_init, log_rows[state]))
        duration = _categorical(k_dur, jnp.where(t == 0, first_dur[new_state], log_dur[new_state])) + 1
        starts = remaining == 0
        state = jnp.where(starts, new_state, state).astype(jnp.int32)
        escapes = escapes + jnp.where(starts, escaped, 0)
        remaining = (jnp.where(starts, duration, remaining) - 1).astype(jnp.int32)
        return (state, remaining, escapes), state

    keys = random.split(rng_key, num_steps)
    (_, _, escapes), states = lax.scan(body, (jnp.int32(0), jnp.int32(0), jnp.int32(0)), (jnp.arange(num_steps), keys))
    return states, escapes


# ============================================================================ results: Viterbi, forward, smoother
def _max_backward(log_init, log_trans, log_dur, log_surv, ll, length, right_censored, first):
    r"""Max-product backward messages: ``(log_end*, log_start*, log_start_first*, max log p(z, y))``,
    the recursions of :func:`hsmm_backward` with ``max`` in place of the sums (``ll`` prepared)."""
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    ninf = _neg_inf(dtype)

    def body(carry, t):
        window, ends, start_next = carry
        end_t = jnp.where(t == length - 1, jnp.zeros((k,), dtype), jnp.max(log_trans + start_next[None, :], axis=-1))
        end_t = jnp.where(t < length, end_t, ninf)
        window = jnp.concatenate([jnp.zeros((1, k), dtype), window[:-1]], 0) + ll[t][None, :]
        ends = jnp.concatenate([end_t[None], ends[:-1]], 0)
        start_t = jnp.max(_segment_terms(log_dur, log_surv, window, ends, t, length, right_censored), axis=0)
        return (window, ends, start_t), (end_t, start_t)

    init = (jnp.zeros((num_d, k), dtype), jnp.full((num_d, k), ninf), jnp.full((k,), ninf))
    (window, ends, _), (log_end, log_start) = lax.scan(body, init, jnp.arange(t_max), reverse=True)
    if first is None:
        start_first = log_start[0]
    else:
        start_first = jnp.max(_segment_terms(*first, window, ends, 0, length, right_censored), axis=0)
    return log_end, log_start, start_first, jnp.max(log_init + start_first)


def hsmm_viterbi(log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                 right_censored: bool = True, first: Optional[Tuple] = None):
    r"""The most likely segmentation of one sequence: ``(states (T,), log p(z*, y))``.

    Max-product backward messages (those of the module docstring with ``max`` for the sums:
    ``E*_t(i) = max_j A_ij S*_{t+1}(j)``, ``S*_t(j) = max_d p_j(d) prod_s e_s(j) E*_{t+d-1}(j)``),
    then a forward decode that, at each segment start ``t``, takes the maximizing state
    (``argmax pi S*_0`` at ``t = 0``, else ``argmax_j A[z_prev, j] S*_t(j)``) and the maximizing
    duration (the largest term of ``S*_t(z)``).  Ties go to the lowest state and the shortest
    duration.  Padded steps copy the last valid state.  ``O(T K (D + K))``."""
    log_init, log_trans, log_dur, log_surv = (jnp.asarray(a) for a in (log_init, log_trans, log_dur, log_surv))
    first = None if first is None else tuple(jnp.asarray(a) for a in first)
    ll, length = masked_likelihoods(ll, mask, length)
    log_end, log_start, start_first, best = _max_backward(log_init, log_trans, log_dur, log_surv, ll, length,
                                                          right_censored, first)
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    pad = lambda a, fill: jnp.concatenate([a, jnp.full((num_d, k), fill, dtype)], 0)
    ll_pad, end_pad = pad(ll, 0.0), pad(log_end, -jnp.inf)
    first_dur, first_surv = (log_dur, log_surv) if first is None else first

    def body(carry, t):
        state, remaining = carry
        logits = jnp.where(t == 0, log_init + start_first, log_trans[state] + log_start[t])
        new_state = jnp.argmax(logits).astype(jnp.int32)
        window = jnp.cumsum(lax.dynamic_slice(ll_pad, (t, 0), (num_d, k))[:, new_state])
        ends = lax.dynamic_slice(end_pad, (t, 0), (num_d, k))[:, new_state]
        dur_row = jnp.where(t == 0, first_dur[new_state], log_dur[new_state])
        surv_row = jnp.where(t == 0, first_surv[new_state], log_surv[new_state])
        terms = _segment_terms(dur_row[None], surv_row[None], window[:, None], ends[:, None], t, length,
                               right_censored)[:, 0]
        duration = jnp.argmax(terms) + 1
        starts = (remaining == 0) & (t < length)
        state = jnp.where(starts, new_state, state).astype(jnp.int32)
        remaining = (jnp.where(starts, duration, remaining) - (t < length)).astype(jnp.int32)
        return (state, remaining), state

    _, states = lax.scan(body, (jnp.int32(0), jnp.int32(0)), jnp.arange(t_max))
    return states.astype(jnp.int32), best


class HSMMFilter(NamedTuple):
    r"""Result of :func:`hsmm_forward` (one sequence of ``T`` steps, ``K`` states).

    log_seg_end : ``(T, K)`` ``log F_t(k) = log p(y_{0:t}, a segment of k ends at t)`` (the last
        valid step's term with the survival when right-censored; ``-inf`` on padding)
    log_seg_start : ``(T, K)`` ``log B_t(k) = log p(y_{0:t-1}, a segment of k starts at t)``
        (``log pi`` at ``t = 0``)
    log_normalizers : ``(T,)`` ``log p(y_t | y_{0:t-1})`` (0 on padding; see :func:`hsmm_forward`)
    marginal_loglik : ``log p(y)``, the sum of ``log_normalizers`` (that of :func:`hsmm_backward`)
    """

    log_seg_end: jax.Array
    log_seg_start: jax.Array
    log_normalizers: jax.Array
    marginal_loglik: jax.Array


def hsmm_forward(log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                 right_censored: bool = True, first: Optional[Tuple] = None) -> HSMMFilter:
    r"""Forward segment messages and the one-step-ahead predictive of one sequence: :class:`HSMMFilter`.

    With ``B_0 = pi`` and ``B_t(j) = sum_i F_{t-1}(i) A_ij``,

    .. math::

        F_t(j) = \sum_{d=1}^{\min(D, t+1)} B_{t-d+1}(j)\, p_j(d) \prod_{s=t-d+1}^{t} e_s(j),
        \qquad
        G_t(j) = \sum_{d=1}^{\min(D, t+1)} B_{t-d+1}(j)\, P_j(D \ge d) \prod_{s=t-d+1}^{t} e_s(j)

    (the first segment's own law with ``first``; at the last valid step ``F`` takes the survival
    when ``right_censored``).  ``Z_t = sum_j G_t(j) = p(y_{0:t})`` is the probability of the prefix
    under the segment process with the segment in progress at ``t`` free to go on, and ``Z_{n-1} =
    sum_j F_{n-1}(j) = p(y)`` (the model's own end of sequence).  The normalizers are ``log Z_t -
    log Z_{t-1}`` (``Z_{-1} = 1``): the one-step-ahead predictive ``log p(y_t | y_{0:t-1})``
    with the states and durations summed out, the last one also carrying the probability that
    the last segment ends exactly at the end (``0`` extra when right-censored); they sum to
    ``log p(y)``.  A missing step's normalizer is 0 with stochastic rows.  One ``lax.scan`` with the
    last ``D`` values of ``B`` and the window sums in its carry: ``O(T K (D + K))``."""
    log_init, log_trans, log_dur, log_surv = (jnp.asarray(a) for a in (log_init, log_trans, log_dur, log_surv))
    first = None if first is None else tuple(jnp.asarray(a) for a in first)
    ll, length = masked_likelihoods(ll, mask, length)
    t_max, k = ll.shape
    num_d = log_dur.shape[-1]
    dtype = ll.dtype
    ninf = _neg_inf(dtype)
    first_dur, first_surv = (log_dur, log_surv) if first is None else first
    d = jnp.arange(1, num_d + 1)

    def body(carry, t):
        window, starts, end_prev, z_prev = carry  # window[d-1] = sum_{s=t-d+1}^{t-1} ll[s]; starts[d-1] = B_{t-d+1}
        start_t = jnp.where(t == 0, log_init, logsumexp(end_prev[:, None] + log_trans, axis=0))
        window = jnp.concatenate([jnp.zeros((1, k), dtype), window[:-1]], 0) + ll[t][None, :]
        starts = jnp.concatenate([start_t[None], starts[:-1]], 0)
        seg_start = t - d + 1
        is_first = (seg_start == 0)[:, None]
        dur = jnp.where(is_first, first_dur.T, log_dur.T)
        surv = jnp.where(is_first, first_surv.T, log_surv.T)
        fits = (seg_start >= 0)[:, None]
        last = t == length - 1
        end_law = jnp.where(last & right_censored, surv, dur)
        end_t = logsumexp(jnp.where(fits, starts + window + end_law, -jnp.inf), axis=0)
        alive = logsumexp(jnp.where(fits, starts + window + surv, -jnp.inf))
        z_t = jnp.where(last, logsumexp(end_t), alive)
        valid = t < length
        norm = jnp.where(valid, z_t - z_prev, 0.0)
        end_t = jnp.where(valid, end_t, ninf)
        start_t = jnp.where(valid, start_t, ninf)
        return (window, starts, end_t, jnp.where(valid, z_t, z_prev)), (end_t, start_t, norm)

    init = (jnp.zeros((num_d, k), dtype), jnp.full((num_d, k), ninf), jnp.full((k,), ninf), jnp.zeros((), dtype))
    (_, _, _, z_last), (log_seg_end, log_seg_start, norms) = lax.scan(body, init, jnp.arange(t_max))
    return HSMMFilter(log_seg_end, log_seg_start, norms, z_last)


class HSMMPosterior(NamedTuple):
    r"""Result of :func:`hsmm_smoother`: ``log_smoothed (T, K)`` ``log p(z_t = k | y)`` (``-inf`` on
    padding), ``log_start_probs``/``log_end_probs (T, K)`` the posterior log probabilities that a
    segment of ``k`` starts / ends at ``t``, and ``marginal_loglik`` ``log p(y)``."""

    log_smoothed: jax.Array
    log_start_probs: jax.Array
    log_end_probs: jax.Array
    marginal_loglik: jax.Array


def hsmm_smoother(log_init, log_trans, log_dur, log_surv, ll, mask=None, length=None, *,
                  right_censored: bool = True, first: Optional[Tuple] = None) -> HSMMPosterior:
    r"""Posterior state marginals of one sequence: :class:`HSMMPosterior`.

    Segment starts and ends from the forward (:func:`hsmm_forward`) and backward
    (:func:`hsmm_backward`) messages, ``p(start of k at t | y) = B_t(k) S_t(k) / p(y)`` (``S_0``
    with the first segment's law) and ``p(end of k at t | y) = F_t(k) E_t(k) / p(y)``; a step is
    in a segment of ``k`` exactly when one started at or before it and none ended before it, so

    .. math::

        p(z_t = k \mid y) = \sum_{s \le t} p(\text{start}_s = k \mid y)
                           - \sum_{s < t} p(\text{end}_s = k \mid y)

    (cumulative sums, clipped to ``[0, 1]`` against rounding).  ``O(T K (D + K))``."""
    fwd = hsmm_forward(log_init, log_trans, log_dur, log_surv, ll, mask, length,
                       right_censored=right_censored, first=first)
    bwd = hsmm_backward(log_init, log_trans, log_dur, log_surv, ll, mask, length,
                        right_censored=right_censored, first=first)
    t_max = ll.shape[0]
    length = jnp.asarray(t_max if length is None else length, jnp.int32)
    valid = (jnp.arange(t_max) < length)[:, None]
    total = bwd.marginal_loglik
    start_msgs = bwd.log_start.at[0].set(bwd.log_start_first)
    log_starts = jnp.where(valid, fwd.log_seg_start + start_msgs - total, -jnp.inf)
    log_ends = jnp.where(valid, fwd.log_seg_end + bwd.log_end - total, -jnp.inf)
    started = jnp.cumsum(jnp.exp(log_starts), axis=0)
    ended = jnp.cumsum(jnp.exp(log_ends), axis=0) - jnp.exp(log_ends)
    probs = jnp.clip(started - ended, 0.0, 1.0)
    tiny = jnp.finfo(probs.dtype).tiny
    log_probs = jnp.where(valid & (probs > 0), jnp.log(jnp.maximum(probs, tiny)), -jnp.inf)
    return HSMMPosterior(log_probs, log_starts, log_ends, total)
