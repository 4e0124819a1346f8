"""Peer worker for dynamax, run by :mod:`benchmarks.harness.peers` under the Python of an
environment where dynamax is installed (a standalone script: it imports nothing from this
repository).

JSON-lines protocol on stdin / stdout:
  {"cmd": "ffbs", "T": T, "K": K, "repeats": r, "seed": s} -> {"ms": minimum ms per
      hmm_posterior_sample after a compiling call, "versions": {...}}
The inputs are those of ``benchmarks/sweeps.py``'s FFBS part (same generator, same seed).
"""
import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from dynamax.hidden_markov_model import hmm_posterior_sample

try:
    from importlib.metadata import version
    VERSIONS = {"dynamax": version("dynamax"), "jax": jax.__version__}
except Exception:  # noqa: BLE001
    VERSIONS = {"jax": jax.__version__}


def inputs(T, K, seed):
    rng = np.random.default_rng(seed)
    li = np.log(rng.dirichlet(np.ones(K))).astype(np.float32)
    A = 0.9 * np.eye(K) + 0.1 * rng.dirichlet(np.ones(K), size=K)
    ll = rng.normal(size=(T, K)).astype(np.float32)
    return jnp.exp(jnp.asarray(li)), jnp.asarray(A, jnp.float32), jnp.asarray(ll)


for line in sys.stdin:
    msg = json.loads(line)
    if msg["cmd"] == "quit":
        break
    if msg["cmd"] == "ffbs":
        pi, A, ll = inputs(msg["T"], msg["K"], msg.get("seed", 0))
        f = jax.jit(hmm_posterior_sample)
        key = jax.random.key(0)
        jax.block_until_ready(f(key, pi, A, ll))
        times = []
        for _ in range(msg.get("repeats", 7)):
            t0 = time.perf_counter()
            jax.block_until_ready(f(key, pi, A, ll))
            times.append(time.perf_counter() - t0)
        out = {"ms": 1e3 * min(times), "versions": VERSIONS}
    else:
        out = {"error": f"unknown command {msg['cmd']!r}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
