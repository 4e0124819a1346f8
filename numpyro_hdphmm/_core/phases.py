r"""The phase embedding of an explicit-duration HSMM: segmentations sampled through a Markov chain
on ``(state, phase)`` pairs, ``O(T K (R + K))`` per sequence instead of ``O(T K (D + K))``
(Johnson & Willsky 2013, Sec. 4.4).

A duration law is *phase-type* when a segment's duration is the time a Markov chain on a few
phases takes to leave them.  The shifted negative binomial ``D - 1 ~ NB(r, p)`` (``d - 1``
successes of probability ``p`` before the ``r``-th failure; :mod:`numpyro_hdphmm.durations`) is
one: its probability generating function is

.. math::

    E[z^D] = z \Big(\frac{1 - p}{1 - p z}\Big)^r = w \big((1 - p) + p\, w\big)^{r - 1},
    \qquad w = g(z) = \frac{(1 - p) z}{1 - p z},

(from ``u = (1 - p) / (1 - p z) = (1 - p) + p z u``), and ``g`` is the generating function of a
geometric *stage* on ``{1, 2, ...}`` that lasts one more step with probability ``p``.  So ``D`` is
the total length of ``M`` stages with ``M - 1 ~ Binomial(r - 1, p)``.  Phase ``j`` of a state
means ``j + 1`` stages are left, the current one included:

* a segment starts in phase ``j`` with probability ``Binomial(j; r - 1, p)`` (``log_entry``);
* after each step it stays in its phase with probability ``p`` (``log_stay``), else
  (``log_move = log(1 - p)``) it moves to phase ``j - 1``, or, from phase 0, the segment ends
  and the next state is drawn from the row without self-transition.

``r = 1`` is the geometric law (one phase).  Phases ``j >= r_k`` of a state are never entered
(``log_entry = -inf``), so states with different ``r`` share a capacity of ``R`` phases.  The law is
untruncated: the phases give no bound on the duration.

Inputs (LOG space, as in :mod:`numpyro_hdphmm._core.hsmm`): ``log_init (K,)``, ``log_trans (K, K)``
(``-inf`` on the diagonal), :class:`PhaseTables`, ``ll (T, K)``, ``mask (T,)``, ``length``;
``right_censored``: the last segment may go on after the last step (no exit is required there).

Backward messages, with ``c_t(k, j) = log p(y_{t:n-1} | phase (k, j) at t)`` (emission at ``t``
included), ``S_t(l) = logsumexp_j (log_entry[l, j] + c_t(l, j))`` (a segment of ``l`` starts at
``t``) and ``E_t(k) = logsumexp_l (log_trans[k, l] + S_{t+1}(l))`` (a segment of ``k`` ends at
``t``):

.. math::

    c_t(k, j) = e_t(k) + \log\big(p_k\, C_{t+1}(k, j) + (1 - p_k)\, [j > 0]\, C_{t+1}(k, j - 1)
                + (1 - p_k)\, [j = 0]\, E_t(k)\big),

(``C = exp c``) with ``c_{n-1}(k, j) = e_{n-1}(k)`` when right-censored and ``e_{n-1}(k) + [j = 0]
log(1 - p_k)`` otherwise; ``log p(y) = logsumexp_k (log_init_k + S_0(k))`` (:func:`phase_backward`, in log space).  The
sampler (:func:`phase_sample`) runs the same recursion in rescaled probability space, ``O(T K (R
+ K))``, and draws ``(z_0, j_0)`` from ``pi_k entry_k(j) C_0(k, j)`` and then each next pair from the
three moves weighted by the messages, ``O(K + R)`` per step; no Python per step.  A left-censored
first segment (the process ran before the first step, in equilibrium) enters its phases by the
residual-life entry law ``log_entry_first`` (:func:`residual_entry`) at ``t = 0``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp

from numpyro_hdphmm._core.hsmm import masked_likelihoods
from numpyro_hdphmm._core.random import uniform_open
from numpyro_hdphmm._core.reduce import cumulative_logsumexp

__all__ = ["PhaseTables", "PhaseMessages", "negative_binomial_phases", "residual_entry", "phase_backward",
           "phase_sample"]


class PhaseTables(NamedTuple):
    """The phase chain of every state: ``log_entry (K, R)`` (the law of the first phase),
    ``log_stay (K,)`` and ``log_move (K,)`` (stay in the phase / leave it after a step)."""

    log_entry: jax.Array
    log_stay: jax.Array
    log_move: jax.Array


def negative_binomial_phases(r, p, num_phases: int) -> PhaseTables:
    r""":class:`PhaseTables` of shifted negative-binomial durations ``D - 1 ~ NB(r_k, p_k)`` (module
    docstring): ``r (K,)`` integers in ``1..num_phases``, ``p (K,)`` in ``(0, 1)``; the entry law
    ``Binomial(j; r_k - 1, p_k)`` for ``j < r_k``, ``-inf`` beyond."""
    p = jnp.asarray(p)
    dtype = jnp.result_type(p, float)
    p = p.astype(dtype)
    r = jnp.asarray(r).astype(dtype)
    j = jnp.arange(num_phases, dtype=dtype)[None, :]
    n = (r - 1.0)[:, None]
    log_p, log_q = jnp.log(p)[:, None], jnp.log1p(-p)[:, None]
    inside = j <= n
    k = jnp.where(inside, j, 0.0)
    rest = jnp.where(inside, n - j, 0.0)
    entry = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(rest + 1.0) + k * log_p + rest * log_q
    return PhaseTables(jnp.where(inside, entry, -jnp.inf), jnp.log(p), jnp.log1p(-p))


def residual_entry(tables: PhaseTables):
    r"""``log_entry_first (K, R)``: the entry law of the phases for the residual life of a segment in
    equilibrium (a left-censored first segment).  The residual life ``R`` of a phase-type law
    ``P(D >= d) = a Q^{d-1} 1`` (entry law ``a``, sub-stochastic ``Q``) has ``P(R = d) = P(D >= d) /
    E[D] = a_R Q^{d-1} q`` with ``a_R = a (I - Q)^{-1} / E[D]`` (``q = (I - Q) 1`` the exit
    probabilities: ``(I - Q)^{-1} q = 1``), the expected time spent in each phase.  Every phase of a
    state lasts ``1 / (1 - p_k)`` steps on average and phase ``j`` is visited when the segment
    enters at ``j`` or above, so ``a_R(j) ∝ P(entry >= j)``: the entry law's reverse cumulative sum,
    normalized."""
    log_tail = cumulative_logsumexp(tables.log_entry, axis=-1, reverse=True)
    return log_tail - logsumexp(log_tail, axis=-1, keepdims=True)


class PhaseMessages(NamedTuple):
    """Result of :func:`phase_backward`: ``log_occupied (T, K, R)`` (``c_t``), ``log_start (T, K)``
    (``S_t``) and ``marginal_loglik``."""

    log_occupied: jax.Array
    log_start: jax.Array
    marginal_loglik: jax.Array


def _shift_down(c, fill):
    """``c[:, j - 1]`` in column ``j`` (``fill`` in column 0): the phase a move comes from."""
    return jnp.concatenate([jnp.full(c.shape[:-1] + (1,), fill, c.dtype), c[..., :-1]], -1)


def phase_backward(log_init, log_trans, tables: PhaseTables, ll, mask=None, length=None, *,
                   right_censored: bool = True, log_entry_first=None) -> PhaseMessages:
    """Backward messages of one sequence (module docstring): :class:`PhaseMessages`
    (``log_entry_first (K, R)``: the first segment's entry law, :func:`residual_entry`; ``None``:
    ``tables.log_entry``)."""
    ll, length = masked_likelihoods(ll, mask, length)
    t_max, k = ll.shape
    num_r = tables.log_entry.shape[-1]
    dtype = ll.dtype
    ninf = jnp.array(-jnp.inf, dtype)
    stay, move = tables.log_stay[:, None], tables.log_move[:, None]
    first_phase = jnp.arange(num_r) == 0
    if right_censored:
        terminal = jnp.zeros((k, num_r), dtype)
    else:
        terminal = jnp.where(first_phase[None, :], move, ninf)

    def body(carry, t):
        occupied_next, start_next = carry  # c_{t+1}, S_{t+1}
        end_t = logsumexp(log_trans + start_next[None, :], axis=-1)  # E_t (K,)
        leave = jnp.where(first_phase[None, :], (move[:, 0] + end_t)[:, None],
                          move + _shift_down(occupied_next, ninf))
        after = jnp.logaddexp(stay + occupied_next, leave)
        after = jnp.where(t == length - 1, terminal, after)
        occupied = jnp.where(t < length, ll[t][:, None] + after, ninf)
        start = logsumexp(tables.log_entry + occupied, axis=-1)
        return (occupied, start), (occupied, start)

    init = (jnp.full((k, num_r), ninf), jnp.full((k,), ninf))
    _, (occupied, start) = lax.scan(body, init, jnp.arange(t_max), reverse=True)
    start_first = start[0] if log_entry_first is None else logsumexp(log_entry_first + occupied[0], axis=-1)
    return PhaseMessages(occupied, start, logsumexp(log_init + start_first))


class _Scaled(NamedTuple):
    """The backward messages of :func:`_scaled_backward` in rescaled probability space: ``occupied
    (T, K, R)`` and ``start (T, K)`` are ``exp(c_t - L_t)`` and ``exp(S_t - L_t)`` with ``L_t``
    (``log_scale (T,)``) chosen so that ``max occupied[t] = 1``."""

    occupied: jax.Array
    start: jax.Array
    log_scale: jax.Array
    ok: jax.Array


def _scaled_backward(log_init, log_trans, tables: PhaseTables, ll, length, right_censored):
    """The recursion of :func:`phase_backward` in rescaled probability space (as the HMM's fast
    pass, :mod:`numpyro_hdphmm._core.hmm`): the transitions, entry laws and ``e_t / max_k e_t``
    exponentiated once, one ``(K, K)`` matrix-vector product and ``O(K R)`` products per step, each
    step's messages divided by their maximum.  ``ok`` is False when a step's maximum fell below
    ``sqrt(tiny)`` (emission mass where the messages underflowed)."""
    t_max, k = ll.shape
    num_r = tables.log_entry.shape[-1]
    dtype = ll.dtype
    trans = jnp.exp(log_trans)
    entry = jnp.exp(tables.log_entry)
    stay, move = jnp.exp(tables.log_stay)[:, None], jnp.exp(tables.log_move)[:, None]
    first_phase = (jnp.arange(num_r) == 0)[None, :]
    top = jnp.max(ll, axis=-1)
    emit = jnp.exp(ll - top[:, None])
    terminal = jnp.ones((k, num_r), dtype) if right_censored else jnp.where(first_phase, move, 0.0)
    threshold = jnp.sqrt(jnp.finfo(dtype).tiny)

    def body(carry, t):
        occupied_next, scale_next = carry
        start_next = jnp.sum(entry * occupied_next, axis=-1)
        end_t = trans @ start_next
        shifted = jnp.concatenate([jnp.zeros((k, 1), dtype), occupied_next[:, :-1]], -1)
        after = stay * occupied_next + move * jnp.where(first_phase, end_t[:, None], shifted)
        last = t == length - 1
        after = jnp.where(last, terminal, after)
        raw = emit[t][:, None] * after
        peak = jnp.max(raw)
        valid = t < length
        good = peak >= threshold
        occupied = jnp.where(valid, raw / jnp.where(peak > 0, peak, 1.0), 1.0)
        log_scale = jnp.where(valid, jnp.log(jnp.maximum(peak, jnp.finfo(dtype).tiny)) + top[t]
                              + jnp.where(last, 0.0, scale_next), 0.0)
        return (occupied, log_scale), (occupied, log_scale, ~valid | good)

    init = (jnp.ones((k, num_r), dtype), jnp.zeros((), dtype))
    _, (occupied, log_scale, good) = lax.scan(body, init, jnp.arange(t_max), reverse=True)
    start = jnp.sum(entry[None] * occupied, axis=-1)
    return _Scaled(occupied, start, log_scale, jnp.all(good))


def _pick(u, weights):
    """The index ``i`` with ``cumsum(w)[i - 1] < u sum(w) <= cumsum(w)[i]`` (inverse CDF; ``u`` in
    ``(0, 1]``, so an index of weight 0 is never picked)."""
    cum = jnp.cumsum(weights)
    return jnp.minimum(jnp.sum(cum < u * cum[-1]), weights.shape[0] - 1).astype(jnp.int32)


def phase_sample(rng_key, log_init, log_trans, tables: PhaseTables, ll, mask=None, length=None, *,
                 right_censored: bool = True, log_entry_first=None):
    r"""A segmentation of one sequence from its posterior through the phase chain: ``(states (T,),
    marginal_loglik, ok)``.  The states have the law of :func:`numpyro_hdphmm._core.hsmm.hsmm_sample`
    with the untruncated phase-type durations; padded steps copy the last valid state.

    The backward messages are those of :func:`phase_backward` in rescaled probability space
    (:func:`_scaled_backward`); ``ok`` is False when a step's messages underflowed, and then
    ``states`` must not be used (the samplers keep the previous ones: ``ok`` depends only on the
    conditioning values, so skipping leaves the target invariant, as with
    :func:`numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`).  Forward sampling from ``(z, j)``
    at ``t - 1``: stay ``∝ p_z C_t(z, j)``, move down ``∝ (1 - p_z) C_t(z, j - 1)``, or (from phase
    0) a new segment ``∝ (1 - p_z) sum_l A_zl S_t(l)``, then its state ``l ∝ A_zl S_t(l)`` and phase
    ``j' ∝ entry_l(j') C_t(l, j')``: three uniforms and ``O(K + R)`` work per step.  ``(z_0, j_0)``
    enter by ``log_entry_first`` (:func:`residual_entry`) when given."""
    ll, length = masked_likelihoods(ll, mask, length)
    t_max = ll.shape[0]
    dtype = ll.dtype
    msgs = _scaled_backward(log_init, log_trans, tables, ll, length, right_censored)
    trans = jnp.exp(log_trans)
    entry = jnp.exp(tables.log_entry)
    stay, move = jnp.exp(tables.log_stay), jnp.exp(tables.log_move)
    init = jnp.exp(log_init - jnp.max(log_init))
    entry_first = entry if log_entry_first is None else jnp.exp(log_entry_first)
    start_first = jnp.sum(entry_first * msgs.occupied[0], axis=-1)
    k_first, k_steps = random.split(rng_key)
    u0 = uniform_open(k_first, (2,), dtype)
    z0 = _pick(u0[0], init * start_first)
    j0 = _pick(u0[1], entry_first[z0] * msgs.occupied[0, z0])
    marginal = jnp.log(jnp.sum(init * start_first)) + jnp.max(log_init) + msgs.log_scale[0]

    def body(carry, inputs):
        z, j = carry
        t, u = inputs
        c = msgs.occupied[t]  # (K, R)
        w_stay = stay[z] * c[z, j]
        w_move = jnp.where(j > 0, move[z] * c[z, jnp.maximum(j - 1, 0)], 0.0)
        to = trans[z] * msgs.start[t]
        w_new = jnp.where(j == 0, move[z] * jnp.sum(to), 0.0)
        choice = _pick(u[0], jnp.stack([w_stay, w_move, w_new]))
        l = _pick(u[1], to)
        j_new = _pick(u[2], entry[l] * c[l])
        z_next = jnp.where(choice == 2, l, z)
        j_next = jnp.where(choice == 0, j, jnp.where(choice == 1, j - 1, j_new))
        valid = t < length
        z_next = jnp.where(valid, z_next, z).astype(jnp.int32)
        j_next = jnp.where(valid, j_next, j).astype(jnp.int32)
        return (z_next, j_next), z_next

    us = uniform_open(k_steps, (max(t_max - 1, 1), 3), dtype)[: t_max - 1]
    _, rest = lax.scan(body, (z0, j0), (jnp.arange(1, t_max), us))
    states = jnp.concatenate([z0[None], rest]).astype(jnp.int32)
    return states, marginal, msgs.ok
