r"""Particle Gibbs with ancestor sampling for the infinite (sticky) HDP-HMM: Tripuraneni, Gu, Ge &
Ghahramani (2015), "A linear-time particle Gibbs sampler for infinite hidden Markov models"
(``docs/errata.md``, "Particle Gibbs", lists the paper's typos, fixed here).

The sampler works on the model AS WRITTEN, ``beta ~ GEM(gamma)``, with the representation of
the beam sampler (:mod:`numpyro_hdphmm.infer.algorithms.beam`): ``K = max_states`` slots, the instantiated
states among them, and the remaining mass of ``beta`` and of every row, ``beta = (beta_1..beta_K,
beta_rem)``, ``pi_j = (pi_j1..pi_jK, pi_j,rem)`` (start row last).  One sweep:

1. **States, one sequence after the other, by conditional SMC with ancestor sampling** over the
   infinite state space (Lindsten, Jordan & Schön 2014; the paper's Sec. 3.1 with its typos fixed).
   ``N`` particles; particle ``N`` is the reference, the sequence's current path ``s'``.  At step
   ``t`` the states on offer are the instantiated ones and one lumped *new* state, the mass
   ``pi_{j,rem}`` of all the others:

   a. the ``N - 1`` other particles draw their ancestors ``a^i ~ Cat(W_{t-1})`` (multinomial);
   b. the reference draws its ancestor ``P(a^N = i) ∝ w^i_{t-1} pi(s'_t | s^i_{t-1})``: the
      transition into the REFERENCE state (printed with the particle's own state, a typo);
   c. every other particle proposes ``s^i_t ~ q(. | s^{a^i}_{t-1})``; a particle that takes the
      lumped state takes the next state of the stick: its uniform is inverted over the
      instantiated states in order, then over new states created one at a time by
      stick-breaking (``b ~ Beta(1, gamma)``, ``beta_new = b beta_rem``; every row splits its
      remainder with ``Beta(alpha beta_new, alpha beta_rem)``, **the new column's Beta uses the
      new state's weight** (printed ``beta_K``, a typo); the new row is ``Dir(alpha beta + kappa
      e_new)``), until it falls on a state.  Several particles in one step are handled exactly:
      each inverts its own uniform over the same sequence of new states, so two of them share a
      new state with the probability the model gives (the states are created lazily: drawing
      them before the sweep would give the same sweep);
   d. weights ``w^i_t = pi(s_t | s_{t-1}) f(y_t | s_t) / q(s_t | s_{t-1})``;

   at the end the returned path is particle ``k``'s ancestral line, ``P(k = i) ∝ w^i_T`` (the
   final-time weights; printed as the product over time, a typo).

   *Proposals.*  ``"prior"``: ``q = pi(. | s_{t-1})``, drawn from cumulative rows computed once
   per sweep (``O(log K)`` per particle and step, ``O(T N log K)`` per sweep, the paper's
   ``O(T N)``); new states get emission parameters from their prior ``H`` and ``w_t = f(y_t |
   theta_{s_t})``.  ``"posterior"`` (the paper's recommendation): ``q(k | j) ∝ pi_jk p_k(y_t)``,
   ``O(T N K)`` per sweep, with ``p_k(y_t) = f(y_t | theta_k)`` for the states whose parameters
   are explicit and, for the states created in the sweep and the lumped new state, the prior
   predictive ``m(y_t) = int f(y_t | theta) dH`` (closed form for conjugate families; for custom
   emissions and DP mixtures the estimate of
   :meth:`~numpyro_hdphmm.emissions.collapsed.CollapsedStatistics.log_new` from the free slots'
   values).  The created states' parameters stay explicit (prior draws in their slots), so the
   weight is ``w^i_t = sum_k pi_jk p_k(y_t) * f(y_t | theta_{s_t}) / p_{s_t}(y_t)``: fully
   adapted on the explicit states, an importance correction on the new ones.  (Integrating the
   new states' parameters out per particle instead, with each particle's own posterior
   predictive, was measured biased: Geweke z = -6.3 / +5.8 at 16 x 3000 sweeps, and 3.3
   standard errors too many states against exact enumeration at T = 7; the explicit version
   passes both, max |z| 1.5.)

   Sequences are updated in turn, each given the others (a Gibbs scan): a state created by one
   sequence keeps its slot's parameters and is instantiated for the next ones.
2. compaction: unused states are dropped, used ones relabelled by first appearance (custom
   emissions keep their slots), :func:`~numpyro_hdphmm.infer.algorithms.beam.drop_unused`;
3. emission parameters from their conditionals given the states;
4. tables, hyperparameters, ``beta`` and the rows: the shared global step
   :func:`numpyro_hdphmm._core.crp.sample_global` (Fox et al. Alg. 1 step 3, eqs. 31-37), with the
   kernel's ``hyperparameters`` option: ``"collapsed"`` (default) slice-samples ``(alpha, kappa) |
   z, beta`` with the rows and tables integrated out (:func:`~numpyro_hdphmm._core.crp.sample_alpha_kappa_collapsed`)
   and ``gamma | mbar`` with ``beta`` integrated out, ``"auxiliary"`` uses Fox et al.'s
   auxiliary-variable updates given the tables (eqs. 50-56).

Diagnostics (:class:`PGASInfo`): the particles' effective sample size per step (mean and minimum
over the sweep's steps, relative to ``N``), whether the returned path is the reference path,
the fraction of steps whose state changed, the states created and instantiated, ``overflow``.
The algorithm's state is :class:`~numpyro_hdphmm.infer.contract.Explicit`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.sizing import run_at_size, smallest_size, state_sizes
from numpyro_hdphmm._core.slices import break_stick
from numpyro_hdphmm._core.slots import first_free_slot, used_slots
from numpyro_hdphmm._core.smc import (
    ancestor_sample,
    effective_sample_size,
    multinomial_ancestors,
    search_rows,
    select_particle,
    trace_lineage,
)
from numpyro_hdphmm.infer.algorithms.beam import compacted_start, drop_unused
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.moves.global_step import explicit_given_states
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView

__all__ = ["PGAS", "ParticleGibbs", "PGASInfo", "StateGraph", "SMCResult", "conditional_smc", "PROPOSALS"]

#: the proposals of :class:`PGAS`
PROPOSALS = ("posterior", "prior")


class PGASInfo(NamedTuple):
    """Per-sweep diagnostics of :class:`PGAS`.

    ``overflow``: a particle took the new state while every slot was in use (it was then kept on
    an instantiated state: the sweep is truncated at ``max_states``); ``num_instantiated``:
    states instantiated at the end of the conditional SMC (the sweep's start plus those the
    particles created); ``states_created``: states of the returned paths that did not exist
    before the sweep; ``ess_mean``, ``ess_min``: the particles' effective sample size ``1 / sum_i
    W_i^2`` after each step's weighting, relative to ``N``, averaged and minimized over the
    sweep's valid steps; ``reference_kept``: the returned paths are the reference paths;
    ``update_rate``: the fraction of valid steps whose state changed; ``smc_size``: the slots the
    conditional SMC ran over (the posterior proposal: the smallest of
    :func:`~numpyro_hdphmm._core.sizing.state_sizes` that held the states in use with room for
    new ones, or the capacity when the sweep outgrew it and was redone; the prior proposal: the
    capacity)."""

    overflow: jax.Array
    num_instantiated: jax.Array
    states_created: jax.Array
    ess_mean: jax.Array
    ess_min: jax.Array
    reference_kept: jax.Array
    update_rate: jax.Array
    smc_size: jax.Array


class StateGraph(NamedTuple):
    """The instantiated part of ``(beta, pi)`` while the conditional SMC creates states.

    ``beta (K+1,)``, ``trans (K+1, K+1)`` (start row last, remainder column last),
    ``instantiated (K,)``, ``count``: states created so far in the sweep (the next one is drawn
    with the key ``fold_in(key, count)``), ``overflow``: a new state was needed with every slot
    in use."""

    beta: jax.Array
    trans: jax.Array
    instantiated: jax.Array
    count: jax.Array
    overflow: jax.Array


class SMCResult(NamedTuple):
    """Result of :func:`conditional_smc`: the new path ``states (T,)``, the :class:`StateGraph`
    after the states it created, and the relative effective sample size after each step ``ess
    (T,)`` (1 at padded steps)."""

    states: jax.Array
    graph: StateGraph
    ess: jax.Array


class _Tables(NamedTuple):
    """What a proposal reads from the rows, recomputed when a state is created: the log rows
    (``"posterior"``) or the cumulative rows over the instantiated states with explicit
    parameters ``cdf_a (K+1, K)`` and over the created ones and the remainder ``cdf_b (K+1, K+1)``
    (``"prior"``)."""

    log_trans: Any
    cdf_a: Any
    cdf_b: Any


def _tables(proposal, trans, explicit, instantiated):
    num_states = explicit.shape[0]
    if proposal == "posterior":
        return _Tables(jnp.log(trans), None, None)
    created = instantiated & ~explicit
    cdf_a = jnp.cumsum(jnp.where(explicit, trans[:, :num_states], 0.0), -1)
    cdf_b = jnp.cumsum(jnp.concatenate([jnp.where(created, trans[:, :num_states], 0.0), trans[:, num_states:]], -1), -1)
    return _Tables(None, cdf_a, cdf_b)


def _normalizer(log_w):
    """``log sum exp`` along the last axis, ``-inf`` for an all ``-inf`` row, and the shift to
    exponentiate by (0 there)."""
    log_z = jax.nn.logsumexp(log_w, -1)
    return log_z, jnp.where(jnp.isfinite(log_z), log_z, 0.0)


def _group_of(u1, log_a, log_b):
    """Whether a uniform ``u1`` on ``(0, 1]`` picks the first of two groups of log masses."""
    log_total = jnp.logaddexp(log_a, log_b)
    return jnp.where(jnp.isfinite(log_b), jnp.log(u1) + log_total < log_a, True)


def prior_predictive(emission, x, params, explicit, dtype):
    """``(T,)`` the log prior predictive ``log m(y_t)`` of each step for the posterior proposal: the
    closed form for conjugate families; for custom emissions and DP mixtures the estimate of
    :meth:`~numpyro_hdphmm.emissions.collapsed.CollapsedStatistics.log_new` from the slots not in
    ``explicit (K,)`` (their prior draws in ``params``)."""
    statistics = emission.collapsed_statistics(explicit.shape[0])
    pre = statistics.precompute(x, params, dtype)
    return jax.vmap(lambda p: jax.nn.logsumexp(statistics.log_new(p, explicit)))(pre).astype(dtype)


def conditional_smc(rng_key, reference, graph: StateGraph, explicit, params, emission, x, valid, length,
                    hyper: crp.Concentrations, reveal_key, *, num_particles: int, proposal: str, ids=None,
                    log_new=None) -> SMCResult:
    r"""One conditional SMC sweep with ancestor sampling over one sequence (step 1 of the module
    docstring).

    ``reference (T,)`` the current path (every state in ``explicit``); ``graph`` the instantiated
    part of ``(beta, pi)``; ``explicit (K,)`` the states whose emission parameters are explicit
    (``params``, leading axis ``K``; the other slots hold prior draws, used by the new states of
    families that keep them explicit; custom emissions: ``{}``, their values are the emission's
    own); ``x`` the prepared observations (leading axis ``T``), ``valid (T,)``, ``length``;
    ``hyper`` the concentrations; ``reveal_key``: the ``c``-th new state of the sweep is drawn
    with ``fold_in(reveal_key, c)``.  ``ids (K+1,)``: the global index of each slot and of the
    start row / remainder (default ``arange(K+1)``), which keys the new states' stick-breaking
    draws (:func:`~numpyro_hdphmm._core.slices.break_stick`), so that a view of the first slots of
    a larger capacity draws what the full arrays draw; ``log_new (T,)``: the posterior proposal's
    log prior predictive of each step, when the caller computed it (at the full capacity: custom
    emissions and DP mixtures estimate it from the free slots).  Pure and jittable, ``O(T N K)``
    (``"posterior"``) or ``O(T N log K)`` (``"prior"``), all particles in fixed-shape arrays.
    """
    num_states = explicit.shape[0]
    N = num_particles
    num_steps = reference.shape[0]
    dtype = graph.beta.dtype
    gamma, alpha, kappa = (jnp.asarray(v, dtype) for v in hyper)
    steps = jnp.arange(num_steps)
    in_range = steps < length
    emits = valid & in_range
    posterior = proposal == "posterior"
    is_reference = jnp.arange(N) == N - 1
    none = jnp.zeros((num_steps,), dtype)

    # per-step emission terms, computed once (vectorized over time)
    if posterior or not emission.owns_parameters:
        log_lik = jnp.where(emits[:, None], emission.log_likelihoods(x, params).astype(dtype), 0.0)
    else:
        log_lik = jnp.zeros((num_steps, 1), dtype)  # evaluated at the particles' states, step by step
    if posterior:
        if log_new is None:
            log_new = prior_predictive(emission, x, params, explicit, dtype)
        log_new = jnp.where(emits, log_new, 0.0).astype(dtype)
    else:
        log_new = none

    def reveal(g: StateGraph):
        slot = first_free_slot(g.instantiated)
        inst, beta, trans = break_stick(random.fold_in(reveal_key, g.count), slot, g.instantiated, g.beta, g.trans,
                                        gamma, alpha, kappa, ids=ids)
        return g._replace(beta=beta, trans=trans, instantiated=inst, count=g.count + 1)

    def step(carry, inp):
        graph, tables, prev, log_w = carry
        t, x_t, emit_t, in_t, ref_t, ll_t, new_t, key_t = inp
        k1, k2, k3, k4 = random.split(key_t, 4)
        u1 = draws.uniform_open(k1, (N,), dtype)
        u2 = draws.uniform_open(k2, (N,), dtype)
        u_res = draws.uniform_open(k3, (N - 1,), dtype)
        u_as = draws.uniform_open(k4, (), dtype)
        first = t == 0
        # a, b. resampling of the others, ancestor sampling of the reference
        if posterior:
            log_to_ref = tables.log_trans[prev, ref_t]
        else:
            log_to_ref = jnp.log(graph.trans[prev, ref_t])
        anc = jnp.concatenate([multinomial_ancestors(u_res, log_w), ancestor_sample(u_as, log_w, log_to_ref)[None]])
        anc = jnp.where(first, jnp.arange(N, dtype=jnp.int32), anc)
        rows = jnp.where(first, num_states, prev[anc])
        active = in_t & ~is_reference  # particles whose proposal is used

        # c. propagation
        if posterior:
            # proposal scores p_k(y_t) (K,): the likelihood at the explicit states, the prior
            # predictive at the others; the model's log-likelihoods ll_t at every state
            score = jnp.where(explicit, ll_t, new_t)

            def log_masses(log_rows, inst):
                lw = jnp.where(inst, log_rows[:, :num_states] + score, -jnp.inf)
                lw_a = jnp.where(explicit, lw, -jnp.inf)
                lw_b = jnp.concatenate([jnp.where(inst & ~explicit, lw, -jnp.inf), log_rows[:, num_states:] + new_t], -1)
                return lw_a, lw_b

            def draw_b(lw_b):
                log_zb, shift = _normalizer(lw_b)
                return jax.vmap(draws.categorical)(jnp.exp(lw_b - shift[:, None]), u2)

            lw_a, lw_b = log_masses(tables.log_trans[rows], graph.instantiated)
            log_za, shift_a = _normalizer(lw_a)
            log_zb, _ = _normalizer(lw_b)
            log_z = jnp.logaddexp(log_za, log_zb)
            in_a = _group_of(u1, log_za, log_zb)
            choice_a = jax.vmap(draws.categorical)(jnp.exp(lw_a - shift_a[:, None]), u2)
            choice = jnp.where(in_a, choice_a, draw_b(lw_b))

            def redraw(g, tab):
                return draw_b(log_masses(tab.log_trans[rows], g.instantiated)[1])
        else:
            mass_a = tables.cdf_a[rows, num_states - 1]
            mass_b = tables.cdf_b[rows, num_states]
            in_a = u1 * (mass_a + mass_b) < mass_a
            choice_a = jnp.minimum(search_rows(tables.cdf_a, rows, u2 * mass_a), num_states - 1)
            choice = jnp.where(in_a, choice_a, search_rows(tables.cdf_b, rows, u2 * mass_b))

            def redraw(g, tab):
                return search_rows(tab.cdf_b, rows, u2 * tab.cdf_b[rows, num_states])

        # the lumped new state: create states one at a time until every particle that took it
        # falls on one (its uniform inverted over the same sequence of new states)
        def needs(c):
            return jnp.any(c[3]) & jnp.any(~c[0].instantiated)

        def create(c):
            g, tab, ch, land = c
            g = reveal(g)
            tab = _tables(proposal, g.trans, explicit, g.instantiated)
            again = redraw(g, tab)
            ch = jnp.where(land, again, ch)
            return g, tab, ch, land & (again >= num_states)

        landers = active & ~in_a & (choice >= num_states)
        graph, tables, choice, landers = lax.while_loop(needs, create, (graph, tables, choice, landers))
        # no slot left: the sweep is truncated at the capacity (flagged)
        graph = graph._replace(overflow=graph.overflow | jnp.any(landers))
        choice = jnp.where(landers, choice_a, choice)
        new = jnp.where(is_reference, ref_t, choice).astype(jnp.int32)

        # d. weights
        if posterior:
            log_inc = log_z + ll_t[new] - score[new]
        elif emission.owns_parameters:
            picked = jax.tree_util.tree_map(lambda p: p[new], params)
            row = jax.tree_util.tree_map(lambda a: a[None], x_t)
            log_inc = jnp.where(emit_t, emission.log_likelihoods(row, picked)[0].astype(dtype), 0.0)
        else:
            log_inc = ll_t[new]
        states = jnp.where(in_t, new, prev)
        log_w = jnp.where(in_t, log_inc, log_w)
        anc = jnp.where(in_t, anc, jnp.arange(N, dtype=jnp.int32))
        ess = jnp.where(in_t, effective_sample_size(log_w) / N, 1.0)
        return (graph, tables, states, log_w), (states, anc, ess)

    k_steps, k_final = random.split(rng_key)
    keys = random.split(k_steps, num_steps)
    tables0 = _tables(proposal, graph.trans, explicit, graph.instantiated)
    init = (graph, tables0, jnp.zeros((N,), jnp.int32), jnp.zeros((N,), dtype))
    (graph, _, _, log_w), (states, ancestors, ess) = lax.scan(
        step, init, (steps, x, emits, in_range, reference, log_lik, log_new, keys))
    index = select_particle(draws.uniform_open(k_final, (), dtype), log_w)
    return SMCResult(trace_lineage(states, ancestors, index), graph, ess)


class ParticleGibbs(Algorithm):
    """Particle Gibbs with ancestor sampling (Tripuraneni et al. 2015) on the contract of
    :mod:`numpyro_hdphmm.infer.plumbing.adapter` (module docstring): ``num_particles`` particles, proposal
    ``"prior"`` (default, as :class:`PGAS`) or ``"posterior"``."""

    name = "PGAS"
    owns_column_precision = True
    Info = PGASInfo
    describe = {
        "beta": "stick-breaking as particles create states, then Dirichlet over (instantiated, rest) given the informative tables (Teh et al. eq. 37)",
        "trans": "stick-breaking as particles create states, then Dirichlet rows given the counts (Fox et al. eq. 37)",
        "states": "conditional SMC with ancestor sampling over the infinite state space (Tripuraneni et al. 2015)",
        "params": "conjugate posterior given the states; a state created in the sweep keeps explicit parameters drawn from the prior in its slot",
    }

    def __init__(self, num_particles: int = 10, proposal: str = "prior"):
        self.num_particles = num_particles
        self.proposal = proposal

    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> Explicit:
        """The beam sampler's starting point (:func:`numpyro_hdphmm.infer.algorithms.beam.compacted_start`):
        the compacted initial states, ``beta`` and rows at conditional means, emission parameters
        drawn from their conditionals."""
        return compacted_start(rng_key, spec, view, start)

    def step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """One sweep (steps 1-4 of the module docstring): ``(Explicit, PGASInfo)``."""
        capacity = spec.capacity
        data, emission = view.data, view.emission
        dtype = state.beta.dtype
        hyper = crp.Concentrations(*(jnp.asarray(v, dtype) for v in view.hyper))
        k_prior, k_reveal, k_seq, k_theta, k_global = random.split(rng_key, 5)
        explicit0 = used_slots(state.states, data.lengths, capacity) | (state.beta[:capacity] > 0)
        # the slots without a state hold prior draws: the parameters of states created in the sweep
        prior = emission.sample_parameters(k_prior, (capacity,))
        params = {p: jnp.where(explicit0.reshape((-1,) + (1,) * (v.ndim - 1)), v, prior[p].astype(v.dtype))
                  for p, v in state.params.items()}
        graph = StateGraph(state.beta, state.trans, explicit0, jnp.zeros((), jnp.int32), jnp.zeros((), bool))

        # 1. the sequences in turn (the posterior proposal at the smallest of a few sizes that
        # holds the states in use, plus room for the new ones: O(T N k), not O(T N capacity))
        def sweep_at(size, args):  # everything traced comes in `args` (custom_vmap closes over nothing)
            graph, explicit, params, references, x, valid, lengths, hyper, k_seq, k_reveal, emission = args
            ids = jnp.concatenate([jnp.arange(size), jnp.array([capacity])])
            view_graph = StateGraph(graph.beta[ids], graph.trans[ids][:, ids], graph.instantiated[:size], graph.count,
                                    graph.overflow)

            def one_sequence(carry, inp):
                view_graph, explicit = carry
                n, reference, x_n, valid_n, length_n = inp
                log_new = None
                if self.proposal == "posterior":  # at the full capacity (the free slots' estimate)
                    log_new = prior_predictive(emission, x_n, params, explicit, dtype)
                out = conditional_smc(random.fold_in(k_seq, n), reference, view_graph, explicit[:size],
                                      jax.tree_util.tree_map(lambda p: p[:size], params), emission, x_n, valid_n,
                                      length_n, hyper, k_reveal, num_particles=self.num_particles,
                                      proposal=self.proposal, ids=ids, log_new=log_new)
                used = used_slots(out.states[None], length_n[None], size)
                valid_steps = jnp.arange(reference.shape[0]) < length_n
                changed = jnp.sum((out.states != reference) & valid_steps)
                ess_sum = jnp.sum(jnp.where(valid_steps, out.ess, 0.0))
                ess_min = jnp.min(jnp.where(valid_steps, out.ess, 1.0))
                return (out.graph, explicit.at[:size].set(explicit[:size] | used)), (out.states, changed, ess_sum, ess_min)

            (view_graph, explicit), per_seq = lax.scan(
                one_sequence, (view_graph, explicit),
                (jnp.arange(references.shape[0]), references, x, valid, lengths))
            graph = StateGraph(graph.beta.at[ids].set(view_graph.beta),
                               graph.trans.at[ids[:, None], ids[None, :]].set(view_graph.trans),
                               graph.instantiated.at[:size].set(view_graph.instantiated), view_graph.count,
                               view_graph.overflow)
            # the run holds the full-capacity run while a slot below `size` stayed free
            fits = jnp.any(~(graph.instantiated | explicit)[:size]) if size < capacity else jnp.ones((), bool)
            return (graph, explicit) + tuple(per_seq) + (jnp.asarray(size, jnp.int32),), fits

        sizes = state_sizes(capacity) if self.proposal == "posterior" else (capacity,)
        in_use = jnp.max(jnp.where(graph.instantiated | explicit0, jnp.arange(1, capacity + 1), 0))
        bucket = smallest_size(sizes, in_use + jnp.maximum(4, in_use // 4))  # room for the sweep's new states
        (graph, explicit, states, changed, ess_sum, ess_min, smc_size), _ = run_at_size(
            sizes, sweep_at, bucket, (graph, explicit0, params, state.states, data.x, data.valid, data.lengths, hyper, k_seq,
                                      k_reveal, emission), fits=lambda out: out[1])
        num_valid = jnp.maximum(jnp.sum(data.lengths), 1)
        info = PGASInfo(
            overflow=graph.overflow,
            num_instantiated=jnp.sum(graph.instantiated).astype(jnp.int32),
            states_created=jnp.sum(explicit & ~explicit0).astype(jnp.int32),
            ess_mean=(jnp.sum(ess_sum) / num_valid).astype(dtype),
            ess_min=jnp.min(ess_min).astype(dtype),
            reference_kept=jnp.all(changed == 0),
            update_rate=(jnp.sum(changed) / num_valid).astype(dtype),
            smc_size=smc_size,
        )
        # 2. compaction: unused states' mass joins the remainder
        states, head, params, _ = drop_unused(states, graph.beta[:capacity], params, emission, data.lengths)
        beta = jnp.concatenate([head, jnp.maximum(1.0 - jnp.sum(head), 0.0)[None]])
        # 3-4. emission parameters (free slots: no data, a draw from the prior); tables, hyperparameters, beta, rows
        explicit = explicit_given_states(k_theta, k_global, spec, view, states, beta, params, weak_limit=False)
        return explicit, info


class PGAS(HDPKernel):
    r"""Particle Gibbs with ancestor sampling for the infinite (sticky) HDP-HMM (Tripuraneni, Gu,
    Ge & Ghahramani 2015), with the paper's typos fixed (see the module docstring).

    Samples the model as written (``{name}_beta ~ GEM(gamma)``): ``max_states`` is a capacity;
    each sweep draws every sequence's states by conditional SMC over the instantiated states and
    a lumped new state, creating states by stick-breaking when particles take it, then the
    emission parameters, tables, hyperparameters, ``beta`` and rows given the states (the step
    every explicit-``beta`` kernel shares).  Every emission family, custom emissions (their
    parameters stay explicit: the user's sites, updated by the inner kernel, as in
    :class:`~numpyro_hdphmm.infer.BeamSampler`), several sequences (``obs (N, T, ...)`` with
    ``lengths``) and missing observations (NaN) are supported.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param num_particles: particles ``N >= 2`` of the conditional SMC (the reference included);
        the paper finds 10 sufficient with the posterior proposal.
    :param proposal: ``"prior"`` (the transition rows, ``O(T N log K)``; new states' parameters
        from the prior) or ``"posterior"`` (the transition rows times the likelihoods, fully
        adapted on the instantiated states, ``O(T N K)``; fewer particles wasted on states the
        observation rules out, at K times the cost per particle).
    :param hyperparameters: how the concentrations with an exact update are drawn in the global
        step (:func:`numpyro_hdphmm._core.crp.sample_global`): ``"collapsed"`` (default) slice-samples
        ``(log(alpha + kappa), logit(kappa / (alpha + kappa)))`` from ``p(alpha, kappa | z, beta)``
        with the rows integrated out (a product of Dirichlet-multinomials, Fox et al. eq. 76), then
        the tables given the new values and ``log gamma`` from ``p(gamma | mbar)`` with ``beta``
        integrated out (Teh et al. 2006 eq. 20); ``"auxiliary"`` draws the tables and then Fox et
        al.'s auxiliary-variable updates given them (App. III, eqs. 50-56).  Both leave the
        posterior invariant (Geweke test, ``tests/infer/test_pgas.py``); the collapsed updates mix
        the concentrations faster per sweep (``docs/benchmarks.md``, "PGAS and RCDSampler hyperparameter mixing").
    :param mesh: must be ``None``: PGAS runs unsharded (its sequences are visited in turn, sharing
        the states they create; ``docs/scaling.md``); a mesh raises ``NotImplementedError``.

    Collected diagnostics: :class:`PGASInfo` (e.g. ``extra_fields=("ess_mean", "reference_kept")``).
    """

    algorithm = ParticleGibbs()

    def __init__(self, model, num_particles: int = 10, proposal: str = "prior", *, mesh=None, **options):
        if mesh is not None:
            raise NotImplementedError(
                "PGAS(mesh=...) is not supported: its sweep is not data-parallel over sequences (the sequences "
                "are visited in turn and the states a sequence creates are shared with the next), so it runs "
                "unsharded; shard chains instead (chain_method='parallel'), or use WeakLimitGibbs or "
                "BeamSampler with mesh=, whose state updates are per sequence (docs/scaling.md)."
            )
        if isinstance(num_particles, bool) or not isinstance(num_particles, int) or num_particles < 2:
            raise ValueError(f"`num_particles` must be an integer >= 2 (the reference and at least one other), "
                             f"got {num_particles!r}.")
        if proposal not in PROPOSALS:
            raise ValueError(f"`proposal` must be one of {PROPOSALS}, got {proposal!r}.")
        super().__init__(model, ParticleGibbs(num_particles, proposal), **options)
