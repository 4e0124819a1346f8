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
* ``nested``: :func:`~benchmarks.harness.models.nested_regimes` (three AR(1) sequences of 400 steps,
  persistent regimes with fast switching inside them; posterior modes at low and at high
  ``kappa``), contrast 3 and 5, the README's hyperpriors, 8 chains, 300 + 300 sweeps: each chain's
  posterior median of ``kappa``, mean number of states and mean log joint, R-hat of ``log kappa``,
  ``num_states`` and the log joint, and the chains whose mean log joint is within 20 nats of the
  best chain of any setting on the same data; plain from the start before (the values alone as
  clustering features) and from today's (values and dynamics), ``tempering=8`` and ``tempering=16``.

Every figure is from one process on the machine of the ``environment`` line; the chains are
vectorized (one compiled program per kernel and setting).  R-hat is ArviZ's rank-normalized split
R-hat over the post-warmup draws.
Run:  python -m benchmarks.mixing tempering [overlap mocap set-a nested] [--quick] [--no-save]
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
#: the ``nested`` case has its own section (the other cases' section is kept when it runs alone)
SECTION_NESTED = "Replica exchange: two modes of kappa"
NESTED_TEXT = ("Three AR(1) sequences of 400 steps (`models.nested_regimes`): three persistent regimes, inside each "
               "a fast switch between two dynamics (coefficient -/+ 0.25 contrast around the regime's, noise s.d. "
               "0.5 (1 + contrast) and 0.5).  Sticky HDP-AR-HMM with the README's hyperpriors (kappa ~ Gamma(10, 0.1)), "
               "`max_states = 20`, the default start, 8 vectorized chains, 300 warmup + 300 draws, seed 1.")


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


def case_nested(quick=False):
    warm, draws, chains = (5, 5, 2) if quick else (300, 300, 8)
    rows = []
    for contrast in (3.0, 5.0):
        prob = models.problem("nested_regimes", contrast=contrast)
        block = []
        for start, options in (("values only (before)", {}), ("values and dynamics", {}),
                               ("values and dynamics", {"tempering": 8}), ("values and dynamics", {"tempering": 16})):
            with models.autoregressive_start(values_only="before" in start):
                mcmc, wall, cpu = _run(nh.infer.WeakLimitGibbs(prob.model, **options), prob.args, chains, warm, draws,
                                       seed=1)
            f = mcmc.get_extra_fields(group_by_chain=True)
            kappa = np.asarray(mcmc.get_samples(group_by_chain=True)["kappa"])
            k, lp = np.asarray(f["num_states"]), np.asarray(f["lp"])
            row = {"contrast": contrast, "start features": start,
                   "setting": "WeakLimitGibbs" + (f" tempering={options['tempering']}" if options else ""),
                   "kappa per chain (median)": [round(float(v), 1) for v in np.median(kappa, 1)],
                   "num_states per chain (mean)": [round(float(v), 1) for v in k.mean(1)],
                   "log joint per chain (mean)": [round(float(v)) for v in lp.mean(1)],
                   "R-hat log kappa": round(_rhat(np.log(kappa)), 3), "R-hat num_states": round(_rhat(k), 3),
                   "R-hat lp": round(_rhat(lp), 3),
                   "wall s": round(wall, 1)}
            if options:
                row["swap rates"] = [round(float(v), 2) for v in np.nanmean(np.asarray(f["swap_accept"]), axis=(0, 1))]
            block.append(row)
            print(json.dumps(row), flush=True)
        # the best mode found: the highest mean log joint of any chain of any setting on these data
        best = max(max(r["log joint per chain (mean)"]) for r in block)
        for r in block:
            near = sum(v > best - 20 for v in r["log joint per chain (mean)"])
            r["chains within 20 nats of the best chain"] = f"{near} / {chains}"
        rows += block
    return rows

CASES = {"overlap": case_overlap, "mocap": case_mocap, "set-a": case_set_a, "nested": case_nested}


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
        for section in (SECTION, SECTION_NESTED):
            cases = [c for c in a.cases if (c == "nested") == (section == SECTION_NESTED)]
            if not cases:
                continue
            blocks = [] if section == SECTION else [results.text(NESTED_TEXT)]
            for case in cases:
                rows = out[case]
                columns = list(rows[0])
                blocks += [results.text(f"**{case}**"),
                           results.table(columns, [[row.get(c, "") for c in columns] for row in rows])]
            results.save(QUESTION, section, blocks, "python -m benchmarks.mixing tempering " + " ".join(cases),
                         data={c: out[c] for c in cases})

if __name__ == "__main__":
    main(sys.argv[1:])
