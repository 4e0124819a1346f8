"""The kernel's compiled init and sweep are cached on the kernel (issue 19): a second ``MCMC.run``
with a new key or new data of the same shape, ``jit_model_args=True`` and ``post_warmup_state``
continuation trace neither again, and the cached programs read the new data (not stale constants).

Traces are counted with a Python counter in the traced functions (``_init_one``, ``_sample_one``):
a compiled program that is reused runs no Python.  NumPyro's own loop (``fori_collect``) is
retraced and recompiled by NumPyro itself with ``progress_bar=False`` (also for NUTS); that is
not counted here."""

import jax
import numpy as np
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import WeakLimitGibbs


def fixed_model(y):
    hmm = nh.StickyHDPHMM(2.0, 2.0, 5.0, nh.emissions.Categorical(3, 1.0), max_states=3)
    nh.sample("y", hmm, obs=y)


def _data(seed, num_steps=30):
    return np.random.default_rng(seed).integers(0, 3, num_steps)


def _counting(kernel):
    """Count how often ``kernel``'s init and sweep are traced (or run eagerly)."""
    counts = {"init": 0, "sample": 0}
    init_one, sample_one = kernel._init_one, kernel._sample_one

    def counted_init(*args, **kwargs):
        counts["init"] += 1
        return init_one(*args, **kwargs)

    def counted_sample(*args, **kwargs):
        counts["sample"] += 1
        return sample_one(*args, **kwargs)

    kernel._init_one, kernel._sample_one = counted_init, counted_sample
    return counts


def _sweep(kernel, key, y, num_chains=1):
    keys = jax.random.key(key) if num_chains == 1 else jax.random.split(jax.random.key(key), num_chains)
    state = kernel.init(keys, 2, None, (y,), {})
    return kernel.sample(state, (y,), {})


@pytest.mark.parametrize("num_chains", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_kernel_programs_are_cached(num_chains):
    """init and sweep are traced once per configuration and data shape; the cached programs read
    the data they are given (the sweep on new data differs, the same data give the same draws)."""
    kernel = WeakLimitGibbs(fixed_model)
    counts = _counting(kernel)
    first = _sweep(kernel, 5, _data(0), num_chains)
    assert counts == {"init": 1, "sample": 1}
    other = _sweep(kernel, 5, _data(1), num_chains)  # new data of the same shape, same key
    again = _sweep(kernel, 5, _data(0), num_chains)
    assert counts == {"init": 1, "sample": 1}
    np.testing.assert_array_equal(again.z["y_states"], first.z["y_states"])
    np.testing.assert_array_equal(again.data_loglik, first.data_loglik)
    assert not np.array_equal(other.data_loglik, first.data_loglik)
    shorter = _sweep(kernel, 5, _data(0, 20), num_chains)  # a new shape: a new program
    assert counts == {"init": 2, "sample": 2} and shorter.z["y_states"].shape[-1] == 20


def test_mcmc_second_run_and_continuation_do_not_retrace():
    """``jit_model_args=True``: a second run on new data of the same shape and a
    ``post_warmup_state`` continuation trace neither init nor the sweep again."""
    kernel = WeakLimitGibbs(fixed_model)
    counts = _counting(kernel)
    mcmc = MCMC(kernel, num_warmup=2, num_samples=3, jit_model_args=True, progress_bar=True)
    mcmc.run(jax.random.key(0), _data(0))
    assert counts == {"init": 1, "sample": 1}
    mcmc.run(jax.random.key(2), _data(1))
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, _data(1))
    assert counts == {"init": 1, "sample": 1}
    assert mcmc.get_samples()["y_states"].shape == (3, 30)


def test_model_needing_argument_values_falls_back_to_constants():
    """A model that reads its data's values in Python (``int(y.max())``) cannot be traced with
    abstract arguments: the kernel compiles the data in as constants instead (uncached), and runs."""

    def value_model(y):
        num_categories = int(np.asarray(y).max()) + 1  # needs concrete data
        hmm = nh.StickyHDPHMM(2.0, 2.0, 5.0, nh.emissions.Categorical(num_categories, 1.0), max_states=2)
        nh.sample("y", hmm, obs=y)

    kernel = WeakLimitGibbs(value_model)
    counts = _counting(kernel)
    mcmc = MCMC(kernel, num_warmup=1, num_samples=2, progress_bar=False)
    mcmc.run(jax.random.key(0), _data(0, 10))
    assert mcmc.get_samples()["y_states"].shape == (2, 10)
    assert counts["init"] == 2  # the abstract attempt, then the program with the data as constants
