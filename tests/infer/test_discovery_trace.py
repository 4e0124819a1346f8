"""Model discovery traces the model at fixed points of the supports (no sampler compiled) and finds
what it found at a prior draw (issue 17, compile time)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.distributions import constraints

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer.plumbing import discovery
from numpyro_hdphmm.infer.plumbing.discovery import discover, discovery_trace, prior_trace

K = 4
Y_REAL = np.concatenate([np.zeros(15), np.full(15, 4.0)]).astype(np.float32) + np.linspace(-0.3, 0.3, 30).astype(np.float32)
Y_CAT = np.tile(np.arange(3, dtype=np.int32), 10)


def gaussian_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.GaussianNIW.weakly_informative(y), max_states=K)
    nh.sample("y", hmm, obs=y)


def c_rho_model(y):
    c = numpyro.sample("c", dist.Gamma(2.0, 0.1))
    rho = numpyro.sample("rho", dist.Beta(5.0, 1.0))
    hmm = nh.StickyHDPHMM(1.0, c * (1.0 - rho), c * rho, nh.emissions.Categorical(3, 0.5), max_states=K)
    nh.sample("y", hmm, obs=y)


def dp_mixture_model(y):
    sigma = numpyro.sample("sigma", dist.Gamma(2.0, 1.0))
    emission = nh.emissions.DPMixture(nh.emissions.Categorical(3, 0.5), sigma, 3)
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 2.0, emission, max_states=K), obs=y)


def shared_base_model(y):
    phi = numpyro.sample("phi", dist.Dirichlet(jnp.full(3, 1.0)))
    scale = numpyro.sample("scale", dist.Gamma(3.0, 1.0))
    hmm = nh.StickyHDPHMM(1.0, 1.0, 2.0, nh.emissions.Categorical(3, scale * phi), max_states=K)
    nh.sample("y", hmm, obs=y)


def custom_emission_model(y):
    """A custom emission (the parameters are the user's sites) and a hyperprior on the real line
    (both go to the inner kernel)."""
    log_gamma = numpyro.sample("log_gamma", dist.Normal(0.0, 1.0))
    mu = numpyro.sample("mu", dist.Normal(jnp.zeros(K), 5.0).to_event(1))
    emission = nh.emissions.CustomEmission(lambda k: dist.Normal(mu[k], 1.0), K)
    nh.sample("y", nh.StickyHDPHMM(jnp.exp(log_gamma), 1.0, 1.0, emission, max_states=K), obs=y)


def batched_model(y):
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(1.0, 1.0, kappa, nh.emissions.Categorical(3, 0.5), max_states=K)
    nh.sample("y", hmm, obs=y)


MODELS = [
    (gaussian_model, Y_REAL[:, None]),
    (c_rho_model, Y_CAT),
    (dp_mixture_model, Y_CAT),
    (shared_base_model, Y_CAT),
    (custom_emission_model, Y_REAL),
    (batched_model, np.stack([Y_CAT, Y_CAT[::-1]])),
]
IDS = [m.__name__ for m, _ in MODELS]


@pytest.mark.parametrize("model,y", MODELS, ids=IDS)
def test_every_latent_site_at_its_fixed_point(model, y):
    """No fallback to the prior draw for the package's models: each latent site holds
    ``support.feasible_like`` (the states 0, a simplex uniform, a positive site 1), with the
    shapes and dtypes of a draw."""
    fixed = discovery_trace(model, (y,))
    drawn = prior_trace(model, jax.random.key(1), (y,))
    latent = discovery.latent_sites(drawn)
    assert discovery.latent_sites(fixed) == latent
    for name in latent:
        value, draw = np.asarray(fixed[name]["value"]), np.asarray(drawn[name]["value"])
        assert value.shape == draw.shape, name
        assert np.issubdtype(value.dtype, np.integer) == np.issubdtype(draw.dtype, np.integer), name
        expected = np.asarray(fixed[name]["fn"].support.feasible_like(np.zeros(draw.shape, value.dtype)))
        np.testing.assert_array_equal(value, expected, err_msg=name)
    assert np.all(np.asarray(fixed["y_states"]["value"]) == 0)


@pytest.mark.parametrize("model,y", MODELS, ids=IDS)
@pytest.mark.parametrize("hyperparameters", ["auxiliary", "collapsed"])
def test_same_spec_as_at_a_prior_draw(monkeypatch, model, y, hyperparameters):
    """The sites, the recognized hyperparameters and the whole update plan (every reason) are
    those discovery found tracing the model at a prior draw."""
    spec = discover(model, (y,), hyperparameters=hyperparameters)
    monkeypatch.setattr(discovery, "discovery_trace", lambda m, args=(), kwargs=None: prior_trace(
        m, jax.random.key(0), args, kwargs, one_off=True))
    assert discover(model, (y,), hyperparameters=hyperparameters) == spec


class _NoFeasiblePoint(constraints.Constraint):
    """A user's constraint without ``feasible_like``."""

    def __call__(self, x):
        return x > 0


class _UserPositive(dist.Gamma):
    support = _NoFeasiblePoint()


def test_falls_back_to_the_prior_draw():
    def model(y):
        kappa = numpyro.sample("kappa", _UserPositive(10.0, 1.0))
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, kappa, nh.emissions.Categorical(3, 0.5), max_states=K), obs=y)

    trace = discovery_trace(model, (Y_CAT,))
    kappa = float(trace["kappa"]["value"])
    assert kappa > 0 and kappa != 1.0  # a draw of Gamma(10, 1), not a fixed point
    assert discover(model, (Y_CAT,)).sites.states == "y_states"
