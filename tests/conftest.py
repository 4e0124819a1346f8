"""Test configuration: float64 by default (exactness tests need it); float32 tests opt out
with ``jax.enable_x64(False)`` or explicit ``float32`` arrays."""

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


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
