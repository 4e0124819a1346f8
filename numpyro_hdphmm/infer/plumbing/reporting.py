"""What the kernels tell the user about a run: overflow of the capacity, divergences of the inner
kernel, segments at ``max_duration``, non-finite values, rungs of a tempered kernel that never
exchange, and a capacity too large to compile quickly (``docs/warnings.md``).

**No host callback in the compiled loop.**  A sweep only counts its events in the state
(:class:`Events`, a field of :class:`~numpyro_hdphmm.infer.plumbing.adapter.HDPState`: counters
since ``init``); the warnings are decided on the host when a state with concrete values reaches
Python, i.e. when :func:`jax.tree_util.tree_unflatten` rebuilds :class:`Events` from arrays that
are not tracers: at the end of ``MCMC.run`` (NumPyro's loop returns the last state), after every
sweep with the progress bar on (NumPyro then runs one compiled sweep at a time), and after every
``kernel.sample`` call made by hand.  A program holding a host callback is never written to JAX's
persistent compilation cache (its key holds the callback's address), so a callback in the sweep
made every new kernel, process and test compile NumPyro's loop again.  Each kind of warning is
given at most once per run of a kernel (:func:`start_run` at ``init``; a ``post_warmup_state``
continuation is the same run, its counters go on)."""

from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["OVERFLOW_RATE", "OVERFLOW_EVENTS", "LARGE_CAPACITY", "Report", "Events", "new_token", "start_run", "report",
           "warn_overflow", "warn_overflow_rate", "overflow_rate_due", "warn_max_duration", "warn_divergence", "nonfinite_sites",
           "warn_nonfinite", "SWAP_RATE", "SWAP_ATTEMPTS", "swaps_stalled", "warn_swaps_stalled", "check_capacity"]


class Report(NamedTuple):
    """What the host needs, besides the counters, to word a run's warnings (static: part of the
    state's tree structure, never of the compiled program).

    ``kernel``: the kernel's class name; ``capacity``: ``max_states``; ``sites``: the recorded
    floating-point sites in the order of :func:`nonfinite_sites` (``"lp"`` last); ``rate``: warn
    of overflows by their rate after warmup (BeamSampler) rather than at the first; ``token``: the
    kernel's run registry key (:func:`new_token`); ``pairs``: the neighbouring pairs of rungs of a
    tempered kernel (``tempering=R``: ``R - 1``; 0 without tempering)."""

    kernel: str
    capacity: int
    sites: Tuple[str, ...]
    rate: bool
    token: int
    pairs: int = 0


_TOKENS = itertools.count()
#: token -> the kinds of warning already given in the kernel's current run
_WARNED = {}


def new_token() -> int:
    """A fresh key for one kernel's warning registry."""
    return next(_TOKENS)


def start_run(token: int) -> None:
    """A new run of the kernel (``init``): every kind of warning may be given again."""
    _WARNED[token] = set()


@jax.tree_util.register_pytree_node_class
class Events:
    """Counters of the events a run must report, since ``init`` (any leading chain axes).

    ``overflow``: sweeps in which every slot was occupied (or the algorithm's truncation
    overflowed); ``biased``: sweeps after warmup whose overflow plausibly changed the draw (the
    rate rule, :data:`OVERFLOW_RATE`); ``late``: sweeps after warmup; ``at_max_duration``:
    sweeps after warmup with a segment of ``max_duration`` steps (HDP-HSMM); ``divergences``:
    divergent inner-kernel transitions after warmup; ``nonfinite``: ``(num sites,)`` sweeps with a
    NaN or infinite value at each of ``report.sites``; ``swap_attempts`` and ``swap_milli``:
    ``(report.pairs,)`` the swap attempts of each pair of rungs after warmup and the sum of their
    acceptance probabilities in thousandths (rounded; a tempered kernel).  All int32.

    Rebuilt from concrete arrays (the end of a run, a sweep on the host), it checks them
    (:func:`report`)."""

    FIELDS = ("overflow", "biased", "late", "at_max_duration", "divergences", "nonfinite", "swap_attempts",
              "swap_milli")

    def __init__(self, report_, overflow, biased, late, at_max_duration, divergences, nonfinite, swap_attempts,
                 swap_milli):
        self.report = report_
        self.overflow, self.biased, self.late = overflow, biased, late
        self.at_max_duration, self.divergences, self.nonfinite = at_max_duration, divergences, nonfinite
        self.swap_attempts, self.swap_milli = swap_attempts, swap_milli

    @classmethod
    def zeros(cls, report_: Report) -> "Events":
        z = jnp.zeros((), jnp.int32)
        pairs = jnp.zeros((report_.pairs,), jnp.int32)
        return cls(report_, z, z, z, z, z, jnp.zeros((len(report_.sites),), jnp.int32), pairs, pairs)

    def counts(self):
        return tuple(getattr(self, f) for f in self.FIELDS)

    def add(self, *increments) -> "Events":
        """The counters plus this sweep's events (booleans or counts, in :attr:`FIELDS` order; the
        trailing ones may be left out: nothing to add)."""
        increments = increments + (0,) * (len(self.FIELDS) - len(increments))
        return Events(self.report, *(c + jnp.asarray(i).astype(jnp.int32) for c, i in zip(self.counts(), increments)))

    def tree_flatten(self):
        return self.counts(), self.report

    @classmethod
    def tree_unflatten(cls, report_, leaves):
        events = cls(report_, *leaves)
        if isinstance(report_, Report) and all(_is_host_value(v) for v in leaves):
            report(events)
        return events

    def __repr__(self):
        return f"Events({', '.join(f'{f}={getattr(self, f)!r}' for f in self.FIELDS)})"


def _is_host_value(v) -> bool:
    """A concrete array (not a tracer, not an abstract shape)."""
    return isinstance(v, np.ndarray) or (isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer))


def report(events: Events) -> None:
    """Give the warnings the counters call for (summed over chains), each kind once per run."""
    rep = events.report
    warned = _WARNED.setdefault(rep.token, set())
    total = lambda v: int(np.sum(np.asarray(v)))
    due = []
    if not rep.rate and total(events.overflow):
        due.append(("overflow", lambda: warn_overflow(True, rep.capacity, rep.kernel)))
    if rep.rate:
        biased, late = total(events.biased), total(events.late)
        if overflow_rate_due(biased, late):
            due.append(("overflow", lambda: warn_overflow_rate(biased, late, rep.capacity, rep.kernel)))
    if total(events.at_max_duration):
        due.append(("at_max_duration", lambda: warn_max_duration(True, rep.kernel)))
    if total(events.divergences):
        due.append(("divergences", lambda: warn_divergence(total(events.divergences), rep.kernel)))
    bad = np.asarray(events.nonfinite).reshape(-1, len(rep.sites)).sum(0) > 0
    if bad.any():
        due.append(("nonfinite", lambda: warn_nonfinite(bad, rep.sites, rep.kernel)))
    if rep.pairs:
        attempts = np.asarray(events.swap_attempts, np.int64).reshape(-1, rep.pairs).sum(0)
        milli = np.asarray(events.swap_milli, np.int64).reshape(-1, rep.pairs).sum(0)
        if swaps_stalled(attempts, milli).any():
            due.append(("swaps", lambda: warn_swaps_stalled(attempts, milli, rep.kernel)))
    for kind, warn in due:
        if kind not in warned:
            warned.add(kind)
            warn()


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


def overflow_rate_due(biased: int, late: int) -> bool:
    """Whether ``biased`` plausibly biased overflows in ``late`` sweeps after warmup call for the warning."""
    return biased > 0 and biased >= max(OVERFLOW_EVENTS, OVERFLOW_RATE * late)


def warn_overflow_rate(biased, late, capacity, kernel):
    """BeamSampler's overflow warning (:func:`report` gives it when :func:`overflow_rate_due`):
    ``biased`` post-warmup sweeps (over all chains) of ``late`` in all had an overflow that
    plausibly changed the draw."""
    warnings.warn(
        f"{kernel}: in {biased} of {late} sweeps after warmup (over all chains) the slice variables "
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


#: the mean acceptance probability of a pair of rungs' swaps after warmup below which a tempered
#: kernel warns (docs/errors.md, "Runtime warnings")
SWAP_RATE = 0.01
#: ... once the pair had at least this many attempts after warmup (over all chains)
SWAP_ATTEMPTS = 20


def swaps_stalled(attempts, milli) -> np.ndarray:
    """``(pairs,)`` bool: the pairs of rungs with at least :data:`SWAP_ATTEMPTS` swap attempts after
    warmup whose mean acceptance probability (``milli / 1000 / attempts``) is below :data:`SWAP_RATE`."""
    attempts, milli = np.asarray(attempts), np.asarray(milli)
    return (attempts >= SWAP_ATTEMPTS) & (milli < 1000 * SWAP_RATE * attempts)


def warn_swaps_stalled(attempts, milli, kernel):
    """Replica exchange that does not exchange: some pair of neighbouring rungs accepted (almost)
    none of its swaps after warmup, so nothing the hotter rungs find reaches the draws (rung ``R - 1``)."""
    stalled = swaps_stalled(attempts, milli)
    if not stalled.any():
        return
    rates = ", ".join(f"{r}-{r + 1}: {m / 1000 / max(a, 1):.3f} over {a}" for r, (a, m, s) in
                      enumerate(zip(np.asarray(attempts), np.asarray(milli), stalled)) if s)
    warnings.warn(
        f"{kernel}(tempering=...): after warmup some pairs of neighbouring rungs (0 = the prior, the last = the "
        f"posterior) almost never exchanged their states (mean acceptance probability over the attempts: {rates}), "
        "so the ladder does not connect the hot rungs to the cold one: the draws come from the untempered rung alone, "
        "at the cost of every rung. Use more rungs (tempering=2R; about twice the communication barrier is needed: "
        "Syed et al. 2022) and a longer warmup for the ladder to adapt, or tempering=None. The `swap_accept` field "
        "(sample_stats) gives each pair's acceptance probability per sweep.",
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
