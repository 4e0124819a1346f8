r"""The global step given the states, shared by every kernel that keeps the rows explicit.

Given the states of a sweep, a kernel with explicit ``beta``, rows and emission parameters
(weak limit, beam, PGAS) draws, in order (:func:`explicit_given_states`):

1. the emission parameters from their conjugate posteriors given the states (Fox et al. eq. 42;
   DP mixtures: Alg. 4; a shared emission base first,
   :func:`~numpyro_hdphmm.infer.moves.emission_base.update_emission_parameters});
2. tables, overrides and informative tables with the rows integrated out, the recognized
   hyperparameters, ``beta`` given the tables and the rows given the transition counts
   (:func:`numpyro_hdphmm._core.crp.sample_global`; Fox et al. Alg. 1 step 3, eqs. 31-37, 41).

The draws of step 2 do not depend on the emission parameters, so the order is free; the kernels'
draws are those of this order.  The direct-assignment and RCD samplers integrate the parameters
out and call :func:`numpyro_hdphmm._core.crp.sample_global` and :func:`hyper_site_values` in
their own order.
"""

from __future__ import annotations

from typing import Dict

import jax
import jax.numpy as jnp

from numpyro_hdphmm._core import crp
from numpyro_hdphmm.emissions.base import OneHot
from numpyro_hdphmm.infer.contract import Explicit, flatten_time
from numpyro_hdphmm.infer.moves.emission_base import update_emission_parameters
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView

__all__ = ["hyper_site_values", "concentrations_of_sites", "explicit_given_states"]


def hyper_site_values(spec: ModelSpec, hyper: crp.Concentrations, sigma=None) -> Dict[str, jax.Array]:
    """``{site: value}`` of the sites with exact updates given the new concentrations (and the
    DP-mixture concentration ``sigma``)."""
    sites = spec.hyper
    gamma, alpha, kappa = hyper
    values = {}
    for site, value in ((sites.gamma, gamma), (sites.alpha, alpha), (sites.kappa, kappa), (sites.c, alpha + kappa),
                        (sites.rho, kappa / (alpha + kappa)), (sites.dp_concentration, sigma)):
        if site is not None:
            values[site] = jnp.asarray(value, jnp.result_type(float))
    return values


def concentrations_of_sites(spec: ModelSpec, values: Dict[str, jax.Array], current: crp.Concentrations
                            ) -> crp.Concentrations:
    """The inverse of :func:`hyper_site_values`: the concentrations ``(gamma, alpha, kappa)`` at the
    values ``{site: value}`` of the sites with exact updates (``alpha = c (1 - rho)``, ``kappa = c
    rho`` from the pair ``c = alpha + kappa``, ``rho = kappa / (alpha + kappa)``); a concentration
    without such a site keeps its value in ``current`` (fixed, or set by the inner kernel's sites)."""
    sites = spec.hyper

    def value(site, default):
        return jnp.asarray(values[site], jnp.result_type(default)) if site is not None else default

    gamma = value(sites.gamma, current.gamma)
    if sites.c is not None and sites.rho is not None:
        c, rho = value(sites.c, current.alpha), value(sites.rho, current.kappa)
        return crp.Concentrations(gamma, c * (1.0 - rho), c * rho)
    return crp.Concentrations(gamma, value(sites.alpha, current.alpha), value(sites.kappa, current.kappa))


def explicit_given_states(k_theta, k_global, spec: ModelSpec, view: ModelView, states, beta, params, *,
                          weak_limit: bool, **global_options) -> Explicit:
    """The :class:`~numpyro_hdphmm.infer.contract.Explicit` values given ``states (N, T)``: the
    emission parameters (from ``params``, the current ones, where a family's update needs them) with
    ``k_theta``, then :func:`~numpyro_hdphmm._core.crp.sample_global` from ``beta (K+1,)`` with
    ``k_global`` (``weak_limit`` and ``global_options``, e.g. ``hyper_cycles``, passed on), the
    values of the hyperparameter sites with exact updates among them."""
    capacity = spec.capacity
    data = view.data
    labels = OneHot.of_states(states, data.valid, capacity)  # hard labels: the families' O(T) statistics
    params, sigma, shared = update_emission_parameters(k_theta, spec, view, view.emission, flatten_time(data.x),
                                                       labels, params)
    draw = crp.sample_global(k_global, states, data.lengths, beta, view.hyper, view.priors, weak_limit=weak_limit,
                             hyperparameters=spec.hyperparameters, **global_options)
    hyper = {**hyper_site_values(spec, draw.hyper, sigma if spec.hyper.dp_concentration else None), **shared}
    return Explicit(states, draw.beta, draw.trans, params, hyper)
