r"""The marginal likelihood ``log p(y)`` from a tempered run (stepping stones over the ladder).

A kernel run with ``tempering=`` (:mod:`numpyro_hdphmm.infer.moves.tempering`) samples the rungs
``pi_b(x) ∝ p(x) p(y | x)^b`` at the inverse temperatures ``0 = b_0 < ... < b_{R-1} = 1`` and
records each rung's log-likelihood ``ell_r = log p(y | x_r)`` every sweep.  With ``Z(b) = ∫ p(x)
p(y | x)^b dx``, ``Z(0) = 1`` and ``Z(1) = p(y)``, and (Xie, Lewis, Fan, Kuo & Chen 2011, the
stepping-stone identity)

.. math:: \frac{Z(b_{r+1})}{Z(b_r)} = E_{\pi_{b_r}}\big[p(y \mid x)^{\,b_{r+1} - b_r}\big],
   \qquad \log p(y) = \sum_{r=0}^{R-2} \log E_{\pi_{b_r}}\big[e^{(b_{r+1} - b_r)\,\ell}\big],

each expectation estimated by the mean over the rung's post-warmup sweeps (in log space), chain by
chain (each chain adapts its own ladder in warmup), and the chains' estimates averaged.  The Monte
Carlo error is from batch means: the draws of each chain cut into ``num_batches`` consecutive
batches, the estimate made on each batch, and the standard error of the mean of all batches.  The estimator is
consistent for every ladder; its error shrinks with more rungs (smaller steps ``b_{r+1} - b_r``)
and more sweeps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.special import logsumexp

__all__ = ["Evidence", "log_evidence"]


class Evidence(NamedTuple):
    """The stepping-stone estimate: ``log_evidence`` (``log p(y)``), ``mc_error`` (its Monte Carlo
    standard error, batch means), ``steps (R-1,)`` (``log Z(b_{r+1}) / Z(b_r)`` of each step, averaged over
    the chains), ``ladder (C, R)`` (each chain's inverse temperatures) and ``num_draws`` (post-warmup sweeps per rung, all
    chains)."""

    log_evidence: float
    mc_error: float
    steps: np.ndarray
    ladder: np.ndarray
    num_draws: int


def _fields(source):
    """``(ladder (C, S, R), log-likelihoods (C, S, R))`` of an MCMC run or a mapping of its extra fields."""
    if hasattr(source, "get_extra_fields"):
        fields = source.get_extra_fields(group_by_chain=True)
    else:
        fields = source
    try:
        ladder, ll = fields["inverse_temperatures"], fields["replica_log_likelihood"]
    except (KeyError, TypeError):
        raise ValueError("`source` must be an MCMC run of a kernel with tempering= (or a mapping of its extra fields) "
                         "holding 'inverse_temperatures' and 'replica_log_likelihood'.") from None
    ladder, ll = np.asarray(ladder, np.float64), np.asarray(ll, np.float64)
    if ladder.shape != ll.shape or ladder.ndim not in (2, 3) or ladder.shape[-1] < 2:
        raise ValueError("`source`: 'inverse_temperatures' and 'replica_log_likelihood' must have the same shape "
                         f"(draws, rungs) or (chains, draws, rungs), got {ladder.shape} and {ll.shape}.")
    if ladder.ndim == 2:
        ladder, ll = ladder[None], ll[None]
    return ladder, ll


def _stepping_stones(ladder: np.ndarray, ll: np.ndarray) -> np.ndarray:
    """``(R-1,)`` log ratios ``log mean exp((b_{r+1} - b_r) ell_r)`` of draws ``ll (M, R)``."""
    steps = np.diff(ladder)
    n = ll.shape[0]
    return logsumexp(steps[None, :] * ll[:, :-1], axis=0) - np.log(n)


def log_evidence(source, *, num_batches: int = 5) -> Evidence:
    r"""``log p(y)`` of the model by stepping stones over a tempered run's ladder (module docstring).

    :param source: a ``numpyro.infer.MCMC`` run with ``tempering=`` (its post-warmup extra fields
        ``inverse_temperatures`` and ``replica_log_likelihood``, collected by default), or a mapping
        holding those two arrays, ``(draws, R)`` or ``(chains, draws, R)``.
    :param num_batches: batches per chain for the Monte Carlo error (at least 2).
    :returns: :class:`Evidence`.
    :raises ValueError: the fields are missing, their shapes differ, the ladder changed between the
        draws (pass post-warmup draws only: the ladder adapts during warmup) or a chain has fewer
        draws than ``num_batches``.
    """
    if not isinstance(num_batches, (int, np.integer)) or isinstance(num_batches, bool) or num_batches < 2:
        raise ValueError(f"`num_batches` must be an int >= 2, got {num_batches!r}.")
    ladder, ll = _fields(source)
    reference = ladder[:, :1, :]  # each chain adapted its own ladder in warmup
    if not np.allclose(ladder, reference, rtol=0.0, atol=1e-12):
        raise ValueError("`source`: the ladder changes between draws (it adapts during warmup); pass post-warmup draws "
                         "only (MCMC.get_extra_fields() after run() holds only those).")
    reference = reference[:, 0, :]
    if np.any(reference[:, 0] != 0.0) or np.any(reference[:, -1] != 1.0):
        raise ValueError(f"`source`: the ladder must run from 0 to 1 for the evidence, got {reference}.")
    num_chains, num_draws, _ = ll.shape
    if num_draws < num_batches:
        raise ValueError(f"`source`: {num_draws} draws per chain, fewer than num_batches={num_batches}.")
    steps = np.mean([_stepping_stones(reference[c], ll[c]) for c in range(num_chains)], axis=0)
    size = num_draws // num_batches
    batches = [np.sum(_stepping_stones(reference[c], ll[c, b * size:(b + 1) * size]))
               for c in range(num_chains) for b in range(num_batches)]
    error = float(np.std(batches, ddof=1) / np.sqrt(len(batches)))
    return Evidence(float(np.sum(steps)), error, steps, reference, int(num_chains * num_draws))
