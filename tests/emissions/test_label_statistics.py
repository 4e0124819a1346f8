"""The statistics of hard labels (``label_statistics``, :class:`~numpyro_hdphmm.emissions.OneHot`,
:mod:`numpyro_hdphmm._core.segments`) equal those of the one-hot weight matrix, for every conjugate
family, to floating-point precision; the checks can fail (a shifted label is caught)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from emissions.test_protocol import FAMILIES
from numpyro_hdphmm import emissions as em
from numpyro_hdphmm._core import mniw, segments
from numpyro_hdphmm.emissions import gaussian
from numpyro_hdphmm.infer.moves.tempering import PoweredLikelihood

K = 4
T = 60


def _inputs(name, seed=0):
    """Prepared observations of ``FAMILIES[name]`` (data of the model itself) and labels in
    ``[0, K]`` (``K``: a missing step), with every state used."""
    family = FAMILIES[name]()
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    params = family.sample_parameters(k1, (K,))
    states = jax.random.randint(k2, (T,), 0, K).at[:K].set(jnp.arange(K))
    y = family.sample_observations(k3, params, states)
    x, valid = family.prepare(y)
    valid = valid & (jax.random.uniform(k4, (T,)) > 0.2)  # some steps of no state
    return family, x, states, valid


def _close(a, b, rtol=1e-10, atol=1e-10):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return (jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b) and len(la) == len(lb)
            and all(x.shape == y.shape and np.allclose(x, y, rtol=rtol, atol=atol) for x, y in zip(la, lb)))


@pytest.mark.parametrize("gram", ["direct", "blocks"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_label_statistics_equal_the_one_hot_statistics(name, gram, monkeypatch):
    """Both ways of :func:`~numpyro_hdphmm._core.segments.label_grams` (its ``"auto"`` rule forced
    one way) for the Gram-matrix families."""
    for module in (mniw, gaussian):
        monkeypatch.setattr(module, "label_grams", functools.partial(segments.label_grams, method=gram))
    family, x, states, valid = _inputs(name)
    hard = em.OneHot.of_states(states, valid, K)
    dense = family.sufficient_statistics(x, em.state_weights(states, valid, K))
    assert _close(family.label_statistics(x, hard.labels, K), dense)
    assert _close(family.statistics(x, hard), dense)
    assert _close(family.statistics(x, hard.dense()), dense)
    # the family overrides the one-hot default (the O(T) path is the one checked)
    assert type(family).label_statistics is not em.EmissionFamily.label_statistics
    # the check can fail: labels shifted by one state give other statistics
    shifted = jnp.where(valid, (states + 1) % K, K)
    assert not _close(family.label_statistics(x, shifted, K), dense)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_label_statistics_ignore_labels_outside_the_states(name):
    """A label outside ``[0, K)`` (``K`` for a missing step, or negative) adds nothing, as a zero row."""
    family, x, states, valid = _inputs(name, seed=1)
    labels = jnp.where(valid, states, K)
    other = jnp.where(valid, states, -1)
    assert _close(family.label_statistics(x, labels, K), family.label_statistics(x, other, K))
    assert _close(family.label_statistics(x, labels, K), family.sufficient_statistics(x, em.state_weights(states, valid, K)))


def test_update_parameters_takes_hard_labels_with_the_same_draw():
    """The conjugate draw given :class:`OneHot` labels is the draw given their one-hot matrix (the
    same key; the statistics agree to rounding)."""
    family, x, states, valid = _inputs("autoregressive")
    params = family.sample_parameters(jax.random.key(9), (K,))
    a, _ = family.update_parameters(jax.random.key(3), x, em.OneHot.of_states(states, valid, K), params)
    b, _ = family.update_parameters(jax.random.key(3), x, em.state_weights(states, valid, K), params)
    assert _close(a, b, rtol=1e-8, atol=1e-8)


def test_tempered_family_scales_hard_labels():
    """Scaled weights are not one-hot: the tempered family's statistics of hard labels are those of
    the scaled one-hot matrix (not the family's unscaled label path)."""
    family, x, states, valid = _inputs("gaussian_niw")
    powered = PoweredLikelihood(family, 0.3)
    hard = em.OneHot.of_states(states, valid, K)
    scaled = family.sufficient_statistics(x, 0.3 * em.state_weights(states, valid, K))
    assert _close(powered.statistics(x, hard), scaled)
    assert _close(powered.label_statistics(x, hard.labels, K), scaled)
    assert not _close(powered.statistics(x, hard), family.statistics(x, hard))


@pytest.mark.parametrize("method", ["direct", "blocks"])
@pytest.mark.parametrize("block", [None, 1, 8])
def test_label_grams_equal_the_one_hot_gram(method, block):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(203, 5))
    labels = rng.integers(-1, K + 2, size=203)  # some outside [0, K)
    labels[:3] = 0  # a long first run and an empty label
    labels[labels == 2] = 3
    w = np.stack([(labels == k) for k in range(K)], 1).astype(float)
    want = np.einsum("tk,ti,tj->kij", w, z, z)
    got = segments.label_grams(jnp.asarray(z), jnp.asarray(labels), K, block=block, method=method)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(segments.label_sums(jnp.asarray(z), jnp.asarray(labels), K), w.T @ z, rtol=1e-12)
    np.testing.assert_allclose(segments.label_counts(jnp.asarray(labels), K), w.sum(0))
    # and it can fail: a label off by one is caught
    wrong = segments.label_grams(jnp.asarray(z), jnp.asarray(np.where(labels == 0, 1, labels)), K, block=block,
                                 method=method)
    assert not np.allclose(wrong, want)


def test_label_grams_under_jit_and_vmap():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(3, 50, 4))
    labels = rng.integers(0, K + 1, size=(3, 50))
    got = jax.jit(jax.vmap(lambda a, b: segments.label_grams(a, b, K, method="blocks")))(z, labels)
    for i in range(3):
        w = np.stack([(labels[i] == k) for k in range(K)], 1).astype(float)
        np.testing.assert_allclose(got[i], np.einsum("tk,ti,tj->kij", w, z[i], z[i]), rtol=1e-12, atol=1e-12)
