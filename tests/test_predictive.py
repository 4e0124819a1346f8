"""Posterior predictive: ``numpyro.infer.Predictive`` on HDP-HMM models, and ``nh.forecast``.

The draws here are built by hand in the layout a kernel returns (``mcmc.get_samples()``); the
same calls on the draws of a real ``WeakLimitGibbs`` run are in ``tests/test_arviz_io.py``, whose
run they share.
"""

import types

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import Predictive

import numpyro_hdphmm as nh
from numpyro_hdphmm.results import predictive
from numpyro_hdphmm.emissions import AutoRegressive, Categorical, GaussianNIW

from infer._checks import tv_bound

K, C = 3, 3


def cat_model(y=None, lengths=None, num_steps=None):
    hmm = nh.StickyHDPHMM(2.0, 2.0, 3.0, Categorical(C, 1.0), max_states=K, num_steps=num_steps)
    return nh.sample("y", hmm, obs=y, lengths=lengths)


# --------------------------------------------------------------------- fixed posterior draws
P = np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.5, 0.0, 0.5]])
P0 = np.array([0.2, 0.5, 0.3])
B = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])


def _trans(P, new_mass=None):
    """``(K+1, K+1)`` with start row ``P0``; ``new_mass (K,)`` moves mass into column ``K``."""
    t = np.zeros((K + 1, K + 1))
    t[:K, :K], t[K, :K] = P, P0
    if new_mass is not None:
        t[:K, :K] *= (1 - new_mass)[:, None]
        t[:K, K] = new_mass
    return t


def _samples(rng, num_draws, T, num_seq=None, trans=None, probs=B):
    """Draws sharing ``trans``/``probs``; the last state of every sequence ~ ``P0``."""
    shape = (num_draws, T) if num_seq is None else (num_draws, num_seq, T)
    states = rng.integers(0, K, size=shape)
    trans = _trans(P) if trans is None else trans
    return {
        "y_trans": np.broadcast_to(trans, (num_draws, K + 1, K + 1)),
        "y_probs": np.broadcast_to(probs, (num_draws, K, C)),
        "y_states": states,
        "y_beta": np.broadcast_to(np.r_[np.full(K, 1.0 / K), 0.0], (num_draws, K + 1)),
    }, states


def _set_last(rng, samples, states, lengths=None):
    """Overwrite the last state (position ``lengths - 1``) of every sequence with a draw of ``P0``."""
    last = rng.choice(K, size=states.shape[:-1], p=P0)
    s = states.copy()
    if lengths is None:
        s[..., -1] = last
    else:
        for n, ln in enumerate(lengths):
            s[:, n, ln - 1] = last[:, n]
    samples["y_states"] = s
    return samples


def _broken(monkeypatch, attr, fn):
    """Replace ``predictive.<attr>`` and re-jit the core, so no cached trace of the real one is used."""
    monkeypatch.setattr(predictive, attr, fn)
    core = predictive._forecast_core  # a new function object: jax caches traces per function
    fresh = types.FunctionType(core.__code__, core.__globals__, core.__name__, core.__defaults__, core.__closure__)
    monkeypatch.setattr(predictive, "_forecast_jit", jax.jit(fresh, static_argnames=("steps", "emission_batched")))


def _tv(probs, draws):
    emp = np.bincount(np.asarray(draws).ravel(), minlength=len(probs)) / np.size(draws)
    return 0.5 * np.abs(emp - probs).sum(), tv_bound(probs, np.size(draws))


H, S = 4, 4000


def _marginal_check(out, trans_rows):
    """Every step ``s``: states ~ ``P0 P^s`` and observations ~ ``P0 P^s B``: the largest TV / bound."""
    worst = 0.0
    marg = P0.copy()
    for s in range(H):
        marg = marg @ trans_rows
        for probs, draws in ((marg, out["states"][..., s]), (marg @ B, out["y"][..., s])):
            tv, bound = _tv(probs, draws)
            worst = max(worst, tv / bound)
    return worst


def test_forecast_reproduces_h_step_marginal():
    rng = np.random.default_rng(0)
    samples, states = _samples(rng, S, 7)
    samples = _set_last(rng, samples, states)
    out = nh.forecast(jax.random.key(0), samples, Categorical(C, 1.0), H)
    assert out["states"].shape == (S, H) and out["y"].shape == (S, H)
    assert _marginal_check(out, P) < 1.0
    np.testing.assert_array_equal(out["new_state_prob"], 0.0)  # weak limit: column K is empty
    # the first forecast state is drawn from the row of the LAST observed state
    z_last = samples["y_states"][:, -1]
    assert np.all(P[z_last, np.asarray(out["states"][:, 0])] > 0)


def test_forecast_marginal_detects_transposed_rows(monkeypatch):
    """Negative control: the same check fails for a forecast that reads columns instead of rows."""
    _broken(monkeypatch, "_transition_logits", lambda t: jnp.log(t[: t.shape[-1] - 1, : t.shape[-1] - 1].T))
    rng = np.random.default_rng(0)
    samples, states = _samples(rng, S, 7)
    samples = _set_last(rng, samples, states)
    out = nh.forecast(jax.random.key(0), samples, Categorical(C, 1.0), H)
    assert _marginal_check(out, P) > 1.0


def test_forecast_several_sequences_with_lengths():
    rng = np.random.default_rng(1)
    lengths = np.array([6, 2])
    samples, states = _samples(rng, S // 2, 6, num_seq=2)
    samples = _set_last(rng, samples, states, lengths)
    out = nh.forecast(jax.random.key(1), samples, Categorical(C, 1.0), H, lengths=lengths)
    assert out["states"].shape == (S // 2, 2, H) and out["y"].shape == (S // 2, 2, H)
    assert _marginal_check(out, P) < 1.0
    # grouped by chain: (chains, draws, ...)
    grouped = {k: v.reshape((2, S // 4) + v.shape[1:]) for k, v in samples.items()}
    g = nh.forecast(jax.random.key(1), grouped, Categorical(C, 1.0), H, lengths=lengths, batch_ndims=2)
    assert g["states"].shape == (2, S // 4, 2, H)


def test_forecast_renormalizes_over_instantiated_states():
    """Column K (a new state, infinite-state kernels): rows renormalized, the mass reported."""
    rng = np.random.default_rng(2)
    new_mass = np.array([0.3, 0.0, 0.6])
    samples, states = _samples(rng, S, 5, trans=_trans(P, new_mass))
    samples = _set_last(rng, samples, states)
    out = nh.forecast(jax.random.key(2), samples, Categorical(C, 1.0), H)
    assert _marginal_check(out, P) < 1.0  # the renormalized rows are P again
    prev = np.concatenate([samples["y_states"][:, -1:], np.asarray(out["states"][:, :-1])], axis=1)
    np.testing.assert_allclose(out["new_state_prob"], new_mass[prev])


# ------------------------------------------------------------------------- autoregressive
D, ORDER = 2, 2
A = np.stack([
    np.array([[0.5, 0.1, 0.2, 0.0, 1.0], [0.0, 0.4, 0.0, 0.3, -1.0]]),
    np.array([[-0.3, 0.0, 0.1, 0.2, 0.5], [0.2, 0.6, 0.0, -0.1, 2.0]]),
    np.array([[0.9, 0.0, 0.0, 0.0, 0.0], [0.0, 0.9, 0.0, 0.0, 3.0]]),
])  # (K, D, D * ORDER + 1): [y_{t-1}, y_{t-2}, 1]


def _ar_family(scale=1.0):
    m = D * ORDER + 1
    return AutoRegressive(ORDER, np.zeros((D, m)), np.eye(m), D + 2.0, scale * np.eye(D))


def ar_model(y=None, lengths=None):
    # a sampled hyperparameter: the family differs between draws (forecast traces it per draw)
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    nh.sample("y", nh.StickyHDPHMM(2.0, 2.0, 3.0, _ar_family(scale), max_states=K), obs=y, lengths=lengths)


def _ar_samples(rng, num_draws, obs_shape, var):
    states = rng.integers(0, K, size=(num_draws,) + obs_shape[:-1])
    return {
        "y_trans": np.broadcast_to(_trans(P), (num_draws, K + 1, K + 1)),
        "y_A": np.broadcast_to(A, (num_draws,) + A.shape),
        "y_cov": np.broadcast_to(var * np.eye(D), (num_draws, K, D, D)),
        "y_states": states,
        "scale": rng.uniform(0.5, 2.0, size=num_draws),
    }


def _ar_recursion(history, z):
    """Noise-free continuation: ``history (p, D)`` most recent first, ``z (h,)``."""
    lags, ys = list(history), []
    for k in z:
        y = A[k] @ np.r_[lags[0], lags[1], 1.0]
        ys.append(y)
        lags = [y, lags[0]]
    return np.array(ys)


def _ar_max_error(out, obs, lengths):
    err = 0.0
    for s in range(out["y"].shape[0]):
        for n, ln in enumerate(lengths):
            hist = np.stack([obs[n, ln - 1], obs[n, ln - 2]])
            expect = _ar_recursion(hist, np.asarray(out["states"][s, n]))
            err = max(err, np.max(np.abs(np.asarray(out["y"][s, n]) - expect)))
    return err


@pytest.fixture(scope="module")
def ar_data():
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(2, 6, D)) * 3
    obs[1, 4:] = np.nan  # padding
    lengths = np.array([6, 4])
    return obs, lengths, _ar_samples(rng, 50, obs.shape, 1e-16)


def test_forecast_autoregressive_starts_from_the_last_observations(ar_data):
    obs, lengths, samples = ar_data
    out = nh.forecast(jax.random.key(3), samples, _ar_family(), 3, observations=obs, lengths=lengths)
    assert out["y"].shape == (50, 2, 3, D)
    assert _ar_max_error(out, obs, lengths) < 1e-6
    # the model form finds the family, the observations and the lengths itself: same draws
    via_model = nh.forecast(jax.random.key(3), samples, ar_model, 3, model_args=(obs, lengths))
    np.testing.assert_allclose(via_model["y"], out["y"])


def test_forecast_autoregressive_check_detects_zero_history(ar_data, monkeypatch):
    """Negative control: a forecast from zero presample values (the family's own
    ``sample_observations``) fails the same check."""
    obs, lengths, samples = ar_data
    real = predictive._history
    _broken(monkeypatch, "_history", lambda *a: jnp.zeros_like(real(*a)))
    out = nh.forecast(jax.random.key(3), samples, _ar_family(), 3, observations=obs, lengths=lengths)
    assert _ar_max_error(out, obs, lengths) > 0.1


def test_forecast_autoregressive_noise_scale():
    rng = np.random.default_rng(4)
    obs = rng.normal(size=(5, D))
    var = 0.25
    samples = _ar_samples(rng, S, obs.shape, var)
    out = nh.forecast(jax.random.key(4), samples, _ar_family(), 1, observations=obs)
    reg = np.r_[obs[-1], obs[-2], 1.0]
    resid = np.asarray(out["y"][:, 0]) - A[np.asarray(out["states"][:, 0])] @ reg
    # mean 0 and variance `var` per coordinate: z-scores of the sample moments
    z_mean = np.abs(resid.mean(0)) / np.sqrt(var / S)
    z_var = np.abs((resid**2).mean(0) - var) / np.sqrt(2 * var**2 / S)
    assert np.all(z_mean < 4.5) and np.all(z_var < 4.5), (z_mean, z_var)


@jax.tree_util.register_pytree_node_class
class _EchoGaussian(GaussianNIW):
    """Not an autoregression by type: a family that declares one lag, and continues a sequence
    with the last value plus the state (noise-free), so the lags it was given can be read off."""

    @property
    def num_lags(self):
        return 1

    def sample_continuation(self, rng_key, params, states, lags):
        return lags[0] + states[:, None].astype(lags.dtype)


def test_forecast_asks_the_family_for_its_lags():
    """``forecast`` passes the last ``num_lags`` observations to any family declaring them (the
    capability of the emission protocol, not a test of the type).  Negative control (by hand,
    with the former ``isinstance(family, AutoRegressive)`` branch): the family's own Gaussian
    draws come back instead (all 48 values off, by up to 4.8)."""
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(2, 5, D))
    lengths = np.array([5, 3])
    num_draws = 4
    samples = {
        "y_trans": np.broadcast_to(_trans(P), (num_draws, K + 1, K + 1)),
        "y_mu": np.zeros((num_draws, K, D)),
        "y_cov": np.broadcast_to(np.eye(D), (num_draws, K, D, D)),
        "y_states": rng.integers(0, K, size=(num_draws, 2, 5)),
    }
    family = _EchoGaussian(np.zeros(D), 1.0, D + 2.0, np.eye(D))
    out = nh.forecast(jax.random.key(5), samples, family, 3, observations=obs, lengths=lengths)
    last = obs[np.arange(2), lengths - 1]  # (N, D)
    expect = last[None, :, None, :] + np.asarray(out["states"])[..., None]
    np.testing.assert_allclose(out["y"], expect, atol=1e-12)
    with pytest.raises(ValueError, match="num_lags=1"):
        nh.forecast(jax.random.key(5), samples, family, 3, lengths=lengths)
    # a family without lags: the continuation is its sample_observations (the protocol's default)
    plain = GaussianNIW(np.zeros(D), 1.0, D + 2.0, np.eye(D))
    params = {"mu": jnp.zeros((K, D)) + jnp.arange(K)[:, None], "cov": jnp.broadcast_to(jnp.eye(D), (K, D, D))}
    z = jnp.array([0, 2, 1, 1])
    np.testing.assert_array_equal(plain.sample_continuation(jax.random.key(1), params, z, jnp.zeros((0, D))),
                                  plain.sample_observations(jax.random.key(1), params, z))


# ---------------------------------------------------------------------------- bad input
def test_forecast_rejects_bad_input(ar_data):
    obs, lengths, ar_samples = ar_data
    samples, _ = _samples(np.random.default_rng(0), 4, 5)
    fam = Categorical(C, 1.0)
    with pytest.raises(ValueError, match="steps"):
        nh.forecast(jax.random.key(0), samples, fam, 0)
    with pytest.raises(ValueError, match="z_trans"):
        nh.forecast(jax.random.key(0), samples, fam, 2, name="z")
    with pytest.raises(ValueError, match="lengths"):
        nh.forecast(jax.random.key(0), samples, fam, 2, lengths=np.array([3]))
    with pytest.raises(ValueError, match="emission"):
        nh.forecast(jax.random.key(0), samples, "Categorical", 2)
    with pytest.raises(ValueError, match="y_A"):
        nh.forecast(jax.random.key(0), samples, _ar_family(), 2, observations=np.zeros((5, D)))
    with pytest.raises(ValueError, match="observations"):
        nh.forecast(jax.random.key(0), ar_samples, _ar_family(), 2, lengths=lengths)
    with pytest.raises(ValueError, match="NaN"):  # lags inside the padding
        nh.forecast(jax.random.key(0), ar_samples, _ar_family(), 2, observations=obs, lengths=np.array([6, 6]))


# ------------------------------------------------------------------- numpyro.infer.Predictive
def _one_hot_samples(rng, num_draws, shape):
    """Emission probabilities one-hot: y must equal EMIT[z] exactly."""
    samples, _ = _samples(rng, num_draws, shape[-1], None if len(shape) == 1 else shape[0], probs=np.eye(C)[EMIT])
    return samples


EMIT = np.array([2, 0, 1])


def test_predictive_redraws_y_given_the_sampled_states():
    rng = np.random.default_rng(5)
    for lengths, shape in ((None, (5,)), (np.array([5, 3]), (2, 5))):
        samples = _one_hot_samples(rng, 20, shape)
        y = Predictive(cat_model, samples)(jax.random.key(0), None, lengths, num_steps=5)["y"]
        assert y.shape == (20,) + shape
        np.testing.assert_array_equal(y, EMIT[samples["y_states"]])
    # negative control: without the states in the samples Predictive redraws them from the
    # chain, and the same assertion fails
    states = samples.pop("y_states")
    y = Predictive(cat_model, samples)(jax.random.key(0), None, lengths, num_steps=5)["y"]
    assert not np.array_equal(y, EMIT[states])


def test_predictive_takes_the_layout_from_the_draws():
    """Issue 42: ``Predictive(model, samples)(key, None, lengths)`` on draws of 3 padded sequences
    of ``T = 9`` steps with ``max(lengths) = 7``, and ``(key, None, None)``, draw replicates of the
    draws' layout ``(N, T)`` given the sampled states (the number of steps no longer comes from
    ``max(lengths)`` or the default of 100 steps); one sequence's draws give ``(T,)``.  Lengths or
    ``num_steps`` that disagree with the draws raise a ValueError naming the argument."""
    rng = np.random.default_rng(6)
    samples = _one_hot_samples(rng, 4, (3, 9))
    lengths = np.array([7, 5, 2])
    for args in ((None, lengths), (None, None), (None, list(lengths))):
        y = Predictive(cat_model, samples)(jax.random.key(0), *args)["y"]
        assert y.shape == (4, 3, 9)
        np.testing.assert_array_equal(y, EMIT[samples["y_states"]])
    one = dict(samples, y_states=samples["y_states"][:, 0])
    assert Predictive(cat_model, one)(jax.random.key(0), None)["y"].shape == (4, 9)
    with pytest.raises(ValueError, match=r"`lengths` holds 2 sequence"):
        Predictive(cat_model, samples)(jax.random.key(0), None, lengths[:2])
    with pytest.raises(ValueError, match=r"`lengths` \(max 12\) exceeds the 9 steps"):
        Predictive(cat_model, samples)(jax.random.key(0), None, np.array([12, 5, 2]))
    with pytest.raises(ValueError, match=r"`lengths` holds 3 .*one sequence"):
        Predictive(cat_model, one)(jax.random.key(0), None, lengths)
    with pytest.raises(ValueError, match=r"`num_steps`=5 .* pass num_steps=9"):
        Predictive(cat_model, samples)(jax.random.key(0), None, None, num_steps=5)
    # without draws of the states: the prior predictive keeps max(lengths) steps (list or NumPy lengths)
    prior = {k: v for k, v in samples.items() if k != "y_states"}
    assert Predictive(cat_model, prior)(jax.random.key(0), None, lengths)["y"].shape == (4, 3, 7)
