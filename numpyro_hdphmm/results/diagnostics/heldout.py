r"""Held-out predictive log-likelihood of posterior draws of an HDP-HMM.

:func:`predictive_log_likelihood` scores held-out sequences under every posterior draw (the
states summed out by the forward algorithm, or by a particle filter) and averages the
likelihoods over draws; :class:`PredictiveLogLikelihood` is its result, and also that of
:meth:`numpyro_hdphmm.infer.CollapsedSVI.predictive_log_likelihood` (one plug-in HMM, ``S = 1``).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from numpyro_hdphmm.emissions.base import EmissionFamily
from numpyro_hdphmm.results.posterior import as_sequences, marginal_log_likelihood

__all__ = ["PredictiveLogLikelihood", "predictive_log_likelihood"]


class PredictiveLogLikelihood(NamedTuple):
    r"""Held-out predictive log-likelihood of ``S`` parameter values, ``N`` held-out sequences.

    The result of :func:`predictive_log_likelihood` (``S`` posterior draws) and of
    :meth:`numpyro_hdphmm.infer.CollapsedSVI.predictive_log_likelihood` (the plug-in HMM of the
    variational posterior, one value: ``S = 1``).  With ``l_s = log p(y_heldout | pi^(s),
    theta^(s))`` (the states summed out):

    * ``log_likelihood ()``: ``log (1/S) sum_s exp(l_s)``, the Monte Carlo estimate of
      ``log p(y_heldout | y_train)`` (for ``S = 1`` the plug-in's ``l_1``);
    * ``per_draw (S,)``: ``l_s``, summed over the held-out sequences;
    * ``per_sequence (S, N)``: the same per held-out sequence (``N = 1`` for one sequence);
    * ``num_observed ()``: integer, the held-out steps that carry an observation (not missing
      or padding);
    * ``per_step ()``: ``log_likelihood / num_observed``, the log-likelihood per observed step
      (Wang & Blunsom's "per time step" metric);
    * ``perplexity ()``: ``exp(-per_step)`` (the per-word perplexity of discrete data, RCD
      eqs. 38-39).

    :func:`predictive_log_likelihood` returns NumPy values (``num_observed`` a Python ``int``);
    the plug-in's are JAX arrays (the method can be traced by ``jax.jit``).
    """

    log_likelihood: np.ndarray
    per_draw: np.ndarray
    per_sequence: np.ndarray
    num_observed: int
    per_step: np.ndarray
    perplexity: np.ndarray


def predictive_log_likelihood(samples, emission, y_heldout, name: str = "y", lengths=None,
                              renormalize: bool = False, batch_size: Optional[int] = None,
                              method: str = "forward", num_particles: int = 100, rng_key=None
                              ) -> PredictiveLogLikelihood:
    r"""Held-out predictive log-likelihood from posterior draws of an HDP-HMM.

    For every draw ``s`` the states are summed out by the forward algorithm (Rabiner 1989
    eq. 103, through :func:`numpyro_hdphmm.marginal_log_likelihood`):

    ``l_s = log p(y_heldout | pi^(s), theta^(s)) = log sum_z pi0(z_1) f(y_1 | theta_{z_1})
    prod_t pi_{z_{t-1} z_t} f(y_t | theta_{z_t})``

    with the start row ``pi0 = trans[K, :K]`` (the LAST row of ``{name}_trans``), the state rows
    ``trans[:K, :K]`` and the emission parameters ``{name}_{p}`` of the draw.  The Monte Carlo
    estimate of the posterior predictive ``p(y_heldout | y_train)`` is
    ``log (1/S) sum_s exp(l_s)`` (log-mean-exp over draws).  Several held-out sequences are
    scored jointly (``l_s`` is the sum over sequences, each started from the start row).

    Unrepresented states: the draw's rows put mass ``trans[j, K]`` on states beyond the
    capacity, whose emission parameters are not instantiated (their predictive would need
    the prior).  By default (``renormalize=False``) this mass is simply dropped: the result is
    the probability of the held-out data AND of never leaving the represented states, a
    lower bound on the predictive of the full model that is exact when the leftover mass is
    negligible.  ``renormalize=True`` instead renormalizes the first ``K`` columns of every
    row (the predictive of the ``K``-state HMM conditioned on staying represented).

    Args:
        samples: dict of posterior draws (``mcmc.get_samples()``) with ``{name}_trans``
            ``(*S, K+1, K+1)`` and each emission parameter ``{name}_{p}`` ``(*S, K, ...)``; any
            number of leading draw axes (e.g. chains x draws), flattened.
        emission: the emission family used by the model (supplies ``param_names``,
            ``prepare`` and ``log_likelihoods``).
        y_heldout: ``(T, *event)`` one sequence or ``(N, T, *event)`` several, padded to a
            common ``T`` and with ``lengths (N,)``; NaN marks a missing observation (skipped,
            the transition is still applied).  For autoregressive emissions the presample
            values of each held-out sequence are zero (the family's ``prepare``).
        name: the name given to :func:`numpyro_hdphmm.sample`.
        lengths: optional ``(N,)`` int sequence lengths.
        renormalize: see above.
        batch_size: draws processed together (``jax.lax.map``); default one at a time.
        method: ``"forward"`` (exact, the default) or ``"particle"``: ``l_s`` estimated by a
            particle filter of ``num_particles`` particles per draw and sequence, the evaluation
            of the restricted-collapsed-draw paper (eqs. 38-39 with 100 particles; see
            :func:`numpyro_hdphmm.marginal_log_likelihood`).  ``exp(l_s)`` is then unbiased, so
            the estimate of ``p(y_heldout | y_train)`` stays unbiased, with more variance.
        num_particles, rng_key: the particle filter's size and PRNG key (``method="particle"``).

    Returns:
        :class:`PredictiveLogLikelihood`.  ``perplexity = exp(-log_likelihood / n)`` with ``n``
        the number of observed held-out steps (the per-word perplexity of RCD eq. 38-39 for
        categorical data).
    """
    if not isinstance(emission, EmissionFamily):
        raise ValueError(f"`emission` must be an EmissionFamily, got {type(emission).__name__}.")
    as_sequences(emission, y_heldout, lengths, "y_heldout")  # errors name `y_heldout`
    res = marginal_log_likelihood(emission, samples, y_heldout, lengths=lengths, name=name,
                                  renormalize=renormalize, batch_size=batch_size, method=method,
                                  num_particles=num_particles, rng_key=rng_key)
    num_draws = int(np.prod(np.shape(samples[f"{name}_trans"])[:-2]))
    per_sequence = jnp.reshape(res.total, (num_draws, -1))
    num_observed = int(np.sum(np.asarray(res.observed)))
    per_draw = jnp.sum(per_sequence, axis=-1)
    total = logsumexp(per_draw) - math.log(num_draws)
    per_step = total / max(num_observed, 1)
    perplexity = jnp.exp(-per_step)
    return PredictiveLogLikelihood(
        np.asarray(total), np.asarray(per_draw), np.asarray(per_sequence), num_observed, np.asarray(per_step),
        np.asarray(perplexity),
    )
