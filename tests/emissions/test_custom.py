"""Tests of non-conjugate emissions written as plain NumPyro (:class:`CustomEmission`).

Reference values: the user's distribution evaluated state by state (numpyro ``log_prob``) and
``scipy.stats`` (Student-t).
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import MCMC
from scipy import stats

import numpyro_hdphmm as nh
from numpyro_hdphmm.emissions import CustomEmission
from numpyro_hdphmm.emissions import custom as custom_module
from numpyro_hdphmm.results.diagnostics import hamming_distance
from numpyro_hdphmm.infer import WeakLimitGibbs

K = 4
LOC = np.array([-5.0, -1.0, 2.0, 7.0])
SCALE = np.array([0.5, 1.0, 2.0, 0.3])
NU = 3.5


def student_t(k):
    return dist.StudentT(NU, jnp.asarray(LOC)[k], jnp.asarray(SCALE)[k])


# ------------------------------------------------------------------------ likelihood matrix
def test_log_likelihoods_match_log_prob(rng):
    fam = CustomEmission(student_t, K)
    y = rng.normal(scale=5.0, size=30)
    ll = np.asarray(fam.log_likelihoods(*fam.prepare(y)[:1]))
    assert ll.shape == (30, K)
    ref = np.stack([stats.t.logpdf(y, NU, LOC[k], SCALE[k]) for k in range(K)], 1)
    np.testing.assert_allclose(ll, ref, rtol=1e-10, atol=1e-10)
    # the family is a pytree whose leaves are the distribution's parameters: jit and vmap see them
    jitted = jax.jit(lambda f, x: f.log_likelihoods(x))(fam, jnp.asarray(y))
    np.testing.assert_allclose(np.asarray(jitted), ref, rtol=1e-10, atol=1e-10)
    batched = jax.vmap(fam.log_likelihoods, in_axes=(0, None))(jnp.asarray(y).reshape(3, 10), {})
    np.testing.assert_allclose(np.asarray(batched).reshape(30, K), ref, rtol=1e-10, atol=1e-10)
    leaves = jax.tree_util.tree_leaves(fam)
    assert any(np.shape(v) == (K,) and np.allclose(v, LOC) for v in leaves)
    assert fam.event_shape == () and fam.batch_shape == () and fam.param_names == ()


def test_multivariate_event_dims(rng):
    D = 3
    loc = rng.normal(scale=4.0, size=(K, D))
    a = rng.normal(size=(K, D, D))
    cov = a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(D)
    fam = CustomEmission(lambda k: dist.MultivariateNormal(jnp.asarray(loc)[k], jnp.asarray(cov)[k]), K)
    assert fam.event_shape == (D,)
    y = rng.normal(scale=4.0, size=(20, D))
    ll = np.asarray(fam.log_likelihoods(fam.prepare(y)[0]))
    ref = np.stack([stats.multivariate_normal.logpdf(y, loc[k], cov[k]) for k in range(K)], 1)
    np.testing.assert_allclose(ll, ref, rtol=1e-9)
    # draws follow the states: with tiny covariances they sit on the state's mean
    tight = CustomEmission(lambda k: dist.MultivariateNormal(jnp.asarray(loc)[k], 1e-8 * jnp.eye(D)), K)
    states = jnp.asarray(rng.integers(0, K, size=50))
    draws = np.asarray(tight.sample_observations(jax.random.key(1), {}, states))
    assert draws.shape == (50, D)
    np.testing.assert_allclose(draws, loc[np.asarray(states)], atol=1e-2)


def test_sample_observations_distribution(rng):
    """Draws of one state follow that state's Student-t (KS test)."""
    fam = CustomEmission(student_t, K)
    states = jnp.asarray(np.repeat(np.arange(K), 2000))
    draws = np.asarray(fam.sample_observations(jax.random.key(0), {}, states))
    for k in range(K):
        p = stats.kstest(draws[2000 * k: 2000 * (k + 1)], stats.t(NU, LOC[k], SCALE[k]).cdf).pvalue
        assert p > 1e-4, (k, p)


# --------------------------------------------------------------------------- missing values
def _nan_loglik_and_grad():
    y = jnp.asarray([0.3, np.nan, 5.0, np.nan, -2.0])
    states = jnp.asarray([0, 1, 3, 2, 1])

    def total(loc):
        fam = CustomEmission(lambda k: dist.Gamma(loc[k], 2.0), K)  # positive support: 0 is outside
        return jnp.sum(fam.pointwise_log_likelihood(jnp.abs(y), {}, states)), fam

    loc = jnp.asarray([1.0, 2.0, 0.5, 3.0])
    value, fam = total(loc)
    grad = jax.grad(lambda l: total(l)[0])(loc)
    return y, fam, value, grad


def test_nan_observations_are_skipped():
    y, fam, value, grad = _nan_loglik_and_grad()
    x, valid = fam.prepare(jnp.abs(y))
    np.testing.assert_array_equal(np.asarray(valid), [True, False, True, False, True])
    assert np.all(np.isfinite(np.asarray(fam.log_likelihoods(x))))
    rates = np.array([1.0, 2.0, 0.5, 3.0])
    ref = sum(stats.gamma.logpdf(v, rates[s], scale=0.5) for v, s in [(0.3, 0), (5.0, 3), (2.0, 1)])
    np.testing.assert_allclose(float(value), ref, rtol=1e-10)
    assert np.all(np.isfinite(np.asarray(grad)))
    assert float(grad[2]) == 0.0  # state 2 only at a missing step
    # multivariate: a NaN anywhere in y_t makes the whole step missing
    mvn = CustomEmission(lambda k: dist.MultivariateNormal(jnp.zeros((K, 2)), jnp.eye(2)), K)
    x, valid = mvn.prepare(jnp.asarray([[0.0, 1.0], [np.nan, 1.0], [2.0, 2.0]]))
    np.testing.assert_array_equal(np.asarray(valid), [True, False, True])
    assert np.all(np.isfinite(np.asarray(x)))


def test_nan_handling_negative_control(monkeypatch):
    """A placeholder outside the support (0 for a Gamma) would give -inf / NaN gradients."""
    monkeypatch.setattr(custom_module.CustomEmission, "placeholder", lambda self, dtype: jnp.zeros((), dtype))
    with pytest.warns(UserWarning, match="support"):
        _, _, value, grad = _nan_loglik_and_grad()
    assert not np.all(np.isfinite(np.asarray(grad)))


# ------------------------------------------------------------------------------- validation
def test_validation():
    with pytest.raises(ValueError, match="`emission`"):
        nh.StickyHDPHMM(1.0, 1.0, 1.0, emission=3.0, max_states=K)
    with pytest.raises(ValueError, match="`emission`"):
        nh.StickyHDPHMM(1.0, 1.0, 1.0, emission=dist.Normal(0.0, 1.0), max_states=K)
    with pytest.raises(ValueError, match=r"batch shape \(4,\)"):
        nh.StickyHDPHMM(1.0, 1.0, 1.0, emission=lambda k: dist.Normal(0.0, 1.0), max_states=K)
    with pytest.raises(ValueError, match="Distribution"):
        nh.HDPHMM(1.0, 1.0, emission=lambda k: k * 2.0, max_states=K)
    with pytest.raises(ValueError, match="max_states"):
        nh.StickyHDPHMM(1.0, 1.0, 1.0, emission=student_t, max_states=1.5)
    fam = CustomEmission(student_t, K)
    with pytest.raises(ValueError, match="`obs`"):
        fam.check_observations(np.array([0.0, np.inf]), "obs")
    fam.check_observations(np.array([0.0, np.nan]), "obs")  # NaN = missing
    mvn = CustomEmission(lambda k: dist.MultivariateNormal(jnp.zeros((K, 2)), jnp.eye(2)), K)
    with pytest.raises(ValueError, match="`obs`"):
        mvn.check_observations(np.zeros((5, 3)), "obs")
    hmm = nh.HDPHMM(1.0, 1.0, emission=student_t, max_states=K)
    assert isinstance(hmm.emission, CustomEmission)


@pytest.mark.parametrize(
    "method, args",
    [
        ("sufficient_statistics", (jnp.zeros(3), jnp.ones((3, K)))),
        ("posterior", (None,)),
        ("log_marginal_likelihood", (None,)),
        ("log_predictive", (jnp.zeros(()), None)),
        ("sample_posterior", (jax.random.key(0), None)),
        ("log_prior", ({},)),
    ],
)
def test_conjugate_methods_raise(method, args):
    fam = CustomEmission(student_t, K)
    with pytest.raises(NotImplementedError, match="no conjugate prior"):
        getattr(fam, method)(*args)
    params, conc = fam.update_parameters(jax.random.key(0), jnp.zeros(3), jnp.ones((3, K)), {})
    assert params == {} and conc is None


# ------------------------------------------------------------------------- inside a model
def user_model(y=None, num_steps=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0).expand([K]))
    scale = numpyro.sample("scale", dist.LogNormal(-3.0, 0.1).expand([K]))
    hmm = nh.StickyHDPHMM(1.0, 1.0, 10.0, lambda k: dist.StudentT(NU, loc[k], scale[k]), max_states=K,
                          num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


def test_nh_sample_in_a_model_with_user_sites():
    tr = handlers.trace(handlers.seed(user_model, 3)).get_trace(num_steps=200)
    assert "y_loc" not in tr and tr["loc"]["value"].shape == (K,)
    y, states, loc = (np.asarray(tr[s]["value"]) for s in ("y", "y_states", "loc"))
    assert y.shape == (200,) and states.shape == (200,)
    assert np.median(np.abs(y - loc[states])) < 0.2  # scale ~ 0.05: draws follow the states
    # Predictive (vectorized over draws) and the jitted generative sampler
    pred = numpyro.infer.Predictive(user_model, num_samples=3)(jax.random.key(1), num_steps=50)
    assert pred["y"].shape == (3, 50)
    hmm = nh.StickyHDPHMM(1.0, 1.0, 10.0, student_t, max_states=K, num_steps=40)
    y, inter = hmm.sample_with_intermediates(jax.random.key(2))
    assert y.shape == (40,) and np.all(np.isfinite(np.asarray(y)))


# --------------------------------------------------------------------- recovery (WeakLimitGibbs)
L = 5


def heavy_tailed_data(seed=0, length=50):
    rng = np.random.default_rng(seed)
    z = np.repeat(np.array([0, 1, 2, 0, 1, 2]), length)
    y = np.array([-6.0, 0.0, 6.0])[z] + rng.standard_t(3.0, size=z.size)
    return y, z


def student_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 1.0))
    nu = numpyro.sample("nu", dist.Gamma(6.0, 1.0))
    loc = numpyro.sample("loc", dist.Normal(0.0, 10.0).expand([L]))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([L]))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, lambda k: dist.StudentT(nu, loc[k], scale[k]), max_states=L)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow
def test_weak_limit_student_t_recovers_three_states():
    y, z = heavy_tailed_data()
    start = time.time()
    mcmc = MCMC(WeakLimitGibbs(student_model), num_warmup=100, num_samples=100, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    s = mcmc.get_samples()
    elapsed = time.time() - start
    num = np.asarray(s["y_num_states"])
    ham = np.mean([hamming_distance(np.asarray(d), z) for d in np.asarray(s["y_states"])[-50:]])
    print(f"median num_states {np.median(num)}, mean Hamming {ham:.4f}, {elapsed:.1f} s")
    assert np.median(num) == 3
    assert ham < 0.05
    # the emission sites were moved by the inner NUTS: the large states' locations are found (a
    # state of a few steps, which a sweep may open and close, is left out)
    last = np.asarray(s["y_states"])[-1]
    labels, sizes = np.unique(last, return_counts=True)
    used_locs = np.sort([np.asarray(s["loc"])[-1, k] for k in labels[sizes >= 0.05 * last.size]])
    np.testing.assert_allclose(used_locs, [-6.0, 0.0, 6.0], atol=0.6)
