"""Determinism of every kernel (issue 18): the same key gives the same draws, for every chain
method; a ``post_warmup_state`` continuation gives the draws of an uninterrupted run; a pickled
``MCMC`` resumes.

NumPyro's key handling makes the natural equality exact: ``MCMC.run`` hands the kernel's state
``rng_key`` (split into ``num_chains`` keys when one key is given) to ``init``, every sweep
splits the state's key and carries one part on, and a continuation
(``mcmc.post_warmup_state = mcmc.last_state; mcmc.run(mcmc.post_warmup_state.rng_key)``) starts
from the last state with its own key.  So warm-up + N samples, then N more by continuation, are
the draws of one run of warm-up + 2N samples, the second N its second half.  That holds for a
kernel only if everything it carries is in :class:`~numpyro_hdphmm.infer.HDPState` (nothing on
the kernel object changes between runs); and a pickled ``MCMC`` resumes only if the kernel
pickles (``HDPKernel.__getstate__`` drops the compiled programs and the inner kernel, rebuilt by
the ``init`` that ``MCMC.run`` calls on a kernel that has not been initialized).

``chain_method="parallel"`` needs one device per chain; on one CPU device NumPyro falls back to
``"sequential"`` with a warning (so it is the sequential path), and the test on two simulated
devices is in ``test_parallel_chains.py`` (slow, a subprocess).

Cost: every ``MCMC`` object compiles its own sampling loop (with the kernel's sweep inside it),
so every test here is slow; the default set checks ``WeakLimitGibbs``'s same-key draws and
continuation in ``test_weak_limit.py::test_chain_methods_and_resume`` (two runs with one key, one
of them continued, agree draw for draw).
Each kernel instance is shared by the module's tests (its compiled ``init`` is reused).
"""

import os
import pickle
import subprocess
import sys
import textwrap

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

from kernel_registry import entries

#: the conformance registry's entries with ``determinism=True`` (``tests/kernel_registry.py``)
KERNELS = {e.name: e.build for e in entries("determinism")}
NUM_WARMUP, NUM_SAMPLES = 2, 3
Y = np.array([0, 0, 1, 0, 2, 2, 1, 2, 0, 0, 1, 1])


def model(y):
    """Categorical sticky HDP-HMM with Gamma priors on gamma, alpha, kappa (their exact updates
    draw from the key too)."""
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(3, 1.0), max_states=4), obs=y)


@pytest.fixture(scope="module")
def kernels():
    """One instance per kernel, shared by the module's tests (compiled programs are cached on it)."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = KERNELS[name](model)
        return cache[name]

    return get


def _mcmc(kernel, method, num_samples=NUM_SAMPLES):
    # progress_bar + jit_model_args: a second run of the same MCMC compiles nothing again
    return MCMC(kernel, num_warmup=NUM_WARMUP, num_samples=num_samples, num_chains=2 if method else 1,
                chain_method=method or "sequential", jit_model_args=True, progress_bar=True)


def _draws(mcmc):
    """Every recorded site and ``lp``, ``(chains, draws, ...)``."""
    out = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    lp = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["lp"])
    return {**out, "lp": lp}


def _continue(mcmc):
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, Y)
    return _draws(mcmc)


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _halves(full):
    return ({k: v[:, :NUM_SAMPLES] for k, v in full.items()}, {k: v[:, NUM_SAMPLES:] for k, v in full.items()})


@pytest.mark.slow  # the default set: test_weak_limit.py::test_chain_methods_and_resume (same key, continuation)
@pytest.mark.parametrize("name", list(KERNELS))
def test_same_key_same_draws(kernels, name):
    """Vectorized chains: the same key gives identical draws (and the same continuation), another
    key other draws."""
    mcmc = _mcmc(kernels(name), "vectorized")
    mcmc.run(jax.random.key(0), Y)
    first = _draws(mcmc)
    first_continued = _continue(mcmc)
    mcmc.post_warmup_state = None
    mcmc.run(jax.random.key(0), Y)
    _assert_same(_draws(mcmc), first)
    _assert_same(_continue(mcmc), first_continued)
    mcmc.post_warmup_state = None
    mcmc.run(jax.random.key(1), Y)
    other = _draws(mcmc)
    assert any(not np.array_equal(other[k], first[k]) for k in first)


@pytest.mark.slow  # the default set checks WeakLimitGibbs's continuation in test_weak_limit.py
@pytest.mark.parametrize("method", [None, "sequential"])
@pytest.mark.parametrize("name", list(KERNELS))
def test_continuation_equals_uninterrupted_run_and_pickle_resumes(kernels, name, method):
    """Warm-up + N samples, then N more by ``post_warmup_state`` continuation: the two halves of
    one uninterrupted run of warm-up + 2N samples (one chain, or two sequential chains); a pickled
    ``MCMC`` (after the first run), loaded and continued, draws what the original continues with."""
    kernel = kernels(name)
    full = _mcmc(kernel, method, num_samples=2 * NUM_SAMPLES)
    full.run(jax.random.key(3), Y)
    first_half, second_half = _halves(_draws(full))
    mcmc = _mcmc(kernel, method)
    mcmc.run(jax.random.key(3), Y)
    _assert_same(_draws(mcmc), first_half)
    blob = pickle.dumps(mcmc)
    _assert_same(_continue(mcmc), second_half)
    loaded = pickle.loads(blob)
    _assert_same(_continue(loaded), second_half)


WORKER = textwrap.dedent(
    """
    import pickle, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import test_determinism  # the model pickled by reference
    with open(sys.argv[1], "rb") as fh:
        mcmc = pickle.load(fh)
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, test_determinism.Y)
    np.savez(sys.argv[2], **test_determinism._draws(mcmc))
    """
)


@pytest.mark.slow
def test_pickled_mcmc_resumes_in_a_fresh_process(kernels, tmp_path):
    """An ``MCMC`` pickled to a file after a run, loaded and continued in a new Python process,
    draws what the original continues with."""
    mcmc = _mcmc(kernels("WeakLimitGibbs"), None)
    mcmc.run(jax.random.key(5), Y)
    (tmp_path / "mcmc.pkl").write_bytes(pickle.dumps(mcmc))
    expected = _continue(mcmc)
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.path.dirname(here), root,
                                                                     os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path / "mcmc.pkl"), str(tmp_path / "draws.npz")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    with np.load(tmp_path / "draws.npz") as got:
        _assert_same(dict(got), expected)
