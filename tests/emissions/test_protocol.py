"""Protocol conformance of every emission family, written once.

Family-specific checks (closed forms, quadrature, moments) live in the per-family files; these
tests check the properties every conjugate family must have, with references that do not use
the code under test where possible (the Monte Carlo marginal uses only prior draws and the
likelihood)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers

from numpyro_hdphmm import emissions as em
from numpyro_hdphmm.emissions import state_weights

K = 3


def _unit(v):
    v = np.asarray(v, float)
    return v / np.linalg.norm(v)


FAMILIES = {
    "gaussian_niw": lambda: em.GaussianNIW(loc=np.zeros(2), mean_precision=1.0, df=5.0, scale=np.eye(2)),
    "diagonal": lambda: em.DiagonalGaussian(loc=np.zeros(2), mean_precision=1.0, concentration=3.0, rate=2.0),
    "categorical": lambda: em.Categorical(num_categories=4, concentration=1.0),
    "poisson": lambda: em.Poisson(concentration=2.0, rate=1.0),
    "poisson_vector": lambda: em.Poisson(concentration=np.array([2.0, 5.0]), rate=np.array([1.0, 0.5]), event_shape=(2,)),
    "vmf": lambda: em.VonMisesFisher(concentration=5.0, prior_mean=_unit([1.0, 1.0, 0.0]), prior_concentration=2.0),
    "autoregressive": lambda: em.AutoRegressive(
        order=1, loc=np.zeros((2, 3)), col_precision=np.eye(3), df=5.0, scale=np.eye(2), affine=True
    ),
}


@pytest.fixture(params=sorted(FAMILIES))
def family(request):
    return FAMILIES[request.param]()


def _data(family, t, key=0):
    """Observations drawn from the model itself: parameters from the prior, states uniform."""
    k1, k2, k3 = jax.random.split(jax.random.key(key), 3)
    params = family.sample_parameters(k1, (K,))
    states = jax.random.randint(k2, (t,), 0, K)
    y = family.sample_observations(k3, params, states)
    return y, params, states


def _row(x, t):
    return jax.tree_util.tree_map(lambda a: a[t], x)


def _add(a, b):
    return jax.tree_util.tree_map(jnp.add, a, b)


def test_shapes_and_finiteness(family):
    y, params, states = _data(family, 20)
    assert y.shape == (20,) + tuple(family.event_shape)
    x, valid = family.prepare(y)
    assert valid.shape == (20,) and bool(jnp.all(valid))
    ll = family.log_likelihoods(x, params)
    assert ll.shape == (20, K) and np.all(np.isfinite(np.asarray(ll)))
    w = state_weights(states, valid, K)
    stats = family.sufficient_statistics(x, w)
    assert all(leaf.shape[0] == K for leaf in jax.tree_util.tree_leaves(stats))
    post = family.posterior(stats)
    assert type(post) is type(family) and post.batch_shape == (K,)
    lm = family.log_marginal_likelihood(stats)
    assert lm.shape == (K,) and np.all(np.isfinite(np.asarray(lm)))
    lp = family.log_predictive(_row(x, 0), stats)
    assert lp.shape == (K,) and np.all(np.isfinite(np.asarray(lp)))
    draws = family.sample_posterior(jax.random.key(5), stats)
    assert set(draws) == set(family.param_names)
    assert all(v.shape[0] == K for v in draws.values())
    assert family.log_prior(draws).shape == (K,)


def test_chain_rule(family):
    """log p(x_1:T) = sum_t log p(x_t | x_<t): marginal vs sequential posterior predictives."""
    y, _, _ = _data(family, 8, key=1)
    x, valid = family.prepare(y)
    t = y.shape[0]
    ones = jnp.ones((t, 1))
    total = family.log_marginal_likelihood(family.sufficient_statistics(x, ones))[0]
    seq = 0.0
    for s in range(t):
        w = (jnp.arange(t) < s).astype(float)[:, None]
        seq += family.log_predictive(_row(x, s), family.sufficient_statistics(x, w))[0]
    np.testing.assert_allclose(seq, total, rtol=1e-8, atol=1e-8)


def test_empty_statistics_give_the_prior(family):
    y, params, _ = _data(family, 5, key=2)
    x, _ = family.prepare(y)
    stats = family.sufficient_statistics(x, jnp.zeros((5, K)))
    np.testing.assert_allclose(family.log_marginal_likelihood(stats), 0.0, atol=1e-10)
    post = family.posterior(stats)
    for a, b in zip(jax.tree_util.tree_leaves(post), jax.tree_util.tree_leaves(family)):
        np.testing.assert_allclose(np.asarray(a), np.broadcast_to(np.asarray(b), np.shape(a)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(post.log_prior(params), family.log_prior(params), rtol=1e-10)


def test_statistics_add_and_masks_ignore_data(family):
    y, _, states = _data(family, 12, key=3)
    x, valid = family.prepare(y)
    w = state_weights(states, valid, K)
    half = (jnp.arange(12) < 6).astype(float)[:, None]
    s_all = family.sufficient_statistics(x, w)
    s_sum = _add(family.sufficient_statistics(x, w * half), family.sufficient_statistics(x, w * (1 - half)))
    for a, b in zip(jax.tree_util.tree_leaves(s_all), jax.tree_util.tree_leaves(s_sum)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)

    # a zero-weight step does not matter whatever its value (here: replaced by other data);
    # autoregressive regressors depend on neighbouring steps: test_autoregressive.py covers them
    if isinstance(family, em.AutoRegressive):
        return
    y2, _, _ = _data(family, 12, key=4)
    keep = (jnp.arange(12) % 2 == 0)
    y_mix = jnp.where(keep.reshape((-1,) + (1,) * (y.ndim - 1)), y, y2)
    x_mix, _ = family.prepare(y_mix)
    wk = w * keep[:, None]
    np.testing.assert_allclose(
        family.log_marginal_likelihood(family.sufficient_statistics(x, wk)),
        family.log_marginal_likelihood(family.sufficient_statistics(x_mix, wk)),
        rtol=1e-10,
    )


def test_missing_observations(family):
    y, params, states = _data(family, 10, key=6)
    y = jnp.asarray(y, float)
    y = y.at[3].set(jnp.nan)
    x, valid = family.prepare(y)
    assert not bool(valid[3])
    pw = family.pointwise_log_likelihood(y, params, states)
    assert float(pw[3]) == 0.0 and np.all(np.isfinite(np.asarray(pw)))
    stats = family.sufficient_statistics(x, state_weights(states, valid, K))
    assert np.all(np.isfinite(np.asarray(family.log_marginal_likelihood(stats))))


def test_monte_carlo_marginal(family):
    """log p(x) = log E_{theta ~ prior}[prod_t f(x_t | theta)], estimated from prior draws with
    the likelihood only; tolerance: 5 delta-method standard errors."""
    y, _, _ = _data(family, 3, key=7)
    x, _ = family.prepare(y)
    n = 100000
    thetas = family.sample_parameters(jax.random.key(8), (n,))
    loglik = family.log_likelihoods(x, thetas).sum(0)  # (n,)
    m = np.max(np.asarray(loglik))
    w = np.exp(np.asarray(loglik) - m)
    estimate = m + np.log(w.mean())
    se = w.std() / (w.mean() * np.sqrt(n))
    exact = family.log_marginal_likelihood(family.sufficient_statistics(x, jnp.ones((3, 1))))[0]
    assert abs(estimate - float(exact)) < 5 * se + 1e-3


def test_sites_match_log_prior(family):
    """The explicit NumPyro sites and the family's log_prior define the same prior density."""
    def model():
        return family.sample_sites("y", K)

    tr = handlers.trace(handlers.seed(model, 0)).get_trace()
    params = {p: tr[f"y_{p}"]["value"] for p in family.param_names}
    for p in family.param_names:
        site = tr[f"y_{p}"]
        assert site["value"].shape[0] == K
        assert site["infer"].get("hdphmm_role") == "emission"
    site_lp = sum(jnp.sum(tr[f"y_{p}"]["fn"].log_prob(tr[f"y_{p}"]["value"])) for p in family.param_names)
    np.testing.assert_allclose(site_lp, jnp.sum(family.log_prior(params)), rtol=1e-8)


def test_jit_vmap_eval_shape(family):
    y, params, states = _data(family, 7, key=9)

    @jax.jit
    def marg(fam, y):
        x, valid = fam.prepare(y)
        return fam.log_marginal_likelihood(fam.sufficient_statistics(x, state_weights(states, valid, K)))

    np.testing.assert_allclose(marg(family, y), marg.__wrapped__(family, y), rtol=1e-10)
    batched = jax.vmap(lambda yy: marg(family, yy))(jnp.stack([y, y]))
    assert batched.shape == (2, K)
    shape = jax.eval_shape(lambda fam: fam.log_likelihoods(fam.prepare(y)[0], params), family)
    assert shape.shape == (7, K)
    leaves, tree = jax.tree_util.tree_flatten(family)
    assert type(jax.tree_util.tree_unflatten(tree, leaves)) is type(family)


def test_weakly_informative(family):
    y, _, _ = _data(family, 50, key=10)
    y = jnp.asarray(y, float).at[4].set(jnp.nan)
    # data of shape (T, D) are ambiguous for Poisson counts ((N, T) scalar sequences?): say so
    extra = {"event_shape": family.event_shape} if isinstance(family, em.Poisson) else {}
    fam = type(family).weakly_informative(y, **extra)
    assert fam.batch_shape == ()
    x, valid = fam.prepare(y)
    stats = fam.sufficient_statistics(x, valid[:, None].astype(float))
    assert np.isfinite(float(fam.log_marginal_likelihood(stats)[0]))


def test_add_to_row_keeps_float32_statistics_under_x64():
    """float32 statistics (float32 observations) updated with a float64 weight keep their dtype
    (DirectAssignmentGibbs on float32 data under x64 failed in dynamic_update_slice)."""
    from numpyro_hdphmm.emissions.collapsed import add_to_row

    stats = {"n": jnp.zeros((3, 2), jnp.float32)}
    out = add_to_row(stats, jnp.asarray(1), {"n": jnp.ones((1, 2), jnp.float32)}, jnp.asarray(1.0, jnp.float64))
    assert out["n"].dtype == jnp.float32
    np.testing.assert_array_equal(out["n"], [[0, 0], [1, 1], [0, 0]])


@pytest.mark.parametrize("name", ["categorical", "gaussian_niw", "poisson_vector", "autoregressive"])
def test_write_once_move_matches_the_three_updates(name):
    """The collapsed statistics' write-once step (``removed_predictive``, ``moved``: what the
    step-wise RCD sweep uses) equals the protocol's remove, free, predict and add (the base
    class's defaults), for a move to another state, to the same state, from a state it empties
    (into that slot or another), a rejected move and a missing observation."""
    from numpyro_hdphmm.emissions.collapsed import CollapsedStatistics

    family = FAMILIES[name]()
    capacity, t = 4, 6
    y, params, _ = _data(family, t, key=3)
    x = family.prepare(y)[0]
    states = jnp.array([0, 0, 1, 2, 1, 0])
    statistics = family.collapsed_statistics(capacity)
    dtype = jnp.float32
    pre = statistics.precompute(x, params, dtype)
    for case in ("move", "same", "freed", "freed_same", "rejected", "missing"):
        i = 2 if case.startswith("freed") else 1
        k_old = int(states[i])
        k_new = {"move": 2, "same": k_old, "freed": 3, "freed_same": k_old, "rejected": 2, "missing": 2}[case]
        valid = jnp.ones(t, bool).at[i].set(case != "missing")
        est = statistics.init(jax.random.key(0), x, valid, states, params, dtype)
        x_i, pre_i = _row(x, i), _row(pre, i)
        delta = statistics.delta(x_i, dtype)
        weight = valid[i].astype(dtype)
        freed = jnp.asarray(case.startswith("freed"))
        keep = jnp.asarray(case != "rejected")
        pred, aux = statistics.removed_predictive(est, i, x_i, pre_i, delta, weight, k_old, freed)
        ref_pred, ref_aux = CollapsedStatistics.removed_predictive(statistics, est, i, x_i, pre_i, delta, weight, k_old,
                                                                   freed)
        np.testing.assert_allclose(pred, ref_pred, rtol=1e-5, atol=1e-5, err_msg=case)
        out = statistics.moved(est, i, delta, weight, k_old, freed, k_new, aux, 0.5, keep)
        ref = CollapsedStatistics.moved(statistics, est, i, delta, weight, k_old, freed, k_new, ref_aux, 0.5, keep)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=case),
                               out, ref)
        if case == "rejected":
            jax.tree_util.tree_map(np.testing.assert_array_equal, out, est)


def _walk_predictives(statistics, family, x, states, capacity, steps, dtype):
    """The predictive of step ``i + 1`` against every state after moving steps ``0 .. i`` in turn
    (remove, free where emptied, add to another state), next to the family's own
    ``log_predictive`` of the statistics recomputed from scratch: ``(got, want)`` lists."""
    valid = jnp.ones(states.shape, bool)
    est = statistics.init(jax.random.key(0), x, valid, states, None, dtype)
    got, want = [], []
    for i in range(steps):
        x_i = _row(x, i)
        delta = statistics.delta(x_i, dtype)
        k_old, k_new = int(states[i]), (int(states[i]) + 1 + i) % capacity
        est = statistics.remove(est, i, delta, jnp.asarray(1.0, dtype), k_old)
        states = states.at[i].set(-1)
        est = statistics.free(est, k_old, jnp.asarray(not bool(jnp.any(states == k_old))))
        est = statistics.add(est, i, delta, jnp.asarray(1.0, dtype), k_new, None, 0.5)
        states = states.at[i].set(k_new)
        fresh = family.sufficient_statistics(x, state_weights(states, valid, capacity, dtype))
        nxt = _row(x, i + 1)
        got.append(np.asarray(statistics.log_predictive(est, nxt, None)[0]))
        want.append(np.asarray(family.log_predictive(nxt, fresh)))
    return got, want


@pytest.mark.parametrize("name", [n for n in sorted(FAMILIES) if FAMILIES[n]().caches_predictive])
def test_cached_predictive_matches_the_family_predictive(name):
    """A family with ``caches_predictive`` scores steps from per-state factorizations kept beside
    the statistics (``CachedStatistics``); after a walk of moves (one of which empties a state)
    its predictive equals the family's ``log_predictive`` of statistics recomputed from scratch.
    Negative control: a strategy that forgets to refactorize the state a step joins fails."""
    from numpyro_hdphmm.emissions.collapsed import CachedStatistics

    family = FAMILIES[name]()
    capacity, t = 4, 12
    y, _, _ = _data(family, t, key=5)
    x = family.prepare(jnp.asarray(y, jnp.float64))[0]
    states = jnp.array([0, 1, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1])
    statistics = family.collapsed_statistics(capacity)
    assert isinstance(statistics, CachedStatistics)
    got, want = _walk_predictives(statistics, family, x, states, capacity, 8, jnp.float64)
    np.testing.assert_allclose(np.stack(got), np.stack(want), rtol=1e-9, atol=1e-9)

    class Stale(CachedStatistics):
        def add(self, est, i, delta, weight, k, aux, u):
            return est._replace(stats=super().add(est, i, delta, weight, k, aux, u).stats)

    got, want = _walk_predictives(Stale(family, capacity), family, x, states, capacity, 8, jnp.float64)
    assert np.max(np.abs(np.stack(got) - np.stack(want))) > 1e-3
