r"""The shared emission base of a categorical emission (the RCD paper's HCRP emission prior,
:func:`numpyro_hdphmm.emissions.hierarchical_categorical`): how every kernel draws it.

Discovery recognizes the base ``phi`` (a Dirichlet site whose value times a scalar ``s`` is the
``Categorical`` concentration) and, optionally, ``s`` (a Gamma site)
(:attr:`~numpyro_hdphmm.infer.plumbing.discovery.HyperSites.emission_base`, ``emission_scale``).  Once per
sweep, given the states' emission counts and with the emission probabilities integrated out,
:func:`sample_emission_base` draws both exactly (:func:`numpyro_hdphmm._core.crp.sample_shared_base`).
Kernels that integrate the emissions out (direct assignment, RCD) call it after their sweep;
kernels that keep them explicit (weak limit, beam, PGAS) call :func:`update_emission_parameters`,
which draws the base and then the parameters given it (and, after them, the ARD column
precisions of an autoregressive family, :mod:`numpyro_hdphmm.infer.moves.column_precision`),
and so does the data-driven start (the precisions held fixed).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm.infer.moves.column_precision import sample_column_precision
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView

__all__ = ["emission_with_base", "sample_emission_base", "update_emission_parameters"]


def emission_with_base(spec: ModelSpec, emission, values):
    """The categorical ``emission`` with its shared base ``phi`` (:attr:`~numpyro_hdphmm.infer.plumbing.discovery.HyperSites.emission_base`)
    and scale ``s`` replaced by ``values[site]``: concentration ``s phi``, where ``s`` is the
    scale site's value or, without one, the recognized constant ``sum of the current
    concentration`` (``emission`` itself without a shared base)."""
    hyper = spec.hyper
    if hyper.emission_base is None:
        return emission
    conc = emission.concentration
    scale = jnp.sum(conc, -1, keepdims=True) if hyper.emission_scale is None else values[hyper.emission_scale]
    new = jnp.asarray(scale, conc.dtype) * jnp.asarray(values[hyper.emission_base], conc.dtype)
    return emission.with_concentration(jnp.maximum(new, jnp.finfo(conc.dtype).tiny))  # as the model's floor


def sample_emission_base(rng_key, spec: ModelSpec, view: ModelView, stats):
    """``(emission, {site: value})``: the shared emission base (and its scale, if it is a site)
    drawn given the states' categorical statistics ``stats`` (``stats["counts"] (K, C)``, as
    ``Categorical.sufficient_statistics`` and the collapsed kernels' carried statistics hold
    them), the emission probabilities integrated out
    (:func:`~numpyro_hdphmm._core.crp.sample_shared_base`), and the family with them;
    ``(view.emission, {})`` without a shared base."""
    hyper = spec.hyper
    if hyper.emission_base is None:
        return view.emission, {}
    emission = view.emission
    phi, scale = crp.sample_shared_base(rng_key, stats["counts"], emission.concentration, view.emission_base_prior,
                                        view.data.valid.size, view.emission_scale_prior)
    values = {hyper.emission_base: phi}
    if hyper.emission_scale is not None:
        values[hyper.emission_scale] = scale
    return emission_with_base(spec, emission, values), values


def update_emission_parameters(rng_key, spec: ModelSpec, view: ModelView, emission, x, weights, params):
    """The emission step of a kernel that keeps the parameters explicit: ``(params, sigma,
    {site: value})``.  With a shared emission base, ``phi`` is drawn first with the parameters
    integrated out, then the parameters given it (one blocked draw of both given the states);
    otherwise :meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.update_parameters` alone.  With
    ARD column precisions of an autoregressive family
    (:attr:`~numpyro_hdphmm.infer.plumbing.discovery.HyperSites.column_precision`, and
    ``view.column_precision_prior`` set: ``None`` holds them fixed), ``lambda`` is then drawn
    given the new parameters of all ``K`` slots
    (:func:`~numpyro_hdphmm.infer.moves.column_precision.sample_column_precision`).
    ``x`` time-flattened, ``weights (steps, K)`` or :class:`~numpyro_hdphmm.emissions.OneHot` labels
    ``(steps,)`` (the families' statistics of hard labels, ``O(steps)`` rather than ``O(steps K)``)."""
    shared = {}
    if spec.hyper.emission_base is not None:
        emission, shared = sample_emission_base(random.fold_in(rng_key, 1), spec, view._replace(emission=emission),
                                                emission.statistics(x, weights))
    params, sigma = emission.update_parameters(rng_key, x, weights, params, view.dp_concentration_prior)
    if spec.hyper.column_precision is not None and view.column_precision_prior is not None:
        shared = {**shared, spec.hyper.column_precision: sample_column_precision(
            random.fold_in(rng_key, 2), emission, params, view.column_precision_prior)}
    return params, sigma, shared
