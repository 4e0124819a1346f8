"""Argument validation shared by distributions and emission families.

Checks run only on concrete values: under ``jit``/``vmap`` tracing the values are unknown and the
checks are skipped (shape checks still run, shapes being static).  Every failure is a
``ValueError`` that names the argument and says what was expected.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "is_concrete",
    "check_positive",
    "check_nonnegative",
    "check_finite",
    "check_shape",
    "check_ndim",
    "check_integer",
    "check_positive_definite",
    "check_unit_vectors",
    "host_warning",
]


def is_concrete(*values) -> bool:
    """True when no value is a JAX tracer (so its contents can be inspected)."""
    return not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(values))


def _np(value):
    return np.asarray(value)


def check_static_int(name: str, value, minimum: int = 1) -> int:
    """A static (Python or NumPy, possibly 0-d array) integer ``>= minimum``, as ``int``; booleans
    and non-integers raise a ``ValueError`` that names the argument."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.")
    try:
        value = operator.index(value)
    except TypeError:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value!r}.") from None
    if value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}, got {value}.")
    return int(value)


def check_positive(name: str, value) -> None:
    """Raise ``ValueError`` unless every entry of ``value`` is finite and > 0."""
    if is_concrete(value):
        v = _np(value)
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"`{name}` must be positive and finite, got {v if v.size < 8 else 'an array with invalid entries'}.")


def check_nonnegative(name: str, value) -> None:
    """Raise ``ValueError`` unless every entry of ``value`` is finite and >= 0."""
    if is_concrete(value):
        v = _np(value)
        if not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"`{name}` must be non-negative and finite, got {v if v.size < 8 else 'an array with invalid entries'}.")


def check_finite(name: str, value, allow_nan: bool = False) -> None:
    """Raise ``ValueError`` if ``value`` holds infinities (or NaN unless ``allow_nan``)."""
    if is_concrete(value):
        v = _np(value)
        bad = np.isinf(v) if allow_nan else ~np.isfinite(v)
        if np.any(bad):
            what = "infinite" if allow_nan else "non-finite (NaN or infinite)"
            raise ValueError(f"`{name}` must not contain {what} values.")


def check_ndim(name: str, value, ndims, what: str = "") -> None:
    """Raise ``ValueError`` unless ``jnp.ndim(value)`` is one of ``ndims``."""
    ndims = (ndims,) if isinstance(ndims, int) else tuple(ndims)
    if jnp.ndim(value) not in ndims:
        expect = " or ".join(str(n) for n in ndims)
        raise ValueError(
            f"`{name}` must have {expect} dimension(s){' (' + what + ')' if what else ''}, "
            f"got shape {jnp.shape(value)}."
        )


def check_shape(name: str, value, shape, what: str = "") -> None:
    """Raise ``ValueError`` unless ``value`` has exactly ``shape`` (``None`` entries match anything)."""
    actual = tuple(jnp.shape(value))
    ok = len(actual) == len(shape) and all(s is None or s == a for s, a in zip(shape, actual))
    if not ok:
        pretty = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(
            f"`{name}` must have shape {pretty}{' (' + what + ')' if what else ''}, got {actual}."
        )


def check_integer(name: str, value, low=None, high=None, allow_nan: bool = False) -> None:
    """Raise ``ValueError`` unless entries are integers in ``[low, high)`` (NaN allowed if asked)."""
    if not is_concrete(value):
        return
    v = _np(value)
    if np.issubdtype(v.dtype, np.floating):
        finite = np.isfinite(v) if allow_nan else np.ones(v.shape, bool)
        if not allow_nan and np.any(np.isnan(v)):
            raise ValueError(f"`{name}` must not contain NaN.")
        if np.any(np.isinf(v)) or np.any(v[finite] != np.round(v[finite])):
            raise ValueError(f"`{name}` must hold integer values, got non-integers.")
        v = v[finite]
    elif not np.issubdtype(v.dtype, np.integer) and v.dtype != bool:
        raise ValueError(f"`{name}` must hold integers, got dtype {v.dtype}.")
    if low is not None and np.any(v < low):
        raise ValueError(f"`{name}` must be >= {low}, got minimum {v.min()}.")
    if high is not None and np.any(v >= high):
        raise ValueError(f"`{name}` must be < {high}, got maximum {v.max()}.")


def check_positive_definite(name: str, value) -> None:
    """Raise ``ValueError`` unless the trailing two axes hold symmetric positive-definite matrices."""
    if jnp.ndim(value) < 2 or jnp.shape(value)[-1] != jnp.shape(value)[-2]:
        raise ValueError(f"`{name}` must be a square matrix (or a batch of them), got shape {jnp.shape(value)}.")
    if is_concrete(value):
        v = _np(value).astype(float)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"`{name}` must be finite.")
        if not np.allclose(v, np.swapaxes(v, -1, -2), rtol=1e-5, atol=1e-8 * max(1.0, np.abs(v).max())):
            raise ValueError(f"`{name}` must be symmetric.")
        if np.any(np.linalg.eigvalsh(v) <= 0):
            raise ValueError(f"`{name}` must be positive definite.")


def check_unit_vectors(name: str, value, atol: float = 1e-4, allow_nan: bool = False) -> None:
    """Raise ``ValueError`` unless every vector along the last axis has unit Euclidean norm."""
    if is_concrete(value):
        v = _np(value)
        norms = np.linalg.norm(v, axis=-1)
        if allow_nan:
            norms = norms[~np.isnan(norms)]
        if np.any(np.isnan(norms)) or np.any(np.abs(norms - 1.0) > atol):
            raise ValueError(
                f"`{name}` must hold unit vectors along its last axis (norm 1 within {atol}); "
                f"got norms between {np.nanmin(norms):.4g} and {np.nanmax(norms):.4g}."
            )


# ------------------------------------------------------------------------ host-side warnings
def host_warning(fn, value, *args) -> None:
    """Call ``fn(value, *args)`` on the host from traced code (``jax.debug.callback``): the
    capacity-overflow warnings of the samplers and the ``MarkovChain``/HDP-HMM prior draws.

    Under ``jax.vmap`` a plain ``jax.debug.callback`` calls the host once per batch element
    (6000 prior draws in a vmapped ``Predictive``: 6000 Python calls); here the batching rule
    sums ``value`` over the batch axis first, so the host is called once per call site.  ``fn``
    must therefore read ``value`` as a count or flag summed over draws; ``args`` are static
    (hashable) and passed through."""
    _summed_callback(fn, tuple(args))(jnp.asarray(value))


@functools.lru_cache(maxsize=None)
def _summed_callback(fn, args):
    @jax.custom_batching.custom_vmap
    def call(value):
        jax.debug.callback(lambda v: fn(v, *args), value)
        return value

    @call.def_vmap
    def _rule(axis_size, in_batched, value):
        return call(jnp.sum(value, 0) if in_batched[0] else value), False

    return call
