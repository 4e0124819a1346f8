"""jax-moseq's side of ``benchmarks/slds_vs_jax_moseq.py``: its SLDS Gibbs sweep
(``jax_moseq.models.slds.resample_model``) in the environment where jax-moseq is installed (a
standalone script: it imports nothing from this repository).  jax-moseq is licensed for
non-commercial use only: it is installed in its own virtual environment, imported and timed here,
and none of its code is copied.

JSON-lines protocol on stdin / stdout (one request, one reply), the same as ``hdphmm_slds_worker.py``:

  {"cmd": "setup", "data": npz, "K", "alpha", "gamma", "kappa", "S_0_scale", "K_0_scale", "sigmasq",
   "seed", "n"}
      -> {"init_s", "first_s", "warm_s", "Cd", "versions"}: ``init_model`` (its default start:
      whitened PCA for ``[C d]``, the latent path by least squares, the parameters from the prior,
      the modes by FFBS; timed: ``init_s``), the Gaussian-noise set-up (noise scales ``s = 1``,
      ``sigmasq`` fixed: ``skip_noise=True``), one sweep (compiles: ``first_s``), ``n - 1`` more
      (``warm_s``, untimed warm-up of the chain); ``Cd`` is returned for our side to share.
  {"cmd": "run"} -> {"s": seconds of ``n`` sweeps: a Python loop of ``resample_model`` calls, as the
      package runs them, blocked at the end}
  {"cmd": "state"} -> the chain's current state (common names) and jax-moseq's own log likelihoods.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
from _protocol import serve, versions
from jax_moseq.models import slds

VERSIONS = versions(("jax-moseq", "jaxlib", "dynamax"), jax=jax.__version__, x64=bool(jax.config.jax_enable_x64))

S = {}


def sweep(model):
    return slds.resample_model(S["data"], **model, skip_noise=True, parallel_message_passing=False)


def setup(msg):
    ftype = jnp.result_type(float)  # float64 under JAX_ENABLE_X64=1 (set by the driver)
    y = np.load(msg["data"])["y"].astype(ftype)
    T, P = y.shape
    Y = jnp.asarray(y[None])
    # "Y": what init_model and the log likelihoods read; "y": what the latent-path update reads
    data = {"Y": Y, "y": Y, "mask": jnp.ones((1, T), ftype)}
    trans = {"num_states": int(msg["K"]), "alpha": float(msg["alpha"]), "kappa": float(msg["kappa"]),
             "gamma": float(msg["gamma"])}
    ar = {"latent_dim": int(msg["D"]), "nlags": int(msg.get("nlags", 1)), "S_0_scale": float(msg["S_0_scale"]),
          "K_0_scale": float(msg["K_0_scale"])}
    # nu_s / s_0 only shape the initial draw of the per-frame noise scales s, reset to 1 below
    obs = {"nu_s": 5, "s_0": 1.0, "nu_sigma": 1e5, "sigmasq_0": 1.0}
    t0 = time.perf_counter()
    model = slds.init_model(data, seed=jax.random.PRNGKey(int(msg["seed"])), trans_hypparams=trans,
                            ar_hypparams=ar, obs_hypparams=obs)
    model["states"]["s"] = jnp.ones_like(model["states"]["s"])                       # Gaussian noise
    model["params"]["sigmasq"] = jnp.asarray(msg["sigmasq"], ftype)            # R = diag(sigmasq)
    jax.block_until_ready(model["states"]["x"])
    init_s = time.perf_counter() - t0
    S["data"] = data
    t0 = time.perf_counter()
    model = sweep(model)
    jax.block_until_ready(model["states"]["x"])
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(int(msg["n"]) - 1):
        model = sweep(model)
    jax.block_until_ready(model["states"]["x"])
    warm_s = time.perf_counter() - t0
    S.update(model=model, n=int(msg["n"]))
    return {"init_s": init_s, "first_s": first_s, "warm_s": warm_s,
            "Cd": np.asarray(model["params"]["Cd"]).tolist(), "versions": VERSIONS}


def run(msg):
    model = S["model"]
    t0 = time.perf_counter()
    for _ in range(S["n"]):
        model = sweep(model)
    jax.block_until_ready(model["states"]["x"])
    s = time.perf_counter() - t0
    S["model"] = model
    return {"s": s}


def state(msg):
    m = S["model"]
    ll = slds.model_likelihood(S["data"], m["states"], m["params"], m["hypparams"])
    own = {k: float(v) for k, v in ll.items() if k != "s"}  # "s": the prior of the (fixed) noise scales
    z = np.asarray(m["states"]["z"][0])
    return {
        "x": np.asarray(m["states"]["x"][0]).tolist(),   # (T, D)
        "z": z.tolist(),                                 # modes of steps r..T-1 (r = nlags)
        "Ab": np.asarray(m["params"]["Ab"]).tolist(),   # (K, D, D r + 1), lags oldest first
        "Q": np.asarray(m["params"]["Q"]).tolist(),
        "pi": np.asarray(m["params"]["pi"]).tolist(),
        "R": np.asarray(m["params"]["sigmasq"]).tolist(),
        "own": own,
        "num_states": int(len(np.unique(z))),
    }


serve({"setup": setup, "run": run, "state": state})
