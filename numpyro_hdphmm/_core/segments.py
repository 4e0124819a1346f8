r"""Per-label sums over time given hard labels: the statistics of one-hot weights without the
``K`` factor.

A sweep that keeps the parameters explicit computes, given the states, per-state sums
``S_k = sum_t [z_t = k] f(x_t)``.  Written with the ``(T, K)`` one-hot weight matrix ``W`` they
are ``W^T F``: ``O(T K p)`` work for features of size ``p`` (``p = m^2`` for the Gram matrix of
``m`` regressors), although each step adds to one state only.  The helpers below compute the same
sums in ``O(T p)`` (plus a sort of the labels for the Gram matrices):

- :func:`label_sums` (``F (T, ...) -> (K, ...)``): a segment sum by label;
- :func:`label_counts`: the number of steps of each label;
- :func:`label_grams` (``Z (T, n) -> sum_t [z_t = k] Z_t Z_t^T``, ``(K, n, n)``): the steps sorted
  by label into blocks of ``B`` rows, each label's run padded with zero rows to a whole number of
  blocks (at most ``T + K B`` rows), so that every block belongs to one label; then one batched
  product ``Z_c^T Z_c`` per block and a segment sum of the ``(n, n)`` block Gram matrices by the
  blocks' labels.  ``O((T + K B) n^2)`` multiply-adds in matrix products, against ``O(T K n^2)``
  for ``W^T (Z kron Z)``.  For narrow ``Z`` the sort costs more than it saves and the outer
  products ``Z_t Z_t^T`` are summed by label directly (a segment sum of ``T n^2`` numbers):
  :func:`label_grams`' ``"auto"`` rule.  Measured on a 2-core CPU in float32 (ms; the one-hot
  product / direct / blocks): ``T = 10^4``, ``K = 100``, ``n = 41``: 136 / 44 / 3.6; ``T = 10^5``:
  1900 / 520 / 43; ``T = 10^3``, ``K = 10``, ``n = 41``: 0.73 / 0.63 / 0.26; ``T = 10^4``,
  ``K = 50``, ``n = 16``: 5.8 / 1.1 / 1.9; ``T = 10^5``, ``K = 50``, ``n = 5``: 7.6 / 1.1 / 20.

Contract shared by all three: ``labels (T,)`` integers; a label outside ``[0, K)`` (the kernels
use ``K`` for a missing step) marks a step that belongs to no label (a zero row of ``W``); the
result equals ``jnp.tensordot(jax.nn.one_hot(labels, K), F, (0, 0))`` up to the order of the
floating-point additions (not bit for bit).  Every function is pure, jittable and vmappable.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["label_sums", "label_counts", "label_grams", "clean_labels", "DIRECT_GRAM_SIZE"]


def clean_labels(labels, num_labels: int):
    """``labels`` as int32 with every value outside ``[0, num_labels)`` replaced by ``num_labels``."""
    labels = jnp.asarray(labels)
    inside = (labels >= 0) & (labels < num_labels)
    return jnp.where(inside, labels, num_labels).astype(jnp.int32)


def label_sums(values, labels, num_labels: int):
    """``sum_t [labels_t = k] values_t`` for every ``k``: ``values (T, ...) -> (K, ...)`` (a segment
    sum; labels outside ``[0, K)`` add nothing)."""
    return jax.ops.segment_sum(values, clean_labels(labels, num_labels), num_labels)


def label_counts(labels, num_labels: int, dtype=None):
    """The number of steps of each label, ``(K,)`` of ``dtype`` (default: the default float)."""
    dtype = dtype or jnp.result_type(float)
    return label_sums(jnp.ones(jnp.shape(labels), dtype), labels, num_labels)


def _block_rows(num_steps: int, num_labels: int) -> int:
    """Rows per block of :func:`label_grams`: a power of two from 8 to 64, small enough that the
    padding (at most ``K B`` rows) stays below about half of ``T``."""
    block = 64
    while block > 8 and num_labels * block > num_steps // 2:
        block //= 2
    return block


#: :func:`label_grams` sums the outer products by label directly for ``n <= 8``, and for ``n <= 16``
#: up to this many numbers ``T n^2``
DIRECT_GRAM_SIZE = 2 ** 22


def label_grams(z, labels, num_labels: int, block: int | None = None, method: str = "auto"):
    """``sum_t [labels_t = k] z_t z_t^T`` for every ``k``: ``z (T, n) -> (K, n, n)``.  Labels
    outside ``[0, K)`` add nothing.  ``method``: ``"blocks"`` (module docstring: the steps sorted by
    label into label-pure blocks of ``block`` rows, default :func:`_block_rows`), ``"direct"`` (a
    segment sum of the ``T`` outer products) or ``"auto"`` (direct for ``n <= 8``, and for ``n <=
    16`` while ``T n^2 <=`` :data:`DIRECT_GRAM_SIZE`; else blocks: module docstring)."""
    z = jnp.asarray(z)
    num_steps, n = z.shape
    K = int(num_labels)
    if method not in ("auto", "blocks", "direct"):
        raise ValueError(f"`method` must be 'auto', 'blocks' or 'direct', got {method!r}.")
    direct = n <= 8 or (n <= 16 and num_steps * n * n <= DIRECT_GRAM_SIZE)
    if method == "direct" or (method == "auto" and direct):
        return label_sums(z[:, :, None] * z[:, None, :], labels, K)
    B = int(block) if block is not None else _block_rows(num_steps, K)
    labels = clean_labels(labels, K)
    order = jnp.argsort(labels)
    counts = jnp.zeros(K + 1, jnp.int32).at[labels].add(1)            # the last: steps of no label
    start = jnp.cumsum(counts) - counts                                 # first sorted row of each label
    chunks = (counts[:K] + B - 1) // B                                  # blocks of each label
    ends = jnp.cumsum(chunks)                                           # one past each label's last block
    num_blocks = -(-num_steps // B) + K                                 # sum_k ceil(c_k / B) < T / B + K
    blocks = jnp.arange(num_blocks)
    owner = jnp.searchsorted(ends, blocks, side="right")                # each block's label; K: unused
    first = jnp.concatenate([ends - chunks, jnp.zeros(1, ends.dtype)])[owner]
    offset = (blocks - first)[:, None] * B + jnp.arange(B)[None, :]     # (blocks, B): row within its label's run
    used = (owner < K)[:, None] & (offset < counts[owner][:, None])
    rows = order[jnp.clip(start[owner][:, None] + offset, 0, num_steps - 1)]
    zb = jnp.where(used[..., None], z[rows], jnp.zeros((), z.dtype))    # (blocks, B, n), label-pure blocks
    grams = jnp.einsum("cbi,cbj->cij", zb, zb, precision=jax.lax.Precision.HIGHEST)
    return jax.ops.segment_sum(grams, owner, K, indices_are_sorted=True)
