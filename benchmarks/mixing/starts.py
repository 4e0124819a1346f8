"""The data-driven start: state discovery from each kernel's default ``init_strategy``.

* two regimes 5 sd apart, T = 400, ``GaussianNIW.weakly_informative``, Gamma hyperpriors,
  ``max_states = 20``: the first sweep (of 50) at which both regimes are found, 3 seeds (chains),
  each kernel, from ``init_strategy="data"`` and ``"prior"``;
* the discovery benchmark (``models.segmented_gaussian(1000, 2)``: 10 segments, K = 30, fixed
  hyperparameters): segments found after 50 sweeps;
* 2-D, 5 well-separated states (means on a 6-unit grid and the centre, unit noise, sticky
  self-transition 0.99), T = 10^4, L = 30, fixed hyperparameters, weak limit: Hamming distance
  after 300 sweeps, 6 chains;
* motion capture, AR(1) emissions (``examples/mocap.py``'s model, without its hand-made
  initial values): median over the last 100 draws of the Hamming distance, 4 chains;
* ``mocap-features``: the same, seeds 0-2, alternately with the autoregressive family's clustering
  features (the values, lag-one products and increments: ``AutoRegressive.clustering_features``)
  and with the values alone (the family default, the start before), in one process.

A true state counts as *found* when the state matched to it by the optimal one-to-one
matching (``scipy.optimize.linear_sum_assignment`` on the confusion matrix) covers more than
half of its steps.  Chains are vectorized (one compiled program per kernel and case).
Run:  python -m benchmarks.mixing starts [case ...] [--quick] [--no-save]   (cases: regimes discovery five mocap)

Results: the section "Initialization: cases" of ``benchmarks/results/mixing.json`` (one row per
case, kernel and strategy; the figures as recorded JSON).
"""

import argparse
import json
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import PGAS, BeamSampler, DirectAssignmentGibbs, RCDSampler, WeakLimitGibbs

from ..harness import models, results
from ..harness.stats import majority

QUESTION = "mixing"
KERNELS = (WeakLimitGibbs, DirectAssignmentGibbs, BeamSampler, RCDSampler, PGAS)


def found(states, truth):
    """True states (of ``truth``) whose matched state covers more than half of their steps."""
    s_vals, s = np.unique(states, return_inverse=True)
    t_vals, t = np.unique(truth, return_inverse=True)
    conf = np.zeros((len(t_vals), len(s_vals)))
    np.add.at(conf, (t, s), 1)
    rows, cols = linear_sum_assignment(-conf)
    return int(np.sum(conf[rows, cols] > 0.5 * conf.sum(1)[rows]))


def run_chains(kernel, y_args, num_chains, sweeps, seed=0, record=lambda s: s.z):
    keys = jax.random.split(jax.random.key(seed), num_chains)
    state = kernel.init(keys, 0, None, y_args, {})

    def body(s, _):
        s = kernel.sample(s, y_args, {})
        return s, s.z[kernel.spec.sites.states]

    t0 = time.perf_counter()
    final, states = jax.jit(lambda s: jax.lax.scan(body, s, None, length=sweeps))(state)
    states = np.asarray(jax.block_until_ready(states))  # (sweeps, chains, ...)
    return np.asarray(state.z[kernel.spec.sites.states]), np.swapaxes(states, 0, 1), time.perf_counter() - t0


def regimes_model(y):
    """The README's model."""
    return models.readme_model()(y)


def case_regimes(sweeps=50, num_chains=3, strategies=("data", "prior")):
    truth = (np.arange(400) // 100) % 2
    y = np.random.default_rng(0).normal(5.0 * truth, 1.0)[:, None].astype(np.float32)
    out = []
    for cls in KERNELS:
        for strategy in strategies:
            z0, zs, sec = run_chains(cls(regimes_model, init_strategy=strategy), (jnp.asarray(y),), num_chains, sweeps)
            first = []
            for c in range(num_chains):
                hits = [i for i in range(sweeps) if found(zs[c, i], truth) == 2]
                first.append(0 if found(z0[c], truth) == 2 else (hits[0] + 1 if hits else None))
            out.append(dict(case="regimes", kernel=cls.__name__, strategy=strategy, first_sweep_both=first,
                            at_end=[found(zs[c, -1], truth) for c in range(num_chains)], seconds=round(sec, 1)))
            print(json.dumps(out[-1]), flush=True)
    return out


def case_discovery(sweeps=50, num_chains=3, strategies=("data",)):
    y = models.segmented_gaussian(1000, 2)
    truth = models.segments(1000)
    out = []
    for cls in KERNELS:
        for strategy in strategies:
            model = models.fixed_model(30)
            z0, zs, sec = run_chains(cls(model, init_strategy=strategy), (jnp.asarray(y),), num_chains, sweeps)
            out.append(dict(case="discovery", kernel=cls.__name__, strategy=strategy,
                            at_init=[found(z0[c], truth) for c in range(num_chains)],
                            at_end=[found(zs[c, -1], truth) for c in range(num_chains)], seconds=round(sec, 1)))
            print(json.dumps(out[-1]), flush=True)
    return out


def five_state_data(T=10000, seed=0):
    rng = np.random.default_rng(seed)
    means = np.array([[0, 0], [6, 0], [0, 6], [6, 6], [3, 3]], np.float32)
    switch = rng.random(T) < 0.01
    draws = rng.integers(5, size=T)
    z = np.zeros(T, int)
    for t in range(1, T):
        z[t] = draws[t] if switch[t] else z[t - 1]
    return (means[z] + rng.normal(size=(T, 2))).astype(np.float32), z


def case_five(sweeps=300, num_chains=6, strategies=("data",), last=100, T=10000):
    y, truth = five_state_data(T)
    out = []
    for strategy in strategies:
        kernel = WeakLimitGibbs(models.fixed_model(30), init_strategy=strategy)
        z0, zs, sec = run_chains(kernel, (jnp.asarray(y),), num_chains, sweeps)
        ham = [float(nh.diagnostics.hamming_distance(zs[c, -1][None], truth)[0]) for c in range(num_chains)]
        ham0 = [float(nh.diagnostics.hamming_distance(z0[c][None], truth)[0]) for c in range(num_chains)]
        path = [np.asarray(nh.diagnostics.hamming_distance(zs[c], truth)) for c in range(num_chains)]  # (sweeps,)
        first_zero = [int(np.argmax(h == 0)) + 1 if np.any(h == 0) else None for h in path]
        out.append(dict(case="five", kernel="WeakLimitGibbs", strategy=strategy, hamming_init=ham0, hamming_end=ham,
                        first_sweep_at_zero=first_zero, sweeps_at_zero=[int(np.sum(h == 0)) for h in path],
                        hamming_point_estimate=[float(nh.diagnostics.hamming_distance(majority(zs[c, -last:]), truth))
                                                for c in range(num_chains)],
                        seconds=round(sec, 1)))
        print(json.dumps(out[-1]), flush=True)
    return out


def case_mocap(sweeps=300, num_chains=4, strategies=("data",), last=100, seed=0):
    mocap = models.example_module("mocap")
    data = nh.datasets.load_mocap6()
    lengths = np.asarray(data.lengths)
    y, _, _ = mocap.standardize(data.observations, lengths)
    truth = mocap.valid_frames(data.states, lengths)
    emission = mocap.emission_prior(y, lengths)
    out = []
    for strategy in strategies:
        kernel = WeakLimitGibbs(mocap.make_model(emission, 30), init_strategy=strategy)
        args = (jnp.asarray(y), jnp.asarray(lengths, jnp.int32))
        z0, zs, sec = run_chains(kernel, args, num_chains, sweeps, seed=seed)
        states = mocap.valid_frames(zs, lengths)  # (chains, sweeps, frames)
        med = [float(np.median(nh.diagnostics.hamming_distance(states[c, -last:], truth))) for c in range(num_chains)]
        point = [float(nh.diagnostics.hamming_distance(majority(states[c, -last:]), truth)) for c in range(num_chains)]
        start = mocap.valid_frames(np.asarray(z0), lengths)
        at_start = [round(float(nh.diagnostics.hamming_distance(start[c][None], truth)[0]), 3) for c in range(num_chains)]
        out.append(dict(case="mocap", kernel="WeakLimitGibbs", strategy=strategy, hamming_at_start=at_start,
                        median_hamming=med,
                        median_over_chains=float(np.median(med)), hamming_point_estimate=point,
                        num_states_end=[int(len(np.unique(states[c, -1]))) for c in range(num_chains)],
                        seconds=round(sec, 1)))
        print(json.dumps(out[-1]), flush=True)
    return out


def case_mocap_features(seeds=(0, 1, 2), **options):
    """:func:`case_mocap` with the autoregressive features and with the values alone, alternately."""
    out = []
    for seed in seeds:
        for features, values_only in (("values, lag products, increments", False), ("values only (before)", True)):
            with models.autoregressive_start(values_only):
                for row in case_mocap(seed=seed, **options):
                    out.append({**row, "strategy": f"data, features: {features}", "seed": seed})
    return out

CASES = {"regimes": case_regimes, "discovery": case_discovery, "five": case_five, "mocap": case_mocap,
         "mocap-features": case_mocap_features}

QUICK = {"regimes": dict(sweeps=2, num_chains=2, strategies=("data",)), "discovery": dict(sweeps=2, num_chains=2),
         "five": dict(sweeps=3, num_chains=2, last=2, T=400), "mocap": dict(sweeps=2, num_chains=2, last=2),
         "mocap-features": dict(seeds=(0,), sweeps=2, num_chains=2, last=2)}


def _rounded(value):
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def figures_table(rows):
    """One row per case, kernel and strategy, the other figures (floats to 3 decimals) in one column."""
    return results.table(["case", "kernel", "strategy", "figures"],
                         [[r["case"], r["kernel"], r["strategy"],
                           "; ".join(f"{k} {_rounded(v)}" for k, v in r.items() if k not in ("case", "kernel", "strategy"))]
                          for r in rows], ["l", "l", "l", "l"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=list(CASES) + [[]], default=[])
    parser.add_argument("--quick", action="store_true", help="2-3 sweeps of 2 chains per case (a smoke run)")
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    warnings.simplefilter("ignore", RuntimeWarning)
    rows = []
    for name in args.cases or list(CASES):
        rows += CASES[name](**(QUICK[name] if args.quick else {}))
    if not args.no_save:
        tab = figures_table(rows)
        title = ("Initialization: autoregressive features on motion capture" if args.cases == ["mocap-features"]
                 else "Initialization: cases")
        print("saved", results.save(QUESTION, title, [results.text(
            "Each case from the kernels' default `init_strategy` (see the module doc of `benchmarks/mixing/starts.py`): "
            "a true state is *found* when the state matched to it covers more than half of its steps."), tab],
            results.command_line("mixing starts", argv), data=rows))


if __name__ == "__main__":
    main()
