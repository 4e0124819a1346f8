"""The declaration every model class of the HDP family shares (the body of
:func:`numpyro_hdphmm.sample`): ``beta``, the rows, the emission parameters, the class's own
sites, the state sequence and the observations, each tagged with its role
(:mod:`numpyro_hdphmm.models.base`).  A model class supplies what differs: the stickiness of the
rows, its further sites and the law of the state sequence given the rows."""

from __future__ import annotations

from functools import partial
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax import random

from numpyro_hdphmm._core.validation import host_warning
from numpyro_hdphmm.distributions import GEM, EmissionLikelihood, HDPTransitions, warn_escape
from numpyro_hdphmm.models.base import HDP_ROLE, MODEL_KEY, NAME_KEY, NOT_ENUMERABLE
from numpyro_hdphmm.models.layout import check_states_shape, layout_from_draws, sequence_layout

__all__ = ["declare_sites", "draw_model"]


def declare_sites(model, name: str, obs, lengths, *, kappa, own_sites: Callable[[str, int], Dict],
                  chain: Callable, observe: Optional[Callable] = None, layout=None):
    """Declare the sites of ``model`` (a model class with ``gamma``, ``alpha``, ``emission``,
    ``max_states``) as ``name``: ``{name}_beta ~ GEM(gamma, K)``, ``{name}_trans ~
    HDPTransitions(beta, alpha, kappa)`` (start row last), the emission parameters, the sites of
    ``own_sites(name, K)`` (a dict of their values), ``{name}_states ~ chain(trans, own, num_steps,
    lengths)`` (a distribution over ``(T,)`` sequences) and the observed ``{name}``: by default
    ``EmissionLikelihood(emission, params, states)``; a model class with further latent structure
    between the states and the data passes ``observe(name, params, own, states, obs, lengths, infer)``
    (run inside the ``sequence`` and ``time`` plates; ``infer``: the observed site's tag) and
    ``layout`` (the object whose ``emission`` and ``num_steps`` check the data's layout,
    :func:`~numpyro_hdphmm.models.layout.sequence_layout`).  Returns the observations (``obs``, or
    the draw)."""
    if model.batch_shape != ():
        raise ValueError(f"`hmm` must have scalar hyperparameters (batch shape ()), got {model.batch_shape}.")
    raw_lengths = lengths
    obs, num_sequences, num_steps, lengths = sequence_layout(model if layout is None else layout, obs, lengths)
    num_states = model.max_states
    role = lambda r, **kw: {HDP_ROLE: r, NAME_KEY: name, **kw}

    beta = numpyro.sample(f"{name}_beta", GEM(model.gamma, num_states), infer=role("beta"))
    if jnp.shape(beta) != (num_states + 1,):
        raise NotImplementedError(
            f"numpyro_hdphmm.sample('{name}'): its sites got batch shape {jnp.shape(beta)[:-1]} from an enclosing "
            "`numpyro.plate` (or a batched substituted value); the HDP-HMM declares its own plates. For several "
            "sequences pass `obs` of shape (N, T, ...) (with `lengths=`) instead of a plate; for independent "
            "HDP-HMMs fit one model per group."
        )
    trans = numpyro.sample(f"{name}_trans", HDPTransitions(beta, model.alpha, kappa), infer=role("trans"))
    params = model.emission.sample_sites(name, num_states)
    own = own_sites(name, num_states)

    law = chain(trans, own, num_steps, lengths)
    states_infer = role("states", event_dims=["time"], enumerate=NOT_ENUMERABLE)
    if num_sequences is None:
        states = numpyro.sample(f"{name}_states", law, infer=states_infer)
    else:
        with numpyro.plate("sequence", num_sequences, dim=-1):
            states = numpyro.sample(f"{name}_states", law, infer=states_infer)
    if obs is None:  # under Predictive the states are the posterior draws: their layout decides
        num_sequences, num_steps = layout_from_draws(name, model, states, raw_lengths)
    else:  # a value given for the states (substituted, conditioned, resumed) must fit the data
        check_states_shape(name, states, (num_steps,) if num_sequences is None else (num_sequences, num_steps))
    obs_infer = role("obs", **{MODEL_KEY: model})
    if observe is None:
        observe = lambda name, params, own, states, obs, lengths, infer: numpyro.sample(
            name, EmissionLikelihood(model.emission, params, states, lengths), obs=obs, infer=infer)
    if num_sequences is None:
        with numpyro.plate("time", num_steps, dim=-1):
            return observe(name, params, own, states, obs, None, obs_infer)
    with numpyro.plate("sequence", num_sequences, dim=-2), numpyro.plate("time", num_steps, dim=-1):
        return observe(name, params, own, states, obs, lengths, obs_infer)


@partial(jax.jit, static_argnums=(2, 3))
def draw_model(model, key, sample_shape, warn=True):
    """Draws of a model class's generative process (the jitted body of
    :meth:`~numpyro_hdphmm.models.base.ModelClass.sample_with_intermediates`, compiled once per
    shape): ``model._draw_one(key, *hyperparameters) -> (y, intermediates)`` vmapped over
    ``sample_shape + batch_shape``, the hyperparameters named by ``model.draw_arguments``
    broadcast to it; a ``RuntimeWarning`` (``warn``) when a draw needed a state beyond the capacity
    (``intermediates["overflow"]``)."""
    shape = sample_shape + model.batch_shape
    n = int(np.prod(shape)) if shape else 1
    flat = [jnp.broadcast_to(getattr(model, a), shape).reshape(n) for a in model.draw_arguments]
    y, inter = jax.vmap(model._draw_one)(random.split(key, n), *flat)
    if warn:
        host_warning(warn_escape, inter["overflow"], type(model).__name__ + ".sample")
    reshape = lambda a: a.reshape(shape + a.shape[1:])
    return reshape(y), {k: reshape(v) for k, v in inter.items()}
