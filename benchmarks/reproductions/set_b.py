"""PGAS synthetic set B (Tripuraneni et al. 2015, experiments, Figs. 4-5): every kernel from 3
and from 30 states.

``nh.datasets.pgas_set_b``: ``T = 4000``, 10 states, self-transition 0.75 (off-diagonal
``0.25 / 9``), Gaussian emissions with s.d. 0.5 and means ``-9, -7, ..., 9`` (the printed "2.0
apart between -10 and 10" cannot hold ten points; see the data set's docstring).  The model is
set A's (:mod:`benchmarks.reproductions.set_a`): the non-sticky iHMM with the beam toolbox's hyperpriors
``alpha ~ Gamma(4, 1)``, ``gamma ~ Gamma(3, 6)``, the precision nearly fixed at its true value 4
(``Gamma(1000, 250)``) and the paper's base measure for the means, ``N(0, 2^2)``, which puts the
outer true means 4.5 prior standard deviations out.  Capacity (``L`` for the weak limit) 60.

Each configuration runs ``--chains`` vectorized chains (default 8) for ``--sweeps`` sweeps from
uniform random labels over 3 or 30 states (the owned sites made consistent with them as in
set A), in compiled blocks of ``--block`` sweeps whose wall time is recorded, so the traces can
be read against seconds.  Recorded per sweep and chain: states in use, large states (>= 1% of
the steps, 40), the log joint ``lp``; after the last sweep the normalized Hamming distance to the
truth.  Configurations: ``WeakLimitGibbs``, ``BeamSampler``, ``DirectAssignmentGibbs`` and
``PGAS`` with ``N`` in {10, 50} and both proposals (the paper's Fig. 5 ablation).

Usage::

    python -m benchmarks.reproductions set-b [--configs NAME ...] [--starts 3 30] [--sweeps 1000]
        [--chains 8] [--out DIR]          # run, one .npz per configuration and start in DIR
    python -m benchmarks.reproductions set-b --report [--out DIR] [--write]

``--report`` reads the ``.npz`` files, prints the table and draws the figure; ``--write`` puts
the table in the "PGAS synthetic set B" section of ``benchmarks/results/reproductions.json`` and the figure in
``docs/_static/pgas_set_b.png`` (shown on the PGAS page).
"""

from __future__ import annotations

import argparse
import sys
import glob
import os
import time

import numpy as np

from ..harness import models
from ..harness import results as suite_results
from ..harness.models import set_a_model
from .set_a import infinite_beta, weak_limit_init

QUESTION = "reproductions"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/reproductions.json``; returns the path."""
    return suite_results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## PGAS synthetic set B"
CAPACITY = 60
TRUE_STATES = 10
CONFIGS = {
    "WeakLimitGibbs": ("WeakLimitGibbs", {}),
    "BeamSampler": ("BeamSampler", {}),
    "DirectAssignmentGibbs": ("DirectAssignmentGibbs", {}),
    "PGAS-N10-prior": ("PGAS", {"num_particles": 10, "proposal": "prior"}),
    "PGAS-N10-posterior": ("PGAS", {"num_particles": 10, "proposal": "posterior"}),
    "PGAS-N50-prior": ("PGAS", {"num_particles": 50, "proposal": "prior"}),
    "PGAS-N50-posterior": ("PGAS", {"num_particles": 50, "proposal": "posterior"}),
}


def run(config, start, sweeps, chains, block, seed=0, say=print):
    """One configuration from ``start`` random labels; returns the traces (chains first)."""
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh
    from numpyro_hdphmm import infer

    cls_name, kwargs = CONFIGS[config]
    data = nh.datasets.pgas_set_b(num_steps=4000, seed=seed)
    y = data.observations.astype(np.float32)
    T = y.shape[0]
    kernel = getattr(infer, cls_name)(set_a_model(CAPACITY), **kwargs)
    rng = np.random.default_rng(seed + start)
    init_states = jnp.asarray(rng.integers(0, start, size=(chains, T)), jnp.int32)
    init = {"y_states": init_states}
    if cls_name == "WeakLimitGibbs":
        init.update(weak_limit_init(init_states, y, CAPACITY, num_labels=start))
    elif cls_name == "DirectAssignmentGibbs":
        init["y_beta"] = infinite_beta(chains, CAPACITY, num_labels=start)
    keys = jax.random.split(jax.random.key(seed), chains)
    t0 = time.perf_counter()
    state = jax.block_until_ready(kernel.init(keys, 0, init, (y,), {}))
    min_steps = int(np.ceil(0.01 * T))

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        counts = jax.vmap(lambda z: jnp.zeros(CAPACITY, jnp.int32).at[z].add(1))(s.z["y_states"])
        return s, (s.num_states, jnp.sum(counts >= min_steps, -1), s.lp, s.overflow)

    compiled = jax.jit(lambda s: jax.lax.scan(body, s, None, length=block)).lower(state).compile()
    compile_s = time.perf_counter() - t0
    traces, block_seconds = [], []
    for b in range(sweeps // block):
        t0 = time.perf_counter()
        state, out = jax.block_until_ready(compiled(state))
        block_seconds.append(time.perf_counter() - t0)
        traces.append([np.asarray(a) for a in out])
        say(f"  {config} from {start}: sweep {(b + 1) * block}, states {np.asarray(out[0][-1]).tolist()}, "
            f"large {np.asarray(out[1][-1]).tolist()}, {block_seconds[-1]:.1f} s")
    num_states, num_large, lp, overflow = (np.concatenate([t[i] for t in traces]).T for i in range(4))
    final = np.asarray(state.z["y_states"])
    hamming = np.array([float(nh.diagnostics.hamming_distance(final[c], data.states)) for c in range(chains)])
    return {"num_states": num_states, "num_large": num_large, "lp": lp, "overflow": overflow,
            "block_seconds": np.asarray(block_seconds), "block": block, "compile_s": compile_s,
            "hamming": hamming, "config": config, "start": start}


def _first(hits):
    return int(np.argmax(hits)) + 1 if np.any(hits) else None


def _median_or_dash(values, fmt="{:.0f}"):
    """Median over chains of a per-chain count, ``-`` when fewer than half the chains got there."""
    got = [v for v in values if v is not None]
    if 2 * len(got) < len(values):
        return "-"
    return fmt.format(float(np.median([np.inf if v is None else v for v in values])))


def table(results):
    """Markdown table of the runs (one row per configuration and start)."""
    lines = [
        "| kernel | start | sweeps | chains at 10 large states by the end | sweeps to 10 large (median) | seconds to 10 large "
        "(median) | large states at the end (per chain) | states in use at the end (mean) | Hamming at the end "
        "(median, range) | lp, last 100 sweeps (mean) | ms / sweep (chains together) |",
        "|---|---:|---:|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in results:
        sweeps = r["num_large"].shape[1]
        per_sweep = float(np.sum(r["block_seconds"])) / sweeps
        reach = [_first(row == TRUE_STATES) for row in r["num_large"]]
        reach_s = [None if v is None else v * per_sweep for v in reach]
        at_end = int(np.sum(r["num_large"][:, -1] == TRUE_STATES))
        ham = r["hamming"]
        lines.append(
            f"| {r['config']} | {r['start']} | {sweeps} | {at_end} / {len(ham)} | {_median_or_dash(reach)} | "
            f"{_median_or_dash(reach_s, '{:.1f}')} | {', '.join(map(str, r['num_large'][:, -1]))} | "
            f"{r['num_states'][:, -1].mean():.1f} | {np.median(ham):.3f} ({ham.min():.3f}-{ham.max():.3f}) | "
            f"{r['lp'][:, -100:].mean():.0f} | {1e3 * per_sweep:.0f} |")
    return "\n".join(lines)


def figure(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    starts = sorted({r["start"] for r in results})
    fig, axes = plt.subplots(len(starts), 3, figsize=(15, 4.2 * len(starts)), squeeze=False)
    names = list(dict.fromkeys(r["config"] for r in results))
    colors = {n: plt.cm.tab10(i) for i, n in enumerate(names)}
    for row, start in enumerate(starts):
        for r in (r for r in results if r["start"] == start):
            sweeps = r["num_large"].shape[1]
            x = np.arange(1, sweeps + 1)
            seconds = np.cumsum(np.repeat(r["block_seconds"] / r["block"], r["block"]))
            kw = dict(color=colors[r["config"]], label=r["config"])
            axes[row, 0].plot(x, r["num_large"].mean(0), **kw)
            axes[row, 1].plot(seconds, r["num_large"].mean(0), **kw)
            axes[row, 2].plot(x, np.median(r["lp"], 0), **kw)
        axes[row, 0].set(xlabel="sweep", ylabel="large states (mean over chains)", title=f"from {start} states")
        axes[row, 1].set(xlabel="seconds (all chains together)", ylabel="large states (mean over chains)",
                         xscale="log", title=f"from {start} states")
        axes[row, 2].set(xlabel="sweep", ylabel="log joint (median over chains)", title=f"from {start} states")
        lo = min(np.percentile(r["lp"][:, r["lp"].shape[1] // 10:], 1) for r in results if r["start"] == start)
        hi = max(r["lp"].max() for r in results if r["start"] == start)
        axes[row, 2].set_ylim(lo, hi + 0.05 * (hi - lo))
        for ax in axes[row, :2]:
            ax.axhline(TRUE_STATES, color="k", lw=0.8, ls=":")
    axes[0, 0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--starts", nargs="+", type=int, default=[3, 30])
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--block", type=int, default=50, help="sweeps per compiled call (timed)")
    parser.add_argument("--out", default=os.path.join(suite_results.RESULTS, "raw", "pgas_set_b"))
    parser.add_argument("--report", action="store_true", help="table and figure from the saved runs")
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: the first configuration, start 3, 4 sweeps of 2 chains, nothing saved")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)
    if args.quick:
        args.configs, args.starts, args.sweeps, args.chains, args.block = args.configs[:1], [3], 4, 2, 2

    def say(msg=""):
        print(msg, flush=True)

    if not args.report:
        import jax

        os.makedirs(args.out, exist_ok=True)
        for start in args.starts:
            for config in args.configs:
                r = run(config, start, args.sweeps, args.chains, args.block, say=say)
                r["device"] = f"{jax.devices()[0].device_kind} ({jax.default_backend()}), jax {jax.__version__}"
                r["load"] = os.getloadavg()[0]
                np.savez(os.path.join(args.out, f"{config}-from{start}.npz"), **r)
                say(f"{config} from {start}: final large {r['num_large'][:, -1].tolist()}, Hamming "
                    f"{np.round(r['hamming'], 3).tolist()}, {np.sum(r['block_seconds']):.0f} s "
                    f"(compile {r['compile_s']:.0f} s)")
        return
    files = sorted(glob.glob(os.path.join(args.out, "*.npz")))
    if not files:
        raise SystemExit(f"no runs in {args.out}: run without --report first")
    results = [{k: (v.item() if v.ndim == 0 else v) for k, v in np.load(f).items()} for f in files]
    order = {c: i for i, c in enumerate(CONFIGS)}
    results.sort(key=lambda r: (r["start"], order[r["config"]]))
    text = table(results)
    say(text)
    png = os.path.join(args.out, "pgas_set_b.png")
    if args.write:
        png = os.path.join(models.REPO, "docs", "_static", "pgas_set_b.png")
    say(f"figure: {figure(results, png)}")
    if args.write:
        r0 = results[0]
        chains = r0["num_large"].shape[0]
        loads = ", ".join(f"{r['load']:.1f}" for r in results)
        intro = (
            f"Device: {r0['device']}, float32, 2 CPU cores; load average at the end of each run: {loads} "
            "(shared machine: seconds are upper bounds).\n\n"
            f"`nh.datasets.pgas_set_b` (T = 4000, 10 states, self-transition 0.75, s.d. 0.5, means -9, -7, ..., 9), "
            f"the set A model (non-sticky, alpha ~ Gamma(4, 1), gamma ~ Gamma(3, 6), precision nearly fixed at 4, "
            f"means ~ N(0, 2^2)), capacity / L = {CAPACITY}; {chains} vectorized chains per row from uniform random "
            f"labels over 3 or 30 states, the sweeps of each row.  \"Large\" states hold >= 1% of the steps (40); "
            "\"sweeps / seconds to 10 large\": first sweep with exactly 10 large states, median over the chains "
            "(- : fewer than half the chains got there); seconds = sweeps x the run's mean seconds per sweep of all "
            "chains together.  Figure: `docs/_static/pgas_set_b.png`, on the PGAS page.")
        cmd = ("python -m benchmarks.reproductions set-b [--configs ... --sweeps S] (once per group of rows) && "
               "python -m benchmarks.reproductions set-b --report --write")
        say(f"wrote {_save(SECTION, cmd, intro + chr(10) + chr(10) + text)}")


if __name__ == "__main__":
    main()
