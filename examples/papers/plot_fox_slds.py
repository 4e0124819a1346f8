"""
Fox et al. 2011, synthetic SLDS: HDP-SLDS vs HDP-AR-HMM vs the finite SLDS, with and without ARD
=================================================================================================

Fox, Sudderth, Jordan & Willsky, "Bayesian Nonparametric Inference of Switching Dynamic Linear
Models", IEEE Trans. Signal Processing 59(4), 2011 (arXiv:1003.3829), synthetic experiments.

**Paper's protocol** (what we could establish).  Data simulated from switching linear models;
the HDP-SLDS, HDP-AR-HMMs of the observations and baselines are each run by the blocked Gibbs
sampler from many initializations, and the figure plots the 10th, 50th and 90th percentiles of
the normalized Hamming distance between the sampled and the true mode sequences against the Gibbs
iteration.  The paper's automatic relevance determination (ARD) puts a Gamma-distributed
precision on each column of every mode's dynamics matrix, so that unused state dimensions (or
unused AR lags) are switched off.  The stored copies of the paper that we could reach for this
page give the abstract only, not the text of the experiments section, so **the data-generating
settings, priors, numbers of chains and sweeps below are our choices**, not the paper's; where a
value comes from the authors' public MATLAB toolbox (its demo script) we say so.

**Here.**

* Data (our choice): a 3-mode SLDS with a 2-D latent state, modes from a sticky Markov chain
  (self-transition 0.98), each mode a damped rotation (radius 0.97, angles 0.25, -0.15, 0.05 rad
  per step) with its own drift, dynamics noise s.d. 0.1, observed directly (``C = I``) with noise
  s.d. 0.25: the observation noise dominates the increments of ``y``, the regime in which the
  paper argues for the SLDS over an AR model of the observations.  ``T = 300``.
* Models: (a) the HDP-SLDS (:class:`numpyro_hdphmm.HDPSLDS`, capacity 10, ``C = I`` fixed,
  diagonal ``R`` with an inverse-gamma prior); (b) the HDP-AR(2)-HMM of the observations
  (``StickyHDPHMM`` with ``AutoRegressive(2, ...)``, capacity 10); (c) the SLDS with the true
  number of modes (capacity 3: under the weak limit ``beta ~ Dir(gamma / 3)``).  Each with the
  same matrix-normal inverse-Wishart dynamics prior, column precision ``I`` (no ARD) or
  ``diag(ard)`` with ``ard_j ~ Gamma(1, 1)`` (ARD; the prior mean of the precisions is the fixed
  value of the no-ARD model).  ``gamma = alpha = 1``, ``kappa = 20`` fixed (Fox et al. give them
  Gamma hyperpriors; fixing them keeps the six compiled samplers within this page's time budget).
* Sampler: :class:`~numpyro_hdphmm.infer.WeakLimitGibbs`, Fox et al.'s blocked Gibbs sampler
  (modes by FFBS given the latent path, the latent path by a Kalman filter and backward sampler),
  plus two split-merge moves per sweep (``split_merge=2``), which the paper's sampler does not
  have.  The kernel draws the ARD precisions from their conjugate Gamma conditional given the
  modes' dynamics (``docs/slds.md``, "Your own priors").
* Chains and sweeps (our choice, far fewer than the paper's): 4 chains of 150 sweeps per model,
  vectorized, every sweep kept; the median and the 10th-90th percentile band over the chains.

Differences to keep in mind: our ARD precisions multiply the inverse-Wishart noise (a matrix-normal
column precision, conjugate with the MNIW update) and are shared by the modes (the package's
dynamics prior has no per-mode hyperparameters); Fox et al.'s ARD precisions are per mode.
"""

import os
import time
import warnings

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs
NUM_CHAINS, NUM_SWEEPS, SPLIT_MERGE = (2, 4, 0) if QUICK else (4, 150, 2)
start_time = time.perf_counter()

# %%
# Data: a 3-mode SLDS observed through noise
# ------------------------------------------

rng = np.random.default_rng(0)
T, K_TRUE, D = 300, 3, 2
stay = 0.98
transition = np.full((K_TRUE, K_TRUE), (1 - stay) / (K_TRUE - 1))
np.fill_diagonal(transition, stay)
truth = np.zeros(T, dtype=int)
for t in range(1, T):
    truth[t] = rng.choice(K_TRUE, p=transition[truth[t - 1]])
angles = np.array([0.25, -0.15, 0.05])
drifts = np.array([[0.2, 0.0], [-0.2, 0.1], [0.0, -0.2]])
x = np.zeros((T, D))
for t in range(1, T):
    a = angles[truth[t]]
    A = 0.97 * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    x[t] = A @ x[t - 1] + drifts[truth[t]] + 0.1 * rng.standard_normal(D)
y = x + 0.25 * rng.standard_normal((T, D))
print("true mode occupancy:", np.bincount(truth, minlength=K_TRUE), " switches:", int(np.sum(np.diff(truth) != 0)))

# %%
# The six models
# --------------
# One dynamics prior per family; with ARD its column precision is the user site ``ard``.

GAMMA, ALPHA, KAPPA = 1.0, 1.0, 20.0
ARD_A, ARD_B = 1.0, 1.0
observation = nh.LinearGaussianObservation(D, D, C=np.eye(D), noise="diagonal", scale=0.1 * np.eye(D))
ar_scale = 0.75 * np.cov(np.diff(y, axis=0).T)  # AR-HMM innovations: from the data's increments


def dynamics(order, scale, ard):
    m = D * order + 1  # lag columns and the intercept
    if ard:
        precisions = numpyro.sample("ard", dist.Gamma(ARD_A, ARD_B).expand([m]).to_event(1))
        col_precision = jnp.diag(precisions)
    else:
        col_precision = jnp.eye(m)
    return nh.emissions.AutoRegressive(order, loc=jnp.zeros((D, m)), col_precision=col_precision, df=D + 2.0,
                                       scale=scale)


def slds_model(y, max_states=10, ard=False):
    dyn = dynamics(1, 0.02 * jnp.eye(D), ard)
    nh.sample("y", nh.HDPSLDS(GAMMA, ALPHA, KAPPA, dyn, observation, max_states=max_states), obs=y)


def ar_hmm_model(y, ard=False):
    dyn = dynamics(2, jnp.asarray(ar_scale), ard)
    nh.sample("y", nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, dyn, max_states=10), obs=y)


variants = {
    "HDP-SLDS": lambda ard: (lambda y: slds_model(y, 10, ard)),
    "HDP-AR(2)-HMM": lambda ard: (lambda y: ar_hmm_model(y, ard)),
    "SLDS, K = 3": lambda ard: (lambda y: slds_model(y, K_TRUE, ard)),
}

results = {}
for i, (name, make) in enumerate(variants.items()):
    for ard in (False,) if QUICK else (False, True):  # the quick CI build: the three models without ARD
        mcmc = MCMC(nh.infer.WeakLimitGibbs(make(ard), split_merge=SPLIT_MERGE), num_warmup=0,
                    num_samples=NUM_SWEEPS, num_chains=NUM_CHAINS, chain_method="vectorized", progress_bar=False)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # the finite SLDS occupies all of its 3 slots by design: the capacity warning is expected there
            warnings.filterwarnings("ignore", "WeakLimitGibbs: all max_states=3", RuntimeWarning)
            mcmc.run(jax.random.key(10 * i + ard), y)
        samples = mcmc.get_samples(group_by_chain=True)
        states = np.asarray(samples["y_states"])  # (chains, sweeps, T)
        results[(name, ard)] = dict(
            hamming=nh.diagnostics.hamming_distance(states, truth),  # (chains, sweeps)
            num_states=nh.diagnostics.num_states(states),
            ard=np.asarray(samples["ard"]) if ard else None,
            samples=samples if (name == "HDP-SLDS" and not ard) else None,
            seconds=time.perf_counter() - t0,
        )
        print(f"{name:15s} ARD={'yes' if ard else 'no ':3s} {results[(name, ard)]['seconds']:6.1f} s")

# %%
# Hamming distance against sweeps
# -------------------------------
# One panel per model, as in the paper's figure: the median over the chains (solid) and the
# 10th-90th percentile band, without ARD (blue) and with ARD (orange).

fig, axes = plt.subplots(1, 3, figsize=(12, 3.2), sharey=True)
sweeps = np.arange(1, NUM_SWEEPS + 1)
for ax, name in zip(axes, variants):
    for ard, color in ((False, "C0"), (True, "C1")):
        if (name, ard) not in results:
            continue
        q10, q50, q90 = np.percentile(results[(name, ard)]["hamming"], [10, 50, 90], axis=0)
        ax.plot(sweeps, q50, color=color, lw=1.5, label="ARD" if ard else "no ARD")
        ax.fill_between(sweeps, q10, q90, color=color, alpha=0.2, lw=0)
    ax.set(title=name, xlabel="Gibbs sweep", ylim=(0, 1))
axes[0].set_ylabel("normalized Hamming distance")
axes[0].legend(fontsize=8)
fig.tight_layout()

# %%
# The numbers at the last sweep
# -----------------------------
# Hamming distance over the chains (10th percentile, median, 90th percentile), the number of
# modes in use (median over chains; the true number is 3) and the ARD precisions (median over
# the chains' last draws; columns: the two lags of the latent state, or the four lags of the
# AR(2), then the intercept).

print(f"{'model':15s}{'ARD':>5s}{'Hamming 10%':>13s}{'median':>8s}{'90%':>7s}{'modes':>7s}   ARD precisions")
for (name, ard), r in results.items():
    q = np.percentile(r["hamming"][:, -1], [10, 50, 90])
    prec = "" if r["ard"] is None else np.array2string(np.median(r["ard"][:, -1], axis=0), precision=2)
    print(f"{name:15s}{'yes' if ard else 'no':>5s}{q[0]:>13.3f}{q[1]:>8.3f}{q[2]:>7.3f}"
          f"{np.median(r['num_states'][:, -1]):>7.0f}   {prec}")

# %%
# The latent path of the HDP-SLDS
# -------------------------------
# The first coordinate of the latent state: posterior mean and 90% interval over the draws of
# the second half of the chain whose final Hamming distance is the median (no ARD), with the
# observations and the true path; below, that chain's last mode sequence against the truth.

r = results[("HDP-SLDS", False)]
c = int(np.argsort(r["hamming"][:, -1])[NUM_CHAINS // 2])
latent = np.asarray(r["samples"]["y_latent"])[c, NUM_SWEEPS // 2:]
lo, hi = np.quantile(latent[..., 0], [0.05, 0.95], axis=0)
relabelled, _ = nh.diagnostics.relabel(np.asarray(r["samples"]["y_states"])[c, -1], truth)
fig, axes = plt.subplots(2, 1, figsize=(9, 4.2), sharex=True)
axes[0].plot(y[:, 0], ".", ms=2, color="0.6", label="observed")
axes[0].plot(x[:, 0], color="k", lw=0.8, label="true latent")
axes[0].plot(latent[..., 0].mean(0), color="C0", lw=1, label="posterior mean")
axes[0].fill_between(np.arange(T), lo, hi, color="C0", alpha=0.3, lw=0, label="90% interval")
axes[0].set(ylabel="first coordinate")
axes[0].legend(fontsize=7, ncol=4)
axes[1].step(np.arange(T), truth, color="k", lw=0.8, label="true modes")
axes[1].step(np.arange(T), relabelled + 0.1, color="C0", lw=0.8, label="last draw (relabelled)")
axes[1].set(xlabel="step", ylabel="mode")
axes[1].legend(fontsize=7)
fig.tight_layout()
print("latent path: mean absolute error", round(float(np.mean(np.abs(latent.mean(0) - x))), 3),
      "(observations:", round(float(np.mean(np.abs(y - x))), 3), ")")
print(f"wall time of the page: {time.perf_counter() - start_time:.0f} s")

# %%
# Reading the results
# -------------------
# The numbers printed above come from the build that produced this page; in the quick CI build
# (2 chains, 4 sweeps, no split-merge, no ARD) they mean little.  The full build (4 chains x 150
# sweeps per model, 225 s of wall time on 2 shared CPU cores, most of it compilation of the six
# samplers; 2026-11-29, with the start that clusters the latent path's dynamics) gave, at the last
# sweep:
#
# ===============  ===  ===========  ======  =====  =====  =====================================
# model            ARD  Hamming 10%  median  90%    modes  ARD precisions (median)
# ===============  ===  ===========  ======  =====  =====  =====================================
# HDP-SLDS         no   0.356        0.370   0.388  2
# HDP-SLDS         yes  0.008        0.018   0.036  3      0.03, 0.02, 0.4
# HDP-AR(2)-HMM    no   0.033        0.053   0.087  3
# HDP-AR(2)-HMM    yes  0.040        0.058   0.072  3      0.64, 0.74, 0.67, 1.48, 1.57
# SLDS, K = 3      no   0.145        0.368   0.409  2
# SLDS, K = 3      yes  0.020        0.035   0.064  3      0.04, 0.02, 0.4
# ===============  ===  ===========  ======  =====  =====  =====================================
#
# (0.640 would be the distance of a one-mode segmentation: the largest true mode covers 36% of
# the steps.  The build before, whose start clustered the latent path's values alone, gave the
# HDP-SLDS 0.352 without ARD and 0.070 with it, the finite SLDS 0.203 and 0.040, the AR(2)-HMM
# 0.055 and 0.048.)  What we found, against the paper's qualitative claims:
#
# * *With ARD the HDP-SLDS does as well as the SLDS given the true number of modes*: yes (median
#   0.018 against 0.035, three modes in use), and both recover the modes.  The ARD precisions of
#   the lag columns settle near 0.02-0.04 (a weak pull of ``A_k`` towards zero, so each mode's
#   dynamics follow its data) and the intercept's near 0.4-0.6; with the fixed column precision
#   ``I`` (no ARD) the prior pulls every mode's ``A_k`` to zero as hard as a unit of data, the
#   modes' dynamics look alike, and chains keep two modes (median 0.37 for the HDP-SLDS and for
#   the finite SLDS).  The ARD precisions are drawn exactly here (their conjugate Gamma
#   conditional, ``docs/slds.md``); an earlier build whose inner NUTS kernel moved them, from a
#   start whose noise variance ``R`` was near zero (the least-squares latent path left no
#   residual), saw most SLDS chains collapse to one mode.
# * *Is the no-ARD answer the posterior, or a start that traps?*  Both, measured outside this page
#   (with the start before; same data and model, ``split_merge=2``, 4 chains of 300 sweeps from each start): chains
#   started at the true modes and latent path (``init_params={"y_states": ..., "y_latent": ...}``)
#   keep three modes for all 300 sweeps (Hamming 0.055-0.067 over the second half, log joint
#   53-64 with a per-sweep s.d. of 25-30), while chains from the default start stay at two modes
#   (Hamming 0.35-0.38, log joint -0.5 to 44) or one (0.64, log joint 61).  The log joints overlap,
#   so the no-ARD posterior holds both the three-mode and the merged configurations, and no chain
#   crosses between them within 300 sweeps.  A user sees it: ``nh.labels.chain_agreement`` of the
#   four default-start chains reports R-hat 1.79 for the number of modes, 2.35 for the modes holding
#   1% of the steps, 13.1 for the co-assignments and 1.12 for the log joint, and says they disagree.
#   Replica exchange (``tempering=``) covers the HDP-SLDS, but on these data its rungs do not
#   connect the two configurations (:doc:`../tempering`, "Measurements").  With ARD the
#   prior no longer pulls every ``A_k`` to the same point, and the default start finds the three
#   modes in most chains.
# * *The HDP-AR-HMM of the noisy observations does worse than the HDP-SLDS*: **not reproduced**
#   on our data.  The HDP-AR(2)-HMM finds the three modes in every chain within 50 sweeps (median
#   0.053, 0.058 with ARD): the drifts and rotation speeds of our modes stay visible through
#   observation noise of s.d. 0.25, and an AR(2) model of the observations absorbs that noise well
#   enough.  The paper's data, whose settings we could not recover, evidently separate the two
#   models more.  What the SLDS gives that the AR-HMM does not is the latent path: its posterior
#   mean is closer to the true path than the observations are (mean absolute error 0.132 against
#   0.203).
# * *ARD*: here it decides whether the SLDS finds the modes (above); on the HDP-AR(2)-HMM it
#   changes little.
#
# All the settings are ours (top of the page), and the paper ran far more chains and iterations.
