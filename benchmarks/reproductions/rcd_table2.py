"""The RCD paper's Table 2 on the full *Alice* text: held-out perplexity, number of states,
seconds per sweep and Gibbs acceptance of ``RCDSampler`` per mode after a fixed budget of sweeps.

The set-up of :mod:`benchmarks.sweeps.rcd_speed` (the 27,103 training words, the last 1,000 words held out,
``gamma, alpha ~ Gamma(1, 1)`` resampled every sweep, ``Categorical(V, 0.1)`` integrated out,
capacity ``--capacity``, one chain per mode from ``--states`` random states), run for
``--minutes`` of sweeps per mode (equal time, as the paper's 48 h per run; the first half is
warm-up); every ``--thin``-th sweep of the second half records the explicit draws
(``y_trans``, ``y_probs``: the rows and word distributions drawn given the seating).  The test
perplexity is the paper's eqs. 38-39, ``exp(-log p(y_test | y_train) / 1000)`` with the
predictive averaged over the recorded draws, each scored exactly by the forward algorithm
(:func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`) instead of the paper's
100-particle filter over seatings.  The paper's numbers: 48 h of C++ per run on a 3 GHz Xeon, an
HCRP emission prior (the package has a symmetric Dirichlet), mean over 18 runs.

Usage::

    python -m benchmarks.reproductions rcd-table2 [--modes stepwise,slice] [--emission dirichlet,hcrp]
                                          [--score draws|seating] [--minutes 10] [--thin 10]
                                          [--states 400] [--capacity 600] [--particles 0]
                                          [--write]

``--emission dirichlet,hcrp`` runs each mode with each emission prior (``hcrp``: the paper's HCRP
emission prior, :func:`numpyro_hdphmm.emissions.hierarchical_categorical`); ``--score seating``
scores each draw with its seating's predictive word distributions (:func:`seating_probs`, as the
paper's predictive given a seating) instead of its explicit ``y_probs``, which under the HCRP
prior give the few test words never seen in training almost no mass.

``--states 0`` starts every chain from the kernel's default data-driven start (a few states)
instead of random states; ``--particles P`` adds the paper's evaluation, a particle filter of
``P`` particles per draw (``predictive_log_likelihood(method="particle")``), beside the exact one.

``--write`` (the default; ``--no-save`` prints only) replaces the "RCD Table 2 on Alice" section of ``benchmarks/results/reproductions.json`` (the
"... the HCRP emission prior" section with ``--score seating`` or ``--emission`` other than
``dirichlet``; the "... longer runs from the default start" section with ``--states 0``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..harness import models, results
from ..sweeps.rcd_speed import alice_setup

QUESTION = "reproductions"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/reproductions.json``; returns the path."""
    return results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## RCD Table 2 on Alice"
SECTION_HCRP = "## RCD Table 2 on Alice: the HCRP emission prior"
SECTION_LONG = "## RCD Table 2 on Alice: longer runs from the default start"
#: the paper's Table 2 (HCRP-HMM rows): perplexity, states, seconds per sweep, Gibbs acceptance
PAPER = {"stepwise": (133.31, 379.8, 7.027, 0.999861), "slice": (131.17, 422.0, 0.469, 0.999986),
         "blocked": (199.14, 1840.8, 29380.3, 0.992748), "beam": (141.77, 603.3, 80.681, 0.995627)}


def seating_probs(rng_key, states, y, num_symbols, capacity, phi=None, scale=None):
    """The word distributions of a draw's seating, ``(K, V)``: the posterior mean of each state's
    distribution given the states (and, for the HCRP prior, ``phi``, ``s`` and tables drawn given
    them), as the paper's predictive of a word given the seating (without updating the seating
    with the test words).  ``Dir(0.1)``: ``(n_kw + 0.1) / (n_k. + 0.1 V)``.  HCRP: tables
    ``m_kw ~ p(m | n_kw, s phi_w)`` (:func:`numpyro_hdphmm._core.crp.sample_crp_tables`), the
    base's predictive ``P0_w = (m_.w + B0 / V) / (m_.. + B0)`` (``phi`` integrated out) and
    ``(n_kw + s P0_w) / (n_k. + s)``."""
    import jax.numpy as jnp

    HCRP_B0 = models.HCRP_B0
    from numpyro_hdphmm._core import crp

    n = jnp.zeros((capacity, num_symbols)).at[states, y].add(1.0)
    if phi is None:
        return (n + 0.1) / (n.sum(1, keepdims=True) + 0.1 * num_symbols)
    conc = jnp.broadcast_to(scale * phi, n.shape)
    m = crp.sample_crp_tables(rng_key, n.astype(jnp.int32).reshape(-1), conc.reshape(-1), y.size).reshape(n.shape)
    base = (m.sum(0) + HCRP_B0 / num_symbols) / (m.sum() + HCRP_B0)
    return (n + scale * base) / (n.sum(1, keepdims=True) + scale)


def run_mode(mode, minutes, thin, states, capacity, seed=0, emission_prior="dirichlet", score="draws",
             particles=0):
    """``minutes`` of sweeps (after compiling): the first half warm-up, every ``thin``-th sweep of
    the second half recorded.  ``score="draws"``: the recorded ``y_probs``; ``"seating"``: each
    draw's :func:`seating_probs`.  ``particles > 0``: the draws are also scored by the paper's
    particle filter (``particles`` per draw) besides the forward algorithm."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import numpyro_hdphmm as nh

    _, state, sweep, y, test, emission = alice_setup(mode, states, capacity, seed, emission_prior)
    hcrp = emission_prior == "hcrp"
    keep = ("y_trans", "y_probs") if score == "draws" else ("y_trans", "y_states") + (("phi", "s") if hcrp else ())
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
            draws.append({k: state.z[k] for k in keep})
    wall = time.perf_counter() - start
    if score == "seating":
        for i, d in enumerate(draws):
            d["y_probs"] = seating_probs(jax.random.key(i), d.pop("y_states"), jnp.asarray(y), emission.num_categories,
                                         capacity, d.pop("phi", None), d.pop("s", None))
    samples_ = {k: jnp.stack([d[k] for d in draws]) for k in draws[0]}
    ppl = float(nh.diagnostics.predictive_log_likelihood(samples_, emission, test).perplexity)
    ppl_pf = float("nan")
    if particles:
        ppl_pf = float(nh.diagnostics.predictive_log_likelihood(
            samples_, emission, test, method="particle", num_particles=particles, rng_key=jax.random.key(seed + 1)
        ).perplexity)
    trace = {n: num_states[n - 1] for n in (1, 10, 50, 100, 200, 500, 1000, 2000) if n <= len(num_states)}
    kept = slice(warmup, None)
    return {"mode": mode, "emission": emission_prior, "score": score, "perplexity": ppl, "perplexity_pf": ppl_pf,
            "trace": trace, "states": float(np.mean(num_states[kept])),
            "states_last": num_states[-1], "seconds": float(np.median(seconds)), "accept": float(np.mean(accept[kept])),
            "wall": wall, "sweeps": len(seconds), "warmup": warmup, "draws": len(draws), "overflow": overflow,
            "T": int(y.size)}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="stepwise,slice")
    parser.add_argument("--emission", default="dirichlet", help="emission priors: dirichlet, hcrp or both")
    parser.add_argument("--score", default="draws", choices=("draws", "seating"))
    parser.add_argument("--minutes", type=float, default=10.0, help="wall minutes of sweeps per mode")
    parser.add_argument("--thin", type=int, default=10)
    parser.add_argument("--states", type=int, default=400)
    parser.add_argument("--capacity", type=int, default=600)
    parser.add_argument("--particles", type=int, default=0,
                        help="also score by the paper's particle filter with this many particles per draw")
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few seconds of the slice mode from 20 states, capacity 60, nothing saved")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)
    if args.quick:
        args.modes, args.minutes, args.thin, args.states, args.capacity = "slice", 0.05, 1, 20, 60
    import jax
    import numpy as np

    import numpyro_hdphmm as nh

    rows = []
    for prior in args.emission.split(","):
        for mode in args.modes.split(","):
            r = run_mode(mode, args.minutes, args.thin, args.states, args.capacity, emission_prior=prior,
                         score=args.score, particles=args.particles)
            rows.append(r)
            print(r, flush=True)
    alice = nh.datasets.load_alice()
    num_test = alice.info["num_test"]
    train, test = np.asarray(alice.tokens[:-num_test]), np.asarray(alice.tokens[-num_test:])
    unigram = np.bincount(train, minlength=len(alice.vocabulary)) + 0.1
    baseline = float(np.exp(-np.mean(np.log(unigram[test] / unigram.sum()))))
    priors = {"dirichlet": "`Categorical(V, 0.1)`", "hcrp": "the HCRP emission prior (`phi ~ Dir(1 / V)`, "
              "`probs_k | phi ~ Dir(s phi)`, `s ~ Gamma(1, 1)`, `phi` and `s` updated exactly every sweep)"}
    scoring = ("its explicit draws scored on the test words by the forward algorithm" if args.score == "draws" else
               "its seating's predictive word distributions (`seating_probs`: the posterior mean given the states, "
               "and for the HCRP prior given tables drawn from the states, `phi` integrated out) with its rows scored "
               "on the test words by the forward algorithm")
    start = f"{args.states} random states" if args.states else "the default data-driven start"
    if args.particles:
        scoring += (f", and again by the paper's particle filter ({args.particles} particles per draw, the fully adapted "
                    "filter of `predictive_log_likelihood(method=\"particle\")`)")
    pf_head, pf_rule = (" perplexity (particle filter) |", "---:|") if args.particles else ("", "")
    lines = [
        f"*Alice* (T = {rows[0]['T']:,} training words, the last {num_test:,} held out), non-sticky HDP-HMM, "
        f"`gamma, alpha ~ Gamma(1, 1)`, {' or '.join(priors[p] for p in args.emission.split(','))} integrated out, "
        f"capacity {args.capacity}, one chain per "
        f"mode from {start}, {args.minutes:g} minutes of sweeps per mode (the paper: equal time "
        f"too), the first half warm-up, every {args.thin}th sweep of the second half recorded and {scoring}; "
        f"jax {jax.__version__}, "
        f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the end.  The paper: 48 h of C++ "
        f"per run, an HCRP emission prior, mean of 18 runs.  Unigram baseline (add-0.1): {baseline:.1f}.",
        "",
        f"| mode | emission prior | perplexity |{pf_head} states | s / sweep | Gibbs accept | sweeps (recorded) | "
        "paper: perplexity | states | s / sweep | accept |",
        f"|---|---|---:|{pf_rule}---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        pp, pk, ps, pa = PAPER[r["mode"]]
        pf = f" {r['perplexity_pf']:.1f} |" if args.particles else ""
        lines.append(f"| {r['mode']} | {r['emission']} | {r['perplexity']:.1f} |{pf} {r['states']:.0f} | {r['seconds']:.2f} | "
                     f"{r['accept']:.5f} | {r['sweeps']} ({r['draws']}) | {pp:.2f} | {pk:.0f} | {ps:g} | {pa:.6f} |")
    if any(r["overflow"] for r in rows):
        lines.append("")
        lines.append("Sweeps that overflowed the capacity: " + ", ".join(f"{r['mode']} {r['overflow']}" for r in rows))
    if not args.states:
        lines.append("")
        lines.append("States after 1, 10, 50, 100, 200, 500, 1000, 2000 sweeps: " + "; ".join(
            f"{r['mode']} ({r['emission']}) " + ", ".join(f"{v}" for v in r["trace"].values()) for r in rows))
    text = "\n".join(lines)
    print(text)
    if args.write:
        command = "python -m benchmarks.reproductions rcd-table2 " + " ".join(sys.argv[1:])
        section = (SECTION_LONG if not args.states else
                   SECTION if args.score == "draws" and args.emission == "dirichlet" else SECTION_HCRP)
        print("wrote", _save(section, command.strip(), text))


if __name__ == "__main__":
    main()
