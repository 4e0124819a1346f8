r"""The sweep of the weak-limit HDP-HSMM: Johnson & Willsky (2013), Sec. 4.2, with every update exact.

Given the explicit values (``beta``, the rows ``pi``, the emission parameters ``theta``, the
duration parameters ``vartheta``), one sweep (:func:`semi_markov_sweep`) draws

1. the segmentations ``z | pi, theta, vartheta, y``: HSMM backward messages and forward sampling
   (:func:`numpyro_hdphmm._core.hsmm.hsmm_sample_fast`: the messages in rescaled probability
   space; a sequence whose messages underflow keeps its states), every sequence with its own
   key; for the untruncated model (``max_duration=None``) with a phase-type
   duration family (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.phase_embedding`:
   negative binomial with the finite prior on ``r``, geometric), the same law through the chain
   of phases (:func:`numpyro_hdphmm._core.phases.phase_sample`, ``O(T K (R + K))`` instead of
   ``O(T K (T + K))``; a left-censored first segment enters its phases by the residual-life entry
   law, :func:`numpyro_hdphmm._core.phases.residual_entry`);
2. ``theta | z, y`` from the emission family's conjugate posterior (as for the HMM);
3. ``vartheta | z`` (:func:`sample_duration_parameters`): each censored duration completed from its
   conditional (the last segment's true duration ``d' >= d``; a left-censored first segment's
   length-biased full duration), then an independence Metropolis-Hastings step whose proposal is
   the family's conjugate posterior of the untruncated law given the complete durations
   (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.sample_posterior`) and whose ratio restores
   the truncation to ``{1..D}``: ``prod_k (F_k(vartheta) / F_k(vartheta'))^{n_k}`` with ``F_k`` the
   mass of ``{1..D}`` (times ``(E_k(vartheta) / E_k(vartheta'))`` for a left-censored first
   segment, the length-bias normalizer).  Untruncated model
   (:func:`sample_untruncated_duration_parameters`): the proposal is the conjugate posterior given
   the complete segments alone and the ratio is that of the censored segments' terms,
   ``prod (S_k(c; vartheta') / S_k(c; vartheta))`` over the right-censored last segments of state ``k``
   and the residual-life terms ``S_k(c) / E_k`` (or the residual survival, when the segment is also the
   right-censored last one) of the left-censored first segments;
4. the HDP layer given the segment transition counts ``n_jk`` (``j != k``: the self-transitions are
   removed) with auxiliary variables (:func:`sample_hdp_layer`):

   * tables ``m_jk ~`` CRP tables of ``n_jk`` customers at concentration ``alpha beta_k`` with the
     rows integrated out (the rows' off-diagonal part is ``Dir(alpha beta_{-j})`` by aggregation);
   * the normalizer ``Gamma(alpha (1 - beta_j)) / Gamma(alpha (1 - beta_j) + n_j.)`` of each row
     (which depends on ``beta_j``, unlike the HMM's) as ``r_j^{alpha (1 - beta_j)}`` with
     ``r_j ~ Beta(alpha (1 - beta_j), n_j.)``, and ``r_j^{-alpha beta_j} = exp(alpha beta_j (-log
     r_j))`` expanded as a Poisson series with ``s_j ~ Poisson(alpha beta_j (-log r_j))``: then
     ``beta | m, s ~ Dir(gamma/L + m_.k + s_k)`` (a Dirichlet again, the role Johnson & Willsky's
     auxiliary self-transition counts play, without their unbounded number of customers);
   * ``alpha | m, r, beta ~ Gamma(a + m_.., b - sum_j (1 - beta_j) log r_j - log r_0)`` (the start
     row's ``Gamma(alpha) / Gamma(alpha + N)`` as ``r_0^alpha``, ``r_0 ~ Beta(alpha, N)``), with
     ``s`` integrated out; ``gamma | m, s`` with ``beta`` integrated out
     (:func:`~numpyro_hdphmm._core.crp.resample_gamma_weak_limit` on the dish counts ``m_.k + s_k``);
   * the rows: the off-diagonal part ``Dir(alpha beta_{-j} + n_{j,-j})`` scaled by ``1 - pi_jj``,
     ``pi_jj ~ Beta(alpha beta_j, alpha (1 - beta_j))`` (the data say nothing about it), the start
     row ``Dir(alpha beta + n_0.)`` (:func:`sample_semi_markov_rows`).

Every draw is from its full conditional in the augmented joint (the ``alpha`` step from the
conditional with ``s`` integrated out, ``s`` drawn right after), so the sweep leaves the posterior
of ``(z, beta, pi, theta, vartheta, gamma, alpha)`` invariant.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from jax.scipy.special import logsumexp

from numpyro_hdphmm._core import crp, hsmm, phases
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.slots import used_slots
from numpyro_hdphmm.distributions import safe_log
from numpyro_hdphmm.emissions.base import OneHot
from numpyro_hdphmm.infer.contract import Explicit, flatten_time
from numpyro_hdphmm.infer.moves.emission_base import update_emission_parameters
from numpyro_hdphmm.infer.moves.global_step import hyper_site_values
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences, sequence_keys

__all__ = ["SemiMarkovInfo", "semi_markov_sweep", "sample_duration_parameters",
           "sample_untruncated_duration_parameters", "sample_hdp_layer", "sample_semi_markov_rows",
           "duration_parameters", "semi_markov_tables", "uses_phases"]


class SemiMarkovInfo(NamedTuple):
    """Per-sweep diagnostics of the HSMM sweep: ``overflow`` (every slot occupied), ``ffbs_ok`` (False when a sequence's
    marginal likelihood was not finite and the states were kept), ``duration_accept`` (the
    fraction of states whose duration-parameter proposal was accepted; NaN for a family whose
    parameters the inner kernel updates) and ``at_max_duration`` (True when a segment lasts
    ``max_duration`` steps: the truncation may bind, increase ``max_duration``)."""

    overflow: jax.Array
    ffbs_ok: jax.Array
    duration_accept: jax.Array
    at_max_duration: jax.Array


def duration_parameters(spec: ModelSpec, view: ModelView, extra):
    """The duration family's parameters ``{p: (K, ...)}``: the algorithm's own (``extra``) for a
    family whose parameters the model class declares, the current values otherwise."""
    chain = view.states_law
    if not spec.sites.extra:
        return chain.duration_params
    return {**chain.duration_params, **{key.partition("_")[2]: extra[key] for key in extra}}


def semi_markov_tables(view: ModelView, trans, duration_params):
    """``(log_init (K,), log_trans (K, K), log_dur (K, D), log_surv (K, D), first)`` of
    :mod:`numpyro_hdphmm._core.hsmm` at the rows ``trans (K+1, K+1)`` and the duration parameters."""
    chain = view.states_law
    k = trans.shape[0] - 1
    law = type(chain)(trans[k], trans[:k], chain.duration, duration_params, chain.max_duration, chain.num_steps,
                      right_censored=chain.right_censored, left_censored=chain.left_censored)
    log_init, log_trans, (log_dur, log_surv), first = law.tables()
    return log_init, log_trans, log_dur, log_surv, first


def uses_phases(chain) -> bool:
    """Whether step 1 runs through the chain of phases: an untruncated segment process whose
    duration family is phase-type (module docstring)."""
    if not getattr(chain, "untruncated", False):
        return False
    return chain.duration.phase_embedding(chain.duration_params) is not None


def _phase_rows(emission, right_censored):
    """Step 1 through the chain of phases, per block of sequences (:func:`_ffbs_rows`)."""

    def ffbs(rows, shared):
        keys, x, valid, lengths = rows
        (log_init, log_trans, tables, entry_first), params = shared
        log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(x, params)
        one = lambda key, ll, m, n: phases.phase_sample(key, log_init, log_trans, tables, ll, m, n,
                                                        right_censored=right_censored, log_entry_first=entry_first)
        states, marginal, ok = jax.vmap(one)(keys, log_lik, valid, lengths)
        return states, jnp.isfinite(marginal) & ok

    return ffbs


def _ffbs_rows(emission, right_censored):
    """Step 1 per block of sequences for :func:`~numpyro_hdphmm.infer.plumbing.sharding.map_sequences`."""

    def ffbs(rows, shared):
        keys, x, valid, lengths = rows
        (log_init, log_trans, log_dur, log_surv, first), params = shared
        log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(x, params)
        one = lambda key, ll, m, n: hsmm.hsmm_sample_fast(key, log_init, log_trans, log_dur, log_surv, ll, m, n,
                                                          right_censored=right_censored, first=first)
        states, marginal, ok = jax.vmap(one)(keys, log_lik, valid, lengths)
        return states, jnp.isfinite(marginal) & ok

    return ffbs


def _complete_durations(rng_key, states, lengths, log_dur, log_surv, right_censored, left_censored):
    """Every segment's complete duration: ``(durations, seg_states, weights, left)`` flattened over
    ``(N, T)`` (a segment at the step where it ends), censored ones completed from their
    conditional on ``{1..D}``, and ``left (K,)`` the number of left-censored first segments per
    state (their length-bias normalizer enters the acceptance ratio).  Only a sequence's first and
    last segments can be censored, so the draws are ``(N, D)``, not one per step."""
    num_d = log_dur.shape[-1]
    t_max = states.shape[-1]
    ends, observed = jax.vmap(hsmm.segments)(states, lengths)
    rows = jnp.arange(states.shape[0])
    has = lengths > 0
    final = jnp.clip(lengths - 1, 0, t_max - 1)
    first_end = jnp.argmax(ends, axis=-1)  # where the first segment ends (0 for an empty sequence)
    k_right, k_left = random.split(rng_key)
    grid = jnp.arange(1, num_d + 1)
    at_least = lambda d: grid[None, :] >= d[:, None]
    durations = observed
    if right_censored:
        # the last segment: d' >= d with probability ∝ p(d'); a left-censored first segment that is
        # also the last is completed below
        last_state, last_obs = states[rows, final], observed[rows, final]
        completed = random.categorical(k_right, jnp.where(at_least(last_obs), log_dur[last_state], -jnp.inf)) + 1
        right = has & ~(left_censored & (first_end == final))
        durations = durations.at[rows, final].set(jnp.where(right, completed, last_obs))
    left = jnp.zeros(log_dur.shape[0], log_dur.dtype)
    if left_censored:
        # a left-censored first segment of observed length d: its residual r = d (or, when it is also
        # the last segment and right-censored, r >= d with probability ∝ P(D >= r)), then the full
        # length-biased duration L >= r with probability ∝ p(L)
        k_r, k_l = random.split(k_left)
        first_state, first_obs = states[rows, first_end], observed[rows, first_end]
        both = right_censored & (first_end == final)
        residual = random.categorical(k_r, jnp.where(at_least(first_obs), log_surv[first_state], -jnp.inf)) + 1
        residual = jnp.where(both, residual, first_obs)
        full = random.categorical(k_l, jnp.where(at_least(residual), log_dur[first_state], -jnp.inf)) + 1
        durations = durations.at[rows, first_end].set(jnp.where(has, full, durations[rows, first_end]))
        left = jax.ops.segment_sum(has.astype(log_dur.dtype), first_state, num_segments=log_dur.shape[0])
    weights = ends.astype(log_dur.dtype)
    return durations.reshape(-1), states.reshape(-1), weights.reshape(-1), left


def _log_truncation(family, params, num_d, with_mean: bool):
    """``(log F (K,), log E (K,))``: the mass of ``{1..D}`` under the untruncated law and (when
    ``with_mean``, else zeros) the truncated law's mean ``sum_d P(D >= d)``."""
    log_pmf = family.log_pmf(params, jnp.arange(1, num_d + 1)).T  # (K, D)
    log_mass = logsumexp(log_pmf, -1)
    if not with_mean:
        return log_mass, jnp.zeros_like(log_mass)
    _, log_surv = hsmm.duration_tables(log_pmf)
    return log_mass, logsumexp(log_surv, -1)


def sample_duration_parameters(rng_key, family, params, states, lengths, log_dur, log_surv, *, right_censored: bool,
                               left_censored: bool):
    """Step 3 (module docstring): ``(params, acceptance rate)``.  ``states (N, T)``, ``lengths (N,)``;
    ``log_dur``/``log_surv (K, D)`` the truncated tables at the current ``params``."""
    k_complete, k_prop, k_acc = random.split(rng_key, 3)
    num_states, num_d = log_dur.shape
    durations, seg_states, weights, left = _complete_durations(k_complete, states, lengths, log_dur, log_surv,
                                                               right_censored, left_censored)
    proposal = family.sample_posterior(k_prop, params, durations, seg_states, weights, num_states)
    counts = jax.ops.segment_sum(weights, seg_states, num_segments=num_states)
    mass_old, mean_old = _log_truncation(family, params, num_d, left_censored)
    mass_new, mean_new = _log_truncation(family, proposal, num_d, left_censored)
    log_ratio = counts * (mass_old - mass_new) + left * (mean_old - mean_new)
    accept = jnp.log(draws.uniform_open(k_acc, (num_states,), log_dur.dtype)) < log_ratio
    pick = lambda new, old: jnp.where(accept.reshape((num_states,) + (1,) * (jnp.ndim(new) - 1)), new, old)
    new = {p: pick(proposal[p], params[p]).astype(jnp.asarray(params[p]).dtype) for p in params}
    return new, jnp.mean(accept.astype(log_dur.dtype))


def sample_untruncated_duration_parameters(rng_key, family, params, states, lengths, *, right_censored: bool,
                                           left_censored: bool = False):
    """Step 3 of the untruncated model (module docstring): ``(params, acceptance rate)``.  ``states (N, T)``,
    ``lengths (N,)``; per state an independence Metropolis-Hastings step whose proposal is the
    family's posterior given the complete segments and whose ratio is that of the censored segments'
    terms: the survival (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.log_survival`) of the
    right-censored last segments and, with ``left_censored``, the residual-life law (or its survival,
    for a segment censored on both sides) of the first ones
    (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.log_residual_tables`); exactly 1, always
    accepted, for a state without a censored segment."""
    k_prop, k_acc = random.split(rng_key)
    num_states = jax.tree_util.tree_leaves(params)[0].shape[0]
    t_max = states.shape[-1]
    rows = jnp.arange(states.shape[0])
    ends, observed = jax.vmap(hsmm.segments)(states, lengths)
    has = lengths > 0
    final = jnp.clip(lengths - 1, 0, t_max - 1)
    first_end = jnp.argmax(ends, axis=-1)
    both = left_censored & (first_end == final)  # the only segment: left-censored, and right-censored if that is on
    t = jnp.arange(t_max)[None, :]
    censored = ends & (right_censored & (t == final[:, None]))
    if left_censored:
        censored = censored | (ends & (t == first_end[:, None]))
    dtype = jnp.result_type(*[jnp.asarray(v) for v in params.values()], float)
    complete = (ends & ~censored).astype(dtype)
    proposal = family.sample_posterior(k_prop, params, observed.reshape(-1), states.reshape(-1), complete.reshape(-1),
                                       num_states)
    last_state, last_duration = states[rows, final], observed[rows, final]
    right = (has & right_censored & ~both).astype(dtype)
    first_state, first_duration = states[rows, first_end], observed[rows, first_end]

    def censored_terms(p):
        table = family.log_survival(p, last_duration) - family.log_mass_from_one(p)  # (N, K)
        terms = table[rows, last_state] * right
        total = jax.ops.segment_sum(terms, last_state, num_segments=num_states)
        if left_censored:
            log_res, log_res_surv = family.log_residual_tables(p, t_max)  # (T, K)
            d0 = jnp.clip(first_duration - 1, 0, t_max - 1)
            residual = jnp.where(both & right_censored, log_res_surv[d0, first_state], log_res[d0, first_state])
            total = total + jax.ops.segment_sum(jnp.where(has, residual, 0.0), first_state, num_segments=num_states)
        return total

    log_ratio = censored_terms(proposal) - censored_terms(params)
    accept = jnp.log(draws.uniform_open(k_acc, (num_states,), dtype)) < log_ratio
    pick = lambda new, old: jnp.where(accept.reshape((num_states,) + (1,) * (jnp.ndim(new) - 1)), new, old)
    new = {p: pick(proposal[p], params[p]).astype(jnp.asarray(params[p]).dtype) for p in params}
    return new, jnp.mean(accept.astype(dtype))


def sample_semi_markov_rows(rng_key, beta, alpha, n, first):
    """The rows given the segment counts (module docstring, step 4): ``(K+1, K+1)``, start row
    last, nothing in the last column under the weak limit.  ``n (K, K)`` off-diagonal counts."""
    k = n.shape[0]
    dtype = beta.dtype
    k_off, k_self, k_start = random.split(rng_key, 3)
    eye = jnp.eye(k, k + 1, dtype=bool)
    conc = alpha * beta[None, :] + jnp.pad(n.astype(dtype), ((0, 0), (0, 1)))
    off = draws.dirichlet(k_off, jnp.where(eye, 0.0, conc))  # (K, K+1), zero on the diagonal
    head = beta[:k]
    # Beta(alpha beta_j, alpha (1 - beta_j)) as a two-atom Dirichlet: a weight beta_j that underflowed
    # to 0 gives stay = 0 (its limit), where the Beta sampler would give NaN
    stay = draws.dirichlet(k_self, jnp.stack([alpha * head, alpha * (1.0 - head)], -1))[:, 0]
    rows = off * (1.0 - stay)[:, None] + jnp.where(eye, stay[:, None], 0.0)
    start = draws.dirichlet(k_start, alpha * beta + jnp.pad(first.astype(dtype), (0, 1)))
    return jnp.concatenate([rows, start[None]], 0)


def sample_hdp_layer(rng_key, states, lengths, beta, hyper: crp.Concentrations, priors: crp.HyperPriors):
    """Step 4 (module docstring): ``(beta, trans, Concentrations, overflow)``."""
    k_tables, k_r, k_r0, k_alpha, k_s, k_gamma, k_beta, k_rows = random.split(rng_key, 8)
    capacity = beta.shape[0] - 1
    dtype = beta.dtype
    gamma, alpha = (jnp.asarray(v, dtype) for v in hyper[:2])
    n, first = crp.transition_counts(states, capacity, lengths)
    n = n * (1 - jnp.eye(capacity, dtype=n.dtype))  # consecutive segments differ: no diagonal
    max_total = states.shape[0] * states.shape[1]
    tables = crp.sample_table_counts(k_tables, n, first, beta, alpha, 0.0, max_total).m  # (K+1, K)
    head = beta[:capacity]
    departures = jnp.sum(n, -1)
    tiny = jnp.finfo(dtype).tiny
    r = draws.beta(k_r, alpha * (1.0 - head), jnp.maximum(departures, 1).astype(dtype))
    log_r = jnp.where(departures > 0, jnp.log(jnp.maximum(r, tiny)), 0.0)
    num_seq = jnp.sum(first)
    r0 = draws.beta(k_r0, alpha, jnp.maximum(num_seq, 1).astype(dtype))
    log_r0 = jnp.where(num_seq > 0, jnp.log(jnp.maximum(r0, tiny)), 0.0)
    if priors.alpha is not None:
        shape, rate = priors.alpha
        alpha = draws.gamma(k_alpha, jnp.asarray(shape + jnp.sum(tables), dtype),
                            jnp.asarray(rate - jnp.sum((1.0 - head) * log_r) - log_r0, dtype))
    s = random.poisson(k_s, alpha * head * (-log_r)).astype(jnp.int32)
    dish_tables = jnp.sum(tables, 0)
    if priors.gamma is not None:
        gamma = _resample_gamma(k_gamma, gamma, dish_tables, s, *priors.gamma, max_total)
    beta = crp.sample_beta(k_beta, dish_tables + s, gamma, weak_limit=True).astype(dtype)
    trans = sample_semi_markov_rows(k_rows, beta, alpha, n, first)
    return beta, trans, crp.Concentrations(gamma, alpha, jnp.zeros((), dtype)), jnp.array(False)


def _resample_gamma(rng_key, gamma, tables, extra, shape, rate, max_total: int):
    r"""``gamma | c`` with ``beta ~ Dir(gamma/L)`` integrated out, ``c_k = tables_k + extra_k`` the dish
    counts: top-level tables ``u_k ~`` CRP tables of ``c_k`` customers at ``gamma / L``, then the
    Escobar-West update given ``(sum u, sum c)`` (:func:`~numpyro_hdphmm._core.crp.resample_gamma`; the
    form of :func:`~numpyro_hdphmm._core.crp.resample_gamma_weak_limit`).  The ``tables`` customers
    (at most ``max_total``) are laid out at once; the ``extra`` ones (the Poisson auxiliaries, with
    no static bound) are seated one at a time in a ``lax.while_loop`` over ``max(extra)``
    iterations, every dish at once, so no customer is ever dropped."""
    k_u, k_extra, k_g = random.split(rng_key, 3)
    capacity = tables.shape[0]
    dtype = jnp.result_type(gamma, float)
    theta = jnp.asarray(gamma, dtype) / capacity
    u = crp.sample_crp_tables(k_u, tables, jnp.full((capacity,), theta), max_total)

    def body(carry):
        i, key, count = carry
        key, k_i = random.split(key)
        seated = tables + i
        p = jnp.where(seated == 0, 1.0, theta / (theta + seated.astype(dtype)))
        opens = (random.uniform(k_i, (capacity,), dtype) < p) & (i < extra)
        return i + 1, key, count + opens.astype(jnp.int32)

    _, _, u_extra = jax.lax.while_loop(lambda c: c[0] < jnp.max(extra), body,
                                       (jnp.int32(0), k_extra, jnp.zeros((capacity,), jnp.int32)))
    total = jnp.sum(tables + extra)
    return jnp.asarray(crp.resample_gamma(k_g, gamma, jnp.sum(u + u_extra), total, shape, rate), dtype)


def semi_markov_sweep(rng_key, state: Explicit, spec: ModelSpec, view: ModelView, sharding: SequenceSharding):
    """One sweep of the weak-limit HDP-HSMM (steps 1-4 of the module docstring): ``(Explicit,
    SemiMarkovInfo)``."""
    k_z, k_theta, k_dur, k_global = random.split(rng_key, 4)
    capacity = spec.capacity
    emission, data, chain = view.emission, view.data, view.states_law
    family = chain.duration
    dur_params = duration_parameters(spec, view, state.extra)
    # 1. segmentations
    rows = (sequence_keys(k_z, data.lengths.shape[0]), data.x, data.valid, data.lengths)
    if uses_phases(chain):
        log_init = safe_log(state.trans[capacity, :capacity])
        log_trans = hsmm.without_self_transitions(state.trans[:capacity])
        tables = family.phase_embedding(dur_params)
        entry_first = phases.residual_entry(tables) if chain.left_censored else None
        shared = ((log_init, log_trans, tables, entry_first), state.params)
        new_states, ok = map_sequences(_phase_rows(emission, chain.right_censored), rows, shared, sharding)
    else:
        tables = semi_markov_tables(view, state.trans, dur_params)
        new_states, ok = map_sequences(_ffbs_rows(emission, chain.right_censored), rows, (tables, state.params),
                                       sharding)
    ffbs_ok = jnp.all(ok)
    states = jnp.where(ffbs_ok, new_states, state.states)
    # 2. emission parameters
    labels = OneHot.of_states(states, data.valid, capacity)  # hard labels: the families' O(T) statistics
    params, sigma, shared = update_emission_parameters(k_theta, spec, view, emission, flatten_time(data.x),
                                                       labels, state.params)
    # 3. duration parameters (a family whose parameters are the user's sites: the inner kernel's)
    extra = dict(state.extra)
    accept = jnp.array(jnp.nan, state.beta.dtype)
    if spec.sites.extra and chain.untruncated:
        new, accept = sample_untruncated_duration_parameters(k_dur, family, dur_params, states, data.lengths,
                                                             right_censored=chain.right_censored,
                                                             left_censored=chain.left_censored)
        extra = {f"duration_{p}": v for p, v in new.items()}
    elif spec.sites.extra:
        new, accept = sample_duration_parameters(k_dur, family, dur_params, states, data.lengths, tables[2], tables[3],
                                                 right_censored=chain.right_censored, left_censored=chain.left_censored)
        extra = {f"duration_{p}": v for p, v in new.items()}
    # 4. the HDP layer
    beta, trans, hyper, dish_overflow = sample_hdp_layer(k_global, states, data.lengths, state.beta, view.hyper,
                                                         view.priors)
    hyper_values = {**hyper_site_values(spec, hyper, sigma if spec.hyper.dp_concentration else None), **shared}
    ends, observed = jax.vmap(hsmm.segments)(states, data.lengths)
    at_max = jnp.array(False) if chain.untruncated else jnp.any(observed >= chain.max_duration)
    overflow = jnp.all(used_slots(states, data.lengths, capacity)) | dish_overflow
    explicit = Explicit(states, beta, trans.astype(state.trans.dtype), params, hyper_values, extra)
    return explicit, SemiMarkovInfo(overflow, ffbs_ok, accept, at_max)
