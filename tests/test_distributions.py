"""Tests of the NumPyro distributions: GEM, HDPTransitions, MarkovChain, HiddenMarkovModel,
StickyHDPHMM / HDPHMM.  Reference values come from scipy, closed forms and enumeration."""

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats

import numpyro_hdphmm as nh
from numpyro_hdphmm.emissions import Categorical, GaussianNIW


def _tv(p, q):
    return 0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum()


def _tv_bound(num_outcomes, num_draws, z=4.0):
    """A generous bound on the TV distance of an empirical distribution of ``num_draws``
    draws: E[TV] <= 0.5 * sqrt(num_outcomes / num_draws); add ``z`` standard deviations."""
    return 0.5 * np.sqrt(num_outcomes / num_draws) * 1.0 + z * 0.5 / np.sqrt(num_draws)


# ---------------------------------------------------------------------------------------- GEM
def test_gem_one_stick_is_beta():
    gamma = 2.5
    v = np.array([0.01, 0.3, 0.9])
    beta = np.stack([v, 1 - v], -1)
    lp = nh.GEM(gamma, 1).log_prob(beta)
    np.testing.assert_allclose(lp, scipy.stats.beta.logpdf(v, 1, gamma), rtol=1e-10)


def test_gem_two_sticks_density_integrates_to_one():
    gamma = 1.7
    d = nh.GEM(gamma, 2)
    # Gauss-Legendre on the triangle: b1 = u, b2 = (1 - u) w, Jacobian (1 - u)
    nodes, weights = np.polynomial.legendre.leggauss(200)
    u, w = (nodes + 1) / 2, weights / 2
    uu, ww = np.meshgrid(u, u, indexing="ij")
    b1, b2 = uu, (1 - uu) * ww
    beta = np.stack([b1, b2, 1 - b1 - b2], -1)
    dens = np.exp(np.asarray(d.log_prob(beta))) * (1 - uu)
    total = np.einsum("i,j,ij->", w, w, dens)
    assert abs(total - 1) < 1e-6
    # and the closed form: Beta(v1) Beta(v2) / (1 - b1), v2 = b2 / (1 - b1)
    b1, b2 = 0.2, 0.5
    expect = scipy.stats.beta.logpdf(b1, 1, gamma) + scipy.stats.beta.logpdf(b2 / (1 - b1), 1, gamma) - np.log(1 - b1)
    np.testing.assert_allclose(d.log_prob(jnp.array([b1, b2, 1 - b1 - b2])), expect, rtol=1e-10)


def test_gem_sample_moments_and_shapes():
    gamma, k = 3.0, 6
    draws = np.asarray(nh.GEM(gamma, k).sample(jax.random.key(0), (20000,)))
    assert draws.shape == (20000, k + 1)
    np.testing.assert_allclose(draws.sum(-1), 1.0, atol=1e-12)
    expect = np.array([(1 / (1 + gamma)) * (gamma / (1 + gamma)) ** i for i in range(k)] + [(gamma / (1 + gamma)) ** k])
    se = draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(0) - expect) < 5 * se + 1e-12)
    np.testing.assert_allclose(nh.GEM(gamma, k).mean, expect, rtol=1e-12)
    batched = nh.GEM(jnp.array([0.5, 1.0, 2.0]), 4)
    assert batched.batch_shape == (3,) and batched.event_shape == (5,)
    s = batched.sample(jax.random.key(1), (2,))
    assert s.shape == (2, 3, 5) and batched.log_prob(s).shape == (2, 3)
    assert batched.expand((4, 3)).sample(jax.random.key(2)).shape == (4, 3, 5)


def test_gem_underflow_is_finite():
    d = nh.GEM(0.05, 300)
    with jax.enable_x64(False):
        d32 = nh.GEM(jnp.float32(0.05), 300)
        s = d32.sample(jax.random.key(0), (50,))
        assert s.dtype == jnp.float32
        assert np.all(np.isfinite(np.asarray(d32.log_prob(s))))
    s = d.sample(jax.random.key(0), (50,))
    assert np.all(np.isfinite(np.asarray(d.log_prob(s))))


def test_gem_zero_weights_are_empty_slots():
    """Slots with weight exactly 0 hold no atom: the density is that of the represented sticks,
    so its gamma-dependence is gamma^K beta_rem^(gamma - 1) with K the positive weights."""
    gapped = jnp.array([0.2, 0.0, 0.3, 0.0, 0.0, 0.5])
    for gamma in (0.5, 2.0):
        np.testing.assert_allclose(nh.GEM(gamma, 5).log_prob(gapped),
                                   nh.GEM(gamma, 2).log_prob(jnp.array([0.2, 0.3, 0.5])), rtol=1e-12)
    diff = nh.GEM(2.0, 5).log_prob(gapped) - nh.GEM(0.5, 5).log_prob(gapped)
    np.testing.assert_allclose(diff, 2 * np.log(2.0 / 0.5) + 1.5 * np.log(0.5), rtol=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan])
def test_gem_rejects_bad_concentration(bad):
    with pytest.raises(ValueError, match="concentration"):
        nh.GEM(bad, 5)


def test_gem_rejects_bad_truncation():
    with pytest.raises(ValueError, match="truncation"):
        nh.GEM(1.0, 0)


# ------------------------------------------------------------------------------ transitions
def test_hdp_transitions_log_prob_is_rowwise_dirichlet():
    beta = np.array([0.5, 0.3, 0.15, 0.05])
    alpha, kappa = 2.0, 3.0
    d = nh.HDPTransitions(beta, alpha, kappa)
    assert d.event_shape == (4, 4) and d.num_states == 3
    value = np.asarray(d.sample(jax.random.key(0)))
    np.testing.assert_allclose(value.sum(-1), 1.0, atol=1e-12)
    expect = 0.0
    for j in range(4):
        conc = alpha * beta + (kappa * np.eye(4)[j] if j < 3 else 0.0)
        expect += scipy.stats.dirichlet.logpdf(value[j], conc)
    np.testing.assert_allclose(d.log_prob(value), expect, rtol=1e-9)


def test_hdp_transitions_sample_means():
    beta = np.array([0.4, 0.4, 0.2])
    alpha, kappa = 1.5, 4.0
    draws = np.asarray(nh.HDPTransitions(beta, alpha, kappa).sample(jax.random.key(3), (20000,)))
    expect = np.stack(
        [(alpha * beta + kappa * np.eye(3)[j]) / (alpha + kappa) for j in range(2)] + [beta]
    )
    se = draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(0) - expect) < 5 * se + 1e-12)


def test_hdp_transitions_tiny_concentrations_finite():
    beta = np.array([1.0 - 2e-30, 1e-30, 1e-30])
    with jax.enable_x64(False):
        d = nh.HDPTransitions(jnp.asarray(beta, jnp.float32), jnp.float32(0.1))
        s = d.sample(jax.random.key(0), (10,))
        assert np.all(np.isfinite(np.asarray(s))) and np.all(np.isfinite(np.asarray(d.log_prob(s))))


def test_hdp_transitions_validation():
    beta = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="alpha"):
        nh.HDPTransitions(beta, 0.0)
    with pytest.raises(ValueError, match="kappa"):
        nh.HDPTransitions(beta, 1.0, -1.0)
    with pytest.raises(ValueError, match="beta"):
        nh.HDPTransitions(np.array([0.5, 0.6]), 1.0)


# ------------------------------------------------------------------------------ MarkovChain
def _chain_probs(init, trans, t):
    seqs = list(itertools.product(range(len(init)), repeat=t))
    p = np.array([init[s[0]] * np.prod([trans[a, b] for a, b in zip(s[:-1], s[1:])]) for s in seqs])
    return seqs, p


def test_markov_chain_log_prob_and_sampling_match_enumeration():
    rng = np.random.default_rng(0)
    init = rng.dirichlet(np.ones(3))
    trans = rng.dirichlet(np.ones(3), size=3)
    t = 4
    d = nh.MarkovChain(init, trans, t)
    seqs, p = _chain_probs(init, trans, t)
    np.testing.assert_allclose(np.exp(d.log_prob(np.array(seqs))), p, rtol=1e-10)
    n = 40000
    draws = np.asarray(d.sample(jax.random.key(0), (n,)))
    index = {s: i for i, s in enumerate(seqs)}
    freq = np.bincount([index[tuple(s)] for s in draws], minlength=len(seqs)) / n
    assert _tv(freq, p) < _tv_bound(len(seqs), n)


def test_markov_chain_lengths_and_batch():
    rng = np.random.default_rng(1)
    init = rng.dirichlet(np.ones(2))
    trans = rng.dirichlet(np.ones(2), size=2)
    d = nh.MarkovChain(init, trans, 5, lengths=np.array([2, 5]))
    assert d.batch_shape == (2,) and d.event_shape == (5,)
    z = np.array([[0, 1, 1, 0, 0], [0, 1, 1, 0, 0]])
    lp = np.asarray(d.log_prob(z))
    np.testing.assert_allclose(lp[0], np.log(init[0] * trans[0, 1]), rtol=1e-10)
    np.testing.assert_allclose(lp[1], np.log(init[0] * trans[0, 1] * trans[1, 1] * trans[1, 0] * trans[0, 0]), rtol=1e-10)
    assert d.sample(jax.random.key(0), (3,)).shape == (3, 2, 5)


def test_markov_chain_escape_column_warns():
    init = np.array([0.5, 0.0, 0.5])  # half the mass starts outside the represented states
    trans = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    d = nh.MarkovChain(init, trans, 3)
    with pytest.warns(RuntimeWarning, match="max_states"):
        z = d.sample(jax.random.key(0), (100,))
        jax.block_until_ready(z)
    assert np.all(np.asarray(z) < 2)


def test_escape_warning_once_under_vmap():
    """Under ``jax.vmap`` the host is called once, with the count summed over the batch (a plain
    ``jax.debug.callback`` would warn once per element: 200 Python calls here)."""
    init = np.array([0.5, 0.0, 0.5])
    trans = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    draw = jax.jit(jax.vmap(lambda k: nh.MarkovChain(init, trans, 3).sample(k)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z = jax.block_until_ready(draw(jax.random.split(jax.random.key(0), 200)))
        jax.effects_barrier()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1, len(messages)
    count = int(messages[0].split(": ")[1].split(" ")[0])
    assert 60 < count < 140, messages[0]  # about half of the 200 chains start outside
    assert np.all(np.asarray(z) < 2)


def test_markov_chain_validation():
    with pytest.raises(ValueError, match="transition_matrix"):
        nh.MarkovChain(np.ones(2) / 2, np.ones((2, 3, 4)) / 4, 3)
    with pytest.raises(ValueError, match="initial_probs"):
        nh.MarkovChain(np.ones(3) / 3, np.ones((2, 2)) / 2, 3)
    with pytest.raises(ValueError, match="num_steps"):
        nh.MarkovChain(np.ones(2) / 2, np.ones((2, 2)) / 2, 0)
    with pytest.raises(ValueError, match="transition_matrix"):
        nh.MarkovChain(np.ones(2) / 2, np.array([[0.7, 0.7], [0.5, 0.5]]), 3)


# -------------------------------------------------------------------------- marginal HMM
def test_hidden_markov_model_log_prob_matches_enumeration():
    rng = np.random.default_rng(2)
    k, t = 3, 5
    init = rng.dirichlet(np.ones(k))
    trans = rng.dirichlet(np.ones(k), size=k)
    mu, sigma = np.array([-2.0, 0.0, 3.0]), np.array([1.0, 0.5, 2.0])
    y = rng.normal(size=t)
    hmm = nh.HiddenMarkovModel(init, trans, dist.Normal(mu, sigma), num_steps=t)
    seqs, p = _chain_probs(init, trans, t)
    like = np.array([np.prod(scipy.stats.norm.pdf(y, mu[list(s)], sigma[list(s)])) for s in seqs])
    np.testing.assert_allclose(hmm.log_prob(y), np.log(np.sum(p * like)), rtol=1e-10)
    # batched: two sequences
    yy = np.stack([y, y[::-1]])
    lp = hmm.log_prob(yy)
    assert lp.shape == (2,)
    np.testing.assert_allclose(lp[0], hmm.log_prob(y), rtol=1e-12)
    # differentiable in the emission parameters
    g = jax.grad(lambda m: nh.HiddenMarkovModel(init, trans, dist.Normal(m, sigma)).log_prob(y))(mu)
    assert np.all(np.isfinite(np.asarray(g)))


def test_hidden_markov_model_sample_and_intermediates():
    init = np.array([1.0, 0.0])
    trans = np.array([[0.0, 1.0], [1.0, 0.0]])
    hmm = nh.HiddenMarkovModel(init, trans, dist.Normal(np.array([-100.0, 100.0]), 1.0), num_steps=6)
    y, (z,) = hmm.sample_with_intermediates(jax.random.key(0), (3,))
    assert y.shape == (3, 6) and z.shape == (3, 6)
    np.testing.assert_array_equal(np.asarray(z[0]), [0, 1, 0, 1, 0, 1])
    assert np.all(np.sign(np.asarray(y)) == np.where(np.asarray(z) == 0, -1, 1))
    with pytest.raises(ValueError, match="num_steps"):
        nh.HiddenMarkovModel(init, trans, dist.Normal(np.zeros(2), 1.0)).sample(jax.random.key(0))


def test_hidden_markov_model_under_nuts():
    rng = np.random.default_rng(0)
    z = np.repeat([0, 1, 0, 1], 25)
    y = np.where(z == 0, -2.0, 2.0) + 0.5 * rng.normal(size=z.size)

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(jnp.array([-1.0, 1.0]), 3.0))
        trans = numpyro.sample("trans", dist.Dirichlet(jnp.ones((2, 2))))
        numpyro.sample("y", nh.HiddenMarkovModel(jnp.ones(2) / 2, trans, dist.Normal(mu, 0.5)), obs=y)

    mcmc = numpyro.infer.MCMC(numpyro.infer.NUTS(model), num_warmup=150, num_samples=150, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    mu = np.sort(np.asarray(mcmc.get_samples()["mu"]), axis=-1).mean(0)  # label-invariant
    np.testing.assert_allclose(mu, [-2.0, 2.0], atol=0.3)


def test_hidden_markov_model_validation():
    with pytest.raises(ValueError, match="emission_distribution"):
        nh.HiddenMarkovModel(np.ones(2) / 2, np.ones((2, 2)) / 2, dist.Normal(np.zeros(3), 1.0))
    with pytest.raises(ValueError, match="transition_matrix"):
        nh.HiddenMarkovModel(np.ones(2) / 2, np.ones((2, 3)) / 3, dist.Normal(np.zeros(2), 1.0))


# ---------------------------------------------------------------------------- HDP-HMM models
def _niw():
    return GaussianNIW(loc=np.zeros(2), mean_precision=0.1, df=5.0, scale=np.eye(2))


def test_sticky_hdphmm_sample_with_intermediates():
    hmm = nh.StickyHDPHMM(gamma=2.0, alpha=3.0, kappa=20.0, emission=_niw(), max_states=15, num_steps=200)
    assert hmm.event_shape == (200, 2) and hmm.batch_shape == ()
    y, inter = hmm.sample_with_intermediates(jax.random.key(0))
    assert y.shape == (200, 2)
    assert inter["states"].shape == (200,) and inter["beta"].shape == (16,) and inter["trans"].shape == (16, 16)
    assert inter["mu"].shape == (15, 2) and inter["cov"].shape == (15, 2, 2)
    assert np.all(np.isfinite(np.asarray(y)))
    ys = hmm.sample(jax.random.key(1), (4,))
    assert ys.shape == (4, 200, 2)


def _self_transition_rate(states):
    s = np.asarray(states)
    return np.mean(s[..., 1:] == s[..., :-1])


def test_sticky_prior_persists_and_start_state_follows_beta():
    """E[pi_jj] = (alpha beta_j + kappa)/(alpha + kappa) (eq. 26); the first state ~ pi_0 with
    E[pi_0] = E[beta]: check both against closed forms by simulation."""
    emission = Categorical(num_categories=3)
    gamma, alpha, n = 1.0, 1.0, 4000
    first = []
    rates = {}
    for kappa in (0.0, 30.0):
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=20, num_steps=2)
        _, inter = hmm.sample_with_intermediates(jax.random.key(int(kappa)), (n,))
        z = np.asarray(inter["states"])
        rates[kappa] = _self_transition_rate(z)
        first.append(z[:, 0])
    # E[P(z2 = z1)] = E[sum_j pi0_j pi_jj] = sum_j E[pi0_j (alpha beta_j + kappa)/(alpha+kappa)] (indep given beta)
    # with E[beta_j^2] for GEM: E[v^2] prod E[(1-v)^2] ... estimate by Monte Carlo of beta only:
    betas = np.asarray(nh.GEM(gamma, 20).sample(jax.random.key(9), (200000,)))[:, :20]
    # pi_0 | beta ~ Dir(alpha beta): E[pi0_j pi_jj | beta] = beta_j (alpha beta_j + kappa)/(alpha+kappa)
    for kappa, rate in rates.items():
        expect = np.mean(np.sum(betas * (alpha * betas + kappa) / (alpha + kappa), -1))
        assert abs(rate - expect) < 5 * np.sqrt(expect * (1 - expect) / n)
    z1 = np.concatenate(first)
    freq = np.bincount(z1, minlength=20)[:3] / len(z1)
    mean_beta = np.asarray(nh.GEM(gamma, 20).mean)[:3]
    assert np.all(np.abs(freq - mean_beta) < 5 * np.sqrt(mean_beta * (1 - mean_beta) / len(z1)))


def test_hdphmm_log_prob_is_explicitly_unavailable():
    hmm = nh.HDPHMM(1.0, 1.0, _niw(), max_states=5, num_steps=10)
    assert float(hmm.kappa) == 0.0
    with pytest.raises(NotImplementedError, match="numpyro_hdphmm.sample"):
        hmm.log_prob(np.zeros((10, 2)))


def test_hdphmm_pytree_vmap_eval_shape():
    em = _niw()

    def draw(gamma, key):
        return nh.StickyHDPHMM(gamma, 2.0, 5.0, em, max_states=6, num_steps=30).sample(key)

    ys = jax.vmap(draw)(jnp.array([0.5, 1.0, 2.0]), jax.random.split(jax.random.key(0), 3))
    assert ys.shape == (3, 30, 2)
    hmm = nh.StickyHDPHMM(1.0, 2.0, 5.0, em, max_states=6, num_steps=30)
    leaves, tree = jax.tree_util.tree_flatten(hmm)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(again, nh.StickyHDPHMM) and again.max_states == 6
    out = jax.eval_shape(lambda h: h.sample(jax.random.key(0)), hmm)
    assert out.shape == (30, 2)
    shaped = jax.eval_shape(lambda: nh.GEM(1.0, 4))
    assert isinstance(shaped, nh.GEM)
    batch = nh.StickyHDPHMM(jnp.ones(2), 2.0, 5.0, em, max_states=6, num_steps=30)
    assert batch.batch_shape == (2,) and batch.sample(jax.random.key(0), (3,)).shape == (3, 2, 30, 2)
    assert batch.expand((4, 2)).batch_shape == (4, 2)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(gamma=0.0), "gamma"),
        (dict(alpha=-1.0), "alpha"),
        (dict(kappa=-0.1), "kappa"),
        (dict(max_states=1), "max_states"),
        (dict(max_states=3.5), "max_states"),
        (dict(num_steps=0), "num_steps"),
        (dict(emission="gaussian"), "emission"),
    ],
)
def test_sticky_hdphmm_validation(kwargs, name):
    args = dict(gamma=1.0, alpha=1.0, kappa=1.0, emission=_niw(), max_states=5, num_steps=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        nh.StickyHDPHMM(**args)
