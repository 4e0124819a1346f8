"""
Forecasting and predictive checks
=================================

Because :func:`numpyro_hdphmm.sample` declares the states and parameters as ordinary sites,
NumPyro's ``Predictive`` works unchanged:

* **prior predictive**: ``Predictive(model, num_samples=S)(key, y=None)`` draws whole data
  sets from the model (the model must then know ``num_steps``);
* **posterior predictive replicates**: ``Predictive(model, posterior_samples)(key, y=None)``
  redraws every observation given the sampled states and parameters;
* **forecasts**: :func:`numpyro_hdphmm.forecast` continues each sequence ``h`` steps past its
  end from each posterior draw (the last state, then the rows, then the emissions);
* **held-out likelihood**: :func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood` sums
  the states out of a held-out sequence by the forward algorithm for each draw.

The data: the first 900 steps of Fox et al.'s experiment A are observed; the last 100 are held
out.
"""

import os

import arviz as az
import jax
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, Predictive

import numpyro_hdphmm as nh

QUICK = os.environ.get("NH_DOCS_QUICK") == "1"  # few sweeps for the CI build of the docs

data = nh.datasets.fox_experiment_a(num_steps=1000, seed=2)
y_all, truth = data.observations, data.states
y, y_test = y_all[:900], y_all[900:]

# %%
# The model takes ``num_steps`` so that it can also run without data.  The emission prior is
# fixed (not computed from ``y``), so prior and posterior use the same prior.

emission = nh.emissions.GaussianNIW(loc=np.zeros(1), mean_precision=0.001, df=3.0, scale=20.0 * np.eye(1))


def model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=15, num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


# %%
# Prior predictive check
# ----------------------
# Do data sets drawn from the prior look like something we could observe?  Four draws.  The
# vague prior on ``gamma`` sometimes asks for more states than the capacity ``max_states``: the
# ``RuntimeWarning`` below says how many steps went beyond it (they are redrawn among the
# represented states, never silently dropped).

prior = Predictive(model, num_samples=4)(jax.random.key(1), num_steps=900)
fig, axes = plt.subplots(4, 1, figsize=(10, 5), sharex=True)
for i, ax in enumerate(axes):
    ax.plot(np.asarray(prior["y"][i, :, 0]), lw=0.6, color="k")
    ax.set_ylabel(f"{int(nh.diagnostics.num_states(np.asarray(prior['y_states'][i])))} states", fontsize=8)
axes[0].set_title("prior predictive draws")
fig.tight_layout()

# %%
# Fit, then posterior predictive replicates
# -----------------------------------------

num_warmup, num_samples = (20, 20) if QUICK else (300, 500)
mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=num_warmup, num_samples=num_samples, num_chains=2,
            chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y)
samples = mcmc.get_samples()
replicates = Predictive(model, samples)(jax.random.key(2), num_steps=900)["y"]  # (S, T, 1)
print("replicates:", replicates.shape)

# %%
# A check with a statistic the model should reproduce: the number of times the observation
# crosses zero (driven by the switching rate).  ArviZ plots the replicates' density against
# the data's.


def crossings(x):
    return np.sum(np.diff(np.sign(np.asarray(x)[..., 0]), axis=-1) != 0, axis=-1)


fig, axes = plt.subplots(1, 2, figsize=(10, 3))
axes[0].hist(crossings(replicates), bins=20, color="0.7")
axes[0].axvline(crossings(y), color="k", lw=2, label="observed")
axes[0].set(xlabel="zero crossings", title="posterior predictive check")
axes[0].legend()
ppc = np.asarray(replicates).reshape((2, -1) + replicates.shape[1:])  # (chains, draws, T, 1)
idata = az.from_numpyro(mcmc, posterior_predictive={"y": ppc}, log_likelihood=False)
az.plot_ppc(idata, var_names=["y"], num_pp_samples=min(50, ppc.shape[0] * ppc.shape[1]), ax=axes[1])
fig.tight_layout()

# %%
# Forecast
# --------
# ``nh.forecast`` draws 100 steps past the end of the sequence from each draw; the bands are
# the pointwise 10-90% and 50% intervals, and the held-out data are shown in red.

fc = nh.forecast(jax.random.key(3), samples, emission, steps=100)
paths = np.asarray(fc["y"][..., 0])  # (S, 100)
t_future = np.arange(900, 1000)
fig, ax = plt.subplots(figsize=(10, 3))
ax.plot(np.arange(700, 900), y[700:, 0], color="k", lw=0.8, label="observed")
ax.fill_between(t_future, *np.percentile(paths, [10, 90], axis=0), color="C0", alpha=0.25, label="10-90%")
ax.fill_between(t_future, *np.percentile(paths, [25, 75], axis=0), color="C0", alpha=0.4, label="25-75%")
ax.plot(t_future, y_test[:, 0], color="C3", lw=0.8, label="held out")
ax.set(xlabel="time step", ylabel="y")
ax.legend(fontsize=8, ncol=4)
fig.tight_layout()

# %%
# Held-out predictive log-likelihood
# ----------------------------------
# ``log p(y_test | y)`` estimated by the log-mean over draws of ``log p(y_test | pi, theta)``
# (the held-out sequence starts from the start row).

ll = nh.diagnostics.predictive_log_likelihood(samples, emission, y_test)
print(f"held-out log-likelihood {float(ll.log_likelihood):.1f} over {ll.num_observed} steps "
      f"({float(ll.log_likelihood) / ll.num_observed:.3f} per step)")
