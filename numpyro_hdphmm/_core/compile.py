r"""Compiling one-off programs with less backend optimization.

XLA spends most of a program's CPU compile time in LLVM's optimization and code generation.  A
program that runs once per ``MCMC.run`` on small data (the prior draw that model discovery
falls back to, the clustering of the data-driven start, the kernel's init program) runs for
milliseconds, so compiling it with :data:`ONE_OFF_COMPILER_OPTIONS`
(``xla_backend_optimization_level=0`` and the CPU backend's classic emitters instead of its MLIR
fusion emitters) saves more than it costs: each such program compiles in a third to a quarter of
the time (``docs/benchmarks.md``, "Compile time").  The generated code is several times slower,
so the sweep, which runs thousands of times, always keeps XLA's defaults, and the clustering and
the init program use the options on small data only (``numpyro_hdphmm.infer.plumbing.adapter``).

The options can change floating-point results in the last bits (LLVM's contractions and its
transcendental functions differ).  The discovery draw's values only decide the model's
structure and the clustering's outputs are integer labels; the init program's floats (the
chain's first draw of the parameters) are a random draw whose last bits may differ from a
default compilation's: each configuration is still deterministic, and the README model's samples
are bit-identical either way (``docs/benchmarks.md``, "Compile time").

``compiler_options`` apply to top-level ``jax.jit`` only: :func:`one_off_jit` uses them when it is
called outside any trace with concrete arguments on the CPU backend (the only one measured), and
otherwise (inside ``jit`` or ``vmap`` of a caller, ``pmap`` of NumPyro's parallel chains, GPU) the
plain jitted function, which inside a trace is inlined into the caller's program.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import jax

__all__ = ["ONE_OFF_COMPILER_OPTIONS", "TRACE_CTX_SINCE", "at_top_level", "one_off_applies", "one_off_jit"]

#: XLA options of one-off programs (CPU backend only): no LLVM optimization of the generated code
#: (half the compile seconds), and the CPU backend's classic elemental emitters instead of its MLIR
#: fusion emitters (another halving)
ONE_OFF_COMPILER_OPTIONS: Dict[str, object] = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}

#: set when the backend rejected an option (a jaxlib without it): one-off programs then compile
#: with the defaults
_REJECTED = []


#: the first JAX version with ``jax.core.trace_ctx`` (the tracing-context object of JAX's
#: stackless tracing), the one JAX internal this package reads (:func:`_trace_context`)
TRACE_CTX_SINCE = (0, 4, 36)


def _jax_version() -> tuple:
    parts = []
    for part in jax.__version__.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _trace_context():
    """``jax.core.trace_ctx`` where this JAX has it with the interface read here (version at least
    :data:`TRACE_CTX_SINCE` and an ``is_top_level`` method), else ``None``: the one place the
    package touches a JAX internal.  ``None`` only turns the one-off compilation off (every program
    then compiles with XLA's defaults), never changes a result."""
    if _jax_version() < TRACE_CTX_SINCE:
        return None
    ctx = getattr(jax.core, "trace_ctx", None)
    return ctx if callable(getattr(ctx, "is_top_level", None)) else None


def at_top_level(*args) -> bool:
    """True when no JAX transformation is tracing (the tracing context is at the top level:
    eager evaluation, also inside ``jax.ensure_compile_time_eval``) and no leaf of ``args`` is a
    tracer: a ``jax.jit`` called here is compiled as its own program.  False where the context
    cannot be read (:func:`_trace_context`)."""
    ctx = _trace_context()
    if ctx is None or not ctx.is_top_level():
        return False
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(args))


def one_off_applies(*args) -> bool:
    """Whether :func:`one_off_jit` called here with ``args`` would compile with its options: at
    the top level (:func:`at_top_level`), on the CPU backend, and no option rejected before."""
    return not _REJECTED and jax.default_backend() == "cpu" and at_top_level(*args)


def one_off_jit(fun: Callable, compiler_options: Optional[Dict] = None, **jit_kwargs) -> Callable:
    """``jax.jit(fun, **jit_kwargs)`` compiled with ``compiler_options`` (default
    :data:`ONE_OFF_COMPILER_OPTIONS`) when called at the top level (:func:`at_top_level`, checked
    on every call), and without them, as an ordinary nested ``jit``, inside a trace, or when the
    backend rejects an option ("No such compile option": a jaxlib that lacks it; then for every
    later call too).  The two variants are built once; each traces and compiles on its first use."""
    options = dict(ONE_OFF_COMPILER_OPTIONS if compiler_options is None else compiler_options)
    plain = jax.jit(fun, **jit_kwargs)
    fast = jax.jit(fun, compiler_options=options, **jit_kwargs)

    def call(*args, **kwargs):
        if not one_off_applies(args, kwargs):
            return plain(*args, **kwargs)
        try:
            return fast(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 -- only an unknown option is handled, the rest re-raised
            if "compile option" not in str(err):
                raise
            _REJECTED.append(str(err))
            return plain(*args, **kwargs)

    call.plain, call.fast = plain, fast
    return call
