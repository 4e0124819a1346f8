r"""Slice sampling pieces of the beam sampler (Van Gael, Saatci, Teh & Ghahramani 2008).

The auxiliary slices ``u_t ~ U(0, pi_{z_{t-1} z_t})`` make the set of state sequences with
positive probability finite: a transition ``i -> j`` at step ``t`` is admissible iff
``pi_ij > u_t``.  Written once here, used by every sampler that slices (the beam sampler, the
restricted collapsed draw's beam mode):

``draw_slices``
    the slices of the current path, in log space (Van Gael et al. Sec. 3, the auxiliary step);
``extend_sticks``
    instantiate states by stick-breaking until no remainder of a row can pass a slice;
``break_stick``
    instantiate one state by stick-breaking, every random draw keyed by a global row / column
    index (the lazy instantiation of particle Gibbs, whose replays must draw the same atom);
``slice_ffbs``
    forward filtering, backward sampling over the instantiated states with the time-varying 0/1
    transitions ``1[pi_ij > u_t]`` (Van Gael et al. Sec. 3), ``O(T k^2)`` in the number ``k`` of
    instantiated states (compiled for a few sizes, :func:`ffbs_sizes`), exact for any spread of
    the log-likelihoods (a rescaled pass, redone in log space only when it underflows).

Array conventions: ``trans (K+1, K+1)`` the rows over (slots, remainder) with the start row last;
``log_u (N, T)``; ``inst (K,)`` the instantiated slots; ``log_lik (N, T, K)``; ``obs (N, T)``
(False: emission dropped); ``lengths (N,)`` (steps ``t >= length`` are padding).
"""

from __future__ import annotations

import functools
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.reduce import block_max, block_sum, padded_size
from numpyro_hdphmm._core.sizing import run_at_size, smallest_size, state_sizes
from numpyro_hdphmm._core.slots import first_free_slot

__all__ = ["draw_slices", "extend_sticks", "break_stick", "slice_ffbs", "ffbs_sizes", "ffbs_at_size"]


def draw_slices(rng_key, states, trans, lengths):
    """``log u_t``, ``u_t ~ U(0, pi_{z_{t-1} z_t})`` (start row for ``t = 0``): ``(N, T)``.

    Drawn as ``log pi + log U`` with ``U`` uniform on ``[tiny, 1)``, so that ``u_t < pi`` holds
    strictly (the current path stays admissible) and nothing underflows.  Padded steps get
    ``+inf`` (they constrain nothing)."""
    capacity = trans.shape[0] - 1
    num_seq, num_steps = states.shape
    dtype = trans.dtype
    prev = jnp.concatenate([jnp.full((num_seq, 1), capacity, states.dtype), states[:, :-1]], 1)
    log_path = jnp.log(trans[prev, states])
    log_unif = jnp.log(random.uniform(rng_key, (num_seq, num_steps), dtype, minval=jnp.finfo(dtype).tiny))
    valid = jnp.arange(num_steps) < lengths[:, None]
    return jnp.where(valid, log_path + log_unif, jnp.inf)


# ------------------------------------------------------------------------- stick extension
class _Extension(NamedTuple):
    inst: jax.Array
    beta: jax.Array
    trans: jax.Array
    params: dict
    count: jax.Array


def extend_sticks(rng_key, inst, beta, trans, params, prior_params, log_u, gamma, alpha, kappa):
    r"""Instantiate states until no remainder can pass a slice (Van Gael et al. Sec. 3).

    While an instantiated row (or the start row) gives its remainder more mass than the smallest
    slice it must respect, break the stick (the stick-breaking construction, Teh et al. 2006 eq. 9
    / Fox et al. eq. 2): ``b ~ Beta(1, gamma)``, ``beta_new = b beta_rem``, ``beta_rem <- (1 - b)
    beta_rem``; every instantiated row and the start row split their remainder ``pi_{j,new} = v_j
    pi_{j,rem}``, ``pi_{j,rem} <- (1 - v_j) pi_{j,rem}`` with ``v_j ~ Beta(alpha beta_new, alpha
    beta_rem)`` (the Dirichlet aggregation property of ``pi_j ~ Dir(alpha beta + kappa e_j + n_j)``:
    for ``j != new`` no ``kappa`` and no count falls on the new column); the new state's row is
    drawn from its prior ``Dir(alpha beta + kappa e_new)`` over the instantiated states and the
    rest (Fox et al. eq. 26) and its emission parameters from ``H``.  A bounded
    ``lax.while_loop``: when the capacity is exhausted while still needed, the extension stops
    and ``overflow`` is raised.

    ``inst (K,)`` instantiated slots, ``beta (K+1,)``, ``trans (K+1, K+1)`` (start row last,
    remainder column last), ``params`` (leading axis ``K``), ``prior_params`` fresh draws from
    ``H`` for every slot, ``log_u (N, T)`` from :func:`draw_slices`.  A new state goes to the
    first free slot.  Returns ``(inst, beta, trans, params, overflow)``; ``overflow`` is True
    when the capacity ran out while a remainder still exceeded a slice.
    """
    capacity = beta.shape[0] - 1
    dtype = beta.dtype
    slot = jnp.arange(capacity)
    log_u_start = jnp.min(log_u[:, 0])
    log_u_trans = jnp.min(log_u[:, 1:]) if log_u.shape[1] > 1 else jnp.asarray(jnp.inf, dtype)

    def needed(ext: _Extension):
        log_rem = jnp.log(ext.trans[:, capacity])
        rows = jnp.any(ext.inst & (log_rem[:capacity] > log_u_trans))
        return rows | (log_rem[capacity] > log_u_start)

    def cond(ext: _Extension):
        return needed(ext) & jnp.any(~ext.inst)

    def body(ext: _Extension):
        key = random.fold_in(rng_key, ext.count)
        k_b, k_g = random.split(key)
        k = first_free_slot(ext.inst)
        rem = ext.beta[capacity]
        log_1mb = draws.log_stick_remainder(k_b, jnp.asarray(gamma, dtype))  # log(1 - b), b ~ Beta(1, gamma)
        beta_k = rem * -jnp.expm1(log_1mb)
        rem_new = rem * jnp.exp(log_1mb)
        beta = ext.beta.at[k].set(beta_k).at[capacity].set(rem_new)
        inst = ext.inst.at[k].set(True)
        rows = jnp.concatenate([ext.inst, jnp.ones((1,), bool)])  # instantiated rows and the start row
        # one batch of Gamma variates: v_j ~ Beta(alpha beta_k, alpha beta_rem_new) for the row splits
        # (no kappa: j != k) and the new row ~ Dir(alpha beta + kappa e_k) over (slots, rest)
        row_conc = alpha * jnp.where(jnp.concatenate([inst, jnp.ones((1,), bool)]), beta, 0.0)
        row_conc = row_conc + kappa * (jnp.arange(capacity + 1) == k).astype(dtype)
        conc = jnp.stack([jnp.broadcast_to(alpha * beta_k, row_conc.shape),
                          jnp.broadcast_to(alpha * rem_new, row_conc.shape), row_conc])
        positive = conc > 0
        log_g = jnp.where(positive, draws.log_gamma(k_g, jnp.where(positive, conc, 1.0)), -jnp.inf)
        log_vsum = jnp.logaddexp(log_g[0], log_g[1])
        rem_col = ext.trans[:, capacity]
        trans = ext.trans.at[:, k].set(jnp.where(rows, rem_col * jnp.exp(log_g[0] - log_vsum), ext.trans[:, k]))
        trans = trans.at[:, capacity].set(jnp.where(rows, rem_col * jnp.exp(log_g[1] - log_vsum), rem_col))
        trans = trans.at[k].set(jnp.exp(log_g[2] - jax.nn.logsumexp(log_g[2])))
        params = jax.tree_util.tree_map(lambda p, q: jnp.where((slot == k).reshape((-1,) + (1,) * (p.ndim - 1)), q, p),
                                        ext.params, prior_params)
        return _Extension(inst, beta, trans, params, ext.count + 1)

    ext = lax.while_loop(cond, body, _Extension(inst, beta, trans, params, jnp.zeros((), jnp.int32)))
    return ext.inst, ext.beta, ext.trans, ext.params, needed(ext)


def break_stick(rng_key, slot, inst, beta, trans, gamma, alpha, kappa, ids=None):
    r"""Instantiate the free slot ``slot`` as the next atom of the remaining stick.

    The construction of :func:`extend_sticks` (Teh et al. 2006 eq. 9 / Fox et al. eq. 2, the
    aggregation property of the rows' Dirichlets): ``b ~ Beta(1, gamma)``, ``beta_new = b
    beta_rem``, ``beta_rem <- (1 - b) beta_rem``; every instantiated row and the start row split
    their remainder ``pi_{j,new} = v_j pi_{j,rem}``, ``pi_{j,rem} <- (1 - v_j) pi_{j,rem}`` with
    ``v_j ~ Beta(alpha beta_new, alpha beta_rem)``; the new row is ``Dir(alpha beta + kappa
    e_new)`` over the instantiated states, the new one and the rest (Fox et al. eq. 26).

    Unlike :func:`extend_sticks`, every draw is keyed by a global index: row ``j``'s split by
    ``ids[j]``, the new row's Gamma variate of column ``c`` by ``ids[c]``, so that the same atom
    (the same key) is drawn identically whichever view of the slots the caller holds (a sampler
    that replays its randomness over a different number of slots).  ``inst (S,)`` instantiated
    slots, ``beta (S+1,)``, ``trans (S+1, S+1)`` (start row last, remainder column last), ``ids
    (S+1,)`` the global index of each slot and of the start row / remainder (default
    ``arange(S+1)``).  Returns ``(inst, beta, trans)`` with ``slot`` instantiated.
    """
    num_states = beta.shape[0] - 1
    dtype = beta.dtype
    ids = jnp.arange(num_states + 1) if ids is None else jnp.asarray(ids)
    k_b, k_split, k_row = random.split(rng_key, 3)
    rem = beta[num_states]
    log_1mb = draws.log_stick_remainder(k_b, jnp.asarray(gamma, dtype))  # log(1 - b), b ~ Beta(1, gamma)
    beta_new = rem * -jnp.expm1(log_1mb)
    rem_new = rem * jnp.exp(log_1mb)
    rows = jnp.concatenate([inst, jnp.ones((1,), bool)])  # instantiated rows and the start row
    beta = beta.at[slot].set(beta_new).at[num_states].set(rem_new)
    inst = inst.at[slot].set(True)
    # row splits: v_j ~ Beta(alpha beta_new, alpha beta_rem), one pair of Gamma variates per row
    pair = jnp.stack([jnp.broadcast_to(alpha * beta_new, (num_states + 1,)),
                      jnp.broadcast_to(alpha * rem_new, (num_states + 1,))], -1).astype(dtype)
    positive = pair > 0
    keys = jax.vmap(lambda i: random.fold_in(k_split, i))(ids)
    log_g = jax.vmap(draws.log_gamma)(keys, jnp.where(positive, pair, 1.0))
    log_g = jnp.where(positive, log_g, -jnp.inf)
    log_vsum = jnp.logaddexp(log_g[:, 0], log_g[:, 1])
    rem_col = trans[:, num_states]
    split = jnp.where(jnp.isfinite(log_vsum)[:, None], log_g - log_vsum[:, None], jnp.log(0.5))
    trans = trans.at[:, slot].set(jnp.where(rows, rem_col * jnp.exp(split[:, 0]), trans[:, slot]))
    trans = trans.at[:, num_states].set(jnp.where(rows, rem_col * jnp.exp(split[:, 1]), rem_col))
    # the new row ~ Dir(alpha beta + kappa e_new) over (instantiated, rest)
    conc = alpha * jnp.where(jnp.concatenate([inst, jnp.ones((1,), bool)]), beta, 0.0)
    conc = (conc + kappa * (jnp.arange(num_states + 1) == slot)).astype(dtype)
    positive = conc > 0
    keys = jax.vmap(lambda i: random.fold_in(k_row, i))(ids)
    log_g = jnp.where(positive, jax.vmap(draws.log_gamma)(keys, jnp.where(positive, conc, 1.0)), -jnp.inf)
    trans = trans.at[slot].set(jnp.exp(log_g - jax.nn.logsumexp(log_g)))
    return inst, beta, trans


# ------------------------------------------------------------------------------------ FFBS
def _reachable_mass(log_pi_kk, log_u_t, a_prev):
    """``sum_i a_prev(i) 1[log pi_ij > log u_t]`` for every ``j``: the forward step's mass that
    can reach ``j`` (Van Gael et al. Sec. 3), over blocks of 8 rows (:mod:`numpyro_hdphmm._core.reduce`
    explains why)."""
    num = log_pi_kk.shape[0]
    if num <= 16:
        return jnp.sum(jnp.where(log_pi_kk > log_u_t, a_prev[:, None], 0.0), 0)
    parts = [jnp.sum(jnp.where(log_pi_kk[i:i + 8] > log_u_t, a_prev[i:i + 8, None], 0.0), 0)
             for i in range(0, num, 8)]
    return functools.reduce(operator.add, parts)


def _slice_ffbs_single(size, key, log_pi, log_u, inst, log_lik, obs, length):
    """One sequence of :func:`slice_ffbs` over the slots ``0..size-1`` (static ``size``: every
    instantiated slot is below it; beyond the capacity, zero-mass padding states that are never
    reachable nor drawn)."""
    num_steps, capacity = log_lik.shape
    dtype = log_lik.dtype
    steps = jnp.arange(num_steps)
    valid = steps < length
    last = length - 1
    k8 = size
    used = min(size, capacity)
    pad = k8 - used
    # masked emissions: dropped or padded steps emit nothing, free and padding slots have
    # log-likelihood -inf.  The fast pass exponentiates them in one (T, K) array; the exact
    # pass (rarely run) masks each step's row itself rather than keeping a second (T, K) array
    ll = log_lik[:, :used]
    emits = obs & valid
    free = ~inst[:used]

    def masked_row(emit_t, ll_t):
        return jnp.pad(jnp.where(free, -jnp.inf, jnp.where(emit_t, ll_t, 0.0)), (0, pad), constant_values=-jnp.inf)

    trans_kk = jnp.pad(log_pi[:used, :used], ((0, pad), (0, pad)), constant_values=-jnp.inf)
    start = jnp.pad(log_pi[capacity, :used], (0, pad), constant_values=-jnp.inf)
    # padded steps allow every transition: their filtered values are never read
    lu = jnp.where(valid, log_u, -jnp.inf)
    reach0 = (start > lu[0]).astype(dtype)

    # Fast pass: alpha_t(j) ∝ e_t(j) sum_i alpha_{t-1}(i) 1[pi_ij > u_t] (Van Gael et al. Sec. 3)
    # with the emissions exponentiated once, relative to the best instantiated state at t
    # (Rabiner (1989) Sec. V.A scaling).  Exact unless a step's normalizer falls below
    # sqrt(tiny), i.e. every reachable state fits ~44 nats (float32) worse than the best one.
    top = jnp.max(jnp.where(free, -jnp.inf, ll), -1)
    top = jnp.where(emits & jnp.isfinite(top), top, 0.0)
    em = jnp.where(free, 0.0, jnp.where(emits[:, None], jnp.exp(ll - top[:, None]), 1.0))
    em = jnp.pad(em, ((0, 0), (0, pad)))

    # every step in one scan (step 0 reaches through the start row): no (T, K) concatenation
    def forward_fast(a_prev, inp):
        t, lu_t, em_t = inp
        b = jnp.where(t == 0, reach0, _reachable_mass(trans_kk, lu_t, a_prev)) * em_t
        c = block_sum(b)
        a = b / c
        return a, (a, c)

    _, (filtered, cs) = lax.scan(forward_fast, jnp.zeros((k8,), dtype), (steps, lu, em))
    log_c = jnp.log(cs) + top
    redo = jnp.any(valid & ~(cs >= jnp.sqrt(jnp.finfo(dtype).tiny)))

    def forward_exact(carry):
        # the same recursion in LOG space (the filtered values are carried as logs): no
        # normalizer can underflow, however much better an unreachable state fits, and a
        # predecessor whose filtered probability is far below float32's range (e^-100 of the
        # best) keeps its mass, which a later step may need (an outlier that only its successor
        # fits: the probability-space recursion flushes it to zero and loses the good path).
        # Reading the loop-variant flag (into the (T,) slices, not a (T, K) copy) keeps XLA
        # from hoisting this pass out of the (at most one-trip) loop below.
        lu_x = jnp.where(carry[2], lu, jnp.inf)
        log_reach0 = jnp.where(start > lu_x[0], 0.0, -jnp.inf).astype(dtype)

        def step(log_a_prev, inp):
            t, lu_t, emit_t, ll_t = inp
            # log sum_i a_{t-1}(i) 1[pi_ij > u_t], each column shifted by its own maximum
            scores = jnp.where(trans_t > lu_t, log_a_prev[None, :], -jnp.inf)  # (j, i)
            top_j = block_max(scores)
            shift = jnp.where(jnp.isfinite(top_j), top_j, 0.0)
            log_reach = jnp.log(block_sum(jnp.exp(scores - shift[:, None]))) + shift
            log_b = jnp.where(t == 0, log_reach0, log_reach) + masked_row(emit_t, ll_t)
            m = block_max(log_b)
            m = jnp.where(jnp.isfinite(m), m, 0.0)
            log_c = jnp.log(block_sum(jnp.exp(log_b - m))) + m
            log_a = log_b - jnp.where(jnp.isfinite(log_c), log_c, 0.0)
            return log_a, (log_a, log_c)

        _, (log_filtered, log_cs) = lax.scan(step, jnp.full((k8,), -jnp.inf, dtype), (steps, lu_x, emits, ll))
        return log_filtered, log_cs, jnp.zeros((), bool)

    trans_t = trans_kk.T
    # a while loop rather than lax.cond: under vmap (vectorized chains) a cond becomes a select
    # that always runs both passes, a loop runs the exact pass only when some chain needs it.
    # After it, ``filtered`` holds probabilities (fast pass) or log-probabilities (exact pass).
    filtered, log_c, _ = lax.while_loop(lambda carry: carry[2], forward_exact, (filtered, log_c, redo))
    log_norm = jnp.where(valid, log_c, 0.0)

    # backward sampling: p(z_t = i | z_{t+1} = j, ...) ∝ alpha_t(i) 1[pi_ij > u_{t+1}]; the carry
    # passes u_{t+1} down (no shifted (T,) copy) and checks that every drawn state had positive
    # weight (filtered mass, which includes the admissibility of its own slice, and an
    # admissible transition into the next state)
    unif = 1.0 - random.uniform(key, (num_steps,), dtype)  # (0, 1]

    def backward_step(weights, lu_b):
        def backward(carry, inp):
            z_next, lu_next, good = carry
            t, f_t, lu_t, u = inp
            w = weights(f_t, (t < last) & (trans_t[z_next] <= lu_next))
            z = draws.categorical(w, u)
            return (z, lu_t, good & ((w[z] > 0) | (t > last))), z

        init = (jnp.zeros((), jnp.int32), jnp.asarray(-jnp.inf, dtype), jnp.ones((), bool))
        (_, _, good), zs = lax.scan(backward, init, (steps, filtered, lu_b, unif), reverse=True)
        return zs, good

    def log_weights(log_f_t, blocked):
        # log filtered values: exponentiated relative to the best admissible predecessor
        masked = jnp.where(blocked, -jnp.inf, log_f_t)
        top = block_max(masked)
        return jnp.exp(masked - jnp.where(jnp.isfinite(top), top, 0.0))

    zs, good = backward_step(lambda f_t, blocked: jnp.where(blocked, 0.0, f_t), lu)
    # after the exact pass: the same draw from the log values (a one-trip loop as above; the
    # slices read through the loop-variant flag keep XLA from hoisting it out of the loop)
    zs, good, _ = lax.while_loop(
        lambda c: c[2], lambda c: (*backward_step(log_weights, jnp.where(c[2], lu, jnp.inf)), jnp.zeros((), bool)),
        (zs, good, redo))
    ok = jnp.all(jnp.isfinite(log_norm)) & good
    states = jnp.where(valid, zs, zs[jnp.maximum(last, 0)])
    return states, jnp.sum(log_norm), ok


def slice_ffbs(rng_key, log_pi, log_u, inst, log_lik, obs, lengths):
    r"""Forward filtering, backward sampling under the slice constraints (Van Gael et al. Sec. 3).

    ``log_pi (K+1, K+1)`` log transition matrix (start row last, remainder column ignored),
    ``log_u (N, T)`` log slices, ``inst (K,)`` instantiated states, ``log_lik (N, T, K)``,
    ``obs (N, T)`` (False: emission dropped), ``lengths (N,)`` (steps ``t >= length`` are
    padding: no transition, no emission; their states copy the last valid one).

    The transition into step ``t`` is ``1[log pi_ij > log u_t]``, built inside the scan.  The
    forward pass keeps ``alpha_t`` normalized in probability space (Rabiner (1989) Sec. V.A
    scaling); each step sums the reachable mass and multiplies by the emissions, exponentiated
    once outside the loop relative to the best instantiated state of the step.  When some
    step's normalizer falls below ``sqrt(tiny)`` (every reachable state fits ~44 nats worse, in
    float32, than an unreachable one, or the only good successor comes from a state whose
    filtered probability has underflowed) the pass is redone in log space: the filtered values
    are carried as logs and each column of reachable mass is a log-sum-exp shifted by its own
    maximum, so log-likelihood spreads of any size (tested to 1e10 nats in float32 against a
    float64 reference) and filtered probabilities far below the float range are exact; backward
    sampling then reads the log values.  When the rescaled pass is kept, what it flushes is below
    ``sqrt(tiny)`` of each step's total.  The recursion runs over the
    smallest of :func:`ffbs_sizes` that holds every instantiated slot, so its cost is
    ``O(T k^2)`` in the number ``k`` of instantiated states whatever the capacity.
    Returns ``(states (N, T) int32, log_mass (N,), ok (N,))``: ``log_mass`` is the log of
    ``sum_z 1[u_0 < pi_{0 z_0}] prod_t 1[u_t < pi_{z_{t-1} z_t}] prod_t f(y_t | z_t)``; ``ok`` is
    False when a sequence has no admissible path left (its ``states`` are then meaningless).
    """
    sizes = ffbs_sizes(inst.shape[0])
    keys = random.split(rng_key, log_lik.shape[0])
    args = (keys, log_pi, log_u, inst, log_lik, obs, lengths)
    top = jnp.max(jnp.where(inst, jnp.arange(1, inst.shape[0] + 1), 0))  # highest instantiated slot + 1
    return run_at_size(sizes, _ffbs_args_at_size, smallest_size(sizes, top), args)


def ffbs_sizes(capacity: int):
    """The state dimensions the slice FFBS is compiled for at capacity ``capacity``: the padded
    capacity (:func:`~numpyro_hdphmm._core.reduce.padded_size`) and, above 16, also ``16, 32, 64, ...``
    below it (:func:`~numpyro_hdphmm._core.sizing.state_sizes`).  A sweep runs the smallest one
    that holds every instantiated slot, so the dynamic programming costs ``O(T k^2)`` in the
    number ``k`` of instantiated states (within a factor 4 of ``k^2``), not in the capacity."""
    return state_sizes(padded_size(capacity))


def ffbs_at_size(size, keys, log_pi, log_u, inst, log_lik, obs, lengths):
    """:func:`slice_ffbs` compiled at the static state dimension ``size`` (every instantiated slot
    below it), one key per sequence ``keys (N,)``."""
    return jax.vmap(functools.partial(_slice_ffbs_single, size), in_axes=(0, None, 0, None, 0, 0, 0))(
        keys, log_pi, log_u, inst, log_lik, obs, lengths
    )


def _ffbs_args_at_size(size, args):
    return ffbs_at_size(size, *args)
