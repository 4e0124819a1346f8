"""
Particle Gibbs with ancestor sampling (PGAS)
============================================

:class:`numpyro_hdphmm.infer.PGAS` is Tripuraneni, Gu, Ge & Ghahramani's (2015) particle Gibbs
sampler with ancestor sampling for the infinite (sticky) HDP-HMM.  Each sweep redraws every
sequence's whole state path by a conditional sequential Monte Carlo over the instantiated states
plus one lumped "new state"; a particle that takes the new state creates it by stick-breaking.
Ancestor sampling lets the reference path change its past, so the chain mixes with few particles
(``num_particles``, 10 by default).  Then the emission parameters, tables, hyperparameters,
``beta`` and rows are drawn given the states, as in the beam sampler.  :doc:`/pgas` has the
algorithm, the paper's typos and the checks.

Strengths: the exact infinite model, blocked moves of whole paths whose new states are proposed
where the data want them (no slice has to admit them).  Weakness: the particles are a Monte Carlo
approximation inside an exact kernel: too few of them and the paths barely move (watch
``update_rate`` and ``ess_mean``).
"""

import os

import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

# %%
# Data: the PGAS paper's synthetic set A (4 states, self-transition 0.75, unit-variance
# Gaussian emissions).

data = nh.datasets.pgas_set_a(num_steps=500 if QUICK else 2000, seed=0)
y, truth = data.observations, data.states


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
    alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
    hmm = nh.HDPHMM(gamma=gamma, alpha=alpha, emission=nh.emissions.GaussianNIW.weakly_informative(y),
                    max_states=20)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (10, 20) if QUICK else (200, 300)
mcmc = MCMC(nh.infer.PGAS(model, num_particles=10), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=2, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y, extra_fields=("num_states", "update_rate", "ess_mean"))

# %%
# Diagnostics of the particle system
# ----------------------------------
# ``update_rate``: the fraction of steps whose state changed in a sweep (near 0: the paths are
# stuck on the reference, use more particles); ``ess_mean``: the particles' relative effective
# sample size after each step's weighting, averaged over the sweep.

stats = mcmc.get_extra_fields(group_by_chain=True)
print("update rate (mean):", float(np.mean(stats["update_rate"])), " ESS / N (mean):", float(np.mean(stats["ess_mean"])))
nh.labels.print_summary(mcmc, point_estimate=False)

fig, axes = plt.subplots(1, 2, figsize=(10, 2.8))
axes[0].plot(np.asarray(stats["num_states"]).T, lw=0.8)
axes[0].axhline(4, color="k", ls="--", lw=1)
axes[0].set(xlabel="sweep (after warm-up)", ylabel="states in use")
axes[1].plot(np.asarray(stats["update_rate"]).T, lw=0.8)
axes[1].set(xlabel="sweep (after warm-up)", ylabel="update rate")
fig.tight_layout()

# %%
# The posterior point segmentation and its per-step uncertainty (not one chain's last draw).

states = np.asarray(mcmc.get_samples()["y_states"])
point = nh.point_segmentation(states)
agreement = nh.labels.step_agreement(states, point.labels)
print(f"point segmentation: {point.num_clusters} states, Hamming distance to the truth "
      f"{nh.diagnostics.hamming_distance(point.labels, truth):.3f}")
nh.diagnostics.plot_segmentation(y[:300], point.labels[:300], true_states=truth[:300], agreement=agreement[:300],
                                 title="PGAS: point segmentation (first 300 steps)")
