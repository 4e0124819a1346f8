"""Benchmark the direct-assignment Gibbs sampler (``DirectAssignmentGibbs``, Fox et al. Alg. 1/3)
side by side with ``WeakLimitGibbs``.

Measures, on the default JAX device in float32:

* seconds per sweep and effective samples per second of ``num_states`` on Fox et al.'s
  experiment A (``T = 1000``, 1-D Gaussian emissions, Gamma priors on gamma/alpha/kappa,
  capacity / truncation 15) and experiment B (``T = 2000``, DP-mixture emissions over
  ``GaussianNIW`` with ``L' = 15`` and a Gamma prior on the mixture concentration); 4 chains
  vmapped over keys, 300 warm-up + 1000 sweeps run as one ahead-of-time compiled ``lax.scan``
  (seconds = sampling only), ``arviz.ess`` over the chains;
* one sweep on the *Alice* word sequence (``nh.datasets.load_alice``, training part,
  ``T = 27,103``, 1,487 types, categorical emissions), the sticky HDP-HMM with capacity 400
  started from a random assignment to 200 states (the RCD paper's C++ sweep: 10.0 s on a
  3 GHz Xeon E5450).

Usage: ``python benchmarks/bench_direct_assignment.py [--quick] [--write]`` (``--write`` replaces
the "Direct-assignment Gibbs" section of ``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _docs import write_section  # benchmarks/_docs.py (scripts run from this folder)

SECTION = "## Direct-assignment Gibbs"


def _models(name, y, L):
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
        kappa = numpyro.sample("kappa", dist.Gamma(1.0, 0.01))
        base = nh.emissions.GaussianNIW.weakly_informative(y)
        if name == "B":
            sigma = numpyro.sample("sigma", dist.Gamma(1.0, 0.1))
            emission = nh.emissions.DPMixture(base, sigma, L)
        else:
            emission = base
        nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=L), obs=y)

    return model


def run_chains(kernel_cls, name, num_warmup, num_samples, num_chains=4, L=15, seed=0):
    """Seconds per sweep, ESS and ESS/s of ``num_states`` (see the module docstring)."""
    import arviz as az
    import jax

    import numpyro_hdphmm as nh

    data = nh.datasets.fox_experiment_a() if name == "A" else nh.datasets.fox_experiment_b()
    y = np.asarray(data.observations, np.float32)
    kernel = kernel_cls(_models(name, y, L))
    state = kernel.init(jax.random.split(jax.random.key(seed), num_chains), num_warmup, None, (y,), {})

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        return s, (s.num_states, s.z["y_states"])

    run = jax.jit(lambda s: jax.lax.scan(body, s, None, length=num_warmup + num_samples))
    compiled = run.lower(state).compile()
    t0 = time.perf_counter()
    _, (num_states, states) = jax.block_until_ready(compiled(state))
    seconds = time.perf_counter() - t0
    x = np.asarray(num_states, float)[num_warmup:].T
    ess = float(az.ess(x)) if np.ptp(x) > 0 else float("nan")
    last = np.asarray(states)[-1]
    hamming = [float(nh.diagnostics.hamming_distance(data.states, last[c])) for c in range(num_chains)]
    return {
        "ms_per_sweep": 1e3 * seconds / (num_warmup + num_samples) / num_chains,
        "ess": ess,
        "ess_per_s": ess / seconds,
        "mean_states": float(x.mean()),
        "hamming": float(np.median(hamming)),
    }


def alice_sweep(capacity=400, start_states=200, repeats=3):
    """Seconds of one direct-assignment sweep on Alice (median of ``repeats`` after compiling)."""
    import jax

    import numpyro_hdphmm as nh
    from numpyro_hdphmm.infer import DirectAssignmentGibbs
    from numpyro_hdphmm.infer.algorithms.direct_assignment import assignment_sweep
    from numpyro_hdphmm.infer.plumbing.discovery import model_view

    text = nh.datasets.load_alice()
    y = np.asarray(text.tokens[: len(text.tokens) - text.info["num_test"]])
    emission = nh.emissions.Categorical(len(text.vocabulary), 0.5)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=capacity), obs=y)

    kernel = DirectAssignmentGibbs(model)
    state = kernel.init(jax.random.key(0), 0, None, (y,), {})
    view = model_view(kernel.model, kernel.spec, (y,), {}, state.z)
    statistics = view.emission.collapsed_statistics(capacity)
    z = jax.random.randint(jax.random.key(1), (1, y.size), 0, start_states)
    sweep = jax.jit(lambda key, z, beta: assignment_sweep(key, z, beta, {}, view, statistics)[:2])
    out = jax.block_until_ready(sweep(jax.random.key(2), z, state.z["y_beta"]))
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(sweep(jax.random.key(3 + i), out[0], out[1]))
        times.append(time.perf_counter() - t0)
    return {"T": int(y.size), "V": len(text.vocabulary), "seconds": float(np.median(times)),
            "states": int(np.unique(np.asarray(out[0])).size)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    from numpyro_hdphmm.infer import DirectAssignmentGibbs, WeakLimitGibbs

    warm, samples = (100, 300) if args.quick else (300, 1000)
    rows = []
    for name in ("A", "B"):
        for label, cls in (("DirectAssignmentGibbs", DirectAssignmentGibbs), ("WeakLimitGibbs", WeakLimitGibbs)):
            r = run_chains(cls, name, warm, samples)
            rows.append((name, label, r))
            print(name, label, r, flush=True)
    alice = alice_sweep()
    print("alice", alice, flush=True)
    lines = [
        "Fox et al. experiments A (T = 1000, Gaussian) and B (T = 2000, DP-mixture emissions,",
        "L' = 15); capacity / truncation 15; 4 chains vmapped; "
        f"{warm} warm-up + {samples} sweeps; float32, 2 CPU cores.",
        "",
        "| experiment | kernel | ms / sweep / chain | ESS(num_states) | ESS/s | mean states | median Hamming (last draw) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label, r in rows:
        lines.append(
            f"| {name} | {label} | {r['ms_per_sweep']:.2f} | {r['ess']:.0f} | {r['ess_per_s']:.0f} | "
            f"{r['mean_states']:.2f} | {r['hamming']:.3f} |"
        )
    lines += [
        "",
        f"One direct-assignment sweep on *Alice* (T = {alice['T']:,}, {alice['V']:,} word types, categorical "
        f"emissions, capacity 400, started from a random assignment to 200 states): "
        f"**{alice['seconds']:.2f} s** ({alice['states']} states after the sweeps). The RCD paper's C++ "
        "direct-assignment sweep took 10.0 s on a 3 GHz Xeon E5450.",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(SECTION, "python benchmarks/bench_direct_assignment.py --write", text)


if __name__ == "__main__":
    main()
