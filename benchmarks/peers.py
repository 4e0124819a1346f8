"""Side by side with other packages, each run in its own environment.

- ``--pyhsmm PYTHON``: ``WeakLimitGibbs`` against pyhsmm's ``WeakLimitStickyHDPHMM.resample_model()``
  (Cython/Eigen, float64, one OpenBLAS thread) on the same data and prior (constant gamma = 1,
  alpha = 1, kappa = 10, the data-scaled NIW prior): Fox et al.'s experiment A at T = 10^3, 10^4
  with L = 15, 50 and 2-D segments at T = 10^4, L = 30.  Alternating blocks of ``--block-sweeps``
  sweeps of each after compilation and 10 warm-up sweeps.  Ours runs ``--per-call`` sweeps per
  call of one compiled ``lax.fori_loop`` (as ``MCMC.run`` runs them; per-sweep time = the call's
  over ``per_call``); pyhsmm's sweep-by-sweep times are averaged over the same groups.  Build pyhsmm
  with the recipe of the project's shared bench folder (``pyhsmm/build.sh``); ``--pyhsmm-path DIR``
  for an in-place build.
- ``--dynamax PYTHON``: dynamax's ``hmm_posterior_sample`` against our FFBS (sequential), T x K grid,
  alternated configuration by configuration.
- jax-moseq: its own runners, ``benchmarks/slds_vs_jax_moseq.py`` and ``benchmarks/arhmm_vs_jax_moseq.py``.

Results: ``benchmarks/results/peers.json``, the input of the summary table of ``docs/benchmarks.md``.

Usage::

    python -m benchmarks.peers [--pyhsmm PYTHON [--pyhsmm-path DIR]] [--dynamax PYTHON] [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from .harness import models, peers, results, timing

QUESTION = "peers"
SECTION_PYHSMM = "Weak-limit sweep side by side with pyhsmm"
SECTION_DYNAMAX = "FFBS side by side with dynamax"
# (label, data, T, L, D)
PYHSMM_CONFIGS = (("Fox A", "expA", 1000, 15, 1), ("Fox A", "expA", 1000, 50, 1), ("Fox A", "expA", 10000, 15, 1),
                  ("Fox A", "expA", 10000, 50, 1), ("2-D", "2d", 10000, 30, 2))
QUICK_PYHSMM = (("Fox A", "expA", 300, 8, 1),)


def compare_pyhsmm(python, path=None, blocks=6, sweeps=10, configs=PYHSMM_CONFIGS, per_call=5, say=print):
    """``{(label, T, L): {"ours": [s, ...], "pyhsmm": [s, ...]}}``: per-sweep seconds, each the mean
    over a group of ``per_call`` consecutive sweeps (see the module doc)."""
    import jax

    if sweeps % per_call:
        raise ValueError(f"`per_call` must divide the sweeps per block ({sweeps}), got {per_call}.")
    out = {}
    with peers.Worker("pyhsmm", python, path) as worker, tempfile.TemporaryDirectory() as tmp:
        for label, data, T, L, D in configs:
            y = models.fox_a(T)[0] if data == "expA" else models.segmented_gaussian(T, D)
            npz = os.path.join(tmp, f"{data}_{T}.npz")
            np.savez(npz, y=np.asarray(y, np.float64).reshape(T, -1))
            worker.call(cmd="setup", data=npz, L=L, seed=0, warmup=10)
            ours = timing.kernel_contender(models.kernel("WeakLimitGibbs", models.fixed_model(L)), (y,),
                                           sweeps_per_call=per_call)
            for _ in range(-(-10 // per_call)):
                ours.state = jax.block_until_ready(ours.call(ours.state))
            mine, theirs = [], []
            for _ in range(blocks):
                for _ in range(sweeps // per_call):
                    t0 = time.perf_counter()
                    ours.state = jax.block_until_ready(ours.call(ours.state))
                    mine.append((time.perf_counter() - t0) / per_call)
                times = worker.call(cmd="run", n=sweeps)["times"]
                theirs += [float(np.mean(times[i:i + per_call])) for i in range(0, sweeps, per_call)]
            out[(label, T, L)] = {"ours": mine, "pyhsmm": theirs, "compile_s": ours.compile_s}
            say(f"{label} T={T} L={L}: ours min {min(mine) * 1e3:.2f} ms, pyhsmm min {min(theirs) * 1e3:.2f} ms, "
                f"speed-up {min(theirs) / min(mine):.2f}x")
    return out


def save_pyhsmm(res, blocks, sweeps, per_call, command):
    rows, comps = [], []
    for (label, T, L), r in res.items():
        o, p = np.asarray(r["ours"]) * 1e3, np.asarray(r["pyhsmm"]) * 1e3
        rows.append([label, T, L, f"{o.min():.2f}", f"{p.min():.2f}", f"**{p.min() / o.min():.2f}x**",
                     f"{np.median(o):.2f}", f"{np.median(p):.2f}", f"{np.median(p) / np.median(o):.2f}x"])
        for stat, a, b in (("minimum", o.min(), p.min()), ("median", np.median(o), np.median(p))):
            comps.append({"kernel": "WeakLimitGibbs", "peer": "pyhsmm", "config": f"{label}, T = {T}, L = {L}",
                          "ours_ms": round(float(a), 3), "peer_ms": round(float(b), 3),
                          "ratio": round(float(b / a), 2), "statistic": stat})
    intro = (f"Side by side with pyhsmm, one process each, {blocks} alternating blocks of {sweeps} sweeps after 10 "
             "warm-up sweeps (and our compilation); constant gamma = 1, alpha = 1, kappa = 10 and the data-scaled "
             "NIW prior, the same data; ours float32, pyhsmm float64 with one OpenBLAS thread (ours: "
             f"{per_call} sweeps per compiled call; pyhsmm: sweep by sweep, averaged over the same groups of "
             f"{per_call}).  ms per sweep, minimum and median over the groups; speed-up = pyhsmm / ours.")
    tab = results.table(["data", "T", "L", "ours min (ms)", "pyhsmm min (ms)", "speed-up (minima)", "ours median",
                         "pyhsmm median", "speed-up (medians)"], rows, ["l"] + ["r"] * 8)
    return results.save(QUESTION, SECTION_PYHSMM, [results.text(intro), tab], command, comparisons=comps,
                        data=[{"config": list(k), **v} for k, v in res.items()])


def compare_dynamax(python, Ts, Ks, repeats, say=print):
    """Rows ``(T, K, ours ms, dynamax ms)``: the same inputs, our sequential FFBS here, dynamax's
    in its worker, configuration by configuration."""
    import jax
    import jax.numpy as jnp

    from numpyro_hdphmm._core.hmm import hmm_posterior_sample

    rows, versions = [], {}
    with peers.Worker("dynamax", python) as worker:
        for T in Ts:
            for K in Ks:
                rng = np.random.default_rng(0)  # the worker's generator and seed
                li = jnp.asarray(np.log(rng.dirichlet(np.ones(K))).astype(np.float32))
                A = 0.9 * np.eye(K) + 0.1 * rng.dirichlet(np.ones(K), size=K)
                ll = jnp.asarray(rng.normal(size=(T, K)).astype(np.float32))
                la = jnp.asarray(np.log(A), jnp.float32)
                f = jax.jit(hmm_posterior_sample)
                key = jax.random.key(0)
                ours = 1e3 * min(timing.time_calls(lambda: f(key, li, la, ll), repeats))
                reply = worker.call(cmd="ffbs", T=T, K=K, repeats=repeats, seed=0)
                versions = reply.get("versions", versions)
                rows.append((T, K, ours, reply["ms"]))
                say(f"FFBS T={T} K={K}: ours {ours:.3f} ms, dynamax {reply['ms']:.3f} ms")
    return rows, versions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyhsmm", metavar="PYTHON", help="Python of an environment with pyhsmm")
    parser.add_argument("--pyhsmm-path", help="PYTHONPATH for the pyhsmm worker (an in-place build)")
    parser.add_argument("--dynamax", metavar="PYTHON", help="Python of an environment with dynamax")
    parser.add_argument("--quick", action="store_true", help="one tiny configuration per peer")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--block-sweeps", type=int, default=10)
    parser.add_argument("--per-call", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if not (args.pyhsmm or args.dynamax):
        parser.error("name at least one peer: --pyhsmm PYTHON and/or --dynamax PYTHON")
    command = results.command_line("peers", argv)
    if args.pyhsmm:
        blocks = 2 if args.quick else args.blocks
        res = compare_pyhsmm(args.pyhsmm, args.pyhsmm_path, blocks, args.block_sweeps,
                             QUICK_PYHSMM if args.quick else PYHSMM_CONFIGS, args.per_call)
        if not args.no_save:
            print("saved", save_pyhsmm(res, blocks, args.block_sweeps, args.per_call, command))
    if args.dynamax:
        Ts, Ks = ([300], [8]) if args.quick else ([1000, 10000, 100000], [15, 50, 200])
        rows, versions = compare_dynamax(args.dynamax, Ts, Ks, 2 if args.quick else args.repeats)
        comps = [{"kernel": "FFBS (every kernel's state update)", "peer": "dynamax", "config": f"T = {T}, K = {K}",
                  "ours_ms": round(o, 3), "peer_ms": round(d, 3), "ratio": round(d / o, 2), "statistic": "minimum"}
                 for T, K, o, d in rows]
        tab = results.table(["T", "K", "ours, sequential (ms)", "dynamax (ms)", "speed-up"],
                            [[T, K, f"{o:.2f}", f"{d:.2f}", f"{d / o:.2f}x"] for T, K, o, d in rows], ["r"] * 5)
        if not args.no_save:
            print("saved", results.save(QUESTION, SECTION_DYNAMAX, [results.text(
                "Milliseconds per FFBS, float32, the same inputs; ours here, dynamax's `hmm_posterior_sample` in its "
                f"own environment ({', '.join(f'{k} {v}' for k, v in versions.items())}), minimum over repeats after a "
                "compiling call, configuration by configuration."), tab], command, comparisons=comps))


if __name__ == "__main__":
    main()
