"""Replica exchange (``tempering=R``): do chains that start alike end alike, and at what cost?

* ``overlap``: two Gaussian regimes whose means are 1 standard deviation apart (N(-0.5, 1) and
  N(0.5, 1)), 150 steps in three 50-step segments, the README's model (``max_states = 20``), 8
  vectorized chains from the default data-driven start: chains that never leave one state after
  sweep 50, the share of sweeps at one state and R-hat of ``num_states``; each kernel plain, and
  ``WeakLimitGibbs`` with ``tempering=8``.
* ``mocap``: the six motion-capture sequences (``examples/mocap.py``'s AR(1) model), 4 chains:
  R-hat of ``num_states`` and of the log joint, with and without ``tempering=8``, CPU seconds.
* ``set-a``: PGAS synthetic set A (4 states), 8 chains, 300 sweeps: chains at exactly 4 states
  holding 5% of the steps or more at the end.

Every figure is from one process on the machine of the ``environment`` line; the chains are
vectorized (one compiled program per kernel and setting).  R-hat is ArviZ's rank-normalized split
R-hat over the post-warmup draws.
Run:  python -m benchmarks.mixing tempering [overlap mocap set-a] [--quick] [--no-save]
"""

import argparse
import json
import sys
import time
import warnings

import arviz as az
import jax
import numpy as np
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

from ..harness import models, results

QUESTION = "mixing"
SECTION = "Replica exchange"


def _run(kernel, args, num_chains, num_warmup, num_samples, seed=0):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mcmc.run(jax.random.key(seed), *args)
    return mcmc, time.perf_counter() - t0, time.process_time() - c0


def _states_held(z, share):
    """States holding at least ``share`` of the (valid) steps, per draw: ``z (..., T)``."""
    z = np.asarray(z).reshape(z.shape[0], z.shape[1], -1)
    valid = z >= 0
    counts = np.stack([np.sum((z == k) & valid, -1) for k in range(int(z.max()) + 1)], -1)
    return np.sum(counts >= share * valid.sum(-1, keepdims=True), -1)


def _rhat(x):
    return float(az.rhat(np.asarray(x, np.float64)))


def case_overlap(quick=False):
    rng = np.random.default_rng(0)
    truth = np.repeat([0, 1, 0], 50)
    y = rng.normal(truth - 0.5, 1.0)[:, None].astype(np.float64)
    model = models.readme_model(20)
    sweeps = 60 if quick else 500
    rows = []
    settings = [(name, {}) for name in ("WeakLimitGibbs", "DirectAssignmentGibbs", "BeamSampler")]
    settings.append(("WeakLimitGibbs", {"tempering": 8}))
    for name, options in settings:
        mcmc, wall, cpu = _run(models.kernel(name, model, **options), (y,), 8, 0, sweeps)
        k = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_states"])
        stuck = int(np.sum(np.all(k[:, 50:] == 1, axis=1)))
        rows.append({"kernel": name + (f" tempering={options['tempering']}" if options else ""),
                     "chains stuck at 1 state": f"{stuck} / 8", "sweeps at 1 state": float(np.mean(k == 1)),
                     "mean num_states": float(k.mean()), "R-hat num_states": _rhat(k), "wall s": round(wall, 1)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def case_mocap(quick=False, replicas=8):
    prob = models.problem("mocap")
    warm, draws = (5, 5) if quick else (300, 300)
    rows = []
    for options in ({}, {"tempering": replicas}):
        mcmc, wall, cpu = _run(nh.infer.WeakLimitGibbs(prob.model, **options), prob.args, 4, warm, draws)
        f = mcmc.get_extra_fields(group_by_chain=True)
        k, lp = np.asarray(f["num_states"]), np.asarray(f["lp"])
        z = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])
        big = _states_held(z, 0.02)
        row = {"setting": "WeakLimitGibbs" + (f" tempering={replicas}" if options else ""),
               "sweeps": f"{warm} + {draws}", "num_states per chain": [round(float(v), 1) for v in k.mean(1)],
               "R-hat num_states": _rhat(k), "R-hat states >= 2%": _rhat(big), "R-hat lp": _rhat(lp),
               "Hamming (last draw, per chain)": [round(prob.hamming(z[c, -1]), 3) for c in range(4)],
               "wall s": round(wall, 1), "CPU s": round(cpu, 1)}
        if options:
            row["swap rates"] = [round(float(v), 2) for v in np.nanmean(np.asarray(f["swap_accept"]), axis=(0, 1))]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def case_set_a(quick=False):
    prob = models.problem("pgas_set_a", T=400 if quick else 4000)
    sweeps = 20 if quick else 300
    rows = []
    for options in ({}, {"tempering": 8}):
        mcmc, wall, cpu = _run(nh.infer.WeakLimitGibbs(prob.model, **options), prob.args, 8, 0, sweeps)
        z = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])
        big = _states_held(z, 0.05)
        row = {"setting": "WeakLimitGibbs" + (" tempering=8" if options else ""),
               "chains at exactly 4 large states (last sweep)": f"{int(np.sum(big[:, -1] == 4))} / 8",
               "first sweep at 4 (per chain)": [int(np.argmax(b == 4)) if np.any(b == 4) else None for b in big],
               "wall s": round(wall, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


CASES = {"overlap": case_overlap, "mocap": case_mocap, "set-a": case_set_a}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", help=f"of {list(CASES)} (default: all)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-save", action="store_true")
    a = parser.parse_args(argv)
    a.cases = a.cases or list(CASES)
    if any(c not in CASES for c in a.cases):
        parser.error(f"cases must be among {list(CASES)}, got {a.cases}")
    jax.config.update("jax_enable_x64", True)
    out = {c: CASES[c](a.quick) for c in a.cases}
    if not (a.quick or a.no_save):
        blocks = []
        for case, rows in out.items():
            columns = list(rows[0])
            blocks += [results.text(f"**{case}**"), results.table(columns, [[row.get(c, "") for c in columns] for row in rows])]
        results.save(QUESTION, SECTION, blocks, "python -m benchmarks.mixing tempering " + " ".join(a.cases), data=out)


if __name__ == "__main__":
    main(sys.argv[1:])
