r"""Stochastic collapsed variational inference for the (sticky) HDP-HMM and the finite HMM.

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

``collapsed=False`` runs the uncollapsed stochastic VI baseline (Foti et al. 2014 on whole
sequences; Hoffman et al. 2013) with the same state: ``q(theta_j) = Dir(a + E[C_j])``,
``q(phi_k) = p(phi | E[t_k])``, local step with ``exp E_q[log theta]`` and ``exp E_q[log f]``
(:meth:`~numpyro_hdphmm.emissions.EmissionFamily.expected_log_likelihoods`); finite HMM only.

Supported models: every conjugate emission family; ``gamma`` and ``alpha`` constants or sample
sites with Gamma priors; ``kappa`` a constant (the sticky model: ``kappa`` added to the diagonal
pseudo-counts and the override tables removed in the HDP update, an extension of the paper).
Not supported, with a ``NotImplementedError`` naming why: custom emissions (their parameters are
the user's sites), DP-mixture emissions (no closed-form posterior given expected statistics),
``kappa`` (or ``alpha + kappa``, ``kappa / (alpha + kappa)``) as a random site, and any other
latent site (hyperpriors of emission hyperparameters): CollapsedSVI has no inner kernel.

Downstream: :meth:`CollapsedSVI.sample_posterior` and :attr:`CollapsedSVI.guide` give draws of
every latent site from the variational posterior for ``numpyro.infer.Predictive`` (and for
:func:`numpyro_hdphmm.viterbi`, :func:`~numpyro_hdphmm.diagnostics.predictive_log_likelihood`,
...); :meth:`CollapsedSVI.state_marginals`, :meth:`CollapsedSVI.viterbi` and
:meth:`CollapsedSVI.predictive_log_likelihood` use the fitted surrogate HMM (the plug-in
posterior means) on any sequence; :meth:`CollapsedSVI.to_inference_data` adds an ArviZ group
``variational`` with the variational parameters and the ELBO trace.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax, random
from numpyro import handlers
from numpyro.infer.svi import SVIRunResult
from numpyro.infer import Predictive
from numpyro.infer.elbo import ELBO

from numpyro_hdphmm._core import cvi
from numpyro_hdphmm._core.hmm import hmm_posterior_sample, hmm_smoother, hmm_viterbi, hmm_filter
from numpyro_hdphmm._core.random import beta as draw_beta
from numpyro_hdphmm._core.random import dirichlet, gamma as draw_gamma
from numpyro_hdphmm.infer.contract import flatten_time
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, SequenceData, discover, model_view
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences, sequence_mesh
from numpyro_hdphmm.posterior import as_sequences

__all__ = [
    "CollapsedSVI",
    "CollapsedSVIState",
    "CollapsedGuide",
    "CollapsedELBO",
    "CollapsedCarry",
    "STATE_SITE",
    "RobbinsMonro",
    "SCVIConfig",
    "Minibatch",
    "PredictiveLogLikelihood",
    "Convergence",
    "Stratum",
    "length_strata",
    "scvi_init",
    "scvi_update",
    "plug_in_hmm",
]


# ================================================================================ configuration
class RobbinsMonro(NamedTuple):
    """The step-size schedule ``rho_n = (tau + n)^-kappa``, ``n = 0, 1, ...`` the update count
    (the paper: ``tau = 1``, forgetting rate ``kappa`` in {0.5, 0.7, 0.9})."""

    tau: float = 1.0
    kappa: float = 0.5

    def __call__(self, step):
        return cvi.robbins_monro_step_size(step, self.tau, self.kappa)


class _Constant(NamedTuple):
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
    is in ``priors``, a :class:`~numpyro_hdphmm._core.cvi.HDPPriors`).
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
                sharding: Optional[SequenceSharding] = None):
    """Steps 1-2 on one group: its statistics scaled to the data set, as a dict of sums.  The
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
    return out


def scvi_update(state: CollapsedSVIState, batch, emission, config: SCVIConfig,
                sharding: Optional[SequenceSharding] = None):
    r"""One stochastic update on a minibatch: ``(state, loss)``.

    ``sharding`` (:class:`~numpyro_hdphmm.infer.plumbing.sharding.SequenceSharding`, default unsharded):
    where the per-sequence forward-backward of step 2 runs; the rest is global.

    ``batch``: a :class:`Minibatch` or a tuple of them (the strata of a length-stratified minibatch:
    the sum of each stratum's statistics times ``N_b / M_b`` is an unbiased estimate of the data
    set's, as ``(N / M)`` times the minibatch's is).  Steps 1-4 of the module docstring; ``loss`` is
    the negative of the zeroth-order estimate of the ELBO (eq. 8) on the minibatch, scaled to the
    data set: ``-(N/M) sum_B log Z_n + KL(q(pi_tilde) q(alpha) q(gamma) || p)``.  Under the
    zeroth-order approximation the collapsed bound of sequence ``n`` is ``E_q[log p(x^n, z^n | rest)]
    + H[q(z^n)] = log Z_n``, the log normalizer of ``q(z^n)`` (its forward-backward marginal
    likelihood); it is an estimate for monitoring, not a bound.
    """
    groups = (batch,) if isinstance(batch, Minibatch) else tuple(batch)
    dtype = state.transition_counts.dtype
    # 1.-2. surrogate HMM and q(z^n) for every sequence of the minibatch
    log_trans = _surrogate(state, config)
    parts = [_local_step(log_trans, g, state, emission, config, sharding) for g in groups]
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


# ================================================================================ results
class Convergence(NamedTuple):
    """Result of :meth:`CollapsedSVI.convergence`.

    converged : bool  ``relative_change < rtol``
    relative_change : float  ``|mean(last window) - mean(window before)| / |mean(window before)|``
        of the losses (NaN with fewer than two windows)
    window : int  updates per window (default: one pass over the data)
    num_steps : int  updates made
    states_used : int or None  states holding at least 1% of the expected steps (``E[C]``'s columns)
    rtol : float
    """

    converged: bool
    relative_change: float
    window: int
    num_steps: int
    states_used: Optional[int]
    rtol: float

    def __str__(self):
        used = "" if self.states_used is None else f", {self.states_used} states hold >= 1% of the steps"
        verdict = "converged" if self.converged else "NOT converged (run more steps, or pass init_state= to continue)"
        return (f"{verdict}: the mean loss of the last {self.window} updates changed by {self.relative_change:.2e} "
                f"(relative; rtol {self.rtol:g}) after {self.num_steps} updates{used}")


class PredictiveLogLikelihood(NamedTuple):
    """Result of :meth:`CollapsedSVI.predictive_log_likelihood`.

    log_likelihood : ()  ``sum_n log p(y^n | plug-in HMM)`` (forward algorithm, Rabiner eq. 103)
    per_sequence : (N,)
    num_observed : ()  observed held-out steps
    per_token : ()  ``log_likelihood / num_observed`` (the paper's "per time step" metric)
    """

    log_likelihood: jax.Array
    per_sequence: jax.Array
    num_observed: jax.Array
    per_token: jax.Array


def _array_leaves(args, kwargs):
    """Split ``(args, kwargs)`` into array leaves (traced) and a function rebuilding them."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    is_array = [isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves]
    arrays = [leaf for leaf, a in zip(leaves, is_array) if a]

    def rebuild(arrs):
        it = iter(arrs)
        return jax.tree_util.tree_unflatten(treedef, [next(it) if a else leaf for leaf, a in zip(leaves, is_array)])

    key = (treedef, tuple(((np.shape(l), str(l.dtype)) if a else l) for l, a in zip(leaves, is_array)))
    try:
        hash(key)
    except TypeError:
        key = None
    return arrays, rebuild, key


def _draw_sticks(rng_key, u, v, capacity):
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


# ================================================================================ the fitter
class CollapsedSVI:
    r"""Stochastic collapsed variational inference (Wang & Blunsom 2014) for an HDP-HMM model.

    Mirrors :class:`numpyro.infer.SVI`: :meth:`init`, :meth:`update` (``(state, loss)``),
    :meth:`run` (``SVIRunResult(params, state, losses)`` with a progress bar), :meth:`get_params`,
    and the attributes :attr:`model` and :attr:`guide`.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param num_states: the truncation ``K`` (``q(z) = 0`` on states ``>= K``, the "direct assignment
        truncation"); at most the model's ``max_states`` (default: it).  Draws of the model's sites
        have the model's shapes, with no mass on slots ``>= K``.
    :param batch_size: sequences per minibatch ``M`` in :meth:`run` (default: all, batch VI).
    :param step_size: ``RobbinsMonro(tau, kappa)`` (default ``RobbinsMonro(1.0, 0.5)``), a constant
        ``rho`` in ``(0, 1]``, or a callable ``n -> rho_n``.
    :param hdp: ``True`` (SCVI-HDP): the variational top level ``q(pi_tilde)``, ``q(alpha)``,
        ``q(gamma)``; ``False`` (SCVI for the finite HMM, the paper's baseline): the rows' prior is
        ``Dir(transition_prior, ..., transition_prior)`` and the top-level sites keep their priors.
    :param collapsed: ``False``: uncollapsed stochastic VI (the paper's SVI baseline; ``hdp=False``).
    :param transition_prior: the finite HMM's Dirichlet pseudo-count, and the ``G[alpha pi_k]`` of
        the HDP-HMM before its first HDP update (the paper: 0.1 for both).
    :param hdp_batch_size: sequences per HDP update (the paper's "large batch", 10,000 on WSJ); the
        default ``min(10000, N)`` is rounded down to a multiple of the minibatch size.
    :param num_sequences: ``N`` when :meth:`init` sees only part of the data (streaming with
        :meth:`update`); default: the number of sequences given to :meth:`init`.
    :param max_strata: at most this many length strata in :meth:`run` (:func:`length_strata`; 1: every
        minibatch padded to the longest sequence).
    :param mesh: a :class:`jax.sharding.Mesh` to split each minibatch's sequences over (the
        forward-backward of each sequence on its device, the expected statistics summed over the
        devices, one global update; :mod:`numpyro_hdphmm.infer.plumbing.sharding`, ``docs/scaling.md``);
        ``None``: unsharded; ``"auto"`` (default): every local device when there are several
        (``sequence_mesh(jax.local_devices())``), unsharded otherwise.  ``M`` need not be a multiple
        of the number of devices (the minibatch is padded inside the sharded step and the padding
        dropped).  The updates are those of the unsharded fitter up to the order of floating-point
        sums.
    :param sequence_axes: the mesh axes the sequences are split over (default: all of them).
    :param shard: deprecated: ``shard=False`` is ``mesh=None``, ``shard=True`` is ``mesh="auto"``.
    """

    def __init__(self, model, num_states: Optional[int] = None, batch_size: Optional[int] = None,
                 step_size=None, *, hdp: bool = True, collapsed: bool = True, transition_prior: float = 0.1,
                 hdp_batch_size: Optional[int] = None, num_sequences: Optional[int] = None, max_strata: int = 3,
                 mesh: Any = "auto", sequence_axes=None, shard: Optional[bool] = None):
        if not callable(model):
            raise ValueError("`model` must be a NumPyro model (a callable).")
        self.model = model
        self._num_states = self._check_int("num_states", num_states)
        self._batch_size = self._check_int("batch_size", batch_size)
        self._hdp_batch_size = self._check_int("hdp_batch_size", hdp_batch_size)
        self._num_sequences = self._check_int("num_sequences", num_sequences)
        self._max_strata = self._check_int("max_strata", max_strata)
        self._step_size = self._check_step_size(step_size)
        self._hdp, self._collapsed = bool(hdp), bool(collapsed)
        if shard is not None:
            warnings.warn("CollapsedSVI(shard=...) is deprecated: pass mesh=None (unsharded) or mesh='auto' "
                          "(every local device).", DeprecationWarning, stacklevel=2)
            mesh = "auto" if shard else None
        if isinstance(mesh, str) and mesh == "auto":
            if sequence_axes is not None:
                raise ValueError("`sequence_axes` needs an explicit `mesh` (not mesh='auto').")
            local = jax.local_devices()
            mesh = sequence_mesh(local) if len(local) > 1 else None
        self.sharding = SequenceSharding.from_arguments(mesh, sequence_axes)
        if not self._collapsed and self._hdp:
            raise ValueError("`collapsed=False` (the uncollapsed SVI baseline) is for the finite HMM: pass hdp=False.")
        if not (isinstance(transition_prior, (int, float)) and math.isfinite(transition_prior) and transition_prior > 0):
            raise ValueError(f"`transition_prior` must be a positive number, got {transition_prior!r}.")
        self._transition_prior = float(transition_prior)
        self._spec: Optional[ModelSpec] = None
        self._config: Optional[SCVIConfig] = None
        self._emission = None
        self._capacity = None
        self._cache = {}

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check_int(name, value):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        return int(value)

    @staticmethod
    def _check_step_size(step_size):
        if step_size is None:
            return RobbinsMonro(1.0, 0.5)
        if isinstance(step_size, RobbinsMonro):
            tau, kappa = float(step_size.tau), float(step_size.kappa)
            if not (0.0 <= kappa <= 1.0):
                raise ValueError(f"`step_size`: the forgetting rate kappa must be in [0, 1], got {kappa}.")
            if not (tau >= 1.0 or (kappa == 0.0 and tau > 0)):
                raise ValueError(f"`step_size`: tau must be >= 1 so that rho_0 = tau^-kappa <= 1, got {tau}.")
            return RobbinsMonro(tau, kappa)
        if isinstance(step_size, (int, float)) and not isinstance(step_size, bool):
            if not (0.0 < step_size <= 1.0):
                raise ValueError(f"`step_size` must be in (0, 1] when constant, got {step_size}.")
            return _Constant(float(step_size))
        if callable(step_size):
            return step_size
        raise ValueError(f"`step_size` must be RobbinsMonro(tau, kappa), a number in (0, 1] or a callable, got {step_size!r}.")

    # ------------------------------------------------------------------ discovery
    @property
    def spec(self) -> Optional[ModelSpec]:
        """The model's :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelSpec` (after :meth:`init`)."""
        return self._spec

    @property
    def config(self) -> Optional[SCVIConfig]:
        """The :class:`SCVIConfig` of the pure core (after :meth:`init`)."""
        return self._config

    @property
    def emission(self):
        """The emission family found by :meth:`init`, with the model's hyperparameters (the family
        whose statistics the state holds; the ``emission`` argument of :func:`scvi_update`)."""
        return self._emission

    def _check_spec(self, spec: ModelSpec, emission) -> None:
        name = "CollapsedSVI"
        if not emission.conjugate:
            what = ("custom emissions: their parameters are sites of your model, which CollapsedSVI cannot integrate "
                    "out (use an MCMC kernel)" if not spec.owns_parameters else
                    "it has no closed-form posterior given expected statistics (DP-mixture emissions are not supported "
                    "by CollapsedSVI; use an MCMC kernel, or a conjugate family)")
            raise NotImplementedError(f"{name}: the emission family {spec.family} is not conjugate: {what}.")
        hyper = spec.hyper
        for role in ("kappa", "c", "rho"):
            site = getattr(hyper, role)
            if site is not None:
                raise NotImplementedError(
                    f"{name}: site '{site}' ({'kappa' if role == 'kappa' else 'alpha + kappa' if role == 'c' else 'kappa / (alpha + kappa)'}) "
                    "is random; CollapsedSVI supports a constant kappa only (gamma and alpha may be Gamma-prior sites).")
        if hyper.dp_concentration is not None:
            raise NotImplementedError(f"{name}: DP-mixture emissions are not supported.")
        if hyper.emission_base is not None:
            raise NotImplementedError(
                f"{name}: site '{hyper.emission_base}' is a shared emission base (a Dirichlet site the categorical "
                "emission's concentration is proportional to), which has no variational update here; fix it to a "
                "constant (e.g. its posterior mean from an MCMC kernel, which all update it exactly).")
        if spec.inner_sites:
            reasons = {u.site: u.reason for u in spec.plan if u.update == "inner"}
            listed = "; ".join(f"'{s}' ({reasons.get(s, '')})" for s in spec.inner_sites)
            raise NotImplementedError(
                f"{name}: these latent sites have no variational update: {listed}. CollapsedSVI updates the HDP-HMM's "
                "sites and gamma / alpha sites with Gamma priors; fix the others to constants.")

    def _discover(self, args, kwargs):
        arrays, rebuild, key = _array_leaves(args, kwargs)
        cached = self._cache.get(("spec", key)) if key is not None else None
        if cached is not None:
            return cached
        spec = discover(self.model, args, kwargs, kernel="CollapsedSVI", own_dp_concentration=False, hyperparameters="auxiliary",
                        describe={"beta": "variational Beta sticks q(pi_tilde) (Wang & Blunsom eqs. 13-14)",
                                  "trans": "integrated out: expected transition counts (eqs. 9, 11)",
                                  "states": "q(z^n) by forward-backward under the surrogate HMM (eqs. 9-10)",
                                  "params": "integrated out: expected sufficient statistics (eqs. 10, 12)"})
        if key is not None:
            self._cache[("spec", key)] = spec
        return spec

    def _states_shape(self, args, kwargs):
        """Shape of the states site at these arguments (abstract evaluation, cached)."""
        arrays, rebuild, key = _array_leaves(args, kwargs)
        if key is not None and ("states", key) in self._cache:
            return self._cache[("states", key)]
        site = self._spec.sites.states

        def states(arrs):
            a, kw = rebuild(arrs)
            tr = handlers.trace(handlers.seed(self.model, 0)).get_trace(*a, **kw)
            return tr[site]["value"]

        shape = jax.eval_shape(states, arrays).shape
        if key is not None:
            self._cache[("states", key)] = shape
        return shape

    def _view(self, args, kwargs):
        """The model's view (concentrations, emission, data) at these arguments, compiled (the
        compiled function is cached on the arguments' structure and shapes)."""
        arrays, rebuild, key = _array_leaves(args, kwargs)
        fn = self._cache.get(("view", key)) if key is not None else None
        if fn is None:
            values = {self._spec.sites.states: jnp.zeros(self._states_shape(args, kwargs), jnp.int32)}
            spec = self._spec

            def view(arrs):
                a, kw = rebuild(arrs)
                return model_view(self.model, spec, a, kw, values)

            fn = jax.jit(view) if arrays else view
            if key is not None:
                self._cache[("view", key)] = fn
        return fn(arrays)

    # ------------------------------------------------------------------ init / update / run
    def init(self, rng_key, *args, **kwargs) -> CollapsedSVIState:
        """Discover the model on ``args``/``kwargs`` (the data set, or its first minibatch with
        ``num_sequences=``), then the initial state (:func:`scvi_init`) from a random minibatch."""
        spec = self._discover(args, kwargs)
        self._spec = spec
        capacity = spec.capacity
        K = capacity if self._num_states is None else self._num_states
        if K > capacity:
            raise ValueError(f"`num_states` must be at most the model's max_states={capacity}, got {K}.")
        view = self._view(args, kwargs)
        emission = view.emission
        self._check_spec(spec, emission)
        available = int(view.data.lengths.shape[0])
        N = self._num_sequences or available
        M = self._batch_size or N
        if M > N:
            raise ValueError(f"`batch_size` must be at most the number of sequences N={N}, got {M}.")
        L = self._hdp_batch_size or max(M, (min(10000, N) // M) * M)
        if L < M or L % M:
            raise ValueError(f"`hdp_batch_size` must be a multiple of batch_size={M}, got {L}.")
        hyper, priors = view.hyper, view.priors
        constant = lambda v: float(np.asarray(v))
        try:
            kappa = constant(hyper.kappa)
            alpha = None if spec.hyper.alpha is not None else constant(hyper.alpha)
            gamma = None if spec.hyper.gamma is not None else constant(hyper.gamma)
        except (TypeError, jax.errors.ConcretizationTypeError) as err:
            raise NotImplementedError("CollapsedSVI: gamma, alpha and kappa must be constants or Gamma-prior sites.") from err
        to_float = lambda p: None if p is None else (constant(p[0]), constant(p[1]))
        config = SCVIConfig(
            num_states=K, hdp=self._hdp, collapsed=self._collapsed, kappa=kappa,
            transition_prior=self._transition_prior, step_size=self._step_size, hdp_every=L // M,
            alpha=alpha, gamma=gamma, priors=cvi.HDPPriors(alpha=to_float(priors.alpha), gamma=to_float(priors.gamma)))
        self._config, self._emission, self._capacity = config, emission, capacity
        k_pick, k_init = random.split(rng_key)
        take = min(M, available)
        idx = random.choice(k_pick, available, (take,), replace=False) if take < available else jnp.arange(available)
        batch = self._gather(view.data, idx)
        return jax.jit(scvi_init, static_argnums=(3,))(k_init, batch, emission, config, N)

    @staticmethod
    def _gather(data: SequenceData, idx) -> SequenceData:
        return SequenceData(y=None, x=jax.tree_util.tree_map(lambda a: a[idx], data.x), valid=data.valid[idx],
                            lengths=data.lengths[idx])

    def _require_init(self):
        if self._config is None:
            raise RuntimeError("CollapsedSVI: call init(...) (or run(...)) first.")

    def update(self, state: CollapsedSVIState, *args, **kwargs):
        """One update on the minibatch given as the model's arguments (``obs`` of shape ``(M, T, ...)``,
        the sequences of one minibatch, each standing for ``N / M`` sequences): ``(state, loss)``
        (:func:`scvi_update`).  The emission prior is the one found by :meth:`init` (statistics belong
        to the family that computed them)."""
        self._require_init()
        arrays, rebuild, key = _array_leaves(args, kwargs)
        fn = self._cache.get(("update", key, self._config)) if key is not None else None
        if fn is None:
            values = {self._spec.sites.states: jnp.zeros(self._states_shape(args, kwargs), jnp.int32)}
            spec, config = self._spec, self._config

            def step(state, emission, arrs):
                a, kw = rebuild(arrs)
                data = model_view(self.model, spec, a, kw, values).data
                data = SequenceData(None, data.x, data.valid, data.lengths)
                return scvi_update(state, Minibatch(data, state.num_sequences / data.lengths.shape[0]), emission, config,
                                   self.sharding)

            fn = jax.jit(step)
            if key is not None:
                self._cache[("update", key, self._config)] = fn
        return fn(state, self._emission, arrays)

    def _run_fn(self, plan, scan_length: Optional[int]):
        """The compiled body of :meth:`run` for a stratification ``plan`` (:func:`length_strata`):
        in stratum ``b``, minibatch ``n`` takes block ``n mod B_b`` of the permutation of its epoch
        ``n // B_b`` (``B_b = N_b // M_b``; the last ``N_b mod M_b`` sequences of each permutation
        wait for the next epoch), all on device."""
        config = self._config
        key = ("run", tuple((s.num_sequences, s.batch_size, s.width) for s in plan), scan_length, config)
        if key in self._cache:
            return self._cache[key]

        def order(state, b, epoch, size):
            return random.permutation(random.fold_in(random.fold_in(state.rng_key, b), epoch), size)

        def body(carry, strata, emission):
            state, perms = carry
            groups, new_perms = [], []
            for b, (stratum, data) in enumerate(zip(plan, strata)):
                n_b, m_b = stratum.num_sequences, stratum.batch_size
                perm = perms[b]
                if m_b < n_b:
                    epoch, block = jnp.divmod(state.step, n_b // m_b)
                    perm = lax.cond(block == 0, lambda: order(state, b, epoch, n_b), lambda: perm)
                    data = self._gather(data, lax.dynamic_slice_in_dim(perm, block * m_b, m_b))
                new_perms.append(perm)
                groups.append(Minibatch(data, jnp.asarray(n_b / m_b, state.transition_counts.dtype)))
            state, loss = scvi_update(state, tuple(groups), emission, config, self.sharding)
            return (state, tuple(new_perms)), loss

        def first(state):
            return tuple(order(state, b, state.step // max(s.num_sequences // s.batch_size, 1), s.num_sequences)
                         for b, s in enumerate(plan))

        if scan_length is None:
            fn = (jax.jit(first), jax.jit(body))
        else:
            fn = (jax.jit(first), jax.jit(lambda carry, strata, emission: lax.scan(
                lambda c, _: body(c, strata, emission), carry, None, length=scan_length)))
        self._cache[key] = fn
        return fn

    def run(self, rng_key, num_steps: int, *args, progress_bar: bool = True, init_state: Optional[CollapsedSVIState] = None,
            tol: Optional[float] = None, **kwargs) -> SVIRunResult:
        """``num_steps`` updates over minibatches of about ``batch_size`` sequences of the data ``args``
        / ``kwargs`` (every sequence once per pass of about ``N / M`` updates, in a fresh random order
        each pass): ``SVIRunResult(params, state, losses)`` like :meth:`numpyro.infer.SVI.run`,
        ``losses`` the negative ELBO estimates of :func:`scvi_update`.

        Minibatches are stratified by length (:func:`length_strata`, ``length_strata=`` of the
        constructor): each stratum of similar lengths, padded to its own width, contributes
        ``M_b ~ M N_b / N`` sequences weighted by ``N_b / M_b``, so that sentences of 20 words are not
        padded to the longest one.  With ``progress_bar`` a compiled update per step (``tqdm``, as
        ``SVI.run``), otherwise one ``lax.scan``.  ``init_state`` continues a previous run (the
        order of the minibatches continues too).

        ``tol`` (stopping rule): run pass by pass (``ceil(N / M)`` updates, one compiled chunk each)
        and stop, before ``num_steps``, after the first pass whose mean loss changed by less than
        ``tol`` relative to the previous pass's (:meth:`convergence`); the result holds the updates
        made.  The chunks continue one another exactly (the same updates as one run)."""
        if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
            raise ValueError(f"`num_steps` must be a positive integer, got {num_steps!r}.")
        if tol is not None:
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (tol > 0 and math.isfinite(tol)):
                raise ValueError(f"`tol` must be a positive number (a relative change of the loss per pass), got {tol!r}.")
            return self._run_until(rng_key, int(num_steps), args, kwargs, progress_bar, init_state, float(tol))
        if init_state is None or self._config is None:
            fresh = self.init(rng_key, *args, **kwargs)
            state = fresh if init_state is None else init_state
        else:
            state = init_state
        view = self._view(args, kwargs)
        data = view.data
        N = int(data.lengths.shape[0])
        if int(np.asarray(state.num_sequences)) != N:
            raise ValueError(f"run: the data hold {N} sequences but the state was built for "
                             f"num_sequences={int(np.asarray(state.num_sequences))}; use update() for streaming.")
        plan = length_strata(np.asarray(data.lengths), self._batch_size or N, data.valid.shape[1],
                             self._max_strata)
        strata = tuple(SequenceData(None, jax.tree_util.tree_map(lambda a: a[s.indices, :s.width], data.x),
                                    data.valid[s.indices, :s.width], data.lengths[s.indices]) for s in plan)
        if progress_bar:
            import tqdm.auto as tqdm

            first, body = self._run_fn(plan, None)
            carry = (state, first(state))
            losses = []
            with tqdm.trange(1, num_steps + 1) as bar:
                every = max(num_steps // 20, 1)
                for i in bar:
                    carry, loss = body(carry, strata, self._emission)
                    losses.append(loss)
                    if i % every == 0:
                        losses[i - every:] = jax.device_get(losses[i - every:])
                        avg = sum(losses[i - every:]) / every
                        bar.set_postfix_str(f"init loss: {float(losses[0]):.4f}, avg. loss [{i - every + 1}-{i}]: {avg:.4f}",
                                            refresh=False)
            losses = jnp.stack([jnp.asarray(v) for v in losses])
        else:
            first, scan = self._run_fn(plan, int(num_steps))
            carry, losses = scan((state, first(state)), strata, self._emission)
        state = carry[0]
        return SVIRunResult(self.get_params(state), state, losses)

    def _pass_length(self, state: CollapsedSVIState) -> int:
        N = int(np.asarray(state.num_sequences))
        return max(-(-N // (self._batch_size or N)), 1)

    def _run_until(self, rng_key, num_steps, args, kwargs, progress_bar, init_state, tol):
        """:meth:`run` with the stopping rule ``tol``: one pass per chunk."""
        state, losses, done = init_state, [], 0
        window = None
        while done < num_steps:
            if state is None:
                state = self.init(rng_key, *args, **kwargs)
            window = window or self._pass_length(state)
            chunk = min(window, num_steps - done)
            result = self.run(rng_key, chunk, *args, progress_bar=progress_bar, init_state=state, **kwargs)
            state, done = result.state, done + chunk
            losses.append(np.asarray(result.losses))
            if self.convergence(np.concatenate(losses), window=window, rtol=tol).converged:
                break
        return SVIRunResult(self.get_params(state), state, jnp.asarray(np.concatenate(losses)))

    def convergence(self, result, window: Optional[int] = None, rtol: float = 1e-3) -> "Convergence":
        """Convergence report of a run (:class:`Convergence`): the mean loss (negative ELBO
        estimate) of the last ``window`` updates (default: one pass, ``ceil(N / M)`` updates)
        against the ``window`` before, converged when the relative change is below ``rtol``; and
        the states in use, those whose expected share of the steps (the columns of ``E[C]``) is
        at least 1%.  ``result``: the ``SVIRunResult`` of :meth:`run`, or an array of losses (no
        state count then)."""
        losses = np.asarray(getattr(result, "losses", result), float)
        state = getattr(result, "state", None)
        if window is None:
            window = self._pass_length(state) if isinstance(state, CollapsedSVIState) else max(losses.size // 10, 1)
        window = max(int(window), 1)
        change = float("nan")
        if losses.size >= 2 * window:
            last, before = losses[-window:].mean(), losses[-2 * window:-window].mean()
            change = abs(last - before) / max(abs(before), np.finfo(float).tiny)
        used = None
        if isinstance(state, CollapsedSVIState):
            share = np.asarray(state.transition_counts).sum(0)
            share = share / max(share.sum(), np.finfo(float).tiny)
            used = int(np.sum(share >= 0.01))
        return Convergence(bool(change < rtol), change, window, int(losses.size), used, float(rtol))

    # ------------------------------------------------------------------ parameters
    def get_params(self, state: CollapsedSVIState) -> dict:
        """The variational parameters: ``transition_counts (K+1, K)`` ``E[C]``, ``emission_stats``
        ``E[t]`` (pytree), ``pseudo_counts (K,)`` (``G[alpha pi_k]``, or the finite HMM's prior),
        ``sticks_u``, ``sticks_v`` ``(K,)`` (``q(pi_tilde_k) = Beta(u_k, v_k)``), ``alpha_shape``,
        ``alpha_rate``, ``gamma_shape``, ``gamma_rate`` (``q(alpha)``, ``q(gamma)``; for a constant
        of the model: the constant and 1)."""
        h = state.hdp
        return {"transition_counts": state.transition_counts, "emission_stats": state.emission_stats,
                "pseudo_counts": h.pseudo_counts, "sticks_u": h.u, "sticks_v": h.v, "alpha_shape": h.alpha_shape,
                "alpha_rate": h.alpha_rate, "gamma_shape": h.gamma_shape, "gamma_rate": h.gamma_rate}

    # ------------------------------------------------------------------ downstream: plug-in HMM
    def _plug_in(self, params, y, lengths, arg):
        self._require_init()
        y, lengths, several = as_sequences(self._emission, y, lengths, arg)
        x, valid = jax.vmap(self._emission.prepare)(y)
        valid = valid & (jnp.arange(y.shape[1]) < lengths[:, None])
        log_init, log_trans, stats = plug_in_hmm(params, self._config)
        ll = self._emission.predictive_log_likelihoods(flatten_time(x), stats).reshape(valid.shape + (-1,))
        return log_init, log_trans, ll, valid, lengths, several

    def state_marginals(self, params, y, lengths=None):
        """``q(z_t = k)`` of any sequence(s) under the fitted surrogate HMM (:func:`plug_in_hmm`; for
        the collapsed variants exactly the local update of eqs. 9-10): ``y (T, ...)`` -> ``(T, K)``,
        ``y (N, T, ...)`` -> ``(N, T, K)`` (padded steps 0)."""
        li, la, ll, valid, lengths, several = self._plug_in(params, y, lengths, "y")
        post = hmm_smoother(li, la, ll, mask=valid, length=lengths)
        out = jnp.exp(post.log_smoothed) * (jnp.arange(valid.shape[1]) < lengths[:, None])[..., None]
        return out if several else out[0]

    def viterbi(self, params, y, lengths=None):
        """The most probable state path under the surrogate HMM (Rabiner eqs. 32-35): ``(T,)`` or
        ``(N, T)``, padded steps copy the last state."""
        li, la, ll, valid, lengths, several = self._plug_in(params, y, lengths, "y")
        paths = hmm_viterbi(li, la, ll, mask=valid, length=lengths)
        return paths if several else paths[0]

    def predictive_log_likelihood(self, params, y_heldout, lengths=None) -> PredictiveLogLikelihood:
        """Held-out predictive log-likelihood under the plug-in HMM (:func:`plug_in_hmm`: posterior-mean
        transitions, posterior-predictive emissions), by the forward algorithm (Rabiner eq. 103), and
        per observed token (the paper's metric, Sec. 3)."""
        li, la, ll, valid, lengths, _ = self._plug_in(params, y_heldout, lengths, "y_heldout")
        per_seq = hmm_filter(li, la, ll, mask=valid, length=lengths).marginal_loglik
        total = jnp.sum(per_seq)
        n = jnp.sum(valid)
        return PredictiveLogLikelihood(total, per_seq, n, total / jnp.maximum(n, 1))

    # ------------------------------------------------------------------ downstream: draws from q
    def _draw_globals(self, rng_key, params):
        """Explicit values of the model's global sites drawn from the variational posterior: ``alpha``
        and ``gamma`` sites from ``q``; ``beta`` from the sticks ``q(pi_tilde)``; the rows from
        ``Dir(alpha beta_k + kappa [j = k] + E[C_jk])`` over the ``K`` represented states (the finite
        HMM: ``Dir(transition_prior + E[C_j])``), zero on the other slots; the emission parameters from
        ``p(theta | E[t_k])``."""
        config, spec, cap = self._config, self._spec, self._capacity
        K = config.num_states
        k_a, k_g, k_b, k_t, k_e = random.split(rng_key, 5)
        dtype = params["transition_counts"].dtype
        out = {}
        alpha = config.alpha
        if spec.hyper.alpha is not None:
            alpha = draw_gamma(k_a, params["alpha_shape"], params["alpha_rate"])
            out[spec.hyper.alpha] = alpha
        if spec.hyper.gamma is not None:
            out[spec.hyper.gamma] = draw_gamma(k_g, params["gamma_shape"], params["gamma_rate"])
        beta = _draw_sticks(k_b, params["sticks_u"], params["sticks_v"], cap).astype(dtype)
        out[spec.sites.beta] = beta
        pseudo = alpha * beta[:K] if config.hdp else jnp.full((K,), config.transition_prior, dtype)
        sticky = jnp.concatenate([jnp.eye(K, dtype=dtype), jnp.zeros((1, K), dtype)], 0)
        conc = pseudo[None, :] + config.kappa * sticky + params["transition_counts"]
        rows = dirichlet(k_t, jnp.maximum(conc, jnp.finfo(dtype).tiny))  # (K+1, K)
        trans = jnp.zeros((cap + 1, cap + 1), dtype)
        trans = trans.at[:K, :K].set(rows[:K]).at[cap, :K].set(rows[K])
        trans = trans.at[K:cap, :K].set(jnp.broadcast_to(rows[K], (cap - K, K)))  # unused slots: never entered
        out[spec.sites.trans] = trans
        stats = jax.tree_util.tree_map(lambda a: jnp.zeros((cap,) + a.shape[1:], a.dtype).at[:K].set(a),
                                       params["emission_stats"])
        theta = self._emission.sample_posterior(k_e, stats)
        out.update({site: theta[p] for p, site in spec.sites.params})
        return out

    @property
    def guide(self):
        """A NumPyro guide drawing every latent site from the variational posterior
        (:meth:`_draw_globals`; the states by forward-filtering backward-sampling given the drawn
        parameters on the observed data).  Its sites are ``Delta`` at the draws: it is for
        ``numpyro.infer.Predictive(model, guide=svi.guide, params=result.params)``, not for
        NumPyro's ELBOs."""
        self._require_init()
        names = ("transition_counts", "emission_stats", "pseudo_counts", "sticks_u", "sticks_v", "alpha_shape",
                 "alpha_rate", "gamma_shape", "gamma_rate")

        def guide(*args, **kwargs):
            params = {n: numpyro.param(n) for n in names}
            if any(v is None for v in params.values()):
                raise ValueError("CollapsedSVI.guide needs the variational parameters: Predictive(model, guide=svi.guide, "
                                 "params=result.params, ...).")
            self._sample_posterior_sites(params, args, kwargs)

        return guide

    def _sample_posterior_sites(self, params, args, kwargs) -> None:
        """The guide's sites: every latent site ``Delta`` at a draw from the variational posterior
        given ``params`` (:meth:`_draw_globals`), and the states (when the model's data are observed)
        by :meth:`_draw_states` given the drawn parameters; NumPyro's ``prng_key`` seeds both."""
        k_glob, k_states = random.split(numpyro.prng_key())
        values = self._draw_globals(k_glob, params)
        with handlers.block():
            tr = handlers.trace(handlers.substitute(handlers.seed(self.model, 0), data=values)).get_trace(*args, **kwargs)
        for site, v in values.items():
            numpyro.sample(site, dist.Delta(v, event_dim=jnp.ndim(v)))
        if tr[self._spec.sites.obs]["is_observed"]:
            states = self._draw_states(k_states, values, tr, args, kwargs)
            numpyro.sample(self._spec.sites.states, dist.Delta(states, event_dim=states.ndim))

    def _draw_states(self, rng_key, values, trace, args, kwargs):
        spec = self._spec
        with handlers.block():
            view = model_view(self.model, spec, args, kwargs, {**values, spec.sites.states: jnp.zeros(
                trace[spec.sites.states]["value"].shape, jnp.int32)})
        cap = self._capacity
        trans = values[spec.sites.trans]
        theta = {p: values[site] for p, site in spec.sites.params}
        data = view.data
        ll = jax.vmap(self._emission.log_likelihoods, in_axes=(0, None))(data.x, theta)
        tiny = jnp.finfo(trans.dtype).tiny
        log_init = jnp.log(jnp.maximum(trans[cap, :cap], tiny))
        log_a = jnp.log(jnp.maximum(trans[:cap, :cap], tiny))
        states, _ = hmm_posterior_sample(rng_key, log_init, log_a, ll, mask=data.valid, length=data.lengths)
        return states if spec.batched else states[0]

    def sample_posterior(self, rng_key, params, *args, num_samples: int = 1, **kwargs) -> dict:
        """``num_samples`` draws of every latent site from the variational posterior on the data
        ``args``/``kwargs`` (:attr:`guide`): a dict like ``mcmc.get_samples()``, so that
        ``Predictive(model, posterior_samples=...)``, :func:`numpyro_hdphmm.viterbi`,
        :func:`~numpyro_hdphmm.diagnostics.predictive_log_likelihood` work as after MCMC."""
        self._require_init()
        draws = Predictive(self.guide, params=params, num_samples=num_samples)(rng_key, *args, **kwargs)
        return {k: v for k, v in draws.items() if k not in params}

    # ------------------------------------------------------------------ ArviZ
    def to_inference_data(self, result: SVIRunResult, *args, num_samples: int = 500, rng_key=None, **kwargs):
        """ArviZ data: ``posterior`` (one chain of ``num_samples`` draws from ``q``,
        :meth:`sample_posterior`) and a group ``variational`` with the variational parameters
        (:meth:`get_params`, the emission statistics one variable per leaf) and ``elbo`` (the ELBO
        estimates of the run, dimension ``step``).  ArviZ 0.x: an ``InferenceData``; ArviZ 1.x
        (``arviz_base``): an ``xarray.DataTree``."""
        import xarray as xr

        rng_key = random.key(0) if rng_key is None else rng_key
        draws = self.sample_posterior(rng_key, result.params, *args, num_samples=num_samples, **kwargs)
        posterior = xr.Dataset({k: (["chain", "draw"] + [f"{k}_dim_{i}" for i in range(np.ndim(v) - 1)],
                                    np.asarray(v)[None]) for k, v in draws.items()})
        variational = {}
        for k, v in result.params.items():
            if k == "emission_stats":
                leaves = jax.tree_util.tree_flatten_with_path(v)[0]
                for path, leaf in leaves:
                    name = "emission_stats_" + "_".join(str(getattr(p, "key", getattr(p, "name", getattr(p, "idx", p))))
                                                        for p in path)
                    variational[name] = ([f"{name}_dim_{i}" for i in range(np.ndim(leaf))], np.asarray(leaf))
            else:
                variational[k] = ([f"{k}_dim_{i}" for i in range(np.ndim(v))], np.asarray(v))
        variational["elbo"] = (["step"], -np.asarray(result.losses))
        variational = xr.Dataset(variational)
        try:
            import arviz as az

            if int(str(az.__version__).split(".")[0]) < 1:
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*variational.*")
                    return az.InferenceData(posterior=posterior, variational=variational)
        except ImportError:
            pass
        return xr.DataTree.from_dict({"posterior": posterior, "variational": variational})


# ================================================================================ NumPyro's SVI
#: name of the ``mutable`` site of :class:`CollapsedGuide` that holds its :class:`CollapsedCarry`
STATE_SITE = "collapsed_svi_state"


class CollapsedCarry(NamedTuple):
    """The mutable state of :class:`CollapsedGuide` (``svi_state.mutable_state[STATE_SITE]``):
    ``state`` (:class:`CollapsedSVIState`) and ``perms`` (per length stratum, the permutation of
    the sequences in the current pass, as carried by :meth:`CollapsedSVI.run`)."""

    state: CollapsedSVIState
    perms: tuple


def _under_substitute() -> bool:
    """Whether a ``substitute`` handler is active (``Predictive(..., params=...)``): there a
    guide whose state was not substituted was given the wrong ``params``."""
    stack = getattr(numpyro.primitives, "_PYRO_STACK", ())
    return any(isinstance(h, handlers.substitute) for h in stack)


class CollapsedGuide:
    r"""Stochastic collapsed VI (Wang & Blunsom 2014) as a guide for :class:`numpyro.infer.SVI`.

    ``SVI(model, CollapsedGuide(model, ...), optim, CollapsedELBO())`` runs exactly the updates of
    :class:`CollapsedSVI` (the same arguments, the same state, the same losses, bit for bit)
    through NumPyro's own loop: ``svi.init``, ``svi.update``, ``svi.stable_update``, ``svi.run``
    (progress bar or ``lax.scan``), ``init_state=`` continuations.  The updates are closed-form
    (eqs. 9-16, Robbins-Monro averages), not gradient steps: the guide has no ``param`` sites, its
    variational statistics are one ``mutable`` site, :data:`STATE_SITE`, that
    :class:`CollapsedELBO` replaces at each update, and ``optim`` is not used (any NumPyro
    optimizer, e.g. ``numpyro.optim.Adam(1e-3)``).

    The arguments are those of :class:`CollapsedSVI` (``num_states``, ``batch_size``,
    ``step_size``, ``hdp``, ``collapsed``, ``transition_prior``, ``hdp_batch_size``,
    ``num_sequences``, ``max_strata``, ``mesh``, ``sequence_axes``).  Given the whole data set
    (the ``N`` sequences the guide was initialized on), one update takes a length-stratified
    minibatch of about ``batch_size`` sequences from it, in a fresh random order each pass (one
    step of :meth:`CollapsedSVI.run`); given fewer sequences (streaming, ``num_sequences=N``), the
    update is on those sequences as one minibatch (:meth:`CollapsedSVI.update`).

    Downstream: :meth:`get_params` (``svi.get_params`` holds no variational parameter, they are
    mutable state), then :meth:`viterbi`, :meth:`state_marginals`,
    :meth:`predictive_log_likelihood`, :meth:`sample_posterior`, :meth:`to_inference_data`, or
    ``Predictive(model, guide=guide, params=guide.get_params(svi_result.state), num_samples=S)``:
    the guide then draws every latent site of the model from ``q`` (:attr:`CollapsedSVI.guide`).
    """

    def __init__(self, model, num_states: Optional[int] = None, batch_size: Optional[int] = None, step_size=None,
                 **options):
        self.fitter = CollapsedSVI(model, num_states, batch_size, step_size, **options)
        self.model = model
        self._plan = None
        self._num_sequences = None

    # ------------------------------------------------------------------ the state
    def init_state(self, rng_key, *args, **kwargs) -> CollapsedCarry:
        """:meth:`CollapsedSVI.init` on the data ``args``/``kwargs``, the length strata of
        :meth:`CollapsedSVI.run` and the first pass's order (what ``svi.init`` stores)."""
        fitter = self.fitter
        state = fitter.init(rng_key, *args, **kwargs)
        data = fitter._view(args, kwargs).data
        N = int(np.asarray(state.num_sequences))
        self._num_sequences = N
        self._plan = None
        perms = ()
        if int(data.lengths.shape[0]) == N:
            self._plan = length_strata(np.asarray(data.lengths), fitter._batch_size or N, data.valid.shape[1],
                                       fitter._max_strata)
            perms = fitter._run_fn(self._plan, None)[0](state)
        return CollapsedCarry(state, tuple(perms))

    def step(self, carry: CollapsedCarry, *args, **kwargs):
        """One update: ``(carry, loss)``.  On the ``N`` sequences of :meth:`init_state`, one step of
        :meth:`CollapsedSVI.run` (the stratified minibatch of this step); on fewer, one
        :meth:`CollapsedSVI.update` with those sequences as the minibatch.  A step whose loss or
        statistics are not finite leaves ``carry`` unchanged and returns a NaN loss (so
        ``svi.stable_update`` skips it, and ``svi.update`` reports it)."""
        fitter = self.fitter
        fitter._require_init()
        shape = fitter._states_shape(args, kwargs)
        count = shape[0] if fitter._spec.batched else 1
        if self._plan is not None and count == self._num_sequences:
            spec = fitter._spec
            values = {spec.sites.states: jnp.zeros(shape, jnp.int32)}
            data = model_view(fitter.model, spec, args, kwargs, values).data
            strata = tuple(SequenceData(None, jax.tree_util.tree_map(lambda a: a[s.indices, :s.width], data.x),
                                        data.valid[s.indices, :s.width], data.lengths[s.indices]) for s in self._plan)
            body = fitter._run_fn(self._plan, None)[1]
            (state, perms), loss = body((carry.state, carry.perms), strata, fitter._emission)
            new = CollapsedCarry(state, tuple(perms))
        else:
            state, loss = fitter.update(carry.state, *args, **kwargs)
            new = CollapsedCarry(state, carry.perms)
        leaves = [a for a in jax.tree_util.tree_leaves((new.state.transition_counts, new.state.emission_stats,
                                                         new.state.hdp)) if jnp.issubdtype(a.dtype, jnp.floating)]
        finite = jnp.isfinite(loss)
        for a in leaves:
            finite = finite & jnp.all(jnp.isfinite(a))
        new = lax.cond(finite, lambda: new, lambda: carry)
        return new, jnp.where(finite, loss, jnp.nan)

    # ------------------------------------------------------------------ the guide
    def __call__(self, *args, **kwargs):
        carry = numpyro.primitives.mutable(STATE_SITE)
        if carry is None:
            if _under_substitute():
                raise ValueError(
                    f"CollapsedGuide: `params` lacks '{STATE_SITE}', the fitted variational state. SVIRunResult.params "
                    "is empty for this guide (its statistics are mutable state, not param sites): pass "
                    "params=guide.get_params(svi_result.state). (SVI.init's init_params does not apply either; "
                    "continue a run with init_state=.)")
            rng_key = numpyro.prng_key()
            if rng_key is None:
                raise ValueError("CollapsedGuide: run it under numpyro.handlers.seed (SVI.init does).")
            with handlers.block():
                carry = self.init_state(rng_key, *args, **kwargs)
            numpyro.primitives.mutable(STATE_SITE, carry)
            return None
        self.fitter._sample_posterior_sites(self.fitter.get_params(carry.state), args, kwargs)
        return None

    # ------------------------------------------------------------------ downstream
    def get_params(self, svi_state) -> dict:
        """The variational parameters of ``svi_state`` (an ``SVIState`` of ``SVI`` with this
        guide, or its ``mutable_state``): :meth:`CollapsedSVI.get_params`, and the whole state
        under :data:`STATE_SITE` (what ``Predictive(model, guide=guide, params=...)`` needs)."""
        mutable = getattr(svi_state, "mutable_state", svi_state)
        if not isinstance(mutable, dict) or STATE_SITE not in mutable:
            raise ValueError("`svi_state` must be the SVIState of SVI(model, CollapsedGuide(...), optim, CollapsedELBO()) "
                             f"(svi_result.state), whose mutable_state holds '{STATE_SITE}'.")
        carry = mutable[STATE_SITE]
        return {**self.fitter.get_params(carry.state), STATE_SITE: carry}

    def _fitter_params(self, params):
        return {k: v for k, v in params.items() if k != STATE_SITE}

    def state_marginals(self, params, y, lengths=None):
        """:meth:`CollapsedSVI.state_marginals` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.state_marginals(self._fitter_params(params), y, lengths)

    def viterbi(self, params, y, lengths=None):
        """:meth:`CollapsedSVI.viterbi` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.viterbi(self._fitter_params(params), y, lengths)

    def predictive_log_likelihood(self, params, y_heldout, lengths=None) -> PredictiveLogLikelihood:
        """:meth:`CollapsedSVI.predictive_log_likelihood` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.predictive_log_likelihood(self._fitter_params(params), y_heldout, lengths)

    def sample_posterior(self, rng_key, params, *args, num_samples: int = 1, **kwargs) -> dict:
        """:meth:`CollapsedSVI.sample_posterior` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.sample_posterior(rng_key, self._fitter_params(params), *args, num_samples=num_samples,
                                            **kwargs)

    def convergence(self, svi_result: SVIRunResult, window: Optional[int] = None, rtol: float = 1e-3) -> Convergence:
        """:meth:`CollapsedSVI.convergence` of the ``SVIRunResult`` of ``svi.run``."""
        state = self.get_params(svi_result.state)[STATE_SITE].state
        return self.fitter.convergence(SVIRunResult(None, state, svi_result.losses), window, rtol)

    def to_inference_data(self, svi_result: SVIRunResult, *args, num_samples: int = 500, rng_key=None, **kwargs):
        """:meth:`CollapsedSVI.to_inference_data` of the ``SVIRunResult`` of ``svi.run``."""
        params = self._fitter_params(self.get_params(svi_result.state))
        result = SVIRunResult(params, svi_result.state, svi_result.losses)
        return self.fitter.to_inference_data(result, *args, num_samples=num_samples, rng_key=rng_key, **kwargs)


class CollapsedELBO(ELBO):
    r"""The loss of :class:`CollapsedGuide` for :class:`numpyro.infer.SVI`: each call makes one
    collapsed update (:meth:`CollapsedGuide.step`) and returns the new state as mutable state,
    ``{"loss": -ELBO estimate, "mutable_state": {STATE_SITE: carry}}`` (the loss is that of
    :func:`scvi_update`: ``-(N/M) sum_B log Z_n + KL(q(pi_tilde) q(alpha) q(gamma) || p)``).  It
    has no gradient: the update is the closed-form Robbins-Monro average, so ``SVI``'s optimizer
    is left idle."""

    can_infer_discrete = True

    def __init__(self):
        super().__init__(num_particles=1)

    def _guide(self, guide):
        if not isinstance(guide, CollapsedGuide):
            raise ValueError(f"CollapsedELBO needs a numpyro_hdphmm.infer.CollapsedGuide as the guide, got "
                             f"{type(guide).__name__}.")
        return guide

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        self._guide(guide)
        raise ValueError(
            "CollapsedELBO: the collapsed objective needs the guide's mutable state, which SVI.evaluate does not "
            "pass; read the losses returned by svi.update / svi.run.")

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        guide = self._guide(guide)
        carry = param_map.get(STATE_SITE)
        if carry is None:
            raise ValueError(f"CollapsedELBO: no '{STATE_SITE}' in the SVI state; call svi.init first.")
        if model is not guide.model:
            raise ValueError("CollapsedELBO: SVI's model must be the model the CollapsedGuide was built with.")
        new, loss = guide.step(carry, *args, **kwargs)
        return {"loss": loss, "mutable_state": {STATE_SITE: new}}
