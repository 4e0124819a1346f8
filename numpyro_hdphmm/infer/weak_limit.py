r"""Blocked Gibbs sampling of the weak-limit (sticky) HDP-HMM: Fox et al., Algorithm 2.

The weak-limit approximation replaces ``beta ~ GEM(gamma)`` by ``beta ~ Dir(gamma/L, ..., gamma/L)``
over ``L = max_states`` states (Fox et al. eqs. 38-41; Ishwaran & Zarepour 2002); the rows are
``pi_j ~ Dir(alpha beta + kappa e_j)`` and the start row ``pi_0 ~ Dir(alpha beta)``.  One sweep:

1. ``z | pi, theta, y``: forward filtering, backward sampling over the ``L`` states
   (:func:`numpyro_hdphmm._core.hmm.hmm_posterior_sample`; eqs. 43-48 in log space), all
   sequences at once;
2. ``theta_k | z, y``: the conjugate posterior of each state (eq. 42), through the family's
   ``update_parameters`` (for :class:`~numpyro_hdphmm.emissions.DPMixture` emissions: component
   indicators ``s | z``, the concentration ``sigma`` when a site carries it, ``psi`` and the
   component parameters, Alg. 4 and eqs. 65-66);
3. ``m, w, mbar | z, beta, alpha, kappa``: tables, overrides, informative tables with the rows
   integrated out (Alg. 1 step 3, eqs. 31-35);
4. exact auxiliary-variable updates of the recognized hyperparameter sites given the tables
   (eqs. 50-56, App. III, with the corrections of ``notes/sticky_hdp_hmm.md`` §3 and the exact
   weak-limit form of the ``gamma`` update, see :func:`~numpyro_hdphmm._core.crp.resample_gamma_weak_limit`);
5. ``beta | mbar, gamma ~ Dir(gamma/L + mbar_.k)`` (eq. 41; the paper's Alg. 2 step 4 prints the
   index bound as K, it is L);
6. ``pi_j | z, beta ~ Dir(alpha beta + kappa e_j + n_j.)`` and the start row
   ``Dir(alpha beta + n_0.)`` (eq. 41);

then the inner kernel (NUTS) updates every other latent site of the model.  Steps 3-6 sample
(tables, hyperparameters, beta) from their joint conditional with the rows integrated out and
then the rows from their full conditional, which leaves the joint posterior invariant.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from numpyro.primitives import Messenger

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.hmm import hmm_posterior_sample_fast
from numpyro_hdphmm.distributions import GEM, WeakLimitBeta, sample_dirichlet
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.infer.base import HDPKernel, HDPState, ModelView, flatten_time, row_concentrations
from numpyro_hdphmm.primitives import HDP_ROLE

__all__ = ["WeakLimitGibbs", "weak_limit", "WeakLimitInfo", "weak_limit_sweep"]


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
    """Per-sweep quantities of :func:`weak_limit_sweep`: transition counts ``n (L, L)``, start
    counts ``first (L,)``, the tables, whether the FFBS draw was used, and the emission family's
    concentration after the sweep (``None`` for families without one)."""

    n: jax.Array
    first: jax.Array
    tables: crp.TableCounts
    ffbs_ok: jax.Array
    emission_concentration: Any = None


def weak_limit_sweep(rng_key, states, beta, trans, params, view: ModelView, hyper_update, concentration_prior=None):
    """One sweep of Fox et al. Alg. 2 (steps 1-6 of the module docstring); pure and jittable.

    ``states (N, T)`` the current states, ``beta (L+1,)``, ``trans (L+1, L+1)`` (start row
    last), ``params`` (leading axis ``L``), ``view`` the model at the current values (the FFBS
    keeps ``states`` in the rare sweep where its rescaled pass underflows, see
    :func:`~numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`); ``hyper_update(key, tables, n, first) ->
    (gamma, alpha, kappa, site_values)``; ``concentration_prior``: ``(shape, rate)`` of the Gamma
    prior of the emission's own concentration (DP-mixture emissions), passed to its
    ``update_parameters``.  Returns ``(states (N, T), beta, trans, params, site_values,
    WeakLimitInfo)``.
    """
    num_states = beta.shape[0] - 1
    k_z, k_theta, k_tables, k_hyper, k_beta, k_pi = random.split(rng_key, 6)
    emission = view.emission
    # 1. states: FFBS over L states, every sequence at once
    log_init = jnp.log(trans[num_states, :num_states])
    log_trans = jnp.log(trans[:num_states, :num_states])
    log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(view.x, params)
    new_states, _, ok = hmm_posterior_sample_fast(k_z, log_init, log_trans, log_lik, mask=view.valid, length=view.lengths)
    ffbs_ok = jnp.all(ok)
    states = jnp.where(ffbs_ok, new_states, states)
    # 2. emission parameters from their conjugate posteriors
    weights = state_weights(states, view.valid, num_states, dtype=log_lik.dtype)
    params, emission_conc = emission.update_parameters(
        k_theta, flatten_time(view.x), weights.reshape(-1, num_states), params, concentration_prior
    )
    # 3. tables, overrides, informative tables (rows integrated out)
    n, first = crp.transition_counts(states, num_states, view.lengths)
    max_total = states.shape[0] * states.shape[1]
    tables = crp.sample_table_counts(k_tables, n, first, beta, view.alpha, view.kappa, max_total)
    # 4. exact hyperparameter updates
    gamma, alpha, kappa, site_values = hyper_update(k_hyper, tables, n, first)
    # 5. beta | mbar ~ Dir(gamma/L + mbar_.k)
    mbar_dishes = jnp.sum(tables.mbar, 0).astype(log_lik.dtype)
    beta_head = sample_dirichlet(k_beta, gamma / num_states + mbar_dishes)
    beta = jnp.concatenate([beta_head, jnp.zeros((1,), beta_head.dtype)])
    # 6. rows | counts: Dir(alpha beta + kappa e_j + n_j.), start row Dir(alpha beta + n_0.)
    trans = sample_dirichlet(k_pi, row_concentrations(beta, alpha, kappa, n, first))
    info = WeakLimitInfo(n=n, first=first, tables=tables, ffbs_ok=ffbs_ok, emission_concentration=emission_conc)
    return states, beta, trans, params, site_values, info


class WeakLimitGibbs(HDPKernel):
    r"""Blocked Gibbs sampler of the weak-limit (sticky) HDP-HMM (Fox et al., Algorithm 2).

    Samples ``weak_limit(model)``: the user's model with ``beta ~ Dir(gamma/L)`` over
    ``L = max_states`` states (every slot is a state of the approximation; ``num_states``
    reports how many are occupied).  Every emission family of :mod:`numpyro_hdphmm.emissions`
    and several sequences (``obs`` of shape ``(N, T, ...)`` with ``lengths``) are supported.
    Hyperparameter sites with the priors of :mod:`numpyro_hdphmm._core.crp` get exact updates;
    every other latent site is updated by ``inner_kernel`` (NUTS by default).

    Collected fields: ``z`` (all latent sites), ``num_states``, ``lp`` (log joint of the
    weak-limit model), ``overflow`` (True in a sweep whose states occupy all ``L`` slots: the
    approximation then had no free state, so increase ``max_states``; a ``RuntimeWarning`` says so), ``accept_prob`` and ``diverging`` of the inner kernel.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param inner_kernel: kernel for the remaining latent sites (default ``NUTS``).
    :param exact_hyperparameters: use the exact auxiliary-variable updates where they apply.
    """

    #: the sweep gives a DP-mixture emission's concentration site its exact update (base class)
    updates_emission_concentration = True

    @property
    def _inference_model(self):
        cache = getattr(self, "_weak_limit_cache", None)
        if cache is None or cache[0] is not self._model:
            cache = (self._model, weak_limit(self._model))
            self._weak_limit_cache = cache
        return cache[1]

    def _init_owned(self, rng_key, z, view: ModelView, init_params):
        # the prototype draws come from the weak-limit prior; the first sweep starts from them
        return {}, None

    def _sweep(self, rng_key, state: HDPState, view: ModelView):
        sites = self._sites
        z = state.z
        params = {p: z[s] for p, s in zip(sites.param_names, sites.emission)}
        num_states = sites.num_states
        max_total = view.valid.size

        def gamma_update(key, gamma, shape, rate, mbar_dishes):
            return crp.resample_gamma_weak_limit(key, gamma, mbar_dishes, num_states, shape, rate, max_total)

        def hyper_update(key, tables, n, first):
            mbar_dishes = jnp.sum(tables.mbar, 0)
            return self._exact_hyper_updates(
                key, view, tables, n, first, lambda k, g, a, b: gamma_update(k, g, a, b, mbar_dishes)
            )

        conc_site = self._hyper.emission_concentration
        conc_prior = None if conc_site is None else self._prior_params(view, conc_site)
        current = z[sites.states] if sites.batched else z[sites.states][None]
        states, beta, trans, params, site_values, info = weak_limit_sweep(
            rng_key, current, z[sites.beta], z[sites.trans], params, view, hyper_update, conc_prior
        )
        if conc_site is not None:
            site_values = {**site_values, conc_site: info.emission_concentration}
        owned = {
            sites.beta: beta,
            sites.trans: trans,
            sites.states: states if sites.batched else states[0],
            **{s: params[p] for p, s in zip(sites.param_names, sites.emission)},
        }
        # every one of the L states occupied: the approximation has no free state left
        overflow = jnp.all(jnp.zeros(num_states, bool).at[states.reshape(-1)].set(True))
        return owned, site_values, None, overflow
