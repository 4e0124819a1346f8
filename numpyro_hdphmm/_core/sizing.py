"""Running a computation over the state axis at a few static sizes: the smallest that holds the
instantiated states, so that its cost follows the number of states in use, not the capacity.

Shapes are static under ``jit``; a kernel whose capacity is ``L`` but whose chains use ``k << L``
states compiles its inner computation for a few sizes (``16, 32, 64, ...`` and ``L``:
:func:`state_sizes`) and runs the smallest one that holds every state it may touch
(:func:`run_at_size`, a ``lax.switch``).  Used by the beam sampler's slice FFBS
(:mod:`numpyro_hdphmm._core.slices`, ``O(T k^2)``) and by particle Gibbs's posterior proposal
(:mod:`numpyro_hdphmm.infer.algorithms.pgas`, ``O(T N k)``).

Under ``jax.vmap`` (vectorized chains) a ``switch`` on a batched index would run every branch and
select; :func:`run_at_size` instead runs every chain at the largest size any chain needs (a
real branch), which is exact whenever the computation gives the same result at any size that
holds its states.  A computation that may outgrow its size (particle Gibbs creates states as it
runs) reports whether it fit (``fits``); when it did not, the whole call is redone at the full
size.  That is exact only if the run at the smaller size is the run at the full size restricted
to the first slots, draw for draw: the caller must key every random draw by global slot indices
(e.g. :func:`~numpyro_hdphmm._core.slices.break_stick`'s ``ids``), never by the size.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["state_sizes", "smallest_size", "run_at_size"]


def state_sizes(full: int):
    """The sizes a state axis of ``full`` entries is compiled for: ``16, 32, 64, ...`` below
    ``full``, then ``full`` (one size up to 16).  The smallest that holds ``k`` states is within
    a factor 2 of ``k`` (above 16)."""
    sizes, size = [], 16
    while size < full:
        sizes.append(size)
        size *= 2
    return tuple(sizes) + (full,)


def smallest_size(sizes, needed):
    """The index (traced int32) of the smallest of ``sizes`` that is at least ``needed`` (the last
    when none is)."""
    return jnp.minimum(jnp.searchsorted(jnp.asarray(sizes), needed), len(sizes) - 1).astype(jnp.int32)


def run_at_size(sizes, fn, bucket, args, fits=None):
    """``fn(sizes[bucket], args)`` through a ``lax.switch`` over the static ``sizes``.

    ``fn(size, args)`` must give the same result at every size that holds what it computes (the
    slots beyond are unused).  ``fits``: ``None``, or ``fits(out) -> bool`` (a scalar, per call)
    saying whether the run fit its size; when it did not, ``fn(sizes[-1], args)`` is run instead
    (so ``fn`` at a size that turns out too small must be the full-size run restricted to the
    first slots, draw for draw, for the result to be exact).

    Under ``jax.vmap`` with a batched ``bucket`` every element runs at the largest bucket of the
    batch, and the fallback runs for the whole batch when any element did not fit: real
    branches, not a select of every size.  Under nested ``vmap``s only the innermost gets this
    rule; the outer ones select (still exact)."""
    branches = [functools.partial(fn, size) for size in sizes]

    def plain(bucket, args):
        out = lax.switch(bucket, branches, args)
        if fits is None:
            return out
        return lax.cond(fits(out), lambda: out, lambda: branches[-1](args))

    if len(sizes) == 1:
        return branches[0](args)

    @jax.custom_batching.custom_vmap
    def run(bucket, args):
        return plain(bucket, args)

    @run.def_vmap
    def rule(axis_size, in_batched, bucket, args):
        in_axes = jax.tree_util.tree_map(lambda batched: 0 if batched else None, in_batched[1])
        top = jnp.max(bucket) if in_batched[0] else bucket

        def batched(size_fn):
            return jax.vmap(size_fn, in_axes=(in_axes,), axis_size=axis_size)(args)

        out = lax.switch(top, [functools.partial(batched, branch) for branch in branches])
        if fits is not None:
            out = lax.cond(jnp.all(jax.vmap(fits)(out)), lambda: out, lambda: batched(branches[-1]))
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run(bucket, args)
