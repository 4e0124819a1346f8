"""One timer for the suite: compilation apart from sweeps, contenders alternated in blocks.

Every speed figure of the suite comes from :func:`alternate`: each contender is a compiled step
``state -> state`` (one call runs ``sweeps_per_call`` sweeps); its compilation is timed on its
own (``lower(...).compile()``), then the contenders run in turn, ``calls_per_block`` calls each,
for ``blocks`` rounds, so that a change of machine load falls on all of them and the ratios of one
run can be compared.  Times are seconds per sweep (a call's time over ``sweeps_per_call``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def block(x):
    """``jax.block_until_ready(x)``."""
    import jax

    return jax.block_until_ready(x)


@dataclass
class Timing:
    """Seconds per sweep of one contender (``times``, one entry per call) and its compile seconds."""

    compile_s: float
    times: list = field(default_factory=list)

    @property
    def min(self) -> float:
        return float(np.min(self.times)) if self.times else float("nan")

    @property
    def median(self) -> float:
        return float(np.median(self.times)) if self.times else float("nan")

    def as_dict(self) -> dict:
        return {"compile_s": self.compile_s, "min_s": self.min, "median_s": self.median, "calls": len(self.times)}


@dataclass
class Contender:
    """A compiled step and the state it starts from; ``call(state) -> state``."""

    call: Callable
    state: Any
    compile_s: float = 0.0


def compile_step(step: Callable, state, sweeps_per_call: int = 1) -> Contender:
    """Compile ``sweeps_per_call`` applications of ``step`` (a ``lax.fori_loop``, as ``MCMC.run``
    runs its sweeps) ahead of time; the compilation is timed apart from the sweeps."""
    import jax

    def many(s):
        return jax.lax.fori_loop(0, sweeps_per_call, lambda i, s: step(s), s) if sweeps_per_call > 1 else step(s)

    t0 = time.perf_counter()
    compiled = jax.jit(many).lower(state).compile()
    return Contender(compiled, state, time.perf_counter() - t0)


def kernel_contender(kernel, args: tuple, kwargs: dict | None = None, seed: int = 0, num_chains: int | None = None,
                     sweeps_per_call: int = 1, init_params=None) -> Contender:
    """A contender that runs ``kernel.sample`` (``num_chains`` vmapped chains when given)."""
    import jax

    kwargs = kwargs or {}
    key = jax.random.key(seed)
    if num_chains is not None:
        key = jax.random.split(key, num_chains)
    state = block(kernel.init(key, 0, init_params, args, kwargs))
    return compile_step(lambda s: kernel.sample(s, args, kwargs), state, sweeps_per_call)


def alternate(contenders: dict, blocks: int = 6, calls_per_block: int = 2, warmup_calls: int = 2,
              sweeps_per_call: int = 1, budget_s: float = float("inf"), observe: Callable | None = None) -> dict:
    """Time ``contenders`` (name -> :class:`Contender`) in alternating blocks; returns name ->
    :class:`Timing`.  Stops after the block in which ``budget_s`` seconds of timing were spent
    (at least one block).  ``observe(name, state)``, when given, is called after every timed call
    (outside the timing), e.g. to record the states instantiated in each sweep."""
    out = {name: Timing(c.compile_s) for name, c in contenders.items()}
    for c in contenders.values():
        for _ in range(warmup_calls):
            c.state = block(c.call(c.state))
    start = time.perf_counter()
    for _ in range(blocks):
        for name, c in contenders.items():
            for _ in range(calls_per_block):
                t0 = time.perf_counter()
                c.state = block(c.call(c.state))
                out[name].times.append((time.perf_counter() - t0) / sweeps_per_call)
                if observe is not None:
                    observe(name, c.state)
        if time.perf_counter() - start > budget_s:
            break
    return out


def time_calls(fn: Callable, repeats: int = 10, budget_s: float = 60.0) -> list:
    """Seconds of ``repeats`` calls of ``fn()`` (blocked) after one warm-up call; stops early once
    ``budget_s`` is spent (at least 3 calls)."""
    block(fn())
    times, start = [], time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t0)
        if i >= 2 and time.perf_counter() - start > budget_s:
            break
    return times


def peak_memory_gb() -> float:
    """``VmHWM`` of ``/proc/self/status`` (this process's peak resident memory) in GB, or the
    ``ru_maxrss`` peak where ``/proc`` is missing."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
