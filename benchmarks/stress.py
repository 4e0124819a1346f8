"""Stress runs of the MCMC kernels: long series, hostile scales, many sweeps.

Three parts, float32 throughout, every sweep a jitted ``kernel.sample`` that also counts the
non-finite entries of every recorded floating-point site and of the log joint ``lp``:

* **long series**: ``WeakLimitGibbs`` on ``T = 10^6`` steps (1-D Gaussian,
  ``GaussianNIW.weakly_informative``, ``L = 10``, Gamma priors on gamma/alpha/kappa); as many of
  ``--long-sweeps`` (1000) sweeps as fit in ``--long-budget`` seconds; seconds per sweep (median),
  peak memory (``VmHWM`` of ``/proc/self/status`` and ``ru_maxrss``, read right after this part,
  which runs first) and the number of non-finite values over the sweeps run;
* **hostile scales**: ``D = 20`` full-covariance Gaussian (``GaussianNIW.weakly_informative``,
  ``max_states=10``), 3 regimes in 6 segments of ``--scale-steps / 6`` steps, the data shifted by
  ``1e5`` or multiplied by ``1e-5`` or ``1e8``; every kernel, ``--scale-sweeps`` sweeps from the
  default start; non-finite values over the sweeps and the normalized Hamming distance of the last
  state sequence to the truth (``nh.diagnostics.hamming_distance``, optimal relabelling);
* **many sweeps**: a small model (categorical, 3 symbols, ``T = 50``, ``max_states=6``, Gamma
  priors on gamma/alpha/kappa) and every kernel, sweeps in compiled blocks of ``--block`` for up to
  ``--many-budget`` seconds each (aim: ``10^5``); the number of sweeps run and of non-finite values.

Usage::

    python -m benchmarks.stress [--quick] [--parts long scales many] [--no-save]

``--quick`` shrinks every part to a smoke run (T = 2000, budgets of seconds, one kernel);
results go to the "Stress" section of ``benchmarks/results/stress.json``.  Run it on a quiet
machine: every figure is wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

from .harness import models, results
from .harness.models import KERNELS

QUESTION = "stress"
SECTION = "Stress"
SCALES = (("offset 1e5", 1e5, 1.0), ("scale 1e-5", 0.0, 1e-5), ("scale 1e8", 0.0, 1e8))


def say(msg=""):
    print(msg, flush=True)


def peak_memory_gb():
    """``(VmHWM, ru_maxrss)`` of this process in GB (``nan`` where unavailable)."""
    hwm = float("nan")
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return hwm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def make_kernel(name, model):
    return models.kernel(name, model, **({"num_particles": 10} if name == "PGAS" else {}))


def counting_step(kernel, args, block=1):
    """Jitted ``(state, args) -> (state, non-finite count)`` over ``block`` sweeps: the count is
    the number of NaN/inf entries of every floating-point site of ``z`` and of ``lp`` summed over
    the sweeps."""
    import jax
    import jax.numpy as jnp

    def count(state):
        leaves = [v for v in state.z.values() if jnp.issubdtype(v.dtype, jnp.inexact)] + [state.lp]
        return sum(jnp.sum(~jnp.isfinite(v)) for v in leaves)

    def run(state, args):
        def body(carry, _):
            s, n = carry
            s = kernel.sample(s, args, {})
            return (s, n + count(s)), None

        (state, n), _ = jax.lax.scan(body, (state, jnp.zeros((), jnp.int32)), None, length=block)
        return state, n

    return jax.jit(run)


def gamma_priors():
    import numpyro
    import numpyro.distributions as dist

    return (numpyro.sample("gamma", dist.Gamma(2.0, 1.0)), numpyro.sample("alpha", dist.Gamma(2.0, 1.0)),
            numpyro.sample("kappa", dist.Gamma(2.0, 1.0)))


# ------------------------------------------------------------------------------ long series
def long_series(T, L, max_sweeps, budget_s):
    import jax

    import numpyro_hdphmm as nh

    def model(y):
        gamma, alpha, kappa = gamma_priors()
        emission = nh.emissions.GaussianNIW.weakly_informative(y)
        nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa * 10.0, emission, max_states=L), obs=y)

    rng = np.random.default_rng(0)
    labels = np.repeat(rng.integers(0, 4, T // 1000 + 1), 1000)[:T]
    y = (np.array([-4.0, -1.0, 1.0, 4.0])[labels] + rng.normal(size=T)).astype(np.float32)[:, None]
    kernel = make_kernel("WeakLimitGibbs", model)
    t0 = time.perf_counter()
    state = jax.block_until_ready(kernel.init(jax.random.key(0), 0, None, (y,), {}))
    init_s = time.perf_counter() - t0
    step = counting_step(kernel, (y,))
    t0 = time.perf_counter()
    state, bad = jax.block_until_ready(step(state, (y,)))
    first_s = time.perf_counter() - t0
    times, nonfinite, start = [], int(bad), time.perf_counter()
    while 1 + len(times) < max_sweeps and time.perf_counter() - start < budget_s:
        t0 = time.perf_counter()
        state, bad = jax.block_until_ready(step(state, (y,)))
        times.append(time.perf_counter() - t0)
        nonfinite += int(bad)
    hwm, maxrss = peak_memory_gb()
    hamming = float(nh.diagnostics.hamming_distance(np.asarray(state.z["y_states"]), labels))
    return {"T": T, "L": L, "sweeps": 1 + len(times), "sweep_s": float(np.median(times)) if times else first_s,
            "init_s": init_s, "first_s": first_s, "nonfinite": nonfinite, "vm_hwm_gb": hwm, "maxrss_gb": maxrss,
            "hamming": hamming, "num_states": int(state.num_states)}


# ------------------------------------------------------------------------------ hostile scales
def scaled_data(num_steps, offset, scale, D=20, seed=0):
    """``(y (T, D) float32, truth (T,))``: 3 regimes (means 3 apart in every coordinate, a random
    correlated covariance each) in 6 segments, then ``offset + scale * y``."""
    rng = np.random.default_rng(seed)
    truth = np.repeat([0, 1, 2, 0, 1, 2], num_steps // 6)
    means = rng.normal(scale=3.0, size=(3, D))
    factors = rng.normal(scale=0.3, size=(3, D, D)) + np.eye(D)
    noise = np.einsum("tij,tj->ti", factors[truth], rng.normal(size=(truth.size, D)))
    return (offset + scale * (means[truth] + noise)).astype(np.float32), truth


def hostile_scales(num_steps, sweeps, kernels):
    import jax

    import numpyro_hdphmm as nh

    def model(y):
        emission = nh.emissions.GaussianNIW.weakly_informative(y)
        nh.sample("y", nh.StickyHDPHMM(1.0, 2.0, 10.0, emission, max_states=10), obs=y)

    rows = []
    for name in kernels:
        kernel = make_kernel(name, model)
        step = None
        for label, offset, scale in SCALES:
            y, truth = scaled_data(num_steps, offset, scale)
            t0 = time.perf_counter()
            try:
                state = kernel.init(jax.random.key(1), 0, None, (y,), {})
                step = step or counting_step(kernel, (y,), block=sweeps)
                state, bad = jax.block_until_ready(step(state, (y,)))
            except Exception as e:  # reported, not hidden
                rows.append({"kernel": name, "data": label, "error": f"{type(e).__name__}: {e}"[:200]})
                say(f"  {name:22s} {label:11s} ERROR {rows[-1]['error']}")
                continue
            states = np.asarray(state.z["y_states"])
            rows.append({"kernel": name, "data": label, "nonfinite": int(bad), "seconds": time.perf_counter() - t0,
                         "hamming": float(nh.diagnostics.hamming_distance(states, truth)),
                         "num_states": int(state.num_states)})
            r = rows[-1]
            say(f"  {name:22s} {label:11s} non-finite {r['nonfinite']}, Hamming {r['hamming']:.3f}, "
                f"{r['num_states']} states, {r['seconds']:.1f} s (incl. compilation on the first)")
    return rows


# ------------------------------------------------------------------------------ many sweeps
def many_sweeps(target, block, budget_s, kernels):
    import jax

    import numpyro_hdphmm as nh

    def model(y):
        gamma, alpha, kappa = gamma_priors()
        nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(3, 1.0), max_states=6), obs=y)

    y = (np.repeat([0, 1, 2, 1, 0], 10) + np.random.default_rng(2).integers(0, 2, 50)) % 3
    rows = []
    for name in kernels:
        kernel = make_kernel(name, model)
        t0 = time.perf_counter()
        try:
            state = kernel.init(jax.random.key(2), 0, None, (y,), {})
            step = counting_step(kernel, (y,), block=block)
            state, bad = jax.block_until_ready(step(state, (y,)))
        except Exception as e:  # reported, not hidden
            say(f"  {name:22s} ERROR {type(e).__name__}: {e}"[:300])
            continue
        first_s = time.perf_counter() - t0
        done, nonfinite, start = block, int(bad), time.perf_counter()
        while done < target and time.perf_counter() - start < budget_s:
            state, bad = jax.block_until_ready(step(state, (y,)))
            done, nonfinite = done + block, nonfinite + int(bad)
        seconds = time.perf_counter() - start
        rows.append({"kernel": name, "sweeps": done, "nonfinite": nonfinite,
                     "sweep_ms": 1e3 * seconds / max(done - block, 1), "first_s": first_s,
                     "num_states": int(state.num_states)})
        r = rows[-1]
        say(f"  {name:22s} {done} sweeps, non-finite {nonfinite}, {r['sweep_ms']:.3f} ms/sweep, "
            f"{r['num_states']} states at the end")
    return rows


# ------------------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and short budgets")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--long-steps", type=int, default=None, help="T of the long series (10^6; quick 10^5)")
    parser.add_argument("--long-sweeps", type=int, default=1000)
    parser.add_argument("--long-budget", type=float, default=None, help="seconds (600; quick 30)")
    parser.add_argument("--scale-steps", type=int, default=600)
    parser.add_argument("--scale-sweeps", type=int, default=None, help="(100; quick 20)")
    parser.add_argument("--many-sweeps", type=int, default=100_000)
    parser.add_argument("--block", type=int, default=None, help="sweeps per compiled block (1000; quick 100)")
    parser.add_argument("--many-budget", type=float, default=None, help="seconds per kernel (60; quick 10)")
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    parser.add_argument("--parts", nargs="+", default=["long", "scales", "many"], choices=["long", "scales", "many"])
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    pick = lambda value, full, quick: value if value is not None else (quick if args.quick else full)
    long_T = pick(args.long_steps, 1_000_000, 2000)
    long_budget = pick(args.long_budget, 600.0, 5.0)
    scale_sweeps = pick(args.scale_sweeps, 100, 3)
    block = pick(args.block, 1000, 10)
    many_budget = pick(args.many_budget, 60.0, 3.0)
    if args.quick:
        args.long_sweeps, args.many_sweeps = min(args.long_sweeps, 5), min(args.many_sweeps, 20)
        args.scale_steps = min(args.scale_steps, 120)
        if args.kernels == list(KERNELS):
            args.kernels = ["WeakLimitGibbs"]

    import jax

    began = time.perf_counter()
    lines = [f"Device: `{jax.devices()[0].device_kind}` ({jax.default_backend()}), float32, {os.cpu_count()} CPU "
             f"cores ({platform.processor() or platform.machine()}), jax {jax.__version__}; load average "
             f"{os.getloadavg()[0]:.1f} at the start (a shared machine: wall times are upper bounds). "
             "Non-finite: NaN/inf entries of every recorded floating-point site and of `lp`, summed over the sweeps.", ""]
    if "long" in args.parts:
        say(f"long series: T={long_T}, L=10, up to {args.long_sweeps} sweeps in {long_budget:.0f} s")
        r = long_series(long_T, 10, args.long_sweeps, long_budget)
        say(f"  {r}")
        lines += [
            f"**Long series** (`WeakLimitGibbs`, T = {r['T']:,} steps, 1-D Gaussian, L = {r['L']}, Gamma priors on "
            f"gamma/alpha/kappa): **{r['sweeps']}** of {args.long_sweeps} sweeps run in the {long_budget:.0f} s budget, "
            f"**{r['sweep_s']:.2f} s per sweep** (median; first sweep incl. compilation {r['first_s']:.1f} s, "
            f"`kernel.init` {r['init_s']:.1f} s), peak memory **{r['vm_hwm_gb']:.2f} GB** (`VmHWM`; `ru_maxrss` "
            f"{r['maxrss_gb']:.2f} GB; the process ran this part first), **{r['nonfinite']} non-finite values**, "
            f"normalized Hamming distance {r['hamming']:.3f} ({r['num_states']} states) after the last sweep.", ""]
    if "scales" in args.parts:
        say(f"hostile scales: D=20, T={args.scale_steps}, {scale_sweeps} sweeps")
        rows = hostile_scales(args.scale_steps, scale_sweeps, args.kernels)
        lines += [f"**Hostile scales**: D = 20 full-covariance Gaussian (`GaussianNIW.weakly_informative`, "
                  f"max_states = 10), T = {args.scale_steps} (3 regimes, 6 segments), the data shifted or scaled as "
                  f"shown, float32; {scale_sweeps} sweeps from the default start. Cell: non-finite values / "
                  "normalized Hamming distance of the last sweep's states (states in use).", "",
                  "| kernel | " + " | ".join(label for label, _, _ in SCALES) + " |",
                  "|---|" + "---|" * len(SCALES)]
        for name in args.kernels:
            cells = []
            for label, _, _ in SCALES:
                r = next(r for r in rows if r["kernel"] == name and r["data"] == label)
                cells.append(f"error: {r['error']}" if "error" in r else
                             f"{r['nonfinite']} / {r['hamming']:.3f} ({r['num_states']})")
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        lines.append("")
    if "many" in args.parts:
        say(f"many sweeps: up to {args.many_sweeps} per kernel, blocks of {block}, {many_budget:.0f} s each")
        rows = many_sweeps(args.many_sweeps, block, many_budget, args.kernels)
        lines += [f"**Many sweeps**: categorical emissions (3 symbols), T = 50, max_states = 6, Gamma priors on "
                  f"gamma/alpha/kappa; sweeps in compiled blocks of {block} for up to {many_budget:.0f} s per kernel "
                  f"(aim: {args.many_sweeps:,}).", "",
                  "| kernel | sweeps run | non-finite values | ms per sweep |", "|---|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| `{r['kernel']}` | {r['sweeps']:,} | {r['nonfinite']} | {r['sweep_ms']:.3f} |")
        lines.append("")
    lines.append(f"Total wall time of the run: {(time.perf_counter() - began) / 60:.1f} minutes.")
    text = "\n".join(lines)
    say()
    say(text)
    if not args.no_save:
        say(f"saved {results.save(QUESTION, SECTION, text, results.command_line('stress', argv))}")


if __name__ == "__main__":
    main()
