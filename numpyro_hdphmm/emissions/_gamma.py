"""Helpers shared by the Gamma-based families (:class:`DiagonalGaussian`, :class:`Poisson`)
and the hyperparameter plumbing shared with :class:`Categorical`.

The Gamma distribution is used in the *rate* parameterization throughout::

    Gamma(x | a, b) = b^a / Gamma(a) * x^(a - 1) * exp(-b x),    x > 0,  a, b > 0.
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, xlogy

from numpyro_hdphmm._core.random import log_gamma
from numpyro_hdphmm._core.validation import as_parameter

__all__ = [
    "float_dtype",
    "as_array",
    "as_float",
    "broadcast_named",
    "check_overrides",
    "gamma_log_normalizer",
    "gamma_log_prob",
    "sample_log_gamma",
    "HIGHEST",
]

#: matmul precision for sufficient statistics (avoids TF32 on GPUs for float32 inputs)
HIGHEST = jax.lax.Precision.HIGHEST


def float_dtype(*values):
    """Common floating dtype of ``values``: their promoted dtype, at least JAX's default float.

    Python scalars are weakly typed, so ``float_dtype(1.0)`` is ``float64`` under
    ``jax_enable_x64`` and ``float32`` otherwise, while ``float_dtype(np.float32(1))`` is
    ``float32`` in both modes.
    """
    return jnp.result_type(*values, float)


def as_array(value, name: str = "value"):
    """Lists, tuples and pandas objects become numpy arrays (so ``jnp.ndim``/``jnp.shape`` accept
    them); non-numeric values raise a ``ValueError`` naming ``name``
    (:func:`~numpyro_hdphmm._core.validation.as_parameter`)."""
    return as_parameter(name, value)


def as_float(value, dtype) -> jax.Array:
    """``jnp.asarray(value, dtype)`` (works on tracers)."""
    return jnp.asarray(value, dtype=dtype)


def broadcast_named(arrays: Dict[str, jax.Array], shape: Tuple[int, ...] = ()) -> Tuple[int, ...]:
    """Broadcast shape of the named ``arrays`` together with ``shape``.

    Raises ``ValueError`` naming the first argument whose shape does not broadcast against
    the others (in dictionary order).
    """
    out = tuple(shape)
    for name, value in arrays.items():
        try:
            out = jnp.broadcast_shapes(out, jnp.shape(value))
        except ValueError:
            raise ValueError(
                f"`{name}` has shape {jnp.shape(value)}, which does not broadcast against {out}."
            ) from None
    return out


def check_overrides(overrides: Dict, allowed: Iterable[str], where: str) -> None:
    """Raise ``TypeError`` for keyword overrides that ``where`` does not accept."""
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {unknown}; allowed: {sorted(allowed)}.")


def gamma_log_normalizer(a, b) -> jax.Array:
    """``log int x^(a-1) exp(-b x) dx = gammaln(a) - a log b`` (elementwise)."""
    return gammaln(a) - a * jnp.log(b)


def gamma_log_prob(x, a, b) -> jax.Array:
    """Elementwise ``log Gamma(x | a, b)`` (rate parameterization); ``xlogy`` keeps ``a = 1, x = 0`` finite."""
    return xlogy(a - 1.0, x) - b * x - gamma_log_normalizer(a, b)


def sample_log_gamma(rng_key, a, b, shape, dtype) -> jax.Array:
    """``log x`` for ``x ~ Gamma(a, b)`` drawn in log space, shape ``shape``.

    Sampling in log space (:func:`numpyro_hdphmm._core.random.log_gamma`) keeps tiny shapes ``a`` from underflowing
    to ``x = 0`` before the rate is applied; callers exponentiate when they need ``x``.
    """
    return log_gamma(rng_key, jnp.broadcast_to(jnp.asarray(a, dtype), shape)) - jnp.log(b)
