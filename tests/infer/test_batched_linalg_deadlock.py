"""Vectorized chains of a model with batched linear algebra run to the end on XLA:CPU.

jaxlib 0.10.0 to 0.10.2 split the batch of a batched LAPACK call (Cholesky, triangular solve,
symmetric eigendecomposition) into tasks on XLA:CPU's intra-op thread pool and block the pool
thread that runs the call until the tasks are done.  When as many such calls run concurrently as
the pool has threads (two on a two-core machine), every thread waits for tasks that no thread
is free to run, and the program never finishes: no error, no CPU time.  Found on the motion-capture
model (``examples/mocap.py``: AR(1) emissions, 12 channels, 30 states) with 4 vectorized chains,
whose sweep holds Cholesky factors and triangular solves of ``(4, 30, 12, 12)`` batches (and
NumPyro's positive-definiteness checks, an eigendecomposition each): ``gdb`` showed both pool
threads in ``jax::ParallelBatchMap`` waiting, one in ``lapack_strsm_ffi``, one in
``lapack_ssyevd_ffi``.  jaxlib 0.9.2 runs the batch on the calling thread, so the package
requires ``jax`` and ``jaxlib`` outside 0.10.* (``pyproject.toml``).

Run once against jaxlib 0.10.2 (the version before the requirement): the reproducer below and
the motion-capture run time out (the tests fail); with jaxlib 0.9.2 both finish in seconds.
"""

import os
import subprocess
import sys
import textwrap

import jax
import jaxlib
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _version(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def test_jax_is_not_a_version_whose_batched_lapack_deadlocks():
    for name, version in (("jax", jax.__version__), ("jaxlib", jaxlib.__version__)):
        assert _version(version)[:2] != (0, 10), (
            f"{name} {version}: batched LAPACK calls can deadlock XLA:CPU's thread pool (see this module); "
            "pyproject.toml excludes 0.10.*")


def _run(code: str, timeout: float):
    """Run ``code`` in a fresh Python process (its own XLA:CPU thread pool); False on timeout."""
    try:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                             timeout=timeout, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    except subprocess.TimeoutExpired:
        return False, ""
    assert out.returncode == 0, out.stderr[-3000:]
    return True, out.stdout


def test_concurrent_batched_choleskys_finish():
    """Sixteen independent batched Cholesky factorizations of ``(400, 12, 12)`` per step of a
    scan: with jaxlib 0.10.2 this hangs on 2 cores (3 of 3 runs); with 0.9.2, about 2 s."""
    done, out = _run("""
        import jax, jax.numpy as jnp
        def body(carry, _):
            new = []
            for a in carry:
                s = a @ jnp.swapaxes(a, -1, -2) + 12.0 * jnp.eye(12)
                new.append(0.99 * a + 0.01 * jnp.linalg.cholesky(s))
            return tuple(new), None
        xs = tuple(jax.random.normal(k, (400, 12, 12)) for k in jax.random.split(jax.random.key(0), 16))
        out = jax.jit(lambda c: jax.lax.scan(body, c, None, length=100)[0])(xs)
        jax.block_until_ready(out)
        print("finished")
    """, timeout=240)
    assert done and "finished" in out, "batched Cholesky factorizations in concurrent thunks did not finish in 240 s"


@pytest.mark.slow
@pytest.mark.robustness
def test_motion_capture_model_with_vectorized_chains_finishes():
    """The case where the deadlock was found: ``WeakLimitGibbs`` on ``examples/mocap.py``'s model,
    4 vectorized chains, 5 sweeps in one compiled scan (about 35 s with jaxlib 0.9.2 on 2 cores,
    compilation included; with 0.10.2 the scan never finished)."""
    done, out = _run("""
        import sys
        sys.path.insert(0, "examples")
        import jax, jax.numpy as jnp, numpy as np
        import numpyro_hdphmm as nh
        import mocap
        data = nh.datasets.load_mocap6()
        y, _, _ = mocap.standardize(data.observations, data.lengths)
        kernel = nh.infer.WeakLimitGibbs(mocap.make_model(mocap.emission_prior(y, data.lengths), 30))
        args = (jnp.asarray(y), jnp.asarray(data.lengths))
        state = kernel.init(jax.random.split(jax.random.key(0), 4), 0, None, args, {})
        def body(s, _):
            s = kernel.sample(s, args, {})
            return s, s.z[kernel.spec.sites.states]
        _, states = jax.jit(lambda s: jax.lax.scan(body, s, None, length=5))(state)
        print("finished", np.asarray(states).shape)
    """, timeout=600)
    assert done and "finished" in out, "4 vectorized chains on the motion-capture model did not finish 5 sweeps in 600 s"
