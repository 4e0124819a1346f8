"""pyhsmm's own HDP-HSMM example, side by side: its data and its settings, our ``WeakLimitGibbs``
on ``nh.HDPHSMM`` against its ``WeakLimitHDPHSMM``.

Data: ``examples/example-data.txt`` of the pyhsmm source (``--data PATH``), the first 1,000 rows
(2-D), as pyhsmm's ``examples/hsmm.py`` reads them.  Settings, that example's on both sides:
capacity 25, ``alpha = gamma = 6`` (constant), Poisson durations ``d - 1 ~ Poisson(lambda)`` with
``lambda ~ Gamma(60, rate 2)`` (pyhsmm's ``PoissonDuration(alpha_0=60, beta_0=2)``; ours
``nh.durations.Poisson(60.0, 2.0)``), durations at most 60 (pyhsmm ``add_data(trunc=60)``; ours
``max_duration=60``, the law renormalized on ``{1..60}``), the NIW prior ``mu_0 = 0``,
``Sigma_0 = I``, ``kappa_0 = 0.25``, ``nu_0 = 4`` (ours ``GaussianNIW(0, 0.25, 4, I)``), 150 sweeps,
the last segment right-censored.  pyhsmm's initial-state weights are ``Dir(6)``; ours the start row
``Dir(alpha beta)``.

Each of ``--chains`` seeds runs one chain of each from its own random start: after ours compiles
(``init`` and the sweep program timed apart) and pyhsmm sets up (no warm-up), alternating blocks of
10 sweeps (ours 10 sweeps per compiled call) up to 150.  After every block, untimed, each side's
``log p(y | parameters)`` with the states and durations summed out (ours
:func:`numpyro_hdphmm.marginal_log_likelihood`; pyhsmm ``log_likelihood(y, trunc=60)``) and the
number of states its state sequence uses.  Reported: ms per sweep (minimum and median over the
blocks of all chains), and per sweep count the median (and range) over the chains of the
log-likelihood and of the states used.  The data have no published truth, so no Hamming distance.

Usage::

    python -m benchmarks.sweeps hsmm-example --pyhsmm PYTHON --data PATH/example-data.txt [--chains 4]

Results: the section "HDP-HSMM: pyhsmm's example" of ``benchmarks/results/sweeps.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from ..harness import peers, results, timing
from .hsmm import ours_contender, ours_loglik

QUESTION = "sweeps"
SECTION = "HDP-HSMM: pyhsmm's example"
T_MAX, CAPACITY, TRUNC, CONC, DUR_A, DUR_B, KAPPA0 = 1000, 25, 60, 6.0, 60.0, 2.0, 0.25
SWEEPS, BLOCK = 150, 10
REPORT_AT = (10, 50, 100, 150)


def example_model(K, max_duration):
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    def model(y):
        dim = y.shape[-1]
        emission = nh.emissions.GaussianNIW(jnp.zeros(dim), KAPPA0, dim + 2.0, jnp.eye(dim))
        nh.sample("y", nh.HDPHSMM(CONC, CONC, nh.durations.Poisson(DUR_A, DUR_B), emission, max_states=K,
                                  max_duration=max_duration), obs=y)

    return model


def run_chain(y, seed, worker, npz, say=print):
    rec = {"seed": seed}
    if worker is not None:
        dim = y.shape[1]
        spec = {"gamma": CONC, "alpha": CONC, "init_state_concentration": CONC, "dur_concentration": DUR_A,
                "dur_rate": DUR_B, "max_duration": TRUNC,
                "niw": {"mu_0": [0.0] * dim, "sigma_0": np.eye(dim).tolist(), "kappa_0": KAPPA0, "nu_0": dim + 2.0}}
        worker.send(cmd="setup", data=npz, L=CAPACITY, seed=seed, warmup=0, hsmm=spec)
    ours, rec["init_s"] = ours_contender(y, CAPACITY, TRUNC, BLOCK, seed=seed, model=example_model)
    rec["compile_s"] = ours.compile_s
    if worker is not None:
        rec["peer_setup_s"] = worker.receive()["setup_s"]
    model = example_model(CAPACITY, TRUNC)
    traces = {"ours": [], "pyhsmm": []}
    for b in range(SWEEPS // BLOCK):
        t0 = time.perf_counter()
        ours.state = timing.block(ours.call(ours.state))
        secs = (time.perf_counter() - t0) / BLOCK
        z = np.asarray(ours.state.z["y_states"])
        traces["ours"].append({"sweeps": (b + 1) * BLOCK, "s_per_sweep": secs, "loglik": ours_loglik(model, y, ours.state.z),
                               "states": int(len(np.unique(z)))})
        if worker is not None:
            reply = worker.call(cmd="run", n=BLOCK, states=True, loglik=True)
            traces["pyhsmm"].append({"sweeps": (b + 1) * BLOCK, "s_per_sweep": float(np.mean(reply["times"])),
                                     "loglik": reply["loglik"], "states": int(len(np.unique(reply["states"])))})
    rec.update(traces)
    last = {k: v[-1] for k, v in traces.items() if v}
    say(f"seed {seed}: " + "; ".join(f"{k} {1e3 * min(e['s_per_sweep'] for e in traces[k]):.1f} ms/sweep, log-lik "
                                     f"{e['loglik']:.1f}, {e['states']} states" for k, e in last.items()))
    return rec


def _summary(recs, side, key, at):
    vals = [next(e[key] for e in r[side] if e["sweeps"] == at) for r in recs if r[side]]
    return np.median(vals), min(vals), max(vals)


def save(recs, args, command):
    ms = lambda v: f"{v * 1e3:.1f}"
    sides = [s for s in ("ours", "pyhsmm") if recs[0][s]]
    times = {s: np.array([e["s_per_sweep"] for r in recs for e in r[s]]) for s in sides}
    rows = []
    for at in REPORT_AT:
        row = [at]
        for s in sides:
            med, lo, hi = _summary(recs, s, "loglik", at)
            smed, slo, shi = _summary(recs, s, "states", at)
            row += [f"{med:.1f} ({lo:.1f} to {hi:.1f})", f"{smed:g} ({slo}-{shi})"]
        rows.append(row)
    columns = ["sweeps"] + [c for s in sides for c in (f"log-lik {s}: median (range)", f"states {s}")]
    speed = (f"Ours {ms(times['ours'].min())} ms per sweep (median {ms(np.median(times['ours']))})")
    comps = []
    if "pyhsmm" in times:
        o, p = times["ours"], times["pyhsmm"]
        speed += (f", pyhsmm {ms(p.min())} ms (median {ms(np.median(p))}): **{p.min() / o.min():.2f}x** by minima, "
                  f"{np.median(p) / np.median(o):.2f}x by medians")
        for stat, a, b in (("minimum", o.min(), p.min()), ("median", np.median(o), np.median(p))):
            comps.append({"kernel": "WeakLimitGibbs (HDP-HSMM)", "peer": "pyhsmm",
                          "config": f"pyhsmm's HSMM example, T = {T_MAX}, K = {CAPACITY}, D = {TRUNC}",
                          "ours_ms": round(float(a * 1e3), 3), "peer_ms": round(float(b * 1e3), 3),
                          "ratio": round(float(b / a), 2), "statistic": stat})
    compile_s = np.median([r["init_s"] + r["compile_s"] for r in recs])
    intro = (
        "pyhsmm's own HDP-HSMM example (`examples/hsmm.py`): its data (`example-data.txt`, the first 1,000 rows, "
        "2-D) and its settings on both sides: capacity 25, alpha = gamma = 6, Poisson durations `d - 1 ~ "
        "Poisson(lambda)`, `lambda ~ Gamma(60, rate 2)`, durations at most 60 (ours: the law renormalized on "
        "{1..60}; pyhsmm `trunc=60`, not renormalized), the NIW prior mu_0 = 0, Sigma_0 = I, kappa_0 = 0.25, nu_0 = 4, "
        f"150 sweeps, last segment right-censored.  {len(recs)} chains each (seeds 0..{len(recs) - 1}), each from "
        "its own random start; blocks of 10 sweeps alternate between the two (ours 10 sweeps per compiled call, "
        f"float32; pyhsmm float64, one OpenBLAS thread).  {speed} per sweep, over all blocks; ours compiles in "
        f"{compile_s:.0f} s (`init` + the sweep program, median over the chains).  Log-lik: `log p(y | parameters)` "
        "after that many sweeps, states and durations summed out, each by its own messages (ours "
        "`nh.marginal_log_likelihood`; pyhsmm `log_likelihood(y, trunc=60)`), median and range over the chains; "
        "states: distinct labels of the state sequence.  The data have no published truth.")
    tab = results.table(columns, rows, ["r"] * len(columns))
    return results.save(QUESTION, SECTION, [results.text(intro), tab], command, comparisons=comps or None,
                        data={"chains": recs})


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyhsmm", metavar="PYTHON", help="Python of an environment with pyhsmm (else ours alone)")
    parser.add_argument("--pyhsmm-path", help="PYTHONPATH for the pyhsmm worker (an in-place build)")
    parser.add_argument("--data", required=True, help="pyhsmm's examples/example-data.txt")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if not os.path.isfile(args.data):
        parser.error(f"--data: no file {args.data!r} (pyhsmm's examples/example-data.txt)")
    y = np.loadtxt(args.data)[:T_MAX].astype(np.float32)
    command = results.command_line("sweeps hsmm-example", argv)
    recs = []
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "example.npz")
        np.savez(npz, y=np.asarray(y, np.float64))
        worker = peers.Worker("pyhsmm", args.pyhsmm, args.pyhsmm_path) if args.pyhsmm else None
        try:
            for seed in range(args.chains):
                recs.append(run_chain(y, seed, worker, npz))
        finally:
            if worker is not None:
                worker.close()
    if not args.no_save:
        print("saved", save(recs, args, command))


if __name__ == "__main__":
    main()
