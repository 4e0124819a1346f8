"""The sticky HDP-AR-HMM sweep side by side with jax-moseq's AR-HMM (issue 40), each in its own environment.

What is compared.  jax-moseq's ``jax_moseq.models.arhmm`` is a sticky HDP-AR-HMM (weak limit) on
observed trajectories ``x``; ``resample_model`` is one Gibbs sweep (transitions, AR parameters,
modes by FFBS).  Ours is ``nh.infer.WeakLimitGibbs`` on ``nh.StickyHDPHMM(gamma, alpha, kappa,
nh.emissions.AutoRegressive(r, ...), max_states=K)``, the same sweep.  Where the two models coincide:

- modes: ``beta ~ Dir(gamma / K)``, ``pi_j ~ Dir(alpha beta + kappa e_j)``, ``K`` states, fixed
  ``gamma, alpha, kappa`` on both sides;
- dynamics: order ``r = --nlags`` (3 by default, keypoint-MoSeq's), ``[A_k^(1) ... A_k^(r) b_k] | Q_k
  ~ MN(M_0, Q_k, K_0_scale I)`` with ``M_0`` the identity on the most recent lag, ``Q_k ~ IW(D + 2,
  S_0_scale I)`` (ours: ``AutoRegressive(r, loc=M_0, col_precision=I / K_0_scale, df=D + 2,
  scale=S_0_scale I)``; jax-moseq orders the lags oldest first, ours most recent first: the workers
  report both in jax-moseq's order).

The differences that remain (not removable from outside either package): jax-moseq's first ``r``
frames of each sequence are regressors only (no mode; ``z`` has ``T - r`` entries) and its initial
mode distribution is uniform; ours models them with the presample values ``x_{-1} = ... = x_{-r} = 0``
and a mode at every step, with a learned start row.  jax-moseq reuses one random key for every block
of a sweep.  jax-moseq runs in float64 (as keypoint-moseq configures JAX); ours in float32 (the
default) and, as a second contender, float64.

Data.  A synthetic switching AR(r): ``--modes`` regimes of ``D = --dim`` dimensions, each with its
own stable lag matrices (the most recent lag a damped rotation of its own angles, the older lags
small) and intercept, ``Q = 0.01 I``, sticky switches (stay 0.98), from zero; ``--sequences``
sequences of ``T`` steps each (``T`` the length of one sequence).

Timing.  As ``benchmarks/slds_vs_jax_moseq.py`` (:mod:`benchmarks.harness.side_by_side`): each side
in its own process (``benchmarks/workers/jax_moseq_arhmm_worker.py`` under jax-moseq's Python,
``benchmarks/workers/hdphmm_arhmm_worker.py`` under ours), one per side and precision for the
whole run.  Start-up timed apart (``init``: ours ``kernel.init``, the data-driven start; jax-moseq
``init_model``, prior draws and FFBS; ``compile``: ours the ahead-of-time ``lower().compile()`` of
``n`` sweeps in one ``lax.fori_loop``, jax-moseq its first sweeps' time beyond the steady per-sweep
time); then one untimed block of ``n`` sweeps each, then ``--blocks`` alternating blocks (ours,
theirs, ours, ...) of ``n`` sweeps each.  Our block is one call of the compiled ``fori_loop`` of
``kernel.sample``; jax-moseq's a Python loop of ``resample_model`` calls (as the package runs),
blocked at the end.

Log joint.  After all blocks (``(1 + blocks) n`` sweeps from each side's default start) the driver
computes from each side's state with the same numpy code (float64,
:func:`~benchmarks.harness.side_by_side.ar_log_joint`): ``sum_{t>=r} log N(x_t | A_{z_t} [x_{t-1};
...; x_{t-r}] + b_{z_t}, Q_{z_t}) + sum_{t>r} log pi[z_{t-1}, z_t]`` over the sequences (the first
``r`` steps, where the conventions differ, left out), and records each side's own figure (ours
``lp``, the log joint with the priors; jax-moseq ``model_likelihood``, x + z).  One chain per side:
a single draw, not a posterior average.

Set-up: jax-moseq in its own venv (``benchmarks/slds_vs_jax_moseq.py``'s docstring).  Run (from the
repository root, our environment)::

    python -m benchmarks.arhmm_vs_jax_moseq --moseq-python /tmp/moseq_venv/bin/python
    python -m benchmarks.arhmm_vs_jax_moseq --moseq-python ... --configs 10000x1:50 100000x1:100 --sweeps 10
    python -m benchmarks.arhmm_vs_jax_moseq --moseq-python ... --compare /path/to/other/checkout  # before-f32 too
    python -m benchmarks.arhmm_vs_jax_moseq --moseq-python ... --quick     # checks that it runs, records nothing

A configuration is ``TxN:K`` (``N`` sequences of ``T`` steps, capacity ``K``).  Prints a markdown
table and saves it with the raw numbers as a section of ``benchmarks/results/peers.json`` (one
section per ``--title-suffix``, so that a long configuration can be run and kept on its own).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from .harness.models import REPO
from .harness.peers import Worker
from .harness.results import command_line, save, table
from .harness.results import text as text_block
from .harness.side_by_side import (MOSEQ, add_ratios, alternate, ar_log_joint, checked, comparisons, contender_order,
                                   load_range, precision, ratio_line, summarize, uptime)

QUESTION = "peers"
TITLE = "HDP-AR-HMM sweep side by side with jax-moseq"
CONFIGS = ("10000x1:50", "10000x1:100", "1000x10:50", "100000x1:100")

INTRO = (
    "jax-moseq's AR-HMM sweep (`jax_moseq.models.arhmm.resample_model`) against ours (`WeakLimitGibbs` on "
    "`nh.StickyHDPHMM` with `nh.emissions.AutoRegressive` emissions) where the models coincide.  Synthetic "
    "switching AR({nlags}) data ({modes} regimes, D = {dim}, Q = 0.01 I, sticky switches), latent dimension "
    "D = {dim}, {nlags} lags (m = {m} regressors with the intercept), K the weak-limit capacity, gamma = {gamma:g}, "
    "alpha = {alpha:g}, kappa = {kappa:g} fixed on both sides, the same MNIW prior (`M_0` the identity on the most "
    "recent lag, column covariance {K_0_scale:g} I, `IW(D + 2, {S_0_scale:g} I)`).  Each side in its own process; "
    "start-up timed apart; one untimed block of N sweeps, then {blocks} alternating blocks of N sweeps "
    "({order}).  Ours: one compiled `lax.fori_loop` of `kernel.sample` per block (no NumPyro per-sample "
    "collection); jax-moseq: a Python loop of `resample_model` (as the package runs).  \"log joint\": computed by "
    "the driver with the same numpy code from each side's state after (1 + {blocks}) N sweeps, "
    "`sum_{{t>=r}} log N(x_t | A_z [x_{{t-1}}; ...; x_{{t-r}}] + b_z, Q_z) + sum_{{t>r}} log pi[z_{{t-1}}, z_t]` "
    "(dyn / modes, summed over the sequences); jax-moseq's own `model_likelihood` (x + z) and our `lp` (with the "
    "priors) are the \"own figure\".  One chain per side: one draw, not a posterior average.{compare}")
COLUMNS_NOTE = (
    "\"N\": sweeps per block.  \"compile s\": ours, the ahead-of-time compilation of the N-sweep loop; jax-moseq, "
    "the time of its first N sweeps beyond N steady sweeps (its jitted functions compile on the first calls).  "
    "\"init s\": ours `kernel.init` (discovery, data-driven start), jax-moseq `init_model` (prior draws, FFBS).  "
    "\"speed-up\": jax-moseq's time per sweep over ours, by minima and by medians over the blocks (2: ours twice "
    "as fast).  Load average (1 minute) before the blocks: {loads}.")
DIFFERENCES = (
    "Model differences that remain: jax-moseq's first r frames of each sequence are regressors only (no mode) and "
    "its initial mode distribution is uniform; ours models them from the presample values x_{-1} = ... = x_{-r} = 0 "
    "with a mode at every step and a learned start row (the driver's log joint leaves the first r steps out).  "
    "jax-moseq reuses one random key for every block of a sweep.  Both runs start from each package's default "
    "start (ours data-driven, jax-moseq's from the prior), so the log joints after a few hundred sweeps are of "
    "chains at different stages, not a test of either sampler.")


def parse_config(text: str):
    """``"TxN:K"`` -> ``(T, N, K)``."""
    try:
        size, K = text.split(":")
        T, N = size.split("x")
        return int(T), int(N), int(K)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a configuration is TxN:K (e.g. 10000x1:50), got {text!r}") from None


def make_data(T: int, N: int = 1, D: int = 10, nlags: int = 3, modes: int = 8, seed: int = 0):
    """``x (N, T, D)`` of a sticky switching AR(``nlags``) process and its modes ``z (N, T)`` (module
    docstring): regime ``k`` has the most recent lag ``0.7 R_k`` (``R_k`` block-diagonal rotations by
    angles of its own), older lags ``0.15 / j`` times a random orthogonal matrix (spectral radius below
    1), an intercept ``b_k ~ N(0, 0.3^2)``, noise ``N(0, 0.01 I)``; stay probability 0.98."""
    rng = np.random.default_rng(seed)

    def rotations(angles):
        M = np.zeros((D, D))
        for i, th in enumerate(angles):
            M[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]
        if D % 2:
            M[-1, -1] = 1.0
        return M

    A = np.zeros((modes, nlags, D, D))
    b = rng.normal(0, 0.3, (modes, D))
    for k in range(modes):
        A[k, 0] = 0.7 * rotations(rng.uniform(0.05, 0.8, D // 2))
        for j in range(1, nlags):
            Qm, _ = np.linalg.qr(rng.normal(size=(D, D)))
            A[k, j] = (0.15 / j) * Qm
    x = np.zeros((N, T, D))
    z = np.zeros((N, T), int)
    for n in range(N):
        for t in range(T):
            z[n, t] = z[n, t - 1] if t and rng.random() < 0.98 else rng.integers(modes)
            mean = b[z[n, t]].copy()
            for j in range(1, nlags + 1):
                if t - j >= 0:
                    mean += A[z[n, t], j - 1] @ x[n, t - j]
            x[n, t] = mean + rng.normal(0, 0.1, D)
    return {"x": x, "z": z}


def run_config(T, N, K, args, data_dir, log):
    data = make_data(T, N, D=args.dim, nlags=args.nlags, modes=args.modes, seed=args.seed)
    path = os.path.join(data_dir, f"arhmm_T{T}_N{N}.npz")
    np.savez(path, x=data["x"])
    label = f"T={T} N={N} K={K}"
    hyper = dict(data=path, K=K, alpha=args.alpha, gamma=args.gamma, kappa=args.kappa, S_0_scale=args.S_0_scale,
                 K_0_scale=args.K_0_scale, nlags=args.nlags, seed=args.seed, n=args.sweeps)
    workers, setups = {}, {}
    try:
        log(f"{label}: jax-moseq set-up ({uptime()})")
        workers[MOSEQ] = Worker("jax_moseq_arhmm", python=args.moseq_python, env={"JAX_ENABLE_X64": "1"})
        setups[MOSEQ] = checked(workers[MOSEQ], cmd="setup", **hyper)
        packages = (("ours", REPO, args.precisions),) + ((("before", args.compare, args.compare_precisions),)
                                                         if args.compare else ())
        for side, package, precisions in packages:
            for prec in precisions:
                name = f"{side}-{prec}"
                log(f"{label}: {name} set-up, the package of {package} ({uptime()})")
                workers[name] = Worker("hdphmm_arhmm", python=sys.executable, path=package,
                                       env={"JAX_ENABLE_X64": "1" if prec == "f64" else "0"})
                setups[name] = checked(workers[name], cmd="setup", **hyper)
        order = contender_order(list(workers))
        times, loads = alternate(workers, order, args.blocks, args.sweeps, log, label)
        states = {name: checked(w, cmd="state") for name, w in workers.items()}
        profiles = {}
        if args.profile:
            for name in order:
                if name == MOSEQ:
                    continue
                log(f"{label}: profile of {name} ({uptime()})")
                try:
                    profiles[name] = {**checked(workers[name], cmd="profile", n=args.profile_sweeps),
                                      "uptime": uptime()}
                except RuntimeError as err:  # the timings above are kept
                    log(f"profile failed: {err}")
    finally:
        for w in workers.values():
            w.close()
    out = {"T": T, "N": N, "K": K, "D": args.dim, "nlags": args.nlags, "sweeps_per_block": args.sweeps,
           "blocks": args.blocks, "sides": {}, "loads": loads, "profiles": profiles}
    for name in order:
        lj = ar_log_joint(data["x"], states[name]["z"], states[name]["Ab"], states[name]["Q"], states[name]["pi"],
                          args.nlags)
        lj["total"] = lj["dyn"] + lj["modes"]
        out["sides"][name] = {**summarize(name, times[name], setups[name], args.sweeps), "log_joint": lj,
                              "own": states[name]["own"], "num_states": states[name]["num_states"]}
    add_ratios(out["sides"])
    return out


def data_label(res) -> str:
    return f"T = {res['T']}" + (f" x {res['N']} sequences" if res["N"] > 1 else "") + f", K = {res['K']}"


COLUMNS = ["data", "side", "precision", "N", "ms / sweep (min)", "median", "speed-up (min)", "speed-up (median)",
           "init s", "compile s", "log joint after (1 + blocks) N sweeps", "dyn / modes", "own figure", "modes used"]


def render(results):
    rows = []
    for res in results:
        theirs = res["sides"][MOSEQ]
        for name, s in res["sides"].items():
            own = s["own"]
            own_s = ("lp %.0f" % own["lp"]) if "lp" in own else ("x+z %.0f" % sum(own.values()))
            up = ("1", "1") if name == MOSEQ else ("**%.2fx**" % (theirs["min_s"] / s["min_s"]),
                                                   "%.2fx" % (theirs["median_s"] / s["median_s"]))
            rows.append([data_label(res), name, precision(name), str(res["sweeps_per_block"]), "%.1f" % (1e3 * s["min_s"]),
                         "%.1f" % (1e3 * s["median_s"]), *up, "%.1f" % s["init_s"], "%.1f" % s["compile_s"],
                         "%.0f" % s["log_joint"]["total"], "%.0f / %.0f" % (s["log_joint"]["dyn"], s["log_joint"]["modes"]),
                         own_s, str(s["num_states"])])
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "|".join(["---"] * 3 + ["---:"] * (len(COLUMNS) - 3)) + "|\n"
    md = head + "\n".join("| " + " | ".join(r) + " |" for r in rows)
    prof_rows = []
    for res in results:
        for name, p in res.get("profiles", {}).items():
            prof_rows.append([data_label(res), name] + ["%.1f" % (1e3 * p[k]) if k in p else "-" for k in (
                "sweep", "loglik", "ffbs", "stats_labels", "stats_weights", "emission_update")])
    prof_cols = ["data", "side", "whole sweep", "log-likelihoods (T, K)", "FFBS", "statistics from the labels",
                 "statistics from one-hot weights", "emission update (as the sweep)"]
    if prof_rows:
        md += ("\n\nOur sweep by piece (ms per sweep, each piece compiled and timed on its own, best of 3):\n\n| "
               + " | ".join(prof_cols) + " |\n|---|---|" + "---:|" * (len(prof_cols) - 2) + "\n"
               + "\n".join("| " + " | ".join(r) + " |" for r in prof_rows))
    return md, rows, prof_cols, prof_rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moseq-python", required=True, help="the Python of the venv where jax-moseq is installed")
    parser.add_argument("--configs", type=parse_config, nargs="+", default=[parse_config(c) for c in CONFIGS],
                        help="configurations TxN:K (N sequences of T steps, capacity K); default: " + " ".join(CONFIGS))
    parser.add_argument("--sweeps", type=int, default=20, help="sweeps per block (N)")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--nlags", type=int, default=3, help="r, the autoregressive order on both sides")
    parser.add_argument("--dim", type=int, default=10, help="D, the dimension of the trajectories")
    parser.add_argument("--modes", type=int, default=8, help="regimes of the synthetic data")
    parser.add_argument("--precisions", nargs="+", default=["f32", "f64"], choices=["f32", "f64"],
                        help="our contenders (jax-moseq always runs in float64)")
    parser.add_argument("--alpha", type=float, default=5.0)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--kappa", type=float, default=50.0)
    parser.add_argument("--S-0-scale", dest="S_0_scale", type=float, default=0.01)
    parser.add_argument("--K-0-scale", dest="K_0_scale", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--profile-sweeps", type=int, default=5, help="repetitions per timed piece of the profile")
    parser.add_argument("--compare", metavar="PATH", default=None,
                        help="also time the package of another checkout (contenders before-f32 / before-f64, "
                             "workers from this tree; e.g. a `git worktree` of the previous commit)")
    parser.add_argument("--compare-precisions", nargs="+", default=["f32"], choices=["f32", "f64"],
                        help="the other checkout's contenders (default: before-f32 only)")
    parser.add_argument("--title-suffix", default="", help="appended to the section's title (a section per run)")
    parser.add_argument("--no-save", action="store_true", help="print the tables, record nothing")
    parser.add_argument("--quick", action="store_true", help="tiny sizes; records nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.configs, args.sweeps, args.blocks, args.profile_sweeps = [(300, 1, 8), (100, 2, 8)], 3, 2, 2
    start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", file=sys.stderr, flush=True)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for T, N, K in args.configs:
            results.append(run_config(T, N, K, args, tmp, log))
            with open(os.path.join(tempfile.gettempdir(), "arhmm_vs_jax_moseq_last.json"), "w") as fh:
                json.dump(results, fh)  # the raw numbers survive a failure below
    md, rows, prof_cols, prof_rows = render(results)
    print(md)
    if args.quick or args.no_save:
        return
    env_moseq = results[0]["sides"][MOSEQ]["setup"]["versions"]
    env_ours = next(s for n, s in results[0]["sides"].items() if n != MOSEQ)["setup"]["versions"]
    versions = (f"jax-moseq {env_moseq.get('jax-moseq')} (jax {env_moseq.get('jax')}, dynamax {env_moseq.get('dynamax')}); "
                f"ours numpyro-hdphmm {env_ours.get('numpyro-hdphmm')} (jax {env_ours.get('jax')}, numpyro "
                f"{env_ours.get('numpyro')}).")
    compare = (f"  `before-*`: the package of `{args.compare}` (another checkout) with the same worker, in the same "
               "alternation." if args.compare else "")
    intro = INTRO.format(nlags=args.nlags, modes=args.modes, dim=args.dim, m=args.dim * args.nlags + 1,
                         gamma=args.gamma, alpha=args.alpha, kappa=args.kappa, K_0_scale=args.K_0_scale,
                         S_0_scale=args.S_0_scale, blocks=args.blocks, order=", ".join(results[0]["sides"]),
                         compare=compare)
    loads = "; ".join(f"{data_label(r)}: {load_range(r['loads'])}" for r in results)
    blocks = [text_block(intro), text_block(versions), table(COLUMNS, rows, align="lll" + "r" * (len(COLUMNS) - 3)),
              text_block(COLUMNS_NOTE.format(loads=loads)), text_block(ratio_line(results, data_label))]
    if prof_rows:
        blocks += [text_block("Our sweep by piece (ms per sweep, each piece compiled and timed on its own, best of 3; "
                              "\"statistics from the labels\": the per-state MNIW statistics as the sweep computes them, "
                              "`AutoRegressive.label_statistics`; \"from one-hot weights\": `sufficient_statistics` of the "
                              "(T, K) one-hot matrix, the sweep's path before):"),
                   table(prof_cols, prof_rows, align="ll" + "r" * (len(prof_cols) - 2))]
    blocks.append(text_block(DIFFERENCES))
    title = TITLE + (f": {args.title_suffix}" if args.title_suffix else "")
    p = save(QUESTION, title, blocks, command_line("arhmm_vs_jax_moseq", argv if argv is not None else sys.argv[1:]),
             comparisons=comparisons(results, "WeakLimitGibbs (HDP-AR-HMM)",
                                     lambda res, name: f"{data_label(res)}, ours {precision(name)}"),
             data={"results": results, "markdown": md})
    log(f"saved {p}")


if __name__ == "__main__":
    main()
