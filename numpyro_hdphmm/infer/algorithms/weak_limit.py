r"""Blocked Gibbs sampling of the weak-limit (sticky) HDP-HMM: Fox et al., Algorithm 2.

The weak-limit approximation replaces ``beta ~ GEM(gamma)`` by ``beta ~ Dir(gamma/L, ..., gamma/L)``
over ``L = max_states`` states (Fox et al. eqs. 38-41; Ishwaran & Zarepour 2002); the rows are
``pi_j ~ Dir(alpha beta + kappa e_j)`` and the start row ``pi_0 ~ Dir(alpha beta)``.  One sweep
(:func:`step`):

1. ``z | pi, theta, y``: forward filtering, backward sampling over the ``L`` states
   (:func:`numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`; eqs. 43-48 in log space), all
   sequences at once, each with its own key (split over the devices of a mesh with ``mesh=``:
   :mod:`numpyro_hdphmm.infer.plumbing.sharding`);
2. ``theta_k | z, y``: the conjugate posterior of each state (eq. 42), through the family's
   ``update_parameters`` (for :class:`~numpyro_hdphmm.emissions.DPMixture` emissions: component
   indicators ``s | z``, the concentration ``sigma`` when a site carries it, ``psi`` and the
   component parameters, Alg. 4 and eqs. 65-66);
3. the global step given the states (:func:`numpyro_hdphmm._core.crp.sample_global`): tables,
   overrides, informative tables with the rows integrated out (Alg. 1 step 3, eqs. 31-35), the
   exact auxiliary-variable updates of the recognized hyperparameter sites (eqs. 50-56, App. III,
   with the corrections listed in ``docs/errata.md`` ("Sticky HDP-HMM") and the exact weak-limit form of the
   ``gamma`` update, :func:`~numpyro_hdphmm._core.crp.resample_gamma_weak_limit`),
   ``beta | mbar, gamma ~ Dir(gamma/L + mbar_.k)`` (eq. 41) and the rows
   ``pi_j | z, beta ~ Dir(alpha beta + kappa e_j + n_j.)``, start row ``Dir(alpha beta + n_0.)``;

then the kernel's inner kernel (NUTS) updates every other latent site of the model.  The global
step samples (tables, hyperparameters, beta) from their joint conditional with the rows
integrated out and then the rows from their full conditional, which leaves the joint posterior
invariant.

**Split-merge moves** (``split_merge=n``, step 0, before step 1): FFBS moves one state sequence
given the others' parameters, so two labels that describe the same regime (a duplicate state)
merge only through many unlikely intermediate sweeps.  The moves of
:mod:`numpyro_hdphmm.infer.moves.split_merge` (restricted collapsed draw, RCD paper Algs. 9-10 after
Jain & Neal 2000) split or merge whole states in one Metropolis-Hastings step, on the collapsed
seating of the weak-limit model:

a. tables ``(m, w) | z, beta`` with the rows integrated out (the Antoniak counts of step 3;
   :func:`~numpyro_hdphmm.infer.moves.franchise.collapse`): ``(z, m, w, beta)`` is then a posterior draw
   and, forgetting ``beta`` (and the rows and ``theta``), ``(z, m, w)`` is a draw of the
   collapsed posterior ``p(z, m, w | y) ∝ p(y | z) p(z, m, w)`` with ``beta``, the rows and the
   emission parameters integrated out;
b. ``n`` moves that leave it invariant.  With ``beta ~ Dir(gamma/L, ..., gamma/L)`` integrated
   out, the dishes of the informative tables are a Polya urn over the ``L`` labels: a table of
   restaurant ``j`` opened for dish ``k`` has probability ``alpha (mbar_.k + gamma/L) / (mbar.. +
   gamma) / (n_j. + alpha + kappa)`` for every label ``k``, used or not
   (:func:`~numpyro_hdphmm._core.hcrp.root_weights` with ``weak_limit``), and ``p(z, m, w)`` is
   the product of these predictives in any order (exchangeability), so the chain-rule factors
   ``r`` of the move are its ratios, as in the infinite model.  Unlike the infinite model the
   labels are part of the state: a split draws its new label uniformly among the ``F`` free ones,
   the reverse merge is deterministic, so the acceptance ratio gains ``+log F`` for a split and
   ``-log F`` for a merge (``F`` counted after the moved steps are removed;
   :func:`~numpyro_hdphmm.infer.moves.split_merge.log_label_choice`).  Summed over the ``F`` choices,
   ``F (gamma/L) / (mbar.. + gamma)`` is the new-dish mass of the unused labels, the infinite
   model's ``gamma / (mbar.. + gamma)`` as ``L -> inf``;
c. ``beta | m, w ~ Dir(gamma/L + mbar_.k)`` (eq. 41), ``theta | z, y`` from the conjugate
   posterior (unused labels: the prior), then the rows ``pi_j | z, beta ~ Dir(alpha beta + kappa
   e_j + n_j.)``: every draw from its full conditional, so the block a-c leaves the joint
   posterior of ``(z, beta, pi, theta)`` invariant
   (:func:`~numpyro_hdphmm.infer.moves.split_merge.split_merge_explicit`, shared with
   :class:`~numpyro_hdphmm.infer.BeamSampler`).

The emission parameters are integrated out in the moves, which needs the family's collapsed
statistics (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.collapsed_statistics`): every
conjugate family and DP mixtures of them; custom emissions keep their parameters explicit (the
moves are then given the parameters); a family without either raises ``NotImplementedError``.

The algorithm's state is :class:`~numpyro_hdphmm.infer.contract.Explicit` (every site explicit).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import random
from numpyro.primitives import Messenger

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.hmm import hmm_posterior_sample_fast
from numpyro_hdphmm._core.slots import used_slots
from numpyro_hdphmm.distributions import GEM, WeakLimitBeta
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.moves.global_step import explicit_given_states
from numpyro_hdphmm.infer.moves.semi_markov import sample_semi_markov_rows, semi_markov_sweep
from numpyro_hdphmm.infer.moves.slds import slds_sweep
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences, sequence_keys
from numpyro_hdphmm.infer.moves.split_merge import check_split_merge, split_merge_explicit
from numpyro_hdphmm.models.base import HDP_ROLE

__all__ = ["WeakLimitGibbs", "WeakLimit", "WeakLimitInfo", "weak_limit"]


class _WeakLimitPrior(Messenger):
    """Effect handler replacing ``GEM`` at the ``{name}_beta`` site by ``WeakLimitBeta``."""

    def process_message(self, msg):
        if (
            msg["type"] == "sample"
            and (msg.get("infer") or {}).get(HDP_ROLE) == "beta"
            and isinstance(msg["fn"], GEM)
        ):
            msg["fn"] = WeakLimitBeta(msg["fn"].concentration, msg["fn"].truncation)


def weak_limit(model):
    """The model with ``{name}_beta ~ GEM(gamma, L)`` replaced by the weak-limit prior
    ``WeakLimitBeta(gamma, L) = Dir(gamma/L)`` (Fox et al. eq. 39).

    :class:`WeakLimitGibbs` samples ``weak_limit(model)`` (its ``model`` property).  When composing
    it with other kernels in :class:`numpyro.infer.Gibbs`, build every block on the same
    ``m = weak_limit(model)`` so that all of them target the same posterior.  Idempotent:
    ``weak_limit(weak_limit(model))`` is ``weak_limit(model)``.
    """
    return model if isinstance(model, _WeakLimitPrior) else _WeakLimitPrior(model)


class WeakLimitInfo(NamedTuple):
    """Per-sweep diagnostics: ``overflow`` (every one of the ``L`` states occupied: the
    approximation had no free state left; or a split-merge move's table count overflowed),
    ``ffbs_ok`` (False in the rare sweep where the rescaled FFBS underflowed and the states were
    kept), ``split_merge_accept`` (the fraction of the sweep's split-merge moves accepted; NaN
    without them) and, for an HDP-HSMM (:mod:`numpyro_hdphmm.infer.moves.semi_markov`),
    ``duration_accept`` (the fraction of states whose duration parameters moved; NaN for the HMM
    and for durations the inner kernel updates) and ``at_max_duration`` (a segment lasted
    ``max_duration`` steps: the truncation may bind; always False for the HMM)."""

    overflow: jax.Array
    ffbs_ok: jax.Array
    split_merge_accept: jax.Array
    duration_accept: jax.Array
    at_max_duration: jax.Array


def _ffbs_rows(emission):
    """The per-sequence half of step 1 for :func:`~numpyro_hdphmm.infer.plumbing.sharding.map_sequences`:
    ``((keys (n,), x (n, T, ...), valid (n, T), lengths (n,)), ((log_init (L,), log_a (L, L)),
    params)) -> (states (n, T), ok (n,))``, the ``(T, L)`` log-likelihoods and FFBS of each
    sequence with its own key (the keys :func:`~numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`
    splits for a batch, so the draws are those of the batched call)."""

    def ffbs(rows, shared):
        keys, x, valid, lengths = rows
        (log_init, log_a), params = shared
        log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(x, params)
        one = lambda key, ll, m, n: hmm_posterior_sample_fast(key, log_init, log_a, ll, mask=m, length=n)
        states, _, ok = jax.vmap(one)(keys, log_lik, valid, lengths)
        return states, ok

    return ffbs


class WeakLimit(Algorithm):
    """Fox et al. Alg. 2 on the contract of :mod:`numpyro_hdphmm.infer.plumbing.adapter` (module docstring).

    ``split_merge``: split-merge moves per sweep (step 0; 0: none).  ``sharding``
    (:class:`~numpyro_hdphmm.infer.plumbing.sharding.SequenceSharding`): where step 1 runs (default
    unsharded).  ``marginal_modes``: on an HDP-SLDS with order-1 dynamics, one more sweep of the
    modes with the latent path integrated out (:func:`numpyro_hdphmm.infer.moves.slds.slds_sweep`)."""

    def __init__(self, split_merge: int = 0, sharding: Optional[SequenceSharding] = None,
                 marginal_modes: bool = False):
        self.split_merge = check_split_merge(split_merge)
        self.sharding = SequenceSharding() if sharding is None else sharding
        if not isinstance(marginal_modes, bool):
            raise ValueError(f"`marginal_modes` must be True or False, got {marginal_modes!r}.")
        self.marginal_modes = marginal_modes
        if marginal_modes:
            self.describe = {**self.describe, "slds:states": self.describe["slds:states"] + (
                "; then single-site updates with the latent path integrated out (Gerlach, Carter & Kohn 2000; "
                "marginal_modes=True, order-1 dynamics)")}

    name = "WeakLimitGibbs"
    model_classes = ("hmm", "hsmm", "slds")
    beta_prior = "weak_limit"
    temperable = True
    owns_column_precision = True
    Info = WeakLimitInfo
    describe = {
        "beta": "Dirichlet given the informative tables, Dir(gamma/L + mbar) (Fox et al. Alg. 2, eq. 41)",
        "trans": "Dirichlet rows given the transition counts (Fox et al. eq. 41)",
        "states": "forward filtering, backward sampling over the L states (Fox et al. eqs. 43-48)",
        "params": "conjugate posterior given the states (Fox et al. eq. 42; DP mixtures: Alg. 4)",
        "hsmm:beta": "Dirichlet given the segment tables and the auxiliary counts s (moves.semi_markov, step 4)",
        "hsmm:trans": "off-diagonal Dirichlet given the segment transitions, self-transition from its Beta prior",
        "hsmm:states": "HSMM backward messages and forward sampling of the segments (Johnson & Willsky 2013)",
        "hsmm:duration": "censored durations completed, conjugate proposal, MH for the max_duration truncation",
        "hsmm:alpha": "Gamma given the segment tables and the Beta auxiliaries r (moves.semi_markov, step 4)",
        "hsmm:gamma": "weak-limit auxiliary-variable update given the dish counts m + s (moves.semi_markov)",
        "slds:states": "FFBS over the L modes given the latent path (the HDP-AR-HMM of x; Fox et al. 2011, Sec. IV)",
        "slds:params": "MNIW conditional of the dynamics given the modes and the latent path",
        "slds:latent": "Kalman filter and backward sampler given the modes and the parameters (moves.slds)",
        "slds:observation": "conjugate update of C, R given the latent path (missing values imputed; moves.slds)",
    }

    def transform_model(self, model):
        return weak_limit(model)

    def resume(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView) -> Explicit:
        """After the inner kernel: the rows redrawn from their conditional (the HMM's,
        :meth:`Algorithm.resume`; the HDP-HSMM's from the segment transitions,
        :func:`~numpyro_hdphmm.infer.moves.semi_markov.sample_semi_markov_rows`)."""
        if spec.sites.kind != "hsmm":
            return super().resume(rng_key, state, spec, view)
        capacity = spec.capacity
        n, first = crp.transition_counts(state.states, capacity, view.data.lengths)
        n = n * (1 - jnp.eye(capacity, dtype=n.dtype))
        trans = sample_semi_markov_rows(rng_key, state.beta, jnp.asarray(view.hyper.alpha, state.beta.dtype), n, first)
        return state._replace(trans=trans.astype(state.trans.dtype))

    def check(self, spec: ModelSpec) -> None:
        super().check(spec)
        if spec.sites.kind == "hsmm" and self.split_merge:
            raise NotImplementedError(
                f"{self.name}(split_merge={self.split_merge}): the split-merge moves are written for the HDP-HMM; on the "
                "HDP-HSMM use split_merge=0 (the default).")

    def step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """One sweep (steps 0-3 of the module docstring; for an HDP-HSMM the sweep of
        :mod:`numpyro_hdphmm.infer.moves.semi_markov`; for an HDP-SLDS steps 0-3 on the latent path,
        then the latent path and the observation parameters, :mod:`numpyro_hdphmm.infer.moves.slds`):
        ``(Explicit, WeakLimitInfo)``."""
        if spec.sites.kind == "hsmm":
            explicit, info = semi_markov_sweep(rng_key, state, spec, view, self.sharding)
            return explicit, WeakLimitInfo(info.overflow, info.ffbs_ok, jnp.array(jnp.nan, state.beta.dtype),
                                           info.duration_accept, info.at_max_duration)
        if spec.sites.kind == "slds":
            return slds_sweep(self._hmm_step, rng_key, state, spec, view, marginal_modes=self.marginal_modes)
        return self._hmm_step(rng_key, state, spec, view)

    def _hmm_step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """Steps 0-3 of the module docstring on ``view.data`` (for an HDP-SLDS: the latent path)."""
        capacity = spec.capacity
        k_z, k_theta, k_global = random.split(rng_key, 3)
        emission, data = view.emission, view.data
        # 0. split-merge moves on the collapsed weak-limit seating, then beta, theta, rows given them
        state, split_merge_accept, split_overflow = split_merge_explicit(rng_key, state, view, self.split_merge,
                                                                         self.name, weak_limit=True)
        # 1. states: FFBS over L states, every sequence at once (split over the devices of
        # ``self.sharding``); a sweep whose rescaled pass underflows keeps the states (the decision
        # depends only on the conditioning values)
        trans = state.trans
        log_trans = (jnp.log(trans[capacity, :capacity]), jnp.log(trans[:capacity, :capacity]))
        rows = (sequence_keys(k_z, data.lengths.shape[0]), data.x, data.valid, data.lengths)
        new_states, ok = map_sequences(_ffbs_rows(emission), rows, (log_trans, state.params), self.sharding)
        ffbs_ok = jnp.all(ok)
        states = jnp.where(ffbs_ok, new_states, state.states)
        # 2-3. emission parameters from their conjugate posteriors; tables, hyperparameters, beta, rows
        # (one cycle of the O(L^2) (alpha, kappa) update: this sweep is cheap enough that two more
        # would add about 30% per sweep, docs/benchmarks.md, "Hyperparameter mixing")
        explicit = explicit_given_states(k_theta, k_global, spec, view, states, state.beta, state.params,
                                         weak_limit=True, hyper_cycles=1, gamma_cycles=3)
        overflow = jnp.all(used_slots(states, data.lengths, capacity)) | split_overflow
        return explicit, WeakLimitInfo(overflow, ffbs_ok, split_merge_accept, jnp.array(jnp.nan, state.beta.dtype),
                                       jnp.array(False))


class WeakLimitGibbs(HDPKernel):
    r"""Blocked Gibbs sampler of the weak-limit (sticky) HDP-HMM (Fox et al., Algorithm 2).

    Samples ``weak_limit(model)``: the user's model with ``beta ~ Dir(gamma/L)`` over
    ``L = max_states`` states (every slot is a state of the approximation; ``num_states``
    reports how many are occupied).  Every emission family of :mod:`numpyro_hdphmm.emissions`
    and several sequences (``obs`` of shape ``(N, T, ...)`` with ``lengths``) are supported.
    Hyperparameter sites with the priors of :mod:`numpyro_hdphmm._core.crp` get exact updates;
    every other latent site is updated by ``inner_kernel`` (NUTS by default); the update plan
    says which (:meth:`~numpyro_hdphmm.infer.plumbing.adapter.HDPKernel.update_plan`).

    Collected fields: ``z`` (all latent sites), ``num_states``, ``lp`` (log joint of the
    weak-limit model), ``accept_prob`` and ``diverging`` of the inner kernel, and the sweep's
    diagnostics (:class:`WeakLimitInfo`): ``overflow`` (True in a sweep whose states occupy all
    ``L`` slots: the approximation then had no free state, so increase ``max_states``; a
    ``RuntimeWarning`` says so) and ``ffbs_ok``.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param mesh: a :class:`jax.sharding.Mesh` to split the sequences over (``None``, the default:
        unsharded).  Each device computes the log-likelihoods and the FFBS of its block of
        sequences; the statistics are reduced over the mesh and the global update is made once
        (:mod:`numpyro_hdphmm.infer.plumbing.sharding`, ``docs/scaling.md``).  Keys are per sequence, so the
        draws are those of the unsharded kernel for the same key.
    :param sequence_axes: the mesh axes the sequences are split over (default: all of them but
        ``chain_axis``).
    :param chain_axis: a mesh axis to split vectorized chains over (``MCMC(..., num_chains=C,
        chain_method="vectorized")``, ``C`` a multiple of its size): chains x sequences on one mesh
        (``docs/scaling.md``).  Default: none (each device runs its sequences of every chain).
    :param split_merge: split-merge moves per sweep (0, the default: none).  ``n > 0`` adds ``n``
        moves at the start of every sweep (module docstring, step 0): the collapsed moves of
        :mod:`numpyro_hdphmm.infer.moves.split_merge` (shared with ``RCDSampler``,
        ``DirectAssignmentGibbs`` and ``BeamSampler``) on the weak-limit model's collapsed
        seating, exact for the weak-limit posterior, so that two labels holding one regime can
        merge (and one label holding two regimes split) in one step; their acceptance rate is the
        collected field ``split_merge_accept``.  It needs a family with collapsed statistics
        (every conjugate family, DP mixtures; custom emissions move given their parameters).
        Each move costs ``O(T)`` sequential work (``docs/benchmarks.md``, "Split-merge").
    :param marginal_modes: HDP-SLDS with order-1 dynamics only: after the modes given the latent
        path, one more sweep of single-site updates of the modes with the latent path integrated
        out (Gerlach, Carter & Kohn 2000; the sampler Fox et al. 2011 use), exact, ``O(T K D^3)``
        sequential work: about 4x the sweep at ``T = 2000``, ``K = 10``, ``D = 4`` (``docs/slds.md``).
        Default ``False``.
    """

    algorithm = WeakLimit()

    def __init__(self, model, split_merge: int = 0, *, mesh=None, sequence_axes=None, chain_axis=None,
                 marginal_modes: bool = False, **options):
        sharding = SequenceSharding.from_arguments(mesh, sequence_axes, chain_axis)
        super().__init__(model, WeakLimit(split_merge, sharding, marginal_modes), **options)
