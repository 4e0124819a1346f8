"""
Beam sampler
============

:class:`numpyro_hdphmm.infer.BeamSampler` is Van Gael, Saatci, Teh & Ghahramani's beam sampler
(2008) for the infinite HDP-HMM, with Fox et al.'s sticky prior.  Like the direct-assignment
sampler it samples the model as written (``beta ~ GEM(gamma)``; ``max_states`` is a capacity),
but like the weak-limit sampler it draws the whole state sequence at once: each sweep draws a
slice variable ``u_t ~ U(0, pi_{z_{t-1} z_t})`` per step, which leaves only the finitely many
transitions with ``pi_jk > u_t`` admissible; it breaks the stick for new states until every
row's remaining mass lies below the slices, runs forward filtering / backward sampling over the
*instantiated* states (``O(T k^2)`` in the ``k`` states in use, not in the capacity), drops
unused states and updates parameters, tables, hyperparameters, ``beta`` and rows.

Strengths: exact infinite model and blocked moves of the whole sequence; its cost follows the
number of instantiated states.  Weakness: a new state gets its parameters from the prior and
must be admitted by the slices of a whole segment, so *discovering* states from a poor start is
slow (see :doc:`/benchmarks`, "State discovery").  A reasonable start helps: this page starts
the chains from a crude segmentation given through ``init_params``.
"""

import os

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

# %%
# Data: the first synthetic set of the PGAS paper (Tripuraneni et al. 2015): 4 states with
# self-transition 0.75 and unit-variance Gaussian emissions, a non-sticky problem.

data = nh.datasets.pgas_set_a(num_steps=1000 if QUICK else 4000, seed=0)
y, truth = data.observations, data.states
print(y.shape, "true states:", nh.diagnostics.num_states(truth))

# %%
# The model: the (non-sticky) HDP-HMM with Gamma hyperpriors on ``gamma`` and ``alpha``
# (exact updates), Gaussian emissions.


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
    alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
    hmm = nh.HDPHMM(gamma=gamma, alpha=alpha, emission=nh.emissions.GaussianNIW.weakly_informative(y),
                    max_states=30)
    nh.sample("y", hmm, obs=y)


# %%
# Starting values
# ---------------
# ``init_params`` may give the initial ``y_states`` (one row per chain with vectorized
# chains); the kernel then sets ``beta``, the rows and the emission parameters from their
# conditionals.  Here: 8 quantile bins of the observations, a deliberately over-segmented start
# that the sampler merges.

num_chains = 4
bins = np.quantile(y[:, 0], np.linspace(0, 1, 9)[1:-1])
start = np.digitize(y[:, 0], bins).astype(np.int32)
init = {"y_states": jnp.asarray(np.broadcast_to(start, (num_chains, len(start))).copy())}

num_warmup, num_samples = (10, 20) if QUICK else (300, 700)
mcmc = MCMC(nh.infer.BeamSampler(model), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=num_chains, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y, init_params=init, extra_fields=("num_states", "overflow"))

# %%
# Results
# -------

stats = mcmc.get_extra_fields(group_by_chain=True)
samples = mcmc.get_samples(group_by_chain=True)
states = np.asarray(samples["y_states"])
hamming = nh.diagnostics.hamming_distance(states, truth)  # (chains, draws)
print("sweeps with overflow:", int(np.sum(stats["overflow"])))
print("Hamming distance, last draw per chain:", np.round(hamming[:, -1], 3))

fig, axes = plt.subplots(1, 2, figsize=(10, 3))
axes[0].plot(np.asarray(stats["num_states"]).T, lw=0.8)
axes[0].axhline(4, color="k", ls="--", lw=1)
axes[0].set(xlabel="sweep (after warm-up)", ylabel="states in use")
axes[1].plot(hamming.T, lw=0.8)
axes[1].set(xlabel="sweep (after warm-up)", ylabel="Hamming distance")
fig.tight_layout()

# %%
flat = states.reshape(-1, states.shape[-1])
point = nh.point_segmentation(flat)  # the posterior point estimate, over all chains
agreement = nh.labels.step_agreement(flat, point.labels)
nh.diagnostics.plot_segmentation(y[:600], point.labels[:600], true_states=truth[:600], agreement=agreement[:600],
                                 title="BeamSampler, posterior point segmentation (first 600 steps)")
