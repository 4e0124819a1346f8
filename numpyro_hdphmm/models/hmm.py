r"""The sticky HDP-HMM and the HDP-HMM: the model class ``"hmm"`` (Fox et al. 2007, eq. 25; Teh et al.
2006), the worked example of ``docs/kernels.md`` ("Adding a model class").

Its latent structure beyond the shared HDP layer (``beta``, the rows) is the discrete state
sequence and the per-state emission parameters; :meth:`StickyHDPHMM.site_roles` lists the sites,
:meth:`StickyHDPHMM.declare` declares them.  Model convention: :mod:`numpyro_hdphmm.distributions`.
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
from jax import random
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution

from numpyro_hdphmm._core.validation import as_parameter, check_nonnegative, check_positive
from numpyro_hdphmm.distributions import (
    GEM,
    HDPTransitions,
    MarkovChain,
    check_capacity,
    safe_log,
    sample_markov_chain,
)
from numpyro_hdphmm.emissions.base import EmissionFamily
from numpyro_hdphmm.models.base import ModelClass, SiteRole
from numpyro_hdphmm.models.declare import declare_sites

__all__ = ["StickyHDPHMM", "HDPHMM"]


class StickyHDPHMM(ModelClass, Distribution):
    r"""The sticky HDP-HMM of Fox et al. (eq. 25) as a generative distribution over sequences.

    Arguments: ``gamma`` (top-level concentration), ``alpha`` (transition concentration),
    ``kappa >= 0`` (self-transition bias; 0 gives the HDP-HMM), ``emission`` (an
    :class:`~numpyro_hdphmm.emissions.EmissionFamily`, or a callable ``k -> Distribution`` of one
    observation given state ``k``, vectorized over ``k``, wrapped in
    :class:`~numpyro_hdphmm.emissions.CustomEmission`), ``max_states`` (the capacity ``K``: how
    many states may be represented; not a truncation of the model, see the module docstring) and
    ``num_steps`` (the length ``T`` of a generated sequence).

    ``sample`` draws observations ``(T, *event_shape)`` from the generative model;
    ``sample_with_intermediates`` also returns a dict with ``beta``, ``trans`` (start row last),
    the emission parameters, ``states`` and ``overflow`` (the number of draws that needed a state
    beyond the capacity; a ``RuntimeWarning`` is emitted when it is positive).

    ``log_prob`` is not available: the marginal density of the observations integrates over the
    infinite state space and has no closed form.  In a model declare the HDP-HMM with
    :func:`numpyro_hdphmm.sample`, which exposes its latent structure as explicit sites that the
    package's kernels sample; for a fixed, finite HMM whose states are summed out use
    :class:`HiddenMarkovModel`.
    """

    arg_constraints = {
        "gamma": constraints.positive,
        "alpha": constraints.positive,
        "kappa": constraints.nonnegative,
    }
    support = constraints.real
    pytree_data_fields = ("gamma", "alpha", "kappa", "emission")
    pytree_aux_fields = ("max_states", "num_steps")
    kind = "hmm"

    def __init__(self, gamma, alpha, kappa, emission, max_states: int, num_steps=None, *, validate_args=None):
        gamma, alpha, kappa = (as_parameter(n, v) for n, v in (("gamma", gamma), ("alpha", alpha), ("kappa", kappa)))
        if not isinstance(emission, EmissionFamily):
            if not callable(emission) or isinstance(emission, Distribution):
                raise ValueError(
                    "`emission` must be an emission family from numpyro_hdphmm.emissions or a callable "
                    f"k -> numpyro Distribution (vectorized over states), got {type(emission).__name__}."
                )
            from numpyro_hdphmm.emissions.custom import CustomEmission

            emission = CustomEmission(emission, check_capacity("max_states", max_states, 2))
        if emission.batch_shape != ():
            raise ValueError(f"`emission` must be a prior (batch shape ()), got batch shape {emission.batch_shape}.")
        self.max_states = check_capacity("max_states", max_states, 2)
        self.num_steps = None if num_steps is None else check_capacity("num_steps", num_steps, 1)
        check_positive("gamma", gamma)
        check_positive("alpha", alpha)
        check_nonnegative("kappa", kappa)
        dtype = jnp.result_type(gamma, alpha, kappa, float)
        self.gamma = jnp.asarray(gamma, dtype)
        self.alpha = jnp.asarray(alpha, dtype)
        self.kappa = jnp.asarray(kappa, dtype)
        self.emission = emission
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(self.gamma), jnp.shape(self.alpha), jnp.shape(self.kappa))
        event_shape = (self.num_steps or 1,) + tuple(emission.event_shape)
        super().__init__(batch_shape=batch_shape, event_shape=event_shape, validate_args=validate_args)

    def site_roles(self) -> Tuple[SiteRole, ...]:
        """The sites :func:`numpyro_hdphmm.sample` declares (table of :meth:`declare`)."""
        params = self.emission.param_names  # () for custom emissions: the parameters are the user's sites
        return (
            SiteRole("beta", "beta", description="global weights GEM(gamma, K)"),
            SiteRole("trans", "trans", description="transition rows HDPTransitions(beta, alpha, kappa), start row last"),
            *(SiteRole("emission", p, p, "emission parameter, the family's prior expanded over the K states")
              for p in params),
            SiteRole("states", "states", description="discrete state sequence MarkovChain(trans[K], trans[:K], T)"),
            SiteRole("obs", "", description="observations, the emission likelihood indexed by the states"),
        )

    def declare(self, name: str, obs=None, lengths=None):
        """Declare the sticky HDP-HMM's sites: ``{name}_beta``, ``{name}_trans``, the emission
        parameters, ``{name}_states`` and the observed ``{name}`` (the table of
        :func:`numpyro_hdphmm.sample`, which calls this; the roles are :meth:`site_roles`)."""
        return declare_sites(
            self, name, obs, lengths, kappa=self.kappa, own_sites=lambda name, k: {},
            chain=lambda trans, own, num_steps, lengths: MarkovChain(trans[self.max_states], trans[:self.max_states],
                                                                     num_steps, lengths=lengths))

    def _draw_one(self, key, gamma, alpha, kappa):
        k_beta, k_trans, k_par, k_z, k_y = random.split(key, 5)
        num_states = self.max_states
        beta = GEM(gamma, num_states).sample(k_beta)
        trans = HDPTransitions(beta, alpha, kappa).sample(k_trans)
        params = self.emission.sample_parameters(k_par, (num_states,))
        states, overflow = sample_markov_chain(
            k_z, safe_log(trans[num_states]), safe_log(trans[:num_states]), self.num_steps
        )
        y = self.emission.sample_observations(k_y, params, states)
        return y, dict(beta=beta, trans=trans, states=states, overflow=overflow, **params)

    def log_prob(self, value):
        raise NotImplementedError(
            f"{type(self).__name__}.log_prob: the marginal density of an HDP-HMM has no closed form. "
            "Declare the model with numpyro_hdphmm.sample(name, hmm, obs=y), which exposes beta, the "
            "transition rows, the emission parameters and the states as sample sites for the package's "
            "kernels; or use numpyro_hdphmm.HiddenMarkovModel for a finite HMM with the states summed out."
        )


class HDPHMM(StickyHDPHMM):
    r"""The HDP-HMM of Teh et al. (2006): :class:`StickyHDPHMM` with ``kappa = 0``."""

    arg_constraints = {"gamma": constraints.positive, "alpha": constraints.positive}

    def __init__(self, gamma, alpha, emission, max_states: int, num_steps=None, *, validate_args=None):
        super().__init__(gamma, alpha, 0.0, emission, max_states, num_steps, validate_args=validate_args)
