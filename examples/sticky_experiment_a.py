"""Fit the sticky HDP-HMM to Fox et al.'s experiment A with the weak-limit blocked Gibbs sampler.

Data: 3 states with self-transition probability 0.97, Gaussian emissions with means 50, 0, -50
and variances 50, 10, 50, T = 1000 (Fox et al. 2007, Sec. VII).  Model: the sticky HDP-HMM with
the user's own priors on gamma, alpha and kappa, a weakly informative Normal-inverse-Wishart
emission prior and L = 15 states.  Four chains run vectorized; the script prints a
label-switching-proof summary (``nh.labels.print_summary``: the draws relabelled by Stephens'
algorithm, the states used in most draws, no per-step rows; the raw, effective and point-estimate
numbers of states) and the normalized Hamming distance to the true states, and saves a trace plot
and the posterior point segmentation with its per-step uncertainty.  Run:  python examples/sticky_experiment_a.py
"""

import argparse
import time

import arviz as az
import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(
        gamma=gamma,
        alpha=alpha,
        kappa=kappa,
        emission=nh.emissions.GaussianNIW.weakly_informative(y),
        max_states=15,
    )
    nh.sample("y", hmm, obs=y)


def main(num_warmup=300, num_samples=300, num_chains=4, seed=0, prefix="experiment_a"):
    data = nh.datasets.fox_experiment_a(num_steps=1000, seed=seed)
    y, truth = data.observations, data.states
    mcmc = MCMC(
        # the concentrations by slice sampling of their collapsed conditionals: kappa's bulk ESS
        # is tens of times that of the auxiliary-variable updates (docs/benchmarks.md, "Hyperparameter mixing")
        nh.infer.WeakLimitGibbs(model, hyperparameters="collapsed"),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed), y)
    elapsed = time.perf_counter() - start
    sweeps = (num_warmup + num_samples)
    print(f"{num_chains} chains x {sweeps} sweeps in {elapsed:.1f} s (compilation included)")

    # mcmc.print_summary() would print one NaN row per time step for y_states and label-switched
    # rows for y_mu, y_cov, y_beta; this relabels the draws first and keeps the states in use
    nh.labels.print_summary(mcmc)
    idata = az.from_numpyro(mcmc)
    states = np.asarray(mcmc.get_samples()["y_states"])
    hamming = nh.diagnostics.hamming_distance(states, truth)
    print(f"normalized Hamming distance to the true states: median {np.median(hamming):.4f}, "
          f"last draw {hamming[-1]:.4f}")

    az.plot_trace(idata, var_names=["gamma", "alpha", "kappa", "y_num_states"])
    plt.tight_layout()
    plt.savefig(f"{prefix}_trace.png", dpi=90)
    # the Bayes point estimate of the segmentation (label-invariant, over all chains' draws) and the
    # per-step probability that a draw puts the step in the estimate's state
    point = nh.point_segmentation(states)
    agreement = nh.labels.step_agreement(states, point.labels)
    print(f"point segmentation: {point.num_clusters} states, expected VI loss {point.expected_loss:.3f}, "
          f"Hamming distance to the truth {nh.diagnostics.hamming_distance(point.labels, truth):.4f}")
    fig = nh.diagnostics.plot_segmentation(y, point.labels, true_states=truth, agreement=agreement,
                                           title="sticky HDP-HMM, posterior point segmentation")
    fig.savefig(f"{prefix}_segmentation.png", dpi=90)
    print(f"wrote {prefix}_trace.png and {prefix}_segmentation.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-warmup", type=int, default=300)
    parser.add_argument("--num-samples", type=int, default=300)
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.num_warmup, args.num_samples, args.num_chains, args.seed)
