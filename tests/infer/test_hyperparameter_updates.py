"""The kernels' hyperparameter updates (``hyperparameters="auxiliary"`` and ``"collapsed"``) against
exact posteriors of tiny models whose ``alpha`` and ``kappa`` are random (Gamma priors; ``gamma``
fixed): the joint partition of the states (total variation) and the marginals of ``log alpha`` and
``log kappa`` (Kolmogorov-Smirnov against quadrature), from the final draws of many independent
chains; and a Geweke joint-distribution test of the collapsed updates with all three random.

Every check of a posterior here is slow (a few minutes each on 2 shared cores: thousands of vectorized chains
of a kernel with hyperparameter updates compile and run for tens of sweeps).

Negative control: the collapsed update with the log-transform's Jacobian counted twice (a
plausible slip) fails the same check.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import PGAS, BeamSampler, DirectAssignmentGibbs, RCDSampler, WeakLimitGibbs
from numpyro_hdphmm.infer import weak_limit  # the function (the module of the same name is numpyro_hdphmm.infer.algorithms.weak_limit)

from test_weak_limit import hyper_model  # gamma, alpha, kappa random; L = 3, 3 categories
from _checks import (
    collapsed_jacobian_counted_twice,
    empirical_tv,
    exact_infinite_hyper_posterior,
    exact_weak_limit_hyper_posterior,
    geweke_z_scores,
    ks_against_grid,
    tv_bound,
)

GAMMA, L, C = 3.0, 3, 2  # gamma = L: a uniform prior on the weak limit's beta (exact quadrature)
ALPHA_PRIOR, KAPPA_PRIOR = (3.0, 1.0), (2.0, 1.0)
Y = [0, 0, 1, 1, 0]
KS_ALPHA = 1e-3


def _model(capacity):
    def model(y):
        alpha = numpyro.sample("alpha", dist.Gamma(*ALPHA_PRIOR))
        kappa = numpyro.sample("kappa", dist.Gamma(*KAPPA_PRIOR))
        hmm = nh.StickyHDPHMM(GAMMA, alpha, kappa, nh.emissions.Categorical(C, 1.0), max_states=capacity)
        nh.sample("y", hmm, obs=y)

    return model


def _final_draws(kernel, num_chains, num_warmup, seed=0):
    """The last draw of ``num_chains`` vectorized chains: states ``(C, T)``, ``alpha``, ``kappa``."""
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=1, num_chains=num_chains, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.key(seed), np.array(Y))
    s = mcmc.get_samples()
    return (np.asarray(s["y_states"]).reshape(num_chains, -1), np.asarray(s["alpha"]).reshape(-1),
            np.asarray(s["kappa"]).reshape(-1))


def _check(exact, draws):
    """``(TV, TV bound, KS p of log alpha, KS p of log kappa)``."""
    probs, u, log_pu, v, log_pv = exact
    states, alpha, kappa = draws
    return (empirical_tv(probs, states), tv_bound(probs.values(), len(states)),
            ks_against_grid(np.log(alpha), u, log_pu), ks_against_grid(np.log(kappa), v, log_pv))


@pytest.fixture(scope="module")
def exact_weak_limit():
    return exact_weak_limit_hyper_posterior([Y], L, GAMMA, ALPHA_PRIOR, KAPPA_PRIOR, C, 1.0, num_points=60)


def _weak_limit_case(exact, hyperparameters):
    draws = _final_draws(WeakLimitGibbs(_model(L), hyperparameters=hyperparameters), num_chains=3000, num_warmup=40)
    return _check(exact, draws)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("hyperparameters", ["collapsed", "auxiliary"])
def test_weak_limit_joint_posterior(exact_weak_limit, hyperparameters):
    tv, bound, p_alpha, p_kappa = _weak_limit_case(exact_weak_limit, hyperparameters)
    print(hyperparameters, "TV", tv, "bound", bound, "KS p", p_alpha, p_kappa)
    assert tv < bound, (tv, bound)
    assert p_alpha > KS_ALPHA and p_kappa > KS_ALPHA, (p_alpha, p_kappa)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_weak_limit_detects_jacobian_counted_twice(exact_weak_limit, monkeypatch):
    collapsed_jacobian_counted_twice(monkeypatch)
    tv, bound, p_alpha, p_kappa = _weak_limit_case(exact_weak_limit, "collapsed")
    print("negative control TV", tv, "bound", bound, "KS p", p_alpha, p_kappa)
    assert min(p_alpha, p_kappa) < KS_ALPHA


@pytest.fixture(scope="module")
def exact_infinite():
    return exact_infinite_hyper_posterior([Y], GAMMA, ALPHA_PRIOR, KAPPA_PRIOR, C, 1.0, num_points=50)


def _infinite_case(exact, kernel):
    return _check(exact, _final_draws(kernel, num_chains=2000, num_warmup=30))


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("hyperparameters", ["collapsed", "auxiliary"])
def test_direct_assignment_joint_posterior(exact_infinite, hyperparameters):
    tv, bound, p_alpha, p_kappa = _infinite_case(exact_infinite,
                                                 DirectAssignmentGibbs(_model(8), hyperparameters=hyperparameters))
    print(hyperparameters, "TV", tv, "bound", bound, "KS p", p_alpha, p_kappa)
    assert tv < bound, (tv, bound)
    assert p_alpha > KS_ALPHA and p_kappa > KS_ALPHA, (p_alpha, p_kappa)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("kernel", ["PGAS", "RCDSampler"])
def test_pgas_and_rcd_collapsed_joint_posterior(exact_infinite, kernel):
    """PGAS (prior proposal, 4 particles) and RCDSampler (``"stepwise"``: its collapsed update
    re-seats the franchise through ``beta``) with the collapsed updates, against the same exact
    posterior of the partition and of ``alpha``, ``kappa``.  PGAS gets capacity 20: its particles
    instantiate states they do not keep, and with 8 slots (``alpha`` up to ~10 here) sweeps
    overflowed, truncating the model (TV 0.129 collapsed, 0.124 auxiliary, bound 0.116)."""
    make = {"PGAS": lambda: PGAS(_model(20), num_particles=4), "RCDSampler": lambda: RCDSampler(_model(8), mode="stepwise")}
    tv, bound, p_alpha, p_kappa = _infinite_case(exact_infinite, make[kernel]())
    print(kernel, "collapsed TV", tv, "bound", bound, "KS p", p_alpha, p_kappa)
    assert tv < bound, (tv, bound)
    assert p_alpha > KS_ALPHA and p_kappa > KS_ALPHA, (p_alpha, p_kappa)


# ---------------------------------------------------------------------------- Geweke
@pytest.mark.slow
@pytest.mark.statistical
def test_geweke_weak_limit_collapsed():
    def self_rate(z):
        s = z["y_states"]
        return jnp.mean(s[1:] == s[:-1])

    stats = {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "beta0": lambda z: z["y_beta"][0],
        "pi00": lambda z: z["y_trans"][0, 0],
        "self_rate": self_rate,
    }
    z = geweke_z_scores(WeakLimitGibbs(hyper_model, hyperparameters="collapsed"), weak_limit(hyper_model), stats,
                        num_steps=8, num_iterations=6000, num_prior=6000)
    print("geweke z", z)
    assert max(abs(v) for v in z.values()) < 4.5, z


# ---------------------------------------------------------------------------- the option
def test_option_in_the_plan_and_validated():
    """The collapsed updates are the default of every kernel, the auxiliary-variable ones on
    request, and the update plan says which; an unknown value is refused."""
    y = np.array(Y)
    kernels = (WeakLimitGibbs, DirectAssignmentGibbs, BeamSampler, PGAS, RCDSampler)
    for cls in kernels:
        capacity = L if cls is WeakLimitGibbs else 8
        plan = cls(_model(capacity)).update_plan(y)
        assert plan.sites("collapsed") == ("alpha", "kappa") and plan.sites("exact") == (), cls.__name__
        if cls in (WeakLimitGibbs, PGAS, RCDSampler):  # (one discovery each: keep the default suite cheap)
            plan = cls(_model(capacity), hyperparameters="auxiliary").update_plan(y)
            assert plan.sites("exact") == ("alpha", "kappa") and plan.sites("collapsed") == (), cls.__name__
        with pytest.raises(ValueError, match="hyperparameters"):
            cls(_model(capacity), hyperparameters="gibbs")
