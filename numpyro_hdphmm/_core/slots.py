"""Capacity slots: the fixed-size bookkeeping of the infinite-model samplers.

A model of capacity ``K`` (``max_states``) keeps every state-indexed array at ``K`` slots; a slot
is *used* when some valid step of the state sequences is in it.  Samplers of the infinite model
instantiate new states in free slots, free the slots of states that become empty, and relabel the
used states by first appearance (the canonical labelling) so that the draws of a chain are
comparable from sweep to sweep.  All functions have static shapes and are jittable and vmappable.

``states`` are ``(N, T)`` int arrays (sequences padded to a common ``T``), ``lengths (N,)`` the
number of valid steps of each sequence; steps ``t >= length`` are ignored.
"""

from __future__ import annotations

import jax.numpy as jnp

__all__ = ["valid_steps", "used_slots", "occupied", "count_used", "canonical_order", "compact_states", "first_free_slot"]


def valid_steps(num_steps: int, lengths):
    """``(N, T)`` bool: ``t < lengths[n]``."""
    return jnp.arange(num_steps) < jnp.asarray(lengths)[:, None]


def used_slots(states, lengths, capacity: int):
    """``(K,)`` bool: the slots that ``states (N, T)`` use at a valid step."""
    valid = valid_steps(states.shape[1], lengths)
    return jnp.zeros((capacity,), bool).at[states.reshape(-1)].max(valid.reshape(-1))


def occupied(states, capacity: int):
    """``(K,)`` bool: the slots that appear in ``states`` (any shape, every entry counted; padded
    steps copy a valid state, so they add nothing)."""
    return jnp.zeros(capacity, bool).at[jnp.reshape(states, -1)].set(True)


def count_used(states, capacity: int):
    """Number of distinct states in ``states`` (any shape, every entry counted), int32."""
    return jnp.sum(occupied(states, capacity)).astype(jnp.int32)


def canonical_order(flat_states, in_range, capacity: int):
    """``(new_of_old (K,), old_of_new (K,))``: relabel the states by first appearance in
    ``flat_states`` (steps where ``in_range`` is False ignored), unused slots last in their old
    order."""
    steps = flat_states.shape[0]
    first_seen = jnp.full(capacity, steps, jnp.int32).at[jnp.where(in_range, flat_states, capacity)].min(
        jnp.arange(steps, dtype=jnp.int32), mode="drop"
    )
    old_of_new = jnp.argsort(first_seen, stable=True).astype(jnp.int32)
    new_of_old = jnp.zeros(capacity, jnp.int32).at[old_of_new].set(jnp.arange(capacity, dtype=jnp.int32))
    return new_of_old, old_of_new


def compact_states(states, lengths, capacity: int):
    """Relabel the used states ``0..k-1`` by first appearance (sequence by sequence, in time).

    Returns ``(states (N, T), old_of_new (K,), num_used)``: ``old_of_new[i]`` is the old label of
    new label ``i`` (used states first, then the unused slots in their old order), so a
    state-indexed array ``a`` follows the relabelling as ``a[old_of_new]``."""
    valid = valid_steps(states.shape[1], lengths)
    new_of_old, old_of_new = canonical_order(states.reshape(-1), valid.reshape(-1), capacity)
    num_used = jnp.sum(used_slots(states, lengths, capacity)).astype(jnp.int32)
    return new_of_old[states], old_of_new, num_used


def first_free_slot(active):
    """Index of the first ``False`` entry of ``active (K,)`` (0 when every slot is active)."""
    return jnp.argmin(active)
