r"""The blocks an HDP-SLDS sweep adds to the HDP-HMM's (Fox, Sudderth, Jordan & Willsky, "Bayesian
Nonparametric Inference of Switching Dynamic Linear Models", IEEE TSP 59(4), 2011, Sec. IV).

Given the latent path ``x`` the modes, the dynamics parameters and the HDP layer of an HDP-SLDS are
those of a sticky HDP-AR-HMM whose data is ``x`` (:attr:`~numpyro_hdphmm.infer.plumbing.discovery.ModelView.data`
is the prepared ``x``): an algorithm's HMM sweep updates them unchanged.  :func:`slds_sweep` then
adds, each from its full conditional:

1. ``x | z, theta, C, R, y``: for order-1 dynamics ``x_t = A_{z_t} x_{t-1} + b_{z_t} + e_t`` the
   Kalman filter forward and the backward sampler (:func:`numpyro_hdphmm._core.kalman.kalman_sample`;
   Carter & Kohn 1994, Fruhwirth-Schnatter 1994); for order ``r > 1``, ``x_t = sum_i A^(i)_{z_t}
   x_{t-i} + b_{z_t} + e_t``, a draw through the band Cholesky factor of the path's block-banded
   posterior precision (:func:`numpyro_hdphmm._core.banded.banded_sample`; Rue & Held 2005, Alg.
   2.9).  Both start from the presample values (the dynamics family's ``center``) and run on every
   sequence at once;
   Before it, with ``marginal_modes`` (the weak-limit sweep, order-1 dynamics), the modes once more
   with the latent path integrated out: single-site updates ``z_t ~ p(z_t | z_{-t}, theta, y)``
   (:func:`numpyro_hdphmm._core.kalman.switching_mode_gibbs`; Gerlach, Carter & Kohn 2000, the
   sampler Fox et al. use for the HDP-SLDS), which moves the modes where the path drawn given the
   old modes holds them (a path smoothed through one mode makes that mode fit it best);
2. ``(C, R) | x, y``: the observation model's conjugate update
   (:meth:`~numpyro_hdphmm.models.observation.LinearGaussianObservation.update`; missing values
   imputed first).

Each block leaves the joint posterior invariant, so the composition does.
"""

from __future__ import annotations

from typing import Dict

import jax
import jax.numpy as jnp
from jax import random

from numpyro_hdphmm._core.banded import banded_sample
from numpyro_hdphmm._core.kalman import kalman_sample, switching_mode_gibbs
from numpyro_hdphmm.infer.contract import Explicit
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView

__all__ = ["sample_latent", "sample_modes_marginal", "observation_parameters", "slds_sweep", "latent_dynamics"]


def observation_parameters(extra: Dict[str, jax.Array]) -> Dict[str, jax.Array]:
    """The observation parameters ``{p: value}`` among the explicit state's ``extra``
    (``{"observation_C": ..., "observation_R": ...}`` -> ``{"C": ..., "R": ...}``)."""
    return {key.partition("_")[2]: v for key, v in extra.items() if key.startswith("observation_")}


def latent_dynamics(dynamics, params, states, length=None):
    """``(A_t (T, D, D r), b_t (T, D), Q_t (T, D, D))`` of one sequence of modes ``states (T,)``:
    the dynamics parameters ``params`` (``A (K, D, D r + a)``, ``cov (K, D, D)``) gathered along the
    modes, the lag blocks ``[A^(1) ... A^(r)]`` apart from the intercept (``b_t = 0`` without one).

    With ``length`` (an int scalar, may be traced) the padding steps ``t >= length`` get ``A_t = 0``
    and ``b_t = 0``: their latent states are independent ``N(0, Q_t)`` draws, cut off from the
    sequence.  Through the padding modes' own dynamics (an unused mode drawn from the prior, often
    explosive) a path continued for hundreds of padding steps overflowed in float32, and the
    backward sampler carried the overflow into the sequence's real steps.  The steps
    ``t < length`` have the same posterior either way (the padding carries no observation)."""
    A = params["A"][states]
    m = dynamics.dim * dynamics.order
    b = A[..., m] if dynamics.affine else jnp.zeros(A.shape[:-1], A.dtype)
    A = A[..., :m]
    if length is not None:
        real = jnp.arange(states.shape[0]) < length
        A = jnp.where(real[:, None, None], A, 0)
        b = jnp.where(real[:, None], b, 0)
    return A, b, params["cov"][states]


def _observation_model(observed, obs_params, dynamics):
    """``(C (P, D), d (P,), R, x_init (D,))`` as the samplers of :mod:`numpyro_hdphmm._core.kalman`
    take them (``R`` the variances of a diagonal noise, else the matrix), ``x_init`` the dynamics'
    presample value, in ``R``'s dtype."""
    family = observed.family
    C, d = family.loading(obs_params)
    R = family.kalman_noise(obs_params)
    return C, d, R, jnp.asarray(dynamics.center, R.dtype).reshape(-1, dynamics.dim)[0]


def sample_latent(rng_key, states, params, obs_params, dynamics, observed, lengths):
    """A draw of the latent paths ``x (N, T, D)`` from ``p(x | z, theta, C, R, y)``: ``states (N, T)``,
    the dynamics ``params``, the observation parameters ``obs_params``, ``observed``
    (:class:`~numpyro_hdphmm.infer.plumbing.discovery.ObservedData`), ``lengths (N,)``."""
    C, d, R, x_init = _observation_model(observed, obs_params, dynamics)
    dtype = R.dtype
    y = observed.y
    mask = ~jnp.isnan(y)

    def one(key, z, yn, mn, n):
        A, b, Q = (v.astype(dtype) for v in latent_dynamics(dynamics, params, z, n))
        if dynamics.order == 1:
            return kalman_sample(key, x_init, A, b, Q, C, d, R, yn, mn, n)[0]
        return banded_sample(key, x_init, A, b, Q, C, d, R, yn, mn, n)

    return jax.vmap(one)(random.split(rng_key, states.shape[0]), states, y, mask, lengths)


def sample_modes_marginal(rng_key, states, trans, params, obs_params, dynamics, observed, lengths, **options):
    """The modes ``states (N, T)`` after one sweep of single-site updates with the latent path
    integrated out (:func:`numpyro_hdphmm._core.kalman.switching_mode_gibbs`, every sequence at
    once): ``trans (K+1, K+1)`` (start row last; column ``K``, the states not represented,
    dropped), order-1 dynamics ``params`` (``A (K, D, D + a)``, ``cov (K, D, D)``), observation
    parameters and data as :func:`sample_latent`; ``options`` passed on."""
    C, d, R, x_init = _observation_model(observed, obs_params, dynamics)
    dtype = R.dtype
    k = trans.shape[-1] - 1
    log_init, log_trans = jnp.log(trans[k, :k]).astype(dtype), jnp.log(trans[:k, :k]).astype(dtype)
    D = dynamics.dim
    A = params["A"].astype(dtype)
    b = A[..., D] if dynamics.affine else jnp.zeros(A.shape[:-1], dtype)
    Q = params["cov"].astype(dtype)
    y = observed.y

    def one(key, z, yn, n):
        return switching_mode_gibbs(key, z, log_init, log_trans, x_init, A[..., :D], b, Q, C, d, R, yn,
                                    ~jnp.isnan(yn), n, **options)

    return jax.vmap(one)(random.split(rng_key, states.shape[0]), states, y, lengths)


def slds_sweep(hmm_step, rng_key, state: Explicit, spec: ModelSpec, view: ModelView, marginal_modes: bool = False):
    """One sweep of an HDP-SLDS (module docstring): ``hmm_step(key, state, spec, view) -> (Explicit,
    Info)`` on the latent path as data, with ``marginal_modes`` (order-1 dynamics) the modes again
    with the latent path integrated out, then the latent path and the observation parameters from
    their conditionals.  Returns ``(Explicit, Info)``."""
    k_hmm, k_x, k_obs, k_z = random.split(rng_key, 4)
    before = state.extra
    state, info = hmm_step(k_hmm, state, spec, view)
    state = state._replace(extra=before)  # the HMM step knows nothing of the latent path
    observed = view.observed
    lengths = view.data.lengths
    obs_params = observation_parameters(state.extra)
    if marginal_modes and view.emission.order == 1:
        modes = sample_modes_marginal(k_z, state.states, state.trans, state.params, obs_params, view.emission,
                                      observed, lengths)
        state = state._replace(states=modes.astype(state.states.dtype))
    x = sample_latent(k_x, state.states, state.params, obs_params, view.emission, observed, lengths)
    new_obs = observed.family.update(k_obs, obs_params, x, observed.y, observed.valid)
    latent = x if spec.batched else x[0]
    extra = {**state.extra, "latent": latent.astype(state.extra["latent"].dtype),
             **{f"observation_{p}": v.astype(state.extra[f"observation_{p}"].dtype) for p, v in new_obs.items()}}
    return state._replace(extra=extra), info
