"""``numpyro_hdphmm.sample``: declare an HDP-HMM inside a NumPyro model as explicit sites."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro

from numpyro_hdphmm._core.validation import is_concrete
from numpyro_hdphmm.distributions import (
    GEM,
    EmissionLikelihood,
    HDPTransitions,
    MarkovChain,
    StickyHDPHMM,
)

__all__ = ["sample", "HDP_ROLE"]

#: key of ``site["infer"]`` under which every site declared here records its role
HDP_ROLE = "hdphmm_role"


def _sequence_layout(hmm: StickyHDPHMM, obs, lengths):
    """Return ``(num_sequences or None, num_steps, lengths)`` and validate ``obs``/``lengths``."""
    event_ndim = len(hmm.emission.event_shape)
    if obs is None:
        if hmm.num_steps is None:
            raise ValueError("Without `obs`, the model needs `num_steps` to know how long a sequence to draw.")
        if lengths is None:
            return None, hmm.num_steps, None
        lengths = jnp.asarray(lengths)
        if lengths.ndim != 1:
            raise ValueError(f"`lengths` must have shape (N,), got {lengths.shape}.")
        return lengths.shape[0], hmm.num_steps, lengths
    ndim = jnp.ndim(obs)
    trailing = tuple(jnp.shape(obs)[ndim - event_ndim:]) if event_ndim else ()
    if ndim not in (event_ndim + 1, event_ndim + 2) or (event_ndim and trailing[: len(hmm.emission.event_shape)] != tuple(hmm.emission.event_shape)):
        raise ValueError(
            f"`obs` must have shape (T, *event) or (N, T, *event) with event shape {tuple(hmm.emission.event_shape)}, "
            f"got {jnp.shape(obs)}."
        )
    if is_concrete(obs):
        hmm.emission.check_observations(obs, "obs")
    batched = ndim == event_ndim + 2
    num_steps = jnp.shape(obs)[1 if batched else 0]
    if lengths is not None:
        if not batched:
            raise ValueError("`lengths` is only meaningful for several sequences: `obs` of shape (N, T, *event).")
        if jnp.shape(lengths) != (jnp.shape(obs)[0],):
            raise ValueError(f"`lengths` must have shape (N,) = ({jnp.shape(obs)[0]},), got {jnp.shape(lengths)}.")
        if is_concrete(lengths):
            ln = np.asarray(lengths)
            if not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > num_steps):
                raise ValueError(f"`lengths` must be integers in [1, T={num_steps}], got {ln}.")
        lengths = jnp.asarray(lengths, jnp.int32)
    return (jnp.shape(obs)[0] if batched else None), num_steps, lengths


def sample(name: str, hmm: StickyHDPHMM, obs=None, lengths=None):
    r"""Declare the HDP-HMM ``hmm`` in a NumPyro model, with its latent structure as sites.

    Mirrors ``numpyro.sample(name, fn, obs=obs)`` and declares, in order:

    ============================  ==========================================  =====================
    site                          distribution                                shape
    ============================  ==========================================  =====================
    ``{name}_beta``               ``GEM(gamma, K)``                           ``(K+1,)``
    ``{name}_trans``              ``HDPTransitions(beta, alpha, kappa)``      ``(K+1, K+1)``
    ``{name}_{p}`` per parameter  the emission family's prior                 ``(K, ...)``
    ``{name}_states``             ``MarkovChain(trans[K], trans[:K], T)``     ``(T,)`` / ``(N, T)``
    ``{name}`` (observed)         ``EmissionLikelihood``, pointwise in time   ``(T, ...)`` / ``(N, T, ...)``
    ============================  ==========================================  =====================

    with ``K = hmm.max_states``.  ``obs`` is one sequence ``(T, *event)`` or several
    ``(N, T, *event)`` padded to a common ``T`` with ``lengths (N,)``; NaN marks a missing
    observation (it contributes nothing to the likelihood and is not imputed).  Without ``obs``
    (prior predictive, ``Predictive``) a sequence of ``hmm.num_steps`` steps is drawn.  The time
    axis is a plate named ``"time"`` (sequences: ``"sequence"``) so that ArviZ labels the
    dimensions.  Every site carries ``infer={"hdphmm_role": ...}`` so kernels can find them.

    Returns the observations (``obs``, or the draw).
    """
    if not isinstance(hmm, StickyHDPHMM):
        raise ValueError(f"`hmm` must be a StickyHDPHMM or HDPHMM, got {type(hmm).__name__}.")
    if hmm.batch_shape != ():
        raise ValueError(f"`hmm` must have scalar hyperparameters (batch shape ()), got {hmm.batch_shape}.")
    num_sequences, num_steps, lengths = _sequence_layout(hmm, obs, lengths)
    num_states = hmm.max_states
    role = lambda r, **kw: {HDP_ROLE: r, "hdphmm_name": name, **kw}

    beta = numpyro.sample(f"{name}_beta", GEM(hmm.gamma, num_states), infer=role("beta"))
    trans = numpyro.sample(f"{name}_trans", HDPTransitions(beta, hmm.alpha, hmm.kappa), infer=role("trans"))
    params = hmm.emission.sample_sites(name, num_states)

    chain = MarkovChain(trans[num_states], trans[:num_states], num_steps, lengths=lengths)
    if num_sequences is None:
        states = numpyro.sample(f"{name}_states", chain, infer=role("states", event_dims=["time"]))
        with numpyro.plate("time", num_steps, dim=-1):
            y = numpyro.sample(name, EmissionLikelihood(hmm.emission, params, states), obs=obs, infer=role("obs"))
    else:
        with numpyro.plate("sequence", num_sequences, dim=-1):
            states = numpyro.sample(f"{name}_states", chain, infer=role("states", event_dims=["time"]))
        with numpyro.plate("sequence", num_sequences, dim=-2), numpyro.plate("time", num_steps, dim=-1):
            y = numpyro.sample(
                name, EmissionLikelihood(hmm.emission, params, states, lengths), obs=obs, infer=role("obs")
            )
    return y
