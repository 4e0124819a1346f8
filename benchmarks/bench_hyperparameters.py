"""Hyperparameter mixing: the auxiliary-variable updates (Fox et al.) vs the collapsed
slice-sampling updates (``hyperparameters="collapsed"``) on the README's main example.

Model: the README's (``README.md``): Fox et al.'s experiment A (T = 1000, 3 states), ``gamma ~
Gamma(1, 0.01)``, ``alpha ~ Gamma(1, 0.01)``, ``kappa ~ Gamma(10, 0.1)``, ``GaussianNIW.
weakly_informative``, ``max_states = 20``, float32.  For each update and seed, ``num_chains``
chains of ``WeakLimitGibbs`` vmapped (what ``MCMC(..., chain_method="vectorized")`` runs) from
the kernel's initialization, the collapsed updates with 1 and with 3 slice-sampling cycles per
sweep, ``num_warmup + num_samples`` sweeps in one ``lax.scan`` compiled
ahead of time (seconds = sampling only, compilation reported apart), the same sweeps for every
update; the seconds are the fastest of 3 runs of the compiled scan.  Over the last ``num_samples`` draws: bulk ESS (``arviz.ess``) and R-hat (``arviz.rhat``)
of ``gamma``, ``alpha``, ``kappa``, ``num_states`` and the log joint ``lp``, ESS per second of
sampling, and the normalized Hamming distance of the last draw to the true states.

Usage (from the repository root)::

    python benchmarks/bench_hyperparameters.py [--num-warmup 300] [--num-samples 300]
        [--num-chains 2] [--seeds 0 1 2] [--kernels WeakLimitGibbs] [--repeats 3] [--write]

``--write`` replaces the "Hyperparameter mixing" section of ``docs/benchmarks.md``.  With
``--kernels PGAS RCDSampler`` (any of :data:`KERNELS` but the weak limit) the same measurement is
made for those kernels on the same model (their default options; capacity ``max_states = 20``),
each kernel's updates run one after the other for every seed (interleaved, so that the shared
machine's load hits them alike) with ``"auxiliary"`` and ``"collapsed"`` (3 cycles, the
default); ``--write`` then replaces the section "PGAS and RCDSampler hyperparameter mixing".
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docs import write_section  # noqa: E402

SECTION = "## Hyperparameter mixing"
SECTION_OTHERS = "## PGAS and RCDSampler hyperparameter mixing"
#: kernels the script can run (the weak limit samples ``weak_limit(model)``, the others the infinite model)
KERNELS = ("WeakLimitGibbs", "PGAS", "RCDSampler", "BeamSampler", "DirectAssignmentGibbs")
FIELDS = ("gamma", "alpha", "kappa", "num_states", "lp")
#: (label, hyperparameters, slice-sampling cycles per sweep of the collapsed updates)
UPDATES = (("auxiliary", "auxiliary", None), ("collapsed, 1 cycle", "collapsed", 1), ("collapsed, 3 cycles", "collapsed", 3))


def readme_model():
    """The README's model: ``bench_weak_limit.experiment_a_model`` with ``L = 20``."""
    from bench_weak_limit import experiment_a_model

    return experiment_a_model(20)


def run(hyperparameters, cycles, num_warmup, num_samples, num_chains, seed, kernel="WeakLimitGibbs", repeats=3):
    """One configuration: ``{"seconds", "compile_seconds", "ms_per_sweep", "hamming", field:
    {"ess", "ess_per_s", "rhat", "mean"}}``.  ``cycles``: ``hyper_cycles`` of
    :func:`numpyro_hdphmm._core.crp.sample_global` (the kernels leave it at its default; set here
    by wrapping the function the algorithms call), ``None`` for the default."""
    from numpyro_hdphmm._core import crp

    if cycles is not None:
        original = crp.sample_global
        crp.sample_global = lambda *a, **k: original(*a, **{**k, "hyper_cycles": cycles})
    try:
        return _run(hyperparameters, num_warmup, num_samples, num_chains, seed, kernel, repeats)
    finally:
        if cycles is not None:
            crp.sample_global = original


def _run(hyperparameters, num_warmup, num_samples, num_chains, seed, kernel="WeakLimitGibbs", repeats=3):
    import arviz as az
    import jax

    import numpyro_hdphmm as nh
    from numpyro_hdphmm import infer

    data = nh.datasets.fox_experiment_a(num_steps=1000, seed=seed)
    y = np.asarray(data.observations, np.float32)
    kernel = getattr(infer, kernel)(readme_model(), hyperparameters=hyperparameters)
    state = kernel.init(jax.random.split(jax.random.key(seed), num_chains), num_warmup, None, (y,), {})

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        return s, (s.z["gamma"], s.z["alpha"], s.z["kappa"], s.num_states, s.lp, s.z["y_states"])

    sweeps = num_warmup + num_samples
    scan = jax.jit(lambda s: jax.lax.scan(body, s, None, length=sweeps))
    t0 = time.perf_counter()
    compiled = scan.lower(state).compile()
    compile_s = time.perf_counter() - t0
    seconds = float("inf")
    for _ in range(repeats):  # the same compiled run again: the fastest of the repeats (a shared machine)
        t0 = time.perf_counter()
        _, traces = jax.block_until_ready(compiled(state))
        seconds = min(seconds, time.perf_counter() - t0)
    out = {"seconds": seconds, "compile_seconds": compile_s, "ms_per_sweep": 1e3 * seconds / sweeps}
    for name, x in zip(FIELDS, traces[:5]):
        x = np.asarray(x, dtype=float).reshape(sweeps, num_chains)[num_warmup:].T  # (chains, draws)
        ess = float(az.ess(x)) if np.ptp(x) > 0 else float("nan")
        rhat = float(az.rhat(x)) if np.ptp(x) > 0 else float("nan")
        out[name] = {"ess": ess, "ess_per_s": ess / seconds, "rhat": rhat, "mean": float(np.mean(x))}
    last = np.asarray(traces[5])[-1].reshape(num_chains, -1)
    out["hamming"] = [float(nh.diagnostics.hamming_distance(z[None], data.states)[0]) for z in last]
    return out


def table(results, num_warmup, num_samples, num_chains, updates=UPDATES):
    """Markdown tables of ``results`` keyed by ``(update label, seed)``: per seed, then the medians
    over seeds of each update in ``updates``."""
    lines = ["| update | seed | ms / sweep | " + " | ".join(f"{f} ESS (ESS/s, R-hat)" for f in FIELDS)
             + " | Hamming (last draw) |", "|---|---:|---:|" + "---:|" * len(FIELDS) + "---|"]
    for (update, seed), r in results.items():
        cells = [f"{r[f]['ess']:.0f} ({r[f]['ess_per_s']:.1f}, {r[f]['rhat']:.2f})" for f in FIELDS]
        lines.append(f"| {update} | {seed} | {r['ms_per_sweep']:.2f} | " + " | ".join(cells)
                     + f" | {', '.join(f'{h:.3f}' for h in r['hamming'])} |")
    # medians over seeds
    lines.append("")
    lines.append(f"Median over seeds of bulk ESS per second ({num_chains} chains x ({num_warmup} warm-up + "
                 f"{num_samples}) sweeps; ESS over the {num_chains * num_samples} kept draws):")
    lines.append("")
    lines.append("| update | ms / sweep | " + " | ".join(f"{f} ESS/s" for f in FIELDS) + " |")
    lines.append("|---|---:|" + "---:|" * len(FIELDS))
    for update, _, _ in updates:
        rs = [r for (u, _), r in results.items() if u == update]
        if not rs:
            continue
        med = lambda f: np.median([r[f]["ess_per_s"] for r in rs])
        lines.append(f"| {update} | {np.median([r['ms_per_sweep'] for r in rs]):.2f} | "
                     + " | ".join(f"{med(f):.1f}" for f in FIELDS) + " |")
    return "\n".join(lines)


def kernel_updates(kernels):
    """``(label, kernel, hyperparameters, cycles)`` of each kernel's runs: the weak limit with
    :data:`UPDATES`, the others with the auxiliary and the default collapsed (3 cycles) updates."""
    out = []
    for kernel in kernels:
        updates = UPDATES if kernel == "WeakLimitGibbs" else (UPDATES[0], UPDATES[2])
        prefix = "" if kernels == ["WeakLimitGibbs"] else f"{kernel}, "
        out += [(prefix + label, kernel, hyperparameters, cycles) for label, hyperparameters, cycles in updates]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-warmup", type=int, default=300)
    parser.add_argument("--num-samples", type=int, default=300)
    parser.add_argument("--num-chains", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--kernels", nargs="+", default=["WeakLimitGibbs"], choices=KERNELS)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each compiled scan (the fastest is timed)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()

    import jax

    runs = kernel_updates(args.kernels)
    results = {}
    for seed in args.seeds:
        for update, kernel, hyperparameters, cycles in runs:
            r = run(hyperparameters, cycles, args.num_warmup, args.num_samples, args.num_chains, seed, kernel, args.repeats)
            results[(update, seed)] = r
            print(update, seed, {k: (v if not isinstance(v, dict) else {kk: round(vv, 3) for kk, vv in v.items()})
                                 for k, v in r.items()}, flush=True)
    text = table(results, args.num_warmup, args.num_samples, args.num_chains,
                 [(label, h, c) for label, _, h, c in runs])
    print(text)
    if args.write and args.kernels != ["WeakLimitGibbs"]:
        cmd = "python benchmarks/bench_hyperparameters.py " + " ".join(sys.argv[1:])
        dev = jax.devices()[0]
        header = (f"Device: `{dev.platform}`, float32, {os.cpu_count()} CPU cores (shared with other jobs: "
                  f"the seconds are noisy), jax {jax.__version__}.  The README's main example as in "
                  "\"Hyperparameter mixing\" above (Fox et al.'s experiment A, T = 1000; Gamma priors on gamma, alpha, "
                  f"kappa; capacity 20), {', '.join(f'`{k}`' for k in args.kernels)} with their default options and "
                  "`hyperparameters=\"auxiliary\"` or `\"collapsed\"` (3 slice-sampling cycles, the default), the "
                  "two updates of a kernel run one after the other for every seed; one compiled `lax.scan` per run, "
                  f"compilation excluded, the fastest of {args.repeats} run(s).  Per seed, bulk ESS, ESS per second and R-hat "
                  "over the kept draws:\n\n")
        print("wrote", write_section(SECTION_OTHERS, cmd, header + text))
    elif args.write:
        cmd = "python benchmarks/bench_hyperparameters.py " + " ".join(sys.argv[1:])
        dev = jax.devices()[0]
        header = (f"Device: `{dev.platform}`, float32, {os.cpu_count()} CPU cores (shared with other jobs: "
                  f"the seconds are noisy), jax {jax.__version__}.  The README's main example (Fox et al.'s "
                  "experiment A, T = 1000; Gamma priors on gamma, alpha, kappa; L = 20), `WeakLimitGibbs` with "
                  "`hyperparameters=\"auxiliary\"` (Fox et al.'s auxiliary-variable updates given the tables) "
                  "and `\"collapsed\"` (slice sampling of `(log(alpha + kappa), logit rho)` given the states and "
                  "`beta`, rows integrated out, and of `log gamma` given the tables, `beta` integrated out), "
                  "the same sweeps; one compiled `lax.scan` per run, compilation excluded, the fastest of 3 runs.  Per seed (the data "
                  "set and the chains' key), bulk ESS, ESS per second and R-hat over the kept draws:\n\n")
        print("wrote", write_section(SECTION, cmd, header + text))


if __name__ == "__main__":
    main()
