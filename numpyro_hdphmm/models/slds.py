r"""The (sticky) HDP-SLDS: the model class ``"slds"`` (Fox, Sudderth, Jordan & Willsky, "Bayesian
Nonparametric Inference of Switching Dynamic Linear Models", IEEE TSP 59(4), 2011, eqs. 2-3).

A discrete mode sequence from the sticky HDP-HMM prior switches the linear dynamics of a continuous
latent state, which is observed through a linear Gaussian map:

.. math::

    \beta \sim \mathrm{GEM}(\gamma), \quad \pi_j \sim \mathrm{DP}(\alpha + \kappa,
    \tfrac{\alpha\beta + \kappa\delta_j}{\alpha + \kappa}), \quad z_t \sim \pi_{z_{t-1}},

    x_t = \sum_{i=1}^{r} A^{(i)}_{z_t} x_{t-i} + b_{z_t} + e_t, \quad e_t \sim \mathcal N(0, Q_{z_t}), \qquad
    y_t = C x_t + d + w_t, \quad w_t \sim \mathcal N(0, R).

The dynamics ``(A_k, b_k, Q_k)`` are the parameters of an order-``r``
:class:`~numpyro_hdphmm.emissions.AutoRegressive` family over ``x`` (matrix-normal-inverse-Wishart
prior; its presample value, ``center``, is ``x_0 = x_{-1} = ... = x_{1-r}``; Fox et al.'s model is
``r = 1``, MoSeq's latent dynamics ``r = 3``); the observation model ``(C, d, R)`` is a
:class:`~numpyro_hdphmm.models.observation.LinearGaussianObservation`.  Given the latent path ``x``
the modes are a sticky HDP-HMM with autoregressive emissions (the HDP-AR-HMM) on ``x``: every
algorithm step of the HMM applies to it unchanged.  With ``C = I``, ``d = 0`` and ``R -> 0`` the
model is the HDP-AR-HMM of ``y``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Tuple

import jax
import jax.numpy as jnp
import numpyro
from jax import random
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution

from numpyro_hdphmm._core.validation import as_parameter, check_nonnegative, check_positive
from numpyro_hdphmm.distributions import (
    GEM,
    EmissionLikelihood,
    HDPTransitions,
    MarkovChain,
    check_capacity,
    safe_log,
    sample_markov_chain,
)
from numpyro_hdphmm.emissions.autoregressive import AutoRegressive
from numpyro_hdphmm.models.base import HDP_ROLE, NAME_KEY, ModelClass, SiteRole
from numpyro_hdphmm.models.declare import declare_sites
from numpyro_hdphmm.models.observation import LinearGaussianObservation, ObservationLikelihood

__all__ = ["HDPSLDS"]


class HDPSLDS(ModelClass, Distribution):
    r"""The sticky HDP-SLDS of Fox et al. (2011) as a generative distribution over sequences (module
    docstring).

    Arguments: ``gamma``, ``alpha``, ``kappa`` (the sticky HDP-HMM prior of the modes, as for
    :class:`~numpyro_hdphmm.StickyHDPHMM`), ``dynamics`` (an
    :class:`~numpyro_hdphmm.emissions.AutoRegressive` family of any order ``r`` over the
    ``D``-dimensional latent state: ``A_k = [A_k^(1) ... A_k^(r)]`` with the intercept column ``b_k``
    when ``affine``, ``Q_k``), ``observation`` (a
    :class:`~numpyro_hdphmm.models.observation.LinearGaussianObservation` with ``latent_dim = D``),
    ``max_states`` (the capacity ``K``) and ``num_steps`` (the length of a generated sequence).

    Declare it with :func:`numpyro_hdphmm.sample`: the sites of the sticky HDP-HMM whose emission
    parameters are the dynamics (``{name}_A (K, D, D r + 1)``, ``{name}_cov (K, D, D)``), the observation
    parameters ``{name}_R`` (and ``{name}_C`` when learned), the modes ``{name}_states``, the latent
    path ``{name}_latent (T, D)`` and the observed ``{name} (T, P)``.
    :class:`~numpyro_hdphmm.infer.WeakLimitGibbs` samples it (Fox et al.'s blocked Gibbs sampler).
    """

    arg_constraints = {
        "gamma": constraints.positive,
        "alpha": constraints.positive,
        "kappa": constraints.nonnegative,
    }
    support = constraints.real
    pytree_data_fields = ("gamma", "alpha", "kappa", "emission", "observation")
    pytree_aux_fields = ("max_states", "num_steps")
    kind = "slds"
    layer_role = "latent"

    def __init__(self, gamma, alpha, kappa, dynamics, observation, max_states: int, num_steps=None, *,
                 validate_args=None):
        gamma, alpha, kappa = (as_parameter(n, v) for n, v in (("gamma", gamma), ("alpha", alpha), ("kappa", kappa)))
        if not isinstance(dynamics, AutoRegressive):
            raise ValueError("`dynamics` must be an nh.emissions.AutoRegressive family over the latent state, "
                             f"got {type(dynamics).__name__}.")
        if dynamics.batch_shape != ():
            raise ValueError(f"`dynamics` must be a prior (batch shape ()), got batch shape {dynamics.batch_shape}.")
        if not isinstance(observation, LinearGaussianObservation):
            raise ValueError("`observation` must be an nh.LinearGaussianObservation, got "
                             f"{type(observation).__name__}.")
        if observation.latent_dim != dynamics.dim:
            raise ValueError(f"`observation` has latent_dim={observation.latent_dim} but `dynamics` is over a "
                             f"{dynamics.dim}-dimensional latent state: they must agree.")
        self.max_states = check_capacity("max_states", max_states, 2)
        self.num_steps = None if num_steps is None else check_capacity("num_steps", num_steps, 1)
        check_positive("gamma", gamma)
        check_positive("alpha", alpha)
        check_nonnegative("kappa", kappa)
        dtype = jnp.result_type(gamma, alpha, kappa, float)
        self.gamma, self.alpha, self.kappa = (jnp.asarray(v, dtype) for v in (gamma, alpha, kappa))
        self.emission = dynamics
        self.observation = observation
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(self.gamma), jnp.shape(self.alpha), jnp.shape(self.kappa))
        event_shape = (self.num_steps or 1,) + tuple(observation.event_shape)
        super().__init__(batch_shape=batch_shape, event_shape=event_shape, validate_args=validate_args)

    @property
    def dynamics(self) -> AutoRegressive:
        """The dynamics family (the HDP layer's emission family, over the latent state)."""
        return self.emission

    def site_roles(self) -> Tuple[SiteRole, ...]:
        """The sites :func:`numpyro_hdphmm.sample` declares: the sticky HDP-HMM's with the dynamics as
        the emission parameters, the observation parameters (role ``"observation"``), the modes, the
        latent path (role ``"latent"``) and the observations."""
        return (
            SiteRole("beta", "beta", description="global weights GEM(gamma, K)"),
            SiteRole("trans", "trans", description="mode transition rows HDPTransitions(beta, alpha, kappa), start row last"),
            *(SiteRole("emission", p, p, "dynamics parameter (A_k with the intercept b_k; Q_k), the MNIW prior expanded "
                                         "over the K modes") for p in self.emission.param_names),
            *(SiteRole("observation", p, p, "observation parameter ([C d] learned; R)")
              for p in self.observation.param_names),
            SiteRole("states", "states", description="mode sequence MarkovChain(trans[K], trans[:K], T)"),
            SiteRole("latent", "latent", description="continuous latent path x_t = sum_i A_z^(i) x_{t-i} + b_z + e_t (T, D)"),
            SiteRole("obs", "", description="observations y_t = C x_t + d + w_t"),
        )

    def declare(self, name: str, obs=None, lengths=None):
        """Declare the HDP-SLDS's sites (:meth:`site_roles`) in the running model; called by
        :func:`numpyro_hdphmm.sample`."""
        tag = {HDP_ROLE: "observation", NAME_KEY: name}
        k = self.max_states

        def observe(name, params, own, states, obs, lengths, infer):
            latent = numpyro.sample(f"{name}_latent", EmissionLikelihood(self.emission, params, states, lengths),
                                    infer={HDP_ROLE: "latent", NAME_KEY: name})
            return numpyro.sample(name, ObservationLikelihood(self.observation, own, latent, lengths), obs=obs,
                                  infer=infer)

        return declare_sites(self, name, obs, lengths, kappa=self.kappa,
                             own_sites=lambda name, num_states: self.observation.sample_sites(name, tag),
                             chain=lambda trans, own, num_steps, lengths: MarkovChain(trans[k], trans[:k], num_steps,
                                                                                      lengths=lengths),
                             observe=observe, layout=SimpleNamespace(emission=self.observation, num_steps=self.num_steps))

    def _draw_one(self, key, gamma, alpha, kappa):
        k_beta, k_trans, k_par, k_obs, k_z, k_x, k_y = random.split(key, 7)
        num_states = self.max_states
        beta = GEM(gamma, num_states).sample(k_beta)
        trans = HDPTransitions(beta, alpha, kappa).sample(k_trans)
        params = self.emission.sample_parameters(k_par, (num_states,))
        obs_params = self.observation.sample_parameters(k_obs)
        states, overflow = sample_markov_chain(k_z, safe_log(trans[num_states]), safe_log(trans[:num_states]),
                                               self.num_steps)
        x = self.emission.sample_observations(k_x, params, states)
        y = self.observation.sample_observations(k_y, obs_params, x)
        return y, dict(beta=beta, trans=trans, states=states, overflow=overflow, latent=x, **params, **obs_params)

    def log_prob(self, value):
        raise NotImplementedError(
            f"{type(self).__name__}.log_prob: the marginal density of an HDP-SLDS has no closed form. Declare the model "
            "with numpyro_hdphmm.sample(name, slds, obs=y), which exposes the modes, the latent path and the parameters "
            "as sample sites for nh.infer.WeakLimitGibbs.")
