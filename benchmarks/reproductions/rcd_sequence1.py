"""Benchmark the restricted collapsed draw sampler (``RCDSampler``, arXiv:1106.0474) in each
mode beside ``DirectAssignmentGibbs`` on the RCD paper's Sequence 1, and reproduce the paper's
Sequence 1 experiment (its Fig. 5: the distribution of the mutual information over runs).

Sequence 1 (``nh.datasets.rcd_sequence1``, ``ABCDBCDE`` repeated, ``T = 500``), the non-sticky
HDP-HMM with ``Gamma(1, 1)`` priors on ``gamma`` and ``alpha`` (resampled every sweep; exact
updates) and ``Categorical(5, 0.5)`` emissions integrated out (the paper uses an HCRP emission
prior, which the package does not have), capacity 40; ``--chains`` chains vmapped from the
kernels' default start (``init_strategy="data"``: clustered windows of the observations) or
``--init prior`` (a draw from the prior; the paper starts from a 100-particle filter).

Every kernel runs the same fixed budget of ``--sweeps`` sweeps; the states of every chain are
recorded after every sweep.  Reported per kernel:

* seconds per sweep (the compiled sweep, timed after the first one, which compiles) and the
  wall seconds of the whole budget, so that the kernels can also be compared at equal time;
* the mean Gibbs acceptance rate and split-merge acceptance rate (``Info`` fields), the mean
  number of states over the last 20 sweeps;
* the mutual information (nats) between the true phase ``h_t = t mod 8`` and each chain's
  states (paper eq. 37, empirical joint over the steps of one sample): its mean and quantiles
  at checkpoints (every ``--every`` sweeps), and at the end the fraction of chains at each of
  the levels a labelling that refines the symbols can reach: the 5-state trap (one state per
  symbol, ``MI = H(symbol) = 1.560``), 6 and 7 states (one or two of ``B, C, D`` split by
  phase, ``1.733``, ``1.906``), the 8-state solution (``log 8 = 2.079``; any refinement of the
  phase reaches it too), and "other" (more than 0.04 from every level: a labelling that merges
  symbols or mixes phases, e.g. a single state, MI 0).  The levels are named by the labellings
  that refine the symbols; merging ``A`` and ``E`` (equal mass ``1/8``) costs ``log(2) / 4``, one
  level, so e.g. ``1.560`` is also ``A, E`` merged with one of ``B, C, D`` split by phase;
* the fraction at each level at equal wall time (the cheapest kernel's whole budget).

Usage::

    python -m benchmarks.reproductions rcd-sequence1 [--sweeps N] [--chains C] [--every E] [--kernels a,b,...]
                                   [--init data|prior] [--seed S] [--write]

Kernels: ``stepwise``, ``slice``, ``blocked`` (block 6), ``beam`` (block 6), ``beam+sm``
(block 6, 3 split-merge moves per sweep, the paper's Fig. 5 (e)), ``beam+sm25`` (25 moves,
Fig. 5 (f)), ``da``, ``da+sm`` (``DirectAssignmentGibbs(split_merge=3)``), ``da-aux`` (the
direct-assignment sampler with ``hyperparameters="auxiliary"``, the update ``RCDSampler`` uses,
instead of its default ``"collapsed"``).  ``--write`` (the default; ``--no-save`` prints only) replaces the "RCD Sequence 1" section of
``benchmarks/results/reproductions.json`` (with ``--init prior``: the "RCD Sequence 1 (prior start)" section).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ..harness import results

QUESTION = "reproductions"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/reproductions.json``; returns the path."""
    return results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## RCD Sequence 1"
EIGHT, TRAP = np.log(8.0), 1.5596  # nats: the 8-state solution, the 5-state trap
#: the MI levels of labellings that refine the symbols (5, 6, 7, 8 states): each split of B, C or D by
#: phase adds (1/4) log 2
LEVELS = {"5 (trap)": TRAP, "6": TRAP + 0.25 * np.log(2.0), "7": TRAP + 0.5 * np.log(2.0), "8": EIGHT}
TOLERANCE = 0.04


def mutual_information(a, b):
    """MI (nats) between two labellings of the same steps (empirical joint over the steps)."""
    return float(mutual_information_batch(np.asarray(a), np.asarray(b)[None])[0])


def mutual_information_batch(truth, z):
    """MI (nats) between ``truth (T,)`` and each row of ``z (N, T)``: ``sum p(h, x) log p(h, x) /
    (p(h) p(x))`` with ``p`` the empirical joint frequency over the ``T`` steps (paper eq. 37)."""
    truth, z = np.asarray(truth), np.asarray(z)
    n, T = z.shape
    joint = np.zeros((n, truth.max() + 1, z.max() + 1))
    np.add.at(joint, (np.arange(n)[:, None], truth[None, :], z), 1.0 / T)
    ph, px = joint.sum(2, keepdims=True), joint.sum(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(joint > 0, joint * np.log(joint / (ph * px)), 0.0)
    return terms.sum((1, 2))


def classify(mi):
    """Fractions of ``mi`` within ``TOLERANCE`` of each of ``LEVELS``, and "other"."""
    mi = np.asarray(mi)
    out, rest = {}, np.ones(mi.shape, bool)
    for name, level in LEVELS.items():
        near = np.abs(mi - level) < TOLERANCE
        out[name] = float(near.mean())
        rest &= ~near
    out["other"] = float(rest.mean())
    return out


def make_kernels(model, init="data"):
    """The kernels by name (constructors, so that each is built when it runs)."""
    import numpyro_hdphmm as nh

    def RCD(**options):
        return nh.infer.RCDSampler(model, init_strategy=init, **options)

    def DA(**options):
        return nh.infer.DirectAssignmentGibbs(model, init_strategy=init, **options)

    return {
        "stepwise": lambda: RCD(mode="stepwise"),
        "slice": lambda: RCD(mode="slice"),
        "blocked": lambda: RCD(mode="blocked", block_size=6),
        "beam": lambda: RCD(mode="beam", block_size=6),
        "beam+sm": lambda: RCD(mode="beam", block_size=6, split_merge=3),
        "beam+sm25": lambda: RCD(mode="beam", block_size=6, split_merge=25),
        "da": lambda: DA(),
        "da+sm": lambda: DA(split_merge=3),
        "da-aux": lambda: DA(hyperparameters="auxiliary"),
    }


def run_kernel(kernel, y, chains, sweeps, seed):
    """``sweeps`` sweeps of ``chains`` vectorized chains, driven through NumPyro's ``MCMCKernel``
    interface (``init``, ``sample``; the sweep is compiled once and cached on the kernel).

    Returns ``(z (sweeps + 1, chains, T), num_states (sweeps, chains), gibbs (sweeps, chains),
    sm (sweeps, chains), seconds (sweeps,))``; ``z[0]`` is the start."""
    import jax

    keys = jax.random.split(jax.random.key(seed), chains)
    state = kernel.init(keys, 0, None, (y,), {})
    zs = [np.asarray(state.z["y_states"])]
    num_states, gibbs, sm, seconds = [], [], [], []
    for _ in range(sweeps):
        start = time.perf_counter()
        state = jax.block_until_ready(kernel.sample(state, (y,), {}))
        seconds.append(time.perf_counter() - start)
        zs.append(np.asarray(state.z["y_states"]))
        num_states.append(np.asarray(state.num_states))
        info = state.info
        gibbs.append(np.asarray(getattr(info, "gibbs_accept", np.full(chains, np.nan))))
        sm.append(np.asarray(getattr(info, "split_merge_accept", np.full(chains, np.nan))))
    return np.stack(zs), np.stack(num_states), np.stack(gibbs), np.stack(sm), np.asarray(seconds)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--every", type=int, default=25, help="checkpoint spacing (sweeps) of the MI trajectory")
    parser.add_argument("--kernels", default="stepwise,slice,beam,beam+sm,da,da+sm")
    parser.add_argument("--init", default="data", choices=("data", "prior"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 sweeps of 2 chains, slice only, nothing saved")
    parser.add_argument("--save", default="", help="save the per-chain MI trajectories to this .npz file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)
    if args.quick:
        args.sweeps, args.chains, args.every, args.kernels = 4, 2, 2, "slice"

    import jax
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    data = nh.datasets.rcd_sequence1(500)
    y, truth = data.observations, data.states

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
        nh.sample("y", nh.HDPHMM(gamma, alpha, nh.emissions.Categorical(5, 0.5), max_states=40), obs=y)

    kernels = make_kernels(model, args.init)
    names = args.kernels.split(",")
    unknown = [n for n in names if n not in kernels]
    if unknown:
        raise SystemExit(f"unknown kernels {unknown}; choose from {list(kernels)}")
    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    header = (f"Sequence 1, T = 500, {args.chains} chains x {args.sweeps} sweeps per kernel, start "
              f"`init_strategy={args.init!r}`, seed {args.seed}, {jax.devices()[0].platform}")
    print(header, flush=True)
    results, saved = {}, {}
    for name in names:
        kernel = kernels[name]()
        t0 = time.perf_counter()
        z, k, gibbs, sm, seconds = run_kernel(kernel, y, args.chains, args.sweeps, args.seed)
        wall = time.perf_counter() - t0
        mi = mutual_information_batch(truth, z.reshape(-1, z.shape[-1])).reshape(z.shape[:2])
        per_sweep = float(np.median(seconds[1:])) if len(seconds) > 1 else float(seconds[0])
        results[name] = dict(mi=mi, k=k, gibbs=float(np.nanmean(gibbs)) if np.isfinite(gibbs).any() else np.nan,
                             sm=float(np.nanmean(sm)) if np.isfinite(sm).any() else np.nan, per_sweep=per_sweep,
                             compile=float(seconds[0] - per_sweep), wall=wall)
        saved[name] = mi
        print(f"  {name}: {wall:.0f} s, s/sweep {per_sweep:.4f}, final MI mean {mi[-1].mean():.3f}", flush=True)

    say("Per kernel: median seconds per sweep (the first sweep, which compiles, excluded), the wall "
        "seconds of the whole run (start, compilation and every sweep), mean acceptance rates, mean "
        "number of states (last 20 sweeps), and the MI (nats) of the last sweep: mean and the chains' "
        "10/50/90% quantiles.")
    say()
    say("| kernel | s/sweep | wall s | Gibbs acc. | SM acc. | states | MI mean | MI q10 | q50 | q90 |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in results.items():
        q = np.quantile(r["mi"][-1], [0.1, 0.5, 0.9])
        say(f"| {name} | {r['per_sweep']:.4f} | {r['wall']:.0f} | {r['gibbs']:.5f} | {r['sm']:.5f} | "
            f"{np.mean(r['k'][-20:]):.1f} | {r['mi'][-1].mean():.3f} | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} |")
    say()
    say(f"Fraction of chains at each MI level after {args.sweeps} sweeps (within {TOLERANCE} nats; levels "
        + ", ".join(f"{n} states {v:.3f}" for n, v in LEVELS.items()) + "):")
    say()
    say("| kernel | " + " | ".join(f"{n} states" for n in LEVELS) + " | other |")
    say("|---|" + "---:|" * (len(LEVELS) + 1))
    for name, r in results.items():
        c = classify(r["mi"][-1])
        say(f"| {name} | " + " | ".join(f"{c[n]:.2f}" for n in LEVELS) + f" | {c['other']:.2f} |")
    # equal time: the cheapest kernel's whole budget in sweeps of each kernel
    budget = min(r["per_sweep"] for r in results.values()) * args.sweeps
    say()
    say(f"At equal time ({budget:.0f} s of sweeps, the cheapest kernel's budget): sweeps done, MI mean, "
        "fraction at the 8-state level and in the trap:")
    say()
    say("| kernel | sweeps | MI mean | 8 states | 5 (trap) |")
    say("|---|---:|---:|---:|---:|")
    for name, r in results.items():
        s = int(min(args.sweeps, budget // r["per_sweep"]))
        c = classify(r["mi"][s])
        say(f"| {name} | {s} | {r['mi'][s].mean():.3f} | {c['8']:.2f} | {c['5 (trap)']:.2f} |")
    checkpoints = [0, 1] + list(range(args.every, args.sweeps + 1, args.every))
    checkpoints = sorted(set(c for c in checkpoints if c <= args.sweeps) | {args.sweeps})
    say()
    say("MI trajectory (sweep 0 is the start): mean, and in brackets the fraction of chains at the "
        "8-state level.")
    say()
    say("| kernel | " + " | ".join(str(c) for c in checkpoints) + " |")
    say("|---|" + "---:|" * len(checkpoints))
    for name, r in results.items():
        say(f"| {name} | " + " | ".join(f"{r['mi'][c].mean():.3f} ({classify(r['mi'][c])['8']:.2f})"
                                        for c in checkpoints) + " |")
    if args.save:  # (sweeps + 1, chains) per kernel, rounded (the docs' MI histograms read such files)
        np.savez_compressed(args.save, **{k: np.round(v, 4).astype(np.float32) for k, v in saved.items()})
    if args.write:
        cmd = "python -m benchmarks.reproductions rcd-sequence1 " + " ".join(
            f"--{k} {v}" for k, v in (("sweeps", args.sweeps), ("chains", args.chains), ("every", args.every),
                                      ("kernels", args.kernels), ("init", args.init), ("seed", args.seed))) + " --write"
        text = header + ".\n\n" + "\n".join(lines)
        section = SECTION if args.init == "data" else f"{SECTION} ({args.init} start)"
        print(f"wrote {_save(section, cmd, text)}")


if __name__ == "__main__":
    main()
