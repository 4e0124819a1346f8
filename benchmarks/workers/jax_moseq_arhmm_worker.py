"""jax-moseq's side of ``benchmarks/arhmm_vs_jax_moseq.py``: its AR-HMM Gibbs sweep
(``jax_moseq.models.arhmm.resample_model``) in the environment where jax-moseq is installed (a
standalone script: it imports nothing from this repository but ``_protocol.py`` beside it).
jax-moseq is licensed for non-commercial use only: it is installed in its own virtual environment,
imported and timed here, and none of its code is copied.

JSON-lines protocol on stdin / stdout (one request, one reply), the same as ``hdphmm_arhmm_worker.py``:

  {"cmd": "setup", "data": npz (``x (N, T, D)``), "K", "alpha", "gamma", "kappa", "S_0_scale",
   "K_0_scale", "nlags", "seed", "n"}
      -> {"init_s", "first_s", "warm_s", "versions"}: ``init_model`` (its default start: the AR
      parameters and the transitions drawn from the prior, the modes by FFBS; timed: ``init_s``),
      one sweep (compiles: ``first_s``), ``n - 1`` more (``warm_s``, untimed warm-up of the chain).
  {"cmd": "run"} -> {"s": seconds of ``n`` sweeps: a Python loop of ``resample_model`` calls, as the
      package runs them, blocked at the end}
  {"cmd": "state"} -> the chain's current state (common names) and jax-moseq's own log likelihoods.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
from _protocol import serve, versions
from jax_moseq.models import arhmm

VERSIONS = versions(("jax-moseq", "jaxlib", "dynamax"), jax=jax.__version__, x64=bool(jax.config.jax_enable_x64))

S = {}


def sweep(model):
    return arhmm.resample_model(S["data"], **model)


def setup(msg):
    ftype = jnp.result_type(float)  # float64 under JAX_ENABLE_X64=1 (set by the driver)
    x = np.load(msg["data"])["x"].astype(ftype)
    N, T, D = x.shape
    data = {"x": jnp.asarray(x), "mask": jnp.ones((N, T), ftype)}
    trans = {"num_states": int(msg["K"]), "alpha": float(msg["alpha"]), "kappa": float(msg["kappa"]),
             "gamma": float(msg["gamma"])}
    ar = {"latent_dim": D, "nlags": int(msg["nlags"]), "S_0_scale": float(msg["S_0_scale"]),
          "K_0_scale": float(msg["K_0_scale"])}
    t0 = time.perf_counter()
    model = arhmm.init_model(data, seed=jax.random.PRNGKey(int(msg["seed"])), trans_hypparams=trans,
                             ar_hypparams=ar)
    jax.block_until_ready(model["states"]["z"])
    init_s = time.perf_counter() - t0
    S["data"] = data
    t0 = time.perf_counter()
    model = jax.block_until_ready(sweep(model))
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(int(msg["n"]) - 1):
        model = sweep(model)
    jax.block_until_ready(model)
    warm_s = time.perf_counter() - t0
    S.update(model=model, n=int(msg["n"]))
    return {"init_s": init_s, "first_s": first_s, "warm_s": warm_s, "versions": VERSIONS}


def run(msg):
    model = S["model"]
    t0 = time.perf_counter()
    for _ in range(S["n"]):
        model = sweep(model)
    jax.block_until_ready(model)
    s = time.perf_counter() - t0
    S["model"] = model
    return {"s": s}


def state(msg):
    m = S["model"]
    ll = arhmm.model_likelihood(S["data"], m["states"], m["params"], m["hypparams"])
    z = np.asarray(m["states"]["z"])
    return {
        "z": z.tolist(),                                 # (N, T - r): the modes of steps r..T-1
        "Ab": np.asarray(m["params"]["Ab"]).tolist(),   # (K, D, D r + 1), lags oldest first
        "Q": np.asarray(m["params"]["Q"]).tolist(),
        "pi": np.asarray(m["params"]["pi"]).tolist(),
        "own": {k: float(v) for k, v in ll.items()},
        "num_states": int(len(np.unique(z))),
    }


serve({"setup": setup, "run": run, "state": state})
