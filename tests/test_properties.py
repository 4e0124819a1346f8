"""Property-based tests (``hypothesis``) of every distribution and emission family.

For random parameters:

* densities normalize: on enumerable supports by enumeration (``Categorical`` symbols, ``Poisson``
  counts up to a negligible tail, ``MarkovChain`` over all short state sequences,
  ``HiddenMarkovModel`` over all short symbol sequences); on continuous ones by quadrature
  (the posterior predictive of every continuous family in one dimension / on the circle, ``GEM`` and
  ``WeakLimitBeta`` with two atoms, a row of ``HDPTransitions``);
* ``sample`` and ``log_prob`` agree: moments of draws against the density's moments (Monte Carlo,
  5 standard errors);
* batch shapes, ``expand`` and masks behave as in NumPyro.

Every property runs twice: a few examples in the default set (``derandomize=True``: the same
examples in every run) and ``*_slow`` with many more (``-m slow``).  Shapes are fixed within a
property and the JAX functions jitted with the families as arguments, so each compiles once.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from jax.scipy.special import logsumexp

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em

_COMMON = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAST = settings(max_examples=3, **_COMMON)
SLOW = settings(max_examples=60, **_COMMON)


def fast_and_slow(fast_examples=None, **strategies):
    """Decorator: the property under ``FAST`` settings (or ``fast_examples`` examples), and a
    ``<name>_slow`` twin in this module, marked slow, under ``SLOW``."""
    fast = FAST if fast_examples is None else settings(FAST, max_examples=fast_examples)

    def wrap(fn):
        globals()[fn.__name__ + "_slow"] = pytest.mark.slow(SLOW(given(**strategies)(fn)))
        return fast(given(**strategies)(fn))

    return wrap


positive = lambda lo, hi: hs.floats(lo, hi, allow_nan=False, allow_infinity=False)
seeds = hs.integers(0, 2**31 - 1)


def _dirichlet(rng, conc, size=None):
    return rng.dirichlet(conc, size=size)


# ======================================================================= emission families
# ---- posterior predictive normalizes (every family, stats of random data with random weights)
@jax.jit
def _predictive_on_grid(family, grid, stats):
    """``log_predictive`` of every grid point: ``(G, K)``."""
    return jax.vmap(lambda x: family.log_predictive(x, stats))(grid)


def _stats(family, y, w):
    x, valid = family.prepare(jnp.asarray(y))
    return family.sufficient_statistics(x, jnp.asarray(w) * valid[:, None])


def _tan_grid(center, width, n=6001):
    """Points ``x = center + width tan(theta)`` and trapezoid weights ``dx/dtheta dtheta`` for an
    integral over the real line (exact substitution; handles Student-t tails)."""
    theta = np.linspace(-np.pi / 2, np.pi / 2, n)[1:-1]
    h = theta[1] - theta[0]
    return center + width * np.tan(theta), width / np.cos(theta) ** 2 * h


def _gaussian_family(kind, a, b):
    if kind == "niw":
        return em.GaussianNIW(np.array([a]), b, 2.5, np.array([[1.0 + b]]))
    if kind == "diagonal":
        return em.DiagonalGaussian(np.array([a]), b, 1.5, 1.0 + b)
    return em.AutoRegressive(1, np.array([[0.5, a]]), np.diag([1.0, b]), 2.5, np.array([[1.0 + b]]))


@fast_and_slow(a=positive(-3, 3), b=positive(0.1, 3), seed=seeds)
@pytest.mark.parametrize("kind", ["niw", "diagonal", "ar"])
def test_continuous_predictive_integrates_to_one(kind, a, b, seed):
    rng = np.random.default_rng(seed)
    fam = _gaussian_family(kind, a, b)
    y = rng.normal(a, 1.0 + b, size=(6, 1))
    w = rng.uniform(0, 1, size=(6, 2))
    stats = _stats(fam, y, w)
    grid, weight = _tan_grid(a, 2.0 + b)
    if kind == "ar":  # the predictive of y_t given the regressor x_t = [y_{t-1}; 1] = [0.7; 1]
        pts = em.autoregressive.ARInputs(jnp.asarray(grid[:, None]), jnp.broadcast_to(jnp.array([0.7, 1.0]), (grid.size, 2)))
    else:
        pts = jnp.asarray(grid[:, None])
    lp = np.asarray(_predictive_on_grid(fam, pts, stats))
    np.testing.assert_allclose(np.exp(lp).T @ weight, [1.0, 1.0], rtol=2e-4)


@fast_and_slow(kappa=positive(0.1, 20), kappa0=positive(0.01, 5), seed=seeds)
def test_vmf_predictive_integrates_over_the_circle(kappa, kappa0, seed):
    rng = np.random.default_rng(seed)
    fam = em.VonMisesFisher(kappa, np.array([1.0, 0.0]), kappa0)
    ang = rng.uniform(0, 2 * np.pi, 5)
    stats = _stats(fam, np.stack([np.cos(ang), np.sin(ang)], 1), rng.uniform(0, 1, size=(5, 2)))
    theta = np.linspace(0, 2 * np.pi, 4001)[:-1]
    lp = np.asarray(_predictive_on_grid(fam, jnp.asarray(np.stack([np.cos(theta), np.sin(theta)], 1)), stats))
    np.testing.assert_allclose(np.exp(lp).sum(0) * (theta[1] - theta[0]), [1.0, 1.0], rtol=1e-6)


@fast_and_slow(conc=positive(0.05, 5), seed=seeds)
def test_categorical_likelihood_and_predictive_normalize(conc, seed):
    rng = np.random.default_rng(seed)
    fam = em.Categorical(4, conc)
    symbols = jnp.arange(4)
    params = fam.sample_parameters(jax.random.key(seed), (3,))
    ll = np.asarray(fam.log_likelihoods(symbols, params))  # (C, K)
    np.testing.assert_allclose(np.exp(ll).sum(0), 1.0, rtol=1e-6)  # floored probabilities: tiny slack
    stats = _stats(fam, rng.integers(0, 4, 7), rng.uniform(0, 1, size=(7, 3)))
    lp = np.asarray(_predictive_on_grid(fam, symbols, stats))
    np.testing.assert_allclose(np.exp(lp).sum(0), 1.0, rtol=1e-10)


@fast_and_slow(a=positive(0.2, 5), b=positive(0.2, 5), seed=seeds)
def test_poisson_likelihood_and_predictive_normalize(a, b, seed):
    rng = np.random.default_rng(seed)
    fam = em.Poisson(a, b)
    counts = jnp.arange(400.0)
    stats = _stats(fam, rng.integers(0, 6, 5), rng.uniform(0, 1, size=(5, 2)))
    lp = np.asarray(_predictive_on_grid(fam, counts, stats))
    np.testing.assert_allclose(np.exp(logsumexp(lp, 0)), 1.0, rtol=1e-8)  # tail beyond 400 negligible here
    rate = jnp.asarray(rng.uniform(0.01, 30, size=3))
    ll = np.asarray(fam.log_likelihoods(counts, {"rate": rate}))
    np.testing.assert_allclose(np.exp(logsumexp(ll, 0)), 1.0, rtol=1e-8)


# ---- sample and log-likelihood agree
@jax.jit
def _draw_and_moments(family, params, key):
    """Observations of state 0 only: their mean, and the mean and second moment that
    ``log_likelihoods`` implies (quadrature on a fixed grid, D = 1)."""
    y = family.sample_observations(key, params, jnp.zeros(20000, jnp.int32))
    return y


@fast_and_slow(a=positive(-3, 3), b=positive(0.1, 3), seed=seeds)
@pytest.mark.parametrize("kind", ["niw", "diagonal"])
def test_gaussian_draws_match_the_likelihood(kind, a, b, seed):
    fam = _gaussian_family(kind, a, b)
    params = fam.sample_parameters(jax.random.key(seed), (2,))
    y = np.asarray(_draw_and_moments(fam, params, jax.random.key(seed + 1)))[:, 0]
    grid, weight = _tan_grid(float(params["mu"][0, 0]), 1.0)
    dens = np.exp(np.asarray(fam.log_likelihoods(jnp.asarray(grid[:, None]), params))[:, 0])
    m1, m2 = (dens * grid) @ weight, (dens * grid**2) @ weight
    var = m2 - m1**2
    assert abs(y.mean() - m1) < 5 * np.sqrt(var / y.size)
    assert abs(y.var() - var) < 5 * var * np.sqrt(2 / y.size)


@fast_and_slow(conc=positive(0.3, 3), seed=seeds)
def test_discrete_draws_match_the_likelihood(conc, seed):
    cat = em.Categorical(3, conc)
    params = cat.sample_parameters(jax.random.key(seed), (2,))
    draws = np.asarray(_draw_and_moments(cat, params, jax.random.key(seed + 1)))
    p = np.exp(np.asarray(cat.log_likelihoods(jnp.arange(3), params))[:, 0])
    freq = np.bincount(draws, minlength=3) / draws.size
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / draws.size) + 1e-12)
    poi = em.Poisson(conc, 0.5)
    params = poi.sample_parameters(jax.random.key(seed), (2,))
    draws = np.asarray(_draw_and_moments(poi, params, jax.random.key(seed + 2)))
    lam = float(params["rate"][0])
    assert abs(draws.mean() - lam) < 5 * np.sqrt(lam / draws.size) + 1e-9


@fast_and_slow(kappa=positive(0.2, 30), seed=seeds)
def test_vmf_draws_match_the_likelihood(kappa, seed):
    fam = em.VonMisesFisher(kappa, np.array([0.6, 0.8]), 1.0)
    params = fam.sample_parameters(jax.random.key(seed), (2,))
    y = np.asarray(_draw_and_moments(fam, params, jax.random.key(seed + 1)))
    theta = np.linspace(0, 2 * np.pi, 4001)[:-1]
    circle = np.stack([np.cos(theta), np.sin(theta)], 1)
    dens = np.exp(np.asarray(fam.log_likelihoods(jnp.asarray(circle), params))[:, 0]) * (theta[1] - theta[0])
    mean = dens @ circle  # E[y] by quadrature of the likelihood
    cov = (circle - mean).T @ ((circle - mean) * dens[:, None])
    se = np.sqrt(np.diag(cov) / y.shape[0])
    assert np.all(np.abs(y.mean(0) - mean) < 5 * se + 1e-12)


# ---- masks
@fast_and_slow(missing=hs.lists(hs.integers(0, 11), max_size=4), length=hs.integers(1, 12), seed=seeds)
def test_missing_and_padded_steps_contribute_nothing(missing, length, seed):
    rng = np.random.default_rng(seed)
    fam = em.DiagonalGaussian(np.zeros(2))
    params = fam.sample_parameters(jax.random.key(seed), (3,))
    y = rng.normal(size=(2, 12, 2))
    y[0, missing] = np.nan
    states = jnp.asarray(rng.integers(0, 3, size=(2, 12)))
    lengths = jnp.array([12, length])
    lp = np.asarray(nh.EmissionLikelihood(fam, params, states, lengths).log_prob(jnp.asarray(y)))
    assert np.all(lp[0, missing] == 0.0) and np.all(lp[1, length:] == 0.0)
    observed = np.ones(12, bool)
    observed[missing] = False
    assert np.all(np.isfinite(lp)) and np.all(lp[0, observed] != 0.0)
    y2 = y.copy()
    y2[1, length:] = 1e6  # padding may hold anything
    np.testing.assert_array_equal(np.asarray(nh.EmissionLikelihood(fam, params, states, lengths).log_prob(jnp.asarray(y2))), lp)


# ============================================================================ distributions
@fast_and_slow(seed=seeds, length=hs.integers(1, 4))
def test_markov_chain_normalizes_over_all_sequences(seed, length):
    rng = np.random.default_rng(seed)
    K, T = 3, 4
    init = _dirichlet(rng, np.ones(K))
    trans = _dirichlet(rng, np.ones(K), size=K)
    paths = jnp.asarray(list(itertools.product(range(K), repeat=T)))
    chain = nh.MarkovChain(init, trans, T)
    np.testing.assert_allclose(np.exp(np.asarray(chain.log_prob(paths))).sum(), 1.0, rtol=1e-10)
    # with lengths: the steps beyond the length do not count, so fixing them normalizes the rest
    short = nh.MarkovChain(init, trans, T, lengths=jnp.array(length))
    prefixes = paths[np.all(np.asarray(paths[:, length:]) == 0, axis=1)]
    np.testing.assert_allclose(np.exp(np.asarray(short.log_prob(prefixes))).sum(), 1.0, rtol=1e-10)
    # HDP rows with an escape column: the paths among represented states have the mass that stays
    esc_init = np.append(init * 0.9, 0.1)
    esc_trans = np.concatenate([trans * 0.8, np.full((K, 1), 0.2)], 1)
    total = np.exp(np.asarray(nh.MarkovChain(esc_init, esc_trans, T).log_prob(paths))).sum()
    np.testing.assert_allclose(total, 0.9 * 0.8 ** (T - 1), rtol=1e-10)


@fast_and_slow(seed=seeds)
def test_hidden_markov_model_normalizes_over_all_symbol_sequences(seed):
    import numpyro.distributions as dist

    rng = np.random.default_rng(seed)
    K, C, T = 2, 3, 3
    hmm = nh.HiddenMarkovModel(_dirichlet(rng, np.ones(K)), _dirichlet(rng, np.ones(K), size=K),
                               dist.Categorical(probs=_dirichlet(rng, np.ones(C), size=K)), num_steps=T)
    seqs = jnp.asarray(list(itertools.product(range(C), repeat=T)))
    np.testing.assert_allclose(np.exp(np.asarray(hmm.log_prob(seqs))).sum(), 1.0, rtol=1e-10)
    draws = np.asarray(hmm.sample(jax.random.key(seed), (4000,)))
    assert draws.shape == (4000, T)
    # frequencies of the first symbol against the marginal of y_1
    p1 = np.exp(np.asarray(hmm.log_prob(seqs))).reshape(C, -1).sum(1)
    freq = np.bincount(draws[:, 0], minlength=C) / 4000
    assert np.all(np.abs(freq - p1) < 5 * np.sqrt(p1 * (1 - p1) / 4000))


def _gauss_legendre_01(n=400):
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1), 0.5 * w


@fast_and_slow(gamma=positive(1.0, 10.0))
def test_gem_and_weak_limit_normalize_with_two_atoms(gamma):
    v, w = _gauss_legendre_01()
    pts = jnp.asarray(np.stack([v, 1 - v], 1))
    gem = np.exp(np.asarray(nh.GEM(gamma, 1).log_prob(pts)))
    np.testing.assert_allclose(gem @ w, 1.0, rtol=1e-6)
    np.testing.assert_allclose(gem, st.beta(1.0, gamma).pdf(v), rtol=1e-6)
    # two sticks: with beta = (v1, v2 (1 - v1), rest), |d beta / d v| = 1 - v1 and the v's are
    # independent Beta(1, gamma): the density in beta must match, and integrate to one
    u, wu = _gauss_legendre_01(100)
    v1, v2 = (a.ravel() for a in np.meshgrid(u, u, indexing="ij"))
    w2 = np.outer(wu, wu).ravel()
    beta = np.stack([v1, v2 * (1 - v1), (1 - v1) * (1 - v2)], 1)
    lp2 = np.asarray(nh.GEM(gamma, 2).log_prob(jnp.asarray(beta)))
    np.testing.assert_allclose(lp2 + np.log1p(-v1), st.beta(1.0, gamma).logpdf(v1) + st.beta(1.0, gamma).logpdf(v2), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.exp(lp2 + np.log1p(-v1)) @ w2, 1.0, rtol=1e-4)  # (1 - v)^(gamma - 1): not smooth at 1
    pts3 = jnp.asarray(np.stack([v, 1 - v, np.zeros_like(v)], 1))
    wl = np.exp(np.asarray(nh.WeakLimitBeta(2 * gamma, 2).log_prob(pts3)))  # Dir(gamma, gamma) head
    np.testing.assert_allclose(wl @ w, 1.0, rtol=1e-5)


@fast_and_slow(gamma=positive(0.2, 5.0), seed=seeds)
def test_gem_and_weak_limit_draws_match_their_means(gamma, seed):
    """Monte Carlo means within 5 standard errors, the errors from the exact variances (sample
    variances understate them for the skewed weights of small concentrations)."""
    K, n = 4, 4000
    # GEM: beta_k = v_k prod_{l<k} (1 - v_l), v ~ Beta(1, gamma) independent; E[v^2] = 2 / ((1 + g)(2 + g)),
    # E[(1 - v)^2] = g / (2 + g); the remainder is prod_{l<=K} (1 - v_l)
    k = np.arange(K)
    second = np.append(2.0 / ((1 + gamma) * (2 + gamma)) * (gamma / (2 + gamma)) ** k, (gamma / (2 + gamma)) ** K)
    gem = nh.GEM(gamma, K)
    mean = np.asarray(gem.mean)
    wl = nh.WeakLimitBeta(gamma, K)
    wl_mean = np.asarray(wl.mean)
    for d, m, var in ((gem, mean, second - mean**2), (wl, wl_mean, wl_mean * (1 - wl_mean) / (gamma + 1))):
        draws = np.asarray(d.sample(jax.random.key(seed), (n,)))
        assert np.allclose(draws.sum(-1), 1.0, atol=1e-6)
        assert np.all(np.abs(draws.mean(0) - m) <= 5 * np.sqrt(var / n) + 1e-12)


@fast_and_slow(alpha=positive(0.5, 5.0), kappa=positive(0.0, 5.0), seed=seeds)
def test_hdp_transitions_rows_are_dirichlet(alpha, kappa, seed):
    rng = np.random.default_rng(seed)
    beta = _dirichlet(rng, np.ones(4))
    d = nh.HDPTransitions(beta, alpha, kappa)
    value = _dirichlet(rng, np.ones(4), size=4)
    conc = np.asarray(d.concentration)
    ref = sum(st.dirichlet(conc[j]).logpdf(value[j]) for j in range(4))
    np.testing.assert_allclose(float(d.log_prob(jnp.asarray(value))), ref, rtol=1e-9)
    draws = np.asarray(d.sample(jax.random.key(seed), (3000,)))
    mean = np.asarray(d.mean)
    var = mean * (1 - mean) / (conc.sum(-1, keepdims=True) + 1)  # Dirichlet marginals
    assert np.all(np.abs(draws.mean(0) - mean) <= 5 * np.sqrt(var / 3000) + 1e-12)


# ---- batch shapes and expand
@fast_and_slow(fast_examples=2, batch=hs.sampled_from([(), (2,), (3, 2)]), sample=hs.sampled_from([(), (2,)]))
def test_batch_shapes_and_expand(batch, sample):
    batch, sample = tuple(batch), tuple(sample)
    rng = np.random.default_rng(0)
    gem = nh.GEM(np.full(batch, 2.0), 3)
    assert gem.batch_shape == batch and gem.event_shape == (4,)
    x = gem.sample(jax.random.key(0), sample)
    assert x.shape == sample + batch + (4,) and gem.log_prob(x).shape == sample + batch
    big = gem.expand((2,) + batch)
    assert big.batch_shape == (2,) + batch and big.sample(jax.random.key(1), sample).shape == sample + (2,) + batch + (4,)
    trans = nh.HDPTransitions(x, np.full(batch, 1.0), 0.5) if not sample else None
    if trans is not None:
        z = trans.sample(jax.random.key(2))
        assert z.shape == batch + (4, 4) and trans.log_prob(z).shape == batch
    chain = nh.MarkovChain(np.ones(3) / 3, _dirichlet(rng, np.ones(3), size=3), 5).expand(batch)
    z = chain.sample(jax.random.key(3), sample)
    assert z.shape == sample + batch + (5,) and chain.log_prob(z).shape == sample + batch
    # pytrees: distributions survive vmap and eval_shape
    shape = jax.eval_shape(lambda d: d.log_prob(x), gem)
    assert shape.shape == sample + batch
