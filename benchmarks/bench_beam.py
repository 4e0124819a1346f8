"""Benchmark the beam sampler (``BeamSampler``, Van Gael et al. 2008) against ``WeakLimitGibbs``.

Measures, on the default JAX device in float32:

* seconds per sweep (median of a jitted ``kernel.sample`` after compilation and one warm call)
  of ``BeamSampler`` with capacity ``K`` and ``WeakLimitGibbs`` with ``L = K`` (the same number
  of state slots: both sweeps cost ``O(T K^2)``) for ``T`` in {1e3, 1e4, 1e5} x ``K`` in
  {10, 30}, 2-D Gaussian emissions (``GaussianNIW.weakly_informative``), constant
  hyperparameters, data of 10 well-separated segments; the ratio beam / weak limit (target
  <= 1.5);
* scaling with the number of instantiated states: ``T = 1e4``, capacity 40, data with 2, 10
  and 20 true segments (the cost follows the capacity, the instantiated count is reported);
* PGAS synthetic set A (Tripuraneni et al. 2015, experiments, "as in Van Gael et al. 2008";
  ``nh.datasets.pgas_set_a``: ``T = 4000``, 4 states, self-transition 0.75, means
  -2, -0.5, 1, 4, s.d. 0.5): the non-sticky iHMM with the beam toolbox's hyperpriors
  ``alpha ~ Gamma(4, 1)``, ``gamma ~ Gamma(3, 6)`` and a nearly known variance
  (``DiagonalGaussian(0, 1/16, 1000, 250)``: precision 4 +- 3%, mean ``N(0, 2^2)``); 4
  vectorized chains started from 10 states (uniform random labels, as the toolbox does),
  1000 sweeps (one compiled ``lax.scan``): sweeps until the chain first uses 4 states, the
  normalized Hamming distance after the last sweep, and the ESS per second of ``num_states``
  over the last 500 sweeps (``arviz.ess`` over the chains); ``BeamSampler`` (capacity 40) and
  ``WeakLimitGibbs`` (``L = 40``).

Usage::

    python benchmarks/bench_beam.py [--quick] [--write] [--repeats N]

``--quick``: ``T`` in {1e3, 1e4}, 300 sweeps on set A; ``--write`` replaces the "Beam sampler"
section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from _docs import write_section  # benchmarks/_docs.py (scripts run from this folder)

SECTION = "## Beam sampler"


def fixed_model(K, weak=False):
    import numpyro_hdphmm as nh

    def model(y):
        hmm = nh.StickyHDPHMM(1.0, 1.0, 10.0, nh.emissions.GaussianNIW.weakly_informative(y), max_states=K)
        nh.sample("y", hmm, obs=y)

    return model


def synthetic_data(T, D, num_segments=10, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=5.0, size=(num_segments, D))
    seg = np.minimum(np.arange(T) * num_segments // T, num_segments - 1)
    return (means[seg] + rng.normal(size=(T, D))).astype(np.float32)


def set_a_model(K):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
        alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
        emission = nh.emissions.DiagonalGaussian(jnp.zeros(1), 1.0 / 16.0, 1000.0, 250.0)
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=K), obs=y)

    return model


def _block(x):
    import jax

    return jax.block_until_ready(x)


def time_sweeps(cls, model, y, repeats=10, budget_s=60.0, seed=0):
    """Median seconds per sweep of ``cls(model)`` (see the module docstring), the compile
    time and the mean number of instantiated states (beam only)."""
    import jax

    kernel = cls(model)
    state = kernel.init(jax.random.key(seed), 0, None, (y,), {})
    step = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    t0 = time.perf_counter()
    state = _block(step(state))
    compile_s = time.perf_counter() - t0
    state = _block(step(state))
    times, inst = [], []
    start = time.perf_counter()
    for i in range(repeats):
        t0 = time.perf_counter()
        state = _block(step(state))
        times.append(time.perf_counter() - t0)
        if state.aux is not None:
            inst.append(int(state.aux.num_instantiated))
        if i >= 2 and time.perf_counter() - start > budget_s:
            break
    return float(np.median(times)), compile_s, (float(np.mean(inst)) if inst else float("nan")), int(state.num_states)


def set_a_run(cls, K, sweeps, num_chains=4, seed=0):
    """Set A from 10 states: ``(first sweep with <= 4 states per chain, final Hamming per chain,
    ESS of num_states, ESS/s, seconds, overflow count)``."""
    import arviz as az
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    data = nh.datasets.pgas_set_a(num_steps=4000, seed=seed)
    y = data.observations.astype(np.float32)
    T = y.shape[0]
    rng = np.random.default_rng(seed)
    init_states = jnp.asarray(rng.integers(0, 10, size=(num_chains, T)), jnp.int32)
    kernel = cls(set_a_model(K))
    keys = jax.random.split(jax.random.key(seed), num_chains)
    init = {"y_states": init_states}
    if cls.__name__ == "WeakLimitGibbs":
        init.update(_weak_limit_init(init_states, y, K))
    state = kernel.init(keys, 0, init, (y,), {})

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        return s, (s.num_states, s.overflow)

    run = jax.jit(lambda s: jax.lax.scan(body, s, None, length=sweeps))
    compiled = run.lower(state).compile()
    t0 = time.perf_counter()
    state, (num_states, overflow) = _block(compiled(state))
    seconds = time.perf_counter() - t0
    num_states = np.asarray(num_states).T  # (chains, sweeps)
    reach = [int(np.argmax(ns <= 4)) + 1 if np.any(ns <= 4) else None for ns in num_states]
    final = np.asarray(state.z["y_states"])
    hamming = [float(nh.diagnostics.hamming_distance(final[c], data.states)) for c in range(num_chains)]
    tail = num_states[:, sweeps // 2:].astype(float)
    ess = float(az.ess(tail)) if np.ptp(tail) > 0 else float("nan")
    return {"reach": reach, "hamming": hamming, "ess": ess, "ess_per_s": ess / seconds, "seconds": seconds,
            "overflow": int(np.sum(np.asarray(overflow))), "final_states": [int(n) for n in num_states[:, -1]]}


def _weak_limit_init(init_states, y, L):
    """Owned sites of WeakLimitGibbs consistent with the 10-label start (its own init draws
    them from the prior, and its first FFBS would discard the labels): beta uniform over the
    10 used labels (tiny elsewhere), rows at the smoothed empirical transition frequencies,
    emission means at the per-label sample means, precisions 4."""
    import jax.numpy as jnp

    chains, T = init_states.shape
    z = np.asarray(init_states)
    beta = np.full(L + 1, 1e-3)
    beta[:10] = 1.0
    beta[L] = 0.0
    beta /= beta.sum()
    trans, mus = [], []
    for c in range(chains):
        n = np.full((L + 1, L + 1), 1e-2)
        np.add.at(n, (z[c, :-1], z[c, 1:]), 1.0)
        n[L, z[c, 0]] += 1.0
        n[:, L] = 0.0
        trans.append(n / n.sum(-1, keepdims=True))
        mu = np.zeros((L, 1))
        for k in range(10):
            mu[k, 0] = y[z[c] == k, 0].mean()
        mus.append(mu)
    f32 = lambda a: jnp.asarray(np.asarray(a), jnp.float32)
    return {"y_beta": f32(np.tile(beta, (chains, 1))), "y_trans": f32(trans), "y_mu": f32(mus),
            "y_precision": f32(np.full((chains, L, 1), 4.0))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid, 300 sweeps on set A")
    parser.add_argument("--write", action="store_true", help="write the results into docs/benchmarks.md")
    parser.add_argument("--repeats", type=int, default=10, help="timed sweeps per configuration (median)")
    args = parser.parse_args()

    import jax

    from numpyro_hdphmm.infer import BeamSampler, WeakLimitGibbs

    def say(msg=""):
        print(msg, flush=True)

    Ts = [1000, 10000] if args.quick else [1000, 10000, 100000]
    Ks = [10, 30]
    grid = {}
    for T in Ts:
        y = synthetic_data(T, 2)
        for K in Ks:
            beam = time_sweeps(BeamSampler, fixed_model(K), y, repeats=args.repeats)
            weak = time_sweeps(WeakLimitGibbs, fixed_model(K), y, repeats=args.repeats)
            grid[(T, K)] = (beam, weak)
            say(f"T={T:>6} K={K:>3}: beam {beam[0] * 1e3:8.2f} ms ({beam[2]:.1f} instantiated, compile {beam[1]:.0f} s), "
                f"weak limit {weak[0] * 1e3:8.2f} ms, ratio {beam[0] / weak[0]:.2f}")

    scaling = {}
    for segments in (2, 10, 20):
        y = synthetic_data(10000, 2, num_segments=segments)
        scaling[segments] = time_sweeps(BeamSampler, fixed_model(40), y, repeats=args.repeats)
        med, comp, inst, used = scaling[segments]
        say(f"T=10000 capacity 40, {segments:>2} segments: {med * 1e3:.2f} ms, {inst:.1f} instantiated, {used} used")

    sweeps = 300 if args.quick else 1000
    set_a = {}
    for cls in (BeamSampler, WeakLimitGibbs):
        set_a[cls.__name__] = r = set_a_run(cls, 40, sweeps)
        say(f"set A {cls.__name__}: reach 4 states at sweeps {r['reach']}, Hamming {np.round(r['hamming'], 3).tolist()}, "
            f"final states {r['final_states']}, ESS(num_states) {r['ess']:.1f}, {r['ess_per_s']:.2f}/s, "
            f"{r['seconds']:.1f} s, overflow sweeps {r['overflow']}")

    ms = lambda v: f"{v * 1e3:.2f}"
    lines = [
        f"Device: `{jax.devices()[0].device_kind}` ({jax.default_backend()}), float32, {os.cpu_count()} CPU cores, "
        f"jax {jax.__version__}. Milliseconds per sweep: median over repeats of a jitted `kernel.sample` after "
        "warm-up and compilation. `BeamSampler` with capacity K against `WeakLimitGibbs` with L = K (both "
        "cost O(T K^2) over the slots); 2-D Gaussian emissions, constant gamma = 1, alpha = 1, kappa = 10, "
        "10 well-separated segments.",
        "",
        "| T | K | beam (ms) | instantiated | weak limit (ms) | ratio (target <= 1.5) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for (T, K), (beam, weak) in sorted(grid.items()):
        lines.append(f"| {T} | {K} | {ms(beam[0])} | {beam[2]:.1f} | {ms(weak[0])} | {beam[0] / weak[0]:.2f} |")
    lines += [
        "",
        "Scaling with the number of instantiated states (T = 10000, capacity 40; the cost follows the capacity):",
        "",
        "| true segments | beam (ms) | instantiated (mean) | used at the end |",
        "|---:|---:|---:|---:|",
    ]
    for seg, (med, _, inst, used) in sorted(scaling.items()):
        lines.append(f"| {seg} | {ms(med)} | {inst:.1f} | {used} |")
    lines += [
        "",
        f"PGAS synthetic set A (T = 4000, 4 states; non-sticky iHMM, alpha ~ Gamma(4, 1), gamma ~ Gamma(3, 6), "
        f"precision nearly fixed at 4, mean ~ N(0, 2^2)); 4 vectorized chains started from 10 states, {sweeps} "
        f"sweeps, capacity / L = 40; ESS of `num_states` over the last {sweeps // 2} sweeps:",
        "",
        "| kernel | sweeps to reach 4 states (per chain) | Hamming after the last sweep | final states | ESS | ESS/s | s |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for name, r in set_a.items():
        reach = ", ".join("-" if v is None else str(v) for v in r["reach"])
        ham = ", ".join(f"{h:.3f}" for h in r["hamming"])
        fin = ", ".join(str(v) for v in r["final_states"])
        lines.append(f"| {name} | {reach} | {ham} | {fin} | {r['ess']:.1f} | {r['ess_per_s']:.2f} | {r['seconds']:.1f} |")
    if set_a["BeamSampler"]["overflow"]:
        lines.append(f"\nBeam overflow (capacity reached) in {set_a['BeamSampler']['overflow']} chain-sweeps.")
    text = "\n".join(lines)
    say()
    say(text)
    if args.write:
        cmd = "python benchmarks/bench_beam.py" + (" --quick" if args.quick else "") + " --write"
        say(f"wrote {write_section(SECTION, cmd, text)}")


if __name__ == "__main__":
    main()
