"""Fox et al.'s experiment B: why the sticky HDP-HMM needs DP-mixture emissions (and vice versa).

Data (Fox et al. 2007, Sec. VII, Figs. 11-12; ``nh.datasets.fox_experiment_b``): 2 states with
self-transition probability 0.98; state 0 emits ``0.5 N(0, 10) + 0.5 N(10, 10)``, state 1 emits
``0.5 N(-7, 10) + 0.5 N(7, 10)`` (variance 10).  Four models, all sampled by the weak-limit blocked
Gibbs sampler (Fox et al. Alg. 2 and 4) with ``L = L' = 15``:

* sticky HDP-HMM + DP-mixture emissions (``DPMixture(GaussianNIW, sigma, 15)``),
* non-sticky HDP-HMM + DP-mixture emissions,
* sticky HDP-HMM, single Gaussian emissions,
* non-sticky HDP-HMM, single Gaussian emissions.

Hyperparameters have vague Gamma priors and exact auxiliary-variable updates (``gamma``, ``alpha``,
``kappa`` and the mixture concentration ``sigma``); the component prior is the data-scaled
``GaussianNIW.weakly_informative``.  The script prints, per model, the normalized Hamming
distance between the true and the sampled state sequences (optimal relabelling) across chains
at the last sweep (median, 10th and 90th percentiles) and the median number of states holding
at least 2% of the steps.
Expected (Fox et al. Fig. 12): sticky + DP by far the best; the single-Gaussian models split the
mixture components into fast-switching states.  Run:  python examples/experiment_b.py
"""

import argparse
import time

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

VARIANTS = {
    "sticky + DP": dict(sticky=True, dp=True),
    "non-sticky + DP": dict(sticky=False, dp=True),
    "sticky, single Gaussian": dict(sticky=True, dp=False),
    "non-sticky, single Gaussian": dict(sticky=False, dp=False),
}


def model(y, sticky=True, dp=True, max_states=15, max_components=15):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    if dp:
        sigma = numpyro.sample("sigma", dist.Gamma(1.0, 1.0))
        emission = nh.emissions.DPMixture(emission, sigma, max_components)
    if sticky:
        kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=max_states)
    else:
        hmm = nh.HDPHMM(gamma, alpha, emission, max_states=max_states)
    nh.sample("y", hmm, obs=y)


def run_variants(num_steps=1000, num_sweeps=150, num_chains=4, seed=0, variants=None, verbose=False):
    """Run every model of ``VARIANTS`` (or the names in ``variants``) on one draw of the data.

    Returns ``{variant: {"hamming": (chains,), "num_states": (chains,), "num_occupied": (chains,),
    "hamming_trace": (chains, sweeps), "seconds": float}}``: at the last sweep of each chain the
    normalized Hamming distance, the number of states holding at least 2% of the steps and the
    number of states holding any step; and the distance at every sweep.
    """
    data = nh.datasets.fox_experiment_b(num_steps=num_steps, seed=seed)
    results = {}
    for name in variants or VARIANTS:
        mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=0, num_samples=num_sweeps, num_chains=num_chains,
                    chain_method="vectorized", progress_bar=False)
        start = time.perf_counter()
        mcmc.run(jax.random.key(seed + 1), data.observations, **VARIANTS[name])
        samples = mcmc.get_samples(group_by_chain=True)
        states = np.asarray(samples["y_states"])  # (chains, sweeps, T)
        hamming = nh.diagnostics.hamming_distance(states, data.states)
        occupancy = np.stack([np.bincount(s, minlength=15) for s in states[:, -1]]) / num_steps
        results[name] = {
            "hamming": hamming[:, -1],
            "num_states": np.sum(occupancy >= 0.02, -1),
            "num_occupied": np.asarray(samples["y_num_states"])[:, -1],
            "hamming_trace": hamming,
            "seconds": time.perf_counter() - start,
        }
        if verbose:
            print(f"  {name}: {results[name]['seconds']:.1f} s", flush=True)
    return results


def main(num_steps=1000, num_sweeps=150, num_chains=4, seed=0):
    print(f"Fox et al. experiment B: T = {num_steps}, L = L' = 15, {num_chains} chains x {num_sweeps} sweeps")
    results = run_variants(num_steps, num_sweeps, num_chains, seed, verbose=True)
    print(f"{'model':<30}{'median Hamming':>16}{'10%':>8}{'90%':>8}{'states':>8}")
    for name, r in results.items():
        h = r["hamming"]
        print(f"{name:<30}{np.median(h):>16.3f}{np.quantile(h, 0.1):>8.3f}{np.quantile(h, 0.9):>8.3f}"
              f"{np.median(r['num_states']):>8.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-steps", type=int, default=1000)
    parser.add_argument("--num-sweeps", type=int, default=150)
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.num_steps, args.num_sweeps, args.num_chains, args.seed)
