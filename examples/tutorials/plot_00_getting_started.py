"""
Getting started
===============

This page takes the model of the README from installation to plots: Fox et al.'s experiment A
(three persistent states with Gaussian emissions), the sticky HDP-HMM with your own priors on
its hyperparameters, four chains of the weak-limit blocked Gibbs sampler, ArviZ summaries and
a segmentation plot.

Install
-------

From a clone of the repository (Python 3.11 or later)::

    python3 -m venv .venv && . .venv/bin/activate && pip install -e .

That installs NumPyro, JAX (CPU), ArviZ, SciPy and Matplotlib.  For a GPU, install the CUDA
build of JAX as JAX's documentation describes; nothing else changes.

Every script on this site runs as it is (``python examples/tutorials/plot_00_getting_started.py``).
The documentation build executes them; with ``NH_DOCS_QUICK=1`` (the CI build) they run only a
few sweeps, so their numbers and figures are then not meaningful.
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
# The data
# --------
# :func:`numpyro_hdphmm.datasets.fox_experiment_a` draws the synthetic sequence of Fox et al.
# (2007), Sec. VII, experiment A: a 3-state HMM with self-transition probability 0.97 and
# scalar Gaussian emissions with means 50, 0, -50 and variances 50, 10, 50.  It returns the
# observations ``(T, 1)`` and the true states ``(T,)``.

data = nh.datasets.fox_experiment_a(num_steps=1000, seed=0)
y, truth = data.observations, data.states
print(y.shape, truth.shape, np.bincount(truth))

fig, ax = plt.subplots(figsize=(10, 2.5))
ax.plot(y[:, 0], lw=0.7, color="k")
ax.set_xlabel("time step")
ax.set_ylabel("y")
ax.set_title("Fox et al. experiment A")
fig.tight_layout()

# %%
# The model
# ---------
# A model is an ordinary NumPyro function.  The priors of the concentration ``gamma`` (top
# level), ``alpha`` (transition rows) and the self-transition bias ``kappa`` are yours; with
# Gamma priors (as here) every kernel updates them exactly: by slice sampling of their
# collapsed conditionals (the default, ``hyperparameters="collapsed"``) or by the
# auxiliary-variable schemes of Fox et al. (``hyperparameters="auxiliary"``).  :func:`numpyro_hdphmm.sample` declares the latent structure of the
# HDP-HMM as explicit sample sites: ``y_beta`` ``(K+1,)``, ``y_trans`` ``(K+1, K+1)``, the
# emission parameters ``y_mu`` ``(K, 1)`` and ``y_cov`` ``(K, 1, 1)``, the state sequence
# ``y_states`` ``(T,)`` and the observed ``y`` ``(T, 1)``, with ``K = max_states``.


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))  # your priors, any NumPyro code
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y),
                          max_states=20)
    nh.sample("y", hmm, obs=y)  # declares y_beta, y_trans, y_mu, y_cov, y_states and y


# %%
# Inference
# ---------
# :class:`numpyro_hdphmm.infer.WeakLimitGibbs` is a NumPyro ``MCMCKernel``: it goes into
# ``numpyro.infer.MCMC`` like NUTS.  One sweep updates the states of the whole sequence by
# forward filtering / backward sampling, then the emission parameters, the transition rows,
# ``beta`` and the hyperparameters.  ``chain_method="vectorized"`` runs the four chains as one
# vectorized program.

num_warmup, num_samples = (30, 30) if QUICK else (300, 500)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=4, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y)

# %%
# Results in ArviZ
# ----------------
# ``az.from_numpyro`` gives the posterior (with the states on a ``time`` dimension), a
# pointwise ``log_likelihood`` (one term per time step), ``sample_stats`` (``lp``,
# ``num_states``, ``overflow``, ...) and the observed data.  ``y_num_states`` is the number of
# states the draw's sequence uses.

idata = az.from_numpyro(mcmc)
print(az.summary(idata, var_names=["gamma", "alpha", "kappa"]))
num = np.asarray(idata.posterior["y_num_states"]).ravel()
print("posterior of the number of states:", {int(k): round(float(np.mean(num == k)), 3) for k in np.unique(num)})
print("pointwise log-likelihood:", dict(idata.log_likelihood["y"].sizes))

# %%
az.plot_trace(idata, var_names=["kappa", "y_num_states"])
plt.tight_layout()

# %%
# Segmentation
# ------------
# State labels are arbitrary (any permutation gives the same posterior), so a draw is compared
# to the truth after the optimal relabelling: :func:`numpyro_hdphmm.results.diagnostics.hamming_distance`
# is the fraction of time steps labelled differently after the Hungarian matching of states.

states = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])  # (chains, draws, T)
hamming = nh.diagnostics.hamming_distance(states, truth)  # (chains, draws)
print("normalized Hamming distance, last draw of each chain:", np.round(hamming[:, -1], 3))

# %%
# One draw is one sample, not an answer.  The posterior's point estimate of the segmentation is
# :func:`numpyro_hdphmm.point_segmentation` (the partition of the steps with the least expected
# variation of information to the draws, over all chains; no relabelling needed), and
# :func:`numpyro_hdphmm.results.labels.step_agreement` gives, per step, the fraction of draws that put
# the step in its estimated state (the strip below the plot): low at uncertain change points.
# Its number of clusters is the third count :func:`numpyro_hdphmm.results.labels.print_summary` reports,
# beside the raw and the effective ones (:doc:`/practical`).

flat = states.reshape(-1, states.shape[-1])
point = nh.point_segmentation(flat)
agreement = nh.labels.step_agreement(flat, point.labels)
print(f"point segmentation: {point.num_clusters} states, expected VI loss {point.expected_loss:.3f}, "
      f"Hamming distance {nh.diagnostics.hamming_distance(point.labels, truth):.3f}")
nh.diagnostics.plot_segmentation(y, point.labels, true_states=truth, agreement=agreement,
                                 title="sticky HDP-HMM: posterior point segmentation (colour = state)")

# %%
# Next steps: the tutorials of the other kernels (:class:`~numpyro_hdphmm.infer.DirectAssignmentGibbs`,
# :class:`~numpyro_hdphmm.infer.BeamSampler`), the emission families, your own emissions, and
# :doc:`/choosing_a_kernel`.
