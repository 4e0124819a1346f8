"""Small dense linear algebra shared by the numerics (Kalman recursions, MNIW conjugate algebra)."""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["SMALL_PRODUCT", "small_matmul"]

#: products with at most this many multiply-adds (``n k m``) are written as a broadcast and a sum
SMALL_PRODUCT = 4096


def small_matmul(a, b):
    """``a @ b`` of (batches of) small matrices: ``a (..., n, k)``, ``b (..., k, m)`` -> ``(..., n, m)``,
    the batch axes broadcast as in ``jnp.matmul``.

    XLA's CPU backend emits a ``dot`` of a few-by-few matrices, batched or inside a loop, as a library
    call whose overhead is many times its arithmetic (4 x 4 matrices, measured: 20-90x slower than
    the broadcast below, ``docs/benchmarks.md``, "HDP-SLDS sweep side by side with jax-moseq"); a
    broadcast multiply and a sum over ``k`` fuse into one loop nest.  Larger products (``n k m``
    above :data:`SMALL_PRODUCT`) stay ``a @ b``."""
    n, k = a.shape[-2:]
    if n * k * b.shape[-1] > SMALL_PRODUCT:
        return a @ b
    return jnp.sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)
