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
    assert res.constant == {"y_num_states": 2}  # constant: listed, not a NaN row
    assert "constant over all draws: y_num_states = 2" in text


def test_summary_without_relabelling_shows_the_switch():
    """Negative control: the same draws summarized as sampled mix the two states across chains."""
    res = nh.labels.summary(switched_draws(), relabel=False)
    assert res.stats["y_mu"]["r_hat"].max() > 2.0


def test_summary_rejects_bad_arguments():
    with pytest.raises(ValueError, match="min_occupancy"):
        nh.labels.summary(switched_draws(), min_occupancy=1.5)
    with pytest.raises(ValueError, match="samples"):
        nh.labels.summary([1, 2, 3])
