"""Seconds per sweep of every MCMC kernel on standard configurations, optionally side by side with
another checkout of the package (e.g. the previous commit, after a refactoring).

Each configuration is timed in a fresh process (float32, the default JAX device): the kernel's
jitted ``sample`` after compilation and warm-up sweeps, median over repeats, the fastest of
``--copies`` separately compiled copies.  With ``--compare PATH`` every configuration is timed
alternately for this tree and for the package at ``PATH`` (a checkout, e.g. made with
``git worktree add /tmp/prev HEAD~1``), ``--rounds`` times each, and the ratio of the best times
is reported (this tree / the other).

Usage::

    python benchmarks/bench_kernels.py [--quick] [--compare PATH] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# (kernel, data set, T, capacity)
CONFIGS = [
    ("WeakLimitGibbs", "fox_a", 1000, 15),
    ("WeakLimitGibbs", "fox_a", 10000, 15),
    ("WeakLimitGibbs", "gauss2d", 10000, 30),
    ("BeamSampler", "fox_a", 1000, 15),
    ("BeamSampler", "gauss2d", 10000, 30),
    ("DirectAssignmentGibbs", "fox_a", 1000, 15),
    ("DirectAssignmentGibbs", "fox_a", 10000, 15),
]
QUICK = CONFIGS[:1] + CONFIGS[3:4] + CONFIGS[5:6]


def _worker(kernel_name, data_name, num_steps, capacity, repeats, copies):
    """Runs in a fresh process: prints one JSON line with the best median seconds per sweep."""
    import jax
    import numpy as np

    import numpyro_hdphmm as nh

    if data_name == "fox_a":
        y = np.asarray(nh.datasets.fox_experiment_a(num_steps).observations, np.float32)
    else:
        rng = np.random.default_rng(0)
        seg = np.repeat(rng.integers(0, 5, size=num_steps // 200 + 1), 200)[:num_steps]
        means = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [-6.0, 0.0], [0.0, -6.0]])
        y = (means[seg] + rng.normal(size=(num_steps, 2))).astype(np.float32)
    emission = nh.emissions.GaussianNIW.weakly_informative(y)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 5.0, 20.0, emission, max_states=capacity), obs=y)

    best, compile_s = float("inf"), None
    for copy in range(copies):
        kernel = getattr(nh.infer, kernel_name)(model)
        state = kernel.init(jax.random.key(copy), 0, None, (y,), {})
        step = jax.jit(lambda s: kernel.sample(s, (y,), {}))
        t0 = time.perf_counter()
        state = jax.block_until_ready(step(state))
        compile_s = time.perf_counter() - t0 if compile_s is None else compile_s
        for _ in range(5):
            state = step(state)
        jax.block_until_ready(state)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            state = jax.block_until_ready(step(state))
            times.append(time.perf_counter() - t0)
        best = min(best, float(np.median(times)))
    print(json.dumps({"seconds": best, "compile_s": compile_s}))


def _time(path, config, repeats, copies):
    env = {**os.environ, "PYTHONPATH": path, "JAX_ENABLE_X64": "0"}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(list(config) + [repeats, copies])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--compare", default=None, help="path of another checkout to time side by side")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(*json.loads(args.worker))
        return
    paths = [ROOT] + ([os.path.abspath(args.compare)] if args.compare else [])
    print("| kernel | data | T | K | ms/sweep (this tree) |" + (" ms/sweep (other) | ratio |" if args.compare else "")
          + " compile s |")
    print("|---|---|---|---|---|" + ("---|---|" if args.compare else "") + "---|")
    for config in (QUICK if args.quick else CONFIGS):
        best = {p: float("inf") for p in paths}
        compile_s = None
        for _ in range(args.rounds):
            for p in paths:
                r = _time(p, config, args.repeats, args.copies)
                best[p] = min(best[p], r["seconds"])
                compile_s = r["compile_s"] if p == ROOT and compile_s is None else compile_s
        row = f"| {config[0]} | {config[1]} | {config[2]} | {config[3]} | {1e3 * best[ROOT]:.2f} |"
        if args.compare:
            other = best[paths[1]]
            row += f" {1e3 * other:.2f} | {best[ROOT] / other:.2f} |"
        print(row + f" {compile_s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
