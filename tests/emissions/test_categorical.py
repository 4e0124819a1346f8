"""Tests of the Categorical (Dirichlet-multinomial) emission family.

Reference values: the Polya-urn product computed by hand in numpy, Monte Carlo over numpy
Dirichlet draws (tolerance 5 standard errors) and ``scipy.stats``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats

from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.emissions.categorical import Categorical

ALPHA = np.array([0.5, 1.0, 2.0, 0.3])
C = 4


def family():
    return Categorical(C, ALPHA)


def stats_of(fam, y, z, K):
    x, valid = fam.prepare(y)
    return fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, K))


# ---------------------------------------------------------------------- closed forms
def test_log_marginal_matches_polya_urn():
    rng = np.random.default_rng(0)
    T, K = 30, 3
    y = rng.integers(0, C, T)
    z = rng.integers(0, K, T)
    fam = family()
    got = np.asarray(fam.log_marginal_likelihood(stats_of(fam, y, z, K)))
    for k in range(K):
        counts = np.zeros(C)
        lp = 0.0
        for yt in y[z == k]:  # sequential urn: p(y_t | y_<t) = (a_y + n_y) / (A + n)
            lp += np.log((ALPHA[yt] + counts[yt]) / (ALPHA.sum() + counts.sum()))
            counts[yt] += 1
        assert abs(got[k] - lp) < 1e-10


def test_log_marginal_fractional_weights_monte_carlo():
    rng = np.random.default_rng(1)
    y = np.array([0, 2, 2, 1, 3, 2])
    w = np.array([1.0, 0.5, 1.0, 0.25, 0.0, 0.75])
    fam = family()
    got = float(fam.log_marginal_likelihood(fam.sufficient_statistics(jnp.asarray(y), jnp.asarray(w)[:, None]))[0])
    n = 400_000
    p = rng.dirichlet(ALPHA, size=n)
    f = np.exp((w[None] * np.log(p[:, y])).sum(1))  # prod_t p_{y_t}^{w_t}
    est, se = f.mean(), f.std() / np.sqrt(n)
    assert abs(np.exp(got) - est) < 5 * se, (np.exp(got), est, se)


def test_chain_rule_sequential_predictives():
    rng = np.random.default_rng(2)
    T, K = 40, 3
    y = rng.integers(0, C, T).astype(float)
    y[[3, 17]] = np.nan
    z = rng.integers(0, K, T)
    fam = family()
    x, valid = fam.prepare(y)
    w = state_weights(jnp.asarray(z), valid, K)
    prefix = jnp.arange(T)[:, None] > jnp.arange(T)[None, :]

    def pred(t):
        return fam.log_predictive(x[t], fam.sufficient_statistics(x, w * prefix[t][:, None]))

    lp = jax.vmap(pred)(jnp.arange(T))
    chain = float(jnp.sum(jnp.where(valid, lp[jnp.arange(T), z], 0.0)))
    total = float(jnp.sum(fam.log_marginal_likelihood(fam.sufficient_statistics(x, w))))
    assert abs(chain - total) < 1e-9 * max(1.0, abs(total))


def test_posterior_matches_importance_sampling():
    rng = np.random.default_rng(3)
    y = np.array([0, 2, 2, 1, 2, 2, 3])
    n = 400_000
    p = rng.dirichlet(ALPHA, size=n)
    logw = np.log(p[:, y]).sum(1)
    wts = np.exp(logw - logw.max())
    wts /= wts.sum()
    fam = family()
    post = fam.posterior(fam.sufficient_statistics(jnp.asarray(y), jnp.ones((len(y), 1))))
    a_post = np.asarray(post.concentration[0])
    mean = a_post / a_post.sum()
    est = (wts[:, None] * p).sum(0)
    se = np.sqrt((wts[:, None] ** 2 * (p - est) ** 2).sum(0))
    assert np.all(np.abs(est - mean) < 5 * se), (est, mean, se)
    np.testing.assert_allclose(a_post, ALPHA + np.bincount(y, minlength=C))


def test_zero_statistics_give_the_prior():
    fam = family()
    zero = fam.sufficient_statistics(jnp.zeros(3, jnp.int32), jnp.zeros((3, 5)))
    post = fam.posterior(zero)
    assert post.batch_shape == (5,) and post.num_categories == C
    np.testing.assert_allclose(post.concentration, np.broadcast_to(ALPHA, (5, C)))
    np.testing.assert_allclose(fam.log_marginal_likelihood(zero), 0.0, atol=1e-12)
    # prior predictive = normalized concentration
    np.testing.assert_allclose(np.exp(fam.log_predictive(jnp.asarray(2), zero)), ALPHA[2] / ALPHA.sum())


def test_zero_weights_and_nan_are_ignored():
    rng = np.random.default_rng(4)
    y = rng.integers(0, C, 20).astype(float)
    z = rng.integers(0, 2, 20)
    fam = family()
    y_bad = y.copy()
    y_bad[[1, 8, 9]] = np.nan
    x, valid = fam.prepare(y_bad)
    keep = ~np.isnan(y_bad)
    np.testing.assert_array_equal(valid, keep)
    assert x.dtype == jnp.int32 and np.all(np.asarray(x)[~keep] == 0)
    got = fam.sufficient_statistics(x, state_weights(jnp.asarray(z), valid, 2))
    want = stats_of(fam, y[keep].astype(int), z[keep], 2)
    np.testing.assert_allclose(got["counts"], want["counts"])
    params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
    pw = fam.pointwise_log_likelihood(jnp.asarray(y_bad), params, jnp.asarray(z))
    assert np.all(np.asarray(pw)[~keep] == 0.0) and np.all(np.isfinite(pw))


def test_large_vocabulary_statistics_are_exact_and_memory_light():
    rng = np.random.default_rng(5)
    T, K, Cbig = 27_000, 300, 1500
    fam = Categorical(Cbig, 0.5)
    x = jnp.asarray(rng.integers(0, Cbig, T), dtype=jnp.int32)
    z = rng.integers(0, K, T)
    weights = state_weights(jnp.asarray(z), jnp.ones(T, bool), K)
    # no intermediate of T x C (or larger) elements in the computation
    jaxpr = jax.make_jaxpr(fam.sufficient_statistics)(x, weights)
    sizes = [int(np.prod(v.aval.shape)) for eqn in jaxpr.eqns for v in eqn.outvars]
    assert max(sizes) < T * Cbig // 10
    counts = np.asarray(jax.jit(fam.sufficient_statistics)(x, weights)["counts"])
    want = np.bincount(z * Cbig + np.asarray(x), minlength=K * Cbig).reshape(K, Cbig)
    np.testing.assert_array_equal(counts, want)


# ---------------------------------------------------------------------- sampling & densities
def test_sample_parameters_moments():
    n = 100_000
    fam = family()
    p = np.asarray(fam.sample_parameters(jax.random.PRNGKey(6), (n,))["probs"])
    assert p.shape == (n, C)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    A = ALPHA.sum()
    mean = ALPHA / A
    var = ALPHA * (A - ALPHA) / (A**2 * (A + 1))
    assert np.all(np.abs(p.mean(0) - mean) < 5 * np.sqrt(var / n))
    # marginals are Beta(a_c, A - a_c)
    for c in range(C):
        assert stats.kstest(p[:, c], stats.beta(ALPHA[c], A - ALPHA[c]).cdf).pvalue > 1e-4


def test_small_concentration_samples_stay_finite():
    fam = Categorical(50, 1e-3)
    p = fam.sample_parameters(jax.random.PRNGKey(0), (3,))
    assert np.all(np.isfinite(p["probs"]))
    ll = fam.log_likelihoods(jnp.arange(50), p)
    assert ll.shape == (50, 3) and np.all(np.isfinite(ll))


def test_underflowed_draws_keep_a_finite_prior_density():
    """Under concentrations far below 1 (the HCRP emission prior's ``s phi_w`` for words with no
    table) most entries of a float32 draw underflow; they are raised to ``finfo.tiny`` so that
    the draw's Dirichlet density (NumPyro's, which a kernel's ``lp`` reports) is finite: at an
    exact 0 it is ``+inf`` (the check's negative control)."""
    fam = Categorical(1487, 1e-30)
    probs = fam.sample_parameters(jax.random.PRNGKey(0), (4,))["probs"]
    prior = dist.Dirichlet(jnp.full((1487,), 1e-30, jnp.float32))
    tiny = jnp.finfo(probs.dtype).tiny
    assert np.all(np.asarray(probs) >= tiny) and np.any(np.asarray(probs) == tiny)
    np.testing.assert_allclose(np.asarray(probs.sum(-1)), 1.0, rtol=1e-6)
    assert np.all(np.isfinite(prior.log_prob(probs)))
    assert np.all(np.isinf(prior.log_prob(jnp.where(probs == tiny, 0.0, probs))))


def test_log_prior_and_log_likelihoods_match_scipy():
    rng = np.random.default_rng(7)
    K = 3
    probs = rng.dirichlet(np.ones(C), size=K)
    fam = family()
    want = [stats.dirichlet.logpdf(probs[k], ALPHA) for k in range(K)]
    np.testing.assert_allclose(fam.log_prior({"probs": jnp.asarray(probs)}), want, rtol=1e-10)
    x = rng.integers(0, C, 11)
    ll = fam.log_likelihoods(jnp.asarray(x), {"probs": jnp.asarray(probs)})
    want_ll = np.stack([stats.multinomial.logpmf(np.eye(C)[x], 1, probs[k]) for k in range(K)], 1)
    np.testing.assert_allclose(ll, want_ll, rtol=1e-10)


def test_sample_observations_frequencies():
    fam = family()
    probs = jnp.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]])
    T = 40_000
    states = jnp.arange(T) % 2
    y = np.asarray(fam.sample_observations(jax.random.PRNGKey(8), {"probs": probs}, states))
    assert y.shape == (T,)
    for k in range(2):
        freq = np.bincount(y[k::2], minlength=C) / (T // 2)
        pk = np.asarray(probs[k])
        assert np.all(np.abs(freq - pk) < 5 * np.sqrt(pk * (1 - pk) / (T // 2)))


def test_sample_sites_declares_sites():
    fam = family()
    K = 6
    with numpyro.handlers.trace() as tr, numpyro.handlers.seed(rng_seed=0):
        out = fam.sample_sites("obs", K)
    assert list(tr) == ["obs_probs"]
    site = tr["obs_probs"]
    assert isinstance(site["fn"], dist.Dirichlet)
    assert site["value"].shape == (K, C) and site["fn"].batch_shape == (K,)
    assert site["infer"].get("hdphmm_role") == "emission"
    np.testing.assert_allclose(site["fn"].concentration, np.broadcast_to(ALPHA, (K, C)))
    np.testing.assert_allclose(site["fn"].log_prob(out["probs"]), fam.log_prior(out), rtol=1e-10)


# ---------------------------------------------------------------------- JAX transformations
def test_jit_vmap_eval_shape():
    fam = family()
    rng = np.random.default_rng(9)
    s = stats_of(fam, rng.integers(0, C, 15), rng.integers(0, 3, 15), 3)
    want = fam.log_marginal_likelihood(s)
    np.testing.assert_allclose(jax.jit(lambda f, st: f.log_marginal_likelihood(st))(fam, s), want, rtol=1e-12)
    fam2 = Categorical(C, 2.0 * ALPHA)
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), fam, fam2)
    out = jax.vmap(lambda f: f.log_marginal_likelihood(s))(stacked)
    np.testing.assert_allclose(out[1], fam2.log_marginal_likelihood(s), rtol=1e-12)
    ys = jnp.asarray(rng.integers(0, C, (2, 15)))
    xs, valids = jax.vmap(fam.prepare)(ys)
    ws = jax.vmap(lambda v: state_weights(jnp.zeros(15, jnp.int32), v, 3))(valids)
    batched = jax.vmap(fam.sufficient_statistics)(xs, ws)
    assert batched["counts"].shape == (2, 3, C)
    shape = jax.eval_shape(lambda f, st: f.posterior(st), fam, s)
    assert isinstance(shape, Categorical) and shape.concentration.shape == (3, C)
    assert shape.num_categories == C


def test_float32():
    with jax.enable_x64(False):
        fam = Categorical(C, np.float32(0.5))
        y = np.array([0, 1, np.nan, 3], dtype=np.float32)
        x, valid = fam.prepare(y)
        s = fam.sufficient_statistics(x, state_weights(jnp.arange(4) % 2, valid, 2))
        params = fam.sample_parameters(jax.random.PRNGKey(0), (2,))
        for out in (fam.log_marginal_likelihood(s), fam.log_predictive(x[0], s),
                    fam.log_likelihoods(x, params), fam.log_prior(params)):
            assert out.dtype == jnp.float32 and np.all(np.isfinite(out))


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "args, name",
    [
        ((1,), "num_categories"),
        ((2.5,), "num_categories"),
        ((True,), "num_categories"),
        ((4, 0.0), "concentration"),
        ((4, [1.0, 1.0, -1.0, 1.0]), "concentration"),
        ((4, np.ones(3)), "concentration"),
    ],
)
def test_bad_arguments(args, name):
    with pytest.raises(ValueError, match=name):
        Categorical(*args)


@pytest.mark.parametrize(
    "y",
    [np.array([0, 4]), np.array([-1, 2]), np.array([0.5, 1.0]), np.array([np.inf, 1.0]), np.array(2)],
)
def test_check_observations_rejects(y):
    with pytest.raises(ValueError, match="words"):
        family().check_observations(y, name="words")


def test_check_observations_accepts():
    family().check_observations(np.array([0.0, np.nan, 3.0]), name="words")
    family().check_observations(np.array([[0, 1], [2, 3]]), name="words")


def test_weakly_informative():
    data = np.array([[0, 5, 2], [1, 1, 1]], dtype=float)
    data[1, 2] = np.nan
    fam = Categorical.weakly_informative(data)
    assert fam.num_categories == 6
    np.testing.assert_allclose(fam.concentration, 0.5)
    fam = Categorical.weakly_informative(np.zeros(4, int), num_categories=10, concentration=1.0)
    assert fam.num_categories == 10 and float(fam.concentration[0]) == 1.0
    assert Categorical.weakly_informative(np.zeros(4, int)).num_categories == 2
    with pytest.raises(ValueError, match="data"):
        Categorical.weakly_informative(np.array([0, 12]), num_categories=10)
    with pytest.raises(ValueError, match="data"):
        Categorical.weakly_informative(np.array([0, -1]))
    assert repr(fam) == "Categorical(concentration=(10,))"
