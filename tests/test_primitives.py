"""``numpyro_hdphmm.sample``: explicit sites, shapes, masks, Predictive and log_likelihood."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

import numpyro_hdphmm as nh
from numpyro_hdphmm.emissions import Categorical, GaussianNIW

K = 6


def _emission():
    return GaussianNIW(loc=np.zeros(2), mean_precision=0.1, df=5.0, scale=np.eye(2))


def make_model(emission=None, num_steps=None, sticky=True):
    emission = emission or _emission()

    def model(y=None, lengths=None):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(2.0, 1.0))
        if sticky:
            kappa = numpyro.sample("kappa", dist.Gamma(5.0, 1.0))
            hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=K, num_steps=num_steps)
        else:
            hmm = nh.HDPHMM(gamma, alpha, emission, max_states=K, num_steps=num_steps)
        return nh.sample("y", hmm, obs=y, lengths=lengths)

    return model


def test_single_sequence_sites():
    y = np.random.default_rng(0).normal(size=(30, 2))
    tr = handlers.trace(handlers.seed(make_model(), 0)).get_trace(y)
    shapes = {k: v["value"].shape for k, v in tr.items() if v["type"] == "sample"}
    assert shapes["y_beta"] == (K + 1,)
    assert shapes["y_trans"] == (K + 1, K + 1)
    assert shapes["y_mu"] == (K, 2) and shapes["y_cov"] == (K, 2, 2)
    assert shapes["y_states"] == (30,)
    assert shapes["y"] == (30, 2)
    assert tr["y"]["is_observed"] and not tr["y_states"]["is_observed"]
    assert isinstance(tr["y_beta"]["fn"], nh.GEM)
    assert isinstance(tr["y_trans"]["fn"], nh.HDPTransitions)
    assert isinstance(tr["y_states"]["fn"], nh.MarkovChain)
    roles = {k: v["infer"].get("hdphmm_role") for k, v in tr.items() if v["type"] == "sample"}
    assert roles["y_beta"] == "beta" and roles["y_states"] == "states" and roles["y"] == "obs"
    assert roles["y_mu"] == "emission" and roles["gamma"] is None
    # pointwise log-likelihood, one term per time step
    lp = tr["y"]["fn"].log_prob(tr["y"]["value"])
    assert lp.shape == (30,) and np.all(np.isfinite(np.asarray(lp)))
    # the start row is the last row of trans, the states are a MarkovChain on the first K rows
    trans = tr["y_trans"]["value"]
    chain = tr["y_states"]["fn"]
    np.testing.assert_allclose(chain.initial_probs, trans[K])
    np.testing.assert_allclose(chain.transition_matrix, trans[:K])


def test_several_sequences_with_lengths_and_missing():
    rng = np.random.default_rng(1)
    y = rng.normal(size=(3, 20, 2))
    lengths = np.array([20, 12, 5])
    y[1, 12:] = np.nan  # padding may hold anything, NaN included
    y[2, 5:] = 1e6
    y[0, 7] = np.nan  # a missing observation
    tr = handlers.trace(handlers.seed(make_model(), 0)).get_trace(y, lengths)
    assert tr["y_states"]["value"].shape == (3, 20)
    lp = np.asarray(tr["y"]["fn"].log_prob(tr["y"]["value"]))
    assert lp.shape == (3, 20)
    assert np.all(np.isfinite(lp))
    assert lp[0, 7] == 0.0 and np.all(lp[1, 12:] == 0.0) and np.all(lp[2, 5:] == 0.0)
    assert np.all(lp[0, :7] != 0.0)
    # padded states do not enter the chain's density: changing them changes nothing
    chain = tr["y_states"]["fn"]
    z = tr["y_states"]["value"]
    z2 = z.at[2, 5:].set((z[2, 5:] + 1) % K)
    np.testing.assert_allclose(chain.log_prob(z)[2], chain.log_prob(z2)[2])


def test_gradient_through_missing_values_is_finite():
    y = np.random.default_rng(2).normal(size=(15, 2))
    y[3] = np.nan
    tr = handlers.trace(handlers.seed(make_model(), 1)).get_trace(y)
    fn = tr["y"]["fn"]

    def total(mu):
        d = nh.EmissionLikelihood(fn.emission, {**fn.params, "mu": mu}, fn.states)
        return jnp.sum(d.log_prob(jnp.asarray(y)))

    g = jax.grad(total)(fn.params["mu"])
    assert np.all(np.isfinite(np.asarray(g)))


def test_prior_predictive_and_log_likelihood():
    model = make_model(num_steps=25)
    prior = Predictive(model, num_samples=4)(jax.random.key(0))
    assert prior["y"].shape == (4, 25, 2) and prior["y_states"].shape == (4, 25)
    assert np.all(np.asarray(prior["y_states"]) < K)
    # log_likelihood with every latent site substituted (as ArviZ does) works without a seed
    latent = {k: v for k, v in prior.items() if k != "y"}
    ll = numpyro.infer.log_likelihood(model, latent, prior["y"][0])
    assert ll["y"].shape == (4, 25)
    # batched prior predictive via lengths
    batched = Predictive(model, num_samples=2)(jax.random.key(1), lengths=np.array([25, 10]))
    assert batched["y"].shape == (2, 2, 25, 2)


def test_non_sticky_and_categorical():
    em = Categorical(num_categories=5)
    y = np.random.default_rng(3).integers(0, 5, size=40)
    tr = handlers.trace(handlers.seed(make_model(em, sticky=False), 0)).get_trace(y)
    assert tr["y_probs"]["value"].shape == (K, 5)
    assert float(tr["y_trans"]["fn"].kappa) == 0.0


def test_arviz_dims_are_named():
    from arviz.data.io_numpyro import infer_dims

    y = np.random.default_rng(4).normal(size=(10, 2))
    dims = infer_dims(make_model(), (y,), {})
    assert dims["y_states"] == ["time"]
    assert dims["y"][0] == "time"
    dims = infer_dims(make_model(), (np.stack([y, y]), np.array([10, 4])), {})
    assert dims["y_states"] == ["sequence", "time"]
    assert dims["y"][:2] == ["sequence", "time"]


@pytest.mark.parametrize(
    "obs, lengths, match",
    [
        (np.zeros((10, 3)), None, "obs"),  # wrong event size
        (np.zeros(10), None, "obs"),  # missing event axis
        (np.zeros((2, 10, 2)), np.array([10]), "lengths"),
        (np.zeros((2, 10, 2)), np.array([10, 11]), "lengths"),
        (np.zeros((10, 2)), np.array([10]), "lengths"),
        (np.full((10, 2), np.inf), None, "obs"),
    ],
)
def test_bad_observations(obs, lengths, match):
    with pytest.raises(ValueError, match=match):
        handlers.seed(make_model(), 0)(obs, lengths)


def test_out_of_range_categories():
    em = Categorical(num_categories=3)
    with pytest.raises(ValueError, match="obs"):
        handlers.seed(make_model(em), 0)(np.array([0, 1, 3]))


def test_gradient_based_numpyro_tools_point_to_the_package():
    """Issue 42: ``MCMC(NUTS(model))`` and ``SVI`` with an autoguide over the states site refuse the
    discrete ``y_states`` with a message that names the package's tools (the kernels, the
    collapsed SVI guide, ``HiddenMarkovModel``), not only NumPyro's "enumerate support"."""
    from numpyro.infer import MCMC, NUTS, SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    y = np.array([0, 3, 1, 2, 0])

    def model(y):
        kappa = numpyro.sample("kappa", dist.Gamma(5.0, 1.0))
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, kappa, nh.emissions.Poisson(), max_states=2), obs=y)

    with pytest.raises(RuntimeError, match=r"y_states.*nh\.infer\.WeakLimitGibbs.*CollapsedGuide.*HiddenMarkovModel"):
        MCMC(NUTS(model), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.key(0), y)
    with pytest.raises(RuntimeError, match=r"y_states.*nh\.infer\.WeakLimitGibbs"):
        SVI(model, AutoNormal(model), numpyro.optim.Adam(1e-2), Trace_ELBO()).init(jax.random.key(0), y)


def test_discrete_enumeration_points_to_the_package():
    """Issue 42: NumPyro's funsor enumeration (``infer_discrete``, ``Predictive(...,
    infer_discrete=True)``) on an ``nh.sample`` model raises a ``NotImplementedError`` that names
    the package's tools, not a ``KeyError: 'time'`` from inside its plates (what it raised before)."""
    from numpyro.contrib.funsor import infer_discrete

    y = np.array([0, 3, 1, 2, 0])

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 5.0, nh.emissions.Poisson(), max_states=2), obs=y)

    match = r"discrete enumeration.*y_states.*nh\.infer\.WeakLimitGibbs.*nh\.viterbi.*nh\.smooth"
    with pytest.raises(NotImplementedError, match=match):
        infer_discrete(model, first_available_dim=-2, rng_key=jax.random.key(0))(y)
    samples = {k: v for k, v in Predictive(model, num_samples=2)(jax.random.key(1), y).items() if k != "y"}
    with pytest.raises(NotImplementedError, match=match):
        Predictive(model, samples, infer_discrete=True)(jax.random.key(2), y)
