"""Seconds per sweep of ``PGAS`` against the number of instantiated states, and the beam sampler at equal K.

Tripuraneni et al. (2015) claim a sweep linear in the number ``K`` of instantiated states:
``O(T N K)`` with the posterior proposal and ``O(T N)`` with the prior proposal (a fitted
exponent <= 1.1 is the target for the prior proposal).  The kernels hold the states in
fixed-capacity arrays (``max_states = L`` slots, masks for the instantiated ones), so a sweep
may cost in ``K``, in ``L``, or in both; this script separates the two:

* **K series**: ``K`` in {4, 8, 16, 32, 64, 128} well-separated true states, capacity ``L = 2K``;
* **L series**: ``K = 8`` true states, capacity ``L`` in {16, 64, 256, 1024}.

Data: ``T`` steps (default 2000) of 1-D Gaussian observations, segments of 10 steps, the
segment's state a random permutation of the ``K`` states cycled (every state used), state means
``6 k`` (s.d. 1: well separated).  Model: sticky HDP-HMM with constant ``gamma = 1, alpha = 1,
kappa = 10`` (no hyperparameter updates, so the sweep is the state update plus the given-states
step), ``GaussianNIW.weakly_informative(y)``.  Every kernel starts from the true labels
(``init_params={"y_states": labels}``: the chain starts with the K true states in use).

Kernels: ``PGAS(proposal="prior", num_particles=10)``, ``PGAS(proposal="posterior",
num_particles=10)``, ``BeamSampler``, and the prior proposal's conditional SMC alone
(:func:`smc_sweep`: step 1 of the sweep, the rows and parameters held fixed), which separates
the particles' cost from the given-states steps' ``O(T L + L^2)``.  For each, a jitted sweep (``jax.jit(kernel.sample)``
on the state from ``kernel.init``) is compiled and run for ``--warmup`` sweeps; then every
configuration is timed in turn, ``--repeats`` rounds of one sweep each (the configurations
interleaved, so that the machine's load falls on all alike), chaining the sweeps; the table
gives the median.  ``K used`` / ``inst.``: the states in use after the timed sweeps and the mean
number instantiated during them (PGAS: at the end of the conditional SMC; beam: after the stick
extension).  Exponent: the least-squares slope of log(seconds per sweep) on log(K) (K series)
or on log(L) (L series).

Usage::

    python -m benchmarks.scaling states [--quick] [--steps T] [--repeats R] [--no-save]

``--quick``: a smoke run (K in {4}, L in {8}, T = 200, 2 repeats).  Results: the "PGAS cost in
the number of states" section of ``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any, NamedTuple

import numpy as np

from ..harness import models, results, timing

QUESTION = "scaling"
SECTION = "PGAS cost in the number of states"
KERNELS = ("PGAS prior", "PGAS prior, SMC only", "PGAS posterior", "BeamSampler")
SMC_ONLY = " SMC only"


def model_for(L):
    return models.fixed_model(L)


def synthetic(T, K, seed=0, segment=10):
    """``(y (T, 1) float32, labels (T,))``: segments of ``segment`` steps, the states a random
    permutation of ``0..K-1`` cycled, means ``6 k``, s.d. 1."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(K)
    num_segments = -(-T // segment)
    labels = np.repeat(order[np.arange(num_segments) % K], segment)[:T]
    y = (6.0 * labels + rng.normal(size=T)).astype(np.float32)[:, None]
    return y, labels.astype(np.int32)


def make_kernel(name, model):
    from numpyro_hdphmm.infer import PGAS, BeamSampler

    if name == "PGAS prior":
        return PGAS(model, num_particles=10, proposal="prior")
    if name == "PGAS posterior":
        return PGAS(model, num_particles=10, proposal="posterior")
    return BeamSampler(model)


def prepare(name, K, L, T, warmup, seed=0):
    """A compiled sweep of kernel ``name`` on ``K`` true states with capacity ``L``, its state
    after ``warmup`` sweeps from the true labels, and the compile time."""
    import jax
    import jax.numpy as jnp

    y, labels = synthetic(T, K, seed)
    smc_only = name.endswith(SMC_ONLY)
    kernel = make_kernel(name.split(",")[0], model_for(L))
    state = kernel.init(jax.random.key(seed), 0, {"y_states": jnp.asarray(labels)}, (y,), {})
    if smc_only:
        step, state = smc_sweep(kernel, state, y, L, seed)
    else:
        step = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    t0 = time.perf_counter()
    compiled = step.lower(state).compile()
    compile_s = time.perf_counter() - t0
    state = jax.block_until_ready(compiled(state))
    for _ in range(warmup):
        state = compiled(state)
    return {"name": name, "K": K, "L": L, "run": compiled, "state": jax.block_until_ready(state),
            "compile_s": compile_s, "times": [], "inst": [], "overflow": 0}


class _SMCState(NamedTuple):
    """What :func:`smc_sweep` chains: the reference path and the key (``info``: the number of
    instantiated states at the end of the conditional SMC and ``overflow``, as ``PGASInfo``)."""

    reference: Any
    key: Any
    info: Any
    num_states: Any


def smc_sweep(kernel, state, y, L, seed):
    """The conditional SMC alone (step 1 of a PGAS sweep, :func:`numpyro_hdphmm.infer.algorithms.pgas.conditional_smc`)
    on the rows, ``beta`` and emission parameters of ``state`` held fixed (free slots: prior
    draws), each call's reference the previous call's path: ``(jitted step, state)``."""
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh
    from numpyro_hdphmm._core import crp
    from numpyro_hdphmm.infer.algorithms.pgas import PGASInfo, StateGraph, conditional_smc

    z = state.z
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    x, valid = emission.prepare(jnp.asarray(y))
    explicit = z["y_beta"][:L] > 0
    prior = emission.sample_parameters(jax.random.key(seed + 1), (L,))
    params = {p: jnp.where(explicit.reshape((-1,) + (1,) * (prior[p].ndim - 1)), z[f"y_{p}"], prior[p]) for p in prior}
    graph = StateGraph(z["y_beta"], z["y_trans"], explicit, jnp.zeros((), jnp.int32), jnp.zeros((), bool))
    hyper = crp.Concentrations(*(jnp.asarray(v, z["y_beta"].dtype) for v in (1.0, 1.0, 10.0)))
    proposal = kernel.algorithm.proposal
    num_particles = kernel.algorithm.num_particles

    def step(s):
        key, k_smc, k_reveal = jax.random.split(s.key, 3)
        out = conditional_smc(k_smc, s.reference, graph, explicit, params, emission, x, valid, y.shape[0], hyper,
                              k_reveal, num_particles=num_particles, proposal=proposal)
        used = jnp.zeros((L,), bool).at[out.states].set(True)
        info = PGASInfo(out.graph.overflow, jnp.sum(out.graph.instantiated), *(jnp.zeros(()),) * (len(PGASInfo._fields) - 2))
        return _SMCState(out.states, key, info, jnp.sum(used))

    first = _SMCState(z["y_states"], jax.random.key(seed + 2), None, None)
    return jax.jit(step), step(first)


def time_all(configs, repeats):
    """``repeats`` rounds; in each, one sweep of every configuration in turn (the harness timer,
    blocks of one call); records the states instantiated and the overflow of every timed sweep."""
    contenders = {i: timing.Contender(c["run"], c["state"], c["compile_s"]) for i, c in enumerate(configs)}

    def observe(i, state):
        configs[i]["inst"].append(int(state.info.num_instantiated))
        configs[i]["overflow"] += int(state.info.overflow)

    times = timing.alternate(contenders, blocks=repeats, calls_per_block=1, warmup_calls=0, observe=observe)
    for i, c in enumerate(configs):
        c["state"], c["times"] = contenders[i].state, times[i].times
        c["sec"] = times[i].median
        c["used"] = int(c["state"].num_states)


def slope(xs, ys):
    """Least-squares slope of ``log y`` on ``log x``."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def series_table(configs, axis, label):
    keys = sorted({c[axis] for c in configs})
    by = {(c["name"], c[axis]): c for c in configs}
    head = f"| {label} | " + " | ".join(f"{n} ms / sweep (K used, inst.)" for n in KERNELS) + " | beam / PGAS prior | beam / PGAS posterior |"
    lines = [head, "|" + "---|" * (3 + len(KERNELS))]
    for k in keys:
        cells = []
        for n in KERNELS:
            c = by[(n, k)]
            flag = f", {c['overflow']} overflow" if c["overflow"] else ""
            cells.append(f"{c['sec'] * 1e3:.1f} ({c['used']}, {np.mean(c['inst']):.0f}{flag})")
        beam = by[("BeamSampler", k)]["sec"]
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {beam / by[('PGAS prior', k)]['sec']:.2f} | "
                     f"{beam / by[('PGAS posterior', k)]['sec']:.2f} |")
    fits = [f"{slope(keys, [by[(n, k)]['sec'] for k in keys]):.2f}" for n in KERNELS]
    lines.append(f"| **exponent** (slope in log {label.split()[0]}, all points) | " + " | ".join(fits) + " | | |")
    local = [f"{slope(keys[-2:], [by[(n, k)]['sec'] for k in keys[-2:]]):.2f}" for n in KERNELS]
    lines.append("| slope between the last two points | " + " | ".join(local) + " | | |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--steps", type=int, default=None, help="T (default 2000; 1000 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds (default 9; 5 with --quick)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--ks", type=int, nargs="+", default=None, help="K series (capacity 2K)")
    parser.add_argument("--ls", type=int, nargs="+", default=None, help="L series (K = --fixed-k)")
    parser.add_argument("--fixed-k", type=int, default=8)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    T = args.steps or (200 if args.quick else 2000)
    repeats = args.repeats or (2 if args.quick else 9)
    ks = args.ks or ([4] if args.quick else [4, 8, 16, 32, 64, 128])
    ls = args.ls or ([8] if args.quick else [16, 64, 256, 1024])
    if args.quick:
        args.fixed_k = min(args.fixed_k, 4)
    import jax

    load0 = os.getloadavg()[0]
    series = {}
    for tag, points in (("K", [(k, 2 * k) for k in ks]), ("L", [(args.fixed_k, l) for l in ls])):
        configs = []
        for K, L in points:
            for name in KERNELS:
                c = prepare(name, K, L, T, args.warmup)
                print(f"{tag}: {name} K={K} L={L} compiled in {c['compile_s']:.1f} s", flush=True)
                configs.append(c)
        time_all(configs, repeats)
        print(series_table(configs, tag, tag), flush=True)
        for c in configs:
            c.pop("run")
            c.pop("state")
        series[tag] = configs
    load1 = os.getloadavg()[0]
    dtype = str(jax.numpy.result_type(float))
    text = "\n".join([
        f"Seconds per sweep after compilation (median of {repeats} sweeps, every configuration of a series "
        f"timed in turn in each round, after {args.warmup} warm-up sweeps), T = {T} 1-D Gaussian steps with K "
        f"well-separated true states (segments of 10 steps, means 6k, s.d. 1), constant gamma = 1, alpha = 1, "
        f"kappa = 10, every kernel started from the true labels; PGAS with N = 10 particles; {dtype}, "
        f"{jax.devices()[0].device_kind} ({os.cpu_count()} cores, {platform.machine()}), load average "
        f"{load0:.1f} at the start and {load1:.1f} at the end.  Cells: ms per sweep (states in use after the "
        f"timed sweeps, mean instantiated during them).  Exponent: least-squares slope of log seconds on log K "
        f"(or log L).",
        "",
        "#### Against the number of states K (capacity L = 2K)",
        "",
        series_table(series["K"], "K", "K states"),
        "",
        f"#### Against the capacity L (K = {args.fixed_k} states)",
        "",
        series_table(series["L"], "L", "L capacity"),
    ])
    print(text)
    if not args.no_save:
        print(f"saved {results.save(QUESTION, SECTION, text, results.command_line('scaling states', argv))}")


if __name__ == "__main__":
    main()
