"""
Replica exchange: chains that cross between modes, and the evidence
====================================================================

A Gibbs sweep moves one block given the others, so a chain can sit for thousands of sweeps in one
mode of the posterior (one state where there are two, two labels for one regime) while another
chain sits in a different one.  Replica exchange (parallel tempering) runs copies of the sampler
on flattened versions of the posterior, ``p(x) p(y | x)^b`` for inverse temperatures ``b`` from 0
(the prior) to 1 (the posterior), and lets neighbouring copies exchange their states.  The copies
near the prior move freely; the exchanges carry what they find up to the untempered copy, whose
draws are the answer.  It is exact: the untempered copy's draws follow the posterior.

With :class:`~numpyro_hdphmm.infer.WeakLimitGibbs` it is one option, ``tempering=R`` (``R``
copies), and the copies are vectorized with the chains.  The same run gives the marginal
likelihood ``log p(y)`` (:func:`numpyro_hdphmm.log_evidence`).  ``docs/tempering.md`` has the
details and the measurements.
"""

import os
import warnings

import arviz as az
import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs
jax.config.update("jax_enable_x64", True)

# %%
# Two regimes that overlap
# ------------------------
# 150 steps from two Gaussian regimes whose means are one standard deviation apart, in segments
# of 50 steps: the marginal histogram shows one bump, and only the persistence tells the regimes
# apart.  The model is the README's (Gamma hyperpriors, data-scaled NIW emissions).

rng = np.random.default_rng(0)
truth = np.repeat([0, 1, 0], 50)
y = rng.normal(truth - 0.5, 1.0)[:, None]


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=20), obs=y)


# %%
# The same chains with and without tempering
# ------------------------------------------
# Four vectorized chains each.  ``tempering=8`` runs eight copies per chain; the ladder of inverse
# temperatures adapts during warmup so that every pair of neighbours exchanges at the same rate.

warmup, draws = (20, 40) if QUICK else (200, 600)


def fit(model, seed, **options):
    """Four vectorized chains of ``WeakLimitGibbs(model, **options)`` on ``y``."""
    mcmc = MCMC(nh.infer.WeakLimitGibbs(model, **options), num_warmup=warmup, num_samples=draws, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mcmc.run(jax.random.key(seed), y)
    return mcmc


runs = {label: fit(model, 1, **options) for label, options in (("plain", {}), ("tempering=8", {"tempering": 8}))}

fig, axes = plt.subplots(1, 2, figsize=(9, 3), sharey=True)
for ax, (label, mcmc) in zip(axes, runs.items()):
    k = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_states"])
    ax.plot(k.T, lw=0.8)
    ax.set_title(f"{label}: R-hat of num_states {float(az.rhat(k.astype(float))):.2f}")
    ax.set_xlabel("draw")
axes[0].set_ylabel("states in use")
fig.tight_layout()

for label, mcmc in runs.items():
    k = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_states"])
    print(f"{label:12s} mean states per chain {np.round(k.mean(1), 2)}, share of draws at one state "
          f"{np.mean(k == 1):.2f}")

# %%
# What the exchanges did
# ----------------------
# ``swap_accept`` is each pair's acceptance probability in the sweeps where it proposed an exchange
# (NaN in the others: pairs (0, 1), (2, 3), ... and (1, 2), (3, 4), ... alternate), and
# ``inverse_temperatures`` the adapted ladder.  Rates well above zero everywhere mean that states
# travel the whole ladder; a pair near zero is a barrier (add copies).

fields = runs["tempering=8"].get_extra_fields(group_by_chain=True)
rates = np.nanmean(np.asarray(fields["swap_accept"]), axis=(0, 1))
ladder = np.asarray(fields["inverse_temperatures"])[0, -1]
print("swap rates per pair", np.round(rates, 2))
print("ladder (chain 0)   ", np.round(ladder, 4))

fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(ladder[1:], rates, "o-")
ax.set_xscale("log")
ax.set_xlabel("inverse temperature of the upper rung")
ax.set_ylabel("swap acceptance")
fig.tight_layout()

# %%
# The evidence from the same run
# ------------------------------
# The recorded log-likelihood of every copy gives ``log p(y)`` by stepping stones over the ladder,
# with its Monte Carlo error: a second route to model comparison beside PSIS-LOO.  Here it weighs
# the sticky model above against a version whose kappa is fixed at 0 (the plain HDP-HMM).


def non_sticky(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=20), obs=y)


sticky_evidence = nh.log_evidence(runs["tempering=8"])
plain_evidence = nh.log_evidence(fit(non_sticky, 2, tempering=8))
print(f"log p(y): sticky {sticky_evidence.log_evidence:.2f} +- {sticky_evidence.mc_error:.2f}, "
      f"non-sticky {plain_evidence.log_evidence:.2f} +- {plain_evidence.mc_error:.2f}")

# %%
# Other model classes
# -------------------
# ``tempering=`` works the same way on the explicit-duration HDP-HSMM (its emission likelihood is
# tempered; the segment durations stay on the prior side, as the HMM's transitions do) and on the
# HDP-SLDS (its observation likelihood ``p(y | x, C, R)``).  Here the evidence weighs an HSMM with
# Poisson durations against the sticky HMM above, on the same data: model comparison across model
# classes.


def hsmm(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    nh.sample("y", nh.HDPHSMM(gamma, alpha, nh.durations.Poisson(2.0, 0.05), emission, max_states=10,
                              max_duration=150), obs=y)


mcmc = fit(hsmm, 3, tempering=8)
hsmm_evidence = nh.log_evidence(mcmc)
k = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_states"])
print(f"log p(y): HSMM {hsmm_evidence.log_evidence:.2f} +- {hsmm_evidence.mc_error:.2f}; states per chain "
      f"{np.round(k.mean(1), 2)}, R-hat of num_states {float(az.rhat(k.astype(float))):.2f}")
