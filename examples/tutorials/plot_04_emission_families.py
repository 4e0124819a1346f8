"""
Emission families
=================

:mod:`numpyro_hdphmm.emissions` holds conjugate exponential families, each one object with one
protocol (sufficient statistics with masks, conjugate posterior, marginal and predictive
likelihoods, posterior draws, the ``(T, K)`` log-likelihood matrix, NumPyro sites, and a
data-scaled default prior ``weakly_informative(y)``).  Every family works with every kernel.

=============================  ====================================  =====================  ===========================
family                         prior                                 parameters (sites)     observations
=============================  ====================================  =====================  ===========================
``GaussianNIW``                Normal-inverse-Wishart                ``mu``, ``cov``        ``(T, D)`` real
``DiagonalGaussian``           Normal-Gamma per dimension            ``mu``, ``precision``  ``(T, D)`` real
``Categorical``                Dirichlet                             ``probs``              ``(T,)`` integer symbols
``Poisson``                    Gamma                                 ``rate``               ``(T,)`` or ``(T, D)`` counts
``VonMisesFisher``             vMF on the mean direction             ``mu``                 ``(T, D)`` unit vectors
``AutoRegressive``             matrix-normal-inverse-Wishart         ``A``, ``cov``         ``(T, D)`` real, VAR(p)
=============================  ====================================  =====================  ===========================

For each family this page draws a sequence from a sticky HDP-HMM with that emission (so the
truth is known), fits it with the weak-limit sampler and the family's ``weakly_informative``
prior, and plots the segmentation of one draw against the truth.  The hyperparameters are
constants here (``gamma = alpha = 2``, ``kappa = 30``) to keep the page short; priors on them
work as in the other tutorials.
"""

import os

import jax
import matplotlib.pyplot as plt
import numpy as np
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs
E = nh.emissions
T = 300 if QUICK else 600

# %%
# The generating priors (one per family) and how each fit's prior is built from the data.

families = {
    "GaussianNIW (D=2)": (
        E.GaussianNIW(loc=np.zeros(2), mean_precision=0.05, df=5.0, scale=np.eye(2)),
        lambda y: E.GaussianNIW.weakly_informative(y)),
    "DiagonalGaussian (D=3)": (
        E.DiagonalGaussian(loc=np.zeros(3), mean_precision=0.05, concentration=4.0, rate=2.0),
        lambda y: E.DiagonalGaussian.weakly_informative(y)),
    "Categorical (C=8)": (
        E.Categorical(8, concentration=0.3),
        lambda y: E.Categorical.weakly_informative(y, num_categories=8)),
    "Poisson": (
        E.Poisson(concentration=2.0, rate=0.2),
        lambda y: E.Poisson.weakly_informative(y)),
    "VonMisesFisher (D=3)": (
        E.VonMisesFisher(concentration=20.0, prior_mean=np.array([0.0, 0.0, 1.0]), prior_concentration=0.01),
        lambda y: E.VonMisesFisher.weakly_informative(y, concentration=20.0)),
    "AutoRegressive (D=2, p=1)": (
        E.AutoRegressive(order=1, loc=np.hstack([0.9 * np.eye(2), np.zeros((2, 1))]),
                         col_precision=np.diag([20.0, 20.0, 0.2]), df=5.0, scale=0.1 * np.eye(2)),
        lambda y: E.AutoRegressive.weakly_informative(y, order=1)),
}


def fit(y, emission, key):
    def model(y):
        hmm = nh.StickyHDPHMM(gamma=2.0, alpha=2.0, kappa=30.0, emission=emission, max_states=12)
        nh.sample("y", hmm, obs=y)

    mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=20 if QUICK else 200,
                num_samples=10 if QUICK else 200, num_chains=1, progress_bar=False)
    mcmc.run(key, y)
    return np.asarray(mcmc.get_samples()["y_states"])


# %%
# Draw, fit and plot.  Categorical symbols and counts are plotted as they are; unit vectors and
# vectors as one line per coordinate.

fig, axes = plt.subplots(2 * len(families), 1, figsize=(10, 2.2 * len(families)),
                         gridspec_kw={"height_ratios": [5, 1] * len(families)})
for i, (name, (generating, make_prior)) in enumerate(families.items()):
    generator = nh.StickyHDPHMM(gamma=2.0, alpha=2.0, kappa=30.0, emission=generating, max_states=15, num_steps=T)
    y, latent = generator.sample_with_intermediates(jax.random.key(10 + i))
    y, truth = np.asarray(y), np.asarray(latent["states"])
    states = fit(y, make_prior(y), jax.random.key(i))
    hamming = nh.diagnostics.hamming_distance(states[-1], truth)
    print(f"{name:27s} T={T}: {nh.diagnostics.num_states(truth)} true states, "
          f"last draw {nh.diagnostics.num_states(states[-1])} states, Hamming {hamming:.3f}")
    nh.diagnostics.plot_segmentation(y, states[-1], true_states=truth, ax=axes[2 * i: 2 * i + 2],
                                     title=f"{name}: Hamming {hamming:.2f}")
    axes[2 * i].tick_params(labelbottom=False)  # the strip below shares the time axis
fig.tight_layout()
