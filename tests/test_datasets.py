"""Tests of numpyro_hdphmm.datasets: generator parameters on long draws (tolerances = 5 Monte
Carlo standard errors), shapes, determinism, and the shipped mocap / Alice data checked against
the raw files and the numbers reported in the papers."""

import io
import re
import importlib.resources

import numpy as np
import pytest
from scipy import stats

from numpyro_hdphmm import datasets as D

Z = 5.0  # tolerance in Monte Carlo standard errors


# ---------------------------------------------------------------------------------- helpers
def transition_counts(states, K):
    counts = np.zeros((K, K))
    np.add.at(counts, (states[:-1], states[1:]), 1)
    return counts


def assert_transition_matrix(states, expected):
    """Every row's empirical transition frequencies within Z binomial SEs of ``expected``."""
    K = expected.shape[0]
    counts = transition_counts(states, K)
    n = counts.sum(1, keepdims=True)
    freq = counts / n
    se = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq - expected) <= Z * se), (freq, expected)


def assert_gaussian_per_state(y, states, means, variances):
    for k, (m, v) in enumerate(zip(means, variances)):
        x = y[states == k]
        n = x.size
        assert abs(x.mean() - m) <= Z * np.sqrt(v / n)
        # Var of the sample variance of Gaussian data: 2 v^2 / (n - 1)
        assert abs(x.var(ddof=1) - v) <= Z * np.sqrt(2 * v**2 / (n - 1))


def assert_uniform_initial_state(fn, K, num_seeds=3000):
    first = np.array([fn(num_steps=1, seed=s).states[0] for s in range(num_seeds)])
    freq = np.bincount(first, minlength=K) / num_seeds
    se = np.sqrt((1 / K) * (1 - 1 / K) / num_seeds)
    assert np.all(np.abs(freq - 1 / K) <= Z * se), freq


# --------------------------------------------------------------------------------- Fox A / B
def test_fox_a_parameters_long_draw():
    d = D.fox_experiment_a(num_steps=200_000, seed=1)
    assert d.observations.shape == (200_000, 1) and d.states.shape == (200_000,)
    P = np.full((3, 3), 0.015) + np.eye(3) * (0.97 - 0.015)
    np.testing.assert_allclose(d.info["transition_matrix"], P)
    assert_transition_matrix(d.states, P)
    # overall self-transition rate
    stay = np.mean(d.states[1:] == d.states[:-1])
    assert abs(stay - 0.97) <= Z * np.sqrt(0.97 * 0.03 / (d.states.size - 1))
    assert_gaussian_per_state(d.observations[:, 0], d.states, [50, 0, -50], [50, 10, 50])


def test_fox_a_defaults_and_initial_state():
    d = D.fox_experiment_a()
    assert d.observations.shape == (1000, 1)
    assert d.observations.dtype == np.float64 and np.issubdtype(d.states.dtype, np.integer)
    assert set(np.unique(d.states)) <= {0, 1, 2}
    np.testing.assert_allclose(d.info["initial_probs"], np.full(3, 1 / 3))
    assert_uniform_initial_state(D.fox_experiment_a, 3)


def test_fox_b_parameters_long_draw():
    d = D.fox_experiment_b(num_steps=200_000, seed=2)
    assert d.observations.shape == (200_000, 1)
    y, z, c = d.observations[:, 0], d.states, d.info["components"]
    assert c.shape == z.shape and set(np.unique(c)) == {0, 1}
    assert_transition_matrix(z, np.array([[0.98, 0.02], [0.02, 0.98]]))
    means = {(0, 0): 0.0, (0, 1): 10.0, (1, 0): -7.0, (1, 1): 7.0}
    for k in range(2):
        # component labels: Bernoulli(0.5) within each state
        n = np.sum(z == k)
        frac = np.mean(c[z == k])
        assert abs(frac - 0.5) <= Z * np.sqrt(0.25 / n)
        for j in range(2):
            x = y[(z == k) & (c == j)]
            assert abs(x.mean() - means[k, j]) <= Z * np.sqrt(10 / x.size)
            assert abs(x.var(ddof=1) - 10) <= Z * np.sqrt(2 * 100 / (x.size - 1))
    # marginal per-state mixture: mean of the two components, variance 10 + half-spread^2
    for k, (m, v) in enumerate([(5.0, 35.0), (0.0, 59.0)]):
        x = y[z == k]
        assert abs(x.mean() - m) <= Z * np.sqrt(v / x.size)


def test_fox_b_defaults():
    d = D.fox_experiment_b()
    assert d.observations.shape == (2000, 1) and d.states.shape == (2000,)
    assert d.info["components"].shape == (2000,)
    np.testing.assert_allclose(d.info["component_means"], [[0, 10], [-7, 7]])
    assert d.info["variance"] == 10.0
    assert_uniform_initial_state(D.fox_experiment_b, 2)


# ------------------------------------------------------------------------------------ PGAS
def test_pgas_a_parameters_long_draw():
    d = D.pgas_set_a(num_steps=200_000, seed=3)
    P = np.full((4, 4), 0.25 / 3) + np.eye(4) * (0.75 - 0.25 / 3)
    np.testing.assert_allclose(d.info["transition_matrix"], P)
    assert_transition_matrix(d.states, P)
    assert_gaussian_per_state(d.observations[:, 0], d.states, [-2.0, -0.5, 1.0, 4.0], [0.25] * 4)


def test_pgas_defaults_and_set_b():
    a = D.pgas_set_a()
    assert a.observations.shape == (4000, 1) and a.info["sd"] == 0.5
    b = D.pgas_set_b(num_steps=100_000, seed=4)
    np.testing.assert_allclose(b.info["means"], np.arange(-9, 10, 2))
    P = np.full((10, 10), 0.25 / 9) + np.eye(10) * (0.75 - 0.25 / 9)
    assert_transition_matrix(b.states, P)
    assert_gaussian_per_state(b.observations[:, 0], b.states, np.arange(-9, 10, 2), [0.25] * 10)
    c = D.pgas_set_b(num_steps=10, means=np.linspace(-10, 10, 10))
    np.testing.assert_allclose(c.info["means"], np.linspace(-10, 10, 10))
    with pytest.raises(ValueError, match="means"):
        D.pgas_set_b(means=[1.0, 2.0])
    assert_uniform_initial_state(D.pgas_set_a, 4)


@pytest.mark.parametrize("fn", [D.fox_experiment_a, D.fox_experiment_b, D.pgas_set_a, D.pgas_set_b])
def test_determinism_and_seed_dependence(fn):
    a, b, c = fn(num_steps=300, seed=7), fn(num_steps=300, seed=7), fn(num_steps=300, seed=8)
    np.testing.assert_array_equal(a.observations, b.observations)
    np.testing.assert_array_equal(a.states, b.states)
    assert not np.array_equal(a.observations, c.observations)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_num_steps_validation(bad):
    with pytest.raises(ValueError, match="num_steps"):
        D.fox_experiment_a(num_steps=bad)
    with pytest.raises(ValueError, match="num_steps"):
        D.rcd_sequence1(num_steps=bad)


# ------------------------------------------------------------------------------------- RCD
def test_rcd_sequence1():
    d = D.rcd_sequence1()
    assert d.observations.shape == (500,) and d.states.shape == (500,)
    letters = "".join("ABCDE"[i] for i in d.observations[:24])
    assert letters == "ABCDBCDE" * 3
    np.testing.assert_array_equal(d.states, np.arange(500) % 8)
    # emissions are a deterministic function of the phase
    np.testing.assert_array_equal(d.info["emission_matrix"][d.states].argmax(1), d.observations)
    np.testing.assert_array_equal(d.info["transition_matrix"][d.states[:-1]].argmax(1), d.states[1:])
    # MI(phase; symbol) = H(symbol) on T = 500 (the 5-state solution of the RCD notes): 1.5596 nats
    assert abs(stats.entropy(np.bincount(d.observations)) - 1.5596) < 5e-5
    # and the perfect 8-state solution: H(phase) ~ log 8 = 2.0794
    assert abs(stats.entropy(np.bincount(d.states)) - 2.0794) < 5e-5


# ----------------------------------------------------------------------------------- mocap
def _raw_mocap():
    raw = importlib.resources.files("numpyro_hdphmm").joinpath("data", "mocap6.npz").read_bytes()
    with np.load(io.BytesIO(raw)) as f:
        return {k: f[k] for k in f.files}


def test_mocap6():
    m = D.load_mocap6()
    raw = _raw_mocap()
    assert m.observations.shape == (6, 446, 12)
    assert m.states.shape == (6, 446) and m.previous.shape == (6, 446, 12)
    np.testing.assert_array_equal(m.lengths, [382, 205, 251, 446, 387, 387])
    assert m.lengths.sum() == 2058
    assert len(m.state_names) == 12 and m.state_names[0] == "JumpJack"
    assert len(m.channel_names) == 12 and m.channel_names[0] == "root.ty"
    valid = np.arange(446)[None, :] < m.lengths[:, None]
    # padding: NaN observations, -1 labels; no NaN or -1 inside the sequences
    assert np.all(np.isnan(m.observations[~valid])) and np.all(m.states[~valid] == -1)
    assert np.all(np.isfinite(m.observations[valid])) and np.all(m.states[valid] >= 0)
    # the valid rows, in order, are the raw file; labels shifted from 1..12 to 0..11
    np.testing.assert_array_equal(m.observations[valid], raw["X"])
    np.testing.assert_array_equal(m.previous[valid], raw["Xprev"])
    np.testing.assert_array_equal(m.states[valid], raw["TrueZ"] - 1)
    assert set(np.unique(m.states[valid])) == set(range(12))
    # Xprev is the previous frame inside each sequence
    for n in range(6):
        L = m.lengths[n]
        np.testing.assert_array_equal(m.previous[n, 1:L], m.observations[n, : L - 1])


# ----------------------------------------------------------------------------------- alice
def test_alice_matches_paper_sizes():
    a = D.load_alice()
    T, V = len(a.tokens), len(a.vocabulary)
    assert a.tokens.dtype == np.int32 and a.tokens.shape == (T,)
    # RCD paper: |Sigma| = 1,487 after mapping singletons to UNK
    assert V == a.info["paper_vocabulary_size"] == 1487
    # RCD paper: 28,120 words in all (27,120 train + 1,000 test); segmentation unspecified
    assert abs(T - 28_120) / 28_120 < 0.005
    assert T == 28_103  # documented value
    np.testing.assert_array_equal(a.counts, np.bincount(a.tokens, minlength=V))
    assert np.all(np.diff(a.counts) <= 0)  # sorted by decreasing count
    assert np.all(a.counts >= 2)
    assert "EOS" in a.vocabulary and "UNK" in a.vocabulary
    assert all(w in ("EOS", "UNK") or re.fullmatch(r"[a-z0-9]+", w) for w in a.vocabulary)
    words = [a.vocabulary[i] for i in a.tokens]
    assert " ".join(words[:12]) == "chapter i EOS down the rabbit hole EOS alice was beginning to"
    assert words[-1] == "EOS"
    assert a.info["num_test"] == 1000


def test_alice_word_count_independent():
    """Non-EOS tokens = words of the raw text counted by a different regex (apostrophes inside
    words joined, everything else non-alphanumeric separating)."""
    a = D.load_alice()
    raw = importlib.resources.files("numpyro_hdphmm").joinpath("data", "alice_in_wonderland.txt").read_text()
    body = raw.split("\n", 1)[1]
    words = re.findall(r"[A-Za-z0-9]+(?:'[A-Za-z]+)*", body)
    eos = a.vocabulary.index("EOS")
    assert np.sum(a.tokens != eos) == len(words) == 26_680
    # number of distinct words seen at least twice, + EOS + UNK
    counts = {}
    for w in words:
        w = w.lower().replace("'", "")
        counts[w] = counts.get(w, 0) + 1
    assert sum(c >= 2 for c in counts.values()) + 2 == len(a.vocabulary)
    # UNK count = number of singleton occurrences
    assert a.counts[a.vocabulary.index("UNK")] == sum(c == 1 for c in counts.values())


def test_alice_min_count():
    a1 = D.load_alice(min_count=1)
    assert "UNK" not in a1.vocabulary and a1.info["unk"] is None
    a3 = D.load_alice(min_count=3)
    assert len(a3.vocabulary) < 1487 and np.all(a3.counts >= 3)
    assert len(a1.tokens) == len(a3.tokens)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="min_count"):
            D.load_alice(min_count=bad)


def test_alice_characters():
    """Chapter 1 as characters: shape, alphabet, counts, the documented length and opening, round
    trip against the raw text cleaned by a separate route (words of the raw text, apostrophes
    joined, joined by single spaces), the whole book, and `chapter` validation."""
    a = D.load_alice_characters()
    assert a.vocabulary == D.ALICE_ALPHABET == tuple("abcdefghijklmnopqrstuvwxyz ")
    assert a.tokens.dtype == np.int32 and a.tokens.shape == (10_755,)
    assert a.tokens.min() >= 0 and a.tokens.max() <= 26
    np.testing.assert_array_equal(a.counts, np.bincount(a.tokens, minlength=27))
    assert (a.info["chapter"], a.info["num_train"], a.info["num_test"]) == (1, 1000, 4000)
    text = "".join(a.vocabulary[c] for c in a.tokens)
    raw = importlib.resources.files("numpyro_hdphmm").joinpath("data", "alice_in_wonderland.txt").read_text()
    start, end = raw.index("CHAPTER I. Down"), raw.index("CHAPTER II.")
    body = raw[start:end].split("\n", 1)[1]  # heading line dropped
    words = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)*", body)
    assert text == " ".join(w.lower().replace("'", "") for w in words)
    assert text.startswith("alice was beginning to get very tired of sitting by her sister on the bank and of")
    assert "  " not in text and text[0] != " " and text[-1] != " "
    book = D.load_alice_characters(chapter=None)
    assert book.tokens.shape == (133_921,) and book.info["chapter"] is None
    np.testing.assert_array_equal(book.tokens[:10_755], a.tokens)
    last = "".join(book.vocabulary[c] for c in book.tokens[-40:])
    assert last == "own child life and the happy summer days"
    assert "".join(book.vocabulary[c] for c in D.load_alice_characters(12).tokens[:30]).startswith("here cried alice")
    for bad in (0, 13, 1.0, True, "1"):
        with pytest.raises(ValueError, match="chapter"):
            D.load_alice_characters(chapter=bad)
