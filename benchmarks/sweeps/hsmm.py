"""The explicit-duration HDP-HSMM sweep (``nh.HDPHSMM`` + ``WeakLimitGibbs``) side by side with
pyhsmm's ``WeakLimitHDPHSMM`` (Johnson & Willsky's weak-limit sampler; Cython/Eigen messages).

Data: an HSMM with 5 states, 2-D unit-covariance Gaussians with means on a circle of radius 2.5,
shifted Poisson durations (``d - 1 ~ Poisson(29)``: mean 30), uniform transitions to the other
states (numpy, seed 0).  Model, the same on both sides: constant ``gamma = 1``, ``alpha = 4``,
Poisson durations with ``lambda ~ Gamma(2, rate 0.1)`` (``nh.durations.Poisson(2.0, 0.1)``,
pyhsmm's ``PoissonDuration(alpha_0=2, beta_0=0.1)``, both on ``d >= 1`` with ``d - 1 ~
Poisson(lambda)``), the data-scaled NIW prior (``GaussianNIW.weakly_informative``), capacity ``K``,
durations at most ``max_duration`` (ours: the law truncated and renormalized; pyhsmm:
``add_data(trunc=max_duration)``), the last segment right-censored.

For each ``(T, K, max_duration)``: ours compiles (``init`` and the sweep program timed apart) while
pyhsmm sets up and runs its warm-up sweeps, ours runs as many warm-up sweeps, then alternating blocks of sweeps
(ours ``--per-call`` sweeps per compiled call, as ``MCMC.run`` runs them; pyhsmm's sweep-by-sweep
times averaged over the same groups): seconds per sweep, minimum and median.  After the timed
sweeps (``warmup + blocks * block_sweeps`` in all, both chains from their own random start) the
normalized Hamming distance of each chain's last state sequence to the truth (optimal matching)
and the states it uses.  Configurations (:data:`CONFIGS`): ``T`` in {10^3, 10^4} x ``max_duration`` in
{50, 200} at ``K = 20``, with fewer sweeps where pyhsmm takes seconds per sweep.  ``--extra``: ``K = 50``
instead (:data:`EXTRA`, a section of its own); ``--huge``: ``T = 10^5`` side by side, ``K`` in {20, 50}
x ``max_duration`` in {50, 200}, one sweep per call (:data:`HUGE`, a section of its own); ``--long``:
also ours alone at ``T = 10^5`` (10 sweeps: feasibility).  After the sweeps, both sides'
``log p(y | parameters)`` with the states and durations summed out (each by its own messages).

Usage::

    python -m benchmarks.sweeps hsmm [--quick] [--pyhsmm PYTHON] [--extra | --huge] [--long] [--no-save]

Results: the sections "HDP-HSMM sweep", (``--extra``) "HDP-HSMM sweep: K = 50 and T = 10^5" and
(``--huge``) "HDP-HSMM sweep: T = 10^5" of ``benchmarks/results/sweeps.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

from ..harness import peers, results, timing

QUESTION = "sweeps"
SECTION = "HDP-HSMM sweep"
GAMMA, ALPHA, DUR_A, DUR_B = 1.0, 4.0, 2.0, 0.1
# (T, K, max_duration, warm-up sweeps, blocks, sweeps per block): fewer sweeps where pyhsmm's sweep
# takes seconds (the run stays within half an hour on the shared 2-core machine)
CONFIGS = ((1000, 20, 50, 10, 6, 15), (1000, 20, 200, 10, 6, 15), (10000, 20, 50, 5, 4, 10),
           (10000, 20, 200, 5, 3, 5))
QUICK = ((300, 6, 20, 5, 2, 5),)
# --extra: the larger capacity, saved as a section of its own (with --long)
EXTRA = ((1000, 50, 50, 10, 6, 15), (1000, 50, 200, 10, 6, 15), (10000, 50, 50, 5, 3, 5), (10000, 50, 200, 5, 3, 5))
SECTION_EXTRA = "HDP-HSMM sweep: K = 50 and T = 10^5"
# --huge: T = 10^5 side by side (pyhsmm takes seconds per sweep: one warm-up sweep, three blocks of one)
HUGE = tuple((100000, k, d, 1, 3, 1) for k in (20, 50) for d in (50, 200))
SECTION_HUGE = "HDP-HSMM sweep: T = 10^5"
LONG = (100000, 20, 50)


def hsmm_data(T, seed=0, num_states=5, mean_duration=30, radius=2.5):
    """``(y (T, 2) float32, states (T,))``: the module doc's data."""
    rng = np.random.default_rng(seed)
    angles = 2 * np.pi * np.arange(num_states) / num_states
    means = radius * np.stack([np.cos(angles), np.sin(angles)], 1)
    z = np.empty(T, np.int64)
    t, s = 0, int(rng.integers(num_states))
    while t < T:
        d = 1 + int(rng.poisson(mean_duration - 1))
        z[t:t + d] = s
        t += d
        s = int(rng.choice([k for k in range(num_states) if k != s]))
    y = means[z] + rng.normal(size=(T, 2))
    return y.astype(np.float32), z


def hsmm_model(K, max_duration):
    import numpyro_hdphmm as nh

    def model(y):
        nh.sample("y", nh.HDPHSMM(GAMMA, ALPHA, nh.durations.Poisson(DUR_A, DUR_B),
                                  nh.emissions.GaussianNIW.weakly_informative(y), max_states=K,
                                  max_duration=max_duration), obs=y)

    return model


def ours_contender(y, K, max_duration, per_call, seed=0, model=hsmm_model):
    """``(Contender, init seconds)`` of ``WeakLimitGibbs`` on ``model(K, max_duration)``: ``init`` (its
    compilation included) timed apart from the sweep program's compilation (``Contender.compile_s``)."""
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    kernel = nh.infer.WeakLimitGibbs(model(K, max_duration))
    args = (jnp.asarray(y),)
    t0 = time.perf_counter()
    state = jax.block_until_ready(kernel.init(jax.random.key(seed), 0, None, args, {}))
    init_s = time.perf_counter() - t0
    return timing.compile_step(lambda s: kernel.sample(s, args, {}), state, per_call), init_s


def ours_loglik(model, y, z):
    """``log p(y | parameters)`` of the kernel's current parameters ``z`` (one draw), the states and
    durations summed out (:func:`numpyro_hdphmm.marginal_log_likelihood`, the explicit-duration forward
    messages)."""
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    samples = {k: np.asarray(v)[None] for k, v in z.items()}
    y = jnp.asarray(y)
    return float(nh.marginal_log_likelihood(model, samples, y, model_args=(y,)).total[0])


def hamming(states, truth):
    import numpyro_hdphmm as nh

    return float(nh.diagnostics.hamming_distance(np.asarray(states)[None], truth)[0])


def run_config(T, K, D, worker, tmp, warmup, blocks, block_sweeps, per_call, say=print):
    y, truth = hsmm_data(T)
    rec = {"T": T, "K": K, "max_duration": D}
    if worker is not None:  # pyhsmm sets up and warms up while ours compiles (untimed)
        npz = os.path.join(tmp, f"hsmm_{T}.npz")
        np.savez(npz, y=np.asarray(y, np.float64))
        hsmm = {"gamma": GAMMA, "alpha": ALPHA, "dur_concentration": DUR_A, "dur_rate": DUR_B, "max_duration": D}
        worker.send(cmd="setup", data=npz, L=K, seed=0, warmup=warmup, hsmm=hsmm)
    ours, rec["init_s"] = ours_contender(y, K, D, per_call)
    rec["compile_s"] = ours.compile_s
    say(f"T={T} K={K} D={D}: ours init {rec['init_s']:.1f} s, sweep compile {ours.compile_s:.1f} s")
    if worker is not None:
        rec["peer_setup_s"] = worker.receive()["setup_s"]
    for _ in range(warmup // per_call):
        ours.state = timing.block(ours.call(ours.state))
    mine, theirs, peer_states = [], [], None
    for b in range(blocks):
        for _ in range(block_sweeps // per_call):
            t0 = time.perf_counter()
            ours.state = timing.block(ours.call(ours.state))
            mine.append((time.perf_counter() - t0) / per_call)
        if worker is not None:
            reply = worker.call(cmd="run", n=block_sweeps, states=b == blocks - 1, loglik=b == blocks - 1)
            times = reply["times"]
            theirs += [float(np.mean(times[i:i + per_call])) for i in range(0, block_sweeps, per_call)]
            peer_states = reply.get("states", peer_states)
            rec["pyhsmm_loglik"] = reply.get("loglik", rec.get("pyhsmm_loglik"))
    z = np.asarray(ours.state.z["y_states"])
    rec["ours_loglik"] = ours_loglik(hsmm_model(K, D), y, ours.state.z)
    rec.update(ours=mine, sweeps=warmup + blocks * block_sweeps, warmup=warmup, blocks=blocks,
               block_sweeps=block_sweeps, ours_hamming=hamming(z, truth),
               ours_states=int(len(np.unique(z))), ours_nonfinite=bool(ours.state.nonfinite))
    msg = (f"  ours min {min(mine):.4f} s/sweep, hamming {rec['ours_hamming']:.3f}, {rec['ours_states']} states, "
           f"log-lik {rec['ours_loglik']:.1f}")
    if worker is not None:
        rec.update(pyhsmm=theirs, pyhsmm_hamming=hamming(peer_states, truth),
                   pyhsmm_states=int(len(np.unique(peer_states))))
        msg += (f"; pyhsmm min {min(theirs):.4f} s/sweep, hamming {rec['pyhsmm_hamming']:.3f}, "
                f"{rec['pyhsmm_states']} states, log-lik {rec['pyhsmm_loglik']:.1f}; pyhsmm/ours {min(theirs) / min(mine):.2f}x (minima), "
                f"{np.median(theirs) / np.median(mine):.2f}x (medians)")
    say(msg)
    return rec


def run_long(T, K, D, sweeps, per_call, say=print, model=hsmm_model):
    """Ours alone on a long series (``model(K, D)``): ``{"ours": seconds per sweep of each call, ...}``."""
    y, truth = hsmm_data(T)
    ours, init_s = ours_contender(y, K, D, per_call, model=model)
    times = []
    for _ in range(max(1, sweeps // per_call)):
        t0 = time.perf_counter()
        ours.state = timing.block(ours.call(ours.state))
        times.append((time.perf_counter() - t0) / per_call)
    z = np.asarray(ours.state.z["y_states"])
    rec = {"T": T, "K": K, "max_duration": D, "init_s": init_s, "compile_s": ours.compile_s, "ours": times,
           "sweeps": len(times) * per_call, "ours_hamming": hamming(z, truth), "ours_states": int(len(np.unique(z)))}
    say(f"long T={T} K={K} D={D}: init {init_s:.1f} s, compile {ours.compile_s:.1f} s, "
        f"{min(times):.3f} s/sweep over {rec['sweeps']} sweeps, hamming {rec['ours_hamming']:.3f}")
    return rec


KERNEL_NAMES = {SECTION: "WeakLimitGibbs (HDP-HSMM)", SECTION_EXTRA: "WeakLimitGibbs (HDP-HSMM, K = 50)",
                SECTION_HUGE: "WeakLimitGibbs (HDP-HSMM, T = 10^5)"}


def _loglik_cell(r):
    theirs = r.get("pyhsmm_loglik")
    ours = f"{r['ours_loglik']:.1f}" if "ours_loglik" in r else "-"
    return f"{ours} / {theirs:.1f}" if theirs is not None else f"{ours} / -"


def save(recs, long_rec, args, command, title=SECTION):
    ms = lambda v: f"{v * 1e3:.1f}"
    rows, comps = [], []
    for r in recs:
        o = np.asarray(r["ours"])
        row = [r["T"], r["K"], r["max_duration"], f"{r['warmup']} + {r['blocks']} x {r['block_sweeps']}",
               f"{r['init_s']:.0f} + {r['compile_s']:.0f}", ms(o.min()),
               ms(np.median(o))]
        if "pyhsmm" in r:
            p = np.asarray(r["pyhsmm"])
            row += [ms(p.min()), ms(np.median(p)), f"**{p.min() / o.min():.2f}x**", f"{np.median(p) / np.median(o):.2f}x",
                    f"{r['ours_hamming']:.3f} / {r['pyhsmm_hamming']:.3f}", f"{r['ours_states']} / {r['pyhsmm_states']}",
                    _loglik_cell(r)]
            config = f"HDP-HSMM 2-D, T = {r['T']}, K = {r['K']}, D = {r['max_duration']}"
            for stat, a, b in (("minimum", o.min(), p.min()), ("median", np.median(o), np.median(p))):
                comps.append({"kernel": KERNEL_NAMES[title], "peer": "pyhsmm", "config": config,
                              "ours_ms": round(float(a * 1e3), 3), "peer_ms": round(float(b * 1e3), 3),
                              "ratio": round(float(b / a), 2), "statistic": stat})
        else:
            row += ["-", "-", "-", "-", f"{r['ours_hamming']:.3f} / -", f"{r['ours_states']} / -", _loglik_cell(r)]
        rows.append(row)
    intro = (
        "The explicit-duration HDP-HSMM (`nh.HDPHSMM` sampled by `WeakLimitGibbs`) against pyhsmm's "
        "`WeakLimitHDPHSMM` (C++ HSMM messages, float64, one OpenBLAS thread), one process each, the same data "
        "and prior: 5 states, 2-D unit-covariance Gaussians (means on a circle of radius 2.5), durations "
        "`1 + Poisson(29)` (mean 30), uniform transitions; constant gamma = 1, alpha = 4, Poisson durations with "
        "`lambda ~ Gamma(2, rate 0.1)` on both sides (`d - 1 ~ Poisson(lambda)` on both), the data-scaled NIW "
        "prior, capacity K, durations at most D (ours: the truncated law renormalized on {1..D}; pyhsmm: "
        "`trunc=D`, not renormalized), last segment right-censored.  Ours float32, "
        f"{args.per_call} sweeps per compiled call; column sweeps: warm-up sweeps each (pyhsmm's while ours "
        "compiles), then alternating blocks of sweeps of each (fewer where pyhsmm's sweep takes seconds; "
        f"pyhsmm's sweep-by-sweep times averaged over the same groups of {args.per_call}).  ms per sweep, minimum and median over the groups; speed-up = "
        "pyhsmm / ours.  Compile: ours `init` (its compilation included) + the sweep program's compilation, "
        "seconds, apart from the sweeps.  Hamming: normalized distance of the last state sequence to the truth "
        "(optimal matching) after all the sweeps of the row, from each sampler's own random start; states: distinct labels in that sequence; "
        "log-lik: log p(y | the parameters after the last sweep), states and durations summed out, each by its own messages "
        "(ours `nh.marginal_log_likelihood`; pyhsmm `log_likelihood(y, trunc=D)`, whose law is not renormalized on {1..D}).")
    tab = results.table(["T", "K", "D", "sweeps", "ours compile (s)", "ours min (ms)", "ours median (ms)", "pyhsmm min (ms)",
                         "pyhsmm median (ms)", "speed-up (minima)", "speed-up (medians)", "Hamming ours / pyhsmm",
                         "states ours / pyhsmm", "log-lik ours / pyhsmm"], rows, ["r"] * 14)
    blocks = [results.text(intro), tab]
    if long_rec is not None:
        blocks.append(results.text(long_paragraph(long_rec, f"Ours alone at T = {long_rec['T']}, K = {long_rec['K']}, "
                                                            f"D = {long_rec['max_duration']}", args.per_call, 2)))
    return results.save(QUESTION, title, blocks, command, comparisons=comps or None,
                        data={"configs": recs, "long": long_rec})


def long_paragraph(r, label: str, per_call: int, digits: int) -> str:
    """The sentence on ours alone on a long series (:func:`run_long`'s record ``r``), after ``label``."""
    return (f"{label}: compile {r['init_s']:.0f} + {r['compile_s']:.0f} s, {min(r['ours']):.{digits}f} s per sweep "
            f"(minimum over {len(r['ours'])} calls of {per_call} sweeps), Hamming {r['ours_hamming']:.3f} with "
            f"{r['ours_states']} states after {r['sweeps']} sweeps.")


def peer_parser(description: str, long_steps: int) -> argparse.ArgumentParser:
    """The options of the HSMM runs against pyhsmm (this module and :mod:`.hsmm_negbin`)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--pyhsmm", metavar="PYTHON", help="Python of an environment with pyhsmm (else ours alone)")
    parser.add_argument("--pyhsmm-path", help="PYTHONPATH for the pyhsmm worker (an in-place build)")
    parser.add_argument("--quick", action="store_true", help="one tiny configuration; records nothing")
    parser.add_argument("--long", action="store_true", help=f"also ours alone at T = {long_steps}")
    parser.add_argument("--per-call", type=int, default=5)
    parser.add_argument("--no-save", action="store_true")
    return parser


def main(argv=None):
    parser = peer_parser(__doc__.splitlines()[0], LONG[0])
    parser.add_argument("--extra", action="store_true",
                        help=f"K = 50 instead of the default configurations (section {SECTION_EXTRA!r})")
    parser.add_argument("--huge", action="store_true",
                        help=f"T = 10^5 side by side, one sweep per call (section {SECTION_HUGE!r})")
    parser.add_argument("--sweeps-scale", type=float, default=1.0, help="scales the blocks of every configuration")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.huge:
        args.per_call = 1
    if any(c[3] % args.per_call or c[5] % args.per_call for c in CONFIGS + QUICK + EXTRA):
        parser.error("--per-call must divide the warm-up sweeps and the sweeps per block of every configuration")
    if args.quick:
        args.no_save = True
    command = results.command_line("sweeps hsmm", argv)
    configs = QUICK if args.quick else HUGE if args.huge else EXTRA if args.extra else CONFIGS
    title = SECTION_HUGE if args.huge else SECTION_EXTRA if args.extra else SECTION
    recs, long_rec = [], None
    with tempfile.TemporaryDirectory() as tmp:
        worker = peers.Worker("pyhsmm", args.pyhsmm, args.pyhsmm_path) if args.pyhsmm else None
        try:
            for T, K, D, warmup, blocks, block_sweeps in configs:
                if args.sweeps_scale != 1:
                    blocks = max(1, round(blocks * args.sweeps_scale))
                recs.append(run_config(T, K, D, worker, tmp, warmup, blocks, block_sweeps, args.per_call))
                if not args.no_save:  # after each configuration: a later failure keeps what was measured
                    save(recs, None, args, command, title)
        finally:
            if worker is not None:
                worker.close()
    if args.long:
        long_rec = run_long(*(QUICK[0][:3] if args.quick else LONG), sweeps=10, per_call=args.per_call)
    if not args.no_save:
        print("saved", save(recs, long_rec, args, command, title))


if __name__ == "__main__":
    main()
