"""
Explicit durations: the HDP-HSMM
================================

In an HMM a state lasts a *geometric* number of steps: whatever the self-transition probability,
the most likely duration of every visit is one step.  Regimes in real data (behaviour
syllables, speakers, sleep stages, machine cycles) last a typical time with some spread, which a
sticky HDP-HMM can only imitate with a large self-transition bias ``kappa``: with overlapping
emissions it then splits a long regime into several visits or merges short ones.

The explicit-duration HDP-HSMM (Johnson & Willsky, JMLR 14, 2013) draws each *segment*: a state
from its predecessor's row with the self-transition removed, a duration from that state's
duration law, and that many observations from the state's emission.  :class:`numpyro_hdphmm.HDPHSMM`
is declared with :func:`numpyro_hdphmm.sample` like the HMMs; its duration laws come from
:mod:`numpyro_hdphmm.durations` (:doc:`/durations`), and :class:`~numpyro_hdphmm.infer.WeakLimitGibbs`
samples it with Johnson & Willsky's weak-limit blocked Gibbs sampler (HSMM messages over states
and durations, ``O(T K (D + K))`` per sweep).

This page reproduces the spirit of Johnson & Willsky's synthetic comparison (their Sec. 5.1): data
from an HSMM with Poisson durations and overlapping Gaussian emissions, fitted by the HDP-HSMM and
by the sticky HDP-HMM, several chains each, the segmentation error against sweeps and against
seconds; then it shows how to read the duration posterior and how to choose ``max_duration``.
"""

import os
import time

import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

# %%
# Data with long, regular segments
# --------------------------------
# Four states whose 1-D Gaussian emissions overlap (means one noise standard deviation apart), each
# segment lasting ``1 + Poisson(25)`` steps: the durations carry much of the information.

rng = np.random.default_rng(0)
num_steps = 600
means = np.array([-1.5, -0.5, 0.5, 1.5])
truth, t, previous = np.zeros(num_steps, int), 0, -1
while t < num_steps:
    state = rng.choice([k for k in range(4) if k != previous])
    d = 1 + rng.poisson(25)
    truth[t:t + d] = state
    t, previous = t + d, state
y = (means[truth] + 0.7 * rng.normal(size=num_steps))[:, None]

# %%
# Two models of the same data
# ---------------------------
# The HDP-HSMM with shifted Poisson durations (``d - 1 ~ Poisson(rate)``, ``rate ~ Gamma(2, 0.1)``:
# a prior mean duration of 21 steps, broad), truncated at ``max_duration = 80`` steps; and the
# sticky HDP-HMM with a Gamma prior on ``kappa``.  Both put Gamma priors on the concentrations.


def hsmm_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.5))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 0.5))
    hsmm = nh.HDPHSMM(gamma, alpha, duration=nh.durations.Poisson(2.0, 0.1),
                      emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=10, max_duration=80)
    nh.sample("y", hsmm, obs=y)


def hmm_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.5))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 0.5))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission=nh.emissions.GaussianNIW.weakly_informative(y),
                          max_states=10)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples, num_chains = (5, 15, 2) if QUICK else (100, 300, 4)
fits = {}
for label, model in (("HDP-HSMM", hsmm_model), ("sticky HDP-HMM", hmm_model)):
    mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(1), y)
    fits[label] = mcmc.get_samples(group_by_chain=True)

# %%
# Segmentation error and number of states per sweep
# -------------------------------------------------
# The normalized Hamming distance to the true states after the best relabelling
# (:func:`numpyro_hdphmm.diagnostics.hamming_distance`), per chain and sweep.

fig, axes = plt.subplots(1, 2, figsize=(10, 3))
for color, (label, samples) in zip(("C0", "C3"), fits.items()):
    states = np.asarray(samples["y_states"])
    hamming = nh.diagnostics.hamming_distance(states, truth)
    used = np.asarray(samples["y_num_states"])
    for c in range(num_chains):
        axes[0].plot(hamming[c], color=color, lw=0.8, label=label if c == 0 else None)
        axes[1].plot(used[c], color=color, lw=0.8, label=label if c == 0 else None)
    print(f"{label}: final Hamming distance per chain {np.round(hamming[:, -1], 3)}, "
          f"states in use {used[:, -1]}")
axes[0].set(xlabel="sweep (after warm-up)", ylabel="normalized Hamming distance")
axes[1].axhline(4, color="k", ls="--", lw=1, label="truth")
axes[1].set(xlabel="sweep (after warm-up)", ylabel="states in use")
axes[0].legend(fontsize=7)
axes[1].legend(fontsize=7)
fig.tight_layout()

# %%
# Against seconds
# ---------------
# Johnson & Willsky plot the segmentation error against seconds too: a sweep of the HSMM costs more
# than the HMM's (``O(T K (D + K))`` against ``O(T K^2)``).  One chain's sweep, timed with the
# kernel's own ``init`` and ``sample`` (the :class:`numpyro.infer.mcmc.MCMCKernel` interface) once
# compiled, turns the sweeps above into seconds.


def seconds_per_sweep(model, sweeps=10 if QUICK else 30):
    kernel = nh.infer.WeakLimitGibbs(model)
    state = kernel.init(jax.random.key(3), 0, None, (y,), {})
    step = jax.jit(lambda s: kernel.sample(s, (y,), {}))
    state = jax.block_until_ready(step(state))  # compiles
    start = time.perf_counter()
    for _ in range(sweeps):
        state = step(state)
    jax.block_until_ready(state)
    return (time.perf_counter() - start) / sweeps


fig, ax = plt.subplots(figsize=(5, 3))
for color, (label, model) in zip(("C0", "C3"), (("HDP-HSMM", hsmm_model), ("sticky HDP-HMM", hmm_model))):
    per_sweep = seconds_per_sweep(model)
    hamming = nh.diagnostics.hamming_distance(np.asarray(fits[label]["y_states"]), truth)
    seconds = (num_warmup + 1 + np.arange(hamming.shape[1])) * per_sweep
    for c in range(num_chains):
        ax.plot(seconds, hamming[c], color=color, lw=0.8, label=label if c == 0 else None)
    print(f"{label}: {1e3 * per_sweep:.1f} ms per sweep (one chain, compiled)")
ax.set(xlabel="seconds of sampling (one chain, after compilation)", ylabel="normalized Hamming distance")
ax.legend(fontsize=7)
fig.tight_layout()

# %%
# The duration posterior
# ----------------------
# Each state's ``rate`` site is the Poisson rate of its durations (mean duration ``1 + rate``).
# Here the posterior of the states that the last draw uses: each should sit near the true mean 26.

samples = fits["HDP-HSMM"]
last_states = np.asarray(samples["y_states"])[0, -1]
rates = np.asarray(samples["y_duration_rate"])[0]
for k in np.unique(last_states):
    lo, hi = np.percentile(1 + rates[:, k], [5, 95])
    print(f"state {k}: mean duration {1 + rates[:, k].mean():.1f} (90% interval {lo:.1f} to {hi:.1f})")

# %%
# Forecasting: the segment in progress goes on
# --------------------------------------------
# :func:`numpyro_hdphmm.forecast` continues each draw: the last segment has lasted ``e`` steps, so it
# goes on for ``d - e`` more with ``d`` drawn from its state's duration law given ``d >= e``; then
# new segments follow.  The HMM's forecast, by contrast, forgets how long the regime has lasted.

flat = {k: np.asarray(v).reshape((-1,) + v.shape[2:]) for k, v in fits["HDP-HSMM"].items()}
horizon = 60
out = nh.forecast(jax.random.key(2), flat, hsmm_model, horizon, model_args=(y,))
z = flat["y_states"]
change = np.concatenate([np.ones((len(z), 1), bool), z[:, 1:] != z[:, :-1]], 1)
elapsed = num_steps - np.max(np.where(change, np.arange(num_steps), 0), axis=1)  # per draw
stays = np.asarray(out["states"]) == z[:, -1:]
left = np.where(~stays.all(1), (~stays).argmax(1), horizon)
print(f"the last segment has lasted {np.median(elapsed):.0f} steps (median over draws; truth "
      f"{num_steps - np.max(np.flatnonzero(np.diff(truth)) + 1)}); forecast steps left in it: median "
      f"{np.median(left):.0f} (90% interval {np.percentile(left, 5):.0f} to {np.percentile(left, 95):.0f})")
fig, ax = plt.subplots(figsize=(10, 2.5))
ax.plot(np.arange(num_steps - 100, num_steps), y[-100:, 0], color="k", lw=0.8, label="data")
q = np.percentile(np.asarray(out["y"])[..., 0], [5, 50, 95], axis=0)
steps = np.arange(num_steps, num_steps + horizon)
ax.fill_between(steps, q[0], q[2], color="C0", alpha=0.3, label="forecast 90%")
ax.plot(steps, q[1], color="C0", lw=1, label="forecast median")
ax.set(xlabel="step", ylabel="y")
ax.legend(fontsize=7)
fig.tight_layout()

# %%
# Choosing the duration family and ``max_duration``
# -------------------------------------------------
# * **Poisson** (``nh.durations.Poisson``): a duration with a mode and a spread that grows like the
#   square root of the mean, conjugate (exact updates).  **Negative binomial**
#   (``nh.durations.NegativeBinomial``): an over-dispersed duration (the spread a free parameter),
#   with ``r`` on a finite grid (exact updates) or with a Gamma prior (``NegativeBinomial.gamma_r``:
#   the inner NUTS kernel updates ``r`` and ``p``).  **Geometric** (``nh.durations.Geometric``):
#   memoryless durations, the HMM again (a cross-check).  Any NumPyro discrete distribution over your
#   own sites with ``nh.durations.Custom`` (the inner kernel updates its sites).
# * ``max_duration`` is part of the model: every duration law is truncated to ``1..max_duration``
#   and renormalized, and a sweep costs ``O(T K max_duration)``.  Choose it well above the longest
#   segment you expect; the sweep's ``at_max_duration`` field (``extra_fields=("at_max_duration",)``)
#   flags sweeps with a segment that long, the sign that the truncation binds.
# * ``max_duration=None`` keeps the untruncated laws.  With negative-binomial durations (``r`` on its
#   finite grid) or geometric ones the sampler then runs through a chain of phases per state,
#   ``O(T K (max(r) + K))`` per sweep whatever the segment lengths: the choice for long series and
#   long segments.  Other families without truncation run the explicit-duration messages over every
#   duration up to the sequence length (``O(T^2 K)``), fine for a few thousand steps.
# * The last segment of each sequence is right-censored (it may go on after the data end); pass
#   ``left_censoring=True`` when the recording also starts in the middle of a segment.
#
# When does the HSMM beat the sticky HMM?  When durations are regular (a mode well above one step)
# and the emissions overlap, as here: the duration law tells the sampler where segments end.  With
# well separated emissions both models find the same segmentation, and the HMM's sweep is cheaper
# (``O(T K^2)``).
