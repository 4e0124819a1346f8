"""The kernel's compiled init and sweep are cached on the kernel (issue 19): a second ``MCMC.run``
with a new key or new data of the same shape, ``jit_model_args=True`` and ``post_warmup_state``
continuation trace neither again, and the cached programs read the new data (not stale constants).

Traces are counted with a Python counter in the traced functions (``_init_one``, ``_sample_one``):
a compiled program that is reused runs no Python.  NumPyro's own loop (``fori_collect``) is
retraced and recompiled by NumPyro itself with ``progress_bar=False`` (also for NUTS); that is
not counted here."""

import jax
import jax.numpy as jnp
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
    cluster_one = kernel._cluster_one
    counts["cluster"] = 0

    def counted_cluster(*args, **kwargs):
        counts["cluster"] += 1
        return cluster_one(*args, **kwargs)

    kernel._cluster_one = counted_cluster
    mcmc = MCMC(kernel, num_warmup=1, num_samples=2, progress_bar=False)
    mcmc.run(jax.random.key(0), _data(0, 10))
    assert mcmc.get_samples()["y_states"].shape == (2, 10)
    # the abstract attempt fails in the clustering program (the first of the cached init's two),
    # then one program with the data as constants clusters and initializes
    assert counts["cluster"] == 1 and counts["init"] == 1


def gaussian_model(y):
    hmm = nh.StickyHDPHMM(2.0, 2.0, 5.0, nh.emissions.GaussianNIW.weakly_informative(y), max_states=10)
    nh.sample("y", hmm, obs=y)


def test_one_off_clustering_gives_the_default_compilations_labels(monkeypatch):
    """Issue 17: on small data the clustering of the data-driven start is its own program, and it
    and the init program are compiled without backend optimization (``_core.compile.one_off_jit``);
    the clustering's integer labels equal those of the default compilation, and the init program
    after it gives the state of the single default-compiled program that clusters inline (above
    ``_ONE_OFF_CLUSTER_SIZE``, and for models that need their arguments' values): the same
    integers, and floats equal up to the last bits (LLVM's contractions differ)."""
    from numpyro_hdphmm.infer.plumbing import programs
    from numpyro_hdphmm.infer.plumbing.programs import Arguments

    y = nh.datasets.fox_experiment_a(num_steps=300).observations
    kernel = WeakLimitGibbs(gaussian_model)
    state = kernel.init(jax.random.key(3), 2, None, (y,), {})
    args = Arguments.split((y,), {})
    (cluster,) = [p for k, p in kernel._programs.items() if k[0] == "cluster"]
    assert hasattr(cluster, "fast")  # small data: the one-off variant
    for seed in range(3):
        key = jax.random.key(seed)
        np.testing.assert_array_equal(cluster.fast(key, None, args.arrays), cluster.plain(key, None, args.arrays))
    monkeypatch.setattr(programs, "ONE_OFF_CLUSTER_SIZE", 100)  # T = 300: the init program clusters
    large = WeakLimitGibbs(gaussian_model)
    inline = large.init(jax.random.key(3), 2, None, (y,), {})
    (init,) = [p for k, p in kernel._programs.items() if k[0] == "init"]
    assert hasattr(init, "fast")  # small data: the init program is one-off too
    assert [k[0] for k in large._programs] == ["init"]
    assert not hasattr(next(iter(large._programs.values())), "fast")
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(inline)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        if jnp.issubdtype(a.dtype, jnp.inexact):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        else:
            np.testing.assert_array_equal(a, b)


def test_one_off_jit_inside_a_trace_is_inlined():
    """``compiler_options`` apply to top-level ``jax.jit`` only: inside a trace ``one_off_jit`` calls
    the plain jitted function (no error), at the top level the one-off compilation."""
    import jax.numpy as jnp

    from numpyro_hdphmm._core.compile import at_top_level, one_off_jit

    f = one_off_jit(lambda x: jnp.sum(x**2))
    x = jnp.arange(4.0)
    assert at_top_level(x) and float(f(x)) == 14.0
    assert float(jax.jit(lambda x: f(x) + 1.0)(x)) == 15.0
    assert float(jax.vmap(f)(x[:, None]).sum()) == 14.0
