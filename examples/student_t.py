"""Your own emissions and hyperpriors: a sticky HDP-HMM with Student-t emissions and LogNormal
hyperpriors, fitted to heavy-tailed data with every MCMC kernel of the package.

The emission is plain NumPyro: a callable ``k -> dist.StudentT(nu, loc[k], scale[k])`` over the
user's own sample sites ``loc``, ``scale`` (one per state slot) and ``nu``.  None of the priors
is conjugate, and the LogNormal priors on ``gamma``, ``alpha`` and ``kappa`` have no exact
auxiliary-variable update; every kernel samples the states (and the global weights and rows)
with its own algorithm, and its inner NUTS kernel updates all of those sites given the states
after every sweep:

* ``WeakLimitGibbs``: blocked FFBS over the ``L`` slots (Fox et al. Alg. 2);
* ``BeamSampler``: slice sampling of the infinite model (Van Gael et al. 2008), states kept in
  their slots (no relabelling), so that ``loc[k]`` stays the location of state ``k``;
* ``DirectAssignmentGibbs``: the step-wise sampler of the infinite model, with the uncollapsed
  emission step (the Student-t parameters cannot be integrated out; Neal's Algorithm 8 for new
  states).

The data: 4 states with self-transition 0.95, means -6, -2, 2, 6 and Student-t noise with 3
degrees of freedom (outliers that a Gaussian HMM explains with extra states).  The script prints,
for each kernel, the posterior of the number of states, the Hamming distance to the true states
(after the best matching of labels), ArviZ's summary of the hyperparameters, and saves
``student_t_trace_<kernel>.png`` (``az.plot_trace`` of gamma, alpha, kappa, nu and the number of
states).  Run:  python examples/student_t.py  [--quick]
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

MAX_STATES = 10
MEANS = np.array([-6.0, -2.0, 2.0, 6.0])


def heavy_tailed_data(num_steps=500, self_prob=0.95, df=3.0, seed=0):
    """A 4-state Markov chain with Student-t(df) noise of scale 0.5 around the state means."""
    rng = np.random.default_rng(seed)
    k = MEANS.size
    trans = np.full((k, k), (1.0 - self_prob) / (k - 1))
    np.fill_diagonal(trans, self_prob)
    z = np.zeros(num_steps, int)
    for t in range(1, num_steps):
        z[t] = rng.choice(k, p=trans[z[t - 1]])
    y = MEANS[z] + 0.5 * rng.standard_t(df, size=num_steps)
    return y.astype(np.float32), z


def model(y):
    # hyperpriors of your choice (LogNormal: no conjugate update, NUTS moves them)
    gamma = numpyro.sample("gamma", dist.LogNormal(0.0, 1.0))
    alpha = numpyro.sample("alpha", dist.LogNormal(1.0, 1.0))
    kappa = numpyro.sample("kappa", dist.LogNormal(3.0, 1.0))
    # emissions of your choice: Student-t with per-state location and scale, shared nu
    nu = numpyro.sample("nu", dist.LogNormal(1.5, 0.5))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0).expand([MAX_STATES]))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([MAX_STATES]))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission=lambda k: dist.StudentT(nu, loc[k], scale[k]),
                          max_states=MAX_STATES)
    nh.sample("y", hmm, obs=y)


KERNELS = {
    "WeakLimitGibbs": nh.infer.WeakLimitGibbs,
    "BeamSampler": nh.infer.BeamSampler,
    "DirectAssignmentGibbs": nh.infer.DirectAssignmentGibbs,
}


def fit(name, y, truth, num_warmup, num_samples, num_chains, seed):
    mcmc = MCMC(KERNELS[name](model), num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed), y)
    elapsed = time.perf_counter() - start
    samples = mcmc.get_samples()
    num = np.asarray(samples["y_num_states"])
    values, counts = np.unique(num, return_counts=True)
    last = np.asarray(samples["y_states"])[-num_samples // 2:]
    hamming = float(np.mean([nh.diagnostics.hamming_distance(d, truth) for d in last]))
    print(f"\n=== {name}: {num_chains} chains x {num_warmup + num_samples} sweeps in {elapsed:.0f} s ===")
    print("posterior of the number of states: "
          + ", ".join(f"{v}: {c / num.size:.2f}" for v, c in zip(values, counts)))
    print(f"mean Hamming distance to the true states (second half): {hamming:.3f}")
    idata = az.from_numpyro(mcmc)
    var_names = ["gamma", "alpha", "kappa", "nu", "y_num_states"]
    print(az.summary(idata, var_names=var_names, kind="stats"))
    az.plot_trace(idata, var_names=var_names)
    plt.tight_layout()
    plt.savefig(f"student_t_trace_{name}.png", dpi=80)
    plt.close("all")
    return int(values[np.argmax(counts)]), hamming


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer sweeps (a smoke run)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    num_warmup, num_samples, num_chains = (100, 100, 2) if args.quick else (400, 400, 2)
    y, truth = heavy_tailed_data(seed=args.seed)
    print(f"T = {y.size}, {np.unique(truth).size} true states, Student-t(3) noise; "
          f"{np.mean(np.abs(y - MEANS[truth]) > 2.0):.1%} of the points lie more than 4 scales from their mean")
    results = {name: fit(name, y, truth, num_warmup, num_samples, num_chains, args.seed) for name in KERNELS}
    print("\nkernel                  mode of num_states   Hamming")
    for name, (mode, hamming) in results.items():
        print(f"{name:24s}{mode:>10d}{hamming:>18.3f}")


if __name__ == "__main__":
    main()
