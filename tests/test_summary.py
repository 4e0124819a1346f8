"""nh.labels.summary / print_summary: label-switching-proof, no NaN rows, no per-step rows (issue 19)."""

import io
import warnings
from contextlib import redirect_stdout

import numpy as np
import pytest

import numpyro_hdphmm as nh


def switched_draws(seed=0, chains=3, draws=50, T=40, K=4):
    """Three chains that found the same 2 states, chain 1 under swapped labels (0/1 -> 1/0;
    the unused slots 2, 3 hold prior draws)."""
    rng = np.random.default_rng(seed)
    truth = (np.arange(T) >= T // 2).astype(int)
    mu_true = np.array([-5.0, 5.0])
    states = np.empty((chains, draws, T), int)
    mu = rng.normal(0, 10, (chains, draws, K, 1))
    beta = rng.dirichlet(np.ones(K + 1), (chains, draws))
    for c in range(chains):
        perm = np.array([0, 1]) if c != 1 else np.array([1, 0])
        states[c] = perm[truth][None]
        mu[c, :, perm, 0] = (mu_true[:, None] + 0.1 * rng.normal(size=(2, draws)))
    trans = rng.dirichlet(np.ones(K + 1), (chains, draws, K + 1))
    return {"y_states": states, "y_mu": mu, "y_beta": beta, "y_trans": trans,
            "kappa": rng.gamma(5.0, 1.0, (chains, draws))}


def test_summary_relabels_and_drops_per_step_rows():
    samples = switched_draws()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        buf = io.StringIO()
        with redirect_stdout(buf):
            res = nh.labels.print_summary(samples)
    text = buf.getvalue()
    assert "nan" not in text.lower() and "y_states" not in text and "y_trans" not in text
    assert res.states.tolist() == [0, 1]  # the two used states; the prior-draw slots are left out
    assert res.stats["y_mu"]["r_hat"].max() < 1.1  # the same state in both chains after relabelling
    np.testing.assert_allclose(np.sort(res.stats["y_mu"]["mean"].ravel()), [-5.0, 5.0], atol=0.1)
    assert res.constant == {"y_num_states": 2, "y_effective_states": 2}  # constant: listed, not a NaN row
    assert "constant over all draws: y_num_states = 2" in text
    assert res.point.num_clusters == 2 and "point segmentation 2" in text


def test_summary_without_relabelling_shows_the_switch():
    """Negative control: the same draws summarized as sampled mix the two states across chains."""
    res = nh.labels.summary(switched_draws(), relabel=False)
    assert res.stats["y_mu"]["r_hat"].max() > 2.0


def test_summary_rejects_bad_arguments():
    with pytest.raises(ValueError, match="min_occupancy"):
        nh.labels.summary(switched_draws(), min_occupancy=1.5)
    with pytest.raises(ValueError, match="samples"):
        nh.labels.summary([1, 2, 3])


def with_stray_states(samples, seed=1):
    """The switched draws with, in every draw, one step (of 40) given to a third slot: the raw
    count is 3 in every draw, though the segmentation has two states."""
    rng = np.random.default_rng(seed)
    states = samples["y_states"].copy()
    C, D, T = states.shape
    t = rng.integers(0, T, (C, D))
    np.put_along_axis(states, t[..., None], 2 + rng.integers(0, 2, (C, D, 1)), axis=2)
    return {**samples, "y_states": states}


def test_effective_count_and_kept_states():
    samples = with_stray_states(switched_draws())
    flat = samples["y_states"].reshape(-1, 40)
    np.testing.assert_array_equal(nh.diagnostics.num_states(flat), 3)
    np.testing.assert_array_equal(nh.labels.effective_num_states(flat, 0.05), 2)  # 1 step = 2.5% < 5%
    # negative control: a share below one step counts every state
    np.testing.assert_array_equal(nh.labels.effective_num_states(flat, 0.01), 3)
    shares = nh.labels.state_shares(flat, 4)
    np.testing.assert_allclose(shares.sum(1), 1.0)
    buf = io.StringIO()
    with redirect_stdout(buf):
        res = nh.labels.print_summary(samples, min_share=0.05)
    text = buf.getvalue()
    assert res.constant["y_num_states"] == 3 and res.constant["y_effective_states"] == 2
    assert "raw (labelling some step) mean 3.00, effective (>= 5% of the steps) mean 2.00" in text
    assert res.states.tolist() == [0, 1] and res.point.num_clusters == 2
    with pytest.raises(ValueError, match="min_share"):
        nh.labels.effective_num_states(flat, 0.0)


def test_step_agreement():
    truth = (np.arange(40) >= 20).astype(int)
    draws = np.stack([truth, 1 - truth, np.where(np.arange(40) >= 22, 0, 1)])  # the last: change point at 22
    agree = nh.labels.step_agreement(draws, truth)
    expect = np.ones(40)
    expect[20:22] = 2 / 3
    np.testing.assert_allclose(agree, expect)  # label-invariant: the swapped draw agrees everywhere
    with pytest.raises(ValueError, match="labels"):
        nh.labels.step_agreement(draws, truth[:10])


def test_divergences_counted_and_warned():
    """The inner kernel's divergences (sample_stats' ``diverging``) are counted per chain in the
    summary, and the kernel's host warning names the remedy."""
    from numpyro_hdphmm.infer.plumbing.reporting import warn_divergence

    samples = switched_draws()
    diverging = np.zeros((3, 50), bool)
    diverging[1, :7] = True
    buf = io.StringIO()
    with redirect_stdout(buf):
        res = nh.labels.print_summary(samples, diverging=diverging, point_estimate=False)
    assert res.divergences.tolist() == [0, 7, 0]
    assert "inner-kernel divergences after warmup: 7 (per chain [0, 7, 0])" in buf.getvalue()
    assert nh.labels.summary(samples, point_estimate=False).divergences is None  # unknown: not reported
    with pytest.warns(RuntimeWarning, match="target_accept_prob"):
        warn_divergence(np.array([0, 2]), "BeamSampler")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_divergence(np.zeros(2, bool), "BeamSampler")  # no divergence: quiet
