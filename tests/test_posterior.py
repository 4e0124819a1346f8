"""``nh.viterbi``, ``nh.smooth``, ``nh.posterior_state_marginals`` and ``nh.marginal_log_likelihood``
against brute-force enumeration of every state path of tiny HMMs (several padded sequences with a
missing value, draws grouped by chain, sub-stochastic rows), through the emission family, through
the model (traced, also with per-draw user sites), and their validation."""

import itertools

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats

import numpyro_hdphmm as nh
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik
from numpyro_hdphmm.emissions import Categorical, GaussianNIW

K, T = 3, 5
EMISSION = GaussianNIW(np.zeros(1), 1.0, 3.0, np.eye(1))


def gaussian_draws(rng, S=4):
    trans = rng.dirichlet(np.ones(K + 1), size=(S, K + 1))  # column K: mass of unrepresented states
    return {
        "y_trans": trans,
        "y_mu": rng.normal(size=(S, K, 1)) * 2,
        "y_cov": rng.uniform(0.3, 2.0, size=(S, K, 1, 1)),
        "y_beta": rng.dirichlet(np.ones(K + 1), size=S),
    }


def data(rng):
    """Two sequences padded to T = 5: lengths 5 and 3, one missing value in the first."""
    y = np.full((2, T, 1), np.nan)
    y[0, :, 0] = rng.normal(size=T) * 2
    y[1, :3, 0] = rng.normal(size=3) * 2
    y[0, 2, 0] = np.nan
    return y, np.array([T, 3])


def log_emission(samples, s, y):
    """``(T, K)`` log f(y_t | theta_k) of draw ``s``, 0 at missing steps."""
    mu, sd = samples["y_mu"][s, :, 0], np.sqrt(samples["y_cov"][s, :, 0, 0])
    le = stats.norm.logpdf(y[:, None], mu[None, :], sd[None, :])
    return np.where(np.isnan(y)[:, None], 0.0, le)


def brute_force(init, A, le, length):
    """Every path over the first ``length`` steps: ``(log p(z, y) per path, paths)``."""
    paths = np.array(list(itertools.product(range(K), repeat=length)))
    lp = np.log(init[paths[:, 0]]) + le[0, paths[:, 0]]
    for t in range(1, length):
        lp = lp + np.log(A[paths[:, t - 1], paths[:, t]]) + le[t, paths[:, t]]
    return lp, paths


def prefix_log_mass(init, A, le, length):
    """``F[t] = log sum_{z_0..z_t} pi(z_0) e_0 prod_{u<=t} A e_u`` (prefix masses), ``t < length``."""
    out = []
    for t in range(1, length + 1):
        lp, _ = brute_force(init, A, le, t)
        out.append(np.logaddexp.reduce(lp))
    return np.array(out)


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    samples = gaussian_draws(rng)
    y, lengths = data(rng)
    grouped = {k: v.reshape((2, 2) + v.shape[1:]) for k, v in samples.items()}  # (chains, draws)
    return samples, grouped, y, lengths


def exact(samples, y, lengths, renormalize=False):
    """Brute-force Viterbi paths, log joints, smoothed marginals, log-likelihoods, pointwise terms."""
    S = samples["y_trans"].shape[0]
    out = {k: np.zeros(s) for k, s in [("states", (S, 2, T)), ("log_joint", (S, 2)), ("probs", (S, 2, T, K)),
                                         ("loglik", (S, 2)), ("pointwise", (S, 2, T))]}
    for s in range(S):
        init, A = samples["y_trans"][s, K, :K], samples["y_trans"][s, :K, :K]
        if renormalize:
            init, A = init / init.sum(), A / A.sum(1, keepdims=True)
        for n in range(2):
            L = lengths[n]
            le = log_emission(samples, s, y[n, :, 0])
            lp, paths = brute_force(init, A, le, L)
            best = np.argmax(lp)
            out["states"][s, n] = np.concatenate([paths[best], -np.ones(T - L)])
            out["log_joint"][s, n] = lp[best]
            total = np.logaddexp.reduce(lp)
            out["loglik"][s, n] = total
            w = np.exp(lp - total)
            for t in range(L):
                out["probs"][s, n, t] = np.bincount(paths[:, t], weights=w, minlength=K)
            F = prefix_log_mass(init, A, le, L)
            observed = np.flatnonzero(~np.isnan(y[n, :L, 0]))
            prev = 0.0
            for i, t in enumerate(observed):
                end = F[L - 1] if i == observed.size - 1 else F[t]
                out["pointwise"][s, n, t] = end - prev
                prev = F[t]
    return out


def test_viterbi_and_smoothing_match_enumeration(case):
    samples, grouped, y, lengths = case
    ref = exact(samples, y, lengths)
    v = nh.viterbi(EMISSION, grouped, y, lengths=lengths)
    assert v.states.shape == (2, 2, 2, T) and v.log_joint.shape == (2, 2, 2)
    np.testing.assert_array_equal(np.asarray(v.states).reshape(4, 2, T), ref["states"])  # -1 at padding
    np.testing.assert_allclose(np.asarray(v.log_joint).reshape(4, 2), ref["log_joint"], rtol=1e-10)
    sm = nh.smooth(EMISSION, grouped, y, lengths=lengths)
    np.testing.assert_allclose(np.asarray(sm.probs).reshape(4, 2, T, K), ref["probs"], atol=1e-10)
    np.testing.assert_allclose(np.asarray(sm.log_likelihood).reshape(4, 2), ref["loglik"], rtol=1e-10)
    mean = nh.posterior_state_marginals(EMISSION, grouped, y, lengths=lengths)
    np.testing.assert_allclose(mean, ref["probs"].mean(0), atol=1e-10)
    # one sequence: no sequence axis; flat draws
    one = nh.viterbi(EMISSION, samples, y[1, :3])
    np.testing.assert_array_equal(one.states, ref["states"][:, 1, :3])


def test_marginal_pointwise_terms_are_one_step_predictives(case):
    samples, grouped, y, lengths = case
    for renormalize in (False, True):
        ref = exact(samples, y, lengths, renormalize)
        res = nh.marginal_log_likelihood(EMISSION, grouped, y, lengths=lengths, renormalize=renormalize)
        expected_obs = ~np.isnan(y[..., 0]) & (np.arange(T)[None] < lengths[:, None])
        np.testing.assert_array_equal(res.observed, expected_obs)  # missing and padded steps removed
        pointwise = np.asarray(res.pointwise).reshape(4, 2, T)
        np.testing.assert_allclose(pointwise, ref["pointwise"], rtol=1e-9, atol=1e-12)
        assert np.all(pointwise[:, ~expected_obs] == 0.0)
        # the terms sum to the exact marginal likelihood of each sequence
        np.testing.assert_allclose(pointwise.sum(-1), ref["loglik"], rtol=1e-10)
        np.testing.assert_allclose(np.asarray(res.total).reshape(4, 2), ref["loglik"], rtol=1e-10)
    # the same total as the core's forward algorithm
    res = nh.marginal_log_likelihood(EMISSION, samples, y, lengths=lengths)
    draws = nh.posterior.hmm_draws(samples, EMISSION)
    li, la = nh.posterior.log_hmm_parameters(draws.trans)
    for s in range(4):
        le = np.stack([log_emission(samples, s, y[n, :, 0]) for n in range(2)])
        core = hmm_marginal_loglik(li[s], la[s], le, mask=~np.isnan(y[..., 0]), length=lengths)
        np.testing.assert_allclose(res.total[s], core, rtol=1e-10)


# ------------------------------------------------------------------------- through the model
C = 3
Y_CAT = np.array([[0, 0, 1, np.nan, 2], [2, 2, 1, 0, 0]])
LEN_CAT = np.array([5, 4])


def cat_model(y=None, lengths=None, num_steps=None):
    hmm = nh.StickyHDPHMM(2.0, 2.0, 5.0, Categorical(C, 1.0), max_states=K, num_steps=num_steps)
    nh.sample("y", hmm, obs=y, lengths=lengths)


def test_model_traced_for_family_and_observations():
    rng = np.random.default_rng(1)
    S = 4
    samples = {"y_trans": rng.dirichlet(np.ones(K + 1), size=(S, K + 1)), "y_beta": rng.dirichlet(np.ones(K + 1), size=S),
               "y_probs": rng.dirichlet(np.ones(C), size=(S, K)), "y_states": rng.integers(0, K, size=(S, 2, 5))}
    by_model = nh.viterbi(cat_model, samples, model_args=(Y_CAT, LEN_CAT))  # y and lengths from the model
    by_family = nh.viterbi(Categorical(C, 1.0), samples, Y_CAT, lengths=LEN_CAT)
    np.testing.assert_array_equal(by_model.states, by_family.states)
    assert np.all(np.asarray(by_model.states)[:, 1, 4] == -1)
    # new sequences of another length with the same model
    new = np.array([1, 1, 2, 0, 0, 0, 2])
    out = nh.marginal_log_likelihood(cat_model, samples, new, model_args=(Y_CAT, LEN_CAT))
    assert out.pointwise.shape == (S, 7) and out.observed.shape == (7,)
    le = np.log(samples["y_probs"][:, :, new]).transpose(0, 2, 1)  # (S, T, K)
    li, la = nh.posterior.log_hmm_parameters(samples["y_trans"])
    np.testing.assert_allclose(out.total, [hmm_marginal_loglik(li[s], la[s], le[s]) for s in range(S)], rtol=1e-10)


def custom_model(y=None):
    loc = numpyro.sample("loc", dist.Normal(0.0, 3.0).expand([K]))
    hmm = nh.StickyHDPHMM(1.0, 2.0, 3.0, lambda k: dist.Normal(loc[k], 1.0), max_states=K)
    nh.sample("y", hmm, obs=y)


def test_custom_emission_uses_each_draws_sites():
    """The family of a custom emission holds the draw's own sites (batched over draws)."""
    rng = np.random.default_rng(2)
    S, y = 3, rng.normal(size=T) * 2
    samples = {"y_trans": rng.dirichlet(np.ones(K + 1), size=(S, K + 1)), "y_beta": rng.dirichlet(np.ones(K + 1), size=S),
               "loc": rng.normal(size=(S, K)) * 3, "y_states": rng.integers(0, K, size=(S, T))}
    sm = nh.smooth(custom_model, samples, model_args=(y,))
    for s in range(S):
        init, A = samples["y_trans"][s, K, :K], samples["y_trans"][s, :K, :K]
        lp, paths = brute_force(init, A, stats.norm.logpdf(y[:, None], samples["loc"][s][None, :], 1.0), T)
        np.testing.assert_allclose(sm.log_likelihood[s], np.logaddexp.reduce(lp), rtol=1e-10)


def test_validation(case):
    samples, grouped, y, lengths = case
    with pytest.raises(ValueError, match="`y` is required"):
        nh.viterbi(EMISSION, samples)
    with pytest.raises(ValueError, match="lengths"):
        nh.smooth(EMISSION, samples, y, lengths=np.array([5, 6]))
    with pytest.raises(ValueError, match="lengths"):
        nh.smooth(EMISSION, samples, y[0], lengths=np.array([5]))
    with pytest.raises(ValueError, match="`y`"):
        nh.smooth(EMISSION, samples, np.zeros((2, 3, 5, 1)))
    with pytest.raises(ValueError, match="z_trans"):
        nh.viterbi(EMISSION, samples, y, lengths=lengths, name="z")
    with pytest.raises(ValueError, match="y_mu"):
        nh.viterbi(EMISSION, {**samples, "y_mu": samples["y_mu"][:, :2]}, y, lengths=lengths)
    with pytest.raises(ValueError, match="`model`"):
        nh.viterbi("model", samples, y)
    with pytest.raises(ValueError, match="batch_size"):
        nh.viterbi(EMISSION, samples, y, lengths=lengths, batch_size=0)
