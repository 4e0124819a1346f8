"""The kernels' ``init_strategy`` (issue 16 item 2, issue 19): the data-driven default finds the
regimes of a clear two-regime series at sweep 0 where the prior draw does not, ``"prior"`` and
NumPyro's ``init_to_value`` are honoured, several sequences with ``lengths`` and missing steps and
custom emissions work, and bad values raise a ``ValueError`` naming the argument."""

import warnings
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import init_to_median, init_to_value
from scipy.optimize import linear_sum_assignment

import numpyro_hdphmm as nh
from numpyro_hdphmm._core.clustering import hmm_bic, kmeans, merge_mixture, window_sum
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, WeakLimitGibbs, init_to_data
from numpyro_hdphmm.infer.plumbing.initialization import DataInit, cluster_states, labelling_score

T = 200


def regimes(num_steps=T, seed=0):
    """Two regimes 5 sd apart, switching every 50 steps: ``(y (T, 1), truth (T,))``."""
    truth = (np.arange(num_steps) // 50) % 2
    y = np.random.default_rng(seed).normal(5.0 * truth, 1.0)[:, None]
    return y, truth


def found(states, truth):
    """True states whose optimally matched state covers more than half of their steps."""
    _, s = np.unique(states, return_inverse=True)
    _, t = np.unique(truth, return_inverse=True)
    conf = np.zeros((t.max() + 1, s.max() + 1))
    np.add.at(conf, (t, s), 1)
    rows, cols = linear_sum_assignment(-conf)
    return int(np.sum(conf[rows, cols] > 0.5 * conf.sum(1)[rows]))


def model(y, lengths=None):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    emission = nh.emissions.GaussianNIW(jnp.array([2.5]), 0.01, 3.0, jnp.eye(1))
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=8), obs=y, lengths=lengths)


def initial(kernel, *args, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kernel.init(jax.random.key(seed), 0, None, args, {})


# ------------------------------------------------------------------------- numerics
def test_window_sum_matches_loop():
    x = np.random.default_rng(1).normal(size=(2, 9, 3))
    out = np.asarray(window_sum(x, 4))
    expected = np.stack([[x[n, max(t - 2, 0):t + 3].sum(0) for t in range(9)] for n in range(2)])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_kmeans_and_merge_find_two_blobs():
    """k-means with 6 clusters over-splits two blobs; the merge joins the pieces of each blob
    and keeps the blobs apart."""
    rng = np.random.default_rng(2)
    truth = np.repeat([0, 1], 150)
    points = jnp.asarray(rng.normal(size=(300, 2)) * 0.5 + 4.0 * truth[:, None], jnp.float32)
    weights = jnp.ones(300)
    labels, _ = kmeans(jax.random.key(0), points, weights, 6, 20)
    assert len(np.unique(labels)) > 2
    merged = np.asarray(merge_mixture(points, weights, labels, 6))
    assert len(np.unique(merged)) == 2 and found(merged, truth) == 2


def test_merge_joins_the_cells_of_one_blob_that_a_pairwise_test_keeps_apart():
    """Four 1-D Gaussians 3 sd apart (Tripuraneni et al.'s set A marginal, 4000 points) cut by
    k-means into 16 cells: the mixture's BIC merges them back to the four components (two
    adjacent cells of one Gaussian are each flat-topped, which two Gaussians fit better than
    one: a test of each pair alone keeps every cell)."""
    data = nh.datasets.pgas_set_a(4000, seed=0)
    points = jnp.asarray(data.observations, jnp.float32)
    labels, _ = kmeans(jax.random.key(0), points, jnp.ones(4000), 16, 20)
    merged = np.asarray(merge_mixture(points, jnp.ones(4000), labels, 16))
    assert len(np.unique(merged)) == 4 and found(merged, data.states) == 4


def test_merge_keeps_two_clusters_of_overlapping_regimes():
    """Two regimes whose means are 1 sd apart look like one Gaussian to the mixture: the BIC merge
    would end at one cluster, a start that traps the one-step-at-a-time samplers (measured,
    docs/benchmarks.md "Replica exchange": DirectAssignmentGibbs 87% and BeamSampler 76% of the
    sweeps at one state).  The merge stops at two; ``min_clusters=1`` (the rule before) is the
    negative control."""
    rng = np.random.default_rng(0)
    points = jnp.asarray(rng.normal(np.repeat([0.0, 1.0, 0.0], 50) - 0.5, 1.0)[:, None])
    labels, _ = kmeans(jax.random.key(0), points, jnp.ones(150), 10, 20)
    assert len(np.unique(np.asarray(merge_mixture(points, jnp.ones(150), labels, 10, min_clusters=1)))) == 1
    assert len(np.unique(np.asarray(merge_mixture(points, jnp.ones(150), labels, 10, min_clusters=2)))) == 2
    z = np.asarray(initial(nh.infer.DirectAssignmentGibbs(model), np.asarray(points)).z["y_states"])
    assert len(np.unique(z)) >= 2


def test_hmm_bic_prefers_the_true_labelling():
    """The plug-in HMM's BIC ranks the true states of set A above a coarser (two means) and a
    finer (the four states each cut in two at random) labelling, with missing values and a
    padded second sequence."""
    data = nh.datasets.pgas_set_a(1000, seed=1)
    f = np.stack([data.observations, data.observations[::-1]]).astype(np.float32)  # (2, T, 1)
    weights = np.ones_like(f)
    weights[0, 5:9] = 0.0
    valid = np.ones(f.shape[:2], bool)
    valid[1, 800:] = False
    truth = np.stack([data.states, data.states[::-1]])
    coarse = (truth >= 2).astype(np.int32)
    fine = truth * 2 + np.random.default_rng(0).integers(2, size=truth.shape)
    score = {name: float(hmm_bic(jnp.asarray(f), jnp.asarray(weights), jnp.asarray(valid), jnp.asarray(z), 8))
             for name, z in (("truth", truth), ("coarse", coarse), ("fine", fine))}
    assert score["truth"] > max(score["coarse"], score["fine"]), score


def _view(emission, y, lengths):
    """The parts of a kernel's model view that :func:`labelling_score` reads, for data ``y (N, T, ...)``."""
    x, valid = jax.vmap(emission.prepare)(jnp.asarray(y))
    valid = valid & (jnp.arange(y.shape[1]) < jnp.asarray(lengths)[:, None])
    return SimpleNamespace(emission=emission, data=SimpleNamespace(x=x, valid=valid, lengths=jnp.asarray(lengths)))


def _ar_regimes(num_steps=600, seed=0):
    """Two AR(1) regimes with the same stationary distribution N(0, 1) and opposite dynamics
    (coefficients +0.9 and -0.9), switching every 100 steps: ``(y (1, T, 1), truth (1, T))``."""
    rng = np.random.default_rng(seed)
    truth = (np.arange(num_steps) // 100) % 2
    coef = np.where(truth == 0, 0.9, -0.9)
    y = np.zeros(num_steps)
    for t in range(1, num_steps):
        y[t] = coef[t] * y[t - 1] + np.sqrt(1 - 0.81) * rng.normal()
    return y[None, :, None], truth[None]


def test_labelling_score_is_the_family_collapsed_joint():
    """For a conjugate family the score is the labelling's collapsed log joint under the model's
    emission prior.  Two AR(1) regimes with one stationary distribution and opposite dynamics:
    the AR family's score ranks the true labelling far above one state and above a finer
    labelling; the Gaussian HMM's BIC on the observations (the rule before, and the fallback
    for families without a marginal) cannot see the dynamics and prefers one state (the
    negative control).  With missing values and a padded second sequence."""
    y, truth = _ar_regimes()
    y = np.concatenate([y, y[:, ::-1]]).astype(np.float64)  # (2, T, 1)
    truth = np.concatenate([truth, truth[:, ::-1]]).astype(np.int32)
    y[0, 40:43] = np.nan
    lengths = np.array([600, 450])
    emission = nh.emissions.AutoRegressive.weakly_informative(y, order=1)
    view = _view(emission, y, lengths)
    f = jnp.asarray(np.nan_to_num(y))
    w = jnp.asarray(np.isfinite(y) & (np.arange(600)[None, :, None] < lengths[:, None, None]), f.dtype)
    labellings = {"truth": truth, "one": np.zeros_like(truth),
                  "fine": truth * 2 + (np.arange(600)[None] // 50) % 2}
    score = {k: float(labelling_score(view, jnp.asarray(z), 4, f, w)) for k, z in labellings.items()}
    bic = {k: float(hmm_bic(f, w, view.data.valid, jnp.asarray(z), 4)) for k, z in labellings.items()}
    assert score["truth"] > score["one"] + 100.0 and score["truth"] > score["fine"], score
    assert bic["one"] > bic["truth"], bic


def _interleaved_categorical(num_steps=800, num_states=4, num_categories=40, seed=0):
    """A sticky 4-state HMM over 40 symbols whose supports interleave (state k emits k, k + 4,
    k + 8, ...), so that symbol ids near each other as numbers belong to different states:
    ``(y (T,), truth (T,))``."""
    rng = np.random.default_rng(seed)
    z = np.zeros(num_steps, int)
    for t in range(1, num_steps):
        z[t] = z[t - 1] if rng.random() < 0.95 else rng.integers(num_states)
    y = np.array([rng.choice(np.arange(z[t], num_categories, num_states)) for t in range(num_steps)])
    return y, z


def categorical_model(y):
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 10.0, nh.emissions.Categorical(40, 0.1), max_states=12), obs=y)


def test_categorical_start_embeds_the_categories(monkeypatch):
    """Categories are labels: the start clusters windows of a random embedding of them
    (``Categorical.clustering_features``), which finds the states of interleaved supports
    (measured: 3 of the 4 at the start, Hamming 0.18); clustering the ids as numbers (the
    family default, the rule before) finds one state (Hamming 0.52)."""
    y, truth = _interleaved_categorical()
    z = np.asarray(initial(WeakLimitGibbs(categorical_model), jnp.asarray(y)).z["y_states"])
    assert found(z, truth) >= 3 and float(nh.diagnostics.hamming_distance(z[None], truth)[0]) < 0.3
    monkeypatch.setattr(nh.emissions.Categorical, "clustering_features", nh.emissions.base.EmissionFamily.clustering_features)
    z = np.asarray(initial(WeakLimitGibbs(categorical_model), jnp.asarray(y)).z["y_states"])
    assert found(z, truth) <= 2 and float(nh.diagnostics.hamming_distance(z[None], truth)[0]) > 0.4


def _noise_regimes(num_steps=600, seed=0):
    """AR(1) data with two regimes that differ only in their noise scale (coefficient 0.5, noise
    s.d. 0.3 and 1.5; both centred at 0), four 150-step segments: ``(y (T, 1), truth (T,))``."""
    rng = np.random.default_rng(seed)
    truth = np.repeat([0, 1, 0, 1], num_steps // 4)
    y, prev = np.zeros(num_steps), 0.0
    for t in range(num_steps):
        prev = 0.5 * prev + (0.3, 1.5)[truth[t]] * rng.normal()
        y[t] = prev
    return y[:, None], truth


def ar_model(y):
    emission = nh.emissions.AutoRegressive.weakly_informative(y, order=1)
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 10.0, emission, max_states=12), obs=y)


def test_autoregressive_start_clusters_the_dynamics(monkeypatch):
    """Regimes that share their level and differ in their dynamics: the autoregressive family's
    features (``AutoRegressive.clustering_features``: the values with the lag-one products and
    the increments) find them (measured: Hamming 0.02 at the start); clustering the values alone
    (the family default, the rule before) mislabels about a fifth of the steps (0.18)."""
    y, truth = _noise_regimes()
    y = jnp.asarray(y)
    z = np.asarray(initial(WeakLimitGibbs(ar_model), y).z["y_states"])
    assert found(z, truth) == 2 and float(nh.diagnostics.hamming_distance(z[None], truth)[0]) < 0.08
    monkeypatch.setattr(nh.emissions.AutoRegressive, "clustering_features",
                        nh.emissions.base.EmissionFamily.clustering_features)
    z = np.asarray(initial(WeakLimitGibbs(ar_model), y).z["y_states"])
    assert float(nh.diagnostics.hamming_distance(z[None], truth)[0]) > 0.12


def test_labelling_score_falls_back_to_the_gaussian_hmm_bic():
    """Families without a closed-form marginal likelihood (custom emissions, DP mixtures) are
    scored by the plug-in Gaussian HMM's BIC."""
    y, truth = regimes()
    y = y[None].astype(np.float64)
    emission = nh.emissions.DPMixture(nh.emissions.GaussianNIW(jnp.zeros(1), 0.01, 3.0, jnp.eye(1)), 1.0, 3)
    view = _view(emission, y, [T])
    f, w = jnp.asarray(y), jnp.ones(y.shape)
    z = jnp.asarray(truth[None].astype(np.int32))
    np.testing.assert_allclose(float(labelling_score(view, z, 4, f, w)), float(hmm_bic(f, w, view.data.valid, z, 4)))


# ----------------------------------------------------------------------- strategies
def test_bad_init_strategy_names_the_argument():
    for bad in ("bogus", 3, None):
        with pytest.raises(ValueError, match="init_strategy"):
            WeakLimitGibbs(model, init_strategy=bad)
    for bad in (0, (), (1, 0), "3", tuple(range(1, 10))):
        with pytest.raises(ValueError, match="init_strategy.*window"):
            init_to_data(window=bad)
    assert init_to_data(window=5).window == (5,)


def test_data_start_finds_both_regimes_where_the_prior_draw_does_not():
    """At sweep 0 (after ``init``) the data-driven default holds the two regimes (Hamming < 0.1:
    the windows straddling a switch are blurred; the first sweep sharpens them), the emission means drawn given them near 0 and 5; the prior-draw start
    (the behaviour before issue 16) does not find them."""
    y, truth = regimes()
    state = initial(WeakLimitGibbs(model), jnp.asarray(y))
    z = np.asarray(state.z["y_states"])
    assert found(z, truth) == 2
    assert float(nh.diagnostics.hamming_distance(z[None], truth)[0]) < 0.1
    mu = np.asarray(state.z["y_mu"])[[np.bincount(z[truth == r]).argmax() for r in (0, 1)], 0]
    np.testing.assert_allclose(mu, [0.0, 5.0], atol=0.5)
    prior = initial(WeakLimitGibbs(model, init_strategy="prior"), jnp.asarray(y))
    assert found(np.asarray(prior.z["y_states"]), truth) < 2


def test_init_to_value_is_honoured():
    """NumPyro's ``init_to_value``: given states are the starting states (the emission
    parameters drawn given them), a given hyperparameter its starting value; ``init_to_median``
    is accepted too (not compiled here, to keep the suite cheap).  The states as a JAX array
    (checked on the host: inside the compiled init a check on the constant raised
    ``TracerBoolConversionError``); states outside the capacity raise a ``ValueError``."""
    y, truth = regimes()
    z0 = np.where(np.arange(T) < 120, 3, 5).astype(np.int32)
    with pytest.raises(ValueError, match="y_states.*max_states=8"):
        initial(BeamSampler(model, init_strategy=init_to_value(values={"y_states": jnp.asarray(z0 + 5)})), jnp.asarray(y))
    kernel = BeamSampler(model, init_strategy=init_to_value(values={"y_states": jnp.asarray(z0), "kappa": 7.0}))
    state = initial(kernel, jnp.asarray(y))
    # the beam sampler relabels by first appearance: 3 -> 0, 5 -> 1
    np.testing.assert_array_equal(np.asarray(state.z["y_states"]), (z0 == 5).astype(np.int32))
    assert float(state.z["kappa"]) == pytest.approx(7.0)
    mu = np.asarray(state.z["y_mu"])[:2, 0]
    np.testing.assert_allclose(mu, [y[:120].mean(), y[120:].mean()], atol=0.4)
    WeakLimitGibbs(model, init_strategy=init_to_median(num_samples=5))  # accepted


@pytest.mark.slow  # the data start is exercised by every default-suite kernel test
def test_several_sequences_with_lengths_and_missing_steps():
    """Two padded sequences (lengths 200 and 130) with missing steps: the clustered start holds
    both regimes on the observed steps of both sequences."""
    y1, t1 = regimes(seed=3)
    y2, t2 = regimes(seed=4)
    y2[130:] = np.nan
    y1[[10, 11, 60]] = np.nan
    ys = jnp.asarray(np.stack([y1, y2]))
    lengths = jnp.asarray([200, 130], jnp.int32)
    state = initial(DirectAssignmentGibbs(model), ys, lengths)
    z = np.asarray(state.z["y_states"])
    observed = np.isfinite(np.stack([y1, y2])[..., 0])
    zs, truth = z[observed], np.stack([t1, t2])[observed]
    assert found(zs, truth) == 2 and float(nh.diagnostics.hamming_distance(zs[None], truth)[0]) < 0.2
    assert np.all((z >= 0) & (z < 8))


def custom_model(y):
    loc = numpyro.sample("loc", dist.Normal(2.5, 5.0).expand([8]).to_event(1))
    hmm = nh.StickyHDPHMM(1.0, 1.0, 10.0, lambda k: dist.Normal(loc[k], 1.0), max_states=8)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow  # the data start is exercised by every default-suite kernel test
def test_custom_emission_states_from_clusters():
    """A custom (non-conjugate) emission: the starting states are the clusters of the windowed
    observations (both regimes), the user's parameter site starts as the inner kernel
    initializes it."""
    y, truth = regimes()
    state = initial(WeakLimitGibbs(custom_model), jnp.asarray(y[:, 0]))
    assert found(np.asarray(state.z["y_states"]), truth) == 2
    assert np.all(np.isfinite(np.asarray(state.z["loc"])))


def set_a_model(y):
    emission = nh.emissions.DiagonalGaussian(jnp.zeros(1), 1.0 / 16.0, 1000.0, 250.0)
    nh.sample("y", nh.HDPHMM(1.0, 1.0, emission, max_states=16), obs=y)


@pytest.mark.slow
def test_window_choice_keeps_short_states_apart():
    """Tripuraneni et al.'s set A (4 states lasting 4 steps on average, means 3 sd apart): the
    default start picks the one-step windows (the HMM's BIC) and holds the 4 states (Hamming
    0.07 at T = 4000); with 10-step windows only, as before, the windows straddle the states
    and the start does not (Hamming > 0.3)."""
    data = nh.datasets.pgas_set_a(2000, seed=0)
    y = jnp.asarray(data.observations, jnp.float32)
    z = np.asarray(initial(WeakLimitGibbs(set_a_model), y).z["y_states"])
    assert len(np.unique(z)) == 4 and found(z, data.states) == 4
    assert float(nh.diagnostics.hamming_distance(z[None], data.states)[0]) < 0.12
    z10 = np.asarray(initial(WeakLimitGibbs(set_a_model, init_strategy=init_to_data(window=10)), y).z["y_states"])
    assert float(nh.diagnostics.hamming_distance(z10[None], data.states)[0]) > 0.3


@pytest.mark.slow
def test_motion_capture_start_takes_the_windows_the_family_prefers():
    """The motion-capture data (``examples/mocap.py``'s AR(1) model): of the 1-, 3- and 10-step
    windows' labellings, the AR family's collapsed score prefers the 10-step one (measured with the
    values, lag-one products and increments as features: 10 states, Hamming distance 0.40 to the
    annotated exercises; with the values alone, 8 states and 0.38), the closest to the
    annotation; the Gaussian HMM's BIC, the rule before, prefers another (with the values alone,
    the 1-step one: 14 states, 0.52)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
    import mocap

    data = nh.datasets.load_mocap6()
    lengths = np.asarray(data.lengths)
    y, _, _ = mocap.standardize(data.observations, lengths)
    truth = mocap.valid_frames(data.states, lengths)
    kernel = WeakLimitGibbs(mocap.make_model(mocap.emission_prior(y, lengths), 30))
    args = (jnp.asarray(y), jnp.asarray(lengths, jnp.int32))
    state = initial(kernel, *args)
    view = kernel._view(args, {}, state.z)
    params = kernel._explicit_of(state.z).params
    f = jnp.nan_to_num(jnp.asarray(y, jnp.float32))
    w = (jnp.isfinite(jnp.asarray(y)) & view.data.valid[..., None]).astype(f.dtype)
    score, bic, hamming = [], [], []
    for window in (1, 3, 10):
        z = jax.jit(lambda k: cluster_states(k, view, params, 30, DataInit(window=(window,))))(jax.random.key(1))
        score.append(float(labelling_score(view, z, 30, f, w)))
        bic.append(float(hmm_bic(f, w, view.data.valid, z, 30)))
        hamming.append(float(nh.diagnostics.hamming_distance(mocap.valid_frames(np.asarray(z), lengths)[None], truth)[0]))
    assert np.argmax(score) == 2 and np.argmin(hamming) == 2 and hamming[2] < 0.45, (score, hamming)
    assert np.argmax(bic) != 2, bic
