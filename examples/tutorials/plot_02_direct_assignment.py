"""
Direct-assignment Gibbs
=======================

:class:`numpyro_hdphmm.infer.DirectAssignmentGibbs` samples the *infinite* (sticky) HDP-HMM as
written, ``beta ~ GEM(gamma)``: Teh et al.'s direct-assignment sampler with Fox et al.'s sticky
predictive (Fox et al. 2007, Algorithm 1; Algorithm 3 for DP-mixture emissions).  The transition
rows and the emission parameters are integrated out, and each ``z_t`` is drawn in turn from

``p(z_t = k | z_-t, y) ∝ (alpha beta_k + n_{z_{t-1} k} + kappa [k = z_{t-1}]) ×
(alpha beta_{z_{t+1}} + n_{k z_{t+1}} + kappa [z_{t+1} = k] + [z_{t-1} = k = z_{t+1}]) /
(alpha + n_k. + kappa + [z_{t-1} = k]) × f(y_t | y's of state k)``

(Fox et al. eq. 37), with a new state offered with weight ``alpha beta_rem``.  ``max_states``
is only a *capacity*: the sampler uses as many states as the data need and reports an
``overflow`` when a draw needed more (then increase ``max_states``).

Strength: exact for the infinite model with no truncation, and cheap per step (``O(K)``).
Weakness (Fox et al. Sec. VII; see the :doc:`/papers/plot_fox_experiment_a` page): it moves one
step at a time, so with a sticky prior a true state split into two similar states stays split;
its sweep is a sequential loop over time.  Use it for moderate ``T``, for checking the
weak-limit results against the exact model, and for the collapsed (Student-t) predictive.
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
# Data and model
# --------------
# Fox et al.'s experiment A (3 states, Gaussian emissions), and the same model as in
# :doc:`plot_00_getting_started`: only the kernel changes.

data = nh.datasets.fox_experiment_a(num_steps=500 if QUICK else 1000, seed=1)
y, truth = data.observations, data.states


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=20)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (10, 20) if QUICK else (200, 800)
mcmc = MCMC(nh.infer.DirectAssignmentGibbs(model), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=4, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y, extra_fields=("num_states", "overflow"))

# %%
# States in use and the capacity
# ------------------------------
# ``overflow`` is True in a sweep that wanted a new state while every slot was occupied.  Each
# chain starts from the data-driven start (``init_strategy="data"``, the default: clustered
# windows of the observations, :mod:`numpyro_hdphmm.infer.plumbing.initialization`; ``"prior"`` starts
# from a draw of the model's prior instead), so it begins near the right number of states.  If
# ``overflow`` stays on after warm-up, increase ``max_states`` (:doc:`/practical`).

stats = mcmc.get_extra_fields(group_by_chain=True)
print("sweeps with overflow:", int(np.sum(stats["overflow"])))
fig, ax = plt.subplots(figsize=(10, 2.5))
ax.plot(np.asarray(stats["num_states"]).T, lw=0.8)
ax.set(xlabel="sweep (after warm-up)", ylabel="states in use", title="DirectAssignmentGibbs, 4 chains")
fig.tight_layout()

# %%
# Recorded labels.  The infinite-model kernels record the states relabelled by first
# appearance, and ``beta``, the rows and the emission parameters in that order, so
# ``y_mu[:, 0]`` is the mean of the state that the sequence visits first.

samples = mcmc.get_samples(group_by_chain=True)
states = np.asarray(samples["y_states"])
print("first state of every recorded draw is 0:", bool(np.all(states[..., 0] == 0)))
idata = az.from_numpyro(mcmc, log_likelihood=False)
print(az.summary(idata, var_names=["kappa", "y_num_states"], kind="stats"))

# %%
# Segmentation: the last draw of the chain with the largest Hamming distance shows how a
# one-step-at-a-time sampler can keep a true state split into two.

hamming = nh.diagnostics.hamming_distance(states[:, -1], truth)
print("Hamming distance, last draw per chain:", np.round(hamming, 3))
worst = int(np.argmax(hamming))
nh.diagnostics.plot_segmentation(y, states[worst, -1], true_states=truth,
                                 title=f"DirectAssignmentGibbs, chain {worst}, last draw")
