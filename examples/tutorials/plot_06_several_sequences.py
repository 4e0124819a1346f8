"""
Several sequences and missing data
==================================

``nh.sample("y", hmm, obs=y, lengths=lengths)`` fits ``N`` sequences *jointly*: ``y`` is
``(N, T, ...)`` padded to a common ``T`` and ``lengths`` ``(N,)`` gives each sequence's length.
The sequences share the states, the transition rows and the emission parameters; each starts
from the start row.  Padded steps contribute nothing.  A ``NaN`` anywhere in an observation
marks it missing: the likelihood skips it (nothing is imputed), the chain of states still runs
through it, so the state of a missing step is inferred from its neighbours.

Every kernel accepts this layout; the samples' ``y_states`` is then ``(N, T)`` per draw (padded
steps hold arbitrary values: read them with ``lengths``).
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
# Data: three sequences of different lengths from one 3-state HMM (shared means), padded with
# NaN to ``T = 400``; then 10% of the steps and one whole block of 40 steps go missing.

rng = np.random.default_rng(0)
means = np.array([[-4.0, 0.0], [0.0, 4.0], [4.0, -2.0]])
P = np.full((3, 3), 0.02) + 0.94 * np.eye(3)
lengths = np.array([400, 250, 320])
N, T = len(lengths), int(lengths.max())
y = np.full((N, T, 2), np.nan, np.float32)
truth = np.full((N, T), -1)
for n, L in enumerate(lengths):
    z = [rng.integers(3)]
    for _ in range(L - 1):
        z.append(rng.choice(3, p=P[z[-1]]))
    truth[n, :L] = z
    y[n, :L] = means[z] + rng.normal(size=(L, 2))
observed = y.copy()
observed[rng.random((N, T)) < 0.1] = np.nan  # 10% missing at random
observed[0, 100:140] = np.nan  # and a gap
print("observations", observed.shape, "lengths", lengths, "missing (valid steps):",
      int(np.sum(np.isnan(observed[:, :, 0]) & (truth >= 0))))

# %%
# Model and fit: only ``lengths=`` is new.


def model(y, lengths):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    emission = nh.emissions.DiagonalGaussian.weakly_informative(y)  # NaN (missing, padding) ignored
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=10)
    nh.sample("y", hmm, obs=y, lengths=lengths)


num_warmup, num_samples = (20, 10) if QUICK else (300, 300)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=2,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), jnp.asarray(observed), jnp.asarray(lengths))
states = np.asarray(mcmc.get_samples()["y_states"])  # (draws, N, T)
print("y_states per draw:", states.shape[1:])

# %%
# Results
# -------
# The Hamming distance is computed over the valid steps of all sequences together (padding
# is marked ``-1`` in ``truth`` and skipped), *including* the missing steps, whose states were
# inferred from their neighbours.

last = np.where(truth >= 0, states[-1], -1)
print("Hamming distance, last draw, all sequences:",
      round(float(nh.diagnostics.hamming_distance(last.reshape(-1), truth.reshape(-1))), 3))
missing = np.isnan(observed[:, :, 0]) & (truth >= 0)
agree = nh.diagnostics.relabel(last.reshape(-1), truth.reshape(-1))[0].reshape(N, T) == truth
print("fraction of missing steps whose state is right:", round(float(agree[missing].mean()), 3))

relabelled = nh.diagnostics.relabel(last.reshape(-1), truth.reshape(-1))[0].reshape(N, T)
fig, axes = plt.subplots(2 * N, 1, figsize=(10, 2.0 * N), gridspec_kw={"height_ratios": [5, 1] * N})
for n in range(N):
    L = lengths[n]
    nh.diagnostics.plot_segmentation(observed[n, :L], relabelled[n, :L], true_states=truth[n, :L],
                                     ax=axes[2 * n: 2 * n + 2], match_colors=False,
                                     title=f"sequence {n} (length {L}); gaps are missing steps")
    axes[2 * n].tick_params(labelbottom=False)  # the strip below shares the time axis
fig.tight_layout()
