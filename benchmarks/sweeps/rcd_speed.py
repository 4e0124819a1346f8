"""Seconds per sweep of ``RCDSampler`` on *Alice* in each mode, against the speed targets
(step-wise sweep at most 0.7 s and slice sweep at most 0.05 s on 2 cores, i.e. 10 times
the paper's C++ on a 3 GHz Xeon: step-wise 7.0 s, slice 0.47 s per sweep, its Table 2).

Set-up: the *Alice* training words (:func:`numpyro_hdphmm.datasets.load_alice`, the last 1,000
words held out: ``T = 27,103``, ``V = 1,487`` word types), the non-sticky HDP-HMM with
``gamma, alpha ~ Gamma(1, 1)`` (resampled every sweep, as the paper) and ``Categorical(V, 0.1)``
emissions integrated out, capacity ``--capacity`` (default 500), one chain started from
``--states`` (default 400, about the paper's number of states after 48 h) states drawn uniformly
at random.  The kernel is driven through NumPyro's ``MCMCKernel`` interface: one jitted
``kernel.sample`` (a whole sweep: the moves, the hyperparameter update and the record of the
explicit draws), compiled first, then timed ``--repeats`` times (the median is reported).

Each configuration runs in a fresh subprocess, with and without XLA's
``--xla_cpu_copy_insertion_use_region_analysis=true`` (``XLA_FLAGS``; it must be set before JAX
starts, hence the subprocesses): the flag lets XLA:CPU keep more large arrays in place inside
loops (:mod:`numpyro_hdphmm._core.ordering`).

Usage::

    python -m benchmarks.sweeps rcd [--modes stepwise,slice,blocked,beam] [--states 400]
                                         [--capacity 500] [--repeats 3] [--floor] [--write]

``--write`` (the default; ``--no-save`` prints only) replaces the "RCD speed on Alice" section of ``benchmarks/results/sweeps.json``.

``--floor`` instead times the least work any exact single-step move of a static-shape sweep must
do (:func:`floor_sweep`), with no sampler around it: the lower bound of the slice and step-wise
sweeps on this machine.  With ``--write`` it replaces the "RCD speed on Alice: the floor of a
static-shape step" section.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from ..harness import models, results

QUESTION = "sweeps"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/sweeps.json``; returns the path."""
    return results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## RCD speed on Alice"
SECTION_FLOOR = "## RCD speed on Alice: the floor of a static-shape step"
FLAG = "--xla_cpu_copy_insertion_use_region_analysis=true"
PAPER = {"stepwise": 7.027, "slice": 0.469, "blocked": 29380.3, "beam": 80.681}  # Table 2, s per sweep
TARGET = {"stepwise": 0.7, "slice": 0.05}




def alice_setup(mode: str, states: int, capacity: int, seed: int = 0, emission_prior: str = "dirichlet"):
    """The set-up of the module docstring: ``(kernel, state, sweep, train, test, emission)`` with
    ``sweep`` the jitted ``kernel.sample`` (not yet compiled).  ``emission_prior="hcrp"``: the
    paper's HCRP emission prior instead of ``Dir(0.1)``, a shared base ``phi ~ Dir(HCRP_B0 / V)``
    and ``probs_k | phi ~ Dir(s phi)`` with ``s ~ Gamma(1, 1)``
    (:func:`numpyro_hdphmm.emissions.hierarchical_categorical`, sites ``phi`` and ``s``).
    ``states = 0`` starts from the kernel's default data-driven start instead of ``states`` random
    states."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import numpyro_hdphmm as nh

    alice = nh.datasets.load_alice()
    num_test = alice.info["num_test"]
    y, test = np.asarray(alice.tokens[:-num_test]), np.asarray(alice.tokens[-num_test:])
    model, emission = models.alice_words_model(len(alice.vocabulary), capacity, emission_prior)
    kernel = nh.infer.RCDSampler(model, mode=mode, block_size=10)
    init = None  # states = 0: the kernel's default (data-driven) start
    if states:
        rng = np.random.default_rng(seed)
        beta = np.zeros(capacity + 1, np.float32)
        beta[:states] = 0.9 / states
        beta[capacity] = 0.1
        init = {"y_states": jnp.asarray(rng.integers(0, states, size=y.shape), jnp.int32), "y_beta": jnp.asarray(beta)}
    state = kernel.init(jax.random.key(seed), 0, init, (y,), {})
    sweep = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    return kernel, state, sweep, y, test, emission


def worker(mode: str, states: int, capacity: int, repeats: int, seed: int = 0) -> dict:
    """One configuration, in this process: compile and time ``kernel.sample``."""
    import jax
    import numpy as np

    _, state, sweep, y, _, emission = alice_setup(mode, states, capacity, seed)
    t0 = time.perf_counter()
    state = jax.block_until_ready(sweep(state))
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state = jax.block_until_ready(sweep(state))
        times.append(time.perf_counter() - t0)
    return {"mode": mode, "T": int(y.size), "V": emission.num_categories, "capacity": capacity, "start_states": states,
            "seconds": float(np.median(times)), "all_seconds": [float(t) for t in times], "compile_s": compile_s,
            "states_after": int(state.num_states), "gibbs_accept": float(state.info.gibbs_accept),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def run_subprocess(mode, states, capacity, repeats, flag: bool) -> dict:
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").replace(FLAG, "").strip()
    env["XLA_FLAGS"] = (flags + " " + FLAG).strip() if flag else flags
    out = subprocess.run([sys.executable, "-m", "benchmarks.sweeps", "rcd", "--worker", mode, "--states", str(states),
                          "--capacity", str(capacity), "--repeats", str(repeats)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def floor_sweep(num_steps: int, capacity: int, num_words: int, counts: bool):
    """A jitted loop of ``num_steps`` steps doing the least an exact single-step move over
    ``capacity`` states must do, for timing only (its draws mean nothing): read the count row of
    the previous state and the column of the next one (``(K,)`` each), the emission statistics'
    column of the step's word (``(K,)``), combine them into the unnormalized conditional
    ``(n_jk + a)(n_kl + a) / (n_k + b) * e_k(w)``, draw ``k`` by inversion and store it; with
    ``counts=True`` also move the step's three customers (the two transitions and the word) from
    the old state to the new one: one scatter-add into each of the ``(K, K)`` and ``(K, V)``
    arrays, chained after the state's write so that XLA updates them in place
    (:mod:`numpyro_hdphmm._core.ordering`).
    Returns ``run(key) -> state sequence``."""
    import jax
    import jax.numpy as jnp

    from numpyro_hdphmm._core.ordering import after, any_element

    words = jnp.zeros(num_steps, jnp.int32)
    # random counts, passed in (constants would let XLA fold the reads away)
    trans = jax.random.uniform(jax.random.key(1), (capacity, capacity))
    emit = jax.random.uniform(jax.random.key(2), (capacity, num_words))

    @jax.jit
    def loop(key, trans, emit):
        def body(t, carry):
            z, n, e = carry
            prev, nxt, word, old = z[t - 1], z[t + 1], words[t], z[t]
            row, col = n[prev], n[:, nxt]
            weights = (row + 0.5) * (col + 0.5) / (row.sum() + 1.0) * e[:, word]
            cdf = jnp.cumsum(weights)
            k = jnp.minimum(jnp.searchsorted(cdf, jax.random.uniform(jax.random.fold_in(key, t)) * cdf[-1]),
                            capacity - 1).astype(jnp.int32)
            z = z.at[t].set(k)
            if counts:  # one scatter per array, chained after the other outputs (_core.ordering)
                go = after(jnp.asarray(True), z[t]).astype(n.dtype)
                n = n.at[jnp.stack([prev, old, prev, k]), jnp.stack([old, nxt, k, nxt])].add(
                    go * jnp.array([-1.0, -1.0, 1.0, 1.0]))
                go = after(jnp.asarray(True), any_element(n)).astype(e.dtype)
                e = e.at[jnp.stack([old, k]), word].add(go * jnp.array([-1.0, 1.0]))
            return z, n, e

        z = jnp.zeros(num_steps + 1, jnp.int32)
        return jax.lax.fori_loop(1, num_steps, body, (z, trans, emit))[0]

    return lambda key: loop(key, trans, emit)


def _report(section: str, lines, write: bool):
    """Print the table and, with ``--write``, replace ``section`` of ``benchmarks/results/sweeps.json``."""
    text = "\n".join(lines)
    print(text)
    if write:
        command = "python -m benchmarks.sweeps rcd " + " ".join(sys.argv[1:])
        print("wrote", _save(section, command.strip(), text))


def floor_main(args):
    import jax
    import numpy as np

    import numpyro_hdphmm as nh

    alice = nh.datasets.load_alice()
    num_steps = len(alice.tokens) - alice.info["num_test"]
    rows = []
    for capacity in (100, args.capacity, 800):
        for counts in (False, True):
            run = floor_sweep(num_steps, capacity, len(alice.vocabulary), counts)
            jax.block_until_ready(run(jax.random.key(0)))
            times = []
            for r in range(args.repeats):
                t0 = time.perf_counter()
                jax.block_until_ready(run(jax.random.key(r)))
                times.append(time.perf_counter() - t0)
            rows.append((capacity, counts, float(np.median(times))))
            print(rows[-1], flush=True)
    lines = [
        f"A jitted loop over the *Alice* training words (T = {num_steps:,}, V = {len(alice.vocabulary):,}) doing only "
        "the least an exact single-step move over `K` static-shape states must do (`floor_sweep`): read the count "
        "row of the previous state, the column of the next one and the emission column of the word, combine them, "
        "draw the new state by inversion; \"+ counts\" also moves the step's three customers (one in-place scatter-add "
        "into each count array). "
        f"No tables, no acceptance test, no hyperparameters.  Median of {args.repeats} after compiling; "
        f"jax {jax.__version__}, {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| K | s / sweep, draw only | us / step | s / sweep, + counts | us / step | slice target |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for capacity in dict.fromkeys(r[0] for r in rows):
        bare = next(r[2] for r in rows if r[0] == capacity and not r[1])
        full = next(r[2] for r in rows if r[0] == capacity and r[1])
        lines.append(f"| {capacity} | {bare:.3f} | {1e6 * bare / num_steps:.2f} | {full:.3f} | "
                     f"{1e6 * full / num_steps:.2f} | {TARGET['slice']:g} |")
    _report(SECTION_FLOOR, lines, args.write)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="stepwise,slice,blocked,beam")
    parser.add_argument("--states", type=int, default=400)
    parser.add_argument("--capacity", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--floor", action="store_true", help="time the floor of a static-shape step instead")
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: slice mode, 20 states, capacity 60, 1 repeat, nothing saved")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)
    if args.quick:
        args.modes, args.states, args.capacity, args.repeats = "slice", 20, 60, 1
    if args.floor:
        floor_main(args)
        return
    if args.worker:
        print(json.dumps(worker(args.worker, args.states, args.capacity, args.repeats)))
        return

    import jax

    rows = []
    for mode in args.modes.split(","):
        for flag in (False, True):
            r = run_subprocess(mode, args.states, args.capacity, args.repeats, flag)
            r["flag"] = flag
            rows.append(r)
            print(f"{mode:9s} flag={flag!s:5s} {r['seconds']:.3f} s/sweep (runs {r['all_seconds']}), compile "
                  f"{r['compile_s']:.1f} s, states {r['start_states']} -> {r['states_after']}, accept "
                  f"{r['gibbs_accept']:.5f}", flush=True)
    load = os.getloadavg()[0]
    first = rows[0]
    lines = [
        f"*Alice* training words (T = {first['T']:,}, V = {first['V']:,}), non-sticky HDP-HMM, `gamma, alpha ~ "
        f"Gamma(1, 1)` resampled every sweep, `Categorical(V, 0.1)` integrated out, capacity {first['capacity']}, "
        f"one chain from {first['start_states']} random states; seconds of one jitted `kernel.sample` (a whole "
        f"sweep), median of {args.repeats} after compiling; jax {jax.__version__}, {os.cpu_count()} CPU cores, "
        f"load average {load:.1f} at the end.  \"XLA flag\": `XLA_FLAGS={FLAG}`.",
        "",
        "| mode | s / sweep | s / sweep, XLA flag | target | paper (C++, Table 2) | Gibbs accept | compile s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in args.modes.split(","):
        plain = next(r for r in rows if r["mode"] == mode and not r["flag"])
        flagged = next(r for r in rows if r["mode"] == mode and r["flag"])
        target = f"{TARGET[mode]:g}" if mode in TARGET else "-"
        lines.append(f"| {mode} | {plain['seconds']:.3f} | {flagged['seconds']:.3f} | {target} | {PAPER[mode]:g} | "
                     f"{plain['gibbs_accept']:.5f} | {plain['compile_s']:.1f} |")
    _report(SECTION, lines, args.write)


if __name__ == "__main__":
    main()
