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
from numpyro_hdphmm.durations import FiniteDiscrete, Geometric, NegativeBinomial, Poisson
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
    if isinstance(family, NegativeBinomial):
        # scipy's nbinom(n, q) counts failures before the n-th success (probability q): n = r, q = 1 - p
        r, p = (np.asarray(params[k], float)[None] for k in ("r", "p"))
        return stats.nbinom.logpmf(d - 1.0, r, 1.0 - p)
    raise TypeError(family)


LAW_CASES = [
    (Geometric(1.0, 2.0), {"stay": np.array([1e-6, 0.3, 0.5, 0.99, 1.0 - 1e-6])}),
    (Poisson(2.0, 0.2), {"rate": np.array([1e-8, 0.5, 3.0, 1e3, 1e5])}),
    (NegativeBinomial(), {"r": np.array([1, 2, 3, 10, 50]), "p": np.array([1e-6, 0.3, 0.5, 0.99, 1.0 - 1e-6])}),
    (NegativeBinomial.gamma_r(), {"r": np.array([1e-3, 0.7, 3.5, 40.0, 1e3]), "p": np.array([0.2, 1e-6, 0.9, 0.5, 0.999])}),
]


def _ids(cases):
    return [type(c[0]).__name__ + ("-gamma-r" if getattr(c[0], "integer_r", True) is False else "") for c in cases]


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_matches_scipy(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    got = np.asarray(jax.jit(family.log_pmf)(p, jnp.asarray(GRID)))  # jitted: one compile, not one per op
    want = scipy_log_pmf(family, params, GRID)
    assert got.shape == (len(GRID), 5)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


F32_RTOL = 2e-6  # a few float32 ulps of the result (+1 nat of slack near 0)


def float32_log_pmf_error(log_pmf, family, params):
    """``max |got - want| / (|want| + 1)`` of ``log_pmf(params, GRID)`` in float32 against the float64
    reference at the float32-rounded parameters; asserts finiteness."""
    p = {k: jnp.asarray(np.asarray(v, np.int32 if np.issubdtype(np.asarray(v).dtype, np.integer) else np.float32))
         for k, v in params.items()}
    with jax.enable_x64(False):
        got = np.asarray(jax.jit(log_pmf)(p, jnp.asarray(GRID, jnp.int32)))
    assert got.dtype == np.float32
    assert np.all(np.isfinite(got))
    want = scipy_log_pmf(family, {k: np.asarray(v, float) for k, v in p.items()}, GRID)
    return float(np.max(np.abs(got - want) / (np.abs(want) + 1.0)))


@pytest.mark.robustness
@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_float32(family, params):
    """float32: finite for d up to 1e5 and extreme parameters, and within a few ulps of the result
    (Loader's saddle-point form; the textbook ``gammaln`` form is ~0.1 nat off at d = 1e5)."""
    assert float32_log_pmf_error(family.log_pmf, family, params) < F32_RTOL


def _textbook_log_pmf(family):
    """The ``gammaln``/``xlogy`` formulas, whose terms of size ``d log d`` cancel."""
    def log_pmf(params, durations):
        x = jnp.asarray(durations).astype(jnp.float32)[..., None] - 1.0
        if isinstance(family, Poisson):
            lam = params["rate"]
            return jax.scipy.special.xlogy(x, lam) - lam - jax.scipy.special.gammaln(x + 1.0)
        r, p = params["r"].astype(jnp.float32), params["p"]
        return (jax.scipy.special.gammaln(x + r) - jax.scipy.special.gammaln(r) - jax.scipy.special.gammaln(x + 1.0)
                + jax.scipy.special.xlogy(x, p) + r * jnp.log1p(-p))
    return log_pmf


@pytest.mark.slow
@pytest.mark.negative_control
@pytest.mark.parametrize("family, params", LAW_CASES[1:], ids=_ids(LAW_CASES[1:]))
def test_log_pmf_float32_negative_control(family, params):
    assert float32_log_pmf_error(_textbook_log_pmf(family), family, params) > F32_RTOL


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_shape_and_support(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    d = jnp.array([[-3, 0, 1], [2, 5, 9]])
    lp = np.asarray(jax.jit(family.log_pmf)(p, d))
    assert lp.shape == (2, 3, 5)
    assert np.all(lp[0, :2] == -np.inf)
    assert np.all(np.isfinite(lp[0, 2]))


@pytest.mark.parametrize("family, params", [
    (Geometric(1.0, 2.0), {"stay": np.array([0.01, 0.5, 0.95])}),
    (Poisson(2.0, 0.2), {"rate": np.array([0.01, 2.0, 40.0])}),
    (NegativeBinomial(), {"r": np.array([1, 4, 10]), "p": np.array([0.01, 0.5, 0.9])}),
], ids=["Geometric", "Poisson", "NegativeBinomial"])
def test_pmf_sums_to_one(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    total = np.exp(np.asarray(jax.jit(family.log_pmf)(p, jnp.arange(1, 2001)))).sum(0)
    np.testing.assert_allclose(total, 1.0, atol=1e-10)


@pytest.mark.parametrize("family, params", LAW_CASES, ids=_ids(LAW_CASES))
def test_log_pmf_gradient_finite(family, params):
    p = {k: jnp.asarray(v) for k, v in params.items()}
    real = {k: v for k, v in p.items() if jnp.issubdtype(v.dtype, jnp.floating)}  # integer r: no gradient
    g = jax.jit(jax.grad(lambda q: jnp.sum(family.log_pmf({**p, **q}, jnp.asarray(GRID)))))(real)
    assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree_util.tree_leaves(g))


def test_mean():
    np.testing.assert_allclose(Geometric().mean({"stay": jnp.array([0.0, 0.5, 0.9])}), [1.0, 2.0, 10.0])
    np.testing.assert_allclose(Poisson().mean({"rate": jnp.array([0.0, 2.5])}), [1.0, 3.5])
    np.testing.assert_allclose(NegativeBinomial().mean({"r": jnp.array([1, 4]), "p": jnp.array([0.5, 0.2])}), [2.0, 2.0])


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
    if isinstance(family, NegativeBinomial):  # p | r with a one-point prior on r
        (r,) = family.r_values
        a, b = float(family.concentration1) + s, float(family.concentration0) + n * r
        return a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))
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
    (NegativeBinomial(1.5, 3.0, r_values=(3,)), {"r": jnp.full(K, 3), "p": jnp.full(K, 0.5)}, "p"),
]


@pytest.mark.statistical
@pytest.mark.parametrize("family, params, p", CONJUGATE, ids=["Geometric", "Poisson", "NegativeBinomial-p"])
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
FAMILIES = [Geometric(), Poisson(), NegativeBinomial(), NegativeBinomial.gamma_r()]
FAMILY_IDS = ["Geometric", "Poisson", "NegativeBinomial", "NegativeBinomial-gamma-r"]


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_sample_sites(family):
    def model():
        return family.sample_sites("y", 5)

    values = family.sample_parameters(jax.random.PRNGKey(0), (5,))
    data = {f"y_duration_{p}": v for p, v in values.items()}
    tr = numpyro.handlers.trace(numpyro.handlers.substitute(model, data)).get_trace()  # no NumPyro sampler compiled
    names = [f"y_duration_{p}" for p in family.param_names]
    assert list(tr) == names
    for name in names:
        site = tr[name]
        assert site["value"].shape == (5,)
        assert site["fn"].event_shape == (5,)
        assert site["infer"] == {"hdphmm_role": "duration", "hdphmm_name": "y"}
        assert np.isfinite(site["fn"].log_prob(site["value"]))


@pytest.mark.parametrize("family", [Geometric(1.0, [2.0, 3.0, 4.0]), Poisson([1.0, 2.0, 3.0], 0.5),
                                    NegativeBinomial([1.0, 2.0, 3.0]), NegativeBinomial.gamma_r(1.0, [1.0, 2.0, 3.0])],
                         ids=FAMILY_IDS)
def test_per_state_hyperparameters(family):
    """(3,) hyperparameters; the family passed through jit as a pytree argument."""
    prior = family.sample_parameters(jax.random.PRNGKey(0), (3,))
    post = jax.jit(lambda fam, p: fam.sample_posterior(jax.random.PRNGKey(1), p, jnp.array([2, 3]), jnp.array([0, 2]),
                                                       jnp.ones(2), 3))(family, prior)
    assert all(v.shape == (3,) for v in prior.values()) and all(v.shape == (3,) for v in post.values())


@pytest.mark.parametrize("family", FAMILIES, ids=FAMILY_IDS)
def test_pytree_roundtrip(family):
    leaves, tree = jax.tree_util.tree_flatten(family)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert type(again) is type(family) and repr(again) == repr(family)


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
    (lambda: NegativeBinomial(r_values=(0, 1)), "r_values"),
    (lambda: NegativeBinomial(r_values=(1, 1)), "r_values"),
    (lambda: NegativeBinomial(r_values=(1.5,)), "r_values"),
    (lambda: NegativeBinomial(r_values=()), "r_values"),
    (lambda: NegativeBinomial(r_values=(1, 2), r_probs=(0.5, 0.6)), "r_probs"),
    (lambda: NegativeBinomial(r_values=(1, 2), r_probs=(1.0,)), "r_probs"),
    (lambda: NegativeBinomial(concentration1=0.0), "concentration1"),
    (lambda: NegativeBinomial.gamma_r(r_rate=-1.0), "r_rate"),
    (lambda: NegativeBinomial.weakly_informative(0.5), "mean_duration"),
])
def test_validation(call, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        call()


@pytest.mark.parametrize("family, arg", [
    (Geometric(1.0, [2.0, 3.0]), "concentration0"),
    (Poisson([1.0, 2.0, 3.0, 4.0], 1.0), "concentration"),
    (NegativeBinomial.gamma_r(r_rate=[1.0, 2.0]), "r_rate"),
])
def test_per_state_hyperparameters_must_match_num_states(family, arg):
    with pytest.raises(ValueError, match=f"`{arg}`"):
        family.sample_sites("y", 3)
    with pytest.raises(ValueError, match=f"`{arg}`"):
        family.sample_posterior(jax.random.PRNGKey(0), {}, jnp.array([2]), jnp.array([0]), jnp.ones(1), 3)


def test_unknown_override():
    with pytest.raises(TypeError, match="bogus"):
        Poisson.weakly_informative(3.0, bogus=1.0)


def test_exposed_as_nh_durations():
    assert nh.durations.Poisson is Poisson and "durations" in nh.__all__


# ---------------------------------------------------------------------------------------- negative binomial: r
def test_weakly_informative_mean_negative_binomial():
    nb = NegativeBinomial.weakly_informative(12.0)
    assert nb.integer_r and nb.r_values == tuple(range(1, 11))
    mean_r = 5.5
    assert 1.0 + mean_r * float(nb.concentration1) / (float(nb.concentration0) - 1.0) == pytest.approx(12.0)
    g = NegativeBinomial.weakly_informative(12.0, r_concentration=3.0, r_rate=0.5)
    assert not g.integer_r
    assert 1.0 + 6.0 * float(g.concentration1) / (float(g.concentration0) - 1.0) == pytest.approx(12.0)


def test_finite_discrete():
    d = FiniteDiscrete((2, 5, 7), jnp.array([0.2, 0.3, 0.5]))
    np.testing.assert_allclose(d.log_prob(jnp.array([2, 5, 7, 3, 0])), [np.log(0.2), np.log(0.3), np.log(0.5), -np.inf, -np.inf])
    np.testing.assert_array_equal(d.enumerate_support(), [2, 5, 7])
    e = FiniteDiscrete((2, 5, 7), jnp.full((4, 3), 1 / 3))
    assert e.enumerate_support().shape == (3, 4) and e.enumerate_support(expand=False).shape == (3, 1)
    x = jax.jit(d.sample, static_argnums=1)(jax.random.PRNGKey(0), (20000,))
    assert x.dtype == jnp.int32 and set(np.unique(x)) == {2, 5, 7}
    np.testing.assert_allclose([np.mean(x == v) for v in (2, 5, 7)], [0.2, 0.3, 0.5], atol=0.015)
    assert float(d.mean) == pytest.approx(0.4 + 1.5 + 3.5)
    leaves, tree = jax.tree_util.tree_flatten(e)
    assert jax.tree_util.tree_unflatten(tree, leaves).values == (2, 5, 7)


# durations of state 0 from NB(r = 4, p = 0.6) + 1, state 1 a few, state 2 masked only, state 3 none
NB_DURATIONS = np.array([4, 9, 7, 3, 8, 6, 12, 5, 7, 10, 6, 4, 9, 8, 2, 11, 30, 40])
NB_STATES = np.array([0] * 14 + [1, 1, 2, 2])
NB_WEIGHTS = np.array([1.0] * 16 + [0.0, 0.0])
NB_CONC = (1.0, 2.0)


def enumerated_r_posterior(r_values, r_probs, durations, c1, c0):
    """Brute force, independent of the package: ``p(r | x)`` over the finite support from scipy's
    Beta-negative-binomial law, by the chain rule ``p(x_1..x_n | r) = prod_i p(x_i | x_<i, r)``, each
    factor a ``betanbinom`` with the Beta updated by the earlier durations (scipy's ``betanbinom(n, a,
    b)`` counts failures before ``n`` successes with success probability ``~ Beta(a, b)``: here ``n =
    r``, ``a = c0 + (number of earlier segments) r``, ``b = c1 + (earlier excess)``)."""
    x = np.asarray(durations) - 1
    logp = []
    for r in r_values:
        lp, seen = 0.0, 0.0
        for i, xi in enumerate(x):
            lp += stats.betanbinom.logpmf(xi, r, c0 + i * r, c1 + seen)
            seen += xi
        logp.append(lp)
    logp = np.log(r_probs) + np.array(logp)
    return np.exp(logp - special.logsumexp(logp))


def r_frequency_statistic(family, key=0):
    """Pearson's chi-square of the drawn ``r`` of every state against the enumerated posterior
    (states 2, 3: the prior), summed over states, and its degrees of freedom."""
    draws = posterior_draws(family, {"r": jnp.ones(K, jnp.int32), "p": jnp.full(K, 0.5)}, key,
                            NB_DURATIONS, NB_STATES, NB_WEIGHTS)["r"]
    r_values, r_probs = family.r_values, np.asarray(family.r_probs, float)
    chi2, dof = 0.0, 0
    for k in range(K):
        keep = (NB_STATES == k) & (NB_WEIGHTS > 0)
        want = enumerated_r_posterior(r_values, r_probs, NB_DURATIONS[keep], *NB_CONC)
        counts = np.array([np.sum(np.asarray(draws[:, k]) == v) for v in r_values])
        assert counts.sum() == NUM_DRAWS
        expected = NUM_DRAWS * want
        big = expected >= 5  # pool the sparse cells
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        if exp[-1] == 0:
            obs, exp = obs[:-1], exp[:-1]
        chi2 += float(np.sum((obs - exp) ** 2 / exp))
        dof += len(obs) - 1
    return chi2, dof


CHI2_LEVEL = 1e-5


@pytest.mark.statistical
def test_negative_binomial_r_posterior_frequencies():
    family = NegativeBinomial(*NB_CONC, r_values=(1, 2, 3, 4, 6, 9), r_probs=(0.1, 0.2, 0.2, 0.2, 0.2, 0.1))
    chi2, dof = r_frequency_statistic(family)
    assert chi2 < stats.chi2.ppf(1 - CHI2_LEVEL, dof)


class _NoShiftNegativeBinomial(NegativeBinomial):
    def sample_posterior(self, rng_key, params, durations, states, weights, num_states):
        return super().sample_posterior(rng_key, params, durations + 1, states, weights, num_states)


jax.tree_util.register_pytree_node_class(_NoShiftNegativeBinomial)


@pytest.mark.slow
@pytest.mark.negative_control
def test_negative_binomial_r_posterior_frequencies_negative_control():
    family = _NoShiftNegativeBinomial(*NB_CONC, r_values=(1, 2, 3, 4, 6, 9), r_probs=(0.1, 0.2, 0.2, 0.2, 0.2, 0.1))
    chi2, dof = r_frequency_statistic(family)
    assert chi2 > stats.chi2.ppf(1 - CHI2_LEVEL, dof)


# Gamma prior on r: quadrature of p(r | x) on a grid of log r
R_PRIOR = (2.0, 0.4)


def beta_nb_log_pmf(x, n, a, b):
    """The Beta-negative-binomial pmf written out (scipy's ``betanbinom(n, a, b)`` parameterization;
    scipy returns NaN for real ``n < 1``): ``C(n + x - 1, x) B(n + a, x + b) / B(a, b)``."""
    return (special.gammaln(n + x) - special.gammaln(n) - special.gammaln(x + 1.0)
            + special.betaln(n + a, x + b) - special.betaln(a, b))


def quadrature_posterior(durations, c1=NB_CONC[0], c0=NB_CONC[1], r_prior=R_PRIOR):
    """Grid ``u = log r`` (``10^-4 .. 10^3``, 40001 points) of the unnormalized density ``Gamma(e^u) e^u
    p(x | r)`` (the chain rule of :func:`enumerated_r_posterior`, with :func:`beta_nb_log_pmf`); returns
    the grid of ``r``, the normalized weights, and ``E[p | r]``, ``Var[p | r]`` on the grid."""
    u = np.linspace(np.log(1e-4), np.log(1e3), 40001)
    r = np.exp(u)
    x = np.asarray(durations) - 1
    lp = stats.gamma.logpdf(r, r_prior[0], scale=1.0 / r_prior[1]) + u
    seen = 0.0
    for i, xi in enumerate(x):
        lp = lp + beta_nb_log_pmf(xi, r, c0 + i * r, c1 + seen)
        seen += xi
    w = np.exp(lp - lp.max())
    w /= w.sum()
    a, b = c1 + x.sum(), c0 + len(x) * r
    return r, w, a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1))


def slice_chain_z(family, num_moves=5, key=0):
    """``[z of state 0's r, z of state 0's p, z of state 1's r]`` (the largest |z| of mean and variance). Chains started from exact posterior draws (inverse CDF on the quadrature grid) of state 0's
    ``r`` (state 1: the prior), moved ``num_moves`` times by ``sample_posterior``; the largest |z| of
    the means and variances of ``r`` and ``p`` of state 0 against the quadrature moments, and of
    state 1's ``r`` against the Gamma prior's."""
    keep = (NB_STATES == 0) & (NB_WEIGHTS > 0)
    grid, w, p_mean, p_var = quadrature_posterior(NB_DURATIONS[keep])
    rng = np.random.default_rng(key)
    r0 = grid[np.minimum(np.searchsorted(np.cumsum(w), rng.uniform(size=NUM_DRAWS)), len(grid) - 1)]
    states = jnp.asarray(np.where(NB_STATES == 0, 0, 1))  # two states: 0 with data, 1 empty
    weights = jnp.asarray(np.where(NB_STATES == 0, NB_WEIGHTS, 0.0))
    d = jnp.asarray(NB_DURATIONS)

    def chain(k, r_start):
        params = {"r": jnp.stack([r_start, 1.0]), "p": jnp.full(2, 0.5)}

        def move(params, kk):
            return family.sample_posterior(kk, params, d, states, weights, 2), None

        return jax.lax.scan(move, params, jax.random.split(k, num_moves))[0]

    out = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(key), NUM_DRAWS), jnp.asarray(r0))
    r_mean = np.sum(w * grid)
    r_var = np.sum(w * grid**2) - r_mean**2
    pm = np.sum(w * p_mean)
    pv = np.sum(w * (p_var + p_mean**2)) - pm**2
    a, b = R_PRIOR
    z = [moment_z(np.asarray(out["r"][:, :1]), np.array([r_mean]), np.array([r_var])),
         moment_z(np.asarray(out["p"][:, :1]), np.array([pm]), np.array([pv])),
         moment_z(np.asarray(out["r"][:, 1:]), np.array([a / b]), np.array([a / b**2]))]
    return z


@pytest.mark.statistical
def test_negative_binomial_gamma_r_slice_leaves_posterior_invariant():
    """Five slice moves from exact draws: the law of ``(r, p)`` stays the quadrature posterior (the
    moments of 4000 independent chains within 4.5 standard errors).  The quadrature's own error
    (40001 points over a density smooth in ``log r``) is far below the Monte Carlo error."""
    assert max(slice_chain_z(NegativeBinomial.gamma_r(*R_PRIOR, *NB_CONC))) < Z_BOUND


class _NoJacobianNegativeBinomial(NegativeBinomial):
    """Broken: the slice target of ``log r`` without the Jacobian ``e^u`` (equivalent to a
    ``Gamma(a - 1, b)`` prior, emulated by shifting ``r_concentration`` by one inside the move)."""

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states):
        broken = NegativeBinomial.gamma_r(self.r_concentration - 1.0, self.r_rate, self.concentration1,
                                          self.concentration0)
        return NegativeBinomial.sample_posterior(broken, rng_key, params, durations, states, weights, num_states)


jax.tree_util.register_pytree_node_class(_NoJacobianNegativeBinomial)


@pytest.mark.slow
@pytest.mark.negative_control
def test_negative_binomial_gamma_r_slice_negative_control():
    broken = _NoJacobianNegativeBinomial.gamma_r(*R_PRIOR, *NB_CONC)
    assert type(broken) is _NoJacobianNegativeBinomial
    assert slice_chain_z(broken)[0] > Z_BOUND  # state 0's r: the slice move (state 1's prior draw is broken too)


# ---------------------------------------------------------------------------------------- custom
from numpyro_hdphmm.durations import Custom  # noqa: E402


def test_custom_log_pmf_from_user_poisson():
    rate = jnp.array([0.5, 3.0, 40.0])
    fam = Custom(lambda k: dist.Poisson(rate[k]), 3)
    d = jnp.array([[-1, 0, 1], [2, 10, 100]])
    got = np.asarray(jax.jit(fam.log_pmf)({}, d))
    want = stats.poisson.logpmf(np.asarray(d)[..., None], np.asarray(rate))  # the law of d itself (no shift)
    assert got.shape == (2, 3, 3)
    assert np.all(got[0, :2] == -np.inf)
    np.testing.assert_allclose(got[0, 2:], want[0, 2:], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(fam.mean({}), rate)
    assert fam.param_names == () and not fam.owns_parameters and not fam.conjugate
    assert fam.sample_sites("y", 3) == {} and fam.sample_parameters(jax.random.PRNGKey(0), (3,)) == {}


def test_custom_gradient_and_sites_in_a_model():
    """Built from a user site inside a model: no duration sites of its own, and the log pmf is
    differentiable in the user's parameter (what the inner NUTS needs)."""
    def model():
        rate = numpyro.sample("rate", dist.Gamma(2.0, 0.2).expand([3]).to_event(1))
        fam = Custom(lambda k: dist.Poisson(rate[k]), 3)
        assert fam.sample_sites("y", 3) == {}
        numpyro.factor("durations", jnp.sum(fam.log_pmf({}, jnp.array([2, 5, 9]))))

    tr = numpyro.handlers.trace(numpyro.handlers.substitute(model, {"rate": jnp.array([1.0, 2.0, 3.0])})).get_trace()
    assert [n for n, s in tr.items() if s["type"] == "sample"] == ["rate", "durations"]

    def total(rate):
        return jnp.sum(Custom(lambda k: dist.Poisson(rate[k]), 3).log_pmf({}, jnp.array([2, 5, 9])))

    g = jax.jit(jax.grad(total))(jnp.array([1.0, 4.0, 8.0]))
    np.testing.assert_allclose(g, np.array([2 + 5 + 9]) / np.array([1.0, 4.0, 8.0]) - 3.0)


def test_custom_pytree_and_refusals():
    fam = Custom(lambda k: dist.Poisson(jnp.array([1.0, 2.0])[k]), 2)
    leaves, tree = jax.tree_util.tree_flatten(fam)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert again.fn is None and again.num_states == 2 and repr(again) == "Custom(Poisson, num_states=2)"
    out = jax.jit(lambda f: f.log_pmf({}, jnp.array([1, 2])))(fam)
    assert out.shape == (2, 2)
    with pytest.raises(ValueError, match="`num_states`"):
        fam.sample_sites("y", 3)
    with pytest.raises(NotImplementedError, match="user's own sample sites"):
        fam.sample_posterior(jax.random.PRNGKey(0), {}, jnp.array([2]), jnp.array([0]), jnp.ones(1), 2)


@pytest.mark.parametrize("fn, match", [
    (3.0, "callable"),
    (dist.Poisson(1.0), "callable"),
    (lambda k: k, "numpyro Distribution"),
    (lambda k: dist.Poisson(1.0), "batch shape"),
    (lambda k: dist.Normal(jnp.zeros(3)[k], 1.0), "discrete"),
    (lambda k: dist.Poisson(jnp.ones((3, 2))[k]).to_event(1), "event shape"),
])
def test_custom_validation(fn, match):
    with pytest.raises(ValueError, match=match):
        Custom(fn, 3)


@pytest.mark.robustness
def test_negative_binomial_r_marginal_float32_long_durations():
    """The posterior of r over its finite support from durations in the thousands: float32 within
    1e-3 in total variation of float64 (each ``log Gamma(x + r)`` is ~1e5 there; taken one by one
    in float32 their rounding errors would shift the log posterior by ~0.01 per duration)."""
    rng = np.random.default_rng(1)
    d = (stats.nbinom.rvs(6, 1 / 2000, size=40, random_state=rng) + 1).astype(np.int32)
    states = np.zeros(40, np.int32)
    w = np.ones(40)

    def probs(dtype):
        fam = NegativeBinomial(jnp.asarray(1.0, dtype), jnp.asarray(2.0, dtype))
        cand = jnp.broadcast_to(jnp.asarray(fam.r_values, dtype), (1, 10))
        lp = jnp.log(fam.r_probs) + fam.log_r_marginal(cand, jnp.asarray(d), jnp.asarray(states), jnp.asarray(w, dtype), 1)
        return jax.nn.softmax(lp[0])

    with jax.enable_x64(False):
        p32 = np.asarray(jax.jit(lambda: probs(jnp.float32))(), float)
    p64 = np.asarray(jax.jit(lambda: probs(jnp.float64))())
    assert 0.5 * np.abs(p32 - p64).sum() < 1e-3


def test_integer_r_marginal_is_the_general_one_and_float32_safe():
    """The finite prior's posterior of ``r`` (cumulative ``log1p`` coefficients) equals
    ``log_r_marginal`` at the candidates in float64 (to 1e-9), and, from durations in the thousands,
    float32 is within 1e-3 in total variation of float64 (as the general form above)."""
    rng = np.random.default_rng(1)
    d = (stats.nbinom.rvs(6, 1 / 2000, size=40, random_state=rng) + 1).astype(np.int32)
    d[:5] = [1, 2, 3, 1, 7]
    states = (np.arange(40) % 2).astype(np.int32)
    w = (np.arange(40) % 7 != 3).astype(float)
    fam = NegativeBinomial(1.0, 2.0, r_values=(1, 2, 5, 9))
    cand = jnp.broadcast_to(jnp.asarray(fam.r_values, jnp.float64), (2, 4))
    general = fam.log_r_marginal(cand, jnp.asarray(d), jnp.asarray(states), jnp.asarray(w), 2)
    integer = fam._integer_log_r_marginal(jnp.asarray(d), jnp.asarray(states), jnp.asarray(w), 2)
    np.testing.assert_allclose(np.asarray(integer), np.asarray(general), rtol=1e-9, atol=1e-9)

    def probs(dtype):
        f = NegativeBinomial(jnp.asarray(1.0, dtype), jnp.asarray(2.0, dtype))
        lp = jnp.log(f.r_probs) + f._integer_log_r_marginal(jnp.asarray(d), jnp.zeros(40, jnp.int32),
                                                            jnp.ones(40, dtype), 1)
        return jax.nn.softmax(lp[0])

    with jax.enable_x64(False):
        p32 = np.asarray(jax.jit(lambda: probs(jnp.float32))(), float)
    p64 = np.asarray(jax.jit(lambda: probs(jnp.float64))())
    assert 0.5 * np.abs(p32 - p64).sum() < 1e-3


# ---------------------------------------------------------------------------------------- prior draws = site priors
def prior_draw_z(family, draw_family=None):
    """Largest |z| of the mean and variance of 4000 ``sample_parameters`` draws (of ``draw_family``,
    default ``family``) against the moments of ``family``'s site distributions."""
    draw_family = draw_family or family
    draws = jax.jit(lambda k: draw_family.sample_parameters(k, (NUM_DRAWS, K)))(jax.random.PRNGKey(3))
    sites = numpyro.handlers.trace(numpyro.handlers.substitute(
        lambda: family.sample_sites("y", K), {f"y_duration_{p}": v[0] for p, v in draws.items()})).get_trace()
    z = []
    for p in family.param_names:
        fn = sites[f"y_duration_{p}"]["fn"].base_dist
        z.append(moment_z(np.asarray(draws[p], float), np.asarray(fn.mean, float), np.asarray(fn.variance, float)))
    return max(z)


PRIOR_FAMILIES = [Geometric(1.5, 3.0), Poisson(2.0, 0.5),
                  NegativeBinomial(1.5, 3.0, r_values=(1, 3, 8), r_probs=(0.2, 0.5, 0.3)),
                  NegativeBinomial.gamma_r(2.0, 0.4, 1.5, 3.0)]


@pytest.mark.statistical
@pytest.mark.parametrize("family", PRIOR_FAMILIES, ids=FAMILY_IDS)
def test_prior_draws_match_site_priors(family):
    """``sample_parameters`` (what a state without durations gets) draws from the sites' priors."""
    assert prior_draw_z(family) < Z_BOUND


@pytest.mark.slow
@pytest.mark.negative_control
def test_prior_draws_match_site_priors_negative_control():
    """Broken: Beta concentrations swapped in the draws."""
    assert prior_draw_z(Geometric(1.5, 3.0), Geometric(3.0, 1.5)) > Z_BOUND
