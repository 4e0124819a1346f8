"""Duration laws whose parameters the inner kernel updates: a ``Custom`` law over the user's own
site, and ``NegativeBinomial.gamma_r`` (real ``r``: no exact conditional draw), both through the
segment process's density with the rows integrated out."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

import numpyro_hdphmm as nh


def _data():
    rng = np.random.default_rng(5)
    z = np.concatenate([np.full(1 + rng.poisson(11), k % 2) for k in range(14)])[:150]
    return (np.where(z == 0, -2.0, 2.0) + 0.7 * rng.normal(size=z.size))[:, None]


def test_custom_duration_over_a_user_site():
    y = _data()

    def model(y):
        mean = numpyro.sample("mean_duration", dist.Gamma(2.0, 0.2))
        duration = lambda k: dist.Poisson(jnp.broadcast_to(mean, jnp.shape(k)))  # the duration itself, truncated
        m = nh.HDPHSMM(1.0, 2.0, duration, nh.emissions.GaussianNIW.weakly_informative(y), max_states=4,
                       max_duration=40)
        nh.sample("y", m, obs=y)

    kernel = nh.infer.WeakLimitGibbs(model)
    assert "mean_duration" in kernel.update_plan(y).sites("inner")
    # the inner kernel starts the user's site where NumPyro's default init puts it (~2 here, far in the
    # tail): it takes a few dozen sweeps to reach the segments' scale, hence the longer warmup
    mcmc = MCMC(kernel, num_warmup=200, num_samples=40, progress_bar=False)
    mcmc.run(random.key(0), y)
    mean = np.asarray(mcmc.get_samples()["mean_duration"])
    # durations 1 + Poisson(11): a zero-truncated Poisson of mean ~12 fits them
    assert 8.0 < mean.mean() < 16.0, mean.mean()
    assert np.std(mean) > 0


@pytest.mark.slow
def test_negative_binomial_with_a_gamma_prior_on_r():
    y = _data()

    def model(y):
        m = nh.HDPHSMM(1.0, 2.0, nh.durations.NegativeBinomial.gamma_r(), nh.emissions.GaussianNIW.weakly_informative(y),
                       max_states=4, max_duration=40)
        nh.sample("y", m, obs=y)

    kernel = nh.infer.WeakLimitGibbs(model)
    plan = kernel.update_plan(y)
    assert {"y_duration_r", "y_duration_p"} <= set(plan.sites("inner"))
    mcmc = MCMC(kernel, num_warmup=60, num_samples=60, progress_bar=False)
    mcmc.run(random.key(0), y)
    s = mcmc.get_samples()
    r, p = np.asarray(s["y_duration_r"]), np.asarray(s["y_duration_p"])
    states = np.asarray(s["y_states"])[-1]
    k = np.bincount(states).argmax()
    mean = 1 + r[:, k] * p[:, k] / (1 - p[:, k])
    assert 7.0 < mean.mean() < 18.0, mean.mean()
