"""WeakLimitGibbs: negative controls of the enumeration and Geweke checks, chain methods, ArviZ, and Fox
et al. experiment A.  (Its enumeration and Geweke tests are the conformance suite's,
``test_conformance.py``, driven by ``tests/kernel_registry.py``.)"""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import crp
from numpyro_hdphmm.infer import WeakLimitGibbs
from numpyro_hdphmm.infer import weak_limit

from _checks import printed_gamma_update, empirical_tv, exact_weak_limit_posterior, final_states, geweke_z_scores, tv_bound
from kernel_registry import geweke_model, weak_limit_statistics

GAMMA, ALPHA, KAPPA, L, C = 3.0, 2.0, 1.5, 3, 2


def fixed_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=L)
    nh.sample("y", hmm, obs=y, lengths=lengths)


@pytest.fixture(scope="module")
def exact_single():
    y = [0, 0, 1, 1, 0]
    return y, exact_weak_limit_posterior([y], L, GAMMA, ALPHA, KAPPA, C, 1.0)


@pytest.mark.slow  # negative control of test_conformance.py::test_enumeration[WeakLimitGibbs-single]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_off_by_one_counts(exact_single, monkeypatch):
    """The same test fails for a sampler whose transition counts are each off by one."""
    real = crp.transition_counts

    def off_by_one(states, num_states, lengths=None):
        n, first = real(states, num_states, lengths)
        return n + 1, first

    monkeypatch.setattr(crp, "transition_counts", off_by_one)
    y, exact = exact_single
    draws = final_states(WeakLimitGibbs(fixed_model), (np.array(y),), num_chains=3000, num_warmup=40)
    assert empirical_tv(exact, draws) > tv_bound(exact.values(), len(draws))


# ---------------------------------------------------------------------------- Geweke
# the conformance suite's Geweke model and statistics of this kernel (L = 3)
hyper_model = geweke_model(3)


def _stats():
    return weak_limit_statistics(3)


GEWEKE_LIMIT = 4.5


@pytest.mark.slow  # negative control of test_conformance.py::test_geweke[WeakLimitGibbs]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_detects_printed_gamma_update(monkeypatch):
    monkeypatch.setattr(crp, "resample_gamma", printed_gamma_update)
    # 6000 iterations gave z(gamma) 3.8 (below the limit): the printed update's bias is small at
    # L = 3, so the control runs 2.5 times as long as the test it controls
    z = geweke_z_scores(WeakLimitGibbs(hyper_model, hyperparameters="auxiliary"), weak_limit(hyper_model), _stats(), num_steps=8,
                        num_iterations=15000, num_prior=15000)
    assert abs(z["gamma"]) > GEWEKE_LIMIT, z


# ------------------------------------------------------------------ NumPyro and ArviZ plumbing
def prior_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(2.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(5.0, 1.0))
    scale = numpyro.sample("scale", dist.HalfNormal(2.0))  # no exact update: the inner NUTS
    emission = nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, scale * jnp.eye(1))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=4, num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(1)
    return np.concatenate([rng.normal(-3, 1, 30), rng.normal(3, 1, 30)])[:, None]


def test_arviz_end_to_end(small_data):
    kernel = WeakLimitGibbs(prior_model)
    mcmc = MCMC(kernel, num_warmup=30, num_samples=30, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0), small_data)
    hyper = kernel.spec.hyper
    assert hyper.gamma == "gamma" and hyper.alpha == "alpha" and hyper.kappa == "kappa"
    assert kernel.spec.inner_sites == ("scale",)
    idata = az.from_numpyro(mcmc)
    for group in ("posterior", "log_likelihood", "sample_stats", "observed_data"):
        assert hasattr(idata, group), group
    post = idata.posterior
    for var in ("gamma", "alpha", "kappa", "scale", "y_num_states", "y_beta", "y_trans", "y_mu", "y_cov"):
        assert var in post, var
    assert post["y_states"].dims == ("chain", "draw", "time")
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "time")
    assert {"lp", "num_states", "diverging"} <= set(idata.sample_stats.data_vars)
    assert np.all(np.isfinite(idata.sample_stats["lp"].values))
    summary = az.summary(idata, var_names=["gamma", "kappa", "y_num_states"])
    assert np.all(np.isfinite(summary["mean"].values))
    assert float(az.ess(idata, var_names=["kappa"])["kappa"]) > 0
    az.rhat(idata, var_names=["gamma"])
    import matplotlib

    matplotlib.use("Agg")
    az.plot_trace(idata, var_names=["kappa", "y_num_states"])


def test_chain_methods_and_resume(small_data):
    # one kernel for every run (it carries nothing between runs, test_determinism.py): its
    # discovery and compiled init are reused
    kernel = WeakLimitGibbs(fixed_model_gauss)
    draws = {}
    for method in ("sequential", "vectorized"):
        mcmc = MCMC(kernel, num_warmup=5, num_samples=6, num_chains=2, chain_method=method, progress_bar=False)
        mcmc.run(jax.random.key(0), small_data)
        draws[method] = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"])
    assert draws["sequential"].shape == draws["vectorized"].shape == (2, 6, 60)
    # post_warmup_state resumes a run exactly: 3 + 3 draws of one chain from the first sequential
    # chain's key are that chain's 6 draws (the sequential run is the uninterrupted run, so that
    # no third sampling loop is compiled for it)
    half = MCMC(kernel, num_warmup=5, num_samples=3, progress_bar=False)
    half.run(jax.random.split(jax.random.key(0), 2)[0], small_data)
    first = half.get_samples()["y_states"]
    half.post_warmup_state = half.last_state
    half.run(half.post_warmup_state.rng_key, small_data)
    both = np.concatenate([first, half.get_samples()["y_states"]])
    np.testing.assert_array_equal(both, draws["sequential"][0])


def fixed_model_gauss(y):
    emission = nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, jnp.eye(1))
    nh.sample("y", nh.StickyHDPHMM(2.0, 2.0, 5.0, emission, max_states=4), obs=y)


def test_block_of_numpyro_gibbs(small_data):
    model = weak_limit(prior_model)
    hdp_sites = ["y_beta", "y_trans", "y_mu", "y_cov", "y_states", "gamma", "alpha", "kappa"]
    kernel = numpyro.infer.Gibbs([(WeakLimitGibbs(model), hdp_sites), (numpyro.infer.NUTS(model), None)])
    mcmc = MCMC(kernel, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.key(0), small_data)
    samples = mcmc.get_samples()
    assert samples["y_states"].shape == (20, 60) and samples["scale"].shape == (20,)
    assert np.all(np.asarray(samples["y_beta"])[:, -1] == 0.0)  # the weak-limit prior


def test_model_without_hdphmm_is_rejected():
    def plain(y):
        numpyro.sample("y", dist.Normal(0, 1), obs=y)

    with pytest.raises(ValueError, match="numpyro_hdphmm.sample"):
        MCMC(WeakLimitGibbs(plain), num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.key(0), np.zeros(3))


# ------------------------------------------------------------------- Fox et al. experiment A
def experiment_model(y, sticky=True):
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    if sticky:
        kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=15)
    else:
        hmm = nh.HDPHMM(gamma, alpha, emission, max_states=15)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow
@pytest.mark.paper
def test_fox_experiment_a():
    data = nh.datasets.fox_experiment_a(num_steps=1000, seed=0)
    results = {}
    for sticky in (True, False):
        mcmc = MCMC(WeakLimitGibbs(experiment_model), num_warmup=250, num_samples=250, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.key(1), data.observations, sticky)
        states = np.asarray(mcmc.get_samples()["y_states"])
        results[sticky] = (np.asarray(mcmc.get_samples()["y_num_states"]),
                           nh.diagnostics.hamming_distance(states, data.states))
    num_states, hamming = results[True]
    assert np.median(num_states) == 3 and np.median(hamming) < 0.05
    assert np.mean(results[False][0]) > np.mean(num_states)  # the HDP-HMM uses more states
