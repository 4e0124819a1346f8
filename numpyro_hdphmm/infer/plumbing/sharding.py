r"""Sequences sharded over devices (and hosts): a per-sequence map over a ``jax.sharding.Mesh``.

Given the global parameters (transition rows, emission parameters), the states of different
sequences are conditionally independent, so a blocked sweep's expensive half (the ``(N, T, K)``
log-likelihoods and forward filtering, backward sampling) is data-parallel over sequences.
:func:`map_sequences` runs such a per-sequence function on a mesh with
:func:`jax.shard_map`: the ``N`` sequences are split along the leading axis over the mesh's
sequence axes, every device runs the function on its block of ``N / D`` sequences, and the
per-sequence results come back as one global array of leading size ``N``.  What a sweep does with
them afterwards (transition counts, the emission family's sufficient statistics, the global
update) is the unsharded code on global arrays: XLA's partitioner inserts the all-reduce of every
sum over sequences, and the one global update runs replicated, so every device holds the same
parameters for the next sweep.

**Padding.**  When ``D`` does not divide ``N``, the sequence axis is padded to ``N_pad = D
ceil(N / D)`` by repeating the first sequence; the padded rows are computed and dropped before
anything else sees them, so padding never reaches a statistic (the posterior is unchanged).

**Same draws, any number of devices.**  Random keys are per sequence, made once on the global
array (``jax.random.split(key, N)`` before padding), so sequence ``n`` gets the same key on one
device, on four, or on two processes; a sharded sweep then makes the same draws as the
unsharded one (up to the order of floating-point sums in the reductions, which can move the
last bit of a statistic).

**Meshes.**  ``mesh=None`` (the default of the MCMC kernels) runs unsharded: today's
single-program behaviour.  A :class:`jax.sharding.Mesh` whose ``sequence_axes`` (default: all of
its axes but the chain axis) hold ``D`` devices shards the sequences ``D`` ways;
:func:`sequence_mesh` builds the usual one-axis mesh over all devices, including every process's
devices after :func:`jax.distributed.initialize`.  ``docs/scaling.md`` has the recipes.

**Chains x sequences.**  With ``chain_axis`` (a mesh axis not among the sequence axes) the
vectorized chains of ``MCMC(..., chain_method="vectorized")`` are split over that axis too: the
kernel ``vmap``\ s its sweep over chains with ``spmd_axis_name=chain_axis``
(:attr:`SequenceSharding.spmd_axis_name`), and the batching rule of :func:`jax.shard_map` then
maps the chain dimension of every per-chain input of :func:`map_sequences` over that axis, so a
``(C_mesh, D)`` mesh runs ``C / C_mesh`` chains times ``N / D`` sequences per device.  Without a
chain axis a vmapped :func:`map_sequences` is still correct, every device computing the blocks
of its sequences for all chains.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

__all__ = ["SequenceSharding", "sequence_mesh", "map_sequences", "sequence_keys"]

SEQUENCE_AXIS = "sequences"


def sequence_mesh(devices: Optional[Sequence[Any]] = None, axis_name: str = SEQUENCE_AXIS) -> Mesh:
    """A one-axis :class:`jax.sharding.Mesh` named ``axis_name`` over ``devices`` (default:
    ``jax.devices()``, every device of every process)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("`devices` must hold at least one device.")
    return Mesh(np.asarray(devices, dtype=object), (axis_name,))


class SequenceSharding:
    """Where the sequences (and the vectorized chains) of a sweep run: ``mesh`` (a
    :class:`jax.sharding.Mesh`, or ``None`` for unsharded), ``axes`` (names of the mesh axes the
    sequence axis is split over) and ``chain_axis`` (the mesh axis the vectorized chains are split
    over, or ``None``).  Immutable; built by the kernels from their ``mesh=``, ``sequence_axes=``
    and ``chain_axis=`` arguments (:meth:`from_arguments` validates them)."""

    __slots__ = ("mesh", "axes", "chain_axis")

    def __init__(self, mesh: Optional[Mesh] = None, axes: Tuple[str, ...] = (), chain_axis: Optional[str] = None):
        self.mesh = mesh
        self.axes = tuple(axes)
        self.chain_axis = chain_axis

    @classmethod
    def from_arguments(cls, mesh, sequence_axes: Union[None, str, Sequence[str]] = None,
                       chain_axis: Optional[str] = None) -> "SequenceSharding":
        """Validate ``mesh`` (a :class:`jax.sharding.Mesh` or ``None``), ``sequence_axes`` (a name or
        names of its axes; default: every axis but ``chain_axis``) and ``chain_axis`` (a name of one of
        its axes, not a sequence axis; default none)."""
        if mesh is None:
            if sequence_axes is not None:
                raise ValueError("`sequence_axes` needs a `mesh`.")
            if chain_axis is not None:
                raise ValueError("`chain_axis` needs a `mesh`.")
            return cls()
        if not isinstance(mesh, Mesh):
            raise ValueError(f"`mesh` must be a jax.sharding.Mesh (e.g. numpyro_hdphmm.infer.sequence_mesh()) or "
                             f"None, got {type(mesh).__name__}.")
        if chain_axis is not None and (not isinstance(chain_axis, str) or chain_axis not in mesh.axis_names):
            raise ValueError(f"`chain_axis` must name an axis of the mesh {tuple(mesh.axis_names)}, got {chain_axis!r}.")
        if sequence_axes is None:
            axes = tuple(a for a in mesh.axis_names if a != chain_axis)
        else:
            axes = (sequence_axes,) if isinstance(sequence_axes, str) else tuple(sequence_axes)
            unknown = [a for a in axes if a not in mesh.axis_names]
            if unknown or not axes:
                raise ValueError(f"`sequence_axes` must name axes of the mesh {tuple(mesh.axis_names)}, got "
                                 f"{sequence_axes!r}.")
            if chain_axis in axes:
                raise ValueError(f"`chain_axis` {chain_axis!r} must not be one of the `sequence_axes` {axes}.")
        return cls(mesh, axes, chain_axis)

    @property
    def num_shards(self) -> int:
        """``D``: the number of blocks the sequence axis is split into (1 when unsharded)."""
        if self.mesh is None:
            return 1
        return int(np.prod([self.mesh.shape[a] for a in self.axes]))

    @property
    def num_chain_shards(self) -> int:
        """The number of blocks the vectorized chains are split into (1 without a chain axis)."""
        return 1 if self.chain_axis is None else int(self.mesh.shape[self.chain_axis])

    @property
    def spmd_axis_name(self) -> Optional[str]:
        """The ``spmd_axis_name`` of the kernels' ``jax.vmap`` over vectorized chains: the chain axis."""
        return self.chain_axis

    def check_chains(self, num_chains: int) -> None:
        """``ValueError`` unless the chain axis's size divides ``num_chains`` (vectorized chains)."""
        if num_chains % self.num_chain_shards:
            raise ValueError(f"num_chains={num_chains} must be a multiple of the size "
                             f"{self.num_chain_shards} of the mesh's chain axis {self.chain_axis!r}.")

    def __repr__(self):
        if self.mesh is None:
            return "SequenceSharding(unsharded)"
        chains = f", chains over {self.chain_axis!r}" if self.chain_axis is not None else ""
        return f"SequenceSharding({self.num_shards} shards over {self.axes}{chains} of mesh {dict(self.mesh.shape)})"


def sequence_keys(rng_key, num_sequences: int):
    """One key per sequence, ``jax.random.split(rng_key, N)``: the keys the batched FFBS of
    :mod:`numpyro_hdphmm._core.hmm` gives its sequences, so a sharded sweep draws what the
    unsharded one draws."""
    return jax.random.split(rng_key, num_sequences)


def _pad_rows(tree, num_padded: int):
    """Every leaf ``(N, ...) -> (N_pad, ...)`` with the rows ``N..N_pad-1`` copies of row 0
    (valid values that are computed and dropped)."""

    def pad(a):
        n = a.shape[0]
        if n == num_padded:
            return a
        index = jnp.where(jnp.arange(num_padded) < n, jnp.arange(num_padded), 0)
        return a[index]

    return jax.tree_util.tree_map(pad, tree)


def map_sequences(fn: Callable, per_sequence, shared, sharding: Optional[SequenceSharding] = None):
    """``fn(per_sequence, shared)`` with the leading (sequence) axis of every leaf of
    ``per_sequence`` split over the devices of ``sharding``.

    ``fn`` maps a block of sequences (leading axis ``n``) and the replicated ``shared`` values to
    a pytree whose leaves have leading axis ``n``, each output row depending only on its own input
    row (a per-sequence function, e.g. a vmapped FFBS with per-sequence keys).  Unsharded
    (``sharding`` ``None`` or without a mesh) this is ``fn(per_sequence, shared)``; sharded, the
    ``N`` rows are padded to a multiple of ``D`` (:func:`_pad_rows`, padded rows dropped from the
    result), split over the mesh with :func:`jax.shard_map` and the results concatenated: the
    same values, computed ``N / D`` rows per device.
    """
    if sharding is None or sharding.mesh is None:
        return fn(per_sequence, shared)
    leaves = jax.tree_util.tree_leaves(per_sequence)
    if not leaves:
        raise ValueError("`per_sequence` must hold at least one array with a leading sequence axis.")
    num = leaves[0].shape[0]
    if any(leaf.shape[0] != num for leaf in leaves):
        raise ValueError("every leaf of `per_sequence` must have the same leading (sequence) axis.")
    shards = sharding.num_shards
    padded = -(-num // shards) * shards
    spec_rows = PartitionSpec(sharding.axes) if sharding.axes else PartitionSpec()
    rows_in = jax.tree_util.tree_map(lambda _: spec_rows, per_sequence)
    shared_in = jax.tree_util.tree_map(lambda _: PartitionSpec(), shared)
    out_shape = jax.eval_shape(fn, per_sequence, shared)
    rows_out = jax.tree_util.tree_map(lambda _: spec_rows, out_shape)
    mapped = jax.shard_map(fn, mesh=sharding.mesh, in_specs=(rows_in, shared_in), out_specs=rows_out,
                           check_vma=False)
    out = mapped(_pad_rows(per_sequence, padded), shared)
    return jax.tree_util.tree_map(lambda a: a[:num], out)
