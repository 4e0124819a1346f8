r"""Keeping large arrays in place inside a jitted loop on XLA:CPU.

A loop body that reads a large carried array (a count matrix, emission statistics) and then
writes a few of its entries is updated in place only when everything computed from the reads
is an input of the write.  A value derived from a read that reaches the loop's outputs by
another path (an acceptance count, a label, a small vector) leaves XLA free to schedule that
computation after the write, so it copies the whole array first, every iteration: measured on
the restricted collapsed draw's step-wise sweep, the copies cost more than the move itself
(``docs/benchmarks.md``, "RCD speed").  The fix is to chain the writes after the other outputs
(:func:`after`), one array after the other, and to write each array once per iteration (one
scatter with all its changes).  XLA's ``--xla_cpu_copy_insertion_use_region_analysis=true``
(``XLA_FLAGS``) removes such copies too, for every program; the chaining makes the sweeps fast
without it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["after", "any_element"]

_SENTINEL = -3.0e38


def after(flag, *values):
    """``flag`` (a traced bool) unchanged, made data-dependent on the scalars ``values``: a write
    gated by the result is scheduled after their computation (module docstring).  The test
    ``sum(values) != -3e38`` is true for every value the callers pass (counts, labels,
    log-probabilities), NaN included, and XLA cannot fold it away."""
    token = sum(jnp.asarray(v).astype(jnp.float32) for v in values)
    return flag & (token != jnp.float32(_SENTINEL))


def any_element(tree):
    """One scalar read from the first leaf of ``tree`` (an array written just before): a value
    for :func:`after` that makes a later write wait for that one (0 for an empty tree, which
    nothing wrote)."""
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(tree) if jnp.size(leaf)]
    return leaves[0].reshape(-1)[0] if leaves else jnp.zeros((), jnp.float32)
