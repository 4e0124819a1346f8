"""Split-merge moves: the direct-assignment sampler with and without them.

The README's model (Fox et al.'s experiment A, ``T = 1000``, Gaussian NIW emissions, Gamma
priors on gamma, alpha, kappa, ``max_states = 20``) with ``DirectAssignmentGibbs(model,
split_merge=n)``, 2 vectorized chains x (300 warm-up + 300 draws), float32.  Reported per ``n``:
the posterior mode of ``num_states`` (pooled draws), the median over the draws of the normalized
Hamming distance to the true states (optimal relabelling), the split-merge acceptance rate, the
wall time (compilation included) and the ESS of ``num_states``.  The target: mode 3,
median Hamming < 0.05.

With ``--set-a``: PGAS synthetic set A (:mod:`benchmarks.reproductions.set_a`'s set-up: T = 4000, 4
states, 4 vectorized chains from 10 uniformly random labels, capacity 40) for ``BeamSampler``
and ``DirectAssignmentGibbs`` with ``split_merge`` in ``--moves``, ``--sweeps`` sweeps.

With ``--five``: the 2-D 5-state case (:func:`benchmarks.mixing.starts.five_state_data`: T = 10^4,
L = 30, fixed hyperparameters) for ``WeakLimitGibbs(model,
split_merge=n)`` from the default ``init_strategy="data"``, ``--chains`` vectorized chains
(seeds), ``--sweeps`` sweeps: the Hamming distance per chain after the last sweep, the first
sweep at which each chain is at Hamming 0, and seconds per sweep (compilation excluded).

With ``--mocap``: the six motion-capture sequences (``examples/mocap.py``'s sticky HDP-AR(1)-HMM,
capacity 30, its hyperpriors) with ``WeakLimitGibbs(model, split_merge=n)`` from the default
start, ``--chains`` vectorized chains (default 4), ``--sweeps`` sweeps all kept (no warm-up, so
that the first sweeps show where the start puts each chain): per chain the number of states
after the first and the last sweep and its mean over the second half, the mean log joint ``lp``
over the second half, the collapsed log marginal likelihood of the last draw's segmentation
(``sum_k log p(y of state k)``, the dynamics integrated out: label-invariant and free of the
unused slots' prior draws that ``lp`` carries), the Hamming distance of the last draw, R-hat of
``num_states`` and ``lp`` over the second half, the acceptance and the seconds (the section
"Split-merge on motion capture").

Usage: ``python -m benchmarks.mixing split-merge [--moves 0 5 20] [--seed 0] [--set-a --sweeps 300
--chains 8] [--five --chains 6] [--mocap --moves 0 2 --sweeps 600] [--quick]``.  The printed table is
saved as the section "Split-merge: latest run" of ``benchmarks/results/mixing.json``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


from ..harness import models, results
from ..reproductions.set_a import set_a_run
from .starts import five_state_data

QUESTION = "mixing"
LINES = []


def emit(*parts, **kwargs):
    """Print a line of the table and keep it for the results file."""
    kwargs.pop("flush", None)
    print(*parts, flush=True, **kwargs)
    LINES.append(" ".join(str(p) for p in parts))


def run(num_moves: int, seed: int = 0, num_warmup: int = 300, num_samples: int = 300, num_chains: int = 2):
    import arviz as az
    import jax
    from numpyro.infer import MCMC

    import numpyro_hdphmm as nh

    data = nh.datasets.fox_experiment_a(num_steps=1000)
    y = data.observations
    kernel = nh.infer.DirectAssignmentGibbs(models.readme_model(), split_merge=num_moves)
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    t0 = time.perf_counter()
    mcmc.run(jax.random.key(seed), y, extra_fields=("num_states", "split_merge_accept"))
    seconds = time.perf_counter() - t0
    states = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])  # (C, S, T)
    extra = mcmc.get_extra_fields(group_by_chain=True)
    counts = np.asarray(extra["num_states"])
    values, freq = np.unique(counts, return_counts=True)
    hamming = nh.diagnostics.hamming_distance(states.reshape(-1, states.shape[-1]), data.states)
    accept = np.asarray(extra["split_merge_accept"])
    return {
        "moves": num_moves,
        "mode_states": int(values[np.argmax(freq)]),
        "median_hamming": float(np.median(hamming)),
        "last_hamming": [float(h) for h in hamming.reshape(num_chains, -1)[:, -1]],
        "accept": float(np.nanmean(accept)) if num_moves else float("nan"),
        "seconds": seconds,
        "ess_states": float(az.ess(counts.astype(float))) if np.ptp(counts) > 0 else float("nan"),
    }


def five(moves, sweeps, num_chains=6, seed=0, late=None):
    """The 2-D 5-state rows (module docstring) for each number of moves; ``late``: the moves only
    in the last ``late`` sweeps (the chains run without them before, the same draws as the
    ``split_merge=0`` row up to there)."""

    import jax
    import jax.numpy as jnp


    import numpyro_hdphmm as nh

    y, truth = five_state_data()
    args = (jnp.asarray(y),)
    emit("| split_merge | Hamming after the last sweep (per chain) | first sweep at Hamming 0 (per chain) "
          "| chains at 0 | acceptance | s / sweep |")
    emit("|---:|---|---|---:|---:|---:|")
    def scan(kernel, state, length):
        def body(s, _):
            s = kernel.sample(s, args, {})
            return s, (s.z[kernel.spec.sites.states], s.split_merge_accept)

        run = jax.jit(lambda s: jax.lax.scan(body, s, None, length=length)).lower(state).compile()
        t0 = time.perf_counter()
        state, (states, accept) = jax.block_until_ready(run(state))
        return state, np.asarray(states), np.asarray(accept), time.perf_counter() - t0

    keys = jax.random.split(jax.random.key(seed), num_chains)
    for n in moves:
        kernel = nh.infer.WeakLimitGibbs(models.fixed_model(30), split_merge=n)
        state = kernel.init(keys, 0, None, args, {})
        early = 0 if late is None or not n else sweeps - late
        parts = []
        if early:
            plain = nh.infer.WeakLimitGibbs(models.fixed_model(30))
            state, *part = scan(plain, plain.init(keys, 0, None, args, {}), early)
            parts.append(part)
        state, *part = scan(kernel, state, sweeps - early)
        parts.append(part)
        states = np.swapaxes(np.concatenate([p[0] for p in parts]), 0, 1)  # (chains, sweeps, T)
        accept = parts[-1][1]
        seconds = parts[-1][2] * sweeps / (sweeps - early)  # per sweep with the moves
        ham = np.array([nh.diagnostics.hamming_distance(states[c], truth) for c in range(num_chains)])
        first = [int(np.argmax(h == 0)) + 1 if np.any(h == 0) else None for h in ham]
        last = ", ".join(f"{h:.4f}" if h else "0" for h in ham[:, -1])
        reach = ", ".join("-" if v is None else str(v) for v in first)
        acc = f"{np.nanmean(np.asarray(accept)):.2e}" if n else "-"
        emit(f"| {n} | {last} | {reach} | {int(np.sum(ham[:, -1] == 0))}/{num_chains} | {acc} "
              f"| {seconds / sweeps:.3f} |", flush=True)


def set_a(kernels, moves, sweeps, seed=0, num_chains=4):
    """Set A rows (``bench_beam.set_a_run``) for each kernel and number of moves."""
    import functools


    import numpyro_hdphmm as nh

    emit("| kernel | split_merge | sweeps to 4 large states (per chain) | Hamming after the last sweep "
          "| final states (large) | s |")
    emit("|---|---:|---|---|---|---:|")
    for name in kernels:
        base = getattr(nh.infer, name)
        for n in moves:
            # set_a_run builds ``cls(model)`` and picks its starting values by the class name
            cls = type(name, (base,), {"__init__": functools.partialmethod(base.__init__, split_merge=n)})
            r = set_a_run(cls, 40, sweeps, num_chains=num_chains, seed=seed)
            reach = ", ".join("-" if v is None else str(v) for v in r["reach_large"])
            ham = ", ".join(f"{h:.3f}" for h in r["hamming"])
            final = ", ".join(f"{a} ({b})" for a, b in zip(r["final_states"], r["final_large"]))
            emit(f"| {name} | {n} | {reach} | {ham} | {final} | {r['seconds']:.0f} ({r['seconds'] / sweeps:.3f} / sweep) |",
                  flush=True)


def mocap(moves, sweeps, num_chains=4, seed=0):
    """The motion-capture rows (module docstring) for each number of moves."""
    import arviz as az
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC

    import numpyro_hdphmm as nh

    prob = models.problem("mocap")
    y, lengths = (np.asarray(a) for a in prob.args)
    ex = models.example_module("mocap")
    family = ex.emission_prior(y, lengths)
    prepared = [family.prepare(jnp.asarray(y[n])) for n in range(y.shape[0])]
    x = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *[p[0] for p in prepared])
    valid = np.concatenate([np.asarray(v) & (np.arange(y.shape[1]) < lengths[n]) for n, (_, v) in enumerate(prepared)])

    def log_marginal(z):
        labels = jnp.asarray(np.where(valid, z.reshape(-1), prob.capacity), jnp.int32)
        return float(jnp.sum(family.log_marginal_likelihood(family.label_statistics(x, labels, prob.capacity))))

    half = sweeps // 2
    emit("| split_merge | states after sweep 1 (per chain) | after the last | mean, second half | lp, second half "
         "| log marginal of the last draw | Hamming (last draw) | R-hat num_states, lp | acceptance | wall s | CPU s |")
    emit("|---:|---|---|---|---|---|---|---|---:|---:|---:|")
    for n in moves:
        kernel = nh.infer.WeakLimitGibbs(prob.model, split_merge=n)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=sweeps, num_chains=num_chains, chain_method="vectorized",
                    progress_bar=False)
        t0, c0 = time.perf_counter(), time.process_time()
        mcmc.run(jax.random.key(seed), *prob.args,
                 extra_fields=("num_states", "lp") + (("split_merge_accept",) if n else ()))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        f = mcmc.get_extra_fields(group_by_chain=True)
        k, lp = np.asarray(f["num_states"]), np.asarray(f["lp"], np.float64)
        z = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])
        rhat = [float(az.rhat(v[:, half:].astype(np.float64))) for v in (k, lp)]
        rhat = ["inf (constant per chain)" if not r < 1e3 else f"{r:.2f}" for r in rhat]
        join = lambda vals, fmt: ", ".join(fmt.format(v) for v in vals)
        acc = f"{np.nanmean(np.asarray(f['split_merge_accept'])):.4f}" if n else "-"
        emit(f"| {n} | {join(k[:, 0], '{}')} | {join(k[:, -1], '{}')} | {join(k[:, half:].mean(1), '{:.1f}')} "
             f"| {join(lp[:, half:].mean(1), '{:.0f}')} | {join([log_marginal(z[c, -1]) for c in range(num_chains)], '{:.0f}')} "
             f"| {join([prob.hamming(z[c, -1]) for c in range(num_chains)], '{:.3f}')} | {rhat[0]}, {rhat[1]} "
             f"| {acc} | {wall:.0f} | {cpu:.0f} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, nargs="+", default=[0, 5, 20])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set-a", action="store_true")
    parser.add_argument("--kernels", nargs="+", default=["BeamSampler", "DirectAssignmentGibbs"])
    parser.add_argument("--sweeps", type=int, default=300)
    parser.add_argument("--chains", type=int, default=None, help="chains (default: 4 for --set-a, 6 for --five)")
    parser.add_argument("--five", action="store_true")
    parser.add_argument("--mocap", action="store_true")
    parser.add_argument("--late", type=int, default=None, help="--five: the moves only in the last LATE sweeps")
    parser.add_argument("--quick", action="store_true", help="a smoke run: moves 2, 5 + 5 sweeps")
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if args.quick:
        args.moves, args.sweeps = [2], 5
    try:
        if args.set_a:
            set_a(args.kernels, args.moves, args.sweeps, args.seed, args.chains or (2 if args.quick else 4))
        elif args.mocap:
            mocap(args.moves, args.sweeps, args.chains or (2 if args.quick else 4), args.seed)
        elif args.five:
            five(args.moves, args.sweeps, args.chains or (2 if args.quick else 6), args.seed, args.late)
        else:
            table(args)
    finally:
        if LINES and not args.no_save:
            title = "Split-merge on motion capture" if args.mocap else "Split-merge: latest run"
            print("saved", results.save(QUESTION, title, "\n".join(LINES),
                                        results.command_line("mixing split-merge", argv)))


def table(args):
    warmup = 5 if args.quick else 300
    emit("| split_merge | posterior mode of num_states | median Hamming | last-draw Hamming (per chain) "
          "| split-merge acceptance | ESS(num_states) | s (incl. compile) |")
    emit("|---:|---:|---:|---|---:|---:|---:|")
    for n in args.moves:
        r = run(n, args.seed, num_warmup=warmup, num_samples=warmup)
        emit(f"| {n} | {r['mode_states']} | {r['median_hamming']:.3f} | "
              f"{', '.join(f'{h:.3f}' for h in r['last_hamming'])} | {r['accept']:.2e} | {r['ess_states']:.1f} "
              f"| {r['seconds']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
