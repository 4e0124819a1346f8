"""Test configuration: float64 by default (exactness tests need it); float32 tests opt out
with ``jax.enable_x64(False)`` or explicit ``float32`` arrays."""

import os
import subprocess
import sys
import tempfile

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)  # before the package is imported (below)


def _fast_compile_flags():
    """XLA:CPU compiles the tests' programs with the package's one-off compiler options
    (:data:`numpyro_hdphmm._core.compile.ONE_OFF_COMPILER_OPTIONS`: no LLVM optimization passes,
    the classic emitters instead of the MLIR fusion emitters), here for every program: the default
    set's cost is compilation, and these halve it for the kernels' sweeps (measured alone, one
    process, a fresh cache: five sampler tests 453 -> 261 CPU s), while the small problems the
    tests run take little longer.  Set in ``XLA_FLAGS`` before JAX starts its backend (read then, not at ``import jax``; the xdist
    workers and the tests' subprocesses inherit it; importing the package starts none, and a
    backend already up raises rather than ignore the flags), after a probe process accepted the
    flags (an unknown flag aborts a process).  ``NH_TEST_FAST_COMPILE=0`` keeps XLA's defaults."""
    from jax._src.xla_bridge import backends_are_initialized

    from numpyro_hdphmm._core.compile import ONE_OFF_COMPILER_OPTIONS

    flags = tuple(f"--{name}={str(value).lower() if isinstance(value, bool) else value}"
                  for name, value in ONE_OFF_COMPILER_OPTIONS.items())
    current = os.environ.get("XLA_FLAGS", "")
    if os.environ.get("NH_TEST_FAST_COMPILE", "1") == "0" or all(f.split("=")[0] in current for f in flags):
        return
    if backends_are_initialized():
        raise RuntimeError("tests/conftest.py: JAX's backend started before XLA_FLAGS could be set (an import "
                           "made an array); the tests' compiler options would be ignored.")
    wanted = " ".join([current, *(f for f in flags if f.split("=")[0] not in current)]).strip()
    probe = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
                           env={**os.environ, "XLA_FLAGS": wanted}, capture_output=True, timeout=300)
    if probe.returncode == 0:
        os.environ["XLA_FLAGS"] = wanted


_fast_compile_flags()

# JAX's persistent compilation cache, shared by the xdist workers of a run (and by later runs on
# the machine): many tests build a kernel for the same model and data shapes, whose programs are
# identical but, held by new kernel objects, would be compiled again in every test and worker.
# A cached program is loaded instead of compiled (the tracing still runs).  Measured on
# tests/infer/test_weak_limit.py alone, one process: 283 -> 219 CPU seconds.
# NH_TEST_COMPILATION_CACHE=0 turns it off, another value names the folder; NH_TEST_CACHE_MIN_SECS sets
# the shortest compilation written to it (0.5 s; caching every small program too made no difference
# on tests/test_distributions.py: 188.6 vs 188.6 CPU s).  NumPyro's sampling loop around a kernel is
# cached since the sweeps hold no host callback (reporting.Events).
_CACHE_DIR = os.environ.get("NH_TEST_COMPILATION_CACHE",
                            os.path.join(tempfile.gettempdir(), f"numpyro-hdphmm-test-cache-jax{jax.__version__}"))
if _CACHE_DIR != "0":
    jax.config.update("jax_compilation_cache_dir", _CACHE_DIR)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(os.environ.get("NH_TEST_CACHE_MIN_SECS", "0.5")))


@pytest.fixture
def rng():
    return np.random.default_rng(0)


#: a worker's resident memory above which compiled programs are dropped after a module
_RELEASE_ABOVE_BYTES = 5 * 2**30


def _resident_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module once the worker holds more than 5 GiB:
    the kernels' programs are large, and a worker that keeps every module's programs grows to
    several GB over the suite; dropping them after every module instead would recompile the
    small programs every module shares (eager operations, prior draws) again and again."""
    yield
    if _resident_bytes() > _RELEASE_ABOVE_BYTES:
        jax.clear_caches()
