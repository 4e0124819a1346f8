"""Fox et al. (2011): experiments A and B, the direct-assignment sampler against the blocked one,
the sticky against the non-sticky model, and the RCD paper's direct-assignment sweep on *Alice*.

Measures, on the default JAX device in float32:

* seconds per sweep and effective samples per second of ``num_states`` on experiment A
  (``T = 1000``, 1-D Gaussian emissions, Gamma priors on gamma/alpha/kappa, capacity /
  truncation 15) and experiment B (``T = 2000``, DP-mixture emissions over ``GaussianNIW`` with
  ``L' = 15`` and a Gamma prior on the mixture concentration), ``DirectAssignmentGibbs`` and
  ``WeakLimitGibbs``; 4 chains vmapped over keys, 300 warm-up + 1000 sweeps as one ahead-of-time
  compiled ``lax.scan`` (seconds = sampling only), ``arviz.ess`` over the chains;
* the normalized Hamming distance after 300 sweeps on experiment A at T = 10^4 (L = 15), the
  README's sticky model against its non-sticky version, 5 seeds (Fox et al.'s Fig. 4 point:
  the sticky model recovers the segmentation, the non-sticky one splits states);
* one direct-assignment sweep (``kernel.sample``: the assignments and the global step) on the
  *Alice* word sequence (training part, ``T = 27,103``, 1,487 types, categorical emissions),
  capacity 400, started from a random assignment to 200 states (the RCD paper's C++ sweep:
  10.0 s on a 3 GHz Xeon E5450).

Usage: ``python -m benchmarks.reproductions fox [--quick] [--no-save]`` (section
"Direct-assignment Gibbs" of ``benchmarks/results/reproductions.json``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ..harness import models, results

QUESTION = "reproductions"
SECTION = "Direct-assignment Gibbs"


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
    """Seconds of one ``DirectAssignmentGibbs`` sweep on Alice (median of ``repeats`` after
    compiling), from a random assignment to ``start_states`` states."""
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    text = nh.datasets.load_alice()
    y = np.asarray(text.tokens[: len(text.tokens) - text.info["num_test"]])
    emission = nh.emissions.Categorical(len(text.vocabulary), 0.5)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=capacity), obs=y)

    kernel = models.kernel("DirectAssignmentGibbs", model)
    z = jnp.asarray(np.random.default_rng(1).integers(0, start_states, size=y.shape), jnp.int32)
    state = kernel.init(jax.random.key(0), 0, {"y_states": z}, (y,), {})
    sweep = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    state = jax.block_until_ready(sweep(state))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(sweep(state))
        times.append(time.perf_counter() - t0)
    return {"T": int(y.size), "V": len(text.vocabulary), "seconds": float(np.median(times)),
            "states": int(state.num_states)}


def final_hamming(sticky, seed, T=10000, L=15, sweeps=300):
    """Normalized Hamming distance of the states after ``sweeps`` sweeps of ``WeakLimitGibbs`` on
    experiment A (the README's model, ``sticky=False``: without kappa), and the states in use."""
    import jax

    import numpyro_hdphmm as nh

    y, truth = models.fox_a(T, seed)
    kernel = models.kernel("WeakLimitGibbs", models.readme_model(L, sticky=sticky))
    state = kernel.init(jax.random.key(seed), 0, None, (y,), {})
    run = jax.jit(lambda s: jax.lax.fori_loop(0, sweeps, lambda _, s: kernel.sample(s, (y,), {}), s))
    state = jax.block_until_ready(run(state))
    states = np.asarray(state.z["y_states"])
    return float(nh.diagnostics.hamming_distance(states, truth)), int(state.num_states)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: experiment A, 5 + 5 sweeps, no Alice")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="Hamming comparison seeds")
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    from numpyro_hdphmm.infer import DirectAssignmentGibbs, WeakLimitGibbs

    warm, samples = (5, 5) if args.quick else (300, 1000)
    rows = []
    for name in (("A",) if args.quick else ("A", "B")):
        for label, cls in (("DirectAssignmentGibbs", DirectAssignmentGibbs), ("WeakLimitGibbs", WeakLimitGibbs)):
            r = run_chains(cls, name, warm, samples, num_chains=2 if args.quick else 4)
            rows.append((name, label, r))
            print(name, label, r, flush=True)
    hamming = {}
    seeds, T, sweeps = ([0], 500, 5) if args.quick else (args.seeds, 10000, 300)
    for label, sticky in (("sticky", True), ("non-sticky", False)):
        hamming[label] = [final_hamming(sticky, s, T=T, sweeps=sweeps) for s in seeds]
        print(label, hamming[label], flush=True)
    alice = None if args.quick else alice_sweep()
    lines = [
        "Fox et al. experiments A (T = 1000, Gaussian) and B (T = 2000, DP-mixture emissions,",
        "L' = 15); capacity / truncation 15; chains vmapped; "
        f"{warm} warm-up + {samples} sweeps; float32.",
        "",
        "| experiment | kernel | ms / sweep / chain | ESS(num_states) | ESS/s | mean states | median Hamming (last draw) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, label, r in rows:
        lines.append(
            f"| {name} | {label} | {r['ms_per_sweep']:.2f} | {r['ess']:.0f} | {r['ess_per_s']:.0f} | "
            f"{r['mean_states']:.2f} | {r['hamming']:.3f} |"
        )
    lines += [""] + [
        f"- Normalized Hamming distance after {sweeps} sweeps of `WeakLimitGibbs`, experiment A, T = {T}, {label} "
        f"(L = 15), seeds {seeds}: " + ", ".join(f"{h:.3f} ({k} states)" for h, k in hs) + "."
        for label, hs in hamming.items()]
    if alice is not None:
        lines += [
            "",
            f"One direct-assignment sweep on *Alice* (T = {alice['T']:,}, {alice['V']:,} word types, categorical "
            f"emissions, capacity 400, started from a random assignment to 200 states): "
            f"**{alice['seconds']:.2f} s** ({alice['states']} states after the sweeps). The RCD paper's C++ "
            "direct-assignment sweep took 10.0 s on a 3 GHz Xeon E5450.",
        ]
    text = "\n".join(lines)
    print(text)
    if not args.no_save:
        print("saved", results.save(QUESTION, SECTION, text, results.command_line("reproductions fox", argv)))


if __name__ == "__main__":
    main()
