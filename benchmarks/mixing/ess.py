"""ESS per second of every kernel on every data set: Fox et al.'s experiment A, PGAS synthetic
set A, motion capture and Alice.

For each data set and each kernel of :data:`KERNELS` with its default options (``init_strategy=
"data"``, ``hyperparameters="collapsed"``; the hyperparameters have Gamma priors, so they are
sampled), ``C`` chains vmapped (what ``MCMC(..., chain_method="vectorized")`` runs) from the
kernel's initialization, ``W`` warm-up + ``S`` kept sweeps in one ``lax.scan`` compiled ahead of
time (:func:`benchmarks.mixing.hyperparameters.compile_scan`; compilation and initialization timed apart).
Over the ``S`` kept draws of the ``C`` chains: bulk ESS (``arviz.ess``) and R-hat of
``num_states``, the log joint ``lp`` (the kernel state's field: rows integrated out, what the
kernel's own model uses) and each sampled hyperparameter (``gamma``, ``alpha``, ``kappa`` where
the model is sticky), and the ESS per second of the kept sweeps (``ESS / (S x seconds per
sweep)``), in CPU seconds of the process (``time.process_time``: every core's work, less
sensitive than the wall clock to the other jobs of a shared machine) and in wall seconds.

Data sets (:func:`setup`, from the suite's registry :mod:`benchmarks.harness.models`):

* ``fox_a``: the README's model on Fox et al.'s experiment A (T = 1000, 3 states; ``gamma,
  alpha ~ Gamma(1, 0.01)``, ``kappa ~ Gamma(10, 0.1)``, ``GaussianNIW.weakly_informative``),
  capacity 20;
* ``pgas_set_a``: the PGAS paper's synthetic set A (T = 4000, 4 states, non-sticky iHMM with
  ``alpha ~ Gamma(4, 1)``, ``gamma ~ Gamma(3, 6)``), capacity 20;
* ``mocap``: the six CMU motion-capture sequences of ``examples/mocap.py`` (2058 frames, 12
  channels standardized, sticky HDP-AR(1)-HMM with its MNIW prior and ``gamma ~ Gamma(1, 0.01)``,
  ``alpha ~ Gamma(1, 1)``, ``kappa ~ Gamma(50, 1)``), capacity 30, from the kernels' default
  initialization (not the example's chunked start);
* ``alice``: the first ``--alice-words`` words of *Alice* (the RCD paper's word model:
  non-sticky, ``gamma, alpha ~ Gamma(1, 1)``,
  ``Categorical(V, 0.1)`` over the whole vocabulary), capacity ``--alice-capacity``.

Every (data set, kernel) runs in its own subprocess (a crash or a hang, cut at ``--timeout``
seconds, is recorded as "did not run" with its reason), and each finished row is saved at once
to ``--json`` (default ``benchmarks/results/raw/ess_rows.json``); rows already there are not run
again unless ``--force``.  The sweeps per row are :data:`PLAN` (``--sweeps`` scales them).

Usage (from the repository root)::

    python -m benchmarks.mixing ess [--datasets fox_a pgas_set_a mocap alice] [--kernels ...]
        [--sweeps 1.0] [--seeds 0] [--json FILE] [--force] [--quick] [--no-save]

The section "ESS per second: every kernel and data set" of ``benchmarks/results/mixing.json``
gets the table of every row in the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from ..harness import models
from ..harness import results as suite_results
from ..harness.models import KERNELS
from .hyperparameters import compile_scan, mixing

QUESTION = "mixing"
SECTION = "ESS per second: every kernel and data set"
DATASETS = ("fox_a", "pgas_set_a", "mocap", "alice")
#: recorded every sweep, in the order of the table (a hyperparameter the model lacks is skipped)
FIELDS = ("num_states", "lp", "gamma", "alpha", "kappa")
#: chains per data set
CHAINS = {"fox_a": 4, "pgas_set_a": 4, "mocap": 4, "alice": 2}
#: (warm-up, kept) sweeps per data set and kernel, chosen from pilot runs so that the whole
#: one seed of the benchmark takes about 40 minutes on 2 shared cores (the dearer kernels get fewer sweeps)
PLAN = {
    "fox_a": {"WeakLimitGibbs": (1000, 1000), "DirectAssignmentGibbs": (500, 500), "BeamSampler": (1000, 1000),
              "RCDSampler": (400, 400), "PGAS": (500, 500)},
    "pgas_set_a": {"WeakLimitGibbs": (1000, 1000), "DirectAssignmentGibbs": (400, 400), "BeamSampler": (1000, 1000),
                   "RCDSampler": (300, 300), "PGAS": (500, 500)},
    "mocap": {"WeakLimitGibbs": (1000, 1000), "DirectAssignmentGibbs": (200, 200), "BeamSampler": (500, 500),
              "RCDSampler": (200, 200), "PGAS": (300, 300)},
    "alice": {"WeakLimitGibbs": (1000, 1000), "DirectAssignmentGibbs": (300, 300), "BeamSampler": (500, 500),
              "RCDSampler": (300, 300), "PGAS": (300, 300)},
}
ALICE_WORDS, ALICE_CAPACITY = [5000], [60]


def setup(name, seed=0):
    """``{"model", "args", "capacity", "T", "hamming"}`` of data set ``name`` (``T``: observed steps): ``hamming(states
    of one chain)`` the normalized Hamming distance to the true states (``None`` without them)."""
    if name == "fox_a":
        p = models.readme_problem(1000, 20, seed)
    elif name == "pgas_set_a":
        p = models.set_a_problem(4000, 20, seed)
    elif name == "mocap":
        p = models.mocap_problem(30)
    elif name == "alice":
        p = models.alice_words_problem(ALICE_WORDS[0], ALICE_CAPACITY[0])
    else:
        raise ValueError(f"unknown data set {name!r}")
    return {"model": p.model, "args": p.args, "capacity": p.capacity, "T": p.T, "hamming": p.hamming}


def worker(dataset, kernel_name, num_warmup, num_samples, num_chains, seed):
    """One row, in this process: initialize, compile, run and summarize."""
    import jax

    d = setup(dataset, seed)
    kernel = models.kernel(kernel_name, d["model"])
    keys = jax.random.split(jax.random.key(seed), num_chains)
    t0, c0 = time.perf_counter(), time.process_time()
    state = jax.block_until_ready(kernel.init(keys, num_warmup, None, d["args"], {}))
    init_s, init_cpu = time.perf_counter() - t0, time.process_time() - c0
    fields = tuple(f for f in FIELDS if f in ("num_states", "lp") or f in state.z)
    sweeps = num_warmup + num_samples
    t0, c0 = time.perf_counter(), time.process_time()
    compiled, _ = compile_scan(kernel, state, d["args"], {}, sweeps, fields)
    compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    last, traces = jax.block_until_ready(compiled(state))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    kept = num_samples / sweeps  # the kept sweeps' share of the run's seconds
    out = {"dataset": dataset, "kernel": kernel_name, "num_warmup": num_warmup, "num_samples": num_samples,
           "num_chains": num_chains, "seed": seed, "capacity": d["capacity"], "T": d["T"],
           "wall_s": wall, "cpu_s": cpu, "init_wall_s": init_s, "init_cpu_s": init_cpu, "compile_wall_s": compile_s,
           "compile_cpu_s": compile_cpu, "wall_per_sweep": wall / sweeps, "cpu_per_sweep": cpu / sweeps,
           "max_states": int(np.max(np.asarray(traces[0]))), "load": os.getloadavg()[0]}
    for name, x in zip(fields, traces):
        m = mixing(x, num_warmup, num_chains)
        out[name] = {**m, "ess_per_cpu_s": m["ess"] / (cpu * kept), "ess_per_wall_s": m["ess"] / (wall * kept)}
    if d["hamming"] is not None:
        z = np.asarray(last.z["y_states"])
        out["hamming"] = [d["hamming"](z[c]) for c in range(num_chains)]
    out["final_states"] = [int(k) for k in np.asarray(last.num_states).reshape(-1)]
    return out


def run_row(dataset, kernel, num_warmup, num_samples, num_chains, seed, timeout):
    """:func:`worker` in a subprocess (``nice``: the machine is shared); ``{"error": reason}`` on a
    crash or after ``timeout`` seconds."""
    cmd = [sys.executable, "-m", "benchmarks.mixing", "ess", "--_worker", dataset, kernel, str(num_warmup),
           str(num_samples), str(num_chains), str(seed), "--alice-words", str(ALICE_WORDS[0]),
           "--alice-capacity", str(ALICE_CAPACITY[0])]
    base = {"dataset": dataset, "kernel": kernel, "num_warmup": num_warmup, "num_samples": num_samples,
            "num_chains": num_chains, "seed": seed, "command": " ".join(["python"] + cmd[1:])}
    t0 = time.perf_counter()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=models.REPO)
    except subprocess.TimeoutExpired:
        return {**base, "error": f"no result after {timeout:.0f} s (cut)", "elapsed_s": time.perf_counter() - t0}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {**base, "error": f"exit {out.returncode}: {tail}", "elapsed_s": time.perf_counter() - t0}
    return {**base, **json.loads(lines[-1][len("RESULT "):]), "elapsed_s": time.perf_counter() - t0}


def _fmt(x):
    return "nan" if x != x else f"{x:.3g}" if x < 1e3 else f"{x:.0f}"


def table(rows):
    """Two markdown tables of the rows (one per data set and kernel): the run and the bulk ESS
    (R-hat) of every field, then the ESS per CPU second (per wall second)."""
    present = lambda r, f: f in r and r[f]["ess"] == r[f]["ess"]
    run = ["| data set | kernel | seed | chains x (W + S) | ms per sweep of all chains, CPU / wall | init + compile s (wall) | "
           + " | ".join(f"{f} ESS (R-hat)" for f in FIELDS) + " | states (last draw) | Hamming (last draw) |",
           "|---|---|---:|---|---:|---:|" + "---:|" * len(FIELDS) + "---|---|"]
    rate = ["| data set | kernel | seed | " + " | ".join(f"{f}" for f in FIELDS) + " |",
            "|---|---|---:|" + "---:|" * len(FIELDS)]
    for r in rows:
        head = f"| {r['dataset']} | {r['kernel']} | {r['seed']} |"
        if "error" in r:
            run.append(head + f" {r['num_chains']} x ({r['num_warmup']} + {r['num_samples']}) | did not run: "
                       f"{r['error']} |" + " |" * (len(FIELDS) + 3))
            rate.append(head + " did not run |" + " |" * (len(FIELDS) - 1))
            continue
        rhat = lambda x: f"{x:.2f}" if x < 10 else "> 10"  # chains that each stay put: R-hat up to ~1e16
        cells = [f"{r[f]['ess']:.0f} ({rhat(r[f]['rhat'])})" if present(r, f) else "constant" if f in r else "-"
                 for f in FIELDS]
        ham = ", ".join(f"{h:.2f}" for h in r["hamming"]) if "hamming" in r else "-"
        run.append(head + f" {r['num_chains']} x ({r['num_warmup']} + {r['num_samples']}) | "
                   f"{1e3 * r['cpu_per_sweep']:.1f} / {1e3 * r['wall_per_sweep']:.1f} | "
                   f"{r['init_wall_s']:.0f} + {r['compile_wall_s']:.0f} | " + " | ".join(cells)
                   + f" | {', '.join(map(str, r['final_states']))} | {ham} |")
        rate.append(head + " " + " | ".join(
            f"{_fmt(r[f]['ess_per_cpu_s'])} ({_fmt(r[f]['ess_per_wall_s'])})" if present(r, f) else "-"
            for f in FIELDS) + " |")
    return "\n".join(run + ["", "Bulk ESS per CPU second of the kept sweeps (per wall second in brackets):", ""] + rate)


def summary(rows):
    """Markdown table: per data set and kernel, medians over the seeds of the CPU milliseconds per
    sweep and of the ESS per CPU second of each field, and the largest R-hat of ``num_states`` and
    ``lp`` over the seeds."""
    lines = ["| data set | kernel | seeds | CPU ms per sweep of all chains | " + " | ".join(f"{f} ESS / CPU s" for f in FIELDS)
             + " | max R-hat (num_states, lp) |", "|---|---|---:|---:|" + "---:|" * len(FIELDS) + "---:|"]
    for dataset in DATASETS:
        for kernel in KERNELS:
            mine = [r for r in rows if r["dataset"] == dataset and r["kernel"] == kernel and "error" not in r]
            if not mine:
                continue
            med = lambda f: _fmt(float(np.median([r[f]["ess_per_cpu_s"] for r in mine]))) if f in mine[0] else "-"
            worst = lambda f: max(r[f]["rhat"] for r in mine)
            rhat = lambda x: f"{x:.2f}" if x < 10 else "> 10"
            lines.append(f"| {dataset} | {kernel} | {len(mine)} | "
                         f"{_fmt(1e3 * float(np.median([r['cpu_per_sweep'] for r in mine])))} | "
                         + " | ".join(med(f) for f in FIELDS) + f" | {rhat(worst('num_states'))}, {rhat(worst('lp'))} |")
    return "\n".join(lines)


def best(rows):
    """Per data set and field (``num_states``, ``lp``): the kernel with the highest median over
    seeds of the ESS per CPU second, ``(kernel, median)``."""
    out = {}
    for dataset in DATASETS:
        for field in ("num_states", "lp"):
            medians = {}
            for kernel in KERNELS:
                values = [r[field]["ess_per_cpu_s"] for r in rows if r["dataset"] == dataset and r["kernel"] == kernel
                          and "error" not in r and r[field]["ess"] == r[field]["ess"]]
                if values:
                    medians[kernel] = float(np.median(values))
            if medians:
                top = max(medians, key=medians.get)
                out[(dataset, field)] = (top, medians[top])
    return out


def load(path):
    return json.load(open(path)) if os.path.exists(path) else {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--sweeps", type=float, default=1.0, help="scale the sweeps of PLAN")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="data (Fox A, set A) and chain seeds")
    parser.add_argument("--alice-words", type=int, default=ALICE_WORDS[0])
    parser.add_argument("--alice-capacity", type=int, default=ALICE_CAPACITY[0])
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per row before it is cut")
    parser.add_argument("--json", default=os.path.join(suite_results.RESULTS, "raw", "ess_rows.json"))
    parser.add_argument("--force", action="store_true", help="run rows already in the JSON file again")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: fox_a, WeakLimitGibbs, 5 + 5 sweeps, a temporary rows file, nothing saved")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--title", default=SECTION,
                        help="the section to write (another title keeps the full table and adds a partial run beside it)")
    parser.add_argument("--_worker", nargs=6, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:
        import tempfile

        args.datasets, args.kernels, args.sweeps, args.no_save = ["fox_a"], ["WeakLimitGibbs"], 0.005, True
        args.json = os.path.join(tempfile.mkdtemp(), "ess_rows.json")
    ALICE_WORDS[0], ALICE_CAPACITY[0] = args.alice_words, args.alice_capacity
    if args._worker:
        dataset, kernel, w, s, c, seed = args._worker
        print("RESULT " + json.dumps(worker(dataset, kernel, int(w), int(s), int(c), int(seed))), flush=True)
        return

    results = load(args.json)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    key = lambda dataset, kernel, seed: f"{dataset}/{kernel}/{seed}"
    for seed in args.seeds:
        for dataset in args.datasets:
            for kernel in args.kernels:
                if key(dataset, kernel, seed) in results and not args.force:
                    continue
                w, s = (max(2, int(round(n * args.sweeps))) for n in PLAN[dataset][kernel])
                r = run_row(dataset, kernel, w, s, CHAINS[dataset], seed, args.timeout)
                results[key(dataset, kernel, seed)] = r
                with open(args.json, "w") as fh:
                    json.dump(results, fh, indent=1)
                print(key(dataset, kernel, seed), json.dumps(r), flush=True)
    seeds = sorted({r["seed"] for r in results.values()})
    rows = [results[key(d, k, s)] for d in DATASETS for k in KERNELS for s in seeds if key(d, k, s) in results]
    text = ("Medians over the seeds (ESS per CPU second of the kept sweeps; an R-hat above 1.01 means the chains "
            "disagree, and the ESS then measures how slowly they move, not the posterior's spread):\n\n"
            + summary(rows) + "\n\nEvery row:\n\n" + table(rows))
    print(text)
    for (dataset, field), (kernel, value) in best(rows).items():
        print(f"best {dataset} {field}: {kernel} ({value:.3g} ESS per CPU s)")
    if not args.no_save:
        import jax

        loads = [r["load"] for r in rows if "load" in r] or [float("nan")]
        header = (
            f"jax {jax.__version__}, float32, {os.cpu_count()} CPU cores shared with other jobs (load average "
            f"{min(loads):.1f}-{max(loads):.1f} at the ends of the rows).  Each row: one data "
            "set, one kernel with its default options (`init_strategy=\"data\"`, `hyperparameters=\"collapsed\"`, "
            "`RCDSampler` `mode=\"slice\"`, `PGAS` 10 particles with the prior proposal), `C` chains vmapped in one "
            "compiled `lax.scan` of `W` warm-up + `S` kept sweeps, in a process of its own (initialization and "
            "compilation timed apart, not in the seconds per sweep).  Bulk ESS (`arviz.ess`) and R-hat over "
            "the `C x S` kept draws of `num_states`, the log joint `lp` (the kernel state's field) and each "
            "hyperparameter; ESS per second = ESS / (S x seconds per sweep).\n\n"
            "**CPU seconds** (`time.process_time` of the process, every core's work) are the primary clock: the "
            "machine is shared, so wall seconds are inflated by the other jobs (a row that waited for a core shows "
            "wall > CPU); CPU seconds are what the run itself costs.  A row whose XLA program uses both cores shows "
            "CPU > wall: its wall clock on a quiet machine would be shorter than its CPU seconds.\n\n"
            "Data sets: `fox_a`: the README's model on Fox et al.'s experiment A (T = 1000, 3 states, sticky, Gamma "
            "priors on gamma, alpha, kappa, capacity 20); `pgas_set_a`: PGAS synthetic set A (T = 4000, 4 states, "
            "non-sticky, `gamma ~ Gamma(3, 6)`, `alpha ~ Gamma(4, 1)`, capacity 20); `mocap`: `examples/mocap.py`'s "
            "sticky HDP-AR(1)-HMM on the six CMU sequences (2058 frames, 12 channels, `gamma ~ Gamma(1, 0.01)`, "
            "`alpha ~ Gamma(1, 1)`, `kappa ~ Gamma(50, 1)`, capacity 30), from the default initialization (not "
            f"the example's chunked start); `alice`: the first {ALICE_WORDS[0]:,} words of *Alice* (a prefix "
            "of the 27,103 training words, so that every kernel fits the time budget), the RCD paper's non-sticky word "
            "model (`gamma, alpha ~ Gamma(1, 1)`, `Categorical(1487, 0.1)`), capacity "
            f"{ALICE_CAPACITY[0]}, no true states.  The dearer kernels get fewer sweeps (the `W + S` column).  "
            "Hamming: normalized distance of each chain's last draw to the true states.  Seeds "
            f"{', '.join(map(str, seeds))}: the chains' keys and the simulated data sets (Fox A, set A).  Wall "
            f"time of the whole benchmark: {sum(r['elapsed_s'] for r in rows) / 60:.0f} minutes.  The best kernel per "
            "data set: {doc}`choosing_a_kernel`, \"Best kernel per data set\".\n\n")
        command = suite_results.command_line("mixing ess", argv)
        print("saved", suite_results.save(QUESTION, args.title, header + text, command, data=rows))


if __name__ == "__main__":
    main()
