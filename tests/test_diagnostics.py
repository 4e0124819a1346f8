"""Tests of numpyro_hdphmm.results.diagnostics against brute force: matchings over all injective label
maps, mutual information from scipy.stats.entropy and by hand, co-assignment by a double loop,
and the predictive likelihood by enumerating every state path of a tiny HMM."""

import itertools

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from scipy import stats  # noqa: E402

from numpyro_hdphmm import diagnostics as G  # noqa: E402
from numpyro_hdphmm.emissions import Categorical, GaussianNIW  # noqa: E402


# ---------------------------------------------------------------------------- brute force
def brute_force_hamming(est, ref):
    """min over all injective partial maps f: est labels -> ref labels of #{t: f(est_t) != ref_t},
    counting only steps where both labels are >= 0."""
    valid = (est >= 0) & (ref >= 0)
    e, r = est[valid], ref[valid]
    est_labels = sorted(set(e.tolist()))
    ref_labels = sorted(set(r.tolist()))
    best = None
    for targets in itertools.product(ref_labels + [None], repeat=len(est_labels)):
        used = [t for t in targets if t is not None]
        if len(used) != len(set(used)):
            continue
        f = dict(zip(est_labels, targets))
        wrong = sum(f[a] != b for a, b in zip(e.tolist(), r.tolist()))
        best = wrong if best is None else min(best, wrong)
    return best if best is not None else 0


def random_case(rng, T, L_est, L_ref, p_copy=0.6):
    ref = rng.integers(0, L_ref, T)
    perm = rng.permutation(max(L_est, L_ref))
    est = np.where(rng.random(T) < p_copy, perm[ref] % L_est, rng.integers(0, L_est, T))
    return est, ref


# ----------------------------------------------------------------------- relabel / hamming
def test_hamming_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(150):
        T = int(rng.integers(1, 14))
        est, ref = random_case(rng, T, int(rng.integers(1, 5)), int(rng.integers(1, 4)))
        h = G.hamming_distance(est, ref, normalize=False)
        assert h == brute_force_hamming(est, ref), (est, ref)
        np.testing.assert_allclose(G.hamming_distance(est, ref), h / T)
        # the relabelled sequence realizes the distance and is an injective relabelling
        relab, mapping = G.relabel(est, ref)
        assert np.sum(relab != ref) == h
        np.testing.assert_array_equal(relab, mapping[est])
        assert len(set(mapping.tolist())) == mapping.size


def test_relabel_batched_equals_per_draw():
    rng = np.random.default_rng(1)
    ref = rng.integers(0, 3, 20)
    draws = np.stack([random_case(rng, 20, 4, 3)[0] for _ in range(6)]).reshape(2, 3, 20)
    relab, mapping = G.relabel(draws, ref, num_states=5)
    assert relab.shape == (2, 3, 20) and mapping.shape == (2, 3, 5)
    h = G.hamming_distance(draws, ref, normalize=False)
    assert h.shape == (2, 3)
    for i, j in itertools.product(range(2), range(3)):
        r1, m1 = G.relabel(draws[i, j], ref, num_states=5)
        np.testing.assert_array_equal(relab[i, j], r1)
        np.testing.assert_array_equal(mapping[i, j], m1)
        assert h[i, j] == brute_force_hamming(draws[i, j], ref)


def test_invariance_to_permuting_estimated_labels():
    rng = np.random.default_rng(2)
    ref = np.repeat([0, 1, 2, 3], 10)
    est = ref.copy()
    flip = rng.choice(40, 6, replace=False)
    est[flip] = rng.integers(0, 6, 6)  # noisy copy with two extra labels (unique optimum)
    base_relab, _ = G.relabel(est, ref)
    base_h = G.hamming_distance(est, ref)
    for _ in range(20):
        perm = rng.permutation(6)
        relab, _ = G.relabel(perm[est], ref)
        np.testing.assert_array_equal(relab, base_relab)
        assert G.hamming_distance(perm[est], ref) == base_h


def test_perfect_estimate_and_label_counts():
    ref = np.array([0, 0, 1, 1, 2, 2, 2])
    perm = np.array([4, 0, 2])
    relab, mapping = G.relabel(perm[ref], ref)
    np.testing.assert_array_equal(relab, ref)
    assert G.hamming_distance(perm[ref], ref) == 0.0
    # more estimated labels than reference labels: extras get fresh labels >= 3
    est = np.array([0, 1, 2, 2, 3, 3, 4])
    relab, mapping = G.relabel(est, ref)
    assert set(relab.tolist()) - {0, 1, 2} <= set(range(3, 10))
    assert np.all(np.isin(relab[relab >= 3], np.arange(3, 10)))
    assert G.hamming_distance(est, ref, normalize=False) == brute_force_hamming(est, ref) == 2
    # an estimated label overlapping only an already-matched reference label is not paired
    # with an unused reference label (zero overlap) but gets a fresh label
    relab, _ = G.relabel(np.array([0, 0, 1, 2, 2]), np.array([0, 0, 0, 1, 2]))
    assert relab[0] == 0 and relab[2] == 3 and relab[3] in (1, 2)
    # fewer estimated labels than reference labels
    est = np.zeros(7, int)
    assert G.hamming_distance(est, ref, normalize=False) == 4


def test_negative_labels_are_skipped():
    ref = np.array([0, 0, 1, 1, -1, -1])
    est = np.array([1, 1, 0, 0, 0, -1])
    relab, _ = G.relabel(est, ref)
    np.testing.assert_array_equal(relab, [0, 0, 1, 1, 1, -1])
    assert G.hamming_distance(est, ref) == 0.0
    assert G.num_states(np.array([[-1, -1], [0, -1], [3, 3]])).tolist() == [0, 1, 1]


def test_relabel_validation():
    with pytest.raises(ValueError, match="states"):
        G.relabel(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="states"):
        G.relabel(np.array([0.5, 1.0]), np.zeros(2))
    with pytest.raises(ValueError, match="num_states"):
        G.relabel(np.array([0, 5]), np.zeros(2, int), num_states=3)


# -------------------------------------------------------------------- mutual information
def test_mutual_information_by_hand():
    log = np.log
    assert np.isclose(G.mutual_information([0, 0, 1, 1], [0, 0, 1, 1]), log(2))
    assert np.isclose(G.mutual_information([0, 0, 1, 1], [5, 5, 2, 2]), log(2))
    assert np.isclose(G.mutual_information([0, 0, 1, 1], [0, 1, 0, 1]), 0.0)
    a, b = [0, 0, 0, 1], [0, 0, 1, 1]
    mi = 0.5 * log(4 / 3) + 0.25 * log(2 / 3) + 0.25 * log(2)
    assert np.isclose(G.mutual_information(a, b), mi)
    h_a = -(0.75 * log(0.75) + 0.25 * log(0.25))
    assert np.isclose(G.mutual_information(a, b, normalized=True), mi / ((h_a + log(2)) / 2))
    # both constant: MI 0, NMI 1 by convention; one constant: NMI 0
    assert G.mutual_information([1, 1, 1], [2, 2, 2]) == 0.0
    assert G.mutual_information([1, 1, 1], [2, 2, 2], normalized=True) == 1.0
    assert G.mutual_information([1, 1, 1], [0, 1, 2], normalized=True) == 0.0


def entropy_mi(a, b):
    """MI and arithmetic NMI from scipy.stats.entropy: H(a) + H(b) - H(a, b)."""
    ha = stats.entropy(np.unique(a, return_counts=True)[1])
    hb = stats.entropy(np.unique(b, return_counts=True)[1])
    hab = stats.entropy(np.unique(np.stack([a, b]), axis=1, return_counts=True)[1])
    mi = ha + hb - hab
    return mi, mi / ((ha + hb) / 2)


def test_mutual_information_against_entropies_and_batched():
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 4, 60)
    draws = np.stack([random_case(rng, 60, 5, 4, p_copy=p)[0] for p in np.linspace(0, 1, 8)])
    draws[:, 0] = np.where(draws[:, 0] == 0, 1, draws[:, 0])  # vary the label sets
    mi = G.mutual_information(draws, ref)
    nmi = G.mutual_information(draws, ref, normalized=True)
    assert mi.shape == nmi.shape == (8,)
    for d in range(8):
        e_mi, e_nmi = entropy_mi(draws[d], ref)
        np.testing.assert_allclose(mi[d], e_mi, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(nmi[d], e_nmi, rtol=1e-12, atol=1e-12)
        # invariant to relabelling either side
        perm = rng.permutation(5)
        np.testing.assert_allclose(G.mutual_information(perm[draws[d]], ref), mi[d], atol=1e-12)
        np.testing.assert_allclose(G.mutual_information(ref, draws[d]), mi[d], atol=1e-12)
    assert np.all(nmi <= 1.0) and np.all(mi >= 0)
    np.testing.assert_allclose(G.mutual_information(ref, ref, normalized=True), 1.0)


def test_mutual_information_rcd_sequence1_reference_values():
    # notes (rcd.md): on T = 500, the 5-state (one per symbol) solution has MI 1.5596 nats and
    # the perfect 8-state one 2.0794 nats
    h = np.arange(500) % 8
    symbols = np.array([0, 1, 2, 3, 1, 2, 3, 4])[h]
    assert abs(G.mutual_information(symbols, h) - 1.5596) < 5e-5
    assert abs(G.mutual_information((h + 3) % 8, h) - 2.0794) < 5e-5


# ---------------------------------------------------------------------- co-assignment etc.
def test_coassignment_matches_double_loop():
    rng = np.random.default_rng(4)
    draws = rng.integers(-1, 4, (5, 9))
    expected = np.zeros((9, 9))
    for d in draws:
        for s in range(9):
            for t in range(9):
                expected[s, t] += d[s] >= 0 and d[s] == d[t]
    expected /= 5
    np.testing.assert_allclose(G.coassignment_matrix(draws), expected)
    np.testing.assert_allclose(G.coassignment_matrix(draws, chunk_elements=1), expected)  # 1 draw per chunk
    # invariant to relabelling each draw
    perm = np.stack([np.append(rng.permutation(4), -1) for _ in range(5)])
    relabelled = np.take_along_axis(perm, np.where(draws >= 0, draws, 4), axis=1)
    np.testing.assert_allclose(G.coassignment_matrix(relabelled), expected)
    np.testing.assert_allclose(G.coassignment_matrix(draws[0]), _single(draws[0]))


def _single(d):
    return ((d[:, None] == d[None, :]) & (d[:, None] >= 0)).astype(float)


def test_num_states_matches_unique():
    rng = np.random.default_rng(5)
    draws = rng.integers(-1, 7, (4, 3, 15))
    n = G.num_states(draws)
    assert n.shape == (4, 3)
    for idx in itertools.product(range(4), range(3)):
        assert n[idx] == len(set(draws[idx].tolist()) - {-1})


# ------------------------------------------------------------------ predictive likelihood
def brute_force_predictive(trans, log_emission, renormalize=False):
    """log mean_s sum over all state paths; ``log_emission[s] (T, K)`` (0 for missing steps)."""
    S, K = trans.shape[0], trans.shape[1] - 1
    T = log_emission.shape[1]
    per_draw = []
    for s in range(S):
        init, A = trans[s, K, :K], trans[s, :K, :K]
        if renormalize:
            init, A = init / init.sum(), A / A.sum(1, keepdims=True)
        total = 0.0
        for z in itertools.product(range(K), repeat=T):
            p = init[z[0]] * np.prod([A[z[t - 1], z[t]] for t in range(1, T)])
            total += p * np.exp(sum(log_emission[s, t, z[t]] for t in range(T)))
        per_draw.append(np.log(total))
    per_draw = np.array(per_draw)
    return np.log(np.mean(np.exp(per_draw))), per_draw


def gaussian_draws(rng, S=2, K=2):
    trans = rng.dirichlet(np.ones(K + 1), size=(S, K + 1))
    mu = rng.normal(size=(S, K, 1)) * 2
    cov = rng.uniform(0.5, 2.0, size=(S, K, 1, 1))
    return {"y_trans": trans, "y_mu": mu, "y_cov": cov}


def gaussian_log_emission(samples, y):
    mu, sd = samples["y_mu"][..., 0], np.sqrt(samples["y_cov"][..., 0, 0])  # (S, K)
    le = stats.norm.logpdf(y[None, :, None], mu[:, None, :], sd[:, None, :])  # (S, T, K)
    return np.where(np.isnan(y)[None, :, None], 0.0, le)


EMISSION = GaussianNIW(np.zeros(1), 1.0, 3.0, np.eye(1))


@pytest.mark.parametrize("renormalize", [False, True])
def test_predictive_gaussian_brute_force(renormalize):
    rng = np.random.default_rng(6)
    samples = gaussian_draws(rng)
    y = rng.normal(size=4)
    res = G.predictive_log_likelihood(samples, EMISSION, y[:, None], renormalize=renormalize)
    expected, per_draw = brute_force_predictive(samples["y_trans"], gaussian_log_emission(samples, y), renormalize)
    np.testing.assert_allclose(res.per_draw, per_draw, rtol=1e-10)
    np.testing.assert_allclose(res.log_likelihood, expected, rtol=1e-10)
    assert res.num_observed == 4 and res.per_sequence.shape == (2, 1)
    np.testing.assert_allclose(res.per_step, expected / 4, rtol=1e-10)
    np.testing.assert_allclose(res.perplexity, np.exp(-expected / 4), rtol=1e-10)
    # the leftover mass matters: the two variants differ
    other = G.predictive_log_likelihood(samples, EMISSION, y[:, None], renormalize=not renormalize)
    assert abs(other.log_likelihood - res.log_likelihood) > 1e-3


def test_predictive_missing_padding_and_draw_axes():
    rng = np.random.default_rng(7)
    samples = gaussian_draws(rng, S=4)
    y1 = rng.normal(size=4)
    y1[2] = np.nan  # missing: emission dropped, transition kept
    y2 = rng.normal(size=3)
    e1, p1 = brute_force_predictive(samples["y_trans"], gaussian_log_emission(samples, y1))
    e2, p2 = brute_force_predictive(samples["y_trans"], gaussian_log_emission(samples, y2))
    Y = np.full((2, 4, 1), np.nan)
    Y[0, :, 0], Y[1, :3, 0] = y1, y2
    # draws as (chains=2, draws=2): flattened in C order
    grouped = {k: v.reshape((2, 2) + v.shape[1:]) for k, v in samples.items()}
    res = G.predictive_log_likelihood(grouped, EMISSION, Y, lengths=np.array([4, 3]))
    np.testing.assert_allclose(res.per_sequence, np.stack([p1, p2], 1), rtol=1e-10)
    joint = p1 + p2
    np.testing.assert_allclose(res.log_likelihood, np.log(np.mean(np.exp(joint))), rtol=1e-10)
    assert res.num_observed == 3 + 3
    res_b = G.predictive_log_likelihood(grouped, EMISSION, Y, lengths=np.array([4, 3]), batch_size=3)
    np.testing.assert_allclose(res_b.per_draw, res.per_draw, rtol=1e-12)


def test_predictive_categorical_perplexity():
    rng = np.random.default_rng(8)
    S, K, C = 3, 2, 4
    trans = rng.dirichlet(np.ones(K + 1), size=(S, K + 1))
    probs = rng.dirichlet(np.ones(C), size=(S, K))
    y = np.array([0, 3, 3, 1, 2])
    le = np.log(probs[:, :, y]).transpose(0, 2, 1)  # (S, T, K)
    expected, _ = brute_force_predictive(trans, le)
    res = G.predictive_log_likelihood({"w_trans": trans, "w_probs": probs}, Categorical(C), y, name="w")
    np.testing.assert_allclose(res.log_likelihood, expected, rtol=1e-10)
    np.testing.assert_allclose(res.perplexity, np.exp(-expected / 5), rtol=1e-10)


def test_predictive_float32():
    rng = np.random.default_rng(9)
    samples = gaussian_draws(rng)
    y = rng.normal(size=4)
    expected, _ = brute_force_predictive(samples["y_trans"], gaussian_log_emission(samples, y))
    with jax.enable_x64(False):
        s32 = {k: jnp.asarray(v, jnp.float32) for k, v in samples.items()}
        em = GaussianNIW(np.zeros(1), 1.0, 3.0, np.eye(1))
        res = G.predictive_log_likelihood(s32, em, jnp.asarray(y[:, None], jnp.float32))
        assert res.per_draw.dtype == np.float32
    np.testing.assert_allclose(res.log_likelihood, expected, rtol=1e-5)


def test_predictive_validation():
    rng = np.random.default_rng(10)
    samples = gaussian_draws(rng)
    y = rng.normal(size=(4, 1))
    with pytest.raises(ValueError, match="z_trans"):
        G.predictive_log_likelihood(samples, EMISSION, y, name="z")
    with pytest.raises(ValueError, match="y_mu"):
        G.predictive_log_likelihood({**samples, "y_mu": samples["y_mu"][:, :1]}, EMISSION, y)
    with pytest.raises(ValueError, match="lengths"):
        G.predictive_log_likelihood(samples, EMISSION, y, lengths=np.array([4]))
    with pytest.raises(ValueError, match="lengths"):
        G.predictive_log_likelihood(samples, EMISSION, y[None], lengths=np.array([5]))
    with pytest.raises(ValueError, match="y_heldout"):
        G.predictive_log_likelihood(samples, EMISSION, np.zeros((2, 3, 4, 1)))


# ------------------------------------------------------------------------------------- plot
def test_plot_segmentation():
    rng = np.random.default_rng(11)
    z = np.repeat([0, 1, 2, 1], 25)
    y = np.array([0.0, 3.0, -3.0])[z] + rng.normal(size=100)
    fig = G.plot_segmentation(y, (z + 1) % 3)
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 1
    plt.close(fig)
    fig = G.plot_segmentation(np.stack([y, -y], 1), (z + 1) % 3, true_states=z, title="t")
    assert isinstance(fig, matplotlib.figure.Figure) and len(fig.axes) == 2
    fig.canvas.draw()
    plt.close(fig)
    fig0, ax = plt.subplots()
    fig = G.plot_segmentation(y, z, true_states=np.where(np.arange(100) < 90, z, -1), ax=ax)
    assert fig is fig0 and len(ax.child_axes) == 1  # the true-state strip is an inset
    fig.canvas.draw()
    plt.close(fig)
    with pytest.raises(ValueError, match="states"):
        G.plot_segmentation(y, z[:10])


# ------------------------------------------------------- scikit-learn agreement scores (optional)
def test_adjusted_scores_are_scikit_learns():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(12)
    a = rng.integers(0, 3, (4, 30))
    b = np.where(rng.random((4, 30)) < 0.7, (a + 1) % 3, rng.integers(0, 4, (4, 30)))
    b[:, :5] = -1  # unlabelled: skipped
    ari = G.adjusted_rand_index(a, b)
    ami = G.adjusted_mutual_information(a, b[0])  # broadcast
    assert ari.shape == (4,) and ami.shape == (4,)
    for i in range(4):
        assert ari[i] == metrics.adjusted_rand_score(a[i, 5:], b[i, 5:])
        assert ami[i] == metrics.adjusted_mutual_info_score(a[i, 5:], b[0, 5:])
    perm = np.array([2, 0, 1])
    np.testing.assert_allclose(G.adjusted_rand_index(a, perm[a]), 1.0)  # label-invariant
    np.testing.assert_allclose(G.adjusted_mutual_information(a, perm[a], average_method="min"), 1.0)
    assert np.isnan(G.adjusted_rand_index(np.array([-1, -1]), np.array([0, 1])))


def test_package_works_without_scikit_learn():
    """scikit-learn is an optional extra: the package imports without it, and the scores say how
    to install it."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "import numpyro_hdphmm as nh\n"
        "try:\n"
        "    nh.diagnostics.adjusted_rand_index([0, 1], [0, 1])\n"
        "except ImportError as e:\n"
        "    assert 'numpyro-hdphmm[metrics]' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_predictive_particle_filter():
    """``method="particle"``: the paper's particle-filter evaluation.  With many particles it is
    the forward algorithm's value (missing steps, padding and draw axes included); with few, its
    ``exp`` is unbiased (tested in ``tests/core/test_smc.py``) and its log lower on average."""
    rng = np.random.default_rng(7)
    samples = gaussian_draws(rng, S=4)
    Y = np.full((2, 4, 1), np.nan)
    Y[0, :, 0], Y[1, :3, 0] = rng.normal(size=4), rng.normal(size=3)
    Y[0, 2, 0] = np.nan
    grouped = {k: v.reshape((2, 2) + v.shape[1:]) for k, v in samples.items()}
    exact = G.predictive_log_likelihood(grouped, EMISSION, Y, lengths=np.array([4, 3]))
    many = G.predictive_log_likelihood(grouped, EMISSION, Y, lengths=np.array([4, 3]), method="particle",
                                       num_particles=20000, rng_key=jax.random.PRNGKey(0))
    np.testing.assert_allclose(many.per_sequence, exact.per_sequence, atol=0.03)
    assert many.num_observed == exact.num_observed == 6
    few = [G.predictive_log_likelihood(samples, EMISSION, Y, lengths=np.array([4, 3]), method="particle",
                                       num_particles=2, rng_key=jax.random.PRNGKey(k)).per_draw for k in range(3)]
    assert not np.allclose(few[0], few[1])  # the key matters
    again = G.predictive_log_likelihood(samples, EMISSION, Y, lengths=np.array([4, 3]), method="particle",
                                        num_particles=2, rng_key=jax.random.PRNGKey(0)).per_draw
    np.testing.assert_array_equal(again, few[0])
    with pytest.raises(ValueError, match="method"):
        G.predictive_log_likelihood(samples, EMISSION, Y, lengths=np.array([4, 3]), method="pf")
    with pytest.raises(ValueError, match="rng_key"):
        G.predictive_log_likelihood(samples, EMISSION, Y, lengths=np.array([4, 3]), method="particle")
    with pytest.raises(ValueError, match="num_particles"):
        G.predictive_log_likelihood(samples, EMISSION, Y, lengths=np.array([4, 3]), method="particle",
                                    num_particles=0, rng_key=jax.random.PRNGKey(0))
