"""Results for the HDP-HSMM: the message-passing core (:func:`hsmm_viterbi`, :func:`hsmm_smoother`,
:func:`hsmm_forward`) against brute-force enumeration over all ``K^T`` paths (censoring on/off,
left-censoring, padding, a missing step) and against the HMM with geometric durations; the results
layer (viterbi, smooth, posterior_state_marginals, marginal_log_likelihood, to_inference_data) at
the draws of one small fitted posterior; segments_table; duration_posterior; the HMM-only functions
refusing an HSMM."""

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from numpyro_hdphmm._core import hsmm
from numpyro_hdphmm._core.hmm import hmm_filter, hmm_smoother, hmm_viterbi

K, T, D = 3, 6, 4


def _tables(seed, k=K, d=D, left=False):
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.ones(k))
    rows = rng.dirichlet(np.ones(k), size=k)
    log_trans = np.asarray(hsmm.without_self_transitions(jnp.asarray(rows)))
    log_pmf = np.log(rng.dirichlet(np.ones(d), size=k))
    log_dur, log_surv = (np.asarray(a) for a in hsmm.duration_tables(jnp.asarray(log_pmf)))
    first = tuple(np.asarray(a) for a in hsmm.left_censored_tables(jnp.asarray(log_surv))) if left else None
    ll = rng.normal(size=(T, k)) * 1.5
    return np.log(init), log_trans, log_dur, log_surv, ll, first


CASES = [  # (right_censored, left_censored, length, missing step): one compile per censoring pair
    (True, False, T, None),
    (True, False, 5, 3),
    (False, True, T, 0),
    pytest.param(False, False, 5, 2, marks=pytest.mark.slow),
    pytest.param(True, True, 4, None, marks=pytest.mark.slow),
]


def brute_force(li, lt, ld, ls, ll, first, right_censored, length, missing):
    """All ``K^length`` paths: their log joints ``(paths, log p(z, y))`` with the path padded by
    its last state, and the prefix probabilities ``Z_t`` of :func:`hsmm_forward`."""
    mask = np.ones(T, bool)
    if missing is not None:
        mask[missing] = False

    all_paths = np.array(list(itertools.product(range(K), repeat=T)))

    def joints_of(n, censored):  # a path's steps >= n are ignored: each prefix is counted K^(T-n) times
        lp = np.asarray(_log_prob(jnp.asarray(all_paths), li, lt, ld, ls, n, censored, first))
        emit = np.where((np.arange(T) < n) & mask, ll[np.arange(T), all_paths], 0.0).sum(-1)
        return lp + emit - (T - n) * np.log(K)

    keep = np.all(all_paths[:, length - 1:] == all_paths[:, length - 1:length], axis=1)  # padding copies
    paths, joints = all_paths[keep], joints_of(length, right_censored)[keep] + (T - length) * np.log(K)
    prefix = [logsumexp(joints_of(t + 1, True)) for t in range(length - 1)] + [logsumexp(joints)]
    return paths, joints, np.array(prefix), mask


@partial(jax.jit, static_argnums=(6,))
def _log_prob(paths, li, lt, ld, ls, n, right_censored, first):
    return jax.vmap(lambda z: hsmm.hsmm_log_prob(z, li, lt, ld, ls, n, right_censored=right_censored,
                                                 first=first))(paths)


@partial(jax.jit, static_argnames=("right_censored",))
def _core_all(*args, mask, length, right_censored, first):
    kw = dict(mask=mask, length=length, right_censored=right_censored, first=first)
    return (hsmm.hsmm_viterbi(*args, **kw), hsmm.hsmm_smoother(*args, **kw), hsmm.hsmm_forward(*args, **kw),
            hsmm.hsmm_backward(*args, **kw).marginal_loglik)


@pytest.fixture(scope="module", autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.mark.parametrize("right_censored,left,length,missing", CASES)
def test_core_against_enumeration(right_censored, left, length, missing):
    li, lt, ld, ls, ll, first = _tables(length + 10 * (missing or 0) + left, left=left)
    paths, joints, prefix, mask = brute_force(li, lt, ld, ls, ll, first, right_censored, length, missing)
    kw = dict(mask=jnp.asarray(mask), length=length, right_censored=right_censored, first=first)
    args = (li, lt, ld, ls, jnp.asarray(ll))
    total = logsumexp(joints)

    (states, best), post, fwd, backward_total = _core_all(*args, **kw)
    i = int(np.argmax(joints))
    np.testing.assert_array_equal(np.asarray(states), paths[i])
    np.testing.assert_allclose(float(best), joints[i], rtol=1e-10)

    weights = np.exp(joints - total)
    exact = np.zeros((T, K))
    for p, w in zip(paths, weights):
        exact[np.arange(length), p[:length]] += w
    probs = np.where(np.arange(T)[:, None] < length, np.exp(np.asarray(post.log_smoothed)), 0.0)
    np.testing.assert_allclose(probs, exact, atol=1e-10)
    np.testing.assert_allclose(float(post.marginal_loglik), total, rtol=1e-10)

    norms = np.asarray(fwd.log_normalizers)
    np.testing.assert_allclose(np.cumsum(norms[:length]), prefix, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(norms[length:], 0.0)
    np.testing.assert_allclose(float(fwd.marginal_loglik), total, rtol=1e-10)
    np.testing.assert_allclose(norms.sum(), float(backward_total), rtol=1e-10)
    if missing is not None:
        assert abs(norms[missing]) < 1e-10  # stochastic rows: a missing step predicts nothing


def _geometric(log_a, num_d):
    """Untruncated geometric duration tables of the HMM's self-transitions: ``p(d) = (1 - a) a^(d-1)``
    and ``P(D >= d) = a^(d-1)``."""
    d = np.arange(1, num_d + 1)
    a = np.exp(np.diag(log_a))
    log_surv = (d[None] - 1) * np.log(a)[:, None]
    return log_surv + np.log1p(-a)[:, None], log_surv


def test_geometric_durations_are_the_hmm():
    rng = np.random.default_rng(7)
    t_max = 12
    hmm_init = np.log(rng.dirichlet(np.ones(K)))
    hmm_trans = np.log(rng.dirichlet(np.ones(K), size=K) * 0.4 + np.eye(K) * 0.6)
    ll = jnp.asarray(rng.normal(size=(t_max, K)))
    log_dur, log_surv = _geometric(hmm_trans, t_max)  # D = T: no segment is cut
    lt = hsmm.without_self_transitions(jnp.exp(jnp.asarray(hmm_trans)))
    mask = jnp.asarray(np.arange(t_max) != 5)
    args = (jnp.asarray(hmm_init), lt, jnp.asarray(log_dur), jnp.asarray(log_surv), ll)
    filt = hmm_filter(hmm_init, hmm_trans, ll, mask=mask)
    fwd = hsmm.hsmm_forward(*args, mask=mask)
    np.testing.assert_allclose(np.asarray(fwd.log_normalizers), np.asarray(filt.log_normalizers), atol=1e-10)
    np.testing.assert_allclose(float(fwd.marginal_loglik), float(filt.marginal_loglik), rtol=1e-10)
    post = hsmm.hsmm_smoother(*args, mask=mask)
    ref = hmm_smoother(hmm_init, hmm_trans, ll, mask=mask)
    np.testing.assert_allclose(np.exp(np.asarray(post.log_smoothed)), np.exp(np.asarray(ref.log_smoothed)),
                               atol=1e-10)
    states, best = hsmm.hsmm_viterbi(*args, mask=mask)
    np.testing.assert_array_equal(np.asarray(states), np.asarray(hmm_viterbi(hmm_init, hmm_trans, ll, mask=mask)))


# ============================================================================ the results layer at posterior draws
import numpyro_hdphmm as nh  # noqa: E402

S_DRAWS, K_MODEL, T_DATA, D_MAX = 3, 3, 14, 6
_rng = np.random.default_rng(3)
Y_DATA = (np.concatenate([np.full(5, -2.0), np.full(4, 1.5), np.full(5, -2.0)])[:, None]
          + 0.3 * _rng.normal(size=(14, 1)))


def _hsmm_model(right_censoring=True, left_censoring=False):
    emission = nh.emissions.GaussianNIW.weakly_informative(Y_DATA)

    def model(y):
        nh.sample("y", nh.HDPHSMM(1.0, 2.0, nh.durations.Poisson(2.0, 0.3), emission, max_states=K_MODEL,
                                  max_duration=D_MAX, right_censoring=right_censoring,
                                  left_censoring=left_censoring), obs=y)

    return model, emission


@pytest.fixture(scope="module")
def draws():
    """Posterior-like draws of the weak-limit HDP-HSMM (rows with self-transitions and an empty
    column K, Gaussian parameters, Poisson duration rates): the results layer must read the
    segment process of each draw from them."""
    rng = np.random.default_rng(11)
    trans = np.zeros((S_DRAWS, K_MODEL + 1, K_MODEL + 1))
    trans[..., :K_MODEL] = rng.dirichlet(np.ones(K_MODEL), size=(S_DRAWS, K_MODEL + 1))
    return {
        "y_beta": jnp.asarray(np.concatenate([rng.dirichlet(np.ones(K_MODEL), S_DRAWS), np.zeros((S_DRAWS, 1))], 1)),
        "y_trans": jnp.asarray(trans),
        "y_mu": jnp.asarray(np.array([[-2.0], [1.5], [0.0]])[None] + 0.2 * rng.normal(size=(S_DRAWS, K_MODEL, 1))),
        "y_cov": jnp.asarray(np.broadcast_to(np.eye(1) * 0.2, (S_DRAWS, K_MODEL, 1, 1)).copy()),
        "y_duration_rate": jnp.asarray(rng.gamma(2.0, 2.0, size=(S_DRAWS, K_MODEL))),
        "y_states": jnp.zeros((S_DRAWS, T_DATA), jnp.int32),
    }


def _draw_tables(model_cls_kwargs, draws, s):
    """The draw's segment process computed here, independently of the results layer's trace."""
    emission = nh.emissions.GaussianNIW.weakly_informative(Y_DATA)
    hsmm_model = nh.HDPHSMM(1.0, 2.0, nh.durations.Poisson(2.0, 0.3), emission,
                            max_states=K_MODEL, max_duration=D_MAX, **model_cls_kwargs)
    chain = hsmm_model.semi_markov_chain(draws["y_trans"][s], {"rate": draws["y_duration_rate"][s]}, T_DATA)
    li, lt, (ld, ls), first = chain.tables()
    ll = -0.5 * (Y_DATA - draws["y_mu"][s][:, 0][None]) ** 2 / 0.2 - 0.5 * np.log(2 * np.pi * 0.2)
    return (li, lt, ld, ls, jnp.asarray(ll)), dict(right_censored=chain.right_censored, first=first)


def test_results_layer_at_each_draw(draws):
    censoring = dict(right_censoring=False, left_censoring=True)  # both flags away from their defaults
    model, _ = _hsmm_model(**censoring)
    kw = dict(model_args=(jnp.asarray(Y_DATA),))
    vit = nh.viterbi(model, draws, **kw)
    sm = nh.smooth(model, draws, **kw)
    mll = nh.marginal_log_likelihood(model, draws, **kw)
    mean = nh.posterior_state_marginals(model, draws, **kw)
    assert vit.states.shape == (S_DRAWS, T_DATA) and sm.probs.shape == (S_DRAWS, T_DATA, K_MODEL)
    for s in range(S_DRAWS):
        args, ckw = _draw_tables(censoring, draws, s)
        (z, best), post, _, total = _core_all(*args, mask=jnp.ones(T_DATA, bool), length=T_DATA, **ckw)
        total = float(total)
        np.testing.assert_array_equal(np.asarray(vit.states[s]), np.asarray(z))
        np.testing.assert_allclose(float(vit.log_joint[s]), float(best), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(sm.probs[s]), np.exp(np.asarray(post.log_smoothed)), atol=1e-6)
        np.testing.assert_allclose(float(sm.log_likelihood[s]), total, rtol=1e-6)
        np.testing.assert_allclose(float(mll.total[s]), total, rtol=1e-6)
        np.testing.assert_allclose(float(np.sum(mll.pointwise[s])), total, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(mean), np.asarray(sm.probs).mean(0), atol=1e-6)
    # negative control: the HMM recursions on the same rows (self-transitions kept) give another answer
    li, la = (np.asarray(a) for a in nh.results.posterior.log_hmm_parameters(draws["y_trans"][0]))
    args, ckw = _draw_tables(censoring, draws, 0)
    hmm_ll = float(hmm_filter(li, la, args[-1]).marginal_loglik)
    assert abs(hmm_ll - float(mll.total[0])) > 1e-2


def test_hmm_only_functions_refuse_an_hsmm(draws):
    model, emission = _hsmm_model()
    with pytest.raises(NotImplementedError, match="duration"):
        nh.viterbi(emission, draws, Y_DATA)
    with pytest.raises(NotImplementedError, match="duration"):
        nh.diagnostics.predictive_log_likelihood(draws, emission, Y_DATA)
    with pytest.raises(NotImplementedError, match="particle"):
        nh.marginal_log_likelihood(model, draws, model_args=(jnp.asarray(Y_DATA),), method="particle",
                                   rng_key=jax.random.PRNGKey(0))


def test_segments_table():
    z = np.array([[0, 0, 1, 1, 1, 2], [3, 3, 3, 0, 0, 0]])
    table = nh.segments_table(z, lengths=np.array([6, 4]))
    rows = [tuple(int(v) for v in r) for r in table]
    assert rows == [(0, 0, 2, 2, 0), (0, 2, 5, 3, 1), (0, 5, 6, 1, 2), (1, 0, 3, 3, 3), (1, 3, 4, 1, 0)]
    assert table.dtype.names == ("sequence", "start", "end", "duration", "state")
    # one sequence with the -1 padding of viterbi; the rows rebuild the sequence
    one = nh.segments_table(np.array([2, 2, 0, 1, 1, -1, -1]))
    rebuilt = np.full(7, -1)
    for r in one:
        rebuilt[r["start"]:r["end"]] = r["state"]
    np.testing.assert_array_equal(rebuilt, [2, 2, 0, 1, 1, -1, -1])
    with pytest.raises(ValueError, match="states"):
        nh.segments_table(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="lengths"):
        nh.segments_table(z, lengths=np.array([7, 1]))


def test_duration_posterior_and_plot(draws):
    model, _ = _hsmm_model(right_censoring=False, left_censoring=True)
    res = nh.duration_posterior(model, draws, model_args=(jnp.asarray(Y_DATA),), prob=0.5)
    pmfs = np.stack([np.exp(np.asarray(_draw_tables({}, draws, s)[0][2])) for s in range(S_DRAWS)])
    np.testing.assert_allclose(res.mean, pmfs.mean(0), atol=1e-6)
    np.testing.assert_allclose(res.lower, np.quantile(pmfs, 0.25, axis=0), atol=1e-6)
    np.testing.assert_allclose(res.mean_duration, (pmfs * np.arange(1, D_MAX + 1)).sum(-1).mean(0), rtol=1e-6)
    np.testing.assert_array_equal(res.durations, np.arange(1, D_MAX + 1))
    with pytest.raises(ValueError, match="prob"):
        nh.duration_posterior(model, draws, model_args=(jnp.asarray(Y_DATA),), prob=1.5)
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    fig = nh.diagnostics.plot_duration_posterior(res, states=[0, 2])
    assert len(fig.axes[0].lines) == 2
    matplotlib.pyplot.close(fig)


@pytest.mark.slow
def test_to_inference_data_loo_on_a_fit():
    """A short WeakLimitGibbs fit: the log_likelihood group holds the HSMM's one-step-ahead terms
    (summing to marginal_log_likelihood's total per draw) and az.loo runs on it."""
    az = pytest.importorskip("arviz")
    from numpyro.infer import MCMC

    model, _ = _hsmm_model()
    y = jnp.asarray(Y_DATA)
    mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=10, num_samples=8, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    data = nh.to_inference_data(mcmc)
    pointwise = np.asarray(data.log_likelihood["y"]).reshape(8, -1)
    total = np.asarray(nh.marginal_log_likelihood(model, mcmc.get_samples(), model_args=(y,)).total)
    np.testing.assert_allclose(pointwise.sum(-1), total, rtol=1e-6)
    hmm_rows = nh.results.posterior.log_hmm_parameters(mcmc.get_samples()["y_trans"][0])
    assert abs(float(hmm_filter(*hmm_rows, jnp.zeros((T_DATA, K_MODEL))).marginal_loglik)) < 1e-6  # rows stochastic
    az.loo(data)


def _first_run(paths, state):
    """Per path: the number of leading steps in ``state`` (the continued segment's remaining steps)."""
    paths = np.asarray(paths)
    other = paths != state
    return np.where(other.any(1), other.argmax(1), paths.shape[1])


def test_forecast_continues_the_current_segment(draws, monkeypatch):
    """``nh.forecast`` of an HDP-HSMM: the last segment (state 1 for its last ``e = 3`` steps) goes on for
    ``d - e`` steps with ``d ~ p_1(d | d >= e)``; the next state is never the same; the steps left
    match the exact law (max deviation within 4 standard errors); the same check rejects a forecast
    that ignores the elapsed duration (the negative control)."""
    from numpyro_hdphmm.results import predictive

    n, e, h = 20000, 3, D_MAX + 2
    one = {k: jnp.repeat(v[:1], n, axis=0) for k, v in draws.items()}
    one["y_states"] = jnp.asarray(np.repeat(np.array([[0] * (T_DATA - e) + [1] * e]), n, axis=0), jnp.int32)
    model, _ = _hsmm_model()
    kw = dict(model_args=(jnp.asarray(Y_DATA),))
    (li, lt, ld, ls, _), _ = _draw_tables({}, draws, 0)
    p = np.exp(np.asarray(ld[1], np.float64))
    exact = np.zeros(h + 1)
    exact[:D_MAX - e + 1] = p[e - 1:] / p[e - 1:].sum()  # P(j more steps) = p(e + j) / P(d >= e)

    def deviation(out):
        runs = _first_run(out["states"], 1)
        freq = np.bincount(runs, minlength=h + 1) / n
        se = np.sqrt(exact * (1 - exact) / n) + 1e-12
        return np.max(np.abs(freq - exact) / np.maximum(se, 1.0 / n))

    out = nh.forecast(jax.random.PRNGKey(3), one, model, h, **kw)
    assert out["states"].shape == (n, h) and out["y"].shape == (n, h, 1)
    runs = _first_run(out["states"], 1)
    nxt = np.asarray(out["states"])[np.arange(n), np.minimum(runs, h - 1)]
    assert np.all(nxt[runs < h] != 1)  # a new segment never repeats the state
    assert np.all(np.asarray(out["new_state_prob"]) == 0.0)  # the weak limit's rows have no escape mass
    z = deviation(out)
    print(f"HSMM forecast, steps left: max |freq - exact| / se = {z:.2f}")
    assert z < 4.5
    # negative control: a residual that forgets the elapsed steps (a fresh duration) is rejected
    monkeypatch.setattr(predictive, "residual_duration",
                        lambda key, row, elapsed: predictive.random.categorical(key, row).astype(jnp.int32))
    monkeypatch.setattr(predictive, "_forecast_hsmm_jit",  # a new function object: traced afresh
                        jax.jit(lambda *a: predictive._forecast_hsmm_core(*a), static_argnums=(8, 9, 10)))
    bad = deviation(nh.forecast(jax.random.PRNGKey(3), one, model, h, **kw))
    print(f"negative control (elapsed ignored): {bad:.1f}")
    assert bad > 10
