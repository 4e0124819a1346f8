"""Random draws of :mod:`numpyro_hdphmm._core.random`: the log-gamma sampler's moments (tiny
shapes included), Dirichlet and Beta draws, the stick-breaking remainder and the inverse-CDF
categorical draw (the one categorical sampler of the package)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import digamma, polygamma

from numpyro_hdphmm._core import random as draws


def test_log_gamma_moments():
    """E[log G] = digamma(a), Var[log G] = trigamma(a) for G ~ Gamma(a), including tiny a."""
    a = np.array([1e-3, 0.3, 1.0, 3.7, 50.0])
    n = 40000
    log_g = np.asarray(draws.log_gamma(jax.random.key(0), jnp.broadcast_to(jnp.asarray(a), (n, a.size))))
    assert np.all(np.isfinite(log_g))
    mean_se = np.sqrt(polygamma(1, a) / n)
    np.testing.assert_array_less(np.abs(log_g.mean(0) - digamma(a)), 5 * mean_se)
    np.testing.assert_allclose(log_g.var(0), polygamma(1, a), rtol=0.1)


def test_gamma_beta_dirichlet_moments():
    n = 40000
    g = np.asarray(draws.gamma(jax.random.key(1), jnp.full((n,), 2.5), 4.0))
    np.testing.assert_allclose([g.mean(), g.var()], [2.5 / 4.0, 2.5 / 16.0], rtol=0.03)
    b = np.asarray(draws.beta(jax.random.key(2), jnp.full((n,), 2.0), 5.0))
    np.testing.assert_allclose([b.mean(), b.var()], [2 / 7, 10 / (49 * 8)], rtol=0.03)
    conc = jnp.array([0.5, 2.0, 0.0, 3.5])  # the zero entry is a point mass at 0
    d = np.asarray(draws.dirichlet(jax.random.key(3), jnp.broadcast_to(conc, (n, 4))))
    assert np.all(d[:, 2] == 0.0)
    np.testing.assert_allclose(d.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(d.mean(0), np.asarray(conc) / 6.0, atol=0.005)


def test_dirichlet_tiny_concentrations_are_finite():
    d = np.asarray(draws.dirichlet(jax.random.key(0), jnp.full((1000, 5), 1e-30)))
    assert np.all(np.isfinite(d)) and np.allclose(d.sum(-1), 1.0)


def test_log_stick_remainder_is_beta_one_gamma():
    """``1 - exp(log_stick_remainder)`` is ``Beta(1, c)``: mean ``1 / (1 + c)``, never 0."""
    c = 2.5
    v = 1.0 - np.exp(np.asarray(draws.log_stick_remainder(jax.random.key(0), c, (50000,))))
    assert np.all(v > 0)
    np.testing.assert_allclose(v.mean(), 1.0 / (1.0 + c), rtol=0.02)


@pytest.mark.parametrize("size", [5, 16, 21, 64])  # 21: padded to 24, two-level cumulative sums
def test_categorical_distribution_and_zero_weights(size):
    """Frequencies match the weights; zero-weight entries are never drawn (also at u = 1)."""
    rng = np.random.default_rng(size)
    w = rng.uniform(size=size) * (rng.uniform(size=size) > 0.3)
    w[size // 2] = 0.0
    w[-1] = 0.0
    n = 50000
    u = draws.uniform_open(jax.random.key(0), (n,))
    k = np.asarray(jax.vmap(draws.categorical, in_axes=(None, 0))(jnp.asarray(w), u))
    assert np.all(w[k] > 0)
    freq = np.bincount(k, minlength=size) / n
    p = w / w.sum()
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-12)
    assert w[int(draws.categorical(jnp.asarray(w), 1.0))] > 0


def test_log_gamma_invalid_shapes_give_nan_without_hanging():
    """A NaN, infinite or non-positive shape has no draw: NaN (an endless rejection loop before)."""
    out = np.asarray(draws.log_gamma(jax.random.key(0), jnp.array([jnp.nan, jnp.inf, 0.0, -1.0, 2.0])))
    assert np.all(np.isnan(out[:4])) and np.isfinite(out[4])


def test_transition_counts_skip_empty_sequences():
    """A sequence of length 0 (padding of a batch) seats no customer in the start row."""
    from numpyro_hdphmm._core.crp import transition_counts

    states = jnp.array([[0, 1, 1], [2, 2, 0]])
    n, first = transition_counts(states, 3, lengths=jnp.array([3, 0]))
    np.testing.assert_array_equal(first, [1, 0, 0])
    np.testing.assert_array_equal(n, [[0, 1, 0], [0, 1, 0], [0, 0, 0]])


def _binomial_chi2_pvalues(sampler):
    """Chi-square p-values of ``sampler(key, counts, probs, max_total)`` against the Binomial pmf
    of each group (20,000 draws of 4 groups, one of them empty)."""
    from scipy import stats

    counts, probs = np.array([7, 0, 3, 12]), np.array([0.3, 0.5, 0.95, 0.05])
    draw = jax.jit(jax.vmap(lambda k: sampler(k, jnp.asarray(counts), jnp.asarray(probs), 25)))
    w = np.asarray(draw(jax.random.split(jax.random.key(0), 20000)))
    assert np.all(w[:, 1] == 0) and np.all((w >= 0) & (w <= counts))
    pvalues = []
    for g in (0, 2, 3):
        pmf = stats.binom.pmf(np.arange(counts[g] + 1), counts[g], probs[g])
        observed = np.bincount(w[:, g], minlength=counts[g] + 1)
        keep = pmf * len(w) >= 5  # pool the sparse tail into one cell
        obs = np.append(observed[keep], observed[~keep].sum())
        exp = np.append(pmf[keep], pmf[~keep].sum()) * len(w)
        obs, exp = obs[exp > 0], exp[exp > 0]
        pvalues.append(stats.chisquare(obs, exp).pvalue)
    return pvalues


def test_binomial_counts_follow_the_binomial_pmf():
    """The overrides' ``Binomial(m_jj, p_j)`` laid out as Bernoulli trials (``crp.sample_binomial_counts``):
    each group's counts against the exact pmf; a variant that drops every group's last trial fails."""
    from numpyro_hdphmm._core.crp import sample_binomial_counts

    assert min(_binomial_chi2_pvalues(sample_binomial_counts)) > 1e-3

    def one_short(key, counts, probs, max_total):  # negative control: n_g - 1 trials
        return sample_binomial_counts(key, jnp.maximum(counts - 1, 0), probs, max_total)

    assert min(_binomial_chi2_pvalues(one_short)) < 1e-6
