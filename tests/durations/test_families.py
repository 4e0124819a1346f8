"""Duration families (numpyro_hdphmm.durations): the laws against scipy.stats, the exact posterior
draws against the closed-form conjugate posteriors, the NumPyro sites, and argument validation.

Statistical checks report a z-score (or a TV distance) against a bound; each has a negative
control (marked slow) that runs the same check on a deliberately broken variant built here and
asserts that the check rejects it."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import special, stats

import numpyro_hdphmm as nh
from numpyro_hdphmm.durations import Geometric, Poisson
from numpyro_hdphmm.durations.base import duration_statistics

GRID = np.array([1, 2, 3, 7, 50, 1000, 100_000])

# ---------------------------------------------------------------------------------------- laws


def scipy_log_pmf(family, params, d):
    """The reference: scipy's (unshifted) laws at the shifted argument, float64, ``d (S,) -> (S, K)``."""
    d = np.asarray(d, float)[:, None]
    if isinstance(family, Geometric):
        return stats.geom.logpmf(d, 1.0 - np.asarray(params["stay"], float)[None])
    if isinstance(family, Poisson):
        return stats.poisson.logpmf(d - 1.0, np.asarray(params["rate"], float)[None])
    raise TypeError(family)


def term_magnitude(family, params, d):
    """The size of the largest term of the log pmf's formula (sets its float32 rounding error)."""
    d = np.asarray(d, float)[:, None]
    if isinstance(family, Geometric):
        stay = np.asarray(params["stay"], float)[None]
        return np.abs(np.log1p(-stay)) + (d - 1.0) * np.abs(np.log(stay))
    if isinstance(family, Poisson):
        lam = np.asarray(params["rate"], float)[None]
        return (d - 1.0) * np.abs(np.log(lam)) + lam + special.gammaln(d)
    raise TypeError(family)


LAW_CASES = [
    (Geometric(1.0, 2.0), {"stay": np.array([1e-6, 0.3, 0.5, 0.99, 1.0 - 1e-6])}),
    (Poisson(2.0, 0.2), {"rate": np.array([1e-8, 0.5, 3.0, 1e3, 1e5])}),
]


def _ids(cases):
    return [type(c[0]).__name__ for c in cases]


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_matches_scipy(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    got = np.asarray(family.log_pmf(p, jnp.asarray(GRID)))
    want = scipy_log_pmf(family, params, GRID)
    assert got.shape == (len(GRID), 5)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


@pytest.mark.robustness
@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_float32(family, params):
    """float32: finite for d up to 1e5 and extreme parameters, and within float32 rounding of the
    float64 reference: the error bound is a few ulps of the largest term of the formula (the terms
    cancel; their size, not the result's, sets the rounding error)."""
    p = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    with jax.enable_x64(False):
        got = np.asarray(family.log_pmf(p, jnp.asarray(GRID, jnp.int32)))
    assert got.dtype == np.float32
    assert np.all(np.isfinite(got))
    p32 = {k: np.asarray(np.asarray(v, np.float32), float) for k, v in params.items()}  # the rounded inputs
    want = scipy_log_pmf(family, p32, GRID)
    magnitude = term_magnitude(family, p32, GRID)
    assert np.all(np.abs(got - want) <= 2e-6 * magnitude + 1e-5)


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_shape_and_support(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    d = jnp.array([[-3, 0, 1], [2, 5, 9]])
    lp = np.asarray(family.log_pmf(p, d))
    assert lp.shape == (2, 3, 5)
    assert np.all(lp[0, :2] == -np.inf)
    assert np.all(np.isfinite(lp[0, 2]))


@pytest.mark.parametrize("family, params", [
    (Geometric(1.0, 2.0), {"stay": np.array([0.01, 0.5, 0.95])}),
    (Poisson(2.0, 0.2), {"rate": np.array([0.01, 2.0, 40.0])}),
], ids=["Geometric", "Poisson"])
def test_pmf_sums_to_one(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    total = np.exp(np.asarray(family.log_pmf(p, jnp.arange(1, 2001)))).sum(0)
    np.testing.assert_allclose(total, 1.0, atol=1e-10)


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_gradient_finite(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    g = jax.grad(lambda q: jnp.sum(family.log_pmf(q, jnp.asarray(GRID))))(p)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(g))


def test_mean():
    np.testing.assert_allclose(Geometric().mean({"stay": jnp.array([0.0, 0.5, 0.9])}), [1.0, 2.0, 10.0])
    np.testing.assert_allclose(Poisson().mean({"rate": jnp.array([0.0, 2.5])}), [1.0, 3.5])


# ---------------------------------------------------------------------------------------- posterior
K = 4
NUM_DRAWS = 4000
# states 0 and 1 have durations; state 2 only masked (weight 0) entries with huge durations; state 3 none
DURATIONS = np.array([3, 5, 4, 6, 2, 1, 1, 2, 1, 3, 9, 500, 700, 1])
STATES = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 0])
WEIGHTS = np.array([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0], float)


def conjugate_moments(family, durations=DURATIONS, states=STATES, weights=WEIGHTS):
    """The closed-form posterior mean and variance of each state's parameter, ``(K,)`` each."""
    n = np.array([weights[states == k].sum() for k in range(K)])
    s = np.array([(weights * (durations - 1))[states == k].sum() for k in range(K)])
    if isinstance(family, Geometric):
        a, b = float(family.concentration1) + s, float(family.concentration0) + n
        return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
    if isinstance(family, Poisson):
        a, b = float(family.concentration) + s, float(family.rate) + n
        return a / b, a / b**2
    raise TypeError(family)


def posterior_draws(family, params, key=0, durations=DURATIONS, states=STATES, weights=WEIGHTS):
    keys = jax.random.split(jax.random.PRNGKey(key), NUM_DRAWS)
    fn = jax.jit(jax.vmap(lambda k: family.sample_posterior(k, params, jnp.asarray(durations), jnp.asarray(states),
                                                            jnp.asarray(weights), K)))
    return fn(keys)


def moment_z(draws, mean, var):
    """The largest |z| of the sample mean and sample variance against the exact moments (the
    variance's standard error from the sample fourth central moment)."""
    draws = np.asarray(draws, float)
    n = draws.shape[0]
    z_mean = (draws.mean(0) - mean) / np.sqrt(var / n)
    m4 = ((draws - draws.mean(0)) ** 4).mean(0)
    z_var = (draws.var(0, ddof=1) - var) / np.sqrt(np.maximum(m4 - var**2, 1e-300) / n)
    return float(np.max(np.abs(np.concatenate([z_mean, z_var]))))


Z_BOUND = 4.5  # per-check false-alarm rate ~ 8 moments x 7e-6


CONJUGATE = [
    (Geometric(1.5, 2.0), {"stay": jnp.full(K, 0.5)}, "stay"),
    (Poisson(2.0, 0.5), {"rate": jnp.full(K, 1.0)}, "rate"),
]


@pytest.mark.statistical
@pytest.mark.parametrize("family, params, p", CONJUGATE, ids=["Geometric", "Poisson"])
def test_conjugate_posterior_moments(family, params, p):
    """Masked entries ignored (state 2 holds only weight-0 entries with durations 500, 700) and a
    state without durations (3) draws from the prior: both compared with the prior's moments."""
    draws = posterior_draws(family, params)[p]
    assert draws.shape == (NUM_DRAWS, K)
    mean, var = conjugate_moments(family)
    assert moment_z(draws, mean, var) < Z_BOUND


class _NoShiftGeometric(Geometric):
    """Broken: the posterior counts the whole duration ``d`` as "more steps" (ignores the shift)."""

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states):
        return super().sample_posterior(rng_key, params, durations + 1, states, weights, num_states)


class _NoShiftPoisson(Poisson):
    def sample_posterior(self, rng_key, params, durations, states, weights, num_states):
        return super().sample_posterior(rng_key, params, durations + 1, states, weights, num_states)


class _UnmaskedPoisson(Poisson):
    """Broken: padded entries counted."""

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states):
        return super().sample_posterior(rng_key, params, durations, states, jnp.ones_like(weights), num_states)


jax.tree_util.register_pytree_node_class(_NoShiftGeometric)
jax.tree_util.register_pytree_node_class(_NoShiftPoisson)
jax.tree_util.register_pytree_node_class(_UnmaskedPoisson)


@pytest.mark.slow
@pytest.mark.negative_control
@pytest.mark.parametrize("broken, good, params, p", [
    (_NoShiftGeometric(1.5, 2.0), Geometric(1.5, 2.0), {"stay": jnp.full(K, 0.5)}, "stay"),
    (_NoShiftPoisson(2.0, 0.5), Poisson(2.0, 0.5), {"rate": jnp.full(K, 1.0)}, "rate"),
    (_UnmaskedPoisson(2.0, 0.5), Poisson(2.0, 0.5), {"rate": jnp.full(K, 1.0)}, "rate"),
], ids=["Geometric-no-shift", "Poisson-no-shift", "Poisson-unmasked"])
def test_conjugate_posterior_moments_negative_control(broken, good, params, p):
    draws = posterior_draws(broken, params)[p]
    mean, var = conjugate_moments(good)
    assert moment_z(draws, mean, var) > Z_BOUND


def test_duration_statistics():
    st = duration_statistics(jnp.asarray(DURATIONS), jnp.asarray(STATES), jnp.asarray(WEIGHTS), K)
    np.testing.assert_allclose(st.count, [5, 6, 0, 0])
    np.testing.assert_allclose(st.excess, [15, 11, 0, 0])


# ---------------------------------------------------------------------------------------- sites
@pytest.mark.parametrize("family", [Geometric(), Poisson()], ids=["Geometric", "Poisson"])
def test_sample_sites(family):
    def model():
        return family.sample_sites("y", 5)

    tr = numpyro.handlers.trace(numpyro.handlers.seed(model, 0)).get_trace()
    names = [f"y_duration_{p}" for p in family.param_names]
    assert list(tr) == names
    for name in names:
        site = tr[name]
        assert site["value"].shape == (5,)
        assert site["fn"].event_shape == (5,)
        assert site["infer"] == {"hdphmm_role": "duration", "hdphmm_name": "y"}
        assert np.isfinite(site["fn"].log_prob(site["value"]))


@pytest.mark.parametrize("family", [Geometric(1.0, [2.0, 3.0, 4.0]), Poisson([1.0, 2.0, 3.0], 0.5)],
                         ids=["Geometric", "Poisson"])
def test_per_state_hyperparameters(family):
    p = family.sample_parameters(jax.random.PRNGKey(0), (3,))
    assert all(v.shape == (3,) for v in p.values())
    post = family.sample_posterior(jax.random.PRNGKey(1), p, jnp.array([2, 3]), jnp.array([0, 2]), jnp.ones(2), 3)
    assert all(v.shape == (3,) for v in post.values())


@pytest.mark.parametrize("family", [Geometric(), Poisson()], ids=["Geometric", "Poisson"])
def test_pytree_roundtrip(family):
    leaves, tree = jax.tree_util.tree_flatten(family)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert type(again) is type(family) and repr(again) == repr(family)
    out = jax.jit(lambda f: f.sample_parameters(jax.random.PRNGKey(0), (3,)))(family)
    assert all(v.shape == (3,) for v in out.values())


# ---------------------------------------------------------------------------------------- priors and validation
def test_weakly_informative_mean():
    g = Geometric.weakly_informative(12.0)
    a, b = float(g.concentration1), float(g.concentration0)
    assert (a + b - 1) / (b - 1) == pytest.approx(12.0)
    p = Poisson.weakly_informative(12.0)
    assert 1.0 + float(p.concentration) / float(p.rate) == pytest.approx(12.0)
    assert float(Poisson.weakly_informative(12.0, concentration=5.0).rate) == pytest.approx(5.0 / 11.0)


@pytest.mark.parametrize("call, arg", [
    (lambda: Geometric(-1.0, 2.0), "concentration1"),
    (lambda: Geometric(1.0, np.inf), "concentration0"),
    (lambda: Geometric(1.0, np.ones((2, 2))), "concentration0"),
    (lambda: Poisson("a", 1.0), "concentration"),
    (lambda: Poisson(1.0, 0.0), "rate"),
    (lambda: Poisson(1.0, [1.0, -1.0]), "rate"),
    (lambda: Poisson.weakly_informative(1.0), "mean_duration"),
    (lambda: Geometric.weakly_informative("x"), "mean_duration"),
    (lambda: Geometric.weakly_informative(5.0, concentration0=1.0), "concentration0"),
])
def test_validation(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


def test_unknown_override():
    with pytest.raises(TypeError, match="bogus"):
        Poisson.weakly_informative(3.0, bogus=1.0)


def test_exposed_as_nh_durations():
    assert nh.durations.Poisson is Poisson and "durations" in nh.__all__
