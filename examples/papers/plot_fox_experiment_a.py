"""
Fox et al., experiment A: sticky vs non-sticky, blocked vs direct assignment
============================================================================

Fox, Sudderth, Jordan & Willsky (2007), "Developing a tempered HDP-HMM for systems with state
persistence", Sec. VII, experiment A (Figs. 5, 7, 9, 10).

**Data.** A 3-state HMM with self-transition probability 0.97 (0.015 to each other state) and
scalar Gaussian emissions with means 50, 0, -50 and variances 50, 10, 50
(:func:`numpyro_hdphmm.datasets.fox_experiment_a`; the paper does not give ``T``: 1000 here).

**Paper's protocol.** Four samplers: (a) blocked (weak-limit, ``L = 15``) sampler of the sticky
("tempered") HDP-HMM, (b) direct-assignment sampler of the sticky model, (c) blocked sampler of
the original HDP-HMM (``kappa = 0``), (d) direct-assignment sampler of the original model; 100
iterations from 200 initializations; Fig. 9 plots the median and the 10th and 90th percentiles
of the Hamming distance to the true states over the initializations against the iteration, Fig.
10 the same for the log-likelihood.

**Paper's claims** (qualitative; the paper prints no numbers):

1. the blocked sampler of the sticky model is best in Hamming distance and in likelihood;
2. the direct-assignment sampler of the sticky model "gets stuck": its Hamming curve is flat
   (a true state split into two similar states stays split, Fig. 7);
3. both samplers of the original HDP-HMM switch fast between redundant states (Fig. 5), with
   "dramatically worse" likelihoods than the sticky model.

**Here.** The model of ``examples/sticky_experiment_a.py`` (Gamma priors on ``gamma``,
``alpha``, ``kappa`` with exact updates, ``GaussianNIW.weakly_informative`` emission prior,
``L = 15``) and the same model without ``kappa``, each sampled by
:class:`~numpyro_hdphmm.infer.WeakLimitGibbs` and
:class:`~numpyro_hdphmm.infer.DirectAssignmentGibbs` (capacity 15), 100 sweeps from many chains
started from prior draws (vectorized).  Hamming distance: normalized, after the optimal
(Hungarian) relabelling; the paper's greedy matching can only give larger distances.
Log-likelihood: ``log p(y | pi, theta)`` of each draw with the states summed out (forward
algorithm, :func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`).
"""

import os
import sys

import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

# sphinx_gallery_start_ignore
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), ".."))  # examples/
# sphinx_gallery_end_ignore
from sticky_experiment_a import model as sticky_model  # examples/sticky_experiment_a.py

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs
NUM_CHAINS, NUM_SWEEPS = (4, 10) if QUICK else (100, 100)

data = nh.datasets.fox_experiment_a(num_steps=1000, seed=0)
y, truth = data.observations, data.states


def original_model(y):
    """The same model with kappa = 0: the HDP-HMM of Teh et al. (2006)."""
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    hmm = nh.HDPHMM(gamma=gamma, alpha=alpha, emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=15)
    nh.sample("y", hmm, obs=y)


# %%
# Run the four samplers
# ---------------------
# Every draw of every chain is kept (no warm-up), so the curves start at the first sweep.

variants = {
    "(a) sticky, blocked": (sticky_model, nh.infer.WeakLimitGibbs),
    "(b) sticky, direct assignment": (sticky_model, nh.infer.DirectAssignmentGibbs),
    "(c) original, blocked": (original_model, nh.infer.WeakLimitGibbs),
    "(d) original, direct assignment": (original_model, nh.infer.DirectAssignmentGibbs),
}
emission = nh.emissions.GaussianNIW.weakly_informative(y)
results = {}
for i, (name, (model, kernel)) in enumerate(variants.items()):
    mcmc = MCMC(kernel(model), num_warmup=0, num_samples=NUM_SWEEPS, num_chains=NUM_CHAINS,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(i), y, extra_fields=("overflow",))
    samples = mcmc.get_samples(group_by_chain=True)
    states = np.asarray(samples["y_states"])  # (chains, sweeps, T)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in samples.items()}
    loglik = nh.diagnostics.predictive_log_likelihood(flat, emission, y).per_draw.reshape(NUM_CHAINS, NUM_SWEEPS)
    results[name] = dict(
        hamming=nh.diagnostics.hamming_distance(states, truth),  # (chains, sweeps)
        loglik=np.asarray(loglik),
        num_states=nh.diagnostics.num_states(states),
        overflow=int(np.sum(mcmc.get_extra_fields()["overflow"])),
        last=states[:, -1],
    )
    print(f"{name:34s} sweeps with overflow: {results[name]['overflow']}")

# %%
# Fig. 9: Hamming distance
# ------------------------
# Median (solid) and 10th / 90th percentiles (dashed) over the chains, against the sweep.


def quantile_panels(key, ylabel, **kw):
    fig, axes = plt.subplots(1, 4, figsize=(13, 3), sharex=True, sharey=True)
    for ax, (name, r) in zip(axes, results.items()):
        q10, q50, q90 = np.percentile(r[key], [10, 50, 90], axis=0)
        sweeps = np.arange(1, NUM_SWEEPS + 1)
        ax.plot(sweeps, q50, "C0", lw=1.5)
        ax.plot(sweeps, q10, "C3--", lw=1)
        ax.plot(sweeps, q90, "C3--", lw=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("sweep")
    axes[0].set_ylabel(ylabel)
    axes[0].set(**kw)
    fig.tight_layout()
    return fig


quantile_panels("hamming", "normalized Hamming distance", ylim=(0, 1))

# %%
# Fig. 10: log-likelihood of the data given each draw's parameters

quantile_panels("loglik", "log p(y | pi, theta)")

# %%
# The numbers at the last sweep
# -----------------------------

print(f"{'sampler':34s}{'Hamming 10%':>12}{'median':>8}{'90%':>8}{'states (median)':>17}{'log-lik (median)':>18}")
for name, r in results.items():
    q = np.percentile(r["hamming"][:, -1], [10, 50, 90])
    print(f"{name:34s}{q[0]:>12.3f}{q[1]:>8.3f}{q[2]:>8.3f}{np.median(r['num_states'][:, -1]):>17.0f}"
          f"{np.median(r['loglik'][:, -1]):>18.1f}")

# %%
# Figs. 5 and 7: what the failures look like.  The last draw of the chain with the median
# final Hamming distance of (b) and of (d).

for name in ["(b) sticky, direct assignment", "(d) original, direct assignment"]:
    r = results[name]
    c = int(np.argsort(r["hamming"][:, -1])[NUM_CHAINS // 2])
    nh.diagnostics.plot_segmentation(y, r["last"][c], true_states=truth,
                                     title=f"{name}: chain with the median final Hamming distance")

# %%
# Reading the results
# -------------------
# The numbers printed above come from the build that produced this page; in the quick CI build
# (4 chains, 10 sweeps) they mean little.  The full build (100 chains x 100 sweeps, every chain
# started from a prior draw) gave, at the last sweep:
#
# ==================================  ===========  ======  =====  ========  =============
# sampler                             Hamming 10%  median  90%    states    log-likelihood
# ==================================  ===========  ======  =====  ========  =============
# (a) sticky, blocked                 0.000        0.000   0.000  3         -3323.0
# (b) sticky, direct assignment       0.187        0.353   0.603  8         -3338.3
# (c) original, blocked               0.000        0.000   0.042  3         -3321.6
# (d) original, direct assignment     0.000        0.000   0.155  3         -3321.1
# ==================================  ===========  ======  =====  ========  =============
#
# * Claim 1 holds: the blocked sampler of the sticky model finds the 3 states in every chain
#   within a few sweeps.
# * Claim 2 holds: the direct-assignment sampler of the sticky model is the only one that
#   stays far from the truth; its curve flattens at a median of about 0.35 with 8 states, true
#   states split into persistent pieces it cannot merge (the segmentation above).
# * Claim 3 is *not* reproduced: on this data set both samplers of the original HDP-HMM also
#   find the 3 states in most chains, with the same likelihood as the sticky model.  The means
#   (50, 0, -50) are many standard deviations apart, and the exact hyperparameter updates let
#   ``alpha`` grow until the rows themselves favour staying; the paper gives neither ``T`` nor
#   its hyperparameter priors, so its harder setting cannot be recovered.  (With ``T = 10000``
#   the non-sticky weak-limit sampler does fail in some chains: Hamming up to 0.24 after 300
#   sweeps, see :doc:`/benchmarks`.)
#
# The direct-assignment chains start from prior draws that use more states than the capacity of
# 15 (the warnings above); ``overflow`` marks the sweeps, mostly the first ones, in which no
# new state could be opened.
