r"""Direct-assignment (Rao-Blackwellized) Gibbs sampling of the infinite (sticky) HDP-HMM.

The sampler of Teh et al. (2006) with the sticky modifications of Fox et al. (Algorithm 1): the
transition rows ``pi`` and (for conjugate families) the emission parameters ``theta`` are
integrated out; the global weights ``beta`` are explicit over the instantiated states plus the
remaining mass ``beta_rem`` of all others.  One sweep:

1. for each step ``t`` in turn (one jitted ``lax.fori_loop`` over all sequences' steps, ``O(K)``
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
components being integrated out too (see :class:`_MixtureCollapse`); after the sweep the
mixture concentration (when it is a recognized Gamma-prior site), the weights and the
components are drawn given the indicators.

and, for the recorded sample only, the rows ``pi_j | z, beta ~ Dir(alpha beta + kappa e_j +
n_j.)`` (start row ``Dir(alpha beta + n_0.)``, the last column being the mass of the
uninstantiated states) and the emission parameters from their conjugate posteriors.  Then the
inner kernel (NUTS) updates every other latent site of the model.

Emissions without a conjugate prior (:class:`~numpyro_hdphmm.emissions.CustomEmission`) are not
integrated out: step 1 then uses their likelihoods under the current parameters (a new state
takes a free slot's parameters, Neal's (2000) Algorithm 8, see :class:`_ExplicitEmission`), step
2 is skipped and the inner kernel updates the parameters, which are the user's sample sites.

The model is sampled as written (``beta ~ GEM(gamma)``): ``max_states`` is only a capacity.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.hmm import _categorical
from numpyro_hdphmm.distributions import sample_dirichlet
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.infer.base import HDPKernel, HDPState, ModelView, canonical_order, flatten_time, row_concentrations

__all__ = ["DirectAssignmentGibbs", "direct_assignment_sweep", "StepLayout"]


class StepLayout(NamedTuple):
    """Where each flattened step ``i = n * T + t`` sits: inside its sequence (``in_range``), the
    first step of a sequence (``is_first``), followed by a step of the same sequence
    (``has_next``)."""

    in_range: jax.Array
    is_first: jax.Array
    has_next: jax.Array


def step_layout(num_sequences: int, num_steps: int, lengths) -> StepLayout:
    t = jnp.arange(num_steps)[None, :]
    lengths = jnp.asarray(lengths)[:, None]
    shape = (num_sequences, num_steps)
    in_range = jnp.broadcast_to(t < lengths, shape).reshape(-1)
    is_first = jnp.broadcast_to(t == 0, shape).reshape(-1)
    has_next = jnp.broadcast_to(t + 1 < lengths, shape).reshape(-1)
    return StepLayout(in_range, is_first, has_next)


def _row(tree, i):
    return jax.tree_util.tree_map(lambda a: lax.dynamic_index_in_dim(a, i, keepdims=False), tree)


def _add_row(stats, k, delta, sign):
    """``stats[k] += sign * delta`` for every leaf (``delta`` has a leading axis of size one)."""

    def one(s, d):
        row = lax.dynamic_index_in_dim(s, k, keepdims=True)
        return lax.dynamic_update_index_in_dim(s, row + sign * d.astype(s.dtype), k, 0)

    return jax.tree_util.tree_map(one, stats, delta)


def _zero_row(stats, k):
    def one(s):
        return lax.dynamic_update_index_in_dim(s, jnp.zeros((1,) + s.shape[1:], s.dtype), k, 0)

    return jax.tree_util.tree_map(one, stats)


class _ConjugateCollapse:
    """Emission parameters integrated out: per-state sufficient statistics ``(K, ...)``; the
    predictive is the family's closed-form posterior predictive."""

    def __init__(self, emission, num_states: int):
        self.emission, self.num_states = emission, num_states

    def delta(self, x_i, dtype):
        row = jax.tree_util.tree_map(lambda a: a[None], x_i)
        return self.emission.sufficient_statistics(row, jnp.ones((1, 1), dtype))

    def init(self, key, x, valid, z, params, dtype):
        return self.emission.sufficient_statistics(x, state_weights(z, valid, self.num_states, dtype))

    def precompute(self, x, params, dtype):
        """The prior predictive ``log int f(y_i | theta) dH(theta)`` of every step ``(steps,)``."""
        return _prior_predictive(self.emission, x, dtype)

    def remove(self, est, i, delta, weight, k):
        return _add_row(est, k, delta, -weight)

    def free(self, est, k):
        return _zero_row(est, k)

    def log_predictive(self, est, x_i, pre_i):
        return self.emission.log_predictive(x_i, est), None

    def log_new(self, pre_i, active):
        return _first_free_slot(pre_i, active)

    def add(self, est, i, delta, weight, k, aux, u):
        return _add_row(est, k, delta, weight)

    def components(self, est):
        return None


class _MixtureCollapse:
    r"""DP-mixture emissions (:class:`~numpyro_hdphmm.emissions.DPMixture`, Fox et al. Sec. VI-A,
    Alg. 3) with the mixture weights ``psi_k ~ Dir(sigma/L')`` and the components integrated
    out: component indicators ``s`` (time flattened), per-(state, component) base statistics
    ``(K * L', ...)`` and counts ``n'_kj (K, L')``.  The state predictive (eq. 61) is
    ``sum_j (n'_kj + sigma/L') / (sigma + n'_k.) f(y | stats_kj)``: the Dirichlet-multinomial
    predictive of the model's ``L'`` components, whose ``L' -> inf`` limit is the CRP of eq. 63
    with the corrected denominators ``sigma + n'_k.`` (notes erratum 2)."""

    def __init__(self, emission, num_states: int):
        self.emission, self.num_states = emission, num_states
        self.base, self.width = emission.base, emission.max_components
        self.conc = emission.concentration

    def delta(self, x_i, dtype):
        row = jax.tree_util.tree_map(lambda a: a[None], x_i)
        return self.base.sufficient_statistics(row, jnp.ones((1, 1), dtype))

    def init(self, key, x, valid, z, params, dtype):
        weights = state_weights(z, valid, self.num_states, dtype)
        s = self.emission.sample_components(key, x, weights, params).astype(jnp.int32)
        cell = z * self.width + s
        onehot = jax.nn.one_hot(cell, self.num_states * self.width, dtype=dtype) * valid[:, None].astype(dtype)
        stats = self.base.sufficient_statistics(x, onehot)
        counts = jnp.sum(onehot, 0).reshape(self.num_states, self.width)
        return s, stats, counts

    def precompute(self, x, params, dtype):
        """The base family's prior predictive of every step ``(steps,)`` (a new state's first
        component is a new component)."""
        return _prior_predictive(self.base, x, dtype)

    def log_new(self, pre_i, active):
        return _first_free_slot(pre_i, active)

    def remove(self, est, i, delta, weight, k):
        s, stats, counts = est
        stats = _add_row(stats, k * self.width + s[i], delta, -weight)
        return s, stats, counts.at[k, s[i]].add(-weight)

    def free(self, est, k):
        s, stats, counts = est

        def one(a):
            zeros = jnp.zeros((self.width,) + a.shape[1:], a.dtype)
            return lax.dynamic_update_slice_in_dim(a, zeros, k * self.width, 0)

        return s, jax.tree_util.tree_map(one, stats), counts.at[k].set(0.0)

    def _log_component_weights(self, counts):
        prior = self.conc / self.width
        return jnp.log(counts + prior) - jnp.log(self.conc + jnp.sum(counts, -1, keepdims=True))

    def log_predictive(self, est, x_i, pre_i):
        s, stats, counts = est
        comp = self.base.log_predictive(x_i, stats).reshape(self.num_states, self.width)
        joint = self._log_component_weights(counts) + comp
        return jax.nn.logsumexp(joint, -1), comp

    def add(self, est, i, delta, weight, k, comp, u):
        s, stats, counts = est
        log_w = self._log_component_weights(counts[k]) + jnp.where(weight > 0, comp[k], 0.0)
        j = _categorical(jnp.exp(log_w - jnp.max(log_w)), u)
        stats = _add_row(stats, k * self.width + j, delta, weight)
        return s.at[i].set(j), stats, counts.at[k, j].add(weight)

    def components(self, est):
        return est[0]


class _ExplicitEmission:
    r"""Emission parameters kept explicit, for families without a conjugate prior
    (:class:`~numpyro_hdphmm.emissions.CustomEmission`, whose parameters are the user's sample
    sites): the uncollapsed emission step.  Within the sweep the parameters of every slot are
    fixed at their current values; the inner kernel (NUTS) updates them given the states after the
    sweep (Fox et al. eq. 42 without conjugacy).

    A step's likelihood under an instantiated state ``k`` is ``f(y_i | theta_k)``, a row of the
    ``(steps, K)`` log-likelihood matrix.  A new state has no closed-form prior predictive; it is
    placed in one of the ``F`` free slots, whose parameters are draws from the prior (no step
    uses them), with weight ``alpha beta_rem (...) / F * f(y_i | theta_j)`` for free slot ``j``:
    the exact conditional of ``z_i`` in the model extended by the free slots' parameters and a
    uniformly random assignment of states to slots (the number of assignments of ``K`` states
    to ``L`` slots changes by the factor ``1/F`` when a state is added).  It is Neal's (2000)
    Algorithm 8 with the ``F`` free slots as the auxiliary components, which converges to the
    prior predictive as ``F`` grows.  States keep their slots (no relabelling)."""

    def __init__(self, emission, num_states: int):
        self.emission, self.num_states = emission, num_states

    def delta(self, x_i, dtype):
        return None

    def init(self, key, x, valid, z, params, dtype):
        return ()

    def precompute(self, x, params, dtype):
        """``log f(y_i | theta_k)`` for every step and slot ``(steps, K)``."""
        return self.emission.log_likelihoods(x, params).astype(dtype)

    def remove(self, est, i, delta, weight, k):
        return est

    def free(self, est, k):
        return est

    def log_predictive(self, est, x_i, pre_i):
        return pre_i, None

    def log_new(self, pre_i, active):
        num_free = jnp.sum(~active).astype(pre_i.dtype)
        return jnp.where(active, -jnp.inf, pre_i - jnp.log(jnp.maximum(num_free, 1.0)))

    def add(self, est, i, delta, weight, k, aux, u):
        return est

    def components(self, est):
        return None


def _prior_predictive(family, x, dtype):
    prior = family.sufficient_statistics(jax.tree_util.tree_map(lambda a: a[:1], x), jnp.zeros((1, 1), dtype))
    return jax.vmap(lambda xt: family.log_predictive(xt, prior)[0])(x)


def _first_free_slot(log_pred_new, active):
    """A new state of a collapsed family goes to the first free slot, with the whole new-state
    weight (the slot is arbitrary: the states are relabelled after the sweep)."""
    first_free = jnp.argmin(active)
    return jnp.where(jnp.arange(active.shape[0]) == first_free, log_pred_new, -jnp.inf)


def _collapse(emission, num_states: int):
    from numpyro_hdphmm.emissions.dp_mixture import DPMixture

    if isinstance(emission, DPMixture):
        return _MixtureCollapse(emission, num_states)
    if not emission.param_names:  # parameters are the user's own sites (CustomEmission)
        return _ExplicitEmission(emission, num_states)
    return _ConjugateCollapse(emission, num_states)


def direct_assignment_sweep(rng_key, states, beta, params, view: ModelView):
    r"""Step 1 of the module docstring (the ``z_t`` updates): pure and jittable.

    ``states (N, T)``, ``beta (K+1,)`` (last entry: the mass of the uninstantiated states; the
    weights of unoccupied slots are first merged into it), ``view`` the model at the current
    hyperparameters, ``params`` the current emission parameters (used only by DP-mixture
    emissions, whose component indicators are drawn from them before they are integrated out).
    Returns ``(states (N, T), beta (K+1,), components, overflow)``: ``components`` the
    flattened mixture indicators (``None`` for conjugate families), ``overflow`` True when at
    some step every slot was occupied so that no new state could be offered.
    """
    num_seq, num_steps = states.shape
    num_states = beta.shape[0] - 1
    emission = view.emission
    dtype = jnp.result_type(beta.dtype, view.alpha, float)
    alpha, kappa, gamma = (jnp.asarray(v, dtype) for v in (view.alpha, view.kappa, view.gamma))
    # the data are often compile-time constants (MCMC closes over the model arguments): keep XLA
    # from constant-folding the per-step precomputations below, which only slows compilation
    x, valid, lengths = lax.optimization_barrier((flatten_time(view.x), view.valid.reshape(-1), view.lengths))
    layout = step_layout(num_seq, num_steps, lengths)
    valid = valid & layout.in_range
    z = jnp.where(layout.in_range, states.reshape(-1), 0).astype(jnp.int32)
    steps = z.shape[0]

    # counts of the current assignment
    n, first = crp.transition_counts(states, num_states, view.lengths)
    n = n.astype(dtype)
    first = first.astype(dtype)
    occupancy = jnp.zeros(num_states, jnp.int32).at[z].add(layout.in_range.astype(jnp.int32))
    active = occupancy > 0
    beta = jnp.asarray(beta, dtype)
    beta_slots = jnp.where(active, beta[:num_states], 0.0)
    beta_rem = jnp.maximum(1.0 - jnp.sum(beta_slots), 0.0)
    collapse = _collapse(emission, num_states)
    k_init, k_cat, k_split, k_comp = random.split(rng_key, 4)
    stats = collapse.init(k_init, x, valid, z, params, dtype)
    # per-step emission terms computed once: the prior predictive of every step (the likelihood
    # of a new state), or for explicit parameters the (steps, K) log-likelihood matrix
    pre = collapse.precompute(x, params, dtype)
    u_cat = 1.0 - random.uniform(k_cat, (steps,), dtype)  # (0, 1]
    u_comp = 1.0 - random.uniform(k_comp, (steps,), dtype)
    u_split = random.uniform(k_split, (steps,), dtype)
    log_split = jnp.log1p(-u_split) / gamma  # log(1 - b), b ~ Beta(1, gamma) by inversion
    slots = jnp.arange(num_states)

    def step(i, carry):
        z, n, first, out, occupancy, beta_slots, beta_rem, stats, overflow = carry
        x_i = _row(x, i)
        delta = collapse.delta(x_i, dtype)
        ok_y = valid[i]
        weight = ok_y.astype(dtype)
        is_first, has_next = layout.is_first[i], layout.has_next[i]
        k_old = z[i]
        prev = jnp.where(is_first, 0, z[jnp.maximum(i - 1, 0)])
        nxt = jnp.where(has_next, z[jnp.minimum(i + 1, steps - 1)], 0)
        fi, nx = is_first.astype(dtype), has_next.astype(dtype)
        # 1a. remove z_i
        first = first.at[k_old].add(-fi)
        n = n.at[prev, k_old].add(-(1.0 - fi))
        n = n.at[k_old, nxt].add(-nx)
        out = out.at[prev].add(-(1.0 - fi)).at[k_old].add(-nx)
        occupancy = occupancy.at[k_old].add(-1)
        stats = collapse.remove(stats, i, delta, weight, k_old)
        freed = occupancy[k_old] == 0
        beta_rem = beta_rem + jnp.where(freed, beta_slots[k_old], 0.0)
        beta_slots = beta_slots.at[k_old].set(jnp.where(freed, 0.0, beta_slots[k_old]))
        stats = lax.cond(freed, collapse.free, lambda s, k: s, stats, k_old)
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
        pre_i = jnp.where(ok_y, _row(pre, i), 0.0)  # a missing observation: no emission factor
        log_pred, comp = collapse.log_predictive(stats, x_i, pre_i)
        log_w = log_w + jnp.where(ok_y, log_pred, 0.0)
        full = jnp.all(active)
        # a new state: alpha beta_rem (times alpha beta_{z_{i+1}} / (alpha + kappa)) with the
        # emission term of each free slot it may take (-inf at instantiated slots)
        log_new = (
            jnp.log(alpha * beta_rem)
            + jnp.where(has_next, jnp.log(alpha * beta_slots[nxt] / (alpha + kappa)), 0.0)
            + collapse.log_new(pre_i, active)
        )
        log_all = jnp.where(active, log_w, log_new)
        top = jnp.max(log_all)
        k = _categorical(jnp.exp(log_all - top), u_cat[i]).astype(jnp.int32)
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
        stats = collapse.add(stats, i, delta, weight, k, comp, u_comp[i])
        z = z.at[i].set(k)
        return z, n, first, out, occupancy, beta_slots, beta_rem, stats, overflow | full

    def guarded(i, carry):
        return lax.cond(layout.in_range[i], step, lambda i, c: c, i, carry)

    out = jnp.sum(n, 1)
    init = (z, n, first, out, occupancy, beta_slots, beta_rem, stats, jnp.zeros((), bool))
    z, _, _, _, _, beta_slots, beta_rem, stats, overflow = lax.fori_loop(0, steps, guarded, init)
    beta = jnp.concatenate([beta_slots, beta_rem[None]])
    return z.reshape(num_seq, num_steps), beta, collapse.components(stats), overflow


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
    parameters are prior draws) as in Neal's (2000) Algorithm 8 (see :class:`_ExplicitEmission`),
    the states keep their slots (no relabelling), and the inner kernel (NUTS) updates the
    user's parameter sites given the states after every sweep.
    Hyperparameter sites with the priors of :mod:`numpyro_hdphmm._core.crp` get exact updates;
    every other latent site is updated by ``inner_kernel`` (NUTS by default).

    Collected fields: ``z`` (all latent sites, states relabelled by first appearance except for
    custom emissions),
    ``num_states``, ``lp``, ``overflow`` (True when, in that sweep, every slot of the capacity
    was occupied so that no new state could be offered: the draw is then from the model
    truncated at ``max_states`` states; a ``RuntimeWarning`` is emitted; increase
    ``max_states``), ``accept_prob`` and ``diverging`` of the inner kernel.

    The sequential updates mix slowly between segmentations that differ in many steps at once
    (Fox et al. Sec. VII); :class:`~numpyro_hdphmm.infer.WeakLimitGibbs` and the beam sampler
    update whole sequences.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param inner_kernel: kernel for the remaining latent sites (default ``NUTS``).
    :param exact_hyperparameters: use the exact auxiliary-variable updates where they apply.
    """

    #: the sweep gives a DP-mixture emission's concentration site its exact update (base class)
    updates_emission_concentration = True

    def _check_supported(self, model_trace) -> None:
        emission = model_trace[self._sites.obs]["fn"].emission
        if not emission.param_names:  # CustomEmission: the uncollapsed emission step
            return
        family = getattr(emission, "base", emission)  # a DP mixture collapses its base family
        y = jnp.asarray(model_trace[self._sites.obs]["value"])
        row = y.reshape((-1,) + tuple(family.event_shape))[:1]
        def probe(r):
            x, _ = family.prepare(r)
            first = jax.tree_util.tree_map(lambda a: a[0], x)
            return family.log_predictive(first, family.sufficient_statistics(x, jnp.zeros((r.shape[0], 1))))

        try:
            jax.eval_shape(probe, row)
        except NotImplementedError as err:
            raise NotImplementedError(
                f"DirectAssignmentGibbs integrates the emission parameters out, which needs a conjugate family "
                f"with a closed-form posterior predictive; {type(family).__name__} has none ({err}). "
                "Use WeakLimitGibbs or BeamSampler, which keep the emission parameters explicit."
            ) from err

    def _init_owned(self, rng_key, z, view: ModelView, init_params):
        return {}, None

    def _sweep(self, rng_key, state: HDPState, view: ModelView):
        sites = self._sites
        z = state.z
        num_states = sites.num_states
        k_z, k_tables, k_hyper, k_beta, k_pi, k_theta = random.split(rng_key, 6)
        current = z[sites.states] if sites.batched else z[sites.states][None]
        params = {p: z[s] for p, s in zip(sites.param_names, sites.emission)}
        states, beta, components, overflow = direct_assignment_sweep(k_z, current, z[sites.beta], params, view)
        dtype = beta.dtype
        # 2. relabel by first appearance (not for custom emissions: their parameters are the
        # user's sites, which stay with their slots)
        if sites.param_names:
            layout = step_layout(states.shape[0], states.shape[1], view.lengths)
            new_of_old, old_of_new = canonical_order(states.reshape(-1), layout.in_range, num_states)
            states = jnp.where(layout.in_range.reshape(states.shape), new_of_old[states], 0)
            beta = jnp.concatenate([beta[old_of_new], beta[num_states:]])
        # 3. tables
        n, first = crp.transition_counts(states, num_states, view.lengths)
        tables = crp.sample_table_counts(k_tables, n, first, beta, view.alpha, view.kappa, view.valid.size)
        mbar_dishes = jnp.sum(tables.mbar, 0)
        # 4. hyperparameters (gamma: Antoniak form over the informative tables)
        num_dishes = jnp.sum(mbar_dishes > 0)
        gamma, alpha, kappa, site_values = self._exact_hyper_updates(
            k_hyper, view, tables, n, first,
            lambda k, g, a, b: crp.resample_gamma(k, g, num_dishes, jnp.sum(mbar_dishes), a, b),
        )
        # 5. beta | mbar ~ Dir(mbar_.1, ..., mbar_.K, gamma)
        conc = jnp.concatenate([mbar_dishes.astype(dtype), jnp.asarray(gamma, dtype)[None]])
        beta = sample_dirichlet(k_beta, conc)
        # recorded sample: rows and emission parameters from their conditionals
        trans = sample_dirichlet(k_pi, row_concentrations(beta, alpha, kappa, n, first))
        weights = state_weights(states, view.valid, num_states, dtype).reshape(-1, num_states)
        x = flatten_time(view.x)
        if components is None:
            params, _ = view.emission.update_parameters(k_theta, x, weights, params)
        else:  # DP mixture: sigma, psi, theta given the indicators of the sweep
            conc_site = self._hyper.emission_concentration
            prior = None if conc_site is None else self._prior_params(view, conc_site)
            params, sigma = view.emission.update_given_components(k_theta, x, weights, components, prior)
            if conc_site is not None:
                site_values = {**site_values, conc_site: sigma}
        owned = {
            sites.beta: beta,
            sites.trans: trans,
            sites.states: states if sites.batched else states[0],
            **{s: params[p] for p, s in zip(sites.param_names, sites.emission)},
        }
        return owned, site_values, None, overflow
