"""Benchmark the restricted collapsed draw sampler (``RCDSampler``, arXiv:1106.0474) in each
mode beside ``DirectAssignmentGibbs`` on the RCD paper's Sequence 1.

Sequence 1 (``nh.datasets.rcd_sequence1``, ``ABCDBCDE`` repeated, ``T = 500``), the non-sticky
HDP-HMM with ``Gamma(1, 1)`` priors on ``gamma`` and ``alpha`` (exact auxiliary-variable
updates) and ``Categorical(5, 0.5)`` emissions integrated out (the paper uses an HCRP emission
prior, not implemented here), capacity 40; ``--chains`` chains vmapped, started from the prior
draw.  Reported per kernel: seconds per sweep (after compilation, the whole run divided by the
number of sweeps), the mean Gibbs acceptance rate and split-merge acceptance rate (``Info``
fields), the mean number of states and the mutual information (nats) between the true phase
``t mod 8`` and the last draw of each chain (8-state solution 2.079, 5-state trap 1.560).

Usage: ``python benchmarks/bench_rcd.py [--sweeps N] [--chains C]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def mutual_information(a, b):
    """MI (nats) between two labellings of the same steps (empirical joint over the steps)."""
    a, b = np.asarray(a), np.asarray(b)
    joint = np.zeros((a.max() + 1, b.max() + 1))
    np.add.at(joint, (a, b), 1.0)
    joint /= joint.sum()
    pa, pb = joint.sum(1, keepdims=True), joint.sum(0, keepdims=True)
    nz = joint > 0
    return float(np.sum(joint[nz] * np.log(joint[nz] / (pa @ pb)[nz])))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweeps", type=int, default=200)
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--kernels", default="stepwise,slice,blocked,beam,beam+sm,da")
    args = parser.parse_args()

    import jax
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    import numpyro_hdphmm as nh

    data = nh.datasets.rcd_sequence1(500)
    y = data.observations

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
        nh.sample("y", nh.HDPHMM(gamma, alpha, nh.emissions.Categorical(5, 0.5), max_states=40), obs=y)

    kernels = {
        "stepwise": lambda: nh.infer.RCDSampler(model, mode="stepwise"),
        "slice": lambda: nh.infer.RCDSampler(model, mode="slice"),
        "blocked": lambda: nh.infer.RCDSampler(model, mode="blocked", block_size=6),
        "beam": lambda: nh.infer.RCDSampler(model, mode="beam", block_size=6),
        "beam+sm": lambda: nh.infer.RCDSampler(model, mode="beam", block_size=6, split_merge=3),
        "da": lambda: nh.infer.DirectAssignmentGibbs(model),
    }
    print(f"Sequence 1, T = 500, {args.chains} chains x {args.sweeps} sweeps, {jax.devices()[0].platform}")
    print(f"{'kernel':10s} {'s/sweep':>8s} {'compile s':>9s} {'gibbs acc':>9s} {'sm acc':>8s} {'states':>6s} {'MI':>6s}")
    for name in args.kernels.split(","):
        kernel = kernels[name]()
        fields = ("gibbs_accept", "split_merge_accept") if name != "da" else ()
        t0 = time.time()
        mcmc = MCMC(kernel, num_warmup=0, num_samples=1, num_chains=args.chains, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.key(0), y)
        compile_s = time.time() - t0
        mcmc = MCMC(kernel, num_warmup=0, num_samples=args.sweeps, num_chains=args.chains, chain_method="vectorized",
                    progress_bar=False)
        t0 = time.time()
        mcmc.run(jax.random.key(1), y, extra_fields=fields)
        jax.block_until_ready(mcmc.get_samples())
        per_sweep = (time.time() - t0 - compile_s) / args.sweeps
        extra = mcmc.get_extra_fields()
        gibbs = float(np.mean(extra["gibbs_accept"])) if "gibbs_accept" in extra else float("nan")
        sm = float(np.nanmean(extra["split_merge_accept"])) if "split_merge_accept" in extra else float("nan")
        samples = mcmc.get_samples(group_by_chain=True)
        states = float(np.mean(samples["y_num_states"][:, -20:]))
        mi = np.mean([mutual_information(data.states, z[-1]) for z in np.asarray(samples["y_states"])])
        print(f"{name:10s} {per_sweep:8.4f} {compile_s:9.1f} {gibbs:9.5f} {sm:8.5f} {states:6.1f} {mi:6.3f}", flush=True)


if __name__ == "__main__":
    main()
