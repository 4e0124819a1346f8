"""Issue 16's initialization targets, measured from each kernel's default ``init_strategy``.

* two regimes 5 sd apart, T = 400, ``GaussianNIW.weakly_informative``, Gamma hyperpriors,
  ``max_states = 20``: the first sweep (of 50) at which both regimes are found, 3 seeds (chains),
  each kernel, from ``init_strategy="data"`` and ``"prior"``;
* the discovery benchmark (``bench_beam.synthetic_data(1000, 2)``: 10 segments, K = 30, fixed
  hyperparameters): segments found after 50 sweeps;
* 2-D, 5 well-separated states (means on a 6-unit grid and the centre, unit noise, sticky
  self-transition 0.99), T = 10^4, L = 30, fixed hyperparameters, weak limit: Hamming distance
  after 300 sweeps, 6 chains;
* motion capture, AR(1) emissions (``examples/mocap.py``'s model, without its hand-made
  initial values): median over the last 100 draws of the Hamming distance, 4 chains.

A true state counts as *found* when the state matched to it by the optimal one-to-one
matching (``scipy.optimize.linear_sum_assignment`` on the confusion matrix) covers more than
half of its steps.  Chains are vectorized (one compiled program per kernel and case).
Run:  python benchmarks/bench_initialization.py [case ...]   (cases: regimes discovery five mocap)
"""

import json
import os
import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import linear_sum_assignment

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

import numpyro_hdphmm as nh  # noqa: E402
from numpyro_hdphmm.infer import PGAS, BeamSampler, DirectAssignmentGibbs, RCDSampler, WeakLimitGibbs  # noqa: E402

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
    """The README's model (bench_split_merge.readme_model)."""
    import bench_split_merge

    return bench_split_merge.readme_model()(y)


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
    import bench_beam

    y = bench_beam.synthetic_data(1000, 2)
    truth = bench_beam.segments(1000)
    out = []
    for cls in KERNELS:
        for strategy in strategies:
            model = bench_beam.fixed_model(30)
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


def majority(draws):
    """The per-step majority label of ``draws (S, T)``, each draw relabelled to the last one first
    (:func:`numpyro_hdphmm.results.diagnostics.relabel`), so that a label switch cannot split a state."""
    aligned = np.asarray(nh.diagnostics.relabel(draws, draws[-1])[0])
    votes = np.zeros((draws.shape[-1], int(aligned.max()) + 1), np.int32)
    np.add.at(votes, (np.broadcast_to(np.arange(draws.shape[-1]), aligned.shape), aligned), 1)
    return votes.argmax(-1)


def case_five(sweeps=300, num_chains=6, strategies=("data",), last=100):
    import bench_weak_limit

    y, truth = five_state_data()
    out = []
    for strategy in strategies:
        kernel = WeakLimitGibbs(bench_weak_limit.fixed_model(30), init_strategy=strategy)
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
    import mocap

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
        out.append(dict(case="mocap", kernel="WeakLimitGibbs", strategy=strategy, median_hamming=med,
                        median_over_chains=float(np.median(med)), hamming_point_estimate=point,
                        num_states_end=[int(len(np.unique(states[c, -1]))) for c in range(num_chains)],
                        seconds=round(sec, 1)))
        print(json.dumps(out[-1]), flush=True)
    return out


CASES = {"regimes": case_regimes, "discovery": case_discovery, "five": case_five, "mocap": case_mocap}

if __name__ == "__main__":
    warnings.simplefilter("ignore", RuntimeWarning)
    for name in sys.argv[1:] or list(CASES):
        CASES[name]()
