"""Test configuration: float64 by default (exactness tests need it); float32 tests opt out
with ``jax.enable_x64(False)`` or explicit ``float32`` arrays."""

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module: the kernels' programs are large, and
    a worker that keeps every module's programs grows to several GB over the suite."""
    yield
    jax.clear_caches()
