"""Hyperparameter mixing: the auxiliary-variable updates (Fox et al.) vs the collapsed
slice-sampling updates (``hyperparameters="collapsed"``) on the README's main example.

Model: the README's (``README.md``): Fox et al.'s experiment A (T = 1000, 3 states), ``gamma ~
Gamma(1, 0.01)``, ``alpha ~ Gamma(1, 0.01)``, ``kappa ~ Gamma(10, 0.1)``, ``GaussianNIW.
weakly_informative``, ``max_states = 20``, float32.  For each update and seed, ``num_chains``
chains of ``WeakLimitGibbs`` vmapped (what ``MCMC(..., chain_method="vectorized")`` runs) from
the kernel's initialization, the collapsed updates with the kernel's own slice-sampling cycles
(a variant with other cycles per sweep needs a public kernel option: the suite does not patch the
package), ``num_warmup + num_samples`` sweeps in one ``lax.scan`` compiled
ahead of time (seconds = sampling only, compilation reported apart), the same sweeps for every
update; the seconds are the fastest of 3 runs of the compiled scan.  Over the last ``num_samples`` draws: bulk ESS (``arviz.ess``) and R-hat (``arviz.rhat``)
of ``gamma``, ``alpha``, ``kappa``, ``num_states`` and the log joint ``lp``, ESS per second of
sampling, and the normalized Hamming distance of the last draw to the true states.

Usage (from the repository root)::

    python -m benchmarks.mixing hyperparameters [--num-warmup 300] [--num-samples 300]
        [--num-chains 2] [--seeds 0 1 2] [--kernels WeakLimitGibbs] [--repeats 3] [--quick]

Results: the "Hyperparameter mixing" section of ``benchmarks/results/mixing.json``.  With
``--kernels PGAS RCDSampler`` (any of :data:`KERNELS` but the weak limit) the same measurement is
made for those kernels on the same model (their default options; capacity ``max_states = 20``),
each kernel's updates compiled first and then run alternately for every seed (interleaved,
so that the shared machine's load hits them alike) with ``"auxiliary"`` and ``"collapsed"`` (3 cycles, the
default); the section is then "PGAS and RCDSampler hyperparameter mixing".
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from ..harness import models
from ..harness import results as suite_results

QUESTION = "mixing"
SECTION = "Hyperparameter mixing"
SECTION_OTHERS = "PGAS and RCDSampler hyperparameter mixing"
#: kernels the script can run (the weak limit samples ``weak_limit(model)``, the others the infinite model)
KERNELS = ("WeakLimitGibbs", "PGAS", "RCDSampler", "BeamSampler", "DirectAssignmentGibbs")
FIELDS = ("gamma", "alpha", "kappa", "num_states", "lp")
#: (label, hyperparameters, slice-sampling cycles per sweep of the collapsed updates: ``None`` the
#: kernel's own; other cycles need a public kernel option, so only ``None`` is run)
UPDATES = (("auxiliary", "auxiliary", None), ("collapsed", "collapsed", None))
#: the other kernels: the auxiliary updates and their default collapsed ones (3 + 3 cycles)
OTHER_UPDATES = (("auxiliary", "auxiliary", None), ("collapsed, 3 cycles", "collapsed", None))


#: capacity of the model (``--max-states``; the README's example itself uses 15)
MAX_STATES = [20]


def readme_model():
    """The README's model with ``L = MAX_STATES[0]`` (``--max-states``)."""
    return models.readme_model(MAX_STATES[0])


def run(hyperparameters, cycles, num_warmup, num_samples, num_chains, seed, kernel="WeakLimitGibbs", repeats=3):
    """One configuration: ``{"seconds", "compile_seconds", "ms_per_sweep", "hamming", field:
    {"ess", "ess_per_s", "rhat", "mean"}}`` (:func:`run_interleaved` of one configuration)."""
    return run_interleaved([(kernel, hyperparameters, cycles)], num_warmup, num_samples, num_chains, seed, repeats)[0]


def run_interleaved(configs, num_warmup, num_samples, num_chains, seed, repeats=3):
    """Several configurations ``(kernel, hyperparameters, cycles)`` on one data set: each compiled
    first, then the compiled runs alternated ``repeats`` times (so that the load of a shared
    machine falls on all of them alike) and the fastest run of each kept.  ``cycles``: must be
    ``None`` (the kernel's own).  Returns one :func:`run` result per configuration."""
    prepared = [_prepare(*config, num_warmup, num_samples, num_chains, seed) for config in configs]
    best = [(float("inf"), None)] * len(prepared)
    for _ in range(repeats):
        for i, p in enumerate(prepared):
            t0 = time.perf_counter()
            last, traces = _block(p["compiled"](p["state"]))
            seconds = time.perf_counter() - t0
            if seconds < best[i][0]:
                best[i] = (seconds, traces)
                p["last"] = last
    return [_summary(p, seconds, traces, num_warmup, num_chains) for p, (seconds, traces) in zip(prepared, best)]


def _block(x):
    import jax

    return jax.block_until_ready(x)


def _prepare(kernel, hyperparameters, cycles, num_warmup, num_samples, num_chains, seed):
    import jax

    import numpyro_hdphmm as nh
    if cycles is not None:
        raise ValueError("other slice-sampling cycles need a public kernel option; `cycles` must be None.")
    data = nh.datasets.fox_experiment_a(num_steps=1000, seed=seed)
    y = np.asarray(data.observations, np.float32)
    kernel = models.kernel(kernel, readme_model(), hyperparameters=hyperparameters)
    state = kernel.init(jax.random.split(jax.random.key(seed), num_chains), num_warmup, None, (y,), {})
    sweeps = num_warmup + num_samples
    compiled, compile_s = compile_scan(kernel, state, (y,), {}, sweeps, FIELDS)
    return {"compiled": compiled, "state": state, "data": data, "sweeps": sweeps, "compile_seconds": compile_s}


def trace_fields(state, fields):
    """The recorded values of ``fields`` in a kernel state: ``num_states`` and ``lp`` are fields of
    the state, the others latent sites (``state.z``)."""
    return tuple(getattr(state, f) if f in ("num_states", "lp") else state.z[f] for f in fields)


def compile_scan(kernel, state, args, kwargs, sweeps, fields):
    """``sweeps`` sweeps of ``kernel`` from ``state`` (chains batched: a state from ``kernel.init``
    with a batch of keys) in one ``lax.scan`` recording :func:`trace_fields`, compiled ahead of
    time: ``(compiled, compile seconds)``; ``compiled(state)`` returns ``(last state, traces)``."""
    import jax

    def body(s, _):
        s = kernel.sample(s, args, kwargs)
        return s, trace_fields(s, fields)

    scan = jax.jit(lambda s: jax.lax.scan(body, s, None, length=sweeps))
    t0 = time.perf_counter()
    compiled = scan.lower(state).compile()
    return compiled, time.perf_counter() - t0


def mixing(trace, num_warmup, num_chains):
    """Bulk ESS (``arviz.ess``), R-hat (``arviz.rhat``) and mean of one recorded trace ``(sweeps,
    chains)`` over the draws after ``num_warmup``: ``{"ess", "rhat", "mean"}`` (ESS and R-hat NaN
    for a constant trace)."""
    import arviz as az

    x = np.asarray(trace, dtype=float).reshape(-1, num_chains)[num_warmup:].T  # (chains, draws)
    varies = np.ptp(x) > 0
    return {"ess": float(az.ess(x)) if varies else float("nan"), "rhat": float(az.rhat(x)) if varies else float("nan"),
            "mean": float(np.mean(x))}


def _summary(prepared, seconds, traces, num_warmup, num_chains):
    import numpyro_hdphmm as nh

    sweeps, data = prepared["sweeps"], prepared["data"]
    out = {"seconds": seconds, "compile_seconds": prepared["compile_seconds"], "ms_per_sweep": 1e3 * seconds / sweeps}
    for name, x in zip(FIELDS, traces):
        m = mixing(x, num_warmup, num_chains)
        out[name] = {"ess": m["ess"], "ess_per_s": m["ess"] / seconds, "rhat": m["rhat"], "mean": m["mean"]}
    last = np.asarray(prepared["last"].z["y_states"]).reshape(num_chains, -1)
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
        updates = UPDATES if kernel == "WeakLimitGibbs" else OTHER_UPDATES
        prefix = "" if kernels == ["WeakLimitGibbs"] else f"{kernel}, "
        out += [(prefix + label, kernel, hyperparameters, cycles) for label, hyperparameters, cycles in updates]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-warmup", type=int, default=300)
    parser.add_argument("--num-samples", type=int, default=300)
    parser.add_argument("--num-chains", type=int, default=2)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--kernels", nargs="+", default=["WeakLimitGibbs"], choices=KERNELS)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each compiled scan (the fastest is timed)")
    parser.add_argument("--max-states", type=int, default=20, help="the model's capacity L")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 10 + 10 sweeps, 2 chains, seed 0, T = 1000")
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if args.quick:
        args.num_warmup, args.num_samples, args.num_chains, args.seeds, args.repeats = 10, 10, 2, [0], 1
    MAX_STATES[0] = args.max_states

    import jax

    runs = kernel_updates(args.kernels)
    results = {}
    for seed in args.seeds:
        for kernel in args.kernels:  # one kernel's updates interleaved (compiled first, then runs alternated)
            mine = [r for r in runs if r[1] == kernel]
            outs = run_interleaved([(k, h, c) for _, k, h, c in mine], args.num_warmup, args.num_samples,
                                   args.num_chains, seed, args.repeats)
            for (update, _, _, _), r in zip(mine, outs):
                results[(update, seed)] = r
                print(update, seed, {k: (v if not isinstance(v, dict) else {kk: round(vv, 3) for kk, vv in v.items()})
                                     for k, v in r.items()}, flush=True)
    text = table(results, args.num_warmup, args.num_samples, args.num_chains,
                 [(label, h, c) for label, _, h, c in runs])
    print(text)
    cmd = suite_results.command_line("mixing hyperparameters", argv)
    if not args.no_save and args.kernels != ["WeakLimitGibbs"]:
        dev = jax.devices()[0]
        header = (f"Device: `{dev.platform}`, float32, {os.cpu_count()} CPU cores (shared with other jobs: "
                  f"the seconds are noisy), jax {jax.__version__}.  The README's main example as in "
                  "\"Hyperparameter mixing\" above (Fox et al.'s experiment A, T = 1000; Gamma priors on gamma, alpha, "
                  f"kappa; capacity 20), {', '.join(f'`{k}`' for k in args.kernels)} with their default options and "
                  "`hyperparameters=\"auxiliary\"` or `\"collapsed\"` (3 slice-sampling cycles, the default), the "
                  "two updates of a kernel compiled first (one `lax.scan` each) and then run alternately "
                  f"{args.repeats} times per seed, the fastest run of each timed (compilation excluded).  Per seed, bulk ESS, ESS per second and R-hat "
                  "over the kept draws:\n\n")
        print("saved", suite_results.save(QUESTION, SECTION_OTHERS, header + text, cmd))
    elif not args.no_save:
        dev = jax.devices()[0]
        header = (f"Device: `{dev.platform}`, float32, {os.cpu_count()} CPU cores (shared with other jobs: "
                  f"the seconds are noisy), jax {jax.__version__}.  The README's main example (Fox et al.'s "
                  f"experiment A, T = 1000; Gamma priors on gamma, alpha, kappa; L = {MAX_STATES[0]}), `WeakLimitGibbs` with "
                  "`hyperparameters=\"auxiliary\"` (Fox et al.'s auxiliary-variable updates given the tables) "
                  "and `\"collapsed\"` (slice sampling of `(log(alpha + kappa), logit rho)` given the states and "
                  "`beta`, rows integrated out, and of `log gamma` given the tables, `beta` integrated out), "
                  "the same sweeps; one compiled `lax.scan` per run, compilation excluded, the fastest of 3 runs.  Per seed (the data "
                  "set and the chains' key), bulk ESS, ESS per second and R-hat over the kept draws:\n\n")
        print("saved", suite_results.save(QUESTION, SECTION, header + text, cmd))


if __name__ == "__main__":
    main()
