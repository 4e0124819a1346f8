"""DirectAssignmentGibbs: the negative control of its enumeration check, DP-mixture emissions against
enumeration, agreement with WeakLimitGibbs at large L, capacity overflow, every emission family.
(Its enumeration and Geweke tests are the conformance suite's, ``test_conformance.py``, driven by
``tests/kernel_registry.py``.)"""

import itertools

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import DirectAssignmentGibbs, WeakLimitGibbs
from numpyro_hdphmm.emissions.dp_mixture import MixtureStatistics
from numpyro_hdphmm.infer.algorithms import direct_assignment as da

from kernel_registry import geweke_model
from _checks import (
    empirical_tv,
    exact_infinite_posterior,
    final_states,
    log_infinite_prior_partition,
    restricted_growth_strings,
    tv_bound,
)

GAMMA, ALPHA, KAPPA, C, CAPACITY = 3.0, 2.0, 1.5, 2, 8


def fixed_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=CAPACITY)
    nh.sample("y", hmm, obs=y, lengths=lengths)


@pytest.fixture(scope="module")
def exact_single():
    y = [0, 0, 1, 1, 0]
    return y, exact_infinite_posterior([y], GAMMA, ALPHA, KAPPA, C, 1.0)


@pytest.mark.slow  # negative control of test_conformance.py::test_enumeration[DirectAssignmentGibbs-single]
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_missing_onward_factor(exact_single, monkeypatch):
    """The same test fails for a sampler that drops the factor of the transition out of z_t
    (and the matching count updates), a plausible implementation slip."""
    real = da.step_layout

    def no_next(num_sequences, num_steps, lengths):
        layout = real(num_sequences, num_steps, lengths)
        return layout._replace(has_next=jnp.zeros_like(layout.has_next))

    monkeypatch.setattr(da, "step_layout", no_next)
    y, exact = exact_single
    draws = final_states(DirectAssignmentGibbs(fixed_model), (np.array(y),), num_chains=2000, num_warmup=25)
    assert empirical_tv(exact, draws) > tv_bound(exact.values(), len(draws))


# ---------------------------------------------------------------------------- DP mixtures
SIGMA, WIDTH = 1.5, 2


def _log_mixture_marginal(y_k, num_categories, conc):
    """log p(y_k) of one state's DP-mixture emission (weak limit over WIDTH components):
    ``psi ~ Dir(SIGMA/WIDTH)``, ``theta_j ~ Dir(conc)``, both integrated out, summed over s."""
    from scipy.special import gammaln

    def dirmult(counts, a):
        return gammaln(a.sum()) - gammaln(a.sum() + counts.sum()) + np.sum(gammaln(a + counts) - gammaln(a))

    total = -np.inf
    for s in itertools.product(range(WIDTH), repeat=len(y_k)):
        s = np.array(s, int)
        lp = dirmult(np.bincount(s, minlength=WIDTH).astype(float), np.full(WIDTH, SIGMA / WIDTH))
        for j in range(WIDTH):
            counts = np.bincount(np.asarray(y_k)[s == j], minlength=num_categories).astype(float)
            lp += dirmult(counts, np.full(num_categories, conc))
        total = np.logaddexp(total, lp)
    return total


def exact_mixture_posterior(y, num_categories, conc):
    keys = restricted_growth_strings(len(y))
    logs = []
    for z in keys:
        z = np.array(z)
        lp = log_infinite_prior_partition(z, [len(y)], GAMMA, ALPHA, KAPPA)
        lp += sum(_log_mixture_marginal(np.asarray(y)[z == k], num_categories, conc) for k in range(z.max() + 1))
        logs.append(lp)
    logs = np.array(logs)
    return dict(zip(keys, np.exp(logs - np.logaddexp.reduce(logs))))


def mixture_model(y):
    emission = nh.emissions.DPMixture(nh.emissions.Categorical(3, 0.5), SIGMA, WIDTH)
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, emission, max_states=CAPACITY)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow  # 117 s; the DP-mixture enumeration of WeakLimitGibbs stays in the default set
@pytest.mark.statistical
def test_enumeration_dp_mixture_emissions():
    """Fox et al. Alg. 3 (components integrated out, with the weak-limit mixture of the model):
    the partition of the states matches the exact posterior, mixture marginals summed over s."""
    y = [0, 2, 1, 1, 0]
    exact = exact_mixture_posterior(y, 3, 0.5)
    draws = final_states(DirectAssignmentGibbs(mixture_model), (np.array(y),), num_chains=2000, num_warmup=25)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_printed_crp_denominator(monkeypatch):
    """Fox et al. eq. 63 / Alg. 3 print the component denominators as sigma + n'_kj (notes
    erratum 2); with that typo the same enumeration test fails."""

    def typo(self, counts):
        return jnp.log(counts + self.conc / self.width) - jnp.log(self.conc + counts)

    monkeypatch.setattr(MixtureStatistics, "_log_component_weights", typo)
    y = [0, 2, 1, 1, 0]
    exact = exact_mixture_posterior(y, 3, 0.5)
    draws = final_states(DirectAssignmentGibbs(mixture_model), (np.array(y),), num_chains=2000, num_warmup=25)
    assert empirical_tv(exact, draws) > tv_bound(exact.values(), len(draws))


# ---------------------------------------------------------------------------- capacity
def test_overflow_is_flagged_and_warned():
    y = np.repeat(np.arange(3), 20)

    def model(y):
        hmm = nh.StickyHDPHMM(5.0, 5.0, 1.0, nh.emissions.Categorical(3, 0.1), max_states=2)
        nh.sample("y", hmm, obs=y)

    mcmc = MCMC(DirectAssignmentGibbs(model), num_warmup=5, num_samples=10, progress_bar=False)
    with pytest.warns(RuntimeWarning, match="max_states=2"):
        mcmc.run(jax.random.key(0), y, extra_fields=("overflow",))
    assert np.mean(np.asarray(mcmc.get_extra_fields()["overflow"])) > 0.5
    assert np.all(np.asarray(mcmc.get_samples()["y_num_states"]) <= 2)


# ---------------------------------------------------------------------------- families
FAMILIES = {
    "gaussian": lambda y: nh.emissions.GaussianNIW.weakly_informative(y),
    "diagonal": lambda y: nh.emissions.DiagonalGaussian.weakly_informative(y),
    "autoregressive": lambda y: nh.emissions.AutoRegressive.weakly_informative(y, order=1),
    "poisson": lambda y: nh.emissions.Poisson(2.0, 1.0, event_shape=(2,)),
    "vmf": lambda y: nh.emissions.VonMisesFisher.weakly_informative(y),
}


def _family_data(name, rng):
    z = np.repeat([0, 1], [20, 25])
    if name == "poisson":
        return rng.poisson(np.where(z[:, None] == 0, 1.0, 12.0), size=(45, 2)).astype(float)
    if name == "vmf":
        mu = np.where(z[:, None] == 0, np.array([1.0, 0, 0]), np.array([0, 1.0, 0]))
        v = mu * 20 + rng.normal(size=(45, 3))
        return v / np.linalg.norm(v, axis=1, keepdims=True)
    return np.where(z[:, None] == 0, -4.0, 4.0) + rng.normal(size=(45, 2))


@pytest.mark.parametrize(
    "name", [n if n == "gaussian" else pytest.param(n, marks=pytest.mark.slow) for n in sorted(FAMILIES)]
)
def test_every_family_separates_two_regimes(name):
    y = _family_data(name, np.random.default_rng(1))
    family = FAMILIES[name](y)

    def model(y):
        hmm = nh.StickyHDPHMM(1.0, 1.0, 5.0, family, max_states=10)
        nh.sample("y", hmm, obs=y)

    # the step-wise sampler leaves the one-state start slowly (measured: about half of the chains
    # still hold one state after 50 sweeps, before and after the issue-12 refactoring; better
    # starts are issue 16's): the family's machinery is checked on the best of 8 chains
    mcmc = MCMC(DirectAssignmentGibbs(model), num_warmup=30, num_samples=20, num_chains=8, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.key(2), y)
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["y_states"][:, -1])
    truth = np.repeat([0, 1], [20, 25])
    assert min(nh.diagnostics.hamming_distance(truth, zc) for zc in z) < 0.2
    for v in mcmc.get_samples().values():
        assert np.all(np.isfinite(np.asarray(v, float)))


# ---------------------------------------------------------------------------- ArviZ, chains
def test_arviz_and_vectorized_chains():
    data = nh.datasets.fox_experiment_a(num_steps=200)
    y = data.observations

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
        kappa = numpyro.sample("kappa", dist.Gamma(1.0, 0.01))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.GaussianNIW.weakly_informative(y), max_states=20)
        nh.sample("y", hmm, obs=y)

    mcmc = MCMC(DirectAssignmentGibbs(model), num_warmup=20, num_samples=30, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    idata = az.from_numpyro(mcmc)
    assert idata.posterior["y_states"].dims == ("chain", "draw", "time")
    assert "y" in idata.log_likelihood
    num = np.asarray(idata.posterior["y_num_states"])
    assert num.shape[:2] == (2, 30) and np.all(num >= 1)
    # the two vectorized chains are independent (different draws)
    assert not np.array_equal(np.asarray(idata.posterior["alpha"][0]), np.asarray(idata.posterior["alpha"][1]))
    assert np.all(np.isfinite(az.ess(idata, var_names=["alpha"])["alpha"].values))


# ---------------------------------------------------------------------------- Geweke
# the conformance suite's Geweke model of this kernel (capacity 12; test_conformance.py::test_geweke)
hyper_model = geweke_model(12)


# ---------------------------------------------------------------------------- agreement
@pytest.mark.slow
@pytest.mark.statistical
def test_agrees_with_weak_limit_at_large_L():
    """Posterior of the number of states and of the log-likelihood: direct assignment on the
    infinite model vs the weak-limit blocked sampler at L = 40."""
    rng = np.random.default_rng(3)
    z = np.repeat([0, 1, 2, 1], 10)
    probs = np.array([[0.8, 0.1, 0.05, 0.05], [0.05, 0.8, 0.1, 0.05], [0.05, 0.05, 0.1, 0.8]])
    y = np.array([rng.choice(4, p=probs[k]) for k in z])

    def model(y):
        hmm = nh.StickyHDPHMM(2.0, 3.0, 2.0, nh.emissions.Categorical(4, 0.5), max_states=40)
        nh.sample("y", hmm, obs=y)

    out = {}
    for name, kernel in (("da", DirectAssignmentGibbs(model)), ("wl", WeakLimitGibbs(model))):
        mcmc = MCMC(kernel, num_warmup=200, num_samples=1000, num_chains=8, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.key(5), y)
        s = mcmc.get_samples()
        idata = az.from_numpyro(mcmc)
        loglik = idata.log_likelihood["y"].sum("time").values.reshape(-1)
        out[name] = (np.asarray(s["y_num_states"]).reshape(-1), loglik)
    for i in range(2):
        a, b = out["da"][i], out["wl"][i]
        se = np.sqrt(a.var() / (len(a) / 20) + b.var() / (len(b) / 20))
        print("agreement", ["num_states", "loglik"][i], a.mean(), b.mean(), se)
        assert abs(a.mean() - b.mean()) < 4 * se, (i, a.mean(), b.mean(), se)
