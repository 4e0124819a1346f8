"""Test configuration: float64 by default (exactness tests need it); float32 tests opt out
with ``jax.enable_x64(False)`` or explicit ``float32`` arrays."""

import jax
import numpy as np
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
