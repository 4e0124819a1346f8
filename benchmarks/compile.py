"""Compile time and latency: what a user waits for before the first sweep.

Parts (``--parts``, default ``first``):

- ``first``: for each kernel, a fresh process builds the README's model (Fox et al.'s experiment
  A, T = 1000, max_states = 20) and times ``MCMC(kernel, num_warmup=5, num_samples=5).run`` twice:
  ``first`` (tracing and compiling ``kernel.init`` and the sweep; the 10 sweeps take
  milliseconds) and ``second`` (the same run on a new ``MCMC`` object: NumPyro re-traces its loop for
  every run).  CPU seconds (``time.process_time``, all threads) beside wall seconds: on a shared
  machine the wall clock includes waiting for a core.  ``--cache``: the same in two more processes
  sharing a fresh ``JAX_COMPILATION_CACHE_DIR``; the second's ``first`` is what a repeated script pays.
- ``breakdown``: where the first run's seconds go, from JAX's own compile log
  (``jax_log_compiles``: tracing, lowering and XLA compilation of each program, wall seconds),
  the 25 largest items and the totals per stage, plus a SHA-256 of the draws (same key, same hash:
  compare two checkouts).
- ``init``: ``WeakLimitGibbs.init`` at large T, the first call (compiling) and three more with new
  keys (the cached programs only run).
- ``second``: what a second ``mcmc.run`` of ``WeakLimitGibbs`` costs in the same process (the same
  kernel object), each way in a fresh process: the same ``MCMC`` on new data of the same shape with
  the progress bar on or off and with ``jit_model_args`` on or off, a new ``MCMC`` object, and a new
  ``MCMC`` object with JAX's persistent compilation cache on (the README's table).

Results: ``benchmarks/results/compile.json`` (sections "Compile time", "Compile time: where the
first run goes", "Initialization latency at large T").

Usage::

    python -m benchmarks.compile [--quick] [--parts first breakdown init second] [--cache] [--kernels ...]
    python -m benchmarks.compile --parts first --vs ../other-checkout [--rounds 2]   (before and after, alternately)
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from .harness import models, results
from .harness.models import KERNELS

QUESTION = "compile"
WARMUP, SAMPLES = 5, 5


def _mcmc_run(name, num_chains=1, T=1000):
    """``(mcmc, seconds, cpu seconds)`` of one ``MCMC.run`` on the README's model."""
    import jax
    from numpyro.infer import MCMC

    p = models.readme_problem(T)
    mcmc = MCMC(models.kernel(name, p.model), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=num_chains,
                progress_bar=False, chain_method="vectorized")
    t0, c0 = time.perf_counter(), time.process_time()
    mcmc.run(jax.random.key(0), *p.args)
    jax.block_until_ready(mcmc.get_samples())
    return mcmc, time.perf_counter() - t0, time.process_time() - c0


def child_first(name, second):
    _, first, first_cpu = _mcmc_run(name)
    sec, sec_cpu = _mcmc_run(name)[1:] if second else (float("nan"), float("nan"))
    print("RESULT " + json.dumps({"kernel": name, "first": first, "second": sec, "first_cpu": first_cpu,
                                  "second_cpu": sec_cpu}), flush=True)


def child_breakdown(name, num_chains):
    import jax

    records = []

    patterns = (("tracing", re.compile(r"Finished tracing \+ transforming (.+) for \w+ in ([0-9.e-]+) sec")),
                ("lowering", re.compile(r"Finished jaxpr to MLIR module conversion (.+) in ([0-9.e-]+) sec")),
                ("compilation", re.compile(r"Finished XLA compilation of (.+) in ([0-9.e-]+) sec")))

    class Collect(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            for stage, pattern in patterns:
                m = pattern.search(msg)
                if m:
                    records.append((stage, m.group(1)[:60], float(m.group(2))))

    handler = Collect()
    logging.getLogger("jax").addHandler(handler)  # the compile log's records propagate to "jax"
    jax.config.update("jax_log_compiles", True)
    mcmc, wall, cpu = _mcmc_run(name, num_chains)
    agg = collections.defaultdict(lambda: [0, 0.0])
    for stage, fun, sec in records:
        agg[(stage, fun)][0] += 1
        agg[(stage, fun)][1] += sec
    totals = collections.defaultdict(float)
    for (stage, _), (_, sec) in agg.items():
        totals[stage] += sec
    h = hashlib.sha256()
    samples = mcmc.get_samples()
    for k in sorted(samples):
        h.update(k.encode())
        h.update(np.asarray(samples[k]).tobytes())
    top = sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]
    print("RESULT " + json.dumps({"kernel": name, "wall": wall, "cpu": cpu, "hash": h.hexdigest(),
                                  "totals": dict(totals), "top": [[s, f, n, sec] for (s, f), (n, sec) in top]}))


def child_init(T):
    import jax

    p = models.readme_problem(T)
    kernel = models.kernel("WeakLimitGibbs", p.model)
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(kernel.init(jax.random.key(0), 5, None, p.args, {}))
    first = (time.process_time() - c0, time.perf_counter() - t0)
    again = []
    for i in range(3):
        c0, t0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(kernel.init(jax.random.key(i + 1), 5, None, p.args, {}))
        again.append((time.process_time() - c0, time.perf_counter() - t0))
    print("RESULT " + json.dumps({"T": T, "first": first, "again": again}))


#: the second-run cases: (label, progress bar, jit_model_args, new MCMC object, persistent cache)
SECOND_RUNS = (
    ("the same `MCMC` object, new data, `jit_model_args=True`, progress bar on (NumPyro's default)", True, True,
     False, False),
    ("the same `MCMC` object, new data, `jit_model_args=True, progress_bar=False`", False, True, False, False),
    ("the same `MCMC` object, new data, `jit_model_args=False` (the default: the data are constants of the loop)",
     False, False, False, False),
    ("a new `MCMC` object (the same data)", False, False, True, False),
    ("a new `MCMC` object with JAX's persistent compilation cache on", False, False, True, True),
)


def child_second(case):
    import jax
    from numpyro.infer import MCMC

    label, progress, jit_args, new_object, cache = SECOND_RUNS[case]
    if cache:
        jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp())
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    p, other = models.readme_problem(1000), models.readme_problem(1000, seed=1)
    kernel = models.kernel("WeakLimitGibbs", p.model)

    def make():
        return MCMC(kernel, num_warmup=WARMUP, num_samples=SAMPLES, progress_bar=progress, jit_model_args=jit_args)

    def run(mcmc, args):
        t0 = time.perf_counter()
        mcmc.run(jax.random.key(0), *args)
        jax.block_until_ready(mcmc.get_samples())
        return time.perf_counter() - t0

    mcmc = make()
    first = run(mcmc, p.args)
    second = run(make(), p.args) if new_object else run(mcmc, other.args)
    print("RESULT " + json.dumps({"case": label, "first": first, "second": second}), flush=True)


def spawn(*child_args, env=None, timeout=1800, cwd=None) -> dict:
    """Run ``python -m benchmarks.compile --_child ...`` in a fresh process (in the checkout ``cwd``,
    default this one); its ``RESULT`` line."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.compile", "--_child", *map(str, child_args)],
                         cwd=cwd or models.REPO, capture_output=True, text=True, env={**os.environ, **(env or {})},
                         timeout=timeout)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def measure_first(name, second, cache_dir=None):
    env = None
    if cache_dir is not None:
        env = dict(JAX_COMPILATION_CACHE_DIR=cache_dir, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                   JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    return {"kernel": name, **spawn("first", name, int(second), env=env)}


def checkout_commit(path) -> str:
    """The short commit of the checkout at ``path`` (``+changes`` when its tree differs from it)."""
    head = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                           text=True)
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def first_against(kernels, other, rounds):
    """The first run of each kernel in this checkout and in the checkout ``other``, fresh processes,
    alternating (``rounds`` rounds of kernel by kernel, the other checkout first): rows of wall and
    CPU seconds."""
    rows = []
    for r in range(rounds):
        for name in kernels:
            for label, where in (("other", other), ("this", models.REPO)):
                res = spawn("first", name, 0, cwd=where, env={"PYTHONPATH": where})
                rows.append({"round": r, "kernel": name, "checkout": label, **res})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def against_table(rows, kernels):
    out = []
    for name in kernels:
        walls = {c: [r["first"] for r in rows if r["kernel"] == name and r["checkout"] == c and "error" not in r]
                 for c in ("other", "this")}
        cpus = {c: [r["first_cpu"] for r in rows if r["kernel"] == name and r["checkout"] == c and "error" not in r]
                for c in ("other", "this")}
        if not (walls["other"] and walls["this"]):
            out.append([f"`{name}`", "failed", "", "", ""])
            continue
        out.append([f"`{name}`", ", ".join(f"{w:.1f}" for w in walls["other"]), ", ".join(f"{w:.1f}" for w in walls["this"]),
                    f"{np.median(cpus['other']):.1f} / {np.median(cpus['this']):.1f}",
                    f"{np.median(walls['this']) / np.median(walls['other']):.2f}"])
    return results.table(["kernel", "before: first run, wall (s), per round", "after", "CPU (s), median, before / after",
                          "wall ratio after / before (medians)"], out)


def first_table(rows):
    both = lambda r, k: "failed" if "error" in r else "-" if r[k] != r[k] else f"{r[k + '_cpu']:.1f} / {r[k]:.1f}"
    out = []
    for row in rows:
        p = row["plain"]
        cached = [both(row["cached"], "first"), f"{row['cache_mb']:.1f}"] if "cached" in row else ["-", "-"]
        out.append([f"`{p['kernel']}`", both(p, "first"), both(p, "second"), *cached])
    return results.table(["kernel", "first run, CPU / wall (s)", "second run, CPU / wall (s)",
                          "cached first run, CPU / wall (s)", "cache (MB)"], out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["first"], choices=["first", "breakdown", "init", "second"])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--cache", action="store_true", help="also measure with the persistent compilation cache")
    parser.add_argument("--no-second", action="store_true", help="skip the second run in the same process")
    parser.add_argument("--chains", type=int, default=1, help="breakdown: vectorized chains")
    parser.add_argument("--init-steps", type=int, default=100_000, help="init: T")
    parser.add_argument("--quick", action="store_true", help="WeakLimitGibbs only, no second run, init at T = 2000")
    parser.add_argument("--vs", help="first: the path of another checkout, whose first runs are timed alternately with "
                                     "this checkout's (section 'Compile time: before and after')")
    parser.add_argument("--rounds", type=int, default=2, help="--vs: alternating rounds")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--_child", nargs="+", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if args._child:
        what, *rest = args._child
        {"first": lambda n, s: child_first(n, s == "1"), "breakdown": lambda n, c: child_breakdown(n, int(c)),
         "init": lambda t: child_init(int(t)), "second": lambda c: child_second(int(c))}[what](*rest)
        return
    if args.quick:
        args.kernels, args.no_second, args.init_steps = ["WeakLimitGibbs"], True, 2000
    command = results.command_line("compile", argv)
    save = (lambda *a, **k: None) if args.no_save else results.save
    if "first" in args.parts and args.vs:
        rows = first_against(args.kernels, os.path.abspath(args.vs), args.rounds)
        save(QUESTION, "Compile time: before and after", [results.text(
            f"The first `MCMC(kernel, num_warmup={WARMUP}, num_samples={SAMPLES}).run` on the README's model, each in a "
            f"fresh process, the checkout before (`{checkout_commit(args.vs)}`) and this one "
            f"(`{checkout_commit(models.REPO)}`) alternately, {args.rounds} rounds (wall seconds of the run, from the "
            "`MCMC` call to the draws, interpreter start and imports excluded)."),
            against_table(rows, args.kernels)], command, data=rows)
    elif "first" in args.parts:
        rows = []
        for name in args.kernels:
            row = {"plain": measure_first(name, not args.no_second)}
            if args.cache:
                with tempfile.TemporaryDirectory() as d:
                    row["fill"] = measure_first(name, False, d)
                    row["cached"] = measure_first(name, False, d)
                    row["cache_mb"] = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) / 2**20
            rows.append(row)
            print(json.dumps(row), flush=True)
        save(QUESTION, "Compile time", [results.text(
            f"`MCMC(kernel, num_warmup={WARMUP}, num_samples={SAMPLES}, num_chains=1).run` on the README's model "
            "(experiment A, T = 1000, max_states = 20), each kernel in a fresh process.  Seconds, CPU / wall: "
            "`first` run (tracing and compiling), `second` the identical run in the same process, `cached` the "
            "first run of a fresh process whose persistent compilation cache a previous process filled."),
            first_table(rows)], command, data=rows)
    if "breakdown" in args.parts:
        for name in args.kernels:
            r = spawn("breakdown", name, args.chains)
            if "error" in r:
                print(f"{name}: {r['error']}")
                continue
            print(json.dumps({k: r[k] for k in ("kernel", "wall", "cpu", "hash", "totals")}))
            save(QUESTION, f"Compile time: where the first run goes ({name})", [results.text(
                f"First `MCMC.run` of `{name}` ({args.chains} chain(s)) in a fresh process: {r['wall']:.1f} s wall, "
                f"{r['cpu']:.1f} s CPU; JAX's compile log (wall seconds) per stage: "
                + ", ".join(f"{k} {v:.2f}" for k, v in r["totals"].items()) + f".  Draws' SHA-256 `{r['hash'][:16]}`."),
                results.table(["stage", "function", "count", "seconds"],
                              [[s, f"`{f}`", n, f"{sec:.2f}"] for s, f, n, sec in r["top"]], ["l", "l", "r", "r"])],
                command, data=r)
    if "second" in args.parts:
        rows = [spawn("second", i) for i in range(len(SECOND_RUNS))]
        for r in rows:
            print(json.dumps(r))
        save(QUESTION, "Compile time: a second run", [results.text(
            "A second `mcmc.run` of `WeakLimitGibbs` on the README's model in the process that ran the first (the "
            "same kernel object; one chain), each case in a fresh process: wall seconds of the first and of the "
            "second run."),
            results.table(["second run", "first (s)", "second (s)"],
                          [[r.get("case", "?"), f"{r['first']:.1f}", f"{r['second']:.1f}"] if "error" not in r
                           else ["failed", r["error"], ""] for r in rows], ["l", "r", "r"])], command, data=rows)
    if "init" in args.parts:
        r = spawn("init", args.init_steps)
        print(json.dumps(r))
        if "error" not in r:
            save(QUESTION, "Initialization latency at large T", [results.text(
                f"`WeakLimitGibbs.init` on the README's model at T = {r['T']}: first call (tracing, compiling, "
                f"running) {r['first'][0]:.2f} CPU s / {r['first'][1]:.2f} wall s; three more with new keys (the "
                "cached programs only run): " + ", ".join(f"{c:.2f} / {w:.2f}" for c, w in r["again"])
                + " CPU / wall s.")], command, data=r)


if __name__ == "__main__":
    main()
