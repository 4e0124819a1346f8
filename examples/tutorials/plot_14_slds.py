"""
Switching linear dynamics: the HDP-SLDS
=======================================

An autoregressive HMM (the HDP-AR-HMM) lets each state drive the *observations* with its own
linear dynamics.  When the observations are noisy measurements of a smooth latent trajectory (a
pose seen by a camera, a firing-rate state seen through spikes, a position seen by radar) the
dynamics belong to the latent state: the switching linear dynamical system (SLDS) of Fox,
Sudderth, Jordan & Willsky (IEEE TSP 59(4), 2011),

.. math::

    z_t \\sim \\pi_{z_{t-1}}, \\quad x_t = A_{z_t} x_{t-1} + b_{z_t} + e_t, \\quad
    e_t \\sim N(0, Q_{z_t}), \\quad y_t = C x_t + d + w_t, \\quad w_t \\sim N(0, R),

with the modes from the sticky HDP-HMM prior.  :class:`numpyro_hdphmm.HDPSLDS` declares it with
:func:`numpyro_hdphmm.sample`: the dynamics ``(A_k, b_k, Q_k)`` are an order-1
:class:`~numpyro_hdphmm.emissions.AutoRegressive` family over ``x`` and the observation model a
:class:`~numpyro_hdphmm.LinearGaussianObservation` (``C`` fixed or learned, full or diagonal ``R``).
:class:`~numpyro_hdphmm.infer.WeakLimitGibbs` samples it with Fox et al.'s blocked Gibbs sampler:
the modes by FFBS given the latent path, the latent path by a Kalman filter and backward sampler
given the modes, every parameter from its conjugate conditional.

This page follows Fox et al.'s synthetic comparison (their Sec. V-A): data from a three-mode SLDS
observed with noise, fitted by the HDP-SLDS, by the HDP-AR-HMM of the observations and by the SLDS
with the true number of modes (capacity 3); the normalized Hamming distance to the true modes per
sweep, the latent path with intervals, and each mode's dynamics.
"""

import os
import warnings

import jax
import matplotlib.pyplot as plt
import numpy as np
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

# %%
# Data: three rotations seen through noise
# ----------------------------------------
# A 2-D latent state that rotates at a different speed (and drifts to a different fixed point) in
# each of three modes, segments of 60 steps, observed directly (``C = I``) with noise of standard
# deviation 0.25: larger than the dynamics noise (0.1), so the observations' own increments are
# dominated by noise.

rng = np.random.default_rng(0)
T = 360
truth = np.repeat(rng.permutation(np.tile(np.arange(3), 2)), 60)
angles, drifts = np.array([0.25, -0.15, 0.05]), np.array([[0.2, 0.0], [-0.2, 0.1], [0.0, -0.2]])
x = np.zeros((T, 2))
for t in range(1, T):
    a = angles[truth[t]]
    A = 0.97 * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    x[t] = A @ x[t - 1] + drifts[truth[t]] + 0.1 * rng.standard_normal(2)
y = x + 0.25 * rng.standard_normal((T, 2))

# %%
# Three models
# ------------
# The same dynamics prior for all three (matrix normal around "no dynamics", inverse-Wishart noise
# of scale 0.02); the SLDS observes the latent state through ``C = I`` with a diagonal noise
# ``R`` learned under an inverse-gamma prior.  Split-merge moves (``split_merge=2``) let a mode
# split in one step rather than by many unlikely single-step changes.

dynamics = nh.emissions.AutoRegressive(1, loc=np.zeros((2, 3)), col_precision=np.eye(3), df=4.0,
                                       scale=0.02 * np.eye(2))
observation = nh.LinearGaussianObservation(2, 2, C=np.eye(2), noise="diagonal", scale=0.1 * np.eye(2))


def slds_model(y, max_states=10):
    nh.sample("y", nh.HDPSLDS(1.0, 1.0, 20.0, dynamics, observation, max_states=max_states), obs=y)


def finite_slds_model(y):
    slds_model(y, max_states=3)


def ar_hmm_model(y):
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 20.0, dynamics, max_states=10), obs=y)


num_warmup, num_samples, num_chains = (2, 10, 2) if QUICK else (0, 300, 3)
fits = {}
for label, model in (("HDP-SLDS", slds_model), ("SLDS, 3 modes", finite_slds_model), ("HDP-AR-HMM", ar_hmm_model)):
    mcmc = MCMC(nh.infer.WeakLimitGibbs(model, split_merge=2), num_warmup=num_warmup, num_samples=num_samples,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        # the finite SLDS occupies all of its 3 slots by design: the capacity warning is expected there
        warnings.filterwarnings("ignore", "WeakLimitGibbs: all max_states=3", RuntimeWarning)
        mcmc.run(jax.random.key(1), y)
    fits[label] = mcmc

# %%
# Segmentation error per sweep
# ----------------------------
# The normalized Hamming distance to the true modes after the best relabelling
# (:func:`numpyro_hdphmm.diagnostics.hamming_distance`), every chain of every model.  The AR-HMM of
# the noisy observations, whose dynamics must explain the noise too, does not recover the three
# modes in this budget (it merges or splits them); the SLDS separates noise from dynamics.

fig, ax = plt.subplots(figsize=(7, 3))
for color, (label, mcmc) in zip(("C0", "C2", "C3"), fits.items()):
    states = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])
    hamming = nh.diagnostics.hamming_distance(states, truth)
    for c in range(num_chains):
        ax.plot(hamming[c], color=color, lw=0.8, label=label if c == 0 else None)
    used = np.asarray(mcmc.get_samples(group_by_chain=True)["y_num_states"])[:, -1]
    print(f"{label}: final Hamming distance per chain {np.round(hamming[:, -1], 3)}, modes in use {used}")
ax.set(xlabel="sweep", ylabel="normalized Hamming distance")
ax.legend(fontsize=7)
fig.tight_layout()

# %%
# The latent path and the modes
# -----------------------------
# The posterior mean of the latent path with a 90% interval from the draws of ``y_latent``, and the
# Bayes point estimate of the segmentation (:func:`numpyro_hdphmm.point_segmentation`).

samples = fits["HDP-SLDS"].get_samples()
latent = np.asarray(samples["y_latent"])
lo, hi = np.quantile(latent[..., 0], [0.05, 0.95], axis=0)
point = nh.point_segmentation(np.asarray(samples["y_states"]))
fig, axes = plt.subplots(2, 1, figsize=(8, 4), sharex=True)
axes[0].plot(y[:, 0], ".", ms=2, color="0.6", label="observed")
axes[0].plot(x[:, 0], color="k", lw=0.8, label="true latent")
axes[0].plot(latent[..., 0].mean(0), color="C0", lw=1, label="posterior mean")
axes[0].fill_between(np.arange(T), lo, hi, color="C0", alpha=0.3, lw=0)
axes[0].set(ylabel="first coordinate")
axes[0].legend(fontsize=7, ncol=3)
axes[1].step(np.arange(T), truth, color="k", lw=0.8, label="true modes")
axes[1].step(np.arange(T), point.labels + 0.1, color="C0", lw=0.8, label="point estimate")
axes[1].set(xlabel="step", ylabel="mode")
axes[1].legend(fontsize=7)
fig.tight_layout()
print("latent path: mean absolute error", round(float(np.mean(np.abs(latent.mean(0) - x))), 3),
      "(observations:", round(float(np.mean(np.abs(y - x))), 3), ")")

# %%
# Each mode's dynamics
# --------------------
# :func:`numpyro_hdphmm.dynamics_summary`: at each draw, the eigenvalues of every ``A_k`` (the
# argument of the leading one is the rotation per step) and the fixed point ``(I - A_k)^{-1} b_k``.

summary = nh.dynamics_summary(samples)
last = summary.occupancy[-1] > 0.05
for k in np.flatnonzero(last):
    eig = summary.eigenvalues[-1, k, 0]
    print(f"mode {k}: occupancy {summary.occupancy[-1, k]:.2f}, |lambda| {abs(eig):.3f}, "
          f"rotation {abs(np.angle(eig)):.3f} per step, fixed point {np.round(summary.fixed_point[-1, k], 2)}")
print("true rotations per step (in either direction: a conjugate pair):", np.abs(angles))
