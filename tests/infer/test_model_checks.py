"""Kernel set-up on unusual but valid models, and models the kernels must refuse (issue 21):
several sequences without ``lengths`` with an inner NUTS site, hyperpriors whose support lets
the model become invalid, very large capacities, and the weak limit using every slot."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import BeamSampler, WeakLimitGibbs

from kernel_registry import kernel_classes

KERNELS = kernel_classes()  # every kernel class of the conformance registry (tests/kernel_registry.py)


def batched_model(y):
    """Two sequences without ``lengths`` (the states site is expanded by the sequence plate), a
    LogNormal ``alpha`` (inner NUTS) and custom emissions over the user's own sites."""
    alpha = numpyro.sample("alpha", dist.LogNormal(0.0, 1.0))
    loc = numpyro.sample("loc", dist.Normal(0.0, 3.0).expand([6]))
    hmm = nh.StickyHDPHMM(1.0, alpha, 5.0, lambda k: dist.Normal(loc[k], 1.0), max_states=6)
    nh.sample("y", hmm, obs=y)


@pytest.mark.parametrize("kernel", [k if k is WeakLimitGibbs else pytest.param(k, marks=[pytest.mark.slow, pytest.mark.robustness]) for k in KERNELS], ids=lambda k: k.__name__)
def test_several_sequences_without_lengths_with_inner_sites(kernel):
    """Issue 21 item 2: ``obs (2, T)`` without ``lengths`` and an inner NUTS site crashed every
    kernel (``'ExpandedDistribution' object has no attribute 'lengths'``)."""
    y = np.random.default_rng(0).normal(np.repeat([[-3.0], [3.0]], 40, 1), 1.0)
    mcmc = MCMC(kernel(batched_model), num_warmup=2, num_samples=3, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    s = mcmc.get_samples()
    assert s["y_states"].shape == (3, 2, 40)
    assert np.all(np.isfinite(np.asarray(s["alpha"]))) and np.all(np.isfinite(np.asarray(mcmc.get_extra_fields()["lp"])))


def real_line_gamma(y):
    gamma = numpyro.sample("gamma", dist.Normal(3.0, 1.0))
    hmm = nh.StickyHDPHMM(gamma, 2.0, 5.0, nh.emissions.GaussianNIW.weakly_informative(y), max_states=6)
    nh.sample("y", hmm, obs=y)


def real_line_kappa_in_rho(y):
    rho = numpyro.sample("rho", dist.Normal(0.5, 0.2))  # kappa = 10 rho can be negative
    hmm = nh.StickyHDPHMM(1.0, 2.0, 10.0 * rho, nh.emissions.Poisson(1.0, 1.0), max_states=6)
    nh.sample("y", hmm, obs=y)


def exp_of_real_gamma(y):
    log_gamma = numpyro.sample("log_gamma", dist.Normal(0.0, 1.0))
    hmm = nh.StickyHDPHMM(jnp.exp(log_gamma), 2.0, 5.0, nh.emissions.GaussianNIW.weakly_informative(y), max_states=6)
    nh.sample("y", hmm, obs=y)


# the refusal is discovery's, shared by every kernel (its message names the kernel): the default set
# runs it on WeakLimitGibbs, the slow set on every kernel (each builds and traces its own prior draw)
@pytest.mark.parametrize("kernel", [k if k is WeakLimitGibbs else pytest.param(k, marks=pytest.mark.slow) for k in KERNELS],
                         ids=lambda k: k.__name__)
@pytest.mark.parametrize("model, site", [(real_line_gamma, "gamma"), (real_line_kappa_in_rho, "rho")])
def test_real_line_hyperprior_is_rejected(kernel, model, site):
    """Issue 21 item 3: ``gamma ~ Normal(3, 1)`` let the inner NUTS move gamma to -45 (NaN rows
    and ``lp`` in 59 of 60 sweeps); now refused before sampling, naming the site."""
    y = np.abs(np.random.default_rng(0).normal(size=(30, 1))) if model is real_line_gamma else np.arange(30) % 3
    mcmc = MCMC(kernel(model), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match=f"site '{site}'.*(Gamma, LogNormal or HalfNormal)"):
        mcmc.run(jax.random.key(0), y)


def test_transformed_real_line_hyperprior_is_accepted():
    y = np.random.default_rng(0).normal(size=(30, 1))
    kernel = BeamSampler(exp_of_real_gamma)
    kernel.init(jax.random.key(0), 0, None, (y,), {})  # no error: gamma = exp(log_gamma) > 0


def test_large_capacity_warns():
    """Issue 21 item 4: compile time and memory grow with max_states^2 (6-15 minutes and 6-8 GB
    at 5000); above 1024 the kernels warn at initialization with guidance."""

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 2.0, 5.0, nh.emissions.Poisson(1.0, 1.0), max_states=1100), obs=y)

    with pytest.warns(RuntimeWarning, match=r"max_states=1100 is above 1024.*2-5 times the number of states"):
        WeakLimitGibbs(model).update_plan(np.arange(5))  # discovery warns, before anything is compiled


def test_weak_limit_with_every_slot_occupied_warns():
    """Issue 21 item 4: the weak limit with all L slots occupied gave no warning, although the
    docs say overflow is never silent.  L = 2 on three well-separated regimes."""
    y = np.repeat([0.0, 30.0, 60.0], 20)

    def model(y):
        emission = nh.emissions.Poisson(1.0, 0.05)
        nh.sample("y", nh.StickyHDPHMM(1.0, 2.0, 5.0, emission, max_states=2), obs=y)

    mcmc = MCMC(WeakLimitGibbs(model), num_warmup=0, num_samples=5, progress_bar=False)
    with pytest.warns(RuntimeWarning, match="max_states=2 state slots were occupied.*weak-limit approximation had no free state"):
        mcmc.run(jax.random.key(0), y, extra_fields=("overflow",))
    assert np.all(np.asarray(mcmc.get_extra_fields()["overflow"]))
