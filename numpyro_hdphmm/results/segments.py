r"""Segments and durations: the table of segments of state sequences (:func:`segments_table`) and
the posterior of each state's duration law (:func:`duration_posterior`).

A segment is a maximal run of steps in one state.  For an HDP-HSMM the posterior of the duration
law of state ``k`` is that of its truncated pmf ``p_k(d) = p(d | vartheta_k) / sum_{d' <= D}
p(d' | vartheta_k)``, ``d = 1..D``, over the draws' duration parameters ``{name}_duration_*`` (the
tables of the states site's :class:`~numpyro_hdphmm.SemiMarkovChain` at each draw); for an HDP-HMM
it is the geometric law implied by the self-transitions, ``p_k(d) = (1 - A_kk) A_kk^{d-1}``.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax.numpy as jnp
import numpy as np

from numpyro_hdphmm._core.validation import check_static_int
from numpyro_hdphmm.results.posterior import hmm_draws

__all__ = ["SEGMENT_DTYPE", "segments_table", "DurationPosterior", "duration_posterior"]

#: the fields of :func:`segments_table`'s rows
SEGMENT_DTYPE = np.dtype([("sequence", np.int64), ("start", np.int64), ("end", np.int64), ("duration", np.int64),
                          ("state", np.int64)])


def segments_table(states, lengths=None) -> np.ndarray:
    r"""The segments of one or several state sequences, one row per segment.

    Args:
        states: ``(T,)`` one sequence or ``(..., T)`` several (e.g. ``(N, T)`` sequences or
            ``(S, N, T)`` draws of them; the leading axes are flattened in C order into the
            ``sequence`` index); integer labels, a negative label (the ``-1`` of padded steps in
            :func:`numpyro_hdphmm.viterbi`) ends the sequence's segments there.
        lengths: optional ``(N,)`` lengths, one per sequence of the LAST leading axis (broadcast
            over the others): steps ``t >= lengths[n]`` are padding and left out.

    Returns:
        a NumPy structured array of :data:`SEGMENT_DTYPE` with fields ``sequence``, ``start``
        (first step), ``end`` (one past the last step, as in ``y[start:end]``), ``duration``
        (``end - start``) and ``state``, in order of sequence and start.  ``pandas.DataFrame(table)``
        turns it into a data frame.
    """
    z = np.asarray(states)
    if z.ndim < 1 or not np.issubdtype(z.dtype, np.integer):
        raise ValueError(f"`states` must be integer labels of shape (T,) or (..., T), got {z.dtype} {z.shape}.")
    z = z.astype(np.int64)
    t_max = z.shape[-1]
    z2 = z.reshape(-1, t_max)
    if lengths is not None:
        ln = np.asarray(lengths)
        n = z.shape[-2] if z.ndim >= 2 else 1
        if ln.shape != (n,) or not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 0) or np.any(ln > t_max):
            raise ValueError(f"`lengths` must be {n} integers in [0, T={t_max}], got {ln}.")
        ln = np.broadcast_to(ln, z.shape[:-1]).reshape(-1)
        z2 = np.where(np.arange(t_max)[None] < ln[:, None], z2, -1)
    # a segment starts where the label changes (or at t = 0) and is not negative
    prev = np.concatenate([np.full((z2.shape[0], 1), -2), z2[:, :-1]], axis=1)
    start_mask = (z2 != prev) & (z2 >= 0)
    nxt = np.concatenate([z2[:, 1:], np.full((z2.shape[0], 1), -2)], axis=1)
    end_mask = (z2 != nxt) & (z2 >= 0)
    seq, start = np.nonzero(start_mask)
    _, last = np.nonzero(end_mask)
    table = np.empty(seq.size, SEGMENT_DTYPE)
    table["sequence"], table["start"], table["end"] = seq, start, last + 1
    table["duration"] = last + 1 - start
    table["state"] = z2[seq, start]
    return table


class DurationPosterior(NamedTuple):
    r"""Result of :func:`duration_posterior` (``K`` states, ``D`` durations).

    durations : ``(D,)`` the durations ``1..D``
    mean : ``(K, D)`` posterior mean of ``p_k(d)``
    lower, upper : ``(K, D)`` the pointwise equal-tailed credible band of probability ``prob``
    mean_duration : ``(K,)`` posterior mean of ``E_k[d]`` under the (truncated) law
    prob : the band's probability
    """

    durations: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    mean_duration: np.ndarray
    prob: float


def duration_posterior(model: Callable, samples, *, name: str = "y", model_args: tuple = (),
                       model_kwargs: Optional[dict] = None, prob: float = 0.9,
                       max_duration: Optional[int] = None) -> DurationPosterior:
    r"""Posterior of each state's duration law: the pmf over ``d = 1..D`` at every draw (module
    docstring), its mean and a pointwise credible band over the draws.

    The states keep each draw's own labels: relabel the draws first
    (:func:`numpyro_hdphmm.relabel_samples`, which permutes the ``{name}_duration_*`` sites too)
    so that state ``k`` is the same state in every draw.

    Args:
        model: the NumPyro model, traced at each draw with ``model_args``/``model_kwargs`` (as in
            :func:`numpyro_hdphmm.viterbi`).
        samples: posterior draws (``mcmc.get_samples()``, flat or grouped by chain).
        name: the name given to :func:`numpyro_hdphmm.sample`.
        prob: probability of the equal-tailed band, in ``(0, 1)``.
        max_duration: for an HDP-HMM the ``D`` to show its geometric laws up to (required there;
            for an HDP-HSMM the model's ``max_duration`` is used and this must be None).

    Returns:
        :class:`DurationPosterior`.
    """
    if not 0.0 < float(prob) < 1.0:
        raise ValueError(f"`prob` must be in (0, 1), got {prob!r}.")
    if not callable(model):
        raise ValueError(f"`model` must be the NumPyro model, got {type(model).__name__}.")
    draws = hmm_draws(samples, model, name, tuple(model_args), model_kwargs)
    if draws.kind == "hsmm":
        if max_duration is not None:
            raise ValueError("`max_duration` is the model's own for an HDP-HSMM: leave it None.")
        pmf = np.exp(np.asarray(draws.segments.log_dur, dtype=np.float64))  # (S, K, D)
    elif draws.kind == "hmm":
        if max_duration is None:
            raise ValueError("`max_duration` is required for an HDP-HMM (the geometric laws are shown on 1..D).")
        num_d = check_static_int("max_duration", max_duration)
        k = draws.trans.shape[-1] - 1
        stay = np.asarray(jnp.diagonal(draws.trans[:, :k, :k], axis1=-2, axis2=-1), dtype=np.float64)  # (S, K)
        d = np.arange(1, num_d + 1)
        pmf = (1.0 - stay)[..., None] * stay[..., None] ** (d - 1)
    else:
        raise NotImplementedError(f"duration_posterior for the model class {draws.kind!r}: only 'hmm' and 'hsmm'.")
    d = np.arange(1, pmf.shape[-1] + 1)
    tail = (1.0 - float(prob)) / 2.0
    lower, upper = np.quantile(pmf, [tail, 1.0 - tail], axis=0)
    mean_duration = np.mean(np.sum(pmf * d, -1) / np.sum(pmf, -1), axis=0)
    return DurationPosterior(d, pmf.mean(0), lower, upper, mean_duration, float(prob))
