"""
Your own emissions and hyperpriors
==================================

Nothing forces conjugacy.  ``emission=`` also accepts a callable ``k -> Distribution`` of *one*
observation given state ``k``, vectorized over ``k`` (called with ``k = arange(K)`` it returns
a distribution of batch shape ``(K,)``), whose parameters are your own sample sites
(:class:`numpyro_hdphmm.emissions.CustomEmission`).  Every kernel evaluates the ``(T, K)``
log-likelihood matrix of the callable for its state update, and its inner NUTS kernel updates
your sites given the states after each sweep (Fox et al. eq. 42 without conjugacy).

Hyperpriors are yours too.  The kernels recognize, by evaluating the model at probe values:

* ``gamma``, ``alpha``, ``kappa`` that are Gamma-distributed sample sites (or constants);
* ``alpha + kappa ~ Gamma`` with ``rho = kappa / (alpha + kappa) ~ Beta`` (Fox et al.'s
  parameterization, eqs. 50-53), however the model computes ``alpha`` and ``kappa`` from them;
* a DP-mixture concentration ``sigma ~ Gamma``;

and give them exact updates (slice sampling of their collapsed conditionals by default, Fox et
al.'s auxiliary-variable updates with ``hyperparameters="auxiliary"``).  Any other prior (here LogNormal) is
sampled by the inner NUTS kernel from the model's own densities.

This page fits heavy-tailed data (Student-t noise, whose outliers a Gaussian HMM explains with
extra states) with Student-t emissions and LogNormal hyperpriors, the model of
``examples/student_t.py``, and then shows the ``(alpha + kappa, rho)`` parameterization.
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
# Heavy-tailed data: 4 states with self-transition 0.95, means -6, -2, 2, 6, Student-t noise
# with 3 degrees of freedom and scale 0.5.

rng = np.random.default_rng(0)
T, means = 500, np.array([-6.0, -2.0, 2.0, 6.0])
P = np.full((4, 4), 0.05 / 3) + (0.95 - 0.05 / 3) * np.eye(4)
truth = np.zeros(T, int)
for t in range(1, T):
    truth[t] = rng.choice(4, p=P[truth[t - 1]])
y = (means[truth] + 0.5 * rng.standard_t(3.0, size=T)).astype(np.float32)

# %%
# Student-t emissions over your own sites
# ---------------------------------------
# ``loc`` and ``scale`` have one entry per state slot (``K = max_states``), ``nu`` is shared.

K = 10


def student_t_model(y):
    gamma = numpyro.sample("gamma", dist.LogNormal(0.0, 1.0))  # no exact update: inner NUTS
    alpha = numpyro.sample("alpha", dist.LogNormal(1.0, 1.0))
    kappa = numpyro.sample("kappa", dist.LogNormal(3.0, 1.0))
    nu = numpyro.sample("nu", dist.LogNormal(1.5, 0.5))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0).expand([K]))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([K]))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission=lambda k: dist.StudentT(nu, loc[k], scale[k]), max_states=K)
    nh.sample("y", hmm, obs=y)


num_warmup, num_samples = (10, 10) if QUICK else (400, 400)
mcmc = MCMC(nh.infer.WeakLimitGibbs(student_t_model), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=2, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(0), y)
samples = mcmc.get_samples()
states = np.asarray(samples["y_states"])
print("posterior of the number of states:",
      dict(zip(*[a.tolist() for a in np.unique(np.asarray(samples["y_num_states"]), return_counts=True)])))
print("Hamming distance to the truth (last draw):", round(float(nh.diagnostics.hamming_distance(states[-1], truth)), 3))

# %%
# ``nu`` and the LogNormal hyperparameters were moved by the inner NUTS kernel; its acceptance
# probability is one of the kernel's per-sweep statistics (``accept_prob``).

idata = az.from_numpyro(mcmc, log_likelihood=False)
print(az.summary(idata, var_names=["gamma", "alpha", "kappa", "nu"], kind="stats"))
print("mean inner NUTS acceptance:", float(np.mean(mcmc.get_extra_fields()["accept_prob"])))
az.plot_trace(idata, var_names=["kappa", "nu", "y_num_states"])
plt.tight_layout()

# %%
# The states keep their slots with custom emissions, so ``loc[k]`` is the location of state
# ``k`` of the same draw:

last = {k: np.asarray(v[-1]) for k, v in samples.items()}
used = np.unique(last["y_states"])
print("used states:", used, "locations:", np.round(last["loc"][used], 2))
nh.diagnostics.plot_segmentation(y, last["y_states"], true_states=truth, title="Student-t emissions, last draw")

# %%
# The ``(alpha + kappa, rho)`` parameterization
# ---------------------------------------------
# Fox et al. put a Gamma prior on ``alpha + kappa`` and a Beta prior on the self-transition
# proportion ``rho = kappa / (alpha + kappa)``; the kernels recognize this however the model
# computes ``alpha`` and ``kappa``, and update both exactly.  Here with conjugate Gaussian
# emissions and a prior that expects ``rho`` near 0.9.


def rho_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
    total = numpyro.sample("alpha_plus_kappa", dist.Gamma(10.0, 0.1))
    rho = numpyro.sample("rho", dist.Beta(9.0, 1.0))
    hmm = nh.StickyHDPHMM(gamma, alpha=(1.0 - rho) * total, kappa=rho * total,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y[:, None]), max_states=K)
    nh.sample("y", hmm, obs=y[:, None])


mcmc = MCMC(nh.infer.WeakLimitGibbs(rho_model), num_warmup=num_warmup, num_samples=num_samples,
            num_chains=2, chain_method="vectorized", progress_bar=False)
mcmc.run(jax.random.key(1), y)
print(az.summary(az.from_numpyro(mcmc, log_likelihood=False), var_names=["alpha_plus_kappa", "rho", "y_num_states"],
                 kind="stats"))

# %%
# With Gaussian emissions the outliers of the Student-t noise are typically explained by extra,
# short-lived states (compare ``y_num_states`` with the Student-t fit above).
