r"""Direct-assignment (Rao-Blackwellized) Gibbs sampling of the infinite (sticky) HDP-HMM.

The sampler of Teh et al. (2006) with the sticky modifications of Fox et al. (Algorithm 1): the
transition rows ``pi`` and (for conjugate families) the emission parameters ``theta`` are
integrated out; the global weights ``beta`` are explicit over the instantiated states plus the
remaining mass ``beta_rem`` of all others.  One sweep:

1. for each step ``t`` in turn (one jitted ``lax.fori_loop`` over the steps of every sequence, padding skipped, ``O(K)``
   work per step): remove ``z_t`` from the transition counts and from its state's emission
   statistics; draw ``z_t`` from the sticky predictive (Fox et al. eq. 37, with the start row
   ``Dir(alpha beta)`` for a sequence's first step and without the outgoing factor for its last)
   times the emission posterior predictive (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.log_predictive`);
   a new state takes ``alpha beta_rem`` (times ``alpha beta_{z_{t+1}} / (alpha + kappa)``) with
   the prior predictive and, when drawn, is instantiated in a free slot by splitting the stick:
   ``b ~ Beta(1, gamma)``, ``beta_new = b beta_rem``, ``beta_rem <- (1 - b) beta_rem``; a state
   left empty is freed at once and its weight returns to ``beta_rem``;
2. the states are relabelled by first appearance (free slots last);
3. tables ``m``, overrides ``w`` and informative tables ``mbar`` (Alg. 1 step 3, eqs. 31-35);
4. exact auxiliary-variable updates of the recognized hyperparameter sites; ``gamma`` with the
   (corrected) Escobar-West update of eqs. 54-56 with ``Kbar`` the number of dishes with an
   informative table;
5. ``beta | mbar, gamma ~ Dir(mbar_.1, ..., mbar_.K, gamma)`` over (instantiated, rest) (eq. 30);

With DP-mixture emissions (:class:`~numpyro_hdphmm.emissions.DPMixture`, Fox et al. Alg. 3)
each step also draws the component ``s_t`` of the chosen state, the mixture weights and the
components being integrated out too (:class:`~numpyro_hdphmm.emissions.dp_mixture.MixtureStatistics`); after the sweep the
mixture concentration (when it is a recognized Gamma-prior site), the weights and the
components are drawn given the indicators.

and, for the recorded sample only, the rows ``pi_j | z, beta ~ Dir(alpha beta + kappa e_j +
n_j.)`` (start row ``Dir(alpha beta + n_0.)``, the last column being the mass of the
uninstantiated states) and the emission parameters from their conjugate posteriors.  Steps 3-5
and the rows are the global step shared by every explicit-``beta`` sampler
(:func:`numpyro_hdphmm._core.crp.sample_global`).  Then the inner kernel (NUTS) updates every
other latent site of the model.

The emission statistics come from the family (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.collapsed_statistics`,
:mod:`numpyro_hdphmm.emissions.collapsed`), so this module never looks at a family's type.

Emissions without a conjugate prior (:class:`~numpyro_hdphmm.emissions.CustomEmission`) are not
integrated out: step 1 then uses their likelihoods under the current parameters (a new state
takes a free slot's parameters, Neal's (2000) Algorithm 8, see
:class:`~numpyro_hdphmm.emissions.custom.ExplicitLikelihoods`), step
2 is skipped and the inner kernel updates the parameters, which are the user's sample sites.

The model is sampled as written (``beta ~ GEM(gamma)``): ``max_states`` is only a capacity.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.hcrp import StepLayout, step_layout, steps_in_range
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.slots import canonical_order
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.collapsed import row_of
from numpyro_hdphmm.infer.contract import Algorithm, Explicit, flatten_time
from numpyro_hdphmm.infer.moves.global_step import hyper_site_values
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.moves.emission_base import sample_emission_base
from numpyro_hdphmm.infer.moves.split_merge import SPLIT_MERGE_STREAM, check_split_merge, split_merge_given_beta

__all__ = ["DirectAssignmentGibbs", "DirectAssignment", "DirectAssignmentInfo", "StepLayout", "step_layout",
           "assignment_sweep"]


class AssignmentSweep(NamedTuple):
    """Result of :func:`assignment_sweep`: ``states (N, T)``, ``beta (K+1,)``, the emission
    strategy's statistics after the sweep (``est``) and ``overflow``."""

    states: jax.Array
    beta: jax.Array
    est: object
    overflow: jax.Array


def assignment_sweep(rng_key, states, beta, params, view: ModelView, statistics) -> AssignmentSweep:
    r"""Step 1 of the module docstring (the ``z_t`` updates): pure and jittable.

    ``states (N, T)``, ``beta (K+1,)`` (last entry: the mass of the uninstantiated states; the
    weights of unoccupied slots are first merged into it), ``view`` the model at the current
    hyperparameters, ``params`` the current emission parameters (used by DP-mixture emissions,
    whose component indicators are drawn from them before they are integrated out, and by custom
    emissions, whose parameters stay explicit), ``statistics`` the family's strategy
    (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.collapsed_statistics`).
    ``overflow`` is True when at some step every slot was occupied so that no new state could be
    offered.
    """
    num_seq, num_steps = states.shape
    capacity = beta.shape[0] - 1
    dtype = jnp.result_type(beta.dtype, view.hyper.alpha, float)
    gamma, alpha, kappa = (jnp.asarray(v, dtype) for v in view.hyper)
    data = view.data
    # the data are often compile-time constants (MCMC closes over the model arguments): keep XLA
    # from constant-folding the per-step precomputations below, which only slows compilation
    x, valid, lengths = lax.optimization_barrier((flatten_time(data.x), data.valid.reshape(-1), data.lengths))
    layout = step_layout(num_seq, num_steps, lengths)
    valid = valid & layout.in_range
    labels = jnp.where(layout.in_range, states.reshape(-1), 0).astype(jnp.int32)
    steps = labels.shape[0]

    # counts of the current assignment
    n, first = crp.transition_counts(states, capacity, data.lengths)
    n = n.astype(dtype)
    first = first.astype(dtype)
    occupancy = jnp.zeros(capacity, jnp.int32).at[labels].add(layout.in_range.astype(jnp.int32))
    active = occupancy > 0
    beta = jnp.asarray(beta, dtype)
    beta_slots = jnp.where(active, beta[:capacity], 0.0)
    beta_rem = jnp.maximum(1.0 - jnp.sum(beta_slots), 0.0)
    k_init, k_cat, k_split, k_comp = random.split(rng_key, 4)
    est = statistics.init(k_init, x, valid, labels, params, dtype)
    # per-step emission terms computed once: the prior predictive of every step (the likelihood
    # of a new state), or for explicit parameters the (steps, K) log-likelihood matrix
    pre = statistics.precompute(x, params, dtype)
    u_cat = draws.uniform_open(k_cat, (steps,), dtype)
    u_comp = draws.uniform_open(k_comp, (steps,), dtype)
    log_split = draws.log_stick_remainder(k_split, gamma, (steps,))  # log(1 - b), b ~ Beta(1, gamma)
    slots = jnp.arange(capacity)

    def step(i, carry):
        labels, n, first, out, occupancy, beta_slots, beta_rem, est, overflow = carry
        x_i = row_of(x, i)
        delta = statistics.delta(x_i, dtype)
        ok_y = valid[i]
        weight = ok_y.astype(dtype)
        is_first, has_next = layout.is_first[i], layout.has_next[i]
        k_old = labels[i]
        prev = jnp.where(is_first, 0, labels[jnp.maximum(i - 1, 0)])
        nxt = jnp.where(has_next, labels[jnp.minimum(i + 1, steps - 1)], 0)
        fi, nx = is_first.astype(dtype), has_next.astype(dtype)
        # 1a. remove z_i
        first = first.at[k_old].add(-fi)
        n = n.at[prev, k_old].add(-(1.0 - fi))
        n = n.at[k_old, nxt].add(-nx)
        out = out.at[prev].add(-(1.0 - fi)).at[k_old].add(-nx)
        occupancy = occupancy.at[k_old].add(-1)
        est = statistics.remove(est, i, delta, weight, k_old)
        freed = occupancy[k_old] == 0
        beta_rem = beta_rem + jnp.where(freed, beta_slots[k_old], 0.0)
        beta_slots = beta_slots.at[k_old].set(jnp.where(freed, 0.0, beta_slots[k_old]))
        est = lax.cond(freed, statistics.free, lambda s, k: s, est, k_old)
        active = occupancy > 0
        # 1b. sticky CRF predictive (eq. 37) for the instantiated states and a new one
        into = jnp.where(is_first, alpha * beta_slots + first,
                         alpha * beta_slots + lax.dynamic_index_in_dim(n, prev, keepdims=False) + kappa * (slots == prev))
        same = (slots == prev) & ~is_first
        onward = (
            (alpha * beta_slots[nxt] + n[:, nxt] + kappa * (slots == nxt) + (same & (slots == nxt)))
            / (alpha + kappa + out + same)
        )
        log_w = jnp.log(into) + jnp.where(has_next, jnp.log(onward), 0.0)
        pre_i = jnp.where(ok_y, row_of(pre, i), 0.0)  # a missing observation: no emission factor
        log_pred, comp = statistics.log_predictive(est, x_i, pre_i)
        log_w = log_w + jnp.where(ok_y, log_pred, 0.0)
        full = jnp.all(active)
        # a new state: alpha beta_rem (times alpha beta_{z_{i+1}} / (alpha + kappa)) with the
        # emission term of each free slot it may take (-inf at instantiated slots)
        log_new = (
            jnp.log(alpha * beta_rem)
            + jnp.where(has_next, jnp.log(alpha * beta_slots[nxt] / (alpha + kappa)), 0.0)
            + statistics.log_new(pre_i, active)
        )
        log_all = jnp.where(active, log_w, log_new)
        top = jnp.max(log_all)
        k = draws.categorical(jnp.exp(log_all - top), u_cat[i])
        is_new = ~active[k]
        # 1c. a new state splits the remaining stick
        split_rem = beta_rem * jnp.exp(log_split[i])
        beta_slots = beta_slots.at[k].set(jnp.where(is_new, beta_rem - split_rem, beta_slots[k]))
        beta_rem = jnp.where(is_new, split_rem, beta_rem)
        # 1d. add z_i = k
        first = first.at[k].add(fi)
        n = n.at[prev, k].add(1.0 - fi)
        n = n.at[k, nxt].add(nx)
        out = out.at[prev].add(1.0 - fi).at[k].add(nx)
        occupancy = occupancy.at[k].add(1)
        est = statistics.add(est, i, delta, weight, k, comp, u_comp[i])
        labels = labels.at[i].set(k)
        return labels, n, first, out, occupancy, beta_slots, beta_rem, est, overflow | full

    out = jnp.sum(n, 1)
    init = (labels, n, first, out, occupancy, beta_slots, beta_rem, est, jnp.zeros((), bool))
    order, count = steps_in_range(layout.in_range)  # the padding is skipped
    labels, _, _, _, _, beta_slots, beta_rem, est, overflow = lax.fori_loop(0, count, lambda j, c: step(order[j], c), init)
    beta = jnp.concatenate([beta_slots, beta_rem[None]])
    return AssignmentSweep(labels.reshape(num_seq, num_steps), beta, est, overflow)


class DirectAssignmentInfo(NamedTuple):
    """Per-sweep diagnostics: ``overflow`` (at some step every slot of the capacity was occupied,
    so no new state could be offered: the draw is from the model truncated at ``max_states``;
    or a split found no free slot) and ``split_merge_accept`` (the fraction of the sweep's
    split-merge moves accepted; NaN without them)."""

    overflow: jax.Array
    split_merge_accept: jax.Array


class DirectAssignment(Algorithm):
    """Fox et al. Alg. 1 and 3 on the contract of :mod:`numpyro_hdphmm.infer.plumbing.adapter` (module
    docstring).  The state is :class:`~numpyro_hdphmm.infer.contract.Explicit`: the states and
    ``beta`` are carried; the rows and the emission parameters are integrated out in the sweep
    and drawn from their conditionals for the record."""

    name = "DirectAssignmentGibbs"
    Info = DirectAssignmentInfo
    describe = {
        "beta": "Dirichlet over (instantiated, rest) given the informative tables (Fox et al. Alg. 1, eq. 30)",
        "trans": "integrated out in the sweep; drawn given the counts for the record (Fox et al. eq. 37)",
        "states": "one step at a time with the rows and emission parameters integrated out (Fox et al. Alg. 1, eq. 37)",
        "params": "integrated out in the sweep; drawn from the conjugate posterior for the record (DP mixtures: Alg. 3)",
    }

    def __init__(self, split_merge: int = 0):
        self.split_merge = check_split_merge(split_merge)

    def step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """One sweep: ``split_merge`` split-merge moves
        (:func:`~numpyro_hdphmm.infer.moves.split_merge.split_merge_given_beta`), the step-wise updates
        (:func:`assignment_sweep`), the canonical relabelling, the global step and the emission
        parameters for the record."""
        capacity = spec.capacity
        data = view.data
        k_z, k_global, k_theta = random.split(rng_key, 3)
        k_split = random.fold_in(rng_key, SPLIT_MERGE_STREAM)
        try:
            statistics = view.emission.collapsed_statistics(capacity)
        except NotImplementedError as err:
            raise NotImplementedError(
                f"DirectAssignmentGibbs integrates the emission parameters out: {err} "
                "Use WeakLimitGibbs or BeamSampler, which keep the emission parameters explicit."
            ) from err
        states, beta, params = state.states, state.beta, state.params
        split_merge_accept = jnp.full((), jnp.nan, jnp.result_type(beta.dtype, float))
        split_overflow = jnp.zeros((), bool)
        if self.split_merge:
            moves = split_merge_given_beta(k_split, states, beta, params, data, view.hyper, view.emission, statistics,
                                           self.split_merge)
            states, beta, params = moves.states, moves.beta, moves.params
            split_merge_accept = moves.accepted.astype(split_merge_accept.dtype) / self.split_merge
            split_overflow = moves.overflow
        sweep = assignment_sweep(k_z, states, beta, params, view, statistics)
        states, beta = sweep.states, sweep.beta
        # 2. relabel by first appearance (not for parameters that are the user's sites, which
        # stay with their slots)
        if statistics.relabels:
            layout = step_layout(states.shape[0], states.shape[1], data.lengths)
            new_of_old, old_of_new = canonical_order(states.reshape(-1), layout.in_range, capacity)
            states = jnp.where(layout.in_range.reshape(states.shape), new_of_old[states], 0)
            beta = jnp.concatenate([beta[old_of_new], beta[capacity:]])
        # 3-5 and the rows: the global step given the states
        draw = crp.sample_global(k_global, states, data.lengths, beta.astype(state.beta.dtype), view.hyper,
                                 view.priors, weak_limit=False, hyperparameters=spec.hyperparameters)
        # the emission parameters (and a DP-mixture concentration) given the states of the sweep
        # (a DP mixture's component indicators, the only statistics read here, do not depend on the labels)
        weights = state_weights(states, data.valid, capacity, draw.beta.dtype).reshape(-1, capacity)
        # (a shared emission base first, with the parameters integrated out; its counts' rows need no relabelling)
        emission, shared = sample_emission_base(random.fold_in(k_theta, 1), spec, view, sweep.est)
        params, sigma = statistics.draw_parameters(k_theta, sweep.est, emission, flatten_time(data.x), weights,
                                                   params, view.dp_concentration_prior)
        hyper = {**hyper_site_values(spec, draw.hyper, sigma if spec.hyper.dp_concentration else None), **shared}
        info = DirectAssignmentInfo(sweep.overflow | split_overflow, split_merge_accept)
        return Explicit(states, draw.beta, draw.trans, params, hyper), info


class DirectAssignmentGibbs(HDPKernel):
    r"""Direct-assignment Gibbs sampler of the infinite (sticky) HDP-HMM (Fox et al., Algorithm 1;
    Teh et al. 2006).

    Samples the model as written: ``beta ~ GEM(gamma)`` with infinitely many states, of which at
    most ``max_states`` (the model's capacity) can be instantiated at once.  Transition rows and
    emission parameters are integrated out while the states are updated one step at a time;
    both are drawn from their conditional posteriors for the recorded sample.  Every conjugate
    emission family of :mod:`numpyro_hdphmm.emissions` (DP-mixture emissions with Fox et al.'s
    Algorithm 3) and several sequences are supported.

    Emissions without a conjugate prior, given as a callable over the user's own sample sites
    (:class:`~numpyro_hdphmm.emissions.CustomEmission`), cannot be integrated out: for them the
    sampler falls back to the uncollapsed emission step.  The step-by-step state updates use the
    likelihoods under the current parameters, a new state takes one of the free slots (whose
    parameters are prior draws) as in Neal's (2000) Algorithm 8
    (:class:`~numpyro_hdphmm.emissions.custom.ExplicitLikelihoods`), the states keep their slots
    (no relabelling), and the inner kernel (NUTS) updates the user's parameter sites given the
    states after every sweep.  Hyperparameter sites with the priors of
    :mod:`numpyro_hdphmm._core.crp` get exact updates; every other latent site is updated by
    ``inner_kernel`` (NUTS by default).

    Collected fields: ``z`` (all latent sites, states relabelled by first appearance except for
    custom emissions), ``num_states``, ``lp``, ``accept_prob`` and ``diverging`` of the inner
    kernel, and ``overflow`` (:class:`DirectAssignmentInfo`: True when, in that sweep, every slot
    of the capacity was occupied so that no new state could be offered: the draw is then from the
    model truncated at ``max_states`` states; a ``RuntimeWarning`` is emitted; increase
    ``max_states``).

    The sequential updates mix slowly between segmentations that differ in many steps at once
    (Fox et al. Sec. VII); :class:`~numpyro_hdphmm.infer.WeakLimitGibbs` and the beam sampler
    update whole sequences.

    ``split_merge=n`` adds ``n`` split-merge moves per sweep (the restricted collapsed draw's
    moves, RCD paper Algs. 9-10, :mod:`numpyro_hdphmm.infer.moves.split_merge`): the table counts are
    drawn given ``beta``, the moves act on the collapsed seating and ``beta`` is drawn given the
    tables after them, which leaves the posterior invariant.  They move many steps at once
    (split a state in two, merge two states), which the step-wise updates cannot; their
    acceptance rate is the collected field ``split_merge_accept``.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param split_merge: split-merge moves per sweep (0: none).
    """

    algorithm = DirectAssignment()

    def __init__(self, model, split_merge: int = 0, **options):
        super().__init__(model, DirectAssignment(split_merge), **options)
