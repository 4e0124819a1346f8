"""
DP-mixture emissions
====================

When a state's emissions are not one Gaussian, a single-Gaussian HMM splits them into several
states that switch fast.  Fox et al. (2007, Sec. VI) give each state an infinite mixture
instead: ``psi_k ~ DP(sigma)`` mixture weights over components ``theta_kj ~ H``, and
``y_t ~ sum_j psi_kj F(theta_{k j})``.  The self-transition bias ``kappa`` is what makes this
identifiable: without it four fast-switching single-Gaussian states and two persistent
two-component states explain the data equally well.

:class:`numpyro_hdphmm.emissions.DPMixture` ``(base, sigma, L')`` is the weak limit of that
mixture (``psi_k ~ Dir(sigma/L', ...)``) over any conjugate base family.  Its sites are
``{name}_weights`` ``(K, L')`` and the base's parameters with shape ``(K, L', ...)``.  The
concentration ``sigma`` may be a constant or a Gamma-prior site (exact update).  The weak-limit
and beam kernels use its mixture log-likelihoods; the direct-assignment kernel runs Fox et al.'s
Algorithm 3 with the weights and components integrated out.

The page fits the data of Fox et al.'s experiment B: 2 states, each a mixture of two Gaussians
(state 0: means 0 and 10; state 1: means -7 and 7; variance 10), self-transition 0.98.  The
:doc:`/papers/plot_fox_experiment_b` page compares it with the single-Gaussian models over many
chains.
"""

import os

import arviz as az
import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC
from scipy.stats import norm

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

data = nh.datasets.fox_experiment_b(num_steps=1000 if QUICK else 2000, seed=0)
y, truth = data.observations, data.states

# %%
# The model: a sticky HDP-HMM whose emission is a DP mixture of Gaussians.


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    sigma = numpyro.sample("sigma", dist.Gamma(1.0, 1.0))  # mixture concentration: exact update
    emission = nh.emissions.DPMixture(nh.emissions.GaussianNIW.weakly_informative(y), sigma, max_components=10)
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=10)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (20, 10) if QUICK else (300, 300)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=2,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y)
samples = mcmc.get_samples()
print({k: v.shape for k, v in samples.items() if k.startswith("y_") and k != "y_states"})

# %%
# Results
# -------

states = np.asarray(samples["y_states"])
print("Hamming distance, last draw:", round(float(nh.diagnostics.hamming_distance(states[-1], truth)), 3))
print(az.summary(az.from_numpyro(mcmc, log_likelihood=False), var_names=["kappa", "sigma", "y_num_states"],
                 kind="stats"))
point = nh.point_segmentation(states)  # the posterior point estimate of the segmentation
nh.diagnostics.plot_segmentation(y, point.labels, true_states=truth, agreement=nh.labels.step_agreement(states, point.labels),
                                 title="sticky HDP-HMM with DP-mixture emissions: point segmentation")

# %%
# Each used state's mixture density from the last draw, over the histogram of the
# observations that draw assigns to it (components with weight below 2% are not drawn).

last = {k: np.asarray(v[-1]) for k, v in samples.items()}
used = [k for k in np.unique(last["y_states"]) if np.mean(last["y_states"] == k) > 0.02]
grid = np.linspace(y.min() - 5, y.max() + 5, 400)
fig, axes = plt.subplots(1, len(used), figsize=(5 * len(used), 3), squeeze=False)
for ax, k in zip(axes[0], used):
    ax.hist(y[last["y_states"] == k, 0], bins=40, density=True, color="0.8")
    w = last["y_weights"][k]
    density = sum(w[j] * norm.pdf(grid, last["y_mu"][k, j, 0], np.sqrt(last["y_cov"][k, j, 0, 0]))
                  for j in range(len(w)))
    ax.plot(grid, density, "k", lw=1.5)
    big = np.flatnonzero(w > 0.02)
    ax.set_title(f"state {k}: {len(big)} components, means " + ", ".join(f"{m:.1f}" for m in last["y_mu"][k, big, 0]))
    ax.set_xlabel("y")
fig.tight_layout()
