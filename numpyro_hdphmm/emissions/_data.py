"""Host-side helpers shared by the families' ``weakly_informative`` constructors: reading the
user's data (lists, pandas, NumPy, JAX), refusing data that cannot scale a prior, and the
defaults of ``weakly_informative(None)``.

Every function here runs on concrete values, outside ``jit``; each failure is a ``ValueError``
that names the argument (``data``) and says what to do.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import jax.numpy as jnp
import numpy as np

from numpyro_hdphmm._core.validation import FLOAT_HEADROOM, as_data_array, check_float_range, is_concrete

__all__ = ["vector_data", "observed_rows", "check_data_spread", "check_deviation_range", "dimension_hint", "check_dim", "merge_overrides"]


def vector_data(data, dim=None):
    """``data (..., T, D)`` as an array (concrete values through
    :func:`~numpyro_hdphmm._core.validation.as_data_array`; tracers unchanged) for the
    ``weakly_informative`` of a family with vector observations; ``ValueError`` naming ``data``
    (or ``dim``, which only ``data=None`` takes) otherwise."""
    if dim is not None:
        raise ValueError("`dim` is only used with data=None (the data's last axis gives D).")
    if is_concrete(data):
        data = as_data_array("data", data)
    if jnp.ndim(data) < 2:
        raise ValueError(
            f"`data` must have shape (..., T, D), got {jnp.shape(data)}; for one-dimensional observations "
            "pass y[:, None] (or df[['col']].to_numpy())."
        )
    return data


def observed_rows(name: str, data, need: int = 1, event_ndim: int = 1) -> Tuple[np.ndarray, np.ndarray]:
    """``(rows (n, *event) float64, observed (N,) bool)``: the fully observed steps of ``data
    (..., T, *event)`` flattened over sequences, and the mask of observed steps (no NaN).

    Raises ``ValueError`` naming ``name`` when ``data`` has no step at all, holds infinities, or
    has fewer than ``need`` observed steps (all-NaN data cannot scale a prior)."""
    arr = np.asarray(data, dtype=float)
    event = arr.shape[arr.ndim - event_ndim:] if event_ndim else ()
    flat = arr.reshape((-1,) + tuple(event))
    if flat.shape[0] == 0:
        raise ValueError(f"`{name}` has no time steps (shape {arr.shape}).")
    if np.any(np.isinf(flat)):
        raise ValueError(f"`{name}` must not contain infinite values (NaN marks a missing observation).")
    axes = tuple(range(1, flat.ndim))
    observed = ~np.any(np.isnan(flat), axis=axes) if axes else ~np.isnan(flat)
    n = int(observed.sum())
    if n == 0:
        raise ValueError(
            f"`{name}` has no observed value (every step holds a NaN): a data-scaled prior needs data. Pass "
            "the data, or data=None for the documented default prior of standardized data, or build the family "
            "with explicit hyperparameters."
        )
    if n < need:
        raise ValueError(
            f"`{name}` has {n} observed step(s); the data-scaled prior needs at least {need} to estimate a spread. "
            "Pass more data, or give the spread explicitly (the `scale`/`rate` argument)."
        )
    return flat[observed], observed


def check_data_spread(name: str, variances, dtype, check_low: bool = True) -> None:
    """Refuse data whose per-dimension ``variances`` (host float64) do not fit ``dtype``: the
    largest must be below ``finfo.max * FLOAT_HEADROOM``; with ``check_low`` the smallest positive
    one must be above ``finfo.tiny / FLOAT_HEADROOM`` (a precision ``1 / variance`` must fit too)."""
    v = np.asarray(variances, float).ravel()
    check_float_range(name, "the largest variance of the data", float(v.max(initial=0.0)), dtype)
    positive = v[v > 0]
    if check_low and positive.size:
        low = float(np.finfo(np.dtype(dtype)).tiny) / FLOAT_HEADROOM
        check_float_range(name, "the smallest variance of the data", float(positive.min()), dtype, low=low)


#: the largest relative error of a scatter matrix formed in the family's frame that the package
#: accepts: ``eps * (1 + offset^2 / spread^2)`` (see :func:`check_deviation_range`)
SCATTER_TOLERANCE = 1e-3


def check_deviation_range(name: str, y, center, scale, dtype, what: str = "the prior mean") -> None:
    """Refuse observations ``y (..., T, D)`` (host values, NaN rows skipped) that a Gaussian
    family's statistics cannot hold accurately in ``dtype`` (``ValueError`` naming ``name``):

    * range: the largest squared deviation ``|y_t - center|^2`` and the total
      ``sum_t |L^{-1} (y_t - center)|^2`` in units of the prior ``scale = L L^T`` ``(D, D)`` must
      stay below ``finfo.max * FLOAT_HEADROOM``;
    * cancellation: the posterior scatter ``sum (z - zbar)(z - zbar)^T`` of the whitened data
      ``z_t = L^{-1} (y_t - center)`` is formed from sums around ``center``; in a direction ``v``
      its error is about ``eps sum_t (v.z_t)^2``, against ``v^T (I + S) v`` in the posterior
      (``I``: the prior's part, ``S = n C`` the scatter).  The worst direction gives
      ``r = n zbar^T (I + n C)^{-1} zbar``; ``eps r`` must stay below :data:`SCATTER_TOLERANCE`
      (float32, data with unit spread in the prior's units: the data mean within ~90 standard
      deviations of ``center``).  A data-scaled prior (``weakly_informative``) is centred at the
      data and always passes.
    """
    D = np.shape(scale)[-1]
    rows = np.asarray(y, dtype=float).reshape(-1, D)
    rows = rows[~np.any(np.isnan(rows), axis=-1)]
    if rows.size == 0:
        return
    dev = rows - np.asarray(center, float)
    with np.errstate(over="ignore", invalid="ignore"):
        check_float_range(name, f"the largest squared deviation from {what}", float(np.max(np.sum(dev * dev, -1))), dtype)
        white = np.linalg.solve(np.linalg.cholesky(np.asarray(scale, float)), dev.T).T  # (n, D)
        check_float_range(name, "the sum of squared deviations in units of the prior scale", float(np.sum(white * white)), dtype)
    n = white.shape[0]
    zbar = white.mean(0)
    spread = (white - zbar).T @ (white - zbar)  # n C
    ratio = float(n * zbar @ np.linalg.solve(np.eye(D) + spread, zbar))
    eps = float(np.finfo(np.dtype(dtype)).eps)
    if eps * ratio > SCATTER_TOLERANCE:
        sd = np.sqrt(np.maximum(np.diag(spread) / n, 0.0))
        raise ValueError(
            f"`{name}`: the data sit far from {what} for their spread (data mean {np.round(rows.mean(0), 3).tolist()}, "
            f"standard deviation {np.round(sd * np.sqrt(np.diag(np.asarray(scale, float))), 3).tolist()}); their "
            f"statistics lose their accuracy in {np.dtype(dtype)} (relative error about {eps * ratio:.2g}). Build the "
            "prior around the data (e.g. `weakly_informative(y)`, or a `loc`/`center` near the data mean), centre "
            "and rescale the data, or enable 64-bit floats with `jax.config.update('jax_enable_x64', True)`."
        )


def dimension_hint(overrides: Dict, *keys: Tuple[str, int]) -> Optional[int]:
    """The event size ``D`` implied by an override: ``overrides[key].shape[axis]`` for the first
    ``(key, axis)`` present (``None`` when none is)."""
    for key, axis in keys:
        if key in overrides and jnp.ndim(overrides[key]) > 0:
            return int(jnp.shape(overrides[key])[axis])
    return None


def check_dim(dim, hint: Optional[int], default: int = 1) -> int:
    """``D`` for ``weakly_informative(None)``: the ``dim`` keyword, else ``hint``, else ``default``."""
    if dim is None:
        return default if hint is None else hint
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"`dim` must be an integer >= 1, got {dim!r}.")
    if hint is not None and hint != dim:
        raise ValueError(f"`dim` = {dim} does not match the overrides' event size {hint}.")
    return int(dim)


def merge_overrides(defaults: Dict, overrides: Dict, where: str) -> Dict:
    """``defaults`` updated with ``overrides``; a key ``defaults`` lacks raises ``ValueError``."""
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise ValueError(f"unknown argument(s) {sorted(unknown)} for {where}; allowed: {sorted(defaults)}.")
    return {**defaults, **overrides}
