"""The RCD paper's Table 2 on the full *Alice* text: held-out perplexity, number of states,
seconds per sweep and Gibbs acceptance of ``RCDSampler`` per mode after a fixed budget of sweeps.

The set-up of ``bench_rcd_speed.py`` (the 27,103 training words, the last 1,000 words held out,
``gamma, alpha ~ Gamma(1, 1)`` resampled every sweep, ``Categorical(V, 0.1)`` integrated out,
capacity ``--capacity``, one chain per mode from ``--states`` random states), run for
``--minutes`` of sweeps per mode (equal time, as the paper's 48 h per run; the first half is
warm-up); every ``--thin``-th sweep of the second half records the explicit draws
(``y_trans``, ``y_probs``: the rows and word distributions drawn given the seating).  The test
perplexity is the paper's eqs. 38-39, ``exp(-log p(y_test | y_train) / 1000)`` with the
predictive averaged over the recorded draws, each scored exactly by the forward algorithm
(:func:`numpyro_hdphmm.diagnostics.predictive_log_likelihood`) instead of the paper's
100-particle filter over seatings.  The paper's numbers: 48 h of C++ per run on a 3 GHz Xeon, an
HCRP emission prior (the package has a symmetric Dirichlet), mean over 18 runs.

Usage::

    python benchmarks/bench_rcd_table2.py [--modes stepwise,slice] [--minutes 10] [--thin 10]
                                          [--states 400] [--capacity 600] [--write]

``--write`` replaces the "RCD Table 2 on Alice" section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _docs import write_section  # benchmarks/_docs.py (scripts run from this folder)
from bench_rcd_speed import alice_setup

SECTION = "## RCD Table 2 on Alice"
#: the paper's Table 2 (HCRP-HMM rows): perplexity, states, seconds per sweep, Gibbs acceptance
PAPER = {"stepwise": (133.31, 379.8, 7.027, 0.999861), "slice": (131.17, 422.0, 0.469, 0.999986),
         "blocked": (199.14, 1840.8, 29380.3, 0.992748), "beam": (141.77, 603.3, 80.681, 0.995627)}


def run_mode(mode, minutes, thin, states, capacity, seed=0):
    """``minutes`` of sweeps (after compiling): the first half warm-up, every ``thin``-th sweep of
    the second half recorded."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import numpyro_hdphmm as nh

    _, state, sweep, y, test, emission = alice_setup(mode, states, capacity, seed)
    state = jax.block_until_ready(sweep(state))  # compiles
    seconds, accept, num_states, overflow, draws = [], [], [], 0, []
    start = time.perf_counter()
    warmup = None
    while time.perf_counter() - start < 60.0 * minutes or len(draws) < 2:
        t0 = time.perf_counter()
        state = jax.block_until_ready(sweep(state))
        seconds.append(time.perf_counter() - t0)
        accept.append(float(state.info.gibbs_accept))
        num_states.append(int(state.num_states))
        overflow += int(state.info.overflow)
        if warmup is None and time.perf_counter() - start >= 30.0 * minutes:
            warmup = len(seconds)
        if warmup is not None and (len(seconds) - warmup) % thin == 0:
            draws.append({k: state.z[k] for k in ("y_trans", "y_probs")})
    wall = time.perf_counter() - start
    samples_ = {k: jnp.stack([d[k] for d in draws]) for k in draws[0]}
    ppl = float(nh.diagnostics.predictive_log_likelihood(samples_, emission, test).perplexity)
    kept = slice(warmup, None)
    return {"mode": mode, "perplexity": ppl, "states": float(np.mean(num_states[kept])),
            "states_last": num_states[-1], "seconds": float(np.median(seconds)), "accept": float(np.mean(accept[kept])),
            "wall": wall, "sweeps": len(seconds), "warmup": warmup, "draws": len(draws), "overflow": overflow,
            "T": int(y.size)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="stepwise,slice")
    parser.add_argument("--minutes", type=float, default=10.0, help="wall minutes of sweeps per mode")
    parser.add_argument("--thin", type=int, default=10)
    parser.add_argument("--states", type=int, default=400)
    parser.add_argument("--capacity", type=int, default=600)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    import jax
    import numpy as np

    import numpyro_hdphmm as nh

    rows = []
    for mode in args.modes.split(","):
        r = run_mode(mode, args.minutes, args.thin, args.states, args.capacity)
        rows.append(r)
        print(r, flush=True)
    alice = nh.datasets.load_alice()
    num_test = alice.info["num_test"]
    train, test = np.asarray(alice.tokens[:-num_test]), np.asarray(alice.tokens[-num_test:])
    unigram = np.bincount(train, minlength=len(alice.vocabulary)) + 0.1
    baseline = float(np.exp(-np.mean(np.log(unigram[test] / unigram.sum()))))
    lines = [
        f"*Alice* (T = {rows[0]['T']:,} training words, the last {num_test:,} held out), non-sticky HDP-HMM, "
        f"`gamma, alpha ~ Gamma(1, 1)`, `Categorical(V, 0.1)` integrated out, capacity {args.capacity}, one chain per "
        f"mode from {args.states} random states, {args.minutes:g} minutes of sweeps per mode (the paper: equal time "
        f"too), the first half warm-up, every {args.thin}th sweep of the second half recorded and its explicit draws "
        f"scored on the test words by the forward algorithm; jax {jax.__version__}, "
        f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the end.  The paper: 48 h of C++ "
        f"per run, an HCRP emission prior, mean of 18 runs.  Unigram baseline (add-0.1): {baseline:.1f}.",
        "",
        "| mode | perplexity | states | s / sweep | Gibbs accept | sweeps (recorded) | paper: perplexity | states "
        "| s / sweep | accept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pp, pk, ps, pa = PAPER[r["mode"]]
        lines.append(f"| {r['mode']} | {r['perplexity']:.1f} | {r['states']:.0f} | {r['seconds']:.2f} | "
                     f"{r['accept']:.5f} | {r['sweeps']} ({r['draws']}) | {pp:.2f} | {pk:.0f} | {ps:g} | {pa:.6f} |")
    if any(r["overflow"] for r in rows):
        lines.append("")
        lines.append("Sweeps that overflowed the capacity: " + ", ".join(f"{r['mode']} {r['overflow']}" for r in rows))
    text = "\n".join(lines)
    print(text)
    if args.write:
        command = "python benchmarks/bench_rcd_table2.py " + " ".join(sys.argv[1:])
        print("wrote", write_section(SECTION, command.strip(), text))


if __name__ == "__main__":
    main()
