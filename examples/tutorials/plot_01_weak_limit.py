"""
Weak-limit blocked Gibbs
========================

:class:`numpyro_hdphmm.infer.WeakLimitGibbs` is Fox et al.'s blocked Gibbs sampler (2007,
Algorithm 2) for the *weak-limit approximation* of the (sticky) HDP-HMM: the top-level weights
are ``beta ~ Dir(gamma/L, ..., gamma/L)`` over ``L = max_states`` states instead of
``GEM(gamma)``, which converges to the HDP as ``L`` grows.  Because the model is finite, one
sweep updates the whole state sequence at once by forward filtering / backward sampling
(``O(T L^2)``), then, given the states, the emission parameters (conjugate posteriors), the
auxiliary table counts, the hyperparameters with Gamma priors (exact auxiliary-variable
updates), ``beta`` and the transition rows ``Dir(alpha beta + kappa e_j + n_j)``.

It is the fastest and best-mixing kernel of the package on most problems (see
:doc:`/choosing_a_kernel`).  What it gives up: ``L`` is a truncation, so choose it larger than
the number of states you expect (the sampler reports how many it uses).

This page draws a 2-D data set from the sticky HDP-HMM itself, fits it with four chains, reads
the kernel's per-sweep statistics, continues a run, and shows the kernel inside NumPyro's own
``Gibbs`` composition.
"""

import os

import arviz as az
import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

# %%
# Data from the generative model
# ------------------------------
# ``StickyHDPHMM(...).sample_with_intermediates(key)`` draws a sequence and returns the latent
# draws too: ``beta``, ``trans`` (start row last), the emission parameters and ``states``.

prior = nh.emissions.GaussianNIW(loc=np.zeros(2), mean_precision=0.05, df=5.0, scale=np.eye(2))
generator = nh.StickyHDPHMM(gamma=3.0, alpha=3.0, kappa=60.0, emission=prior, max_states=30, num_steps=800)
y, latent = generator.sample_with_intermediates(jax.random.key(3))
y, truth = np.asarray(y), np.asarray(latent["states"])
print("observations", y.shape, "- true states used:", nh.diagnostics.num_states(truth))

# %%
# The model and the run
# ---------------------
# ``max_states=20`` is the weak-limit ``L``.  ``extra_fields`` asks NumPyro to keep the
# kernel's per-sweep statistics: ``num_states`` (states in use), ``lp`` (log joint density)
# and ``overflow`` (always False under the weak limit, where every slot is a state).


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=20)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (20, 20) if QUICK else (300, 700)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=4,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y, extra_fields=("num_states", "lp"))
stats = mcmc.get_extra_fields(group_by_chain=True)
print({k: v.shape for k, v in stats.items()})

fig, axes = plt.subplots(1, 2, figsize=(10, 3))
for c in range(4):
    axes[0].plot(stats["num_states"][c], lw=0.8, label=f"chain {c}")
    axes[1].plot(stats["lp"][c], lw=0.8)
axes[0].axhline(nh.diagnostics.num_states(truth), color="k", ls="--", lw=1, label="truth")
axes[0].set(xlabel="sweep (after warm-up)", ylabel="states in use")
axes[1].set(xlabel="sweep (after warm-up)", ylabel="log joint")
axes[0].legend(fontsize=7)
fig.tight_layout()

# %%
# Segmentation and the posterior of the number of states
# ------------------------------------------------------

samples = mcmc.get_samples(group_by_chain=True)
states = np.asarray(samples["y_states"])
print("Hamming distance to the truth, last draw per chain:",
      np.round(nh.diagnostics.hamming_distance(states[:, -1], truth), 3))
flat = states.reshape(-1, states.shape[-1])
point = nh.point_segmentation(flat)  # the posterior point estimate, over all chains
nh.diagnostics.plot_segmentation(y, point.labels, true_states=truth, agreement=nh.labels.step_agreement(flat, point.labels),
                                 title="posterior point segmentation")

# %%
# ArviZ reads everything, including the ``y_num_states`` site the kernel adds; the
# hyperparameters are ordinary posterior variables.

idata = az.from_numpyro(mcmc, log_likelihood=False)
az.plot_posterior(idata, var_names=["gamma", "alpha", "kappa"], figsize=(10, 2.5))

# %%
# Continuing a run
# ----------------
# The kernel's state is a NamedTuple (:class:`~numpyro_hdphmm.infer.HDPState`) that carries its
# random key, so NumPyro's ``post_warmup_state`` continues the chains exactly where they stopped.

mcmc.post_warmup_state = mcmc.last_state
mcmc.run(mcmc.post_warmup_state.rng_key, y)
more = np.asarray(mcmc.get_samples(group_by_chain=True)["y_num_states"])
print("states in use over the continued sweeps (chain x sweep):", more.shape, "mean", more.mean().round(2))

# %%
# Inside ``numpyro.infer.Gibbs``
# ------------------------------
# Every kernel of the package implements the block protocol of ``numpyro.infer.Gibbs``, so it
# can own the HDP-HMM sites while another kernel (here NUTS) updates the rest.  The weak-limit
# kernel samples the model with ``beta ~ Dir(gamma/L)``; every block must therefore see the
# same, transformed model, :func:`numpyro_hdphmm.infer.weak_limit` ``(model)``::
#
#     from numpyro.infer import NUTS, Gibbs
#
#     wl = nh.infer.weak_limit(model)
#     hdp_sites = ["y_beta", "y_trans", "y_mu", "y_cov", "y_states"]
#     kernel = Gibbs([(nh.infer.WeakLimitGibbs(wl), hdp_sites), (NUTS(wl), None)])
#
# (with ``None``, NUTS takes every remaining site: here ``gamma``, ``alpha`` and ``kappa``; the
# kernel's exact hyperparameter updates are then not used).  The simpler way to get the same
# split is the default: sites without an exact update go to the kernel's own inner NUTS.
