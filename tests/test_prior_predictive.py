"""The README model works with ``numpyro.infer.Predictive`` for prior predictive checks (issue 19):
``GaussianNIW.weakly_informative(None)`` gives the prior for standardized data and the model,
called without data, draws sequences of the default length."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import Predictive

import numpyro_hdphmm as nh


def readme_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=20)
    nh.sample("y", hmm, obs=y)


@pytest.mark.filterwarnings("ignore:MarkovChain.sample")  # a generated path may need more than K = 20 states
def test_readme_model_prior_predictive():
    draws = Predictive(readme_model, num_samples=5)(jax.random.key(0), None)
    assert draws["y"].shape == (5, 100, 1) and draws["y_states"].shape == (5, 100)
    assert np.all(np.isfinite(draws["y"]))
    prior = nh.emissions.GaussianNIW.weakly_informative(None)
    np.testing.assert_allclose(np.asarray(prior.loc), [0.0])
    np.testing.assert_allclose(np.asarray(prior.scale), [[1.0]])
