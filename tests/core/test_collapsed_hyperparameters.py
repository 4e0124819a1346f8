"""The collapsed hyperparameter updates of :mod:`numpyro_hdphmm._core.crp` and the slice sampler
they use (:mod:`numpyro_hdphmm._core.slice_sampling`).

Each update is run as many independent short chains (vmapped) from one start; their final draws
must follow the exact target, computed here by quadrature on a grid (Kolmogorov-Smirnov on the
marginal CDFs).  Each check has a negative control: the same test against a deliberately wrong
target (the wrong Jacobian, the start row left out, the infinite-model gamma likelihood under
the weak limit) must fail.

Cost: every check compiles one vmapped update (a few seconds each); the negative controls of
the pair and of ``gamma`` reuse the compiled update of their positive check (the start row is an
argument; the ``gamma`` draws are shared), the chains start near the posterior's bulk so a few
cycles reach it, and the slice sampler's own checks, the ``(alpha + kappa, rho)`` form and the
single-parameter form (each its own compilation) are marked slow.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

from numpyro_hdphmm._core import crp, slice_sampling

NUM_CHAINS = 3000
KS_ALPHA = 1e-3


def _ks_pvalue(draws, grid, log_density):
    """KS p-value of ``draws`` against the density ``exp(log_density)`` on the sorted ``grid``."""
    logp = log_density - np.max(log_density)
    p = np.exp(logp)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return stats.kstest(np.asarray(draws), lambda x: np.interp(x, grid, cdf)).pvalue


def _chains(update, num_chains=NUM_CHAINS, seed=0):
    return np.asarray(jax.jit(jax.vmap(update))(jax.random.split(jax.random.key(seed), num_chains)))


# ------------------------------------------------------------------------------- slice sampler
def _slice_gamma_log_space(key, shape, rate, steps=10):
    """``steps`` slice updates of ``x = log g``, ``g ~ Gamma(shape, rate)`` (density ``e^{shape x - rate e^x}``)."""
    x = jnp.asarray(3.0)
    for i in range(steps):
        x = slice_sampling.slice_sample(jax.random.fold_in(key, i), x, lambda v: shape * v - rate * jnp.exp(v))
    return x


@pytest.mark.slow
@pytest.mark.statistical
def test_slice_sample_targets_its_density():
    """The sampler alone (the collapsed updates' checks below exercise it too, in the default set)."""
    x = _chains(lambda k: _slice_gamma_log_space(k, 2.5, 4.0))
    assert stats.kstest(np.exp(x), stats.gamma(2.5, scale=1 / 4.0).cdf).pvalue > KS_ALPHA


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_slice_sample_negative_control(monkeypatch):
    """A slice level drawn too low (``log f(x0) - 2E``: a slice of the wrong height) is detected."""
    real = slice_sampling.random

    class WrongLevel:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def exponential(key, shape=(), dtype=float):
            return 2.0 * real.exponential(key, shape, dtype)

    monkeypatch.setattr(slice_sampling, "random", WrongLevel())
    x = _chains(lambda k: _slice_gamma_log_space(k, 2.5, 4.0))
    assert stats.kstest(np.exp(x), stats.gamma(2.5, scale=1 / 4.0).cdf).pvalue < KS_ALPHA


def _three_loop_slice_sample(rng_key, x0, log_density, width, max_steps_out, max_shrink):
    """Neal's (2003) Figs. 3 and 5 as three loops (the form ``slice_sample`` had before it became
    one loop with one density site): the reference for the same points from the same uniforms."""
    from jax import lax, random

    f = lambda x: jnp.where(jnp.isnan(log_density(x)), -jnp.inf, log_density(x))
    k_level, k_place, k_split, k_shrink = random.split(rng_key, 4)
    level = f(x0) - random.exponential(k_level, (), x0.dtype)
    left = x0 - width * random.uniform(k_place, (), x0.dtype)
    right = left + width
    j = jnp.floor(max_steps_out * random.uniform(k_split, (), x0.dtype)).astype(jnp.int32)
    cond = lambda c: (c[1] > 0) & (c[2] > level)
    left = lax.while_loop(cond, lambda c: (c[0] - width, c[1] - 1, f(c[0] - width)), (left, j, f(left)))[0]
    right = lax.while_loop(cond, lambda c: (c[0] + width, c[1] - 1, f(c[0] + width)),
                           (right, max_steps_out - 1 - j, f(right)))[0]

    def shrink(c):
        lo, hi, _, _, i = c
        x1 = lo + (hi - lo) * random.uniform(random.fold_in(k_shrink, i), (), x0.dtype)
        inside = f(x1) > level
        return (jnp.where(~inside & (x1 < x0), x1, lo), jnp.where(~inside & (x1 >= x0), x1, hi), x1, inside, i + 1)

    out = lax.while_loop(lambda c: ~c[3] & (c[4] < max_shrink), shrink, (left, right, x0, jnp.zeros((), bool), 0))
    return jnp.where(out[3], out[2], x0)


@pytest.mark.parametrize("width,max_steps_out,max_shrink", [(1.0, 8, 40), (0.1, 1, 3), (5.0, 3, 1)])
def test_slice_sample_is_neals_three_loops(width, max_steps_out, max_shrink):
    """The one-loop sampler visits the points of the three-loop form: the same draws to rounding, for smooth,
    bounded-support and needle-thin slices (where the shrinkage cap returns ``x0``)."""
    densities = [lambda x: -0.5 * x**2, lambda x: jnp.where(x > 0, 3 * jnp.log(x) - x, -jnp.inf),
                 lambda x: jnp.where(jnp.abs(x) < 0.01, 0.0, -jnp.inf)]
    keys = jax.random.split(jax.random.key(0), 200)
    x0 = jnp.linspace(0.005, 4.0, 200)
    for f in densities:
        ours = jax.vmap(lambda k, x: slice_sampling.slice_sample(k, x, f, width=width, max_steps_out=max_steps_out,
                                                                 max_shrink=max_shrink))(keys, x0)
        ref = jax.vmap(lambda k, x: _three_loop_slice_sample(k, x, f, width, max_steps_out, max_shrink))(keys, x0)
        # the same points up to rounding: the two programs may round ``lo + (hi - lo) u`` apart in
        # the last bit (XLA contracts differently per program, e.g. without backend optimization)
        np.testing.assert_allclose(ours, ref, rtol=1e-13, atol=0)


# ------------------------------------------------------------------------- alpha, kappa | z, beta
N = np.array([[40, 3, 0], [2, 25, 1], [1, 0, 12]])
FIRST = np.array([2, 1, 0])
BETA = np.array([0.45, 0.3, 0.2, 0.05])  # three states and the remaining mass


def _log_lik_grid(alpha, kappa):
    """``log p(z | beta, alpha, kappa)`` in NumPy (Dirichlet-multinomial rows, start row last)."""
    out = np.zeros(np.broadcast(alpha, kappa).shape)
    for j in range(4):
        counts = np.append(N[j], 0) if j < 3 else np.append(FIRST, 0)
        conc = alpha[..., None] * BETA + (kappa[..., None] * (np.arange(4) == j) if j < 3 else 0.0)
        out += gammaln(conc.sum(-1)) - gammaln(conc.sum(-1) + counts.sum())
        out += np.sum(np.where(counts > 0, gammaln(conc + counts) - gammaln(np.where(counts > 0, conc, 1.0)), 0.0), -1)
    return out


@functools.lru_cache(maxsize=None)
def _alpha_kappa_update(priors, alpha0, kappa0, cycles):
    """Jitted ``(keys (C,), first (K,)) -> (C, 2)`` final ``(alpha, kappa)`` of ``C`` chains: the
    start row's counts are an argument so the negative control reuses the compilation."""
    beta, n = jnp.asarray(BETA), jnp.asarray(N)
    one = lambda k, first: jnp.stack(crp.sample_alpha_kappa_collapsed(k, alpha0, kappa0, beta, n, first, priors,
                                                                      num_cycles=cycles))
    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def _alpha_kappa_chains(priors, alpha0=2.0, kappa0=10.0, cycles=12, first=FIRST, seed=0):
    """Final draws of ``NUM_CHAINS`` chains from ``(alpha0, kappa0)`` (near the posterior's bulk,
    log kappa ~ 2.3, log alpha ~ 0.8): ``(C, 2)``."""
    keys = jax.random.split(jax.random.key(seed), NUM_CHAINS)
    return np.asarray(_alpha_kappa_update(priors, alpha0, kappa0, cycles)(keys, jnp.asarray(first)))


def _pair_posterior(a_prior, k_prior):
    """Marginal log densities of ``log alpha`` and ``log kappa`` on a grid (independent Gamma priors)."""
    la = np.linspace(-6, 5, 500)
    lk = np.linspace(-4, 6, 500)
    A, K = np.meshgrid(np.exp(la), np.exp(lk), indexing="ij")
    logp = (stats.gamma(a_prior[0], scale=1 / a_prior[1]).logpdf(A) + np.log(A)
            + stats.gamma(k_prior[0], scale=1 / k_prior[1]).logpdf(K) + np.log(K) + _log_lik_grid(A, K))
    p = np.exp(logp - logp.max())
    return la, np.log(p.sum(1)), lk, np.log(p.sum(0))


def test_alpha_kappa_collapsed_matches_quadrature():
    priors = crp.HyperPriors(alpha=(2.0, 1.0), kappa=(1.5, 0.2))
    draws = _alpha_kappa_chains(priors)
    la, pa, lk, pk = _pair_posterior(priors.alpha, priors.kappa)
    assert _ks_pvalue(np.log(draws[:, 0]), la, pa) > KS_ALPHA
    assert _ks_pvalue(np.log(draws[:, 1]), lk, pk) > KS_ALPHA


def test_alpha_kappa_collapsed_detects_missing_start_row():
    """Negative control: the likelihood without the start row's Dirichlet-multinomial (the update
    run with no first states) against the target with it."""
    priors = crp.HyperPriors(alpha=(2.0, 1.0), kappa=(1.5, 0.2))
    draws = _alpha_kappa_chains(priors, first=np.zeros_like(FIRST))
    la, pa, _, _ = _pair_posterior(priors.alpha, priors.kappa)
    assert _ks_pvalue(np.log(draws[:, 0]), la, pa) < KS_ALPHA


@pytest.mark.slow
@pytest.mark.statistical
def test_c_rho_form():
    """``alpha + kappa ~ Gamma``, ``rho ~ Beta`` (Fox et al. App. III)."""
    c_prior, rho_prior = (3.0, 0.5), (2.0, 2.0)
    draws = _alpha_kappa_chains(crp.HyperPriors(c=c_prior, rho=rho_prior))
    lc, lr = np.linspace(-4, 5, 400), np.linspace(-7, 7, 400)
    C, V = np.meshgrid(np.exp(lc), lr, indexing="ij")
    R = 1 / (1 + np.exp(-V))
    logp = (stats.gamma(c_prior[0], scale=1 / c_prior[1]).logpdf(C) + np.log(C)
            + stats.beta(*rho_prior).logpdf(R) + np.log(R * (1 - R)) + _log_lik_grid(C * (1 - R), C * R))
    p = np.exp(logp - logp.max())
    assert _ks_pvalue(np.log(draws.sum(1)), lc, np.log(p.sum(1))) > KS_ALPHA
    assert _ks_pvalue(np.log(draws[:, 1] / draws[:, 0]), lr, np.log(p.sum(0))) > KS_ALPHA


@pytest.mark.slow
@pytest.mark.statistical
def test_single_parameter_form():
    """``alpha`` alone (``kappa`` fixed at 3)."""
    draws = _alpha_kappa_chains(crp.HyperPriors(alpha=(2.0, 1.0)), kappa0=3.0)
    assert np.all(draws[:, 1] == 3.0)
    la = np.linspace(-6, 5, 2000)
    logp = stats.gamma(2.0).logpdf(np.exp(la)) + la + _log_lik_grid(np.exp(la), np.full_like(la, 3.0))
    assert _ks_pvalue(np.log(draws[:, 0]), la, logp) > KS_ALPHA


# ----------------------------------------------------------------------------------- gamma | mbar
MBAR = np.array([3, 1, 2, 0, 0, 0])


def _gamma_posterior(prior, weak_limit):
    lg = np.linspace(-8, 6, 4000)
    g = np.exp(lg)
    if weak_limit:
        lik = gammaln(g) - gammaln(g + MBAR.sum()) + np.sum(gammaln(g[:, None] / 6 + MBAR) - gammaln(g[:, None] / 6), 1)
    else:
        lik = 3 * lg + gammaln(g) - gammaln(g + MBAR.sum())
    return lg, stats.gamma(prior[0], scale=1 / prior[1]).logpdf(g) + lg + lik


GAMMA_PRIOR = (2.0, 0.5)


@functools.lru_cache(maxsize=None)
def _gamma_draws(weak_limit):
    """Final ``gamma`` of ``NUM_CHAINS`` chains of 10 cycles from 1 (shared by the negative control)."""
    return _chains(lambda k: crp.sample_gamma_collapsed(k, 1.0, jnp.asarray(MBAR), GAMMA_PRIOR, weak_limit=weak_limit,
                                                          num_cycles=10))


@pytest.mark.parametrize("weak_limit", [True, False])
def test_gamma_collapsed_matches_quadrature(weak_limit):
    lg, logp = _gamma_posterior(GAMMA_PRIOR, weak_limit)
    assert _ks_pvalue(np.log(_gamma_draws(weak_limit)), lg, logp) > KS_ALPHA


def test_gamma_collapsed_detects_infinite_form_under_weak_limit():
    """Negative control: the weak-limit draws against the infinite model's ``gamma`` posterior."""
    draws = _gamma_draws(True)
    lg, logp = _gamma_posterior(GAMMA_PRIOR, weak_limit=False)
    assert _ks_pvalue(np.log(draws), lg, logp) < KS_ALPHA


def test_sample_global_rejects_unknown_update():
    with pytest.raises(ValueError, match="hyperparameters"):
        crp.sample_global(jax.random.key(0), jnp.zeros((1, 3), jnp.int32), jnp.array([3]), jnp.full(3, 1 / 3),
                          crp.Concentrations(1.0, 1.0, 1.0), crp.HyperPriors(), weak_limit=True, hyperparameters="gibbs")
