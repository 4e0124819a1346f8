r"""The restricted collapsed draw (RCD) for the HDP-HMM in its hierarchical Chinese-restaurant
form ("Restricted collapsed draw: accurate sampling for hierarchical Chinese restaurant process
hidden Markov models", arXiv:1106.0474, 2011; its printed errors: ``docs/errata.md``).

Everything is integrated out: the transition rows, the top-level weights ``beta`` and, for
conjugate families, the emission parameters.  The state is the state sequences, the seating of
the franchise as table counts (transition customers per restaurant and dish, tables, override
tables of the sticky model's loyal customers; :mod:`numpyro_hdphmm._core.hcrp`) and the
per-state emission statistics (:mod:`numpyro_hdphmm.infer.moves.franchise`).  A move resamples ``L``
draws at once under the restriction that they agree with the rest of the sequence, with the
Metropolis-Hastings correction of the paper's Algorithm 1:

1. remove the move's customers in the reverse order of their addition, collecting
   ``r_old = prod_l p(x_l | s_{l-1})`` (the predictive of each after its removal; a customer's
   table is imputed from its exact conditional given the counts, :func:`~numpyro_hdphmm._core.hcrp.remove_customer`);
2. propose the draws ``x*`` from ``q`` computed on the seating ``s0`` without them;
3. add them in order, each seated by ``addCustomer`` (eq. 27), collecting ``r* = prod_l p(x*_l |
   s*_{l-1})`` (the predictive before each addition, eqs. 28-30);
4. accept with probability ``min(1, r* / r_old * q(x_old) / q(x*))``; on rejection the exact
   previous state is restored (a select of the whole old state; re-adding the old draws would
   seat them from the proposal of the seating instead of its conditional, which the paper shows
   is wrong).  The
   step-wise modes write nothing before the decision: the moves run on a pending seating
   (:func:`~numpyro_hdphmm._core.hcrp.pending`) and the move is written only if accepted, once
   per large array (:func:`~numpyro_hdphmm._core.hcrp.commit`, :mod:`numpyro_hdphmm._core.ordering`),
   which keeps XLA from copying the count matrices and emission statistics every step.

The modes differ in the block of draws and in ``q`` (``pi-hat``: the predictive transition
matrix of ``s0``, :func:`~numpyro_hdphmm._core.hcrp.log_prob_matrix`; ``F``: the emission
predictive of ``s0``; a *new* state is scored with the predictive of an empty restaurant and the
prior predictive):

* ``"stepwise"`` (Alg. 5): one step at a time, three customers (the transition in, the emission,
  the transition out).  ``q(x_t = k) ∝ pi-hat(k | x_{t-1}) F_k(y_t) pi-hat(x_{t+1} | k)`` over the
  states of ``s0`` and one new state (eq. 33).  A state of ``s0`` without informative tables
  (the *orphan* ``x_{t+1}``, which lost the only transition into it) is scored with the new-dish
  predictive, so it can be proposed without eq. 33's extra ``delta`` term;
* ``"slice"`` (the paper's SSlice: beam sampling with blocks of one step): slices
  ``u_in ~ U(0, pi-hat(x_t | x_{t-1}))``, ``u_out ~ U(0, pi-hat(x_{t+1} | x_t))``; ``x*`` drawn
  ``∝ F_k(y_t)`` among the states whose two predictives exceed them; accepted with the ratio of
  eq. 33's ``q`` (the slice kernel is reversible with respect to it, Sec. 4.3);
* ``"blocked"`` (Algs. 6-8): blocks of ``block_size`` consecutive steps (random boundaries each
  sweep: a random offset), proposed by forward filtering, backward sampling on ``pi-hat`` and
  ``F`` between the fixed neighbours (eq. 34).  The occurrences of the new state are relabelled
  by a CRP(``gamma``) over new states (the ``Q*`` of Alg. 8), so a block can open several;
* ``"beam"`` (Sec. 4.3): as ``"blocked"`` with the slice-augmented FFBS (slices from the old
  block), accepted with the ratio of eq. 34's ``q``.

``split_merge=n`` adds ``n`` split-merge moves per sweep (Algs. 9-10,
:mod:`numpyro_hdphmm.infer.moves.split_merge`).  Then the concentrations with an exact update are drawn:
``hyperparameters="collapsed"`` (default) through ``beta`` drawn given the tables, ``(alpha,
kappa)`` with the rows and tables integrated out, the franchise re-seated at the new values and
``gamma`` with ``beta`` integrated out (:func:`reseat_with_concentrations`);
``hyperparameters="auxiliary"`` by the auxiliary-variable method from the table counts the
sampler keeps (:func:`~numpyro_hdphmm._core.crp.resample_hyperparameters`; no Antoniak draw is
needed).

For the record (:meth:`RCD.explicit`): ``beta | s ~ Dir(mbar_.1, ..., mbar_.K, gamma)`` (Teh et
al. 2006 eq. 37), the rows ``| beta, counts`` and the emission parameters from their conjugate
posteriors; the state sequences relabelled by first appearance.  The inner kernel (NUTS) sees
``beta`` and the rows integrated out and the seating kept: the density of the states and table
counts given the concentrations (:func:`~numpyro_hdphmm._core.hcrp.log_likelihood_concentrations`).

Emissions without a conjugate prior (:class:`~numpyro_hdphmm.emissions.CustomEmission`) are not
integrated out: their likelihoods under the current parameters are the emission factors, a new
state takes a uniformly chosen free slot's parameters (in the model extended by the free slots'
prior draws and a uniform assignment of states to slots the choice and the assignment's
probability cancel in the ratio), the states keep their slots and the inner kernel updates the
parameters.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax import lax, random
from numpyro.distributions import constraints
from numpyro.primitives import Messenger

from numpyro_hdphmm._core import crp, hcrp, ordering
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.slots import canonical_order
from numpyro_hdphmm.emissions.collapsed import row_of
from numpyro_hdphmm.infer.moves import franchise
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.moves.global_step import hyper_site_values
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.moves.emission_base import emission_with_base, sample_emission_base
from numpyro_hdphmm.infer.moves.franchise import CollapsedState, Context
from numpyro_hdphmm.infer.moves.split_merge import check_split_merge, split_merge_sweep
from numpyro_hdphmm.models.base import HDP_ROLE

__all__ = ["RCDSampler", "RCD", "RCDState", "RCDInfo", "MODES", "SweepResult", "single_step_sweep", "block_sweep",
           "reseat_with_concentrations"]

MODES = ("stepwise", "slice", "blocked", "beam")
_SEATING_KWARG = "_rcd_seating"


class RCDState(NamedTuple):
    """``collapsed`` (:class:`~numpyro_hdphmm.infer.moves.franchise.CollapsedState`), ``params`` the
    emission parameters of the last record draw (the current ones for custom emissions, which
    stay with the inner kernel), ``concentrations`` the current ``(gamma, alpha, kappa)``,
    ``dp_concentration`` a DP-mixture emission's concentration (``None`` without one) and
    ``hyper`` the values of the sites with exact updates."""

    collapsed: CollapsedState
    params: Dict[str, jax.Array]
    concentrations: crp.Concentrations
    dp_concentration: Any
    hyper: Dict[str, jax.Array]


class RCDInfo(NamedTuple):
    """Per-sweep diagnostics: ``overflow`` (every slot of the capacity was occupied when a new
    state could have been proposed, or a cell opened more tables than the Stirling table covers),
    ``gibbs_accept`` (acceptance rate of the sweep's MH-corrected moves: steps, or blocks),
    ``split_merge_accept`` (acceptance rate of its split-merge moves; NaN without them)."""

    overflow: jax.Array
    gibbs_accept: jax.Array
    split_merge_accept: jax.Array


class SweepResult(NamedTuple):
    """A sweep's new state, the number of accepted and attempted moves, and its overflow flag."""

    state: CollapsedState
    accepted: jax.Array
    attempted: jax.Array
    overflow: jax.Array


# ------------------------------------------------------------------------ one step at a time
#: columns of the per-step uniforms of :func:`single_step_sweep`
_U_REMOVE_OUT, _U_REMOVE_IN, _U_ADD_IN, _U_ADD_EMISSION, _U_ADD_OUT, _U_PROPOSE, _U_FREE, _U_SLICE_IN, \
    _U_SLICE_OUT, _U_ACCEPT = (0, 2, 4, 5, 6, 7, 8, 9, 10, 11)
_U_WIDTH = 12


def _single_step(i, state: CollapsedState, ctx: Context, statistics, u, slice_mode: bool, in_range=True,
                 totals=(0, False)):
    """One move of :func:`single_step_sweep` at step ``i`` (``u (12,)`` uniforms): ``(state,
    accepted, overflow)`` with ``totals`` (the sweep's count of accepted moves and its overflow
    flag so far) updated by this move.  Outside a sequence (``in_range`` False, a traced bool)
    the move is rejected: the state comes back exactly, with ``totals`` unchanged.

    The large arrays (the count matrices, the emission statistics) are written once, at the end,
    and only if the move is accepted (:func:`~numpyro_hdphmm._core.hcrp.pending` and
    :func:`~numpyro_hdphmm._core.hcrp.commit`; the statistics' ``removed_predictive`` and
    ``moved``): the removals and additions in between see a pending seating, so a rejection
    needs no undo log (the paper's Alg. 1 restores the exact old seating; here it was never
    changed) and XLA keeps the arrays in place instead of copying them every step."""
    data = ctx.data
    capacity = state.occupancy.shape[0]
    steps = data.in_range.shape[0]
    dtype = ctx.log_ratios.dtype
    hyper = ctx.hyper
    has_next = data.has_next[i]
    observed = data.observed[i]
    after = jnp.minimum(i + 1, steps - 1)
    prev = franchise.restaurant(state, data, i)
    k_old = state.labels[i]
    nxt = state.labels[after]
    x_i, pre_i = row_of(data.x, i), row_of(data.pre, i)
    weight = observed.astype(dtype)
    delta = statistics.delta(x_i, dtype)

    # 1. remove: the transition out, the emission, the transition in (reverse of the addition)
    moving = state._replace(seating=hcrp.pending(state.seating, 4))
    moving, r_out = franchise.remove_transition(moving, ctx, k_old, nxt, u[_U_REMOVE_OUT:_U_REMOVE_OUT + 2], has_next)
    occupancy = state.occupancy.at[k_old].add(-1)
    freed = occupancy[k_old] == 0
    predictive = statistics.removed_predictive(state.est, i, x_i, pre_i, delta, weight, k_old, freed)
    moving, r_in = franchise.remove_transition(moving, ctx, prev, k_old, u[_U_REMOVE_IN:_U_REMOVE_IN + 2])

    # 2. propose from s0 (eq. 33): q(k) ∝ pi-hat(k | prev) F_k(y) pi-hat(next | k), one new state
    seating = moving.seating
    active = occupancy > 0
    has_free = ~jnp.all(active)
    free = jnp.argmin(active)
    emission = jnp.where(observed, predictive[0], 0.0)
    emission_new = jnp.where(observed, jax.nn.logsumexp(statistics.log_new(pre_i, active)), 0.0)
    into = hcrp.log_prob_row(seating, prev, hyper)
    onward = jnp.where(has_next, hcrp.log_prob_column(seating, nxt, hyper), 0.0)
    score = jnp.concatenate([jnp.where(active, into + emission + onward, -jnp.inf),
                             jnp.where(has_free, into[free] + emission_new + onward[free], -jnp.inf)[None]])
    old_bar = jnp.where(active[k_old], k_old, capacity)  # the old state, or "new" when its slot emptied
    if slice_mode:
        into_all = jnp.concatenate([into, into[free][None]])
        onward_all = jnp.concatenate([onward, onward[free][None]])
        log_u_in = into_all[old_bar] + jnp.log(u[_U_SLICE_IN])
        log_u_out = onward_all[old_bar] + jnp.log(u[_U_SLICE_OUT])
        admissible = (score > -jnp.inf) & (into_all > log_u_in) & (~has_next | (onward_all > log_u_out))
        logits = jnp.where(admissible, jnp.concatenate([emission, emission_new[None]]), -jnp.inf)
    else:
        logits = score
    bar = draws.categorical(jnp.exp(logits - jnp.max(logits)), 1.0 - u[_U_PROPOSE])
    is_new = bar == capacity
    k_new = jnp.where(is_new, draws.categorical((~active).astype(dtype), 1.0 - u[_U_FREE]), bar).astype(jnp.int32)
    log_q_ratio = score[old_bar] - score[bar]

    # 3. add: the transition in, the emission, the transition out
    moving, a_in, of_in = franchise.add_transition(moving, ctx, prev, k_new, 1.0 - u[_U_ADD_IN])
    a_emission = jnp.where(observed, predictive[0][k_new], 0.0)
    occupancy = occupancy.at[k_new].add(1)
    moving, a_out, of_out = franchise.add_transition(moving, ctx, k_new, nxt, 1.0 - u[_U_ADD_OUT], has_next)

    # 4. accept, and write the move only then
    r_old = r_out + r_in + jnp.where(observed, predictive[0][k_old], 0.0)
    log_ratio = a_in + a_emission + a_out - r_old + log_q_ratio
    valid = ~jnp.any((occupancy > 0) & (moving.seating.root == 0))  # franchise.is_valid of the proposal
    accepted = in_range & valid & ~(of_in | of_out) & (jnp.log(u[_U_ACCEPT]) < log_ratio)
    count = totals[0] + accepted.astype(jnp.int32)
    overflow = totals[1] | (in_range & (~has_free | of_in | of_out))
    labels = state.labels.at[i].set(jnp.where(accepted, k_new, k_old))
    occupancy = jnp.where(accepted, occupancy, state.occupancy)
    seating = hcrp.commit_vectors(state.seating, moving.seating, accepted)
    # the large arrays last, one after the other, after every other output (_core.ordering)
    gate = ordering.after(accepted, count, overflow, labels[i], occupancy[k_new], seating.w[k_new], seating.root[k_new],
                          seating.out[prev], seating.root_total)
    est = statistics.moved(state.est, i, delta, weight, k_old, freed, k_new, predictive[1], 1.0 - u[_U_ADD_EMISSION],
                           gate)
    seating = hcrp.commit(seating, moving.seating, ordering.after(gate, ordering.any_element(est)))
    return CollapsedState(labels, seating, occupancy, est), count, overflow


def single_step_sweep(rng_key, state: CollapsedState, ctx: Context, statistics, slice_mode: bool) -> SweepResult:
    """One sweep of the step-wise modes over every step of every sequence in turn (one jitted
    ``lax.fori_loop``): ``"stepwise"`` (Alg. 5) or, with ``slice_mode``, ``"slice"`` (module
    docstring)."""
    steps = ctx.data.in_range.shape[0]
    u = random.uniform(rng_key, (steps, _U_WIDTH), ctx.log_ratios.dtype)
    order, count = hcrp.steps_in_range(ctx.data.in_range)  # the padding is skipped

    def body(j, carry):
        s, accepted, overflow = carry
        i = order[j]
        return _single_step(i, s, ctx, statistics, u[i], slice_mode, True, (accepted, overflow))

    state, accepted, overflow = lax.fori_loop(0, count, body, (state, jnp.zeros((), jnp.int32), jnp.zeros((), bool)))
    return SweepResult(state, accepted, count, overflow)


# ------------------------------------------------------------------------ blocks
def _crp_relabel(is_new, u, gamma, size: int):
    """The ``Q*`` of Alg. 8: the occurrences of the new state (``is_new (B,)``, in time order)
    seated by a CRP(``gamma``) over new states.  Returns ``(index (B,) of the new state of each
    occurrence, number of new states, log q)``."""
    dtype = u.dtype

    def step(carry, inputs):
        counts, num, log_q = carry
        new, u_l = inputs
        weights = jnp.where(jnp.arange(size) < num, counts, 0.0).at[num].add(jnp.where(num < size, gamma, 0.0))
        c = draws.categorical(weights, u_l)
        log_q = log_q + jnp.where(new, jnp.log(weights[c]) - jnp.log(jnp.sum(weights)), 0.0)
        counts = counts.at[c].add(jnp.where(new, 1.0, 0.0))
        num = num + (new & (c == num)).astype(jnp.int32)
        return (counts, num, log_q), jnp.where(new, c, -1)

    init = (jnp.zeros(size, dtype), jnp.zeros((), jnp.int32), jnp.zeros((), dtype))
    (_, num, log_q), index = lax.scan(step, init, (is_new, u))
    return index, num, log_q


def _crp_log_prob(labels, is_new, gamma):
    """``log Q*`` of the old block: the probability that :func:`_crp_relabel` seats the old new
    states' occurrences (``labels (B,)`` where ``is_new``) as they are (their partition)."""
    size = labels.shape[0]
    dtype = jnp.result_type(gamma, float)
    earlier = jnp.tril(jnp.ones((size, size), bool), -1)
    same = (labels[:, None] == labels[None, :]) & is_new[None, :] & earlier
    count_same = jnp.sum(same, 1).astype(dtype)
    seen = jnp.sum(is_new[None, :] & earlier, 1).astype(dtype)
    return jnp.sum(jnp.where(is_new, jnp.log(jnp.where(count_same > 0, count_same, gamma)) - jnp.log(seen + gamma), 0.0))


def _block_ffbs(u_back, log_init, log_trans, log_emission, log_exit, length, beam_log_u):
    """Forward filtering, backward sampling of a block of ``B`` positions (the first ``length``
    real) over ``S`` candidates, in log space: ``log_init (S,)`` entry weights, ``log_trans (S,
    S)``, ``log_emission (B, S)``, ``log_exit (S,)`` the weight of the fixed next state.  With
    ``beam_log_u`` (``(B + 1,)`` log slices: entry, steps, exit) the weights are the indicators
    ``pi-hat > u`` (beam sampling, Van Gael et al. 2008).  Positions past ``length`` keep the
    state.  Returns the path ``(B,)``."""
    num = log_emission.shape[0]
    if beam_log_u is not None:
        gate = lambda w, lu: jnp.where(w > lu, 0.0, -jnp.inf)
        first = gate(log_init, beam_log_u[0])
        exit_w = gate(log_exit, beam_log_u[length])
        trans_at = lambda l: gate(log_trans, beam_log_u[l])
    else:
        first, exit_w = log_init, log_exit
        trans_at = lambda l: log_trans

    def forward(a, l):
        new = log_emission[l] + jax.nn.logsumexp(a[:, None] + trans_at(l), axis=0)
        a = jnp.where(l < length, new, a)
        return a, a

    a0 = first + log_emission[0]
    _, alphas = lax.scan(forward, a0, jnp.arange(1, num))
    alphas = jnp.concatenate([a0[None], alphas], 0)
    final = alphas[-1] + exit_w
    last = draws.categorical(jnp.exp(final - jnp.max(final)), u_back[-1])

    def backward(x_next, l):  # draws position l - 1 given position l
        w = alphas[l - 1] + trans_at(l)[:, x_next]
        x = jnp.where(l < length, draws.categorical(jnp.exp(w - jnp.max(w)), u_back[l - 1]), x_next)
        return x, x

    _, path = lax.scan(backward, last, jnp.arange(num - 1, 0, -1))
    return jnp.concatenate([path[::-1], last[None]])


def _path_log_q(path, length, log_init, log_trans, log_emission, log_exit):
    """``log q`` of a path under eq. 34 (unnormalized: the FFBS normalizer is common to the old
    and the proposed block): entry, transitions, emissions and exit."""
    num = path.shape[0]
    pos = jnp.arange(num)
    real = pos < length
    steps = jnp.where((pos >= 1) & real, log_trans[path[jnp.maximum(pos - 1, 0)], path], 0.0)
    emission = jnp.where(real, log_emission[pos, path], 0.0)
    last = path[jnp.maximum(length - 1, 0)]
    return log_init[path[0]] + jnp.sum(steps) + jnp.sum(emission) + log_exit[last]


def _block_move(key, state: CollapsedState, ctx: Context, statistics, start, length, block_size: int, beam: bool):
    """One blocked (Algs. 6-8) or beam (Sec. 4.3) move over steps ``start .. start + length - 1``
    (``length <= block_size``): ``(state, accepted, overflow)``."""
    data = ctx.data
    capacity = state.occupancy.shape[0]
    steps = data.in_range.shape[0]
    dtype = ctx.log_ratios.dtype
    hyper = ctx.hyper
    k_rem, k_add, k_back, k_crp, k_slots, k_beam, k_acc = random.split(key, 7)
    u_rem = random.uniform(k_rem, (block_size + 1, 2), dtype)
    u_add = 1.0 - random.uniform(k_add, (block_size + 1, 2), dtype)
    pos = jnp.arange(block_size)
    idx = jnp.minimum(start + pos, steps - 1)
    real = pos < length
    last = start + length - 1
    has_exit = data.has_next[last]
    nxt = state.labels[jnp.minimum(last + 1, steps - 1)]
    prev = franchise.restaurant(state, data, start)
    old = state.labels[idx]
    snapshot = state

    # 1. remove the block's customers (Alg. 6)
    state, r_old = franchise.remove_run(state, ctx, statistics, start, length, u_rem, offset=start)

    # 2. propose by FFBS on pi-hat and F of s0 over its states and one new state (eq. 34)
    active = state.occupancy > 0
    has_free = ~jnp.all(active)
    free = jnp.argmin(active)
    allowed = active | ((jnp.arange(capacity) == free) & has_free)
    log_pi = hcrp.log_prob_matrix(state.seating, hyper)  # (K+1, K), start row last
    log_init = jnp.where(allowed, log_pi[prev], -jnp.inf)
    log_trans = jnp.where(allowed[:, None] & allowed[None, :], log_pi[:capacity], -jnp.inf)
    log_exit = jnp.where(has_exit, jnp.where(allowed, log_pi[:capacity, nxt], -jnp.inf), jnp.where(allowed, 0.0, -jnp.inf))
    x_block = jax.tree_util.tree_map(lambda a: a[idx], data.x)
    pre_block = jax.tree_util.tree_map(lambda a: a[idx], data.pre)
    pred = jax.vmap(lambda x, p: statistics.log_predictive(state.est, x, p)[0])(x_block, pre_block)  # (B, K)
    pred_new = jax.vmap(lambda p: jax.nn.logsumexp(statistics.log_new(p, active)))(pre_block)
    pred = jnp.where(jnp.arange(capacity)[None] == free, pred_new[:, None], pred)
    observed = data.observed[idx] & real
    log_emission = jnp.where(allowed[None], jnp.where(observed[:, None], pred, 0.0), -jnp.inf)
    old_bar = jnp.where(active[old], old, free)
    beam_log_u = None
    if beam:
        u_slice = jnp.log(random.uniform(k_beam, (block_size + 1,), dtype))
        entry = log_init[old_bar[0]]
        inner = log_trans[old_bar[jnp.maximum(pos - 1, 0)], old_bar]
        exit_u = log_exit[old_bar[jnp.maximum(length - 1, 0)]]
        beam_log_u = jnp.concatenate([jnp.where(pos == 0, entry, inner), jnp.zeros((1,), dtype)]) + u_slice
        beam_log_u = beam_log_u.at[length].set(exit_u + u_slice[length])
    u_back = 1.0 - random.uniform(k_back, (block_size,), dtype)
    bar = _block_ffbs(u_back, log_init, log_trans, log_emission, log_exit, length, beam_log_u)
    # Q*: occurrences of the new state relabelled by a CRP(gamma), then put in random free slots
    is_new = (bar == free) & real & has_free
    index, num_new, log_crp_new = _crp_relabel(is_new, 1.0 - random.uniform(k_crp, (block_size,), dtype),
                                               hyper.gamma, block_size)
    order = jnp.argsort(jnp.where(active, 2.0, random.uniform(k_slots, (capacity,), dtype)))
    proposal = jnp.where(is_new, order[jnp.maximum(index, 0)], bar)
    log_crp_old = _crp_log_prob(old, (old_bar == free) & real & ~active[old], hyper.gamma)
    log_q_ratio = (_path_log_q(old_bar, length, log_init, log_trans, log_emission, log_exit) + log_crp_old
                   - _path_log_q(bar, length, log_init, log_trans, log_emission, log_exit) - log_crp_new)

    # 3. add the proposed block (Alg. 7)
    # positions past ``length`` are dropped (their clipped indices may repeat a real step's)
    labels = state.labels.at[jnp.where(real, start + pos, steps)].set(proposal.astype(state.labels.dtype), mode="drop")
    state, r_new, table_overflow = franchise.add_run(state._replace(labels=labels), ctx, statistics, start, length,
                                                     u_add, offset=start)

    # 4. accept (Alg. 8, with r* / r_old) or restore the exact old state
    enough = num_new <= jnp.sum(~active)
    log_ratio = r_new - r_old + log_q_ratio
    accepted = franchise.is_valid(state) & enough & ~table_overflow & (jnp.log(random.uniform(k_acc, (), dtype)) < log_ratio)
    state = franchise.select(accepted, state, snapshot)  # the exact old state on rejection (step 4 above)
    return state, accepted, ~has_free | ~enough | table_overflow


def block_sweep(rng_key, state: CollapsedState, ctx: Context, statistics, num_steps: int, block_size: int,
                beam: bool) -> SweepResult:
    """One sweep of the blocked modes: every sequence cut into blocks of ``block_size`` steps at
    a random offset (the first and last blocks shorter), each block moved in turn
    (:func:`_block_move`); ``num_steps`` the padded length ``T``."""
    lengths_per_seq = jnp.sum(ctx.data.in_range.reshape(-1, num_steps), 1)
    num_seq = lengths_per_seq.shape[0]
    per_seq = -(-(num_steps + block_size - 1) // block_size)
    k_offset, k_moves = random.split(rng_key)
    offset = random.randint(k_offset, (), 0, block_size)

    def body(b, carry):
        s, accepted, attempted, overflow = carry
        seq, j = b // per_seq, b % per_seq
        lo = jnp.maximum(j * block_size - offset, 0)
        hi = jnp.minimum((j + 1) * block_size - offset, lengths_per_seq[seq])
        length = hi - lo
        start = seq * num_steps + lo

        def move(s):
            return _block_move(random.fold_in(k_moves, b), s, ctx, statistics, start, length, block_size, beam)

        s, acc, of = lax.cond(length > 0, move, lambda s: (s, jnp.zeros((), bool), jnp.zeros((), bool)), s)
        return s, accepted + acc.astype(jnp.int32), attempted + (length > 0).astype(jnp.int32), overflow | of

    zero = jnp.zeros((), jnp.int32)
    state, accepted, attempted, overflow = lax.fori_loop(0, num_seq * per_seq, body, (state, zero, zero, jnp.zeros((), bool)))
    return SweepResult(state, accepted, attempted, overflow)


# ------------------------------------------------------------------------ collapsed hyperparameters
def reseat_with_concentrations(rng_key, state: CollapsedState, ctx: Context, view: ModelView):
    r"""The collapsed hyperparameter update of the restricted collapsed draw: ``(state, hyper,
    overflow)`` with a new seating and new concentrations.

    The sampler's state is ``(z, m, w)`` (``beta`` and the rows integrated out).  One partially
    collapsed Gibbs cycle through ``beta`` (van Dyk & Park 2008):

    1. ``beta | m, gamma ~ Dir(mbar_.1, ..., mbar_.K, gamma)`` (Teh et al. 2006 eq. 37), its
       exact conditional (every occupied state has an informative table: the transition into it,
       or the start restaurant's table for a sequence's first state);
    2. the global step :func:`~numpyro_hdphmm._core.crp.sample_global` with
       ``hyperparameters="collapsed"``: ``(alpha, kappa) | z, beta`` with the rows **and the
       tables** integrated out (slice sampling of a product of Dirichlet-multinomials, Fox et al.
       eq. 76), the tables ``(m, w) | z, beta, alpha, kappa`` afresh (Antoniak counts and
       overrides, Fox et al. Alg. 1 step 3), ``gamma | mbar`` with ``beta`` integrated out (Teh et
       al. 2006 eq. 20);
    3. ``beta`` (and the rows that step draws) forgotten: the new seating is the new tables.

    Step 1 draws ``beta`` from its conditional, so the cycle is a kernel on ``(z, m, w, gamma,
    alpha, kappa)``; each draw is from a conditional of the joint with only variables that are
    redrawn before they are used again integrated out, so it leaves the collapsed posterior
    invariant.  Unlike the auxiliary-variable update (:func:`~numpyro_hdphmm._core.crp.resample_hyperparameters`
    given the kept tables), ``alpha`` and ``kappa`` are not drawn given tables that were seated at
    their old values.  ``overflow``: a cell got more tables than the Stirling ratio table covers
    (``hcrp.table_capacity``).  Cost ``O(N T + K^2)``.
    """
    dtype = ctx.log_ratios.dtype
    k_beta, k_global = random.split(rng_key)
    beta = crp.sample_beta(k_beta, state.seating.root, ctx.hyper.gamma, weak_limit=False).astype(dtype)
    states = state.labels.reshape(view.data.valid.shape)
    draw = crp.sample_global(k_global, states, view.data.lengths, beta, ctx.hyper, view.priors, weak_limit=False,
                             hyperparameters="collapsed")
    seating = hcrp.seating_from_tables(draw.n, draw.first, draw.tables)
    overflow = jnp.any(seating.m > ctx.log_ratios.shape[1] - 1)
    return state._replace(seating=seating), draw.hyper, overflow


# ------------------------------------------------------------------------ the inner kernel's model
class _SeatingDensity(dist.Distribution):
    """The states site of the inner kernel's model: the probability of the states and the
    seating given the concentrations, ``beta`` and the rows integrated out
    (:func:`~numpyro_hdphmm._core.hcrp.log_likelihood_concentrations`), put on the first element
    of the batch (it does not factor over sequences)."""

    support = constraints.nonnegative_integer

    def __init__(self, stats, gamma, alpha, kappa, batch_shape, event_shape):
        self.stats, self.gamma, self.alpha, self.kappa = stats, gamma, alpha, kappa
        super().__init__(batch_shape=batch_shape, event_shape=event_shape)

    def sample(self, key, sample_shape=()):
        raise NotImplementedError("the collapsed states site is observed (conditioned) in the inner model")

    def log_prob(self, value):
        total = hcrp.log_likelihood_concentrations(self.stats, self.gamma, self.alpha, self.kappa)
        if not self.batch_shape:
            return total
        return jnp.zeros(self.batch_shape, total.dtype).at[(0,) * len(self.batch_shape)].set(total)


class _CollapseSeating(Messenger):
    """The model as the RCD's inner kernel sees it: ``{name}_beta`` and ``{name}_trans``
    contribute nothing (integrated out) and ``{name}_states`` the probability of the states and
    the seating (:class:`_SeatingDensity`) at the concentrations the model computes."""

    def __init__(self, fn=None, stats=None):
        self._stats = stats
        self._gamma = self._alpha = self._kappa = None
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        role = (msg.get("infer") or {}).get(HDP_ROLE)
        if role == "beta":
            self._gamma = msg["fn"].concentration
            msg["fn"] = msg["fn"].mask(False)
        elif role == "trans":
            self._alpha, self._kappa = msg["fn"].alpha, msg["fn"].kappa
            msg["fn"] = msg["fn"].mask(False)
        elif role == "states" and self._alpha is not None:
            chain = msg["fn"]
            msg["fn"] = _SeatingDensity(self._stats, self._gamma, self._alpha, self._kappa, tuple(chain.batch_shape),
                                        tuple(chain.event_shape))


# ------------------------------------------------------------------------ the algorithm
class RCD(Algorithm):
    """The restricted collapsed draw on the contract of :mod:`numpyro_hdphmm.infer.plumbing.adapter`
    (module docstring).  The state is :class:`RCDState`; :meth:`explicit` draws ``beta``, the
    rows and the emission parameters given the seating for the record."""

    name = "RCDSampler"
    Info = RCDInfo
    describe = {
        "beta": "integrated out (HCRP seating kept); drawn as Dir(mbar_.k, gamma) given the tables for the record (RCD paper Sec. 2.2)",
        "trans": "integrated out (HCRP seating kept); drawn given beta and the counts for the record",
        "states": "restricted collapsed draw: MH-corrected moves of the collapsed seating (RCD paper Alg. 1)",
        "params": "integrated out in the sweep; drawn from the conjugate posterior for the record",
    }

    def __init__(self, mode: str = "slice", block_size: int = 10, split_merge: int = 0):
        if mode not in MODES:
            raise ValueError(f"`mode` must be one of {MODES}, got {mode!r}.")
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"`block_size` must be an integer >= 1, got {block_size!r}.")
        self.mode, self.block_size, self.split_merge = mode, block_size, check_split_merge(split_merge)

    # ---------------------------------------------------------------- helpers
    @staticmethod
    def _statistics(spec: ModelSpec, view: ModelView):
        return view.emission.collapsed_statistics(spec.capacity)

    @staticmethod
    def _dtype(view: ModelView):
        return jnp.result_type(view.hyper.alpha, float)

    def _context(self, view: ModelView, statistics, params, hyper) -> Context:
        data = view.data
        return franchise.context(data.x, data.valid, data.lengths, statistics, params, hyper, self._dtype(view))

    # ---------------------------------------------------------------- contract
    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> RCDState:
        """The seating of the starting states: tables drawn given the starting ``beta``
        (:func:`~numpyro_hdphmm._core.crp.sample_table_counts`; any seating of positive
        probability is a valid start), the emission statistics of the starting states."""
        dtype = self._dtype(view)
        statistics = self._statistics(spec, view)
        hyper = crp.Concentrations(*(jnp.asarray(v, dtype) for v in view.hyper))
        ctx = self._context(view, statistics, start.params, hyper)
        collapsed = franchise.collapse(rng_key, start.states, start.beta, start.params, ctx, statistics,
                                       view.data.lengths)
        sigma = view.emission.dp_concentration
        return RCDState(collapsed, dict(start.params), hyper, sigma, dict(start.hyper))

    def step(self, rng_key, state: RCDState, spec: ModelSpec, view: ModelView):
        """One sweep: the mode's moves, ``split_merge`` split-merge moves, the exact
        hyperparameter updates (collapsed, re-seating the franchise, or auxiliary-variable ones
        from the kept tables)."""
        capacity = spec.capacity
        dtype = self._dtype(view)
        k_sweep, k_split, k_hyper, k_sigma = random.split(rng_key, 4)
        statistics = self._statistics(spec, view)
        ctx = self._context(view, statistics, state.params, view.hyper)
        # the carried statistics of the current data (which a Geweke test redraws between sweeps)
        collapsed = state.collapsed
        collapsed = collapsed._replace(est=statistics.rebuild(collapsed.est, ctx.data.x, ctx.data.observed,
                                                              collapsed.labels, dtype))
        if self.mode in ("stepwise", "slice"):
            sweep = single_step_sweep(k_sweep, collapsed, ctx, statistics, self.mode == "slice")
        else:
            sweep = block_sweep(k_sweep, collapsed, ctx, statistics, view.data.valid.shape[1], self.block_size,
                                self.mode == "beam")
        collapsed, overflow = sweep.state, sweep.overflow
        split_merge_accept = jnp.full((), jnp.nan, dtype)
        if self.split_merge:
            moves = split_merge_sweep(k_split, collapsed, ctx, statistics, self.split_merge)
            collapsed, overflow = moves.state, overflow | moves.overflow
            split_merge_accept = moves.accepted.astype(dtype) / self.split_merge
        # the concentrations with exact updates
        if spec.hyperparameters == "collapsed":
            collapsed, hyper, reseated_overflow = reseat_with_concentrations(k_hyper, collapsed, ctx, view)
            overflow = overflow | reseated_overflow
        else:  # from the tables the sampler keeps
            seating = collapsed.seating
            hyper = crp.resample_hyperparameters(k_hyper, ctx.hyper, view.priors, hcrp.table_counts(seating),
                                                 seating.n[:capacity], seating.n[capacity], weak_limit=False,
                                                 max_total=view.data.valid.size)
        hyper = crp.Concentrations(*(jnp.asarray(v, dtype) for v in hyper))
        sigma = state.dp_concentration
        if spec.hyper.dp_concentration is not None:
            weights = franchise.emission_weights(collapsed, ctx.data, dtype)
            _, sigma = statistics.draw_parameters(k_sigma, collapsed.est, view.emission, ctx.data.x, weights,
                                                  state.params, view.dp_concentration_prior)
        _, shared = sample_emission_base(random.fold_in(k_sigma, 1), spec, view, collapsed.est)
        values = {**hyper_site_values(spec, hyper, sigma if spec.hyper.dp_concentration else None), **shared}
        info = RCDInfo(overflow, sweep.accepted.astype(dtype) / jnp.maximum(sweep.attempted, 1).astype(dtype),
                       split_merge_accept)
        return RCDState(collapsed, state.params, hyper, sigma, values), info

    def explicit(self, rng_key, state: RCDState, spec: ModelSpec, view: ModelView) -> Explicit:
        """``beta | s ~ Dir(mbar_.1, ..., mbar_.K, gamma)`` (Teh et al. 2006 eq. 37: free slots
        get 0), the rows ``| beta, counts`` (:func:`~numpyro_hdphmm._core.crp.sample_rows`), the
        emission parameters from their posteriors given the states; states relabelled by first
        appearance (not for custom emissions, whose parameters stay with their slots)."""
        capacity = spec.capacity
        dtype = self._dtype(view)
        k_beta, k_rows, k_params = random.split(rng_key, 3)
        collapsed = state.collapsed
        seating = collapsed.seating
        hyper = state.concentrations
        beta = crp.sample_beta(k_beta, seating.root, hyper.gamma, weak_limit=False).astype(dtype)
        trans = crp.sample_rows(k_rows, beta, hyper.alpha, hyper.kappa, seating.n[:capacity], seating.n[capacity])
        statistics = self._statistics(spec, view)
        emission = emission_with_base(spec, view.emission, state.hyper)
        if state.dp_concentration is not None:
            emission = emission.with_dp_concentration(state.dp_concentration)
        data = view.data
        in_range = franchise.step_data(data.x, data.valid, data.lengths, None)
        weights = franchise.emission_weights(collapsed, in_range, dtype)
        params, _ = statistics.draw_parameters(k_params, collapsed.est, emission, in_range.x, weights, state.params)
        labels = collapsed.labels
        if statistics.relabels:
            new_of_old, old_of_new = canonical_order(labels, in_range.in_range, capacity)
            labels = jnp.where(in_range.in_range, new_of_old[labels], 0)
            order = jnp.concatenate([old_of_new, jnp.array([capacity], old_of_new.dtype)])
            beta = beta[order]
            trans = trans[order][:, order]
            params = jax.tree_util.tree_map(lambda p: p[old_of_new], params)
        states = labels.reshape(data.valid.shape)
        return Explicit(states, beta, trans, params, state.hyper)

    def resume(self, rng_key, state: RCDState, spec: ModelSpec, view: ModelView) -> RCDState:
        """Nothing was integrated out for the inner kernel that the state holds: only the
        concentrations it may have moved are read back."""
        dtype = self._dtype(view)
        return state._replace(concentrations=crp.Concentrations(*(jnp.asarray(v, dtype) for v in view.hyper)))

    def inner_model(self, model):
        """The model with ``beta`` and the rows integrated out and the seating kept: the states
        site has the density of the states and the table counts given the concentrations
        (:class:`_CollapseSeating`); the seating comes in the keyword argument of
        :meth:`inner_kwargs`."""

        def collapsed(*args, **kwargs):
            stats = kwargs.pop(_SEATING_KWARG)
            with _CollapseSeating(stats=stats):
                return model(*args, **kwargs)

        return collapsed

    def inner_kwargs(self, state: RCDState):
        return {_SEATING_KWARG: hcrp.concentration_statistics(state.collapsed.seating)}


class RCDSampler(HDPKernel):
    r"""Restricted collapsed draw sampler of the infinite (sticky) HDP-HMM in its hierarchical
    Chinese-restaurant form (arXiv:1106.0474, 2011; module docstring).

    The transition rows, ``beta`` and, for conjugate families, the emission parameters are
    integrated out; the sampler keeps the seating of the franchise as table counts and moves it
    with Metropolis-Hastings-corrected simultaneous draws.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param mode: ``"stepwise"`` (Alg. 5), ``"slice"`` (step-wise beam, the paper's fastest on
        text), ``"blocked"`` (Algs. 6-8, FFBS over blocks) or ``"beam"`` (beam sampling within
        blocks).
    :param block_size: steps per block of ``"blocked"`` and ``"beam"`` (the blocks start at a
        random offset each sweep).
    :param split_merge: split-merge moves per sweep (Algs. 9-10, with early rejection).
    :param inner_kernel: kernel for the remaining latent sites (default ``NUTS``), which sees
        ``beta`` and the rows integrated out and the seating kept.
    :param hyperparameters: how those concentrations are drawn after the moves: ``"collapsed"``
        (default; :func:`reseat_with_concentrations`) draws ``beta | tables ~ Dir(mbar_.k, gamma)``,
        slice-samples ``(alpha, kappa) | z, beta`` with the rows and the tables integrated out
        (Fox et al. eq. 76), re-seats the franchise (tables and overrides given the new values,
        Fox et al. Alg. 1 step 3), slice-samples ``gamma | mbar`` with ``beta`` integrated out and
        forgets ``beta``: a partially collapsed Gibbs cycle, exact for the collapsed posterior;
        ``"auxiliary"`` applies Fox et al.'s auxiliary-variable updates (App. III, eqs. 50-56)
        given the table counts the sampler keeps.

    Collected fields: ``z`` (all latent sites; states relabelled by first appearance except for
    custom emissions), ``num_states``, ``lp``, ``accept_prob``/``diverging`` of the inner kernel,
    and :class:`RCDInfo`'s ``overflow``, ``gibbs_accept`` and ``split_merge_accept``.
    """

    algorithm = RCD()

    def __init__(self, model, mode: str = "slice", block_size: int = 10, split_merge: int = 0, **options):
        super().__init__(model, RCD(mode, block_size, split_merge), **options)
