r"""Split-merge moves on the collapsed HDP-HMM (RCD paper Sec. 4.4, Algs. 9-10, reconstructed in
``docs/errata.md`` "Restricted collapsed draw" item 7; after Jain & Neal 2000 and Dahl's sequentially-allocated merge-split).

A move acts on the franchise's seating and emission statistics
(:class:`~numpyro_hdphmm.infer.moves.franchise.CollapsedState`), with everything integrated out: the
restricted collapsed draw (Alg. 1) of all the steps of two states at once.

1. ``R_thr ~ U(0, 1)``; two distinct steps ``t1, t2`` uniformly among all valid steps.
2. *Fragments*: the maximal runs of consecutive steps ``t`` of one sequence with ``z_t`` in
   ``{z_t1, z_t2}`` and ``t`` not in ``{t1, t2}``, in a random order ``1..U``.
3. Removal, in the reverse of the later addition: fragments ``U..1`` (each with the transition
   out of it, :func:`~numpyro_hdphmm.infer.moves.franchise.remove_run`), then ``t2``'s customers (its
   transitions in and out unless a neighbouring fragment owns them, and its emission), collecting
   ``r_old``.  For a merge, fragment ``i`` is scored after its removal (the fragments ``1..i-1``
   and ``t2`` still seated, the paper's ``s_{i+1}`` corrected, notes §2.10 #8): ``q_old_i`` is the
   probability that the restricted FFBS below proposes its old labels.
4. *Split* (``z_t1 = z_t2 = a``): ``t2`` gets a new state ``c`` (a uniformly chosen free slot);
   its customers are added; then for ``i = 1..U`` the fragment is drawn by forward filtering,
   backward sampling restricted to ``{a, c}`` on the predictive ``pi-hat`` and ``F`` of the
   current seating (Alg. 10 ``LimitedFBSampler``), ``q*_i`` its probability, and added.
   *Merge* (``z_t1 = a != z_t2 = b``): ``t2`` and every fragment get ``a`` (``q* = 1``), added in
   the same order.
5. Accept when ``R_thr < prod r* / r_old * prod q_old / q*``; else the exact previous state is
   restored.  A merge rejects as soon as the partial ratio falls to ``R_thr``: every remaining
   factor ``r*`` is a probability (``<= 1``) when the emission predictive is a probability mass
   (:meth:`~numpyro_hdphmm.emissions.collapsed.CollapsedStatistics.log_predictive_bound`), so
   the ratio can only fall (early rejection, Alg. 10; the decision is the same as without it).

The move is the same for the restricted collapsed draw and for the direct-assignment sampler
(:func:`split_merge_given_beta`), whose state keeps ``beta`` explicit.  Its moves run on the
collapsed state by data augmentation: with ``pi(z, m, w, beta)`` the joint posterior of the
states, tables, override tables and weights (rows and emission parameters integrated out),

1. ``(m, w) ~ pi(m, w | z, beta)`` (:func:`~numpyro_hdphmm.infer.moves.franchise.collapse`: Antoniak
   counts, a Gibbs step of ``pi``); forgetting ``beta``, ``(z, m, w)`` is a draw of the marginal
   ``pi(z, m, w) = int pi(z, m, w, beta) dbeta``, the franchise's seating probability (RCD paper
   eqs. 18-20; ``int prod_k beta_k^{mbar_.k} GEM(dbeta; gamma)`` is the top-level CRP);
2. the moves above, which leave ``pi(z, m, w)`` invariant;
3. ``beta ~ pi(beta | m, w) = Dir(mbar_.1, ..., mbar_.K, gamma)`` (free slots 0).

The composition leaves ``pi(z, m, w, beta)`` invariant (step 2-3 maps any draw of ``pi(z, m, w)``
to one of ``pi(z, m, w, beta)`` whatever ``beta`` was), so no term of the move's acceptance
ratio changes: the split's new state gets its weight from step 3, not from a proposal.
Emission parameters the sampler carries (a DP mixture's, whose component indicators are drawn
from them in step 1; a custom emission's, which are never collapsed) are drawn from their
conditional given the moved state after step 3 (``statistics.draw_parameters``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core import crp, hcrp
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.collapsed import row_of
from numpyro_hdphmm.infer.moves import franchise
from numpyro_hdphmm.infer.contract import Explicit
from numpyro_hdphmm.infer.moves.franchise import CollapsedState, Context

__all__ = ["SplitMergeResult", "Fragments", "fragments", "restricted_ffbs", "split_merge_move", "split_merge_sweep",
           "settle", "ExplicitSplitMerge", "split_merge_given_beta", "SPLIT_MERGE_STREAM", "check_split_merge",
           "collapsed_statistics", "log_label_choice", "ExplicitMoves", "split_merge_explicit"]


class SplitMergeResult(NamedTuple):
    """The state after the moves, the number of accepted moves and the overflow flag (a split
    found no free slot, or a cell opened more tables than the Stirling table covers)."""

    state: CollapsedState
    accepted: jax.Array
    overflow: jax.Array


class Fragments(NamedTuple):
    """Fragments in their (random) order: ``start (S,)`` and ``length (S,)`` of the fragment of
    rank ``r < count``; ``member (S,)`` whether a step is in a fragment."""

    start: jax.Array
    length: jax.Array
    count: jax.Array
    member: jax.Array


def fragments(rng_key, labels, data, t1, t2) -> Fragments:
    """The fragments of the move (module docstring, step 2), in a uniformly random order."""
    steps = labels.shape[0]
    pos = jnp.arange(steps)
    member = data.in_range & ((labels == labels[t1]) | (labels == labels[t2])) & (pos != t1) & (pos != t2)
    before = jnp.concatenate([jnp.zeros((1,), bool), member[:-1]])
    is_start = member & (data.is_first | ~before)
    ident = jnp.cumsum(is_start) - 1
    count = jnp.sum(is_start).astype(jnp.int32)
    starts = jnp.nonzero(is_start, size=steps, fill_value=0)[0].astype(jnp.int32)
    lengths = jnp.zeros(steps, jnp.int32).at[jnp.where(member, ident, steps)].add(1, mode="drop")
    keys = jnp.where(pos < count, random.uniform(rng_key, (steps,)), 2.0)
    order = jnp.argsort(keys)
    return Fragments(starts[order], lengths[order], count, member)


def restricted_ffbs(state: CollapsedState, ctx: Context, statistics, start, length, pair, path_fn, u):
    """Forward filtering on the fragment ``start .. start + length - 1`` with its states restricted
    to ``pair (2,)`` (labels), on the predictive of the current seating ``pi-hat`` and emission
    statistics ``F`` (the fragment's own customers removed): ``q(x) ∝ pi-hat(x_b | x_{b-1})
    prod pi-hat(x_l | x_{l-1}) prod F_{x_l}(y_l) pi-hat(x_{e+1} | x_e)`` (Alg. 9-10's
    ``SeqProb / ForwardProb``), computed as the product of the backward conditionals.
    ``path_fn(i, w) -> 0/1`` gives the path at step ``i`` (``w``: the backward log weights): the
    old labels (scoring), or ``None`` to sample it with the uniforms ``u (S,)``.  Returns
    ``(path (S,) of 0/1 at the fragment's steps, log q of the path)``."""
    data = ctx.data
    hyper = ctx.hyper
    steps = data.in_range.shape[0]
    dtype = ctx.log_ratios.dtype
    seating = state.seating
    last = start + length - 1
    after = jnp.minimum(last + 1, steps - 1)
    prev = franchise.restaurant(state, data, start)
    log_p = lambda j, k: hcrp.log_prob(seating, j, k, hyper, ctx.weak_limit)
    log_init = jnp.stack([log_p(prev, pair[0]), log_p(prev, pair[1])])
    log_trans = jnp.stack([jnp.stack([log_p(pair[0], pair[0]), log_p(pair[0], pair[1])]),
                           jnp.stack([log_p(pair[1], pair[0]), log_p(pair[1], pair[1])])])
    nxt = state.labels[after]
    log_exit = jnp.where(data.has_next[last], jnp.stack([log_p(pair[0], nxt), log_p(pair[1], nxt)]), 0.0)

    def emission(i):
        pred, _ = statistics.log_predictive(state.est, row_of(data.x, i), row_of(data.pre, i))
        return jnp.where(data.observed[i], pred[pair], 0.0)

    def forward(n, carry):
        a, alphas = carry
        i = start + n
        a = emission(i) + jnp.where(n == 0, log_init, jax.nn.logsumexp(a[:, None] + log_trans, 0))
        return a, alphas.at[i].set(a)

    a, alphas = lax.fori_loop(0, length, forward, (jnp.zeros(2, dtype), jnp.zeros((steps, 2), dtype)))
    final = a + log_exit

    def backward(n, carry):
        path, x_next, log_q = carry
        i = last - n
        w = jnp.where(n == 0, final, alphas[i] + log_trans[:, x_next])
        x = path_fn(i, w)
        if x is None:
            x = draws.categorical(jnp.exp(w - jnp.max(w)), u[i])
        log_q = log_q + w[x] - jax.nn.logsumexp(w)
        return path.at[i].set(x), x, log_q

    path, _, log_q = lax.fori_loop(0, length, backward, (jnp.zeros(steps, jnp.int32), jnp.zeros((), jnp.int32),
                                                         jnp.zeros((), dtype)))
    return path, log_q


def settle(accepted, proposed: CollapsedState, previous: CollapsedState) -> CollapsedState:
    """The state after the decision: the proposal if ``accepted``, else the exact previous
    state (RCD paper Alg. 10, last line)."""
    return franchise.select(accepted, proposed, previous)


def _t2_customers(state, data, frag: Fragments, t2):
    """Whether ``t2``'s transitions in and out are its own (not a neighbouring fragment's)."""
    steps = data.in_range.shape[0]
    own_in = data.is_first[t2] | ~frag.member[jnp.maximum(t2 - 1, 0)]
    own_out = data.has_next[t2] & ~frag.member[jnp.minimum(t2 + 1, steps - 1)]
    return own_in, own_out


def log_label_choice(num_free, split, weak_limit: bool):
    """The log ratio of the new label's proposal probabilities in the acceptance ratio.

    Infinite model (``weak_limit`` False): 0, the target is a law on partitions (a new dish's
    probability ``gamma / (mbar.. + gamma)`` is that of an unlabelled dish, the slot is a name).
    Weak limit: the target is a law on labelled state sequences; a split names its new state by
    a uniform draw among the ``num_free`` free labels (``1 / num_free``) and the reverse merge is
    deterministic, so a split gains ``log num_free`` and a merge, whose reverse split must draw
    the merged label back out of the ``num_free`` labels free after the removal, ``-log
    num_free``."""
    if not weak_limit:
        return jnp.zeros((), jnp.result_type(float))
    log_free = jnp.log(jnp.maximum(num_free, 1).astype(jnp.result_type(float)))
    return jnp.where(split, log_free, -log_free)


def split_merge_move(rng_key, state: CollapsedState, ctx: Context, statistics):
    """One split-merge move (module docstring).  Returns ``(state, accepted, overflow)``."""
    data = ctx.data
    steps = data.in_range.shape[0]
    dtype = ctx.log_ratios.dtype
    k_pick, k_frag, k_rem, k_add, k_back, k_slot, k_thr = random.split(rng_key, 7)
    u_rem = random.uniform(k_rem, (steps, 2), dtype)
    u_add = 1.0 - random.uniform(k_add, (steps, 2), dtype)
    u_back = 1.0 - random.uniform(k_back, (steps,), dtype)
    log_thr = jnp.log(random.uniform(k_thr, (), dtype))
    bound = statistics.log_predictive_bound(data.x)
    zero = jnp.zeros((), dtype)

    # 1-2. two distinct steps, the fragments
    valid_idx = jnp.nonzero(data.in_range, size=steps, fill_value=0)[0]
    num_valid = jnp.sum(data.in_range)
    u_pick = random.uniform(k_pick, (2,), dtype)
    r1 = jnp.minimum((u_pick[0] * num_valid).astype(jnp.int32), num_valid - 1)
    r2 = jnp.minimum((u_pick[1] * (num_valid - 1)).astype(jnp.int32), num_valid - 2)
    r2 = jnp.where(r2 >= r1, r2 + 1, r2)
    t1, t2 = valid_idx[r1], valid_idx[r2]
    a, b = state.labels[t1], state.labels[t2]
    split = a == b
    frag = fragments(k_frag, state.labels, data, t1, t2)
    own_in, own_out = _t2_customers(state, data, frag, t2)
    previous = state
    old_labels = state.labels

    # 3. removal: fragments U..1 (merge: scored by the restricted FFBS after each removal)
    def remove_fragment(n, carry):
        s, r_old, q_old = carry
        rank = frag.count - 1 - n
        start, length = frag.start[rank], frag.length[rank]
        s, r = franchise.remove_run(s, ctx, statistics, start, length, u_rem)
        pair = jnp.stack([a, b])
        _, q = lax.cond(split, lambda s: (jnp.zeros(steps, jnp.int32), zero),
                        lambda s: restricted_ffbs(s, ctx, statistics, start, length, pair,
                                                  lambda i, w: (old_labels[i] == b).astype(jnp.int32), u_back), s)
        return s, r_old + r, q_old + q

    state, r_old, q_old = lax.fori_loop(0, frag.count, remove_fragment, (state, zero, zero))
    # t2: out, emission, in (the reverse of its addition)
    after_t2 = jnp.minimum(t2 + 1, steps - 1)
    prev_t2 = franchise.restaurant(state, data, t2)
    state, r = lax.cond(own_out, lambda s: franchise.remove_transition(s, ctx, b, s.labels[after_t2], u_rem[after_t2]),
                        lambda s: (s, zero), state)
    r_old = r_old + r
    state, r = franchise.remove_emission(state, ctx, statistics, t2, b)
    r_old = r_old + r
    state, r = lax.cond(own_in, lambda s: franchise.remove_transition(s, ctx, prev_t2, b, u_rem[t2]),
                        lambda s: (s, zero), state)
    r_old = r_old + r

    # 4. the proposal: t2's new label, then t2's customers
    active = state.occupancy > 0
    has_free = ~jnp.all(active)
    log_labels = log_label_choice(jnp.sum(~active), split, ctx.weak_limit).astype(dtype)
    fresh = draws.categorical((~active).astype(dtype), 1.0 - random.uniform(k_slot, (), dtype))
    c = jnp.where(split, fresh, a).astype(state.labels.dtype)
    state = state._replace(labels=state.labels.at[t2].set(c))
    state, r_new, of_in = lax.cond(own_in, lambda s: franchise.add_transition(s, ctx, prev_t2, c, u_add[t2, 0]),
                                   lambda s: (s, zero, jnp.zeros((), bool)), state)
    state, r = franchise.add_emission(state, ctx, statistics, t2, c, u_add[t2, 1])
    r_new = r_new + r
    state, r, of_out = lax.cond(own_out, lambda s: franchise.add_transition(s, ctx, c, s.labels[after_t2], u_add[after_t2, 0]),
                                lambda s: (s, zero, jnp.zeros((), bool)), state)
    r_new = r_new + r
    overflow = of_in | of_out

    # fragments 1..U: split by the restricted FFBS over {a, c}; merge into a, with early rejection
    early = bound <= 0.0

    def cond(carry):
        n, s, r_new, q_new, of, stopped = carry
        return (n < frag.count) & ~stopped

    def add_fragment(carry):
        n, s, r_new, q_new, of, stopped = carry
        start, length = frag.start[n], frag.length[n]
        pair = jnp.stack([a, c])

        def split_labels(s):
            path, q = restricted_ffbs(s, ctx, statistics, start, length, pair, lambda i, w: None, u_back)
            in_fragment = (jnp.arange(steps) >= start) & (jnp.arange(steps) < start + length)
            return s._replace(labels=jnp.where(in_fragment, pair[path], s.labels)), q

        s, q = lax.cond(split, split_labels, lambda s: (s, zero), s)
        s, r, of_f = franchise.add_run(s, ctx, statistics, start, length, u_add)
        r_new, q_new = r_new + r, q_new + q
        stopped = early & ~split & (r_new - r_old + q_old - q_new + log_labels <= log_thr)
        return n + 1, s, r_new, q_new, of | of_f, stopped

    def merge_labels(s):
        return s._replace(labels=jnp.where(frag.member, a, s.labels))

    state = lax.cond(split, lambda s: s, merge_labels, state)
    init = (jnp.zeros((), jnp.int32), state, r_new, zero, overflow, jnp.zeros((), bool))
    _, state, r_new, q_new, overflow, stopped = lax.while_loop(cond, add_fragment, init)

    # 5. accept or restore
    log_ratio = r_new - r_old + q_old - q_new + log_labels
    ok = (num_valid >= 2) & (has_free | ~split) & ~overflow & ~stopped & franchise.is_valid(state)
    accepted = ok & (log_thr < log_ratio)
    state = settle(accepted, state, previous)
    return state, accepted, (split & ~has_free) | overflow


def split_merge_sweep(rng_key, state: CollapsedState, ctx: Context, statistics, num_moves: int) -> SplitMergeResult:
    """``num_moves`` split-merge moves in turn (:func:`split_merge_move`)."""

    def body(n, carry):
        s, accepted, overflow = carry
        s, acc, of = split_merge_move(random.fold_in(rng_key, n), s, ctx, statistics)
        return s, accepted + acc.astype(jnp.int32), overflow | of

    state, accepted, overflow = lax.fori_loop(0, num_moves, body, (state, jnp.zeros((), jnp.int32), jnp.zeros((), bool)))
    return SplitMergeResult(state, accepted, overflow)


#: ``random.fold_in(key, SPLIT_MERGE_STREAM)``: the moves' key in a sweep whose other keys come
#: from ``random.split(key, n)`` (the sweep's other draws are the same with and without moves)
SPLIT_MERGE_STREAM = 0x5317


def check_split_merge(split_merge) -> int:
    """``split_merge`` validated: an integer ``>= 0`` (moves per sweep)."""
    if isinstance(split_merge, bool) or not isinstance(split_merge, int) or split_merge < 0:
        raise ValueError(f"`split_merge` must be an integer >= 0 (moves per sweep), got {split_merge!r}.")
    return split_merge


def collapsed_statistics(view, capacity: int, kernel: str):
    """The emission family's collapsed strategy for the moves (the parameters are integrated
    out in the moves), or a ``NotImplementedError`` naming the kernel."""
    try:
        return view.emission.collapsed_statistics(capacity)
    except NotImplementedError as err:
        raise NotImplementedError(f"{kernel}(split_merge=n) integrates the emission parameters out in its moves: "
                                  f"{err} Use split_merge=0.") from err


class ExplicitSplitMerge(NamedTuple):
    """Result of :func:`split_merge_given_beta`: ``states (N, T)``, ``beta (K+1,)``, the
    emission parameters ``params``, the number of ``accepted`` moves and ``overflow``."""

    states: jax.Array
    beta: jax.Array
    params: Any
    accepted: jax.Array
    overflow: jax.Array


def split_merge_given_beta(rng_key, states, beta, params, data, hyper, emission, statistics,
                           num_moves: int, weak_limit: bool = False) -> ExplicitSplitMerge:
    """``num_moves`` split-merge moves for a sampler that keeps ``beta`` explicit (the
    direct-assignment sampler; module docstring, steps 1-3): the tables given ``states (N, T)``
    and ``beta (K+1,)``, the moves on the collapsed state, ``beta`` given the tables, then the
    emission parameters given the moved state.  ``data``: the view's data (``x``, ``valid``,
    ``lengths``); ``hyper``: ``(gamma, alpha, kappa)``; ``emission`` the family and
    ``statistics`` its collapsed strategy.  ``weak_limit`` (static): the weak-limit model
    (``beta ~ Dir(gamma/L)`` over the ``L = K`` labels): the moves on its collapsed seating
    (:func:`~numpyro_hdphmm._core.hcrp.root_weights`, :func:`log_label_choice`) and ``beta |
    tables ~ Dir(gamma/L + mbar_.k)`` (:func:`~numpyro_hdphmm._core.crp.sample_beta`)."""
    dtype = jnp.result_type(beta.dtype, hyper[1], float)
    capacity = beta.shape[0] - 1
    k_collapse, k_moves, k_beta, k_params = random.split(rng_key, 4)
    ctx = franchise.context(data.x, data.valid, data.lengths, statistics, params, hyper, dtype, weak_limit)
    collapsed = franchise.collapse(k_collapse, states, beta, params, ctx, statistics, data.lengths)
    moved = split_merge_sweep(k_moves, collapsed, ctx, statistics, num_moves)
    collapsed = moved.state
    new_beta = crp.sample_beta(k_beta, collapsed.seating.root, ctx.hyper.gamma,
                               weak_limit=weak_limit).astype(beta.dtype)
    new_states = jnp.where(ctx.data.in_range, collapsed.labels, 0).reshape(states.shape).astype(states.dtype)
    weights = state_weights(collapsed.labels, ctx.data.observed, capacity, dtype)
    new_params, _ = statistics.draw_parameters(k_params, collapsed.est, emission, ctx.data.x, weights, params)
    return ExplicitSplitMerge(new_states, new_beta, new_params, moved.accepted, moved.overflow)


class ExplicitMoves(NamedTuple):
    """Result of :func:`split_merge_explicit`: the :class:`~numpyro_hdphmm.infer.contract.Explicit`
    state after the moves, ``accept`` (the fraction of the moves accepted; NaN without moves)
    and ``overflow``."""

    state: Explicit
    accept: jax.Array
    overflow: jax.Array


def split_merge_explicit(rng_key, state: Explicit, view, num_moves: int, kernel: str, *,
                         weak_limit: bool) -> ExplicitMoves:
    """The moves of a sampler whose state is all explicit (``BeamSampler``, ``WeakLimitGibbs``):
    :func:`split_merge_given_beta` (the tables given the states and ``beta``, ``num_moves``
    moves with the rows and the emission parameters integrated out, ``beta`` and the emission
    parameters given the moved states), then the rows ``pi_j ~ Dir(alpha beta + kappa e_j +
    n_j.)`` and the start row ``Dir(alpha beta + n_0.)`` given the moved states and the new
    ``beta`` (:func:`~numpyro_hdphmm._core.crp.sample_rows`).  Every draw after the moves is from
    its full conditional, so the block leaves the joint posterior of ``(z, beta, pi, theta)``
    invariant (module docstring).  ``rng_key``: the sweep's key (the moves use
    ``fold_in(rng_key, SPLIT_MERGE_STREAM)``); ``view`` the
    :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelView`; ``kernel`` names the kernel in the error
    of a family without collapsed statistics; ``weak_limit`` (static) selects the weak-limit
    model.  ``num_moves == 0``: the state unchanged, ``accept`` NaN."""
    accept = jnp.full((), jnp.nan, jnp.result_type(state.beta.dtype, float))
    if not num_moves:
        return ExplicitMoves(state, accept, jnp.zeros((), bool))
    capacity = state.beta.shape[0] - 1
    data = view.data
    _, alpha, kappa = view.hyper
    k_split, k_rows = random.split(random.fold_in(rng_key, SPLIT_MERGE_STREAM))
    statistics = collapsed_statistics(view, capacity, kernel)
    moves = split_merge_given_beta(k_split, state.states, state.beta, state.params, data, view.hyper, view.emission,
                                   statistics, num_moves, weak_limit)
    n, first = crp.transition_counts(moves.states, capacity, data.lengths)
    trans = crp.sample_rows(k_rows, moves.beta, alpha, kappa, n, first).astype(state.trans.dtype)
    state = state._replace(states=moves.states, beta=moves.beta, trans=trans, params=moves.params)
    return ExplicitMoves(state, moves.accepted.astype(accept.dtype) / num_moves, moves.overflow)
