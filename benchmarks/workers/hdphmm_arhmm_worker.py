"""Our side of ``benchmarks/arhmm_vs_jax_moseq.py``: the sticky HDP-AR-HMM sweep of
``nh.infer.WeakLimitGibbs`` (``nh.StickyHDPHMM`` with ``nh.emissions.AutoRegressive`` emissions) in a
process of its own (started by the driver with a checkout of the package on ``PYTHONPATH``).

JSON-lines protocol on stdin / stdout (one request, one reply), the same as the jax-moseq worker's:

  {"cmd": "setup", "data": npz (``x (N, T, D)``), "K", "alpha", "gamma", "kappa", "S_0_scale",
   "K_0_scale", "nlags", "seed", "n"}
      -> {"init_s", "compile_s", "first_s", "versions"}: builds the model, ``kernel.init`` (timed:
      ``init_s``), compiles ``n`` sweeps of ``kernel.sample`` in one ``lax.fori_loop`` ahead of time
      (``compile_s``), then runs it once (``first_s``, untimed warm-up of the chain).
  {"cmd": "run"} -> {"s": seconds of one call of ``n`` sweeps}
  {"cmd": "state"} -> the chain's current state (common names, see ``state()``) and our own log joint.
  {"cmd": "profile", "n"} -> seconds per sweep of the pieces of the sweep, each compiled on its own.

The per-sweep time is that of the kernel's ``sample`` in a compiled ``lax.fori_loop`` (as
``MCMC.run`` runs its sweeps, without NumPyro's per-sample collection); see the driver's docstring.
"""
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro

import numpyro_hdphmm as nh
from _protocol import serve, versions

VERSIONS = versions(("numpyro-hdphmm", "jaxlib"), jax=jax.__version__, numpyro=numpyro.__version__,
                    x64=bool(jax.config.jax_enable_x64))

S = {}


def setup(msg):
    x = jnp.asarray(np.load(msg["data"])["x"], jnp.result_type(float))  # float64 under JAX_ENABLE_X64=1
    N, T, D = x.shape
    obs = x[0] if N == 1 else x
    K, r = int(msg["K"]), int(msg["nlags"])
    m = D * r + 1
    loc = np.zeros((D, m))
    loc[:, :D] = np.eye(D)  # M_0: the identity on the most recent lag (our first block), as jax-moseq's
    dynamics = nh.emissions.AutoRegressive(r, loc=loc, col_precision=np.eye(m) / msg["K_0_scale"], df=D + 2.0,
                                           scale=msg["S_0_scale"] * np.eye(D))
    hyper = (msg["gamma"], msg["alpha"], msg["kappa"])

    def model(x):
        nh.sample("x", nh.StickyHDPHMM(*hyper, dynamics, max_states=K), obs=x)

    kernel = nh.infer.WeakLimitGibbs(model)
    args, kwargs = (obs,), {}
    t0 = time.perf_counter()
    state = jax.block_until_ready(kernel.init(jax.random.key(msg["seed"]), 0, None, args, kwargs))
    init_s = time.perf_counter() - t0
    n = int(msg["n"])

    def many(s):
        return jax.lax.fori_loop(0, n, lambda i, s: kernel.sample(s, args, kwargs), s)

    t0 = time.perf_counter()
    compiled = jax.jit(many).lower(state).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = jax.block_until_ready(compiled(state))
    first_s = time.perf_counter() - t0
    S.update(kernel=kernel, args=args, kwargs=kwargs, state=state, compiled=compiled, x=x, D=D, K=K, nlags=r,
             dynamics=dynamics, n=n)
    return {"init_s": init_s, "compile_s": compile_s, "first_s": first_s, "versions": VERSIONS}


def run(msg):
    t0 = time.perf_counter()
    S["state"] = jax.block_until_ready(S["compiled"](S["state"]))
    return {"s": time.perf_counter() - t0}


def state(msg):
    st = S["state"]
    z = st.z
    r, D = S["nlags"], S["D"]
    A = np.asarray(z["x_A"])  # ours: lags most recent first
    ab = np.concatenate([A[..., (r - 1 - j) * D:(r - j) * D] for j in range(r)] + [A[..., D * r:]], axis=-1)
    modes = np.asarray(z["x_states"]).reshape(S["x"].shape[0], -1)
    trans = np.asarray(z["x_trans"])
    return {
        "z": modes[:, r:].tolist(),                        # (N, T - r): modes of steps r..T-1
        "Ab": ab.tolist(),                                 # (K, D, D r + 1), lags oldest first (jax-moseq's order)
        "Q": np.asarray(z["x_cov"]).tolist(),
        "pi": trans[:-1, :-1].tolist(),                    # (K, K); the start row and the new-state column left out
        "own": {"lp": float(st.lp), "data_loglik": float(st.data_loglik)},
        "num_states": int(st.num_states),
    }


def profile(msg):
    """Seconds per sweep of (a) the whole sweep, (b) the ``(T, K)`` log-likelihoods of every
    sequence (``AutoRegressive.log_likelihoods``), (c) FFBS given them (the sampler's
    ``hmm_posterior_sample_fast``), (d) the per-state statistics as the sweep's emission update
    computes them from the states (``label_statistics`` where the package has it, else the one-hot
    weights) and (e) from the ``(steps, K)`` one-hot weights (``sufficient_statistics``), (f) the
    emission update (statistics and the MNIW draws) as the sweep calls it; each compiled on its
    own, ``n`` repetitions in a ``fori_loop`` that reads its carry, best of 3."""
    from numpyro_hdphmm._core.hmm import hmm_posterior_sample_fast

    n = int(msg.get("n", 10))
    st = S["state"]
    z = st.z
    dyn, K = S["dynamics"], S["K"]
    x = S["x"]
    N, T, D = x.shape
    inputs, valid = jax.vmap(dyn.prepare)(x)
    flat = jax.tree_util.tree_map(lambda a: a.reshape((N * T,) + a.shape[2:]), inputs)
    params = {"A": z["x_A"], "cov": z["x_cov"]}
    states = jnp.asarray(z["x_states"]).reshape(N, T)
    labels = jnp.where(valid, states, K).reshape(-1)
    weights = nh.emissions.state_weights(states, valid, K, x.dtype).reshape(N * T, K)
    trans = z["x_trans"]
    log_init, log_a = jnp.log(trans[K, :K]), jnp.log(trans[:K, :K])

    def timed(fn, carry):
        f = jax.jit(lambda c: jax.lax.fori_loop(0, n, lambda i, c: fn(c), c)).lower(carry).compile()
        jax.block_until_ready(f(carry))
        best = np.inf
        for _ in range(3):
            t0 = time.perf_counter()
            jax.block_until_ready(f(carry))
            best = min(best, time.perf_counter() - t0)
        return best / n

    def shifted(acc):  # the inputs moved by the carry, so that XLA cannot hoist the body out of the loop
        return jax.tree_util.tree_map(lambda a: a + acc, flat)

    def loglik(acc):
        ll = jax.vmap(dyn.log_likelihoods, in_axes=(0, None))(jax.tree_util.tree_map(lambda a: a + acc, inputs),
                                                              params)
        return acc + jnp.sum(ll) * 1e-30

    ll = jax.vmap(dyn.log_likelihoods, in_axes=(0, None))(inputs, params)

    def ffbs(c):
        key, acc = c
        key, k = jax.random.split(key)
        s, _, _ = jax.vmap(lambda kk, l: hmm_posterior_sample_fast(kk, log_init, log_a, l + acc))(
            jax.random.split(k, N), ll)
        return key, acc + jnp.sum(s) * 1e-30

    def total(stats):
        return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(stats))

    def dense_stats(acc):
        return acc + total(dyn.sufficient_statistics(shifted(acc), weights)) * 1e-30

    def update(c):
        key, acc = c
        key, k = jax.random.split(key)
        new, _ = dyn.update_parameters(k, shifted(acc), hard, params)
        return key, acc + total(new) * 1e-30

    hard = weights
    out = {"sweep": timed(lambda s: S["kernel"].sample(s, S["args"], S["kwargs"]), st),
           "loglik": timed(loglik, jnp.zeros((), x.dtype)),
           "ffbs": timed(ffbs, (jax.random.key(1), jnp.zeros((), x.dtype))),
           "stats_weights": timed(dense_stats, jnp.zeros((), x.dtype))}
    if hasattr(nh.emissions, "OneHot"):  # the hard-label path of the statistics (the sweep's)
        hard = nh.emissions.OneHot(labels, K)

        def label_stats(acc):
            return acc + total(dyn.label_statistics(shifted(acc), labels, K)) * 1e-30

        out["stats_labels"] = timed(label_stats, jnp.zeros((), x.dtype))
    out["emission_update"] = timed(update, (jax.random.key(2), jnp.zeros((), x.dtype)))
    return out


serve({"setup": setup, "run": run, "state": state, "profile": profile})
