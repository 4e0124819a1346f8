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
from numpyro_hdphmm.infer.base import HDPKernel, HDPState, ModelView, flatten_time

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

    def prior_predictive(self, x, dtype):
        prior = self.emission.sufficient_statistics(jax.tree_util.tree_map(lambda a: a[:1], x), jnp.zeros((1, 1), dtype))
        return jax.vmap(lambda xt: self.emission.log_predictive(xt, prior)[0])(x)

    def remove(self, est, i, delta, weight, k):
        return _add_row(est, k, delta, -weight)

    def free(self, est, k):
        return _zero_row(est, k)

    def log_predictive(self, est, x_i):
        return self.emission.log_predictive(x_i, est), None

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

    def prior_predictive(self, x, dtype):
        prior = self.base.sufficient_statistics(jax.tree_util.tree_map(lambda a: a[:1], x), jnp.zeros((1, 1), dtype))
        return jax.vmap(lambda xt: self.base.log_predictive(xt, prior)[0])(x)

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

    def log_predictive(self, est, x_i):
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


def _collapse(emission, num_states: int):
    from numpyro_hdphmm.emissions.dp_mixture import DPMixture

    return (_MixtureCollapse if isinstance(emission, DPMixture) else _ConjugateCollapse)(emission, num_states)


def canonical_order(z_flat, in_range, num_states: int):
    """``(new_of_old (K,), old_of_new (K,))``: relabel the states by first appearance in
    ``z_flat`` (steps outside ``in_range`` ignored), unused slots last."""
    steps = z_flat.shape[0]
    first_seen = jnp.full(num_states, steps, jnp.int32).at[jnp.where(in_range, z_flat, num_states)].min(
        jnp.arange(steps, dtype=jnp.int32), mode="drop"
    )
    old_of_new = jnp.argsort(first_seen, stable=True).astype(jnp.int32)
    new_of_old = jnp.zeros(num_states, jnp.int32).at[old_of_new].set(jnp.arange(num_states, dtype=jnp.int32))
    return new_of_old, old_of_new


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
    # prior predictive of every step (the likelihood of a new state), computed once
    log_prior_pred = collapse.prior_predictive(x, dtype)
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
        log_pred, comp = collapse.log_predictive(stats, x_i)
        log_w = log_w + jnp.where(ok_y, log_pred, 0.0)
        log_w = jnp.where(active, log_w, -jnp.inf)
        free = jnp.argmin(active)  # first free slot (0 if none: then `full`)
        full = jnp.all(active)
        log_new = (
            jnp.log(alpha * beta_rem)
            + jnp.where(has_next, jnp.log(alpha * beta_slots[nxt] / (alpha + kappa)), 0.0)
            + jnp.where(ok_y, log_prior_pred[i], 0.0)
        )
        log_new = jnp.where(full, -jnp.inf, log_new)
        log_all = jnp.concatenate([log_w, log_new[None]])
        top = jnp.max(log_all)
        k = _categorical(jnp.exp(log_all - top), u_cat[i])
        is_new = k == num_states
        k = jnp.where(is_new, free, k).astype(jnp.int32)
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
    Hyperparameter sites with the priors of :mod:`numpyro_hdphmm._core.crp` get exact updates;
    every other latent site is updated by ``inner_kernel`` (NUTS by default).

    Collected fields: ``z`` (all latent sites, states relabelled by first appearance),
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
        # 2. relabel by first appearance
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
        counts = jnp.zeros((num_states + 1, num_states + 1), dtype)
        counts = counts.at[:num_states, :num_states].set(n).at[num_states, :num_states].set(first)
        sticky = jnp.eye(num_states + 1, dtype=dtype).at[num_states, num_states].set(0.0)
        trans = sample_dirichlet(k_pi, alpha * beta[None, :] + kappa * sticky + counts)
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
