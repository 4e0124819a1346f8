"""``nh.to_inference_data`` with ArviZ 0.x (InferenceData) and ArviZ 1.x (arviz_base, DataTree),
and ``Predictive`` / ``nh.forecast`` on the draws of a real ``WeakLimitGibbs`` run (one run,
shared, because compiling the kernel dominates the time of this module): two padded sequences
with a missing value, whose padded and missing steps carry no pointwise log-likelihood term
(conditional or marginal), state coordinates and relabelled posteriors.

This module must run in an environment with only ``arviz-base`` (CI's second step), so it
imports neither ArviZ generation at module level.
"""

import subprocess
import sys

import jax
import numpy as np
import numpyro
import pytest
from numpyro.infer import MCMC, Predictive

import numpyro_hdphmm as nh
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik
from numpyro_hdphmm.emissions import Categorical
from numpyro_hdphmm.infer import WeakLimitGibbs
from numpyro_hdphmm.infer.algorithms.weak_limit import weak_limit

C, L, T, CHAINS, DRAWS = 3, 3, 8, 1, 6
Y = np.array([[0, 0, 1, np.nan, 2, 2, 0, 0], [2, 2, 1, 1, 0, 0, 0, 0]])  # one missing value
LENGTHS = np.array([8, 6])
OBSERVED = ~np.isnan(Y) & (np.arange(T)[None] < LENGTHS[:, None])  # 13 observations


def model(y=None, lengths=None, num_steps=None):
    # fixed hyperparameters and one chain: compiling the kernel is most of this module's time
    # (a Gamma-prior kappa adds ~14 s of CPU, a second sequential chain ~12 s)
    hmm = nh.StickyHDPHMM(2.0, 2.0, 5.0, Categorical(C, 1.0), max_states=L, num_steps=num_steps)
    nh.sample("y", hmm, obs=y, lengths=lengths)


@pytest.fixture(scope="module")
def run():
    mcmc = MCMC(WeakLimitGibbs(model), num_warmup=3, num_samples=DRAWS, num_chains=CHAINS, progress_bar=False)
    mcmc.run(jax.random.key(0), Y, LENGTHS)
    samples = mcmc.get_samples()
    # posterior predictive replicates: states and emission parameters from the draws, y redrawn
    replicates = Predictive(model, samples)(jax.random.key(1), None, LENGTHS, num_steps=T)
    return mcmc, samples, replicates


# --------------------------------------------------------------- Predictive and forecast
def test_predictive_and_forecast_from_weak_limit_draws(run):
    mcmc, samples, replicates = run
    S = CHAINS * DRAWS
    assert set(replicates) == {"y"} and replicates["y"].shape == (S, 2, T)
    assert np.all((np.asarray(replicates["y"]) >= 0) & (np.asarray(replicates["y"]) < C))
    # the sampler's model, weak_limit(model), serves as well (same sites)
    rep = Predictive(weak_limit(model), samples)(jax.random.key(1), None, LENGTHS, num_steps=T)["y"]
    np.testing.assert_array_equal(rep, replicates["y"])
    # one sequence: the draws of sequence 0 in a single-sequence model call
    one = {**samples, "y_states": samples["y_states"][:, 0]}
    assert Predictive(model, one)(jax.random.key(1), y=None, num_steps=T)["y"].shape == (S, T)
    # forecasts: the model is traced for the family and the lengths
    out = nh.forecast(jax.random.key(2), samples, model, 4, model_args=(Y, LENGTHS))
    assert out["states"].shape == (S, 2, 4) and out["y"].shape == (S, 2, 4)
    np.testing.assert_array_equal(out["new_state_prob"], 0.0)  # weak limit
    last = np.asarray(samples["y_states"])[:, [0, 1], LENGTHS - 1]
    first_step = np.asarray(samples["y_trans"])[np.arange(S)[:, None], last, np.asarray(out["states"][..., 0])]
    assert np.all(first_step > 0)  # the first forecast leaves the LAST observed state
    same = nh.forecast(jax.random.key(2), samples, Categorical(C, 1.0), 4, lengths=LENGTHS)
    np.testing.assert_array_equal(same["states"], out["states"])


# ---------------------------------------------------------------------------- ArviZ
def _check_log_likelihood(log_likelihood, expected=None):
    """One term per observed step: 8 + 6 - 1 = 13, with their sequence and time coordinates."""
    ll = log_likelihood["y"]
    assert ll.dims == ("chain", "draw", "observation") and ll.shape == (CHAINS, DRAWS, OBSERVED.sum())
    seq, time = np.nonzero(OBSERVED)
    np.testing.assert_array_equal(ll["sequence"].values, seq)
    np.testing.assert_array_equal(ll["time"].values, time)
    assert np.all(np.isfinite(ll.values)) and np.all(ll.values < 0)
    if expected is not None:  # (S, N, T) pointwise values
        np.testing.assert_allclose(ll.values.reshape(-1, seq.size), np.asarray(expected)[:, seq, time], rtol=1e-10)


def _check_groups(posterior, log_likelihood, sample_stats, observed_data, posterior_predictive, samples=None):
    assert posterior["y_states"].dims == ("chain", "draw", "sequence", "time")
    assert posterior["y_states"].shape == (CHAINS, DRAWS, 2, T)
    assert {"y_beta", "y_trans", "y_probs", "y_num_states"} <= set(posterior.data_vars)
    # state coordinates on the state-indexed sites
    assert posterior["y_probs"].dims[:3] == ("chain", "draw", "state")
    assert posterior["y_trans"].dims == ("chain", "draw", "from_state", "to_state")
    assert posterior["y_beta"].dims == ("chain", "draw", "to_state")
    np.testing.assert_array_equal(posterior["state"].values, np.arange(L))
    np.testing.assert_array_equal(posterior["to_state"].values, np.arange(L + 1))
    conditional = None
    if samples is not None:  # log f(y_t | theta_{z_t}) at the sampled states
        s_idx = np.arange(CHAINS * DRAWS)[:, None, None]
        probs = np.asarray(samples["y_probs"])[s_idx, np.asarray(samples["y_states"]), np.nan_to_num(Y).astype(int)[None]]
        conditional = np.log(probs)
    _check_log_likelihood(log_likelihood, conditional)
    assert {"lp", "num_states"} <= set(sample_stats.data_vars)
    np.testing.assert_array_equal(sample_stats["num_states"].values, posterior["y_num_states"].values)
    assert observed_data["y"].shape == (2, T)
    assert posterior_predictive["y"].dims == ("chain", "draw", "sequence", "time")


def _backend():
    try:
        import arviz

        return "arviz" if int(arviz.__version__.split(".")[0]) < 1 else "arviz_base"
    except ImportError:
        return "arviz_base"


def _groups(data, *names):
    if hasattr(data, "children"):
        return [data[g].dataset for g in names]
    return [getattr(data, g) for g in names]


def _arviz0():
    az = pytest.importorskip("arviz")
    if int(az.__version__.split(".")[0]) >= 1:
        pytest.skip(f"ArviZ {az.__version__} is 1.x: covered by the arviz_base test")
    return az


def test_arviz_0x_inference_data(run):
    az = _arviz0()
    mcmc, samples, replicates = run
    idata = nh.to_inference_data(mcmc, posterior_predictive=replicates, log_likelihood="conditional")
    assert isinstance(idata, az.InferenceData)
    _check_groups(idata.posterior, idata.log_likelihood, idata.sample_stats, idata.observed_data,
                  idata.posterior_predictive, samples)
    loo = az.loo(idata)  # the padded and missing steps are not observations
    assert loo.n_data_points == OBSERVED.sum()
    np.testing.assert_array_equal(idata.posterior["y_states"].values.reshape(-1, 2, T), samples["y_states"])
    # keywords reach from_numpyro
    assert not hasattr(nh.to_inference_data(mcmc, log_likelihood=False), "log_likelihood")


def test_arviz_1x_datatree(run):
    pytest.importorskip("arviz_base")
    import xarray as xr

    mcmc, samples, replicates = run
    tree = nh.to_inference_data(mcmc, backend="arviz_base", posterior_predictive=replicates, log_likelihood="conditional")
    assert isinstance(tree, xr.DataTree)
    _check_groups(*(tree[g].dataset for g in ("posterior", "log_likelihood", "sample_stats", "observed_data",
                                              "posterior_predictive")), samples)
    np.testing.assert_array_equal(tree["posterior"]["y_states"].values.reshape(-1, 2, T), samples["y_states"])
    assert "log_likelihood" not in nh.to_inference_data(mcmc, backend="arviz_base", log_likelihood=False).children


def test_marginal_log_likelihood_sums_to_the_marginal_likelihood(run):
    """log_likelihood="marginal": the states summed out, one term per observed step, summing to
    log p(y | pi, theta) of each draw (the core forward algorithm on the draw's HMM)."""
    mcmc, samples, _ = run
    data = nh.to_inference_data(mcmc, backend=_backend(), log_likelihood="marginal")
    (ll,) = _groups(data, "log_likelihood")
    _check_log_likelihood(ll)
    trans, probs = np.asarray(samples["y_trans"]), np.asarray(samples["y_probs"])
    x = np.nan_to_num(Y).astype(int)
    for s in range(CHAINS * DRAWS):
        with np.errstate(divide="ignore"):  # a weight may be exactly 0
            le = np.log(probs[s][:, x]).transpose(1, 2, 0)  # (N, T, L)
            exact = hmm_marginal_loglik(np.log(trans[s, L, :L]), np.log(trans[s, :L, :L]), le, mask=~np.isnan(Y),
                                        length=LENGTHS)
        per_seq = [ll["y"].values.reshape(-1, OBSERVED.sum())[s, ll["sequence"].values == n].sum() for n in range(2)]
        np.testing.assert_allclose(per_seq, exact, rtol=1e-10)
    with pytest.raises(ValueError, match="log_likelihood"):
        nh.to_inference_data(mcmc, log_likelihood="joint")


def test_default_log_likelihood_is_states_summed_out(run):
    """Issue 42: ``nh.to_inference_data(mcmc)`` (the README's route) stores the states-summed-out
    terms (``log_likelihood="marginal"``), one per observed step, so ``az.loo`` counts exactly the
    13 observations; ``az.from_numpyro(mcmc)`` (NumPyro's ``log_prob`` of the observed site, which
    is also the model's joint density given the states) counts every padded and missing step."""
    mcmc, _, _ = run
    default = nh.to_inference_data(mcmc, backend=_backend())
    marginal = nh.to_inference_data(mcmc, backend=_backend(), log_likelihood="marginal")
    conditional = nh.to_inference_data(mcmc, backend=_backend(), log_likelihood="conditional")
    (ll,) = _groups(default, "log_likelihood")
    _check_log_likelihood(ll)
    np.testing.assert_array_equal(ll["y"].values, _groups(marginal, "log_likelihood")[0]["y"].values)
    assert not np.allclose(ll["y"].values, _groups(conditional, "log_likelihood")[0]["y"].values)
    if _backend() == "arviz":
        import arviz as az

        assert az.loo(default).n_data_points == OBSERVED.sum()
        assert az.from_numpyro(mcmc).log_likelihood["y"].shape[2:] == Y.shape  # padded steps counted


def test_relabelled_posterior(run):
    """relabel=True stores the draws of nh.relabel_samples (Stephens), every state-indexed site."""
    mcmc, samples, _ = run
    data = nh.to_inference_data(mcmc, backend=_backend(), log_likelihood=False, relabel=True)
    (posterior,) = _groups(data, "posterior")
    grouped = mcmc.get_samples(group_by_chain=True)
    expected = nh.relabel_samples(grouped, lengths=LENGTHS)
    # the states of nh.labels.summary: empty slots left out of the state axes (issue 41)
    kept = nh.labels.summary(grouped, lengths=LENGTHS, point_estimate=False).states
    assert posterior.attrs["kept_states"] == kept.tolist()
    rows = np.append(kept, grouped["y_probs"].shape[2])
    np.testing.assert_array_equal(posterior["y_states"].values, np.asarray(expected["y_states"]))
    np.testing.assert_array_equal(posterior["y_probs"].values, np.asarray(expected["y_probs"])[:, :, kept])
    np.testing.assert_array_equal(posterior["y_beta"].values, np.asarray(expected["y_beta"])[:, :, rows])
    np.testing.assert_array_equal(posterior["y_trans"].values,
                                  np.asarray(expected["y_trans"])[:, :, rows][:, :, :, rows])
    # the raw and the effective number of states side by side
    (stats,) = _groups(data, "sample_stats")
    flat = np.asarray(grouped["y_states"]).reshape((-1,) + grouped["y_states"].shape[2:])
    np.testing.assert_array_equal(stats["effective_states"].values.ravel(),
                                  nh.labels.effective_num_states(flat, lengths=LENGTHS))
    np.testing.assert_array_equal(posterior["y_effective_states"].values, stats["effective_states"].values)
    reference = np.asarray(samples["y_states"][-1])
    data = nh.to_inference_data(mcmc, backend=_backend(), log_likelihood=False, relabel=reference)
    (posterior,) = _groups(data, "posterior")
    np.testing.assert_array_equal(posterior["y_states"].values,
                                  np.asarray(nh.relabel_samples(grouped, reference, lengths=LENGTHS)["y_states"]))


def test_default_backend_without_arviz_0x(run, monkeypatch):
    """Without ArviZ 0.x the default is arviz_base (CI's second step has only arviz-base)."""
    pytest.importorskip("arviz_base")
    import xarray as xr

    monkeypatch.setitem(sys.modules, "arviz", None)  # `import arviz` now raises ImportError
    assert isinstance(nh.to_inference_data(run[0], log_likelihood=False), xr.DataTree)


def test_clear_error_without_any_arviz(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)
    monkeypatch.setitem(sys.modules, "arviz_base", None)
    with pytest.raises(ImportError, match="arviz-base"):
        nh.to_inference_data(run[0])
    with pytest.raises(ValueError, match="backend"):
        nh.to_inference_data(run[0], backend="pymc")


def test_package_does_not_import_arviz():
    """`import numpyro_hdphmm` works with neither ArviZ generation installed (lazy import)."""
    code = (
        "import sys; sys.modules['arviz'] = None; sys.modules['arviz_base'] = None; "
        "import numpyro_hdphmm as nh; assert callable(nh.to_inference_data) and callable(nh.forecast)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------- custom (user-site) emissions
K_CUSTOM = 5


def student_model(y=None, num_steps=None):
    import numpyro.distributions as dist

    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0).expand([K_CUSTOM]))
    scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([K_CUSTOM]))
    hmm = nh.StickyHDPHMM(1.0, 2.0, 10.0, lambda k: dist.StudentT(4.0, loc[k], scale[k]), max_states=K_CUSTOM,
                          num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


def test_custom_emission_round_trip():
    """A BeamSampler run with Student-t emissions over the user's sites: ArviZ (whichever
    generation is installed) with the user's sites and a pointwise log-likelihood, Predictive and
    forecast from the draws."""
    y = np.concatenate([np.full(15, -3.0), np.full(15, 3.0)]) + np.random.default_rng(0).standard_t(4.0, 30)
    mcmc = MCMC(nh.infer.BeamSampler(student_model), num_warmup=5, num_samples=DRAWS, progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    samples = mcmc.get_samples()
    backend = _backend()
    data = nh.to_inference_data(mcmc, backend=backend, log_likelihood="conditional")
    if backend == "arviz":
        posterior, log_lik = data.posterior, data.log_likelihood
    else:
        posterior, log_lik = data["posterior"].dataset, data["log_likelihood"].dataset
    assert {"loc", "scale", "y_states", "y_beta", "y_trans", "y_num_states"} <= set(posterior.data_vars)
    assert posterior["loc"].shape == (1, DRAWS, K_CUSTOM) and posterior["y_states"].dims == ("chain", "draw", "time")
    assert log_lik["y"].shape == (1, DRAWS, 30) and np.all(np.isfinite(log_lik["y"].values))
    # the pointwise log-likelihood is the user's Student-t at the drawn state's parameters
    s, t = DRAWS - 1, 7
    k = int(samples["y_states"][s, t])
    import numpyro.distributions as dist

    expected = dist.StudentT(4.0, samples["loc"][s, k], samples["scale"][s, k]).log_prob(y[t])
    np.testing.assert_allclose(log_lik["y"].values[0, s, t], expected, rtol=1e-5)
    rep = Predictive(student_model, samples)(jax.random.key(1), num_steps=30)["y"]
    assert rep.shape == (DRAWS, 30) and np.all(np.isfinite(np.asarray(rep)))
    out = nh.forecast(jax.random.key(2), samples, student_model, 3, model_args=(y,))
    assert out["y"].shape == (DRAWS, 3) and np.all(np.isfinite(np.asarray(out["y"])))
