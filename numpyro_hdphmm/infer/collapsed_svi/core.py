r"""The pure core of stochastic collapsed variational inference: state, configuration, one update.

Stochastic collapsed variational inference for the (sticky) HDP-HMM and the finite HMM,
Wang & Blunsom (2014), "Stochastic collapsed variational inference for sequential data"
(its printed errors: ``docs/errata.md``), for the same :func:`numpyro_hdphmm.sample` models the MCMC
kernels run.  The transition rows and the emission parameters are integrated out; what is kept
are *global expected statistics* (no per-sequence statistics at all):

* ``E[C] (K+1, K)``: expected transition counts, start row last (the package's convention; the
  paper's start state 0);
* ``E[t] (K, ...)``: the emission family's expected sufficient statistics
  (:meth:`~numpyro_hdphmm.emissions.EmissionFamily.sufficient_statistics` with soft weights);
* for the HDP-HMM (``hdp=True``): ``q(pi_tilde_k) = Beta(u_k, v_k)`` (the top-level sticks, not a
  point estimate), ``q(alpha)`` and ``q(gamma)`` Gamma (eq. 13), or point masses where the model
  holds ``alpha``/``gamma`` constant.

One update (Alg. 1, one minibatch ``B`` of ``M`` whole sequences, all in one jitted program):

1. the surrogate HMM: ``theta_hat_jk ∝ a_k + kappa [j = k] + E[C_jk]`` (eq. 9; ``a_k = G[alpha pi_k]``,
   or the fixed ``transition_prior`` of the finite HMM) and ``phi_hat_k(x) = p(x | E[t_k])``, the
   emission's posterior predictive given the expected statistics (eq. 10,
   :meth:`~numpyro_hdphmm.emissions.EmissionFamily.predictive_log_likelihoods`);
2. ``q(z^n)`` for every ``n`` in ``B``: forward-backward under the surrogate, the sequence's own
   counts **not** subtracted (the zeroth-order update of Sec. 2.2; :func:`numpyro_hdphmm._core.cvi.expected_counts`),
   the minibatch's sequences split over the devices of ``mesh`` (:func:`numpyro_hdphmm.infer.plumbing.sharding.map_sequences`;
   the sums over sequences of steps 3-4 are reduced over the devices);
3. Robbins-Monro: ``E[C] <- (1 - rho_n) E[C] + rho_n (N / M) sum_B E[C^n]``, likewise ``E[t]``
   (eqs. 11-12, minibatch form), ``rho_n = (tau + n)^-kappa``;
4. HDP-HMM, after every large batch of ``hdp_batch_size`` sequences: the expected table counts of
   App. B (eqs. 19-26) on ``N / L`` replicates of the large batch and the stochastic update of
   ``q(pi_tilde)``, ``q(alpha)``, ``q(gamma)`` (eqs. 14-16; :func:`numpyro_hdphmm._core.cvi.hdp_update`).
5. HDP-HMM, after each HDP update (``merge=True``, the default of
   :class:`~numpyro_hdphmm.infer.CollapsedSVI`): the merge move (:func:`merge_states`), which merges
   pairs of states while the collapsed joint of the minibatch's most probable labels gains, kept
   when the minibatch's predictive likelihood under the merged surrogate HMM does not fall by more
   than :data:`MERGE_TOLERANCE`.  Without it CVB0 keeps true states split in two or three, each
   split a fixed point of its updates (``docs/collapsed_svi.md``, "Merge moves").

``collapsed=False`` runs the uncollapsed stochastic VI baseline (Foti et al. 2014 on whole
sequences; Hoffman et al. 2013) with the same state: ``q(theta_j) = Dir(a + E[C_j])``,
``q(phi_k) = p(phi | E[t_k])``, local step with ``exp E_q[log theta]`` and ``exp E_q[log f]``
(:meth:`~numpyro_hdphmm.emissions.EmissionFamily.expected_log_likelihoods`); finite HMM only.

Everything here is a pure function of its arguments (no model, no NumPyro): :func:`scvi_init`,
:func:`scvi_update` and :func:`plug_in_hmm` on a :class:`CollapsedSVIState` and a static
:class:`SCVIConfig`; :func:`length_strata` plans the length-stratified minibatches on the host.
:class:`~numpyro_hdphmm.infer.CollapsedSVI` drives them on a model's data.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from numpyro_hdphmm._core import cvi
from numpyro_hdphmm._core.crp import transition_counts
from numpyro_hdphmm._core.random import beta as draw_beta
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.infer.contract import flatten_time
from numpyro_hdphmm.infer.plumbing.discovery import SequenceData
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences

__all__ = [
    "RobbinsMonro",
    "ConstantStepSize",
    "SCVIConfig",
    "CollapsedSVIState",
    "Minibatch",
    "scvi_init",
    "scvi_update",
    "plug_in_hmm",
    "Stratum",
    "length_strata",
    "draw_sticks",
    "merge_states",
    "MERGE_TOLERANCE",
]


# ================================================================================ configuration
class RobbinsMonro(NamedTuple):
    """The step-size schedule ``rho_n = (tau + n)^-kappa``, ``n = 0, 1, ...`` the update count
    (the paper: ``tau = 1``, forgetting rate ``kappa`` in {0.5, 0.7, 0.9})."""

    tau: float = 1.0
    kappa: float = 0.5

    def __call__(self, step):
        return cvi.robbins_monro_step_size(step, self.tau, self.kappa)


class ConstantStepSize(NamedTuple):
    """The constant step size ``rho_n = rho`` (``step_size=rho`` of :class:`~numpyro_hdphmm.infer.CollapsedSVI`)."""

    rho: float

    def __call__(self, step):
        return jnp.asarray(self.rho, jnp.result_type(float))


class SCVIConfig(NamedTuple):
    """Static configuration of the pure core (hashable).

    ``num_states``: the truncation ``K``; ``hdp``: variational top level (SCVI-HDP) or the fixed
    ``transition_prior`` pseudo-counts of the finite HMM (SCVI); ``collapsed``: the zeroth-order
    collapsed local step, or mean-field SVI; ``kappa``: the sticky self bias (constant);
    ``transition_prior``: the finite HMM's pseudo-count and the HDP's first ``G[alpha pi_k]``;
    ``step_size``: ``n -> rho_n``; ``hdp_every``: minibatches per HDP update; ``alpha``,
    ``gamma``: the model's constants (``None`` where the model has a Gamma-prior site, whose prior
    is in ``priors``, a :class:`~numpyro_hdphmm._core.cvi.HDPPriors`); ``merge``: the merge move
    after each HDP update (:func:`scvi_update`, step 5; HDP-HMM only).
    """

    num_states: int
    hdp: bool
    collapsed: bool
    kappa: float
    transition_prior: float
    step_size: Callable
    hdp_every: int
    alpha: Optional[float]
    gamma: Optional[float]
    priors: cvi.HDPPriors
    merge: bool = False


class CollapsedSVIState(NamedTuple):
    r"""The carried state: the global statistics and nothing per sequence.

    * ``transition_counts`` ``(K+1, K)``: ``E[C_jk]``, start row last;
    * ``emission_stats``: pytree with leading axis ``K``, ``E[t_k]``;
    * ``hdp``: :class:`~numpyro_hdphmm._core.cvi.HDPPosterior`, ``q(pi_tilde)``, ``q(alpha)``,
      ``q(gamma)`` and the pseudo-counts ``G[alpha pi_k]`` in use (the finite HMM: its fixed prior);
    * ``table_counts``, ``log_no_transition`` ``(K+1, K)``, ``log_no_departure`` ``(K+1,)``,
      ``table_batches`` ``()``: the App. B statistics of the current large batch, each
      minibatch's scaled to the data set and summed, and the number of minibatches summed (reset
      after each HDP update);
    * ``step``, ``hdp_step`` ``()``: updates and HDP updates so far (``rho_n`` uses ``step``);
    * ``merges`` ``()``: states merged into others so far (:func:`scvi_update`, step 5);
    * ``num_sequences`` ``()``: ``N``, the number of sequences of the data set;
    * ``rng_key``: the key of the minibatch order (:meth:`CollapsedSVI.run`).
    """

    transition_counts: jax.Array
    emission_stats: Any
    hdp: cvi.HDPPosterior
    table_counts: jax.Array
    log_no_transition: jax.Array
    log_no_departure: jax.Array
    table_batches: jax.Array
    step: jax.Array
    hdp_step: jax.Array
    merges: jax.Array
    num_sequences: jax.Array
    rng_key: jax.Array


# ================================================================================ pure core
def _scale_tree(tree, factor):
    return jax.tree_util.tree_map(lambda a: a * factor, tree)


def scvi_init(rng_key, data: SequenceData, emission, config: SCVIConfig, num_sequences) -> CollapsedSVIState:
    r"""The initial state from the sequences ``data`` (a random minibatch).

    The paper initializes ``E[C]`` and ``E[t]`` "using exponential distributions" (Hoffman et al.
    2013, who draw every topic-word statistic around 1).  Here, for any emission family:
    ``E[C_jk] = 1`` (uniform surrogate transitions: random ``Exponential(1)`` counts give the first
    local step strong random non-sticky preferences, and on simulated sticky HMMs led to
    alternating-state local optima in 6 of 6 seeds, against 2 of 8 with uniform transitions,
    both failures two windows on one regime), and each state's emission statistics are those of
    a random window of ``ceil(T / 5)`` consecutive steps of a sequence of ``data`` drawn at random
    (random segments, as bnpy's ``randexamples`` with sequences cut short), so that the first local
    step starts from ``K`` distinct, valid emission posteriors.  Random soft responsibilities over
    every step average out to ``K`` nearly equal states, a saddle point the zeroth-order updates
    leave very slowly; whole sequences (several regimes each) gave worse local optima on simulated
    sticky HMMs (wrong partition in 6 of 6 seeds against 2 of 6 with windows).  ``q(pi_tilde_k) = Beta(1, E[gamma])``, ``q(alpha)``
    and ``q(gamma)`` start at their priors and ``G[alpha pi_k]`` at ``transition_prior`` (the
    paper's 0.1 "for the first iteration").  With ``rho_0 = 1`` (``tau = 1``) the first update
    replaces ``E[C]`` and ``E[t]`` by (scaled) data statistics.
    """
    k_pick, k_order = random.split(rng_key)
    K = config.num_states
    x, valid = data.x, data.valid
    M, T = valid.shape
    dtype = jnp.result_type(float)
    k_seq, k_start = random.split(k_pick)
    pick = random.choice(k_seq, M, (K,), replace=M < K)
    width = max(1, -(-T // 5))  # static: a fifth of the padded length
    room = jnp.maximum(data.lengths[pick] - width, 0)  # (K,) last admissible start
    start = jnp.floor(random.uniform(k_start, (K,), dtype) * (room + 1)).astype(jnp.int32)
    steps = jnp.arange(T)[:, None]
    window = (steps >= start[None, :]) & (steps < start[None, :] + width)  # (T, K)
    resp = (jnp.arange(M)[:, None, None] == pick[None, None, :]) & window[None]  # (M, T, K)
    weights = (valid[..., None] & resp).astype(dtype).reshape(M * T, K)
    stats = emission.sufficient_statistics(flatten_time(x), weights)
    counts = jnp.ones((K + 1, K), dtype)
    priors = config.priors
    one = jnp.ones((), dtype)
    a_shape, a_rate = (priors.alpha if priors.alpha is not None else (config.alpha, 1.0))
    g_shape, g_rate = (priors.gamma if priors.gamma is not None else (config.gamma, 1.0))
    e_gamma = jnp.asarray(g_shape, dtype) / jnp.asarray(g_rate, dtype)
    hdp = cvi.HDPPosterior(
        u=jnp.ones((K,), dtype), v=jnp.broadcast_to(e_gamma, (K,)),
        alpha_shape=a_shape * one, alpha_rate=a_rate * one, gamma_shape=g_shape * one, gamma_rate=g_rate * one,
        pseudo_counts=jnp.full((K,), config.transition_prior, dtype))
    zeros = jnp.zeros((K + 1, K), dtype)
    return CollapsedSVIState(
        transition_counts=counts.astype(dtype), emission_stats=stats, hdp=hdp,
        table_counts=zeros, log_no_transition=zeros, log_no_departure=jnp.zeros((K + 1,), dtype),
        table_batches=jnp.zeros((), dtype), step=jnp.zeros((), jnp.int32), hdp_step=jnp.zeros((), jnp.int32),
        merges=jnp.zeros((), jnp.int32),
        num_sequences=jnp.asarray(num_sequences, dtype), rng_key=k_order)


def _surrogate(state: CollapsedSVIState, config: SCVIConfig):
    """``log theta_hat (K+1, K)`` of the local step (eq. 9, or ``E_q[log theta]`` uncollapsed)."""
    fn = cvi.log_mean_transitions if config.collapsed else cvi.expected_log_transitions
    return fn(state.hdp.pseudo_counts, state.transition_counts, config.kappa)


def _emission_terms(emission, x, stats, config: SCVIConfig, shape):
    """``(M, T, K)`` emission term of the local step (eq. 10, or ``E_q[log f]`` uncollapsed)."""
    flat = flatten_time(x)
    fn = emission.predictive_log_likelihoods if config.collapsed else emission.expected_log_likelihoods
    return fn(flat, stats).reshape(shape + (config.num_states,))


class Minibatch(NamedTuple):
    """One group of sequences of a minibatch: ``data`` (:class:`~numpyro_hdphmm.infer.plumbing.discovery.SequenceData`
    of ``M_b`` sequences, ``y`` unused) and ``scale``: how many sequences of the data set each stands for
    (``N / M``; ``N_b / M_b`` for a stratum of a length-stratified minibatch)."""

    data: SequenceData
    scale: Any


def _local_rows(emission, config: SCVIConfig, dtype):
    """The per-sequence half of step 2 for :func:`~numpyro_hdphmm.infer.plumbing.sharding.map_sequences`:
    ``((x (n, T, ...), valid (n, T), lengths (n,)), (log theta_hat (K+1, K), E[t])) ->``
    :class:`~numpyro_hdphmm._core.cvi.ExpectedCounts` of the ``n`` sequences (the ``(n, T, K)``
    emission terms of eq. 10 and the forward-backward under the surrogate HMM)."""

    def local(rows, shared):
        x, valid, lengths = rows
        log_trans, stats = shared
        log_lik = _emission_terms(emission, x, stats, config, valid.shape).astype(dtype)
        return cvi.expected_counts(log_trans, log_lik, valid, lengths, pair_statistics=config.hdp)

    return local


def _local_step(log_trans, group: Minibatch, state: CollapsedSVIState, emission, config: SCVIConfig,
                sharding: Optional[SequenceSharding] = None, labelled=None):
    """Steps 1-2 on one group: its statistics scaled to the data set, as a dict of sums (with
    ``labelled``, a traced bool: also ``"labelled"``, the transition counts ``(K+1, K)`` and
    emission statistics of the most probable state of each step, scaled to the data set where
    ``labelled`` holds, zeros elsewhere).  The
    forward-backward of the group's sequences runs on the devices of ``sharding`` (each its block
    of sequences, padded when their number does not divide ``M``); the sums over sequences are on
    the global arrays (reduced over the devices by XLA's partitioner)."""
    data, scale = group
    K = config.num_states
    M, T = data.valid.shape
    dtype = state.transition_counts.dtype
    local = map_sequences(_local_rows(emission, config, dtype), (data.x, data.valid, data.lengths),
                          (log_trans, state.emission_stats), sharding)
    weights = (local.marginals * data.valid[..., None]).reshape(M * T, K)
    out = {"stats": _scale_tree(emission.sufficient_statistics(flatten_time(data.x), weights), scale),
           "counts": scale * jnp.sum(local.transition_counts, 0),
           "elbo": scale * jnp.sum(local.log_normalizer)}
    if config.hdp:
        out["pairs"] = scale * jnp.sum(local.log_no_transition, 0)
        out["departs"] = scale * jnp.sum(local.log_no_departure, 0)
    if labelled is not None:
        def hard():
            labels = jnp.argmax(local.marginals, -1)  # (M, T) the most probable state of each step
            n, first = transition_counts(labels, K, data.lengths)
            ones = state_weights(labels, data.valid, K, dtype).reshape(M * T, K)
            return (scale * jnp.concatenate([n, first[None]], 0).astype(dtype),
                    _scale_tree(emission.sufficient_statistics(flatten_time(data.x), ones), scale))

        out["labelled"] = lax.cond(labelled, hard, lambda: jax.tree_util.tree_map(jnp.zeros_like, (out["counts"], out["stats"])))
    return out


#: the merge move is kept when the minibatch's predictive log-likelihood under the merged
#: surrogate HMM is at least ``(1 + MERGE_TOLERANCE)`` times the unmerged one's (it is negative:
#: a loss of at most 0.1%, about 0.004 nats per step at 4 nats per step)
MERGE_TOLERANCE = 1e-3


def _emission_merge_gains(emission, stats):
    """``(K, K)``: ``log p(x_i, x_j) - log p(x_i) - log p(x_j)`` (the emission's log marginal
    likelihood at the summed statistics against each state's; plus that of empty statistics,
    which state ``j`` is left with, 0 for a proper prior), one state ``i`` at a time."""
    own = emission.log_marginal_likelihood(stats)
    empty = emission.log_marginal_likelihood(jax.tree_util.tree_map(jnp.zeros_like, stats))
    joined = lax.map(lambda one: emission.log_marginal_likelihood(
        jax.tree_util.tree_map(lambda a, b: a[None] + b, one, stats)), stats)
    return joined - own[:, None] - own[None, :] + empty[None, :]


def merge_states(state: CollapsedSVIState, labelled, emission, config: SCVIConfig) -> CollapsedSVIState:
    r"""The merge move: merge pairs of states while the collapsed joint of the labelled minibatch gains.

    ``labelled = (counts (K+1, K), stats)``: the transition counts and emission statistics of the
    labels ``z_t = argmax_k q(z_t = k)`` of the minibatch, scaled to the data set.  Merging state
    ``j`` into ``i`` relabels them and changes their collapsed log joint ``log p(x, z)`` (rows and
    emission parameters integrated out, the top level at ``G[alpha pi_k]`` and ``kappa``) by the
    transition term :func:`~numpyro_hdphmm._core.cvi.transition_merge_gains` plus the emission term
    :func:`_emission_merge_gains`.  Greedily, the pair with the largest positive gain is merged
    (:func:`~numpyro_hdphmm._core.cvi.merge_pair`) in the labels and in ``E[C]``, ``E[t]``; the
    gains are recomputed among the states not merged yet, until no pair gains.  States with less
    than one labelled step (scaled to the data set) are left alone.  Returns the state with ``merges`` counted
    (:func:`scvi_update` keeps it only if the minibatch's predictive likelihood holds).

    Labels, not the zeroth-order objective at ``E[C]`` and ``E[t]``: where ``q`` is split between
    two states that the fit has not yet told apart, ``log G(a + E[n])`` falls short of
    ``E[log G(a + n)]`` (Jensen) for each half, and that objective merges distinct states
    (``docs/collapsed_svi.md``, "Merge moves").
    """
    K = config.num_states

    def gains(counts, stats, free):
        g = cvi.transition_merge_gains(state.hdp.pseudo_counts, counts, config.kappa) + _emission_merge_gains(emission, stats)
        ok = free & (jnp.sum(counts, 0) >= 1.0)
        return jnp.where(ok[:, None] & ok[None, :], g, -jnp.inf)

    def body(carry):
        counts, stats, hard_counts, hard_stats, free, merges = carry
        g = gains(hard_counts, hard_stats, free)
        best = jnp.argmax(g)
        i, j = best // K, best % K
        go = g.reshape(-1)[best] > 0
        pick = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(go, a, b), new, old)
        counts, stats = pick(cvi.merge_pair(counts, stats, i, j), (counts, stats))
        hard_counts, hard_stats = pick(cvi.merge_pair(hard_counts, hard_stats, i, j), (hard_counts, hard_stats))
        free = jnp.where(go, free.at[i].set(False).at[j].set(False), jnp.zeros_like(free))
        return counts, stats, hard_counts, hard_stats, free, merges + go.astype(jnp.int32)

    carry = (state.transition_counts, state.emission_stats, *labelled, jnp.ones((K,), bool), state.merges)
    counts, stats, _, _, _, merges = lax.while_loop(lambda c: jnp.sum(c[4]) >= 2, body, carry)
    return state._replace(transition_counts=counts, emission_stats=stats, merges=merges)


def scvi_update(state: CollapsedSVIState, batch, emission, config: SCVIConfig,
                sharding: Optional[SequenceSharding] = None):
    r"""One stochastic update on a minibatch: ``(state, loss)``.

    ``sharding`` (:class:`~numpyro_hdphmm.infer.plumbing.sharding.SequenceSharding`, default unsharded):
    where the per-sequence forward-backward of step 2 runs; the rest is global.

    ``batch``: a :class:`Minibatch` or a tuple of them (the strata of a length-stratified minibatch:
    the sum of each stratum's statistics times ``N_b / M_b`` is an unbiased estimate of the data
    set's, as ``(N / M)`` times the minibatch's is).  Steps 1-5 of the module docstring; ``loss`` is
    the negative of the zeroth-order estimate of the ELBO (eq. 8) on the minibatch, scaled to the
    data set: ``-(N/M) sum_B log Z_n + KL(q(pi_tilde) q(alpha) q(gamma) || p)``.  Under the
    zeroth-order approximation the collapsed bound of sequence ``n`` is ``E_q[log p(x^n, z^n | rest)]
    + H[q(z^n)] = log Z_n``, the log normalizer of ``q(z^n)`` (its forward-backward marginal
    likelihood); it is an estimate for monitoring, not a bound.
    """
    groups = (batch,) if isinstance(batch, Minibatch) else tuple(batch)
    dtype = state.transition_counts.dtype
    merging = config.hdp and config.merge
    check = ((state.step + 1) % config.hdp_every) == 0 if merging else None  # an HDP update follows
    # 1.-2. surrogate HMM and q(z^n) for every sequence of the minibatch
    log_trans = _surrogate(state, config)
    parts = [_local_step(log_trans, g, state, emission, config, sharding, check) for g in groups]
    total = jax.tree_util.tree_map(lambda *a: sum(a[1:], a[0]), *parts)
    # 3. Robbins-Monro (eqs. 11-12, minibatch form)
    rho = jnp.asarray(config.step_size(state.step), dtype)
    counts = cvi.stochastic_average(state.transition_counts, total["counts"], rho)
    stats = cvi.stochastic_average(state.emission_stats, total["stats"], rho)
    new = state._replace(transition_counts=counts, emission_stats=stats, step=state.step + 1)
    # 4. HDP: accumulate the App. B statistics, update q after every large batch (eqs. 14-26)
    kl = jnp.zeros((), dtype)
    if config.hdp:
        acc = (state.table_counts + total["counts"], state.log_no_transition + total["pairs"],
               state.log_no_departure + total["departs"], state.table_batches + 1)
        hdp_rho = jnp.asarray(config.step_size(state.hdp_step), dtype)
        # the averaged minibatch statistics are those of the data set (replicates R = 1)
        updated = cvi.hdp_update(state.hdp, config.priors, acc[0] / acc[3], acc[1] / acc[3], acc[2] / acc[3], 1.0,
                                 hdp_rho, alpha=config.alpha, gamma=config.gamma, kappa=config.kappa)
        now = (new.step % config.hdp_every) == 0
        hdp = jax.tree_util.tree_map(lambda a, b: jnp.where(now, a, b), updated, state.hdp)
        acc = [jnp.where(now, jnp.zeros_like(a), a) for a in acc]
        new = new._replace(hdp=hdp, table_counts=acc[0], log_no_transition=acc[1], log_no_departure=acc[2],
                           table_batches=acc[3], hdp_step=state.hdp_step + now.astype(jnp.int32))
        kl = cvi.hdp_kl(hdp, config.priors, gamma=config.gamma)
    # 5. merge move after each HDP update, kept if the minibatch's predictive likelihood holds
    if merging:
        def predictive(s):  # sum_B log Z_n of the minibatch under the surrogate HMM of s, scaled
            log_t = _surrogate(s, config)
            return sum(_local_step(log_t, g, s, emission, config, sharding)["elbo"] for g in groups)

        def try_merges(s):
            candidate = merge_states(s, total["labelled"], emission, config)
            keep = lax.cond(candidate.merges > s.merges,
                            lambda: predictive(candidate) >= predictive(s) * (1.0 + MERGE_TOLERANCE), lambda: jnp.zeros((), bool))
            return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), candidate, s)

        new = lax.cond(check, try_merges, lambda s: s, new)
    return new, kl - total["elbo"]


def plug_in_hmm(state_or_params, config: SCVIConfig):
    r"""``(log_init (K,), log_trans (K, K), stats)`` of the fitted plug-in HMM: the posterior-mean
    transitions ``(a_k + kappa [j = k] + E[C_jk]) / sum_l (...)`` (eq. 9 normalized; for the
    uncollapsed baseline the mean of ``q(theta_j) = Dir(a + E[C_j])``, the same expression) and the
    emissions' posterior predictive given ``E[t]`` (the statistics ``stats`` returned).  This one
    definition serves the held-out predictive of every variant (the paper's Sec. 3 evaluation)."""
    if isinstance(state_or_params, CollapsedSVIState):
        counts, stats, pseudo = (state_or_params.transition_counts, state_or_params.emission_stats,
                                 state_or_params.hdp.pseudo_counts)
    else:
        counts, stats, pseudo = (state_or_params["transition_counts"], state_or_params["emission_stats"],
                                 state_or_params["pseudo_counts"])
    log_trans = cvi.log_mean_transitions(pseudo, counts, config.kappa)
    K = config.num_states
    return log_trans[K], log_trans[:K], stats


def draw_sticks(rng_key, u, v, capacity):
    """``beta (capacity+1,)``: ``pi_tilde_k ~ Beta(u_k, v_k)`` broken into weights for the ``K``
    represented states, zeros for unused slots, the remainder last."""
    K = u.shape[0]
    sticks = draw_beta(rng_key, u, v)
    log_rest = jnp.cumsum(jnp.log1p(-jnp.minimum(sticks, 1.0)))
    weights = sticks * jnp.exp(jnp.concatenate([jnp.zeros((1,), u.dtype), log_rest[:-1]]))
    out = jnp.zeros((capacity + 1,), u.dtype).at[:K].set(weights)
    return out.at[capacity].set(jnp.exp(log_rest[-1]))


class Stratum(NamedTuple):
    """One stratum of :func:`length_strata`: the ``indices`` of its sequences (host array), the
    ``width`` they are padded to, ``num_sequences = N_b`` and ``batch_size = M_b``."""

    indices: np.ndarray
    width: int
    num_sequences: int
    batch_size: int


def length_strata(lengths, batch_size: int, num_steps: int, max_strata: int = 3):
    """Split the sequences into at most ``max_strata`` strata of similar lengths (host-side plan).

    The widths (multiples of 8, the last ``num_steps``) minimize the padded size ``sum_n width(n)``
    by dynamic programming over the sorted lengths; the fewest strata whose padded size is within
    20% of the best are used (each stratum is one more compiled forward-backward).  Stratum ``b``
    holds ``N_b`` sequences and contributes ``M_b = max(1, round(M N_b / N))`` of them to each
    minibatch (all of them when ``M >= N``).  Returns a tuple of :class:`Stratum`.
    """
    lengths = np.asarray(lengths)
    N = lengths.shape[0]
    widths = np.minimum(np.unique(-(-lengths // 8) * 8), num_steps)
    widths = np.unique(np.concatenate([widths, [min(int(widths[-1]), num_steps)]]))
    size = np.array([np.sum(lengths <= w) for w in widths])  # sequences fitting in each width
    U = len(widths)
    inf = float("inf")
    # best[g][j]: least padded size of the sequences <= widths[j] with g strata, the last of width widths[j]
    best = np.full((max_strata + 1, U), inf)
    back = np.zeros((max_strata + 1, U), int)
    for j in range(U):
        best[1, j] = size[j] * widths[j]
    for g in range(2, max_strata + 1):
        for j in range(U):
            for i in range(j):
                c = best[g - 1, i] + (size[j] - size[i]) * widths[j]
                if c < best[g, j]:
                    best[g, j], back[g, j] = c, i
    last = U - 1
    costs = [best[g, last] for g in range(1, max_strata + 1)]
    g = next(g for g in range(1, max_strata + 1) if costs[g - 1] <= 1.2 * min(costs))
    cuts, j = [], last
    for h in range(g, 0, -1):
        cuts.append(j)
        j = back[h, j]
    cuts = sorted(cuts)
    order = np.argsort(lengths, kind="stable")
    strata, lo = [], 0
    for j in cuts:
        members = order[lo:size[j]]
        lo = size[j]
        if members.size == 0:
            continue
        n_b = int(members.size)
        m_b = n_b if batch_size >= N else int(min(n_b, max(1, round(batch_size * n_b / N))))
        strata.append(Stratum(np.sort(members), int(widths[j]), n_b, m_b))
    return tuple(strata)
