"""The HDP-SLDS sweep side by side with jax-moseq's SLDS (issue 38), each in its own environment.

What is compared.  jax-moseq's ``jax_moseq.models.slds`` is a sticky HDP-AR-HMM (weak limit) on a
latent path ``x`` observed as ``y_t = C x_t + d + w_t``; ``resample_model`` is one Gibbs sweep
(transitions, AR parameters, modes by FFBS, the latent path by a Kalman sampler).  Where the two
models coincide:

- modes: ``beta ~ Dir(gamma / K)``, ``pi_j ~ Dir(alpha beta + kappa e_j)``, ``K`` states, fixed
  ``gamma, alpha, kappa`` on both sides;
- dynamics: order ``r = --nlags`` (1 by default; keypoint-MoSeq's latent dynamics use 3),
  ``[A_k^(1) ... A_k^(r) b_k] | Q_k ~ MN(M_0, Q_k, K_0_scale I)`` with ``M_0`` the identity on the
  most recent lag, ``Q_k ~ IW(D + 2, S_0_scale I)`` (ours: ``AutoRegressive(r, loc=M_0,
  col_precision=I / K_0_scale, df=D + 2, scale=S_0_scale I)``; jax-moseq orders the lags oldest
  first, ours most recent first: the workers report both in jax-moseq's order);
- observations: Gaussian noise, ``R = diag(sigmasq)``.  jax-moseq never resamples ``[C d]`` (it
  stays at its whitened-PCA start) and with Gaussian noise (``skip_noise=True``, noise scales
  ``s = 1``) keeps ``sigmasq`` fixed; so our side fixes ``C`` and ``d`` to jax-moseq's ``Cd``
  (``LinearGaussianObservation(P, D, C=Cd[:, :D], offset=Cd[:, D], noise="diagonal")``) and pins
  ``R`` with a prior of 10^6 degrees of freedom at ``sigmasq`` (``R`` moves by ~0.2%; our sweep
  still pays for the ``R`` update).  ``sigmasq`` is the true noise variance of the synthetic data
  on both sides.

The differences that remain (not removable from outside either package): jax-moseq's first latent
state has the prior ``N(0, 10 I)`` and is observed, its initial mode distribution is uniform and the
first step has no mode (``z`` has ``T - 1`` entries); ours starts from the presample value
``x_{-1} = 0`` with a mode for every step and a learned start row.  jax-moseq reuses one random key
for every block of a sweep.  jax-moseq runs in float64 (in float32 its latent path is NaN after
the first sweep at ``sigmasq = 0.01``; keypoint-moseq also enables ``jax_enable_x64``); ours runs
in float32 (the default) and, as a second contender, float64.

Timing.  Each side runs in its own process (``benchmarks/workers/jax_moseq_slds_worker.py`` under
jax-moseq's Python, ``benchmarks/workers/hdphmm_slds_worker.py`` under ours), one process per side
and precision for the whole run.  Start-up is timed apart (``init``: model set-up and start;
``compile``: ours the ahead-of-time ``lower().compile()`` of ``n`` sweeps in one ``lax.fori_loop``,
jax-moseq the first sweeps' time beyond the steady per-sweep time: its jitted functions compile on
the first calls, some twice); then one untimed block of ``n`` sweeps each, then ``--blocks``
alternating blocks (ours, theirs, ours, theirs, ...) of ``n`` sweeps each.  Our block is one call
of the compiled ``fori_loop`` of ``kernel.sample`` (what ``MCMC.run`` runs, without NumPyro's
per-sample collection); jax-moseq's block is a Python loop of ``resample_model`` calls (how the
package runs, a host round trip every sweep for its CRF table counts), blocked at the end.

Log joint.  After all blocks (``(1 + blocks) n`` sweeps from each side's default start: the
latent path by least squares from the same ``Cd`` on both sides) the driver computes one quantity
from each side's state with the same numpy code (float64): ``sum_t log N(y_t | C x_t + d, R) +
sum_{t>=1} log N(x_t | A_{z_t} x_{t-1} + b_{z_t}, Q_{z_t}) + sum_{t>=2} log pi[z_{t-1}, z_t]``
(the first step, where the conventions differ, left out), and records each side's own figure (ours
``lp``, the log joint with the priors; jax-moseq ``model_likelihood`` summed without the noise-scale
term).  One chain per side: a single draw, not a posterior average.

Set-up (once; jax-moseq is licensed for non-commercial use: install it in its own venv, never copy
its code)::

    python3.11 -m venv /tmp/moseq_venv
    /tmp/moseq_venv/bin/pip install jax-moseq          # pulls CPU jax, dynamax, numba, scikit-learn

Run (from the repository root, our environment)::

    python -m benchmarks.slds_vs_jax_moseq --moseq-python /tmp/moseq_venv/bin/python
    python -m benchmarks.slds_vs_jax_moseq --moseq-python ... --sizes 2000 --sweeps 50 --blocks 3 --precisions f32
    python -m benchmarks.slds_vs_jax_moseq --moseq-python ... --nlags 3   # MoSeq's latent AR order: a section of its own
    python -m benchmarks.slds_vs_jax_moseq --moseq-python ... --quick     # checks that it runs, records nothing

Prints a markdown table and saves it with the raw numbers as a section of ``benchmarks/results/peers.json``.
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
from .harness.results import blocks_from_markdown, command_line, save, table
from .harness.results import text as text_block
from .harness.side_by_side import (add_ratios, alternate, ar_log_joint, checked, comparisons as side_comparisons,
                                   contender_order, load_range, precision, ratio_line as side_ratio_line, summarize,
                                   uptime)

QUESTION = "peers"
TITLE = "HDP-SLDS sweep side by side with jax-moseq"

INTRO = (
    "jax-moseq's SLDS sweep (`jax_moseq.models.slds.resample_model`) against ours (`WeakLimitGibbs` on "
    "`nh.HDPSLDS`) where the models coincide.  Synthetic SLDS (5 modes of damped rotations with distinct fixed "
    "points, D = 4, P = 10, R = {noise_var:g} I, sticky switches), K = {states} (weak limit), gamma = {gamma:g}, "
    "alpha = {alpha:g}, kappa = {kappa:g} fixed on both sides, order-{nlags} dynamics with the same MNIW prior "
    "(`M_0` the identity on the most recent lag, column covariance {K_0_scale:g} I, `IW(D + 2, {S_0_scale:g} I)`), `[C d]` fixed to jax-moseq's "
    "whitened-PCA start on both sides (jax-moseq never resamples it), R fixed at the true {noise_var:g} (jax-moseq: "
    "`skip_noise=True`, noise scales `s = 1`; ours: `noise=\"diagonal\"` pinned by a prior of 10^6 degrees of "
    "freedom, still updated every sweep).  Each side in its own process; start-up timed apart; one untimed block "
    "of {sweeps} sweeps, then {blocks} alternating blocks of N = {sweeps} sweeps ({order}).  Ours: one compiled "
    "`lax.fori_loop` of `kernel.sample` per block (no NumPyro per-sample collection); jax-moseq: a Python loop of "
    "`resample_model` (as the package runs; a host round trip per sweep for its CRF table counts).  \"log joint\": "
    "computed by the driver with the same numpy code from each side's state after {total} sweeps, "
    "`sum_t log N(y_t | C x_t + d, R) + sum_{{t>=r}} log N(x_t | A_z [x_{{t-1}}; ...; x_{{t-r}}] + b_z, Q_z) + "
    "sum_{{t>r}} log pi[z_{{t-1}}, z_t]` (obs / dyn / modes, r = {nlags}); jax-moseq's own `model_likelihood` (Y + x + z) is "
    "the \"own figure\".  One chain per side: one draw, not a posterior average.{compare}")
COLUMNS_NOTE = (
    "\"compile s\": ours, the ahead-of-time compilation of the {sweeps}-sweep loop; jax-moseq, the time of its first "
    "{sweeps} sweeps beyond {sweeps} steady sweeps (its jitted functions compile on the first calls).  \"init s\": "
    "ours `kernel.init` (discovery, data-driven start), jax-moseq `init_model` (PCA, prior draws, FFBS).  "
    "\"ours / theirs\": the median per-sweep time over jax-moseq's, with the per-block range; a 2x speed-up is "
    "0.5.  Load average before each block: {loads}.")
DIFFERENCES = (
    "Model differences that remain: jax-moseq's first latent state has the prior N(0, 10 I) and is observed, with no "
    "mode at the first step and a uniform initial mode distribution; ours starts from the presample value "
    "x_{-1} = 0 with a mode at every step and a learned start row (the driver's log joint leaves the first step "
    "out).  Ours updates R every sweep (pinned by its prior), jax-moseq keeps it fixed.  jax-moseq reuses one "
    "random key for every block of a sweep.  jax-moseq learns neither C nor d (ours can: `C=None`), has no "
    "missing-value imputation within a step (frames are masked whole), and its Gaussian-noise case needs "
    "`skip_noise=True` with the noise scales reset to 1 (its noise update is the robust, per-frame-scaled one).  "
    "jax-moseq in float32 is not usable here: its latent path is NaN after the first sweep at R = 0.01 (it runs "
    "in float64, as keypoint-moseq configures JAX).")


def make_data(T: int, seed: int = 0, D: int = 4, P: int = 10, modes: int = 5, noise_var: float = 0.01):
    """A switching linear dynamical system: ``modes`` modes, each a pair of damped rotations (radius
    0.9, angles 0.1..0.8) with its own intercept ``b_k ~ N(0, 0.2^2)`` (distinct fixed points),
    ``Q = 0.01 I``, sticky switches (stay 0.98), ``C ~ N(0, 1)`` ``(P, D)``, ``d ~ N(0, 1)``,
    ``R = noise_var I``.  Returns ``dict(y, x, z)``."""
    rng = np.random.default_rng(seed)

    def rot(th):
        return np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]])

    angles = np.linspace(0.1, 0.8, modes)
    A, b = [], []
    for k in range(modes):
        M = np.zeros((D, D))
        M[:2, :2] = rot(angles[k])
        M[2:, 2:] = rot(angles[(k + 2) % modes])
        A.append(0.9 * M)
        b.append(rng.normal(0, 0.2, D))
    C, d = rng.normal(size=(P, D)), rng.normal(size=P)
    z = np.zeros(T, int)
    x = np.zeros((T, D))
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < 0.98 else rng.integers(modes)
        x[t] = A[z[t]] @ x[t - 1] + b[z[t]] + rng.normal(0, 0.1, D)
    y = x @ C.T + d + rng.normal(0, np.sqrt(noise_var), (T, P))
    return {"y": y, "x": x, "z": z}


def common_log_joint(y, Cd, st, nlags=1) -> dict:
    """The driver's own log joint of one side's state ``st`` (module docstring), numpy float64:
    ``Ab (K, D, D r + 1)`` with the lags oldest first (jax-moseq's order), ``z`` the modes of the
    steps ``r, ..., T - 1``; the dynamics and modes terms by :func:`~benchmarks.harness.side_by_side.ar_log_joint`."""
    x = np.asarray(st["x"], float)
    R = np.asarray(st["R"], float)
    D = x.shape[1]
    C, d = Cd[:, :D], Cd[:, D]
    resid = y - x @ C.T - d
    obs = -0.5 * np.sum(resid ** 2 / R + np.log(2 * np.pi * R))
    ar = ar_log_joint(x, st["z"], st["Ab"], st["Q"], st["pi"], nlags)
    return {"obs": float(obs), "dyn": ar["dyn"], "modes": ar["modes"], "total": float(obs + ar["dyn"] + ar["modes"])}


def run_size(T, args, data_dir, log):
    data = make_data(T, seed=args.seed)
    path = os.path.join(data_dir, f"slds_T{T}.npz")
    np.savez(path, **data)
    hyper = dict(data=path, K=args.states, alpha=args.alpha, gamma=args.gamma, kappa=args.kappa,
                 S_0_scale=args.S_0_scale, K_0_scale=args.K_0_scale, D=4, seed=args.seed, n=args.sweeps, nlags=args.nlags,
                 sigmasq=[args.noise_var] * data["y"].shape[1])
    workers, setups = {}, {}
    try:
        log(f"T={T}: jax-moseq set-up ({uptime()})")
        workers["jax-moseq"] = Worker("jax_moseq_slds", python=args.moseq_python, env={"JAX_ENABLE_X64": "1"})
        setups["jax-moseq"] = checked(workers["jax-moseq"], cmd="setup", **hyper)
        Cd = np.asarray(setups["jax-moseq"]["Cd"], float)
        packages = (("ours", REPO),) + ((("before", args.compare),) if args.compare else ())
        for side, path in packages:
            for prec in args.precisions:
                name = f"{side}-{prec}"
                log(f"T={T}: {name} set-up, the package of {path} ({uptime()})")
                workers[name] = Worker("hdphmm_slds", python=sys.executable, path=path,
                                       env={"JAX_ENABLE_X64": "1" if prec == "f64" else "0"})
                setups[name] = checked(workers[name], cmd="setup", Cd=Cd.tolist(), noise="pinned", **hyper)
        order = contender_order(list(workers))
        times, loads = alternate(workers, order, args.blocks, args.sweeps, log, f"T={T}")
        states = {name: checked(w, cmd="state") for name, w in workers.items()}
        profile = None
        if args.profile:
            log(f"T={T}: profile of ours-{args.precisions[0]} ({uptime()})")
            try:
                profile = checked(workers[f"ours-{args.precisions[0]}"], cmd="profile", n=min(args.sweeps, 20))
                profile["uptime"] = uptime()
            except RuntimeError as err:  # the timings above are kept
                log(f"profile failed: {err}")
    finally:
        for w in workers.values():
            w.close()
    out = {"T": T, "P": int(data["y"].shape[1]), "D": 4, "K": args.states, "nlags": args.nlags, "sweeps_per_block": args.sweeps,
           "blocks": args.blocks, "sides": {}, "loads": loads, "profile": profile}
    for name in order:
        lj = common_log_joint(data["y"], Cd, states[name], args.nlags)
        out["sides"][name] = {**summarize(name, times[name], setups[name], args.sweeps), "log_joint": lj,
                              "own": states[name]["own"], "num_states": states[name]["num_states"],
                              "R_mean": float(np.mean(states[name]["R"]))}
    add_ratios(out["sides"])
    return out


def render(results) -> str:
    rows = []
    for res in results:
        for name, s in res["sides"].items():
            prec = precision(name)
            ratio = "1" if name == "jax-moseq" else "%.2f (%.2f-%.2f)" % (s["ratio"], min(s["block_ratios"]),
                                                                         max(s["block_ratios"]))
            own = s["own"]
            own_s = ("lp %.0f" % own["lp"]) if "lp" in own else ("Y+x+z %.0f" % sum(own.values()))
            rows.append([f"T = {res['T']}", name, prec, "%.1f" % (1e3 * s["median_s"]), "%.1f" % (1e3 * s["min_s"]),
                         ratio, "%.1f" % s["init_s"], "%.1f" % s["compile_s"], "%.0f" % s["log_joint"]["total"],
                         "%.0f / %.0f / %.0f" % (s["log_joint"]["obs"], s["log_joint"]["dyn"], s["log_joint"]["modes"]),
                         own_s, str(s["num_states"])])
    cols = ["data", "side", "precision", "ms / sweep (median)", "min", "ours / theirs (per-block range)", "init s",
            "compile s", "log joint after N sweeps", "obs / dyn / modes", "own figure", "modes used"]
    head = "| " + " | ".join(cols) + " |\n|" + "|".join(["---"] * 3 + ["---:"] * (len(cols) - 3)) + "|\n"
    md = head + "\n".join("| " + " | ".join(r) + " |" for r in rows)
    prof = [r for r in results if r.get("profile")]
    if prof:
        md += "\n\nOur sweep by block (ms per sweep, each block compiled and timed on its own, best of 3):\n\n"
        md += ("| data | whole sweep | latent-path sampler of x (Kalman for r = 1, band Cholesky for r > 1) | HDP-AR-HMM sweep on x (own lp included) | R update | "
               "obs. log lik. | recorded lp + data log lik. |\n")
        md += "|---|---:|---:|---:|---:|---:|---:|\n"
        for r in prof:
            p = r["profile"]
            md += "| T = %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n" % (r["T"], *(1e3 * p.get(k, np.nan) for k in (
                "sweep", "latent", "ar_hmm", "obs_update", "obs_loglik", "log_joint")))
    return md, cols, rows


def ratio_line(results) -> str:
    """One sentence per size: each of our contenders' median time per sweep over jax-moseq's."""
    return side_ratio_line(results, lambda res: f"T = {res['T']}")


def comparisons(results, states) -> list:
    """The summary table's rows: each of our precisions against jax-moseq, minimum and median ms per sweep."""
    return side_comparisons(results, "WeakLimitGibbs (HDP-SLDS)",
                            lambda res, name: f"T = {res['T']}, K = {states}, ours {precision(name)}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moseq-python", required=True, help="the Python of the venv where jax-moseq is installed")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--sweeps", type=int, default=50, help="sweeps per block (N)")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--states", type=int, default=10, help="K, the weak-limit capacity")
    parser.add_argument("--nlags", type=int, default=1, help="r, the order of the latent dynamics on both sides")
    parser.add_argument("--precisions", nargs="+", default=["f32", "f64"], choices=["f32", "f64"],
                        help="our contenders (jax-moseq always runs in float64)")
    parser.add_argument("--alpha", type=float, default=5.0)
    parser.add_argument("--gamma", type=float, default=1.0)
    parser.add_argument("--kappa", type=float, default=50.0)
    parser.add_argument("--S-0-scale", dest="S_0_scale", type=float, default=0.01)
    parser.add_argument("--K-0-scale", dest="K_0_scale", type=float, default=10.0)
    parser.add_argument("--noise-var", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--compare", metavar="PATH", default=None,
                        help="also time the package of another checkout (contenders before-f32 / before-f64, "
                             "workers from this tree; e.g. a `git worktree` of the previous commit)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes; records nothing")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.sweeps, args.blocks = [200], 3, 2
    start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", file=sys.stderr, flush=True)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for T in args.sizes:
            results.append(run_size(T, args, tmp, log))
    with open(os.path.join(tempfile.gettempdir(), "slds_vs_jax_moseq_last.json"), "w") as fh:
        json.dump(results, fh)  # the raw numbers survive a failure below
    md, cols, rows = render(results)
    print(md)
    if not args.quick:
        env_moseq = results[0]["sides"]["jax-moseq"]["setup"]["versions"]
        env_ours = next(s for n, s in results[0]["sides"].items() if n != "jax-moseq")["setup"]["versions"]
        text = (f"jax-moseq {env_moseq.get('jax-moseq')} (jax {env_moseq.get('jax')}, dynamax {env_moseq.get('dynamax')}); "
                f"ours numpyro-hdphmm {env_ours.get('numpyro-hdphmm')} (jax {env_ours.get('jax')}, numpyro "
                f"{env_ours.get('numpyro')}).")
        order = list(results[0]["sides"])
        compare = (f"  `before-*`: the package of `{args.compare}` (another checkout) with the same worker, "
                   "in the same alternation." if args.compare else "")
        intro = INTRO.format(noise_var=args.noise_var, states=args.states, gamma=args.gamma, alpha=args.alpha,
                             kappa=args.kappa, K_0_scale=args.K_0_scale, S_0_scale=args.S_0_scale, sweeps=args.sweeps,
                             blocks=args.blocks, order=", ".join(order), total=(1 + args.blocks) * args.sweeps,
                             compare=compare, nlags=args.nlags)
        loads = "; ".join(f"T = {r['T']}: {load_range(r['loads'])}" for r in results)
        blocks = [text_block(intro), text_block(text), table(cols, rows, align="lll" + "r" * (len(cols) - 3)),
                  text_block(COLUMNS_NOTE.format(sweeps=args.sweeps, loads=loads)), text_block(ratio_line(results))]
        if any(r.get("profile") for r in results):
            blocks += blocks_from_markdown(md.split("\n\n", 1)[1])
        blocks.append(text_block(DIFFERENCES))
        title = TITLE if args.nlags == 1 else f"{TITLE}: latent dynamics of order {args.nlags}"
        p = save(QUESTION, title, blocks,
                 command_line("slds_vs_jax_moseq", argv or sys.argv[1:]), comparisons=comparisons(results, args.states),
                 data={"results": results, "markdown": md})
        log(f"saved {p}")


if __name__ == "__main__":
    main()
