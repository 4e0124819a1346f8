"""
Label switching and summaries
=============================

The posterior of an HDP-HMM is invariant to permutations of the state labels: "state 3" of one
chain is not "state 3" of another, and a chain may swap labels between draws.  Quantities that
depend on the labels (``y_mu[:, 0]``, ``y_beta[:, 2]``) therefore do not summarize well across
chains, while label-invariant ones always do.  :mod:`numpyro_hdphmm.results.diagnostics` provides:

* :func:`~numpyro_hdphmm.results.diagnostics.num_states`: distinct states per draw;
* :func:`~numpyro_hdphmm.results.diagnostics.coassignment_matrix`: ``P(z_s = z_t)`` over draws, ``(T, T)``;
* :func:`~numpyro_hdphmm.results.diagnostics.hamming_distance` and
  :func:`~numpyro_hdphmm.results.diagnostics.relabel`: optimal (Hungarian) matching of one labelling to
  another;
* :func:`~numpyro_hdphmm.results.diagnostics.mutual_information`: (normalized) mutual information
  between labellings.
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

data = nh.datasets.fox_experiment_a(num_steps=600, seed=4)
y, truth = data.observations, data.states


def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.GaussianNIW.weakly_informative(y), max_states=15)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (20, 20) if QUICK else (300, 500)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=4,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y)
samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}

# %%
# The labels differ between chains
# --------------------------------
# The mean of "state 0" in each chain: the weak-limit kernel keeps whatever slot a state
# landed in, so the same true state sits in different slots in different chains.

occupancy = np.stack([np.bincount(s[-1], minlength=15) for s in samples["y_states"]])
for c in range(4):
    top = np.argsort(-occupancy[c])[:3]
    print(f"chain {c}: most occupied slots {top.tolist()}, their means at the last draw "
          f"{[round(float(m), 1) for m in samples['y_mu'][c, -1, top, 0]]}")

# %%
# Label-invariant summaries
# -------------------------
# The number of states and the co-assignment matrix agree across chains whatever the labels.

nums = nh.diagnostics.num_states(samples["y_states"])  # (chains, draws)
print("posterior mean number of states per chain:", nums.mean(axis=1).round(2))

coassign = nh.diagnostics.coassignment_matrix(samples["y_states"].reshape(-1, len(y)))
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
axes[0].imshow(coassign, cmap="viridis", vmin=0, vmax=1, interpolation="nearest")
axes[0].set(title="P(z_s = z_t | y), all chains", xlabel="t", ylabel="s")
axes[1].imshow(truth[:, None] == truth[None, :], cmap="viridis", interpolation="nearest")
axes[1].set(title="truth: z_s = z_t", xlabel="t")
fig.tight_layout()

# %%
# Matching labels
# ---------------
# ``relabel(states, reference)`` maps each draw's labels to the reference's by the Hungarian
# algorithm (maximum overlap).  Matching every chain's last draw to chain 0's makes the
# labels comparable; the mutual information between chains is label-free from the start.

reference = samples["y_states"][0, -1]
for c in range(1, 4):
    matched, mapping = nh.diagnostics.relabel(samples["y_states"][c, -1], reference)
    print(f"chain {c} vs chain 0: Hamming {nh.diagnostics.hamming_distance(samples['y_states'][c, -1], reference):.3f}, "
          f"NMI {nh.diagnostics.mutual_information(samples['y_states'][c, -1], reference, normalized=True):.3f}, "
          f"slot -> chain-0 label {dict((int(k), int(v)) for k, v in enumerate(mapping) if occupancy[c, k] > 0)}")

# %%
# After matching to the truth, the emission means become comparable across chains.  Each
# chain's draws are matched to the truth one by one, and the mean of each matched state is
# read from the matched slot.

means = np.zeros((4, samples["y_mu"].shape[1], 3))
for c in range(4):
    _, mapping = nh.diagnostics.relabel(samples["y_states"][c], truth, num_states=15)  # mapping (draws, 15)
    for d in range(mapping.shape[0]):
        for k in range(3):
            slot = np.flatnonzero(mapping[d] == k)
            means[c, d, k] = samples["y_mu"][c, d, slot[0], 0] if slot.size else np.nan
print("posterior mean of the matched state means (chain x true state):")
print(np.round(np.nanmean(means, axis=1), 1), " truth:", data.info["means"])
