r"""Summaries of the switching linear dynamics of HDP-SLDS and HDP-AR-HMM draws.

For mode ``k`` with dynamics ``x_t = A_k x_{t-1} + b_k + e_t`` (Fox et al. 2011, eq. 2): the
eigenvalues of ``A_k`` (their moduli below 1: a stable mode; the arguments: rotation per step) and
the fixed point ``x* = (I - A_k)^{-1} b_k`` the mode's mean path decays to, with how often each mode
is used.  For order ``r``, ``x_t = sum_i A^(i)_k x_{t-i} + b_k + e_t``, the eigenvalues are those
of the companion matrix ``[[A^(1) ... A^(r)], [I 0 ... 0], ..., [0 ... I 0]]`` (``D r`` of them,
the roots of ``det(z^r I - sum_i A^(i) z^{r-i})``) and the fixed point is
``(I - sum_i A^(i)_k)^{-1} b_k``.  Modes are labelled per draw: relabel the draws first (:func:`numpyro_hdphmm.relabel_samples`)
to compare a mode across draws.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["DynamicsSummary", "dynamics_summary"]


class DynamicsSummary(NamedTuple):
    """Result of :func:`dynamics_summary`, per draw ``S`` and mode ``K``.

    eigenvalues : ``(S, K, D r)`` complex eigenvalues of ``A_k``'s companion matrix (of ``A_k`` for
        order 1; sorted by decreasing modulus)
    fixed_point : ``(S, K, D)`` ``(I - sum_i A^(i)_k)^{-1} b_k`` (NaN where that matrix is singular
        to working precision, e.g. a unit root)
    occupancy : ``(S, K)`` the fraction of the labelled steps in mode ``k``
    """

    eigenvalues: np.ndarray
    fixed_point: np.ndarray
    occupancy: np.ndarray


def dynamics_summary(samples, name: str = "y", *, lengths=None, order=None) -> DynamicsSummary:
    """Eigenvalues, fixed points and occupancy of each mode's dynamics at every draw (module
    docstring): ``samples[f"{name}_A"]`` ``(S, K, D, D r + a)`` (``a = 1`` with an intercept) and
    ``samples[f"{name}_states"]`` ``(S, T)`` or ``(S, N, T)`` (``lengths (N,)`` for padded
    sequences).  ``order``: the dynamics' ``r``; by default read from the shape (``r = m // D``,
    an intercept when ``m % D == 1``), which for a scalar latent state (``D = 1``) is ambiguous and
    taken as ``r = 1`` (pass ``order`` for a scalar model of higher order)."""
    key_a, key_z = f"{name}_A", f"{name}_states"
    if key_a not in samples or key_z not in samples:
        raise ValueError(f"`samples` must hold '{key_a}' and '{key_z}' (the draws of an HDP-SLDS or an AR-HMM "
                         f"named {name!r}); found {sorted(samples)}.")
    A = np.asarray(samples[key_a], float)
    if A.ndim != 4:
        raise ValueError(f"`samples['{key_a}']` must have shape (S, K, D, D r + a), got {A.shape}.")
    S, K, D, m = A.shape
    if order is None:
        order = 1 if D == 1 else m // D
    elif isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"`order` must be a positive integer, got {order!r}.")
    order = int(order)
    if m - D * order not in (0, 1):
        raise ValueError(f"`samples['{key_a}']` must have shape (S, K, D, D r) or (S, K, D, D r + 1) with "
                         f"D = {D} and r = {order}, got {A.shape}.")
    lin = A[..., : D * order]
    b = A[..., D * order] if m == D * order + 1 else np.zeros((S, K, D))
    companion = np.zeros((S, K, D * order, D * order))
    companion[..., :D, :] = lin
    companion[..., D:, : D * (order - 1)] = np.eye(D * (order - 1))
    eig = np.linalg.eigvals(companion)
    rank = np.argsort(-np.abs(eig), axis=-1)
    eig = np.take_along_axis(eig, rank, axis=-1)
    system = np.eye(D) - lin.reshape(S, K, D, order, D).sum(axis=3)
    cond = np.linalg.cond(system)
    ok = np.isfinite(cond) & (cond < 1.0 / np.finfo(float).eps ** 0.75)
    fixed = np.where(ok[..., None], np.linalg.solve(np.where(ok[..., None, None], system, np.eye(D)), b[..., None])[..., 0],
                     np.nan)
    z = np.asarray(samples[key_z]).reshape(S, -1, np.shape(samples[key_z])[-1])
    labelled = np.ones(z.shape[1:], bool)
    if lengths is not None:
        labelled = np.arange(z.shape[-1])[None, :] < np.asarray(lengths)[:, None]
    onehot = (z[..., None] == np.arange(K)) & labelled[None, ..., None]
    occupancy = onehot.sum(axis=(1, 2)) / max(int(labelled.sum()), 1)
    return DynamicsSummary(eig, fixed, occupancy)
