"""The HDP-HSMM sweep with negative-binomial durations: the phase embedding (``max_duration=None``,
:mod:`numpyro_hdphmm._core.phases`) against our explicit-duration messages (the law truncated at
``max_duration = 200``) and pyhsmm's ``WeakLimitHDPHSMMIntNegBin`` (its phase embedding).

Data: those of :mod:`benchmarks.sweeps.hsmm` (5 states, 2-D Gaussians, durations ``1 +
Poisson(29)``).  Model, the same on every side: constant ``gamma = 1``, ``alpha = 4``, durations
``d - 1 ~ NB(r, p)`` with ``r`` uniform on ``1..10`` and ``p ~ Beta(2, 2)``
(``nh.durations.NegativeBinomial(2.0, 2.0, r_values=1..10)``; pyhsmm's
``NegativeBinomialIntegerR2Duration(alpha_0=2, beta_0=2, r_support=1..10)``), the data-scaled NIW
prior, capacity ``K``, the last segment right-censored.  Ours float32, ``--per-call`` sweeps per
compiled call; after ours compiles (``init`` and the sweep program timed apart) and pyhsmm sets up,
warm-up sweeps each, then alternating blocks of sweeps of the three: seconds per sweep, minimum
and median over the groups.  After the timed sweeps, the normalized Hamming distance of each
chain's last state sequence to the truth and the states it uses.  ``--long``: ours (phases) alone
at ``T = 10^5``.

Usage::

    python -m benchmarks.sweeps hsmm-negbin [--quick] [--pyhsmm PYTHON] [--long] [--no-save]

Results: the section "HDP-HSMM sweep: negative-binomial durations" of
``benchmarks/results/sweeps.json``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

from ..harness import peers, results, timing
from .hsmm import ALPHA, GAMMA, hamming, hsmm_data, long_paragraph, ours_contender, peer_parser, run_long

QUESTION = "sweeps"
SECTION = "HDP-HSMM sweep: negative-binomial durations"
R_MAX, P_A, P_B, EXPLICIT_D = 10, 2.0, 2.0, 200
# (T, K, warm-up sweeps, blocks, sweeps per block)
CONFIGS = ((1000, 20, 10, 6, 20), (10000, 20, 5, 4, 10), (10000, 50, 5, 3, 5))
QUICK = ((300, 20, 5, 2, 5),)  # pyhsmm's IntNegBin sampler fails with NaN probabilities at K = 6
LONG = (100000, 20)


def negbin_model(K, max_duration):
    import numpyro_hdphmm as nh

    duration = nh.durations.NegativeBinomial(P_A, P_B, r_values=tuple(range(1, R_MAX + 1)))

    def model(y):
        nh.sample("y", nh.HDPHSMM(GAMMA, ALPHA, duration, nh.emissions.GaussianNIW.weakly_informative(y),
                                  max_states=K, max_duration=max_duration), obs=y)

    return model


def run_config(T, K, worker, tmp, warmup, blocks, block_sweeps, per_call, say=print):
    y, truth = hsmm_data(T)
    rec = {"T": T, "K": K}
    if worker is not None:
        npz = os.path.join(tmp, f"hsmm_{T}.npz")
        np.savez(npz, y=np.asarray(y, np.float64))
        spec = {"duration": "negbin", "gamma": GAMMA, "alpha": ALPHA, "r_max": R_MAX, "p_concentration1": P_A,
                "p_concentration0": P_B}
        worker.send(cmd="setup", data=npz, L=K, seed=0, warmup=warmup, hsmm=spec)
    mine = {}
    for name, d in (("phases", None), ("explicit", EXPLICIT_D)):
        c, init_s = ours_contender(y, K, d, per_call, model=negbin_model)
        rec[f"{name}_init_s"], rec[f"{name}_compile_s"] = init_s, c.compile_s
        for _ in range(warmup // per_call):
            c.state = timing.block(c.call(c.state))
        mine[name] = c
    say(f"T={T} K={K}: phases init {rec['phases_init_s']:.1f} + {rec['phases_compile_s']:.1f} s, explicit (D = "
        f"{EXPLICIT_D}) init {rec['explicit_init_s']:.1f} + {rec['explicit_compile_s']:.1f} s")
    if worker is not None:
        rec["peer_setup_s"] = worker.receive()["setup_s"]
    times = {"phases": [], "explicit": [], "pyhsmm": []}
    peer_states = None
    for b in range(blocks):
        for name, c in mine.items():
            for _ in range(block_sweeps // per_call):
                t0 = time.perf_counter()
                c.state = timing.block(c.call(c.state))
                times[name].append((time.perf_counter() - t0) / per_call)
        if worker is not None:
            reply = worker.call(cmd="run", n=block_sweeps, states=b == blocks - 1)
            t = reply["times"]
            times["pyhsmm"] += [float(np.mean(t[i:i + per_call])) for i in range(0, block_sweeps, per_call)]
            peer_states = reply.get("states", peer_states)
    rec.update(sweeps=warmup + blocks * block_sweeps, warmup=warmup, blocks=blocks, block_sweeps=block_sweeps)
    for name, c in mine.items():
        z = np.asarray(c.state.z["y_states"])
        rec[name] = times[name]
        rec[f"{name}_hamming"], rec[f"{name}_states"] = hamming(z, truth), int(len(np.unique(z)))
    msg = "  " + ", ".join(f"{n} min {min(times[n]) * 1e3:.1f} ms (hamming {rec[f'{n}_hamming']:.3f})" for n in mine)
    if worker is not None:
        rec["pyhsmm"] = times["pyhsmm"]
        rec["pyhsmm_hamming"], rec["pyhsmm_states"] = hamming(peer_states, truth), int(len(np.unique(peer_states)))
        msg += (f", pyhsmm min {min(times['pyhsmm']) * 1e3:.1f} ms (hamming {rec['pyhsmm_hamming']:.3f}); "
                f"pyhsmm/phases {min(times['pyhsmm']) / min(times['phases']):.2f}x")
    say(msg)
    return rec


def save(recs, long_rec, args, command):
    ms = lambda v: f"{v * 1e3:.1f}"
    rows, comps = [], []
    for r in recs:
        ph, ex = np.asarray(r["phases"]), np.asarray(r["explicit"])
        row = [r["T"], r["K"], f"{r['warmup']} + {r['blocks']} x {r['block_sweeps']}",
               f"{r['phases_init_s']:.0f} + {r['phases_compile_s']:.0f}", ms(ph.min()), ms(np.median(ph)),
               ms(ex.min()), f"{ex.min() / ph.min():.2f}x"]
        ham = f"{r['phases_hamming']:.3f} / {r['explicit_hamming']:.3f}"
        states = f"{r['phases_states']} / {r['explicit_states']}"
        config = f"HDP-HSMM 2-D, NB durations, T = {r['T']}, K = {r['K']}"
        if "pyhsmm" in r:
            p = np.asarray(r["pyhsmm"])
            row += [ms(p.min()), ms(np.median(p)), f"**{p.min() / ph.min():.2f}x**", f"{np.median(p) / np.median(ph):.2f}x"]
            ham += f" / {r['pyhsmm_hamming']:.3f}"
            states += f" / {r['pyhsmm_states']}"
            for stat, a, b in (("minimum", ph.min(), p.min()), ("median", np.median(ph), np.median(p))):
                comps.append({"kernel": "WeakLimitGibbs (HDP-HSMM, phases)", "peer": "pyhsmm", "config": config,
                              "ours_ms": round(float(a * 1e3), 3), "peer_ms": round(float(b * 1e3), 3),
                              "ratio": round(float(b / a), 2), "statistic": stat})
        else:
            row += ["-", "-", "-", "-"]
        rows.append(row + [ham, states])
    intro = (
        "`WeakLimitGibbs` on `nh.HDPHSMM` with negative-binomial durations through the phase embedding "
        "(`max_duration=None`; `numpyro_hdphmm._core.phases`) against our explicit-duration messages (the law "
        f"truncated at `max_duration = {EXPLICIT_D}`) and pyhsmm's `WeakLimitHDPHSMMIntNegBin` (its phase embedding, "
        "float64, one OpenBLAS thread), one process each, the data of the section \"HDP-HSMM sweep\" (5 states, "
        "2-D Gaussians, durations `1 + Poisson(29)`) and the same prior on every side: gamma = 1, alpha = 4, "
        f"`d - 1 ~ NB(r, p)`, `r` uniform on 1..{R_MAX}, `p ~ Beta({P_A:g}, {P_B:g})`, the data-scaled NIW prior, "
        f"capacity K, last segment right-censored.  Ours float32, {args.per_call} sweeps per compiled call; warm-up "
        "sweeps each, then alternating blocks of sweeps of the three.  ms per sweep, minimum and median over the "
        "groups; speed-ups by minima (explicit / phases, pyhsmm / phases) and medians (pyhsmm / phases).  Compile: "
        "`init` (its compilation included) + the sweep program's, seconds.  Hamming: normalized distance of the last "
        "state sequence to the truth after all the sweeps of the row (phases / explicit / pyhsmm).")
    tab = results.table(["T", "K", "sweeps", "phases compile (s)", "phases min (ms)", "phases median (ms)",
                         f"explicit D = {EXPLICIT_D} min (ms)", "explicit / phases", "pyhsmm min (ms)",
                         "pyhsmm median (ms)", "speed-up (minima)", "speed-up (medians)", "Hamming", "states"],
                        rows, ["r"] * 14)
    blocks = [results.text(intro), tab]
    if long_rec is not None:
        label = f"Ours (phases) alone at T = {long_rec['T']}, K = {long_rec['K']}"
        blocks.append(results.text(long_paragraph(long_rec, label, args.per_call, 3)))
    return results.save(QUESTION, SECTION, blocks, command, comparisons=comps or None,
                        data={"configs": recs, "long": long_rec})


def main(argv=None):
    parser = peer_parser(__doc__.splitlines()[0], LONG[0])
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:
        args.no_save = True
    command = results.command_line("sweeps hsmm-negbin", argv)
    recs, long_rec = [], None
    with tempfile.TemporaryDirectory() as tmp:
        worker = peers.Worker("pyhsmm", args.pyhsmm, args.pyhsmm_path) if args.pyhsmm else None
        try:
            for T, K, warmup, blocks, block_sweeps in (QUICK if args.quick else CONFIGS):
                recs.append(run_config(T, K, worker, tmp, warmup, blocks, block_sweeps, args.per_call))
                if not args.no_save:
                    save(recs, None, args, command)
        finally:
            if worker is not None:
                worker.close()
    if args.long:
        T, K = QUICK[0][:2] if args.quick else LONG
        long_rec = run_long(T, K, None, sweeps=10, per_call=args.per_call, model=negbin_model)
    if not args.no_save:
        print("saved", save(recs, long_rec, args, command))


if __name__ == "__main__":
    main()
