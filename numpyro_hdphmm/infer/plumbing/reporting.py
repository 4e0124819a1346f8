"""What the kernels tell the user after a sweep: overflow of the capacity, divergences of the inner
kernel, non-finite values, and a capacity too large to compile quickly (``docs/warnings.md``)."""

from __future__ import annotations

import warnings

import jax.numpy as jnp
import numpy as np

__all__ = ["OVERFLOW_RATE", "OVERFLOW_EVENTS", "LARGE_CAPACITY", "warn_overflow", "warn_overflow_rate", "warn_max_duration",
           "warn_divergence", "nonfinite_sites", "warn_nonfinite", "check_capacity"]


def warn_overflow(overflow, capacity, kernel):
    if np.any(np.asarray(overflow)):
        what = (
            "so the weak-limit approximation had no free state left (it is accurate only when L is well above "
            "the number of states in use)"
            if kernel == "WeakLimitGibbs"
            else "so no new state could be instantiated there (the draw is from the model truncated at max_states)"
        )
        warnings.warn(
            f"{kernel}: all max_states={capacity} state slots were occupied in a sweep, {what}; "
            f"increase max_states (e.g. to {2 * capacity}). The `overflow` field (extra_fields=('overflow',)) "
            "marks those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


#: the share of post-warmup sweeps (per chain) in which a BeamSampler overflow plausibly changed
#: the draw, above which the kernel warns (docs/errors.md, "Runtime warnings")
OVERFLOW_RATE = 0.01
#: ... and at least this many of them (one early event is not a rate)
OVERFLOW_EVENTS = 5
_overflow_events = {}


def warn_overflow_rate(value, capacity, kernel, num_chains, key):
    """Host side of the BeamSampler's overflow warning: ``value = (chains, chains * sweep)`` summed
    over the chains with an event in this sweep; warns once the events reach
    :data:`OVERFLOW_RATE` of the post-warmup sweeps of every chain, and :data:`OVERFLOW_EVENTS` in number."""
    value = np.asarray(value).reshape(-1, 2).sum(0)
    chains, sweep = int(value[0]), int(value[1]) // max(int(value[0]), 1)
    total, last, warned = _overflow_events.get(key, (0, -1, False))
    if sweep < last:  # a new run starts the count again
        total, warned = 0, False
    total += chains
    due = not warned and total >= max(OVERFLOW_EVENTS, OVERFLOW_RATE * sweep * num_chains)
    _overflow_events[key] = (total, sweep, warned or due)
    if due:  # once per run
        warnings.warn(
            f"{kernel}: in {total} of {sweep * num_chains} sweeps after warmup (over all chains) the slice variables "
            f"asked for more than max_states={capacity} states and the sweep used a state it had just instantiated (or "
            "every slot), so "
            "the states left out at the capacity were plausibly needed too and those draws come from the model "
            f"truncated at max_states; increase max_states (e.g. to {2 * capacity}). The `overflow` and `fresh_used` "
            "fields (extra_fields=('overflow', 'fresh_used')) mark those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


def warn_max_duration(flags, kernel):
    """An HDP-HSMM sweep after warmup had a segment as long as ``max_duration``: the truncation of the
    duration laws binds, and longer segments the data may hold were split."""
    if np.any(np.asarray(flags)):
        warnings.warn(
            f"{kernel}: after warmup a segment lasted max_duration steps, so the truncation of the duration laws to "
            "1..max_duration binds (a longer regime is split into several segments); increase max_duration (the "
            "sweep's cost grows linearly with it). The `at_max_duration` field (extra_fields=('at_max_duration',)) "
            "marks those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


def warn_divergence(count, kernel):
    n = int(np.sum(np.asarray(count)))
    if n > 0:
        warnings.warn(
            f"{kernel}: the inner kernel (NUTS by default), which updates the sites without an exact update (a "
            "custom emission's parameters, hyperparameters without a recognized prior), diverged after warmup, so "
            "its draws of those sites may be biased. Reparameterize those sites or give them tighter priors, or "
            "pass inner_kernel=NUTS(model, target_accept_prob=0.95). The `diverging` field (in sample_stats) marks "
            "those sweeps and nh.labels.print_summary(mcmc) counts them.",
            RuntimeWarning,
            stacklevel=2,
        )


def nonfinite_sites(z, lp):
    """``(num float sites + 1,)`` bool: which recorded floating-point site (in ``z``'s order), and
    last ``lp``, holds a NaN or infinite value anywhere (over every chain of a batched state)."""
    flags = [~jnp.all(jnp.isfinite(v)) for v in z.values() if jnp.issubdtype(jnp.result_type(v), jnp.inexact)]
    return jnp.stack(flags + [~jnp.all(jnp.isfinite(lp))])


def warn_nonfinite(bad, names, kernel):
    bad = np.asarray(bad)
    if np.any(bad):
        sites = ", ".join(n for n, b in zip(names, bad.reshape(-1)) if b)
        warnings.warn(
            f"{kernel}: a sweep produced NaN or infinite values at {sites} (recorded as they are; the `nonfinite` "
            "field marks those sweeps). Check the data's scale (rescale, or enable float64 with "
            "jax.config.update('jax_enable_x64', True)) and the priors of these sites.",
            RuntimeWarning,
            stacklevel=2,
        )


#: capacities above this warn at initialization (see :func:`check_capacity`)
LARGE_CAPACITY = 1024


def check_capacity(capacity: int, kernel: str) -> None:
    """Warn when ``max_states`` exceeds :data:`LARGE_CAPACITY`: the explicit sites hold a
    ``(K+1, K+1)`` transition matrix, so compile time, memory and every stored draw grow with
    ``K^2`` (``docs/benchmarks.md``, "Stress": minutes and gigabytes at ``K`` in the thousands)."""
    if capacity > LARGE_CAPACITY:
        warnings.warn(
            f"{kernel}: max_states={capacity} is above {LARGE_CAPACITY}. Compile time and memory grow with "
            f"max_states^2 (the {capacity + 1} x {capacity + 1} transition matrix is a site of the model and of every "
            "stored draw): about a minute to compile at 2000, many minutes and several GB at 5000. The infinite-model "
            "kernels instantiate states only as the data need them and the weak limit needs L of the order of a few "
            "times the expected number of states: a capacity of 2-5 times the number of states you expect is enough.",
            RuntimeWarning,
            stacklevel=3,
        )
