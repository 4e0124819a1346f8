r"""The fully collapsed HDP-HMM as a Chinese restaurant franchise: the state the restricted
collapsed draw (:mod:`numpyro_hdphmm.infer.algorithms.rcd`) and split-merge moves
(:mod:`numpyro_hdphmm.infer.moves.split_merge`) act on, and the customers they move.

The state (:class:`CollapsedState`) is the state sequences (time flattened over the sequences,
``S = N T`` steps), the seating of the transition franchise as table counts
(:class:`~numpyro_hdphmm._core.hcrp.Seating`), the number of steps in each state slot and the
per-state emission statistics of the family's collapsed strategy
(:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.collapsed_statistics`: sufficient
statistics of a conjugate family, with a DP mixture's component indicators, or nothing for
explicit likelihoods).

Step ``i`` has two customers (RCD paper Sec. 4.1, Alg. 5): its *transition* customer, in the
restaurant of the previous state (the start restaurant ``K`` at a sequence's first step) with
dish ``z_i``, and its *emission* customer ``y_i`` in state ``z_i``'s emission restaurant (none
for a missing observation).  A run of steps ``a..b`` also owns the transition out of it (the
transition customer of step ``b + 1``, when it is in the sequence).  Customers are added in the
order ``transition(a), emission(a), ..., transition(b), emission(b), exit`` and removed in the
reverse order (Alg. 1; the two orders must mirror each other, since the proposal of the seating
depends on the order and the acceptance ratio does not).  Removing a customer returns the factor
``r_old`` (its predictive after the removal), adding one the factor ``r*`` (before the addition):
the acceptance ratio of the restricted collapsed draw is ``prod r* / prod r_old`` times the
proposal ratio (eqs. 28-30).

Labels are capacity slots; a slot holding no step is free.  A label that holds steps but has no
informative table (an *orphan*: only the transition into it was removed) is a new dish for the
predictive (``p_root = gamma / (mbar.. + gamma)``); a proposal that leaves an orphan is rejected
(:func:`is_valid`: the probability of such a seating is zero, every state being entered through
an informative table).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jax import random

from numpyro_hdphmm._core import crp, hcrp
from numpyro_hdphmm._core.crp import Concentrations
from numpyro_hdphmm._core.hcrp import step_layout
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.collapsed import row_of
from numpyro_hdphmm.infer.contract import flatten_time

__all__ = [
    "CollapsedState",
    "StepData",
    "Context",
    "step_data",
    "context",
    "init_state",
    "collapse",
    "restaurant",
    "remove_transition",
    "add_transition",
    "remove_emission",
    "add_emission",
    "remove_run",
    "add_run",
    "is_valid",
    "select",
]


class CollapsedState(NamedTuple):
    """``labels (S,)`` int32 states (0 at padded steps), ``seating``
    (:class:`~numpyro_hdphmm._core.hcrp.Seating`), ``occupancy (K,)`` steps per slot, ``est``
    the emission strategy's statistics."""

    labels: jax.Array
    seating: hcrp.Seating
    occupancy: jax.Array
    est: Any


class StepData(NamedTuple):
    """Per-step inputs, time flattened: prepared observations ``x`` (leading axis ``S``),
    ``observed (S,)`` (an emission customer: observed and inside its sequence), ``in_range``,
    ``is_first``, ``has_next`` (``(S,)``, :func:`~numpyro_hdphmm.infer.algorithms.direct_assignment.step_layout`)
    and ``pre`` (the strategy's per-step precomputation: the prior predictive, or the
    likelihoods under explicit parameters)."""

    x: Any
    observed: jax.Array
    in_range: jax.Array
    is_first: jax.Array
    has_next: jax.Array
    pre: Any


class Context(NamedTuple):
    """What a move reads besides the state: the data, the concentrations, the Stirling ratio
    table (:func:`~numpyro_hdphmm._core.hcrp.stirling_log_ratios`) and ``weak_limit`` (a static
    Python bool: the top level is the weak limit's ``Dir(gamma/K)`` over the labels, not the
    infinite model's CRP, :func:`~numpyro_hdphmm._core.hcrp.root_weights`)."""

    data: StepData
    hyper: Concentrations
    log_ratios: jax.Array
    weak_limit: bool = False


def step_data(x, valid, lengths, pre) -> StepData:
    """:class:`StepData` of prepared observations ``x (N, T, ...)``, ``valid (N, T)`` and
    ``lengths (N,)`` (``pre``: the strategy's precomputation on the flattened ``x``)."""
    num_seq, num_steps = valid.shape
    layout = step_layout(num_seq, num_steps, lengths)
    return StepData(flatten_time(x), valid.reshape(-1) & layout.in_range, layout.in_range, layout.is_first, layout.has_next, pre)


def context(x, valid, lengths, statistics, params, hyper, dtype, weak_limit: bool = False) -> Context:
    """The :class:`Context` of observations ``x (N, T, ...)`` (``valid (N, T)``, ``lengths (N,)``)
    at the concentrations ``hyper`` (:class:`~numpyro_hdphmm._core.crp.Concentrations` or a
    ``(gamma, alpha, kappa)`` tuple), with the strategy's precomputation at the emission
    parameters ``params`` and the Stirling ratio table covering all ``N T`` customers;
    ``weak_limit``: the weak-limit top level (:class:`Context`)."""
    steps = valid.size
    pre = statistics.precompute(flatten_time(x), params, dtype)
    log_ratios = hcrp.stirling_log_ratios(steps, hcrp.table_capacity(steps), dtype)
    return Context(step_data(x, valid, lengths, pre), Concentrations(*(jnp.asarray(v, dtype) for v in hyper)),
                   log_ratios, bool(weak_limit))


def init_state(states, seating: hcrp.Seating, est, in_range) -> CollapsedState:
    """The :class:`CollapsedState` of ``states (N, T)`` with a seating and statistics."""
    capacity = seating.w.shape[0]
    labels = jnp.where(in_range, states.reshape(-1), 0).astype(jnp.int32)
    occupancy = jnp.zeros(capacity, jnp.int32).at[labels].add(in_range.astype(jnp.int32))
    return CollapsedState(labels, seating, occupancy, est)


def collapse(rng_key, states, beta, params, ctx: Context, statistics, lengths) -> CollapsedState:
    r"""The collapsed state of explicit ``states (N, T)`` and weights ``beta (K+1,)``: the tables
    and override tables drawn from their conditional given the states and ``beta`` with the rows
    integrated out (:func:`~numpyro_hdphmm._core.crp.sample_table_counts`: Antoniak counts with
    concentrations ``alpha beta_k + kappa [j = k]``, overrides ``Binomial(m_jj, kappa / (alpha
    beta_j + kappa))``, Fox et al. Alg. 1 step 3) and the emission statistics of the states
    (``statistics.init`` at the parameters ``params``: a DP mixture's component indicators are
    drawn from them).

    If ``(states, beta)`` is a draw of the posterior, the tables are a draw of ``p(m, w | z,
    beta)``, so ``(states, m, w)`` with ``beta`` forgotten is a draw of the collapsed posterior
    ``p(z, m, w | y)`` the moves of this module leave invariant; ``beta | m, w ~ Dir(mbar_.1, ...,
    mbar_.K, gamma)`` (:func:`~numpyro_hdphmm._core.crp.sample_beta`) afterwards gives back a
    draw of ``p(z, beta | y)`` (the direct-assignment sampler's split-merge moves,
    :func:`~numpyro_hdphmm.infer.moves.split_merge.split_merge_given_beta`).  Any seating of positive
    probability is also a valid start for the restricted collapsed draw."""
    capacity = beta.shape[0] - 1
    dtype = ctx.log_ratios.dtype
    k_tables, k_est = random.split(rng_key)
    states = jnp.asarray(states, jnp.int32)
    n, first = crp.transition_counts(states, capacity, lengths)
    tables = crp.sample_table_counts(k_tables, n, first, jnp.asarray(beta, dtype), ctx.hyper.alpha, ctx.hyper.kappa,
                                     states.size)
    seating = hcrp.seating_from_tables(n, first, tables)
    labels = jnp.where(ctx.data.in_range, states.reshape(-1), 0)
    est = statistics.init(k_est, ctx.data.x, ctx.data.observed, labels, params, dtype)
    return init_state(states, seating, est, ctx.data.in_range)


# ---------------------------------------------------------------------------- customers
def restaurant(state: CollapsedState, data: StepData, i):
    """The restaurant of step ``i``'s transition customer: the previous state, or the start
    restaurant ``K`` at a sequence's first step."""
    capacity = state.occupancy.shape[0]
    return jnp.where(data.is_first[i], capacity, state.labels[jnp.maximum(i - 1, 0)])


def remove_transition(state: CollapsedState, ctx: Context, j, k, u, when=True):
    """Remove a transition customer ``j -> k`` (:func:`~numpyro_hdphmm._core.hcrp.remove_customer`,
    ``u (2,)`` uniforms on ``[0, 1)``): ``(state, log r_old)``; nothing (``log r_old = 0``) where
    ``when`` is False."""
    seating, log_r = hcrp.remove_customer(state.seating, j, k, u[0], u[1], ctx.log_ratios, ctx.hyper,
                                         ctx.weak_limit, when)
    return state._replace(seating=seating), log_r


def add_transition(state: CollapsedState, ctx: Context, j, k, u, when=True):
    """Add a transition customer ``j -> k`` (:func:`~numpyro_hdphmm._core.hcrp.add_customer`,
    ``u`` uniform on ``(0, 1]``): ``(state, log r*, table overflow)``; nothing (``log r* = 0``, no
    overflow) where ``when`` is False."""
    seating, log_r, overflow = hcrp.add_customer(state.seating, j, k, u, ctx.hyper, ctx.log_ratios.shape[1] - 1,
                                                 ctx.weak_limit, when)
    return state._replace(seating=seating), log_r, overflow


def remove_emission(state: CollapsedState, ctx: Context, statistics, i, k, log_predictive=True):
    """Remove step ``i`` from state ``k``: its emission customer (when observed) and its count
    in ``occupancy``; a slot left empty has its statistics cleared.  Returns ``(state, log
    r_old)``: the predictive of ``y_i`` under ``k`` after the removal (0 for a missing
    observation, or when ``log_predictive`` is False)."""
    data = ctx.data
    x_i = row_of(data.x, i)
    observed = data.observed[i]
    dtype = ctx.log_ratios.dtype
    est = statistics.remove(state.est, i, statistics.delta(x_i, dtype), observed.astype(dtype), k)
    occupancy = state.occupancy.at[k].add(-1)
    est = statistics.free(est, k, occupancy[k] == 0)
    log_r = jnp.zeros((), dtype)
    if log_predictive:
        pred, _ = statistics.log_predictive(est, x_i, row_of(data.pre, i))
        log_r = jnp.where(observed, pred[k], 0.0)
    return state._replace(est=est, occupancy=occupancy), log_r


def add_emission(state: CollapsedState, ctx: Context, statistics, i, k, u, predictive=None):
    """Add step ``i`` to state ``k`` (``u`` uniform on ``(0, 1]`` for the strategy's auxiliary
    choice, e.g. a mixture component).  ``predictive``: ``statistics.log_predictive`` of ``y_i``
    at the current statistics when already computed.  Returns ``(state, log r*)``."""
    data = ctx.data
    x_i = row_of(data.x, i)
    observed = data.observed[i]
    dtype = ctx.log_ratios.dtype
    if predictive is None:
        predictive = statistics.log_predictive(state.est, x_i, row_of(data.pre, i))
    pred, aux = predictive
    est = statistics.add(state.est, i, statistics.delta(x_i, dtype), observed.astype(dtype), k, aux, u)
    occupancy = state.occupancy.at[k].add(1)
    return state._replace(est=est, occupancy=occupancy), jnp.where(observed, pred[k], 0.0)


def remove_run(state: CollapsedState, ctx: Context, statistics, start, length, u, offset=0):
    """Remove the customers of the steps ``start .. start + length - 1`` of one sequence and the
    transition out of the last (RCD paper Alg. 6 ``removeSeq``): in the reverse order of
    :func:`add_run`.  ``u`` uniforms on ``[0, 1)``, row ``i - offset`` for the transition customer
    of step ``i`` (the exit: step ``start + length``).  ``state.labels`` is left as it was (the
    removed steps keep their old labels).  Returns ``(state, sum log r_old)``."""
    data = ctx.data
    last = start + length - 1
    after = jnp.minimum(last + 1, data.in_range.shape[0] - 1)
    exits = data.has_next[last]

    state, log_r = remove_transition(state, ctx, state.labels[last], state.labels[after], u[after - offset], exits)

    def body(n, carry):
        s, total = carry
        i = last - n
        k = s.labels[i]
        s, r_e = remove_emission(s, ctx, statistics, i, k)
        s, r_t = remove_transition(s, ctx, restaurant(s, data, i), k, u[i - offset])
        return s, total + r_e + r_t

    return lax.fori_loop(0, length, body, (state, log_r))


def add_run(state: CollapsedState, ctx: Context, statistics, start, length, u, offset=0, fill=None):
    """Add the customers of the steps ``start .. start + length - 1`` with the labels in
    ``state.labels`` (or ``fill`` for all of them) and the transition out of the last (Alg. 7
    ``addSeq``).  ``u`` uniforms on ``(0, 1]``, row ``i - offset``: step ``i``'s transition and
    emission customers (the exit: row of step ``start + length``, column 0).  Returns ``(state,
    sum log r*, table overflow)``."""
    data = ctx.data
    last = start + length - 1
    after = jnp.minimum(last + 1, data.in_range.shape[0] - 1)

    def body(n, carry):
        s, total, overflow = carry
        i = start + n
        k = s.labels[i] if fill is None else fill
        s = s._replace(labels=s.labels.at[i].set(k))
        s, r_t, of = add_transition(s, ctx, restaurant(s, data, i), k, u[i - offset, 0])
        s, r_e = add_emission(s, ctx, statistics, i, k, u[i - offset, 1])
        return s, total + r_t + r_e, overflow | of

    zero = jnp.zeros((), ctx.log_ratios.dtype)
    state, log_r, overflow = lax.fori_loop(0, length, body, (state, zero, jnp.zeros((), bool)))

    state, r_exit, of = add_transition(state, ctx, state.labels[last], state.labels[after], u[after - offset, 0],
                                       data.has_next[last])
    return state, log_r + r_exit, overflow | of


def is_valid(state: CollapsedState):
    """Every slot holding steps has an informative table (no orphan is left): the seating has
    positive probability."""
    return ~jnp.any((state.occupancy > 0) & (state.seating.root == 0))


def select(keep, new, old):
    """``new`` where ``keep`` else ``old``, leaf by leaf (a whole-state restore)."""
    return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), new, old)


def emission_weights(state: CollapsedState, data: StepData, dtype):
    """One-hot ``(S, K)`` weights of the states at the observed steps (for the parameters' draws)."""
    return state_weights(state.labels, data.observed, state.occupancy.shape[0], dtype)
