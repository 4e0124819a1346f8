"""WeakLimitGibbs: exact enumeration, Geweke, chain methods, ArviZ, and Fox et al. experiment A."""

import functools

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

from _checks import empirical_tv, exact_weak_limit_posterior, final_states, geweke_z_scores, tv_bound

GAMMA, ALPHA, KAPPA, L, C = 3.0, 2.0, 1.5, 3, 2


def fixed_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0), max_states=L)
    nh.sample("y", hmm, obs=y, lengths=lengths)


@pytest.fixture(scope="module")
def exact_single():
    y = [0, 0, 1, 1, 0]
    return y, exact_weak_limit_posterior([y], L, GAMMA, ALPHA, KAPPA, C, 1.0)


def test_enumeration_single_sequence(exact_single):
    y, exact = exact_single
    draws = final_states(WeakLimitGibbs(fixed_model), (np.array(y),), num_chains=3000, num_warmup=40)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    assert tv < bound, (tv, bound)


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


def test_enumeration_several_sequences_with_padding():
    seqs = [[0, 1, 1], [1, 0]]
    exact = exact_weak_limit_posterior(seqs, L, GAMMA, ALPHA, KAPPA, C, 1.0)
    y = np.array([[0, 1, 1], [1, 0, 0]])
    lengths = np.array([3, 2])
    draws = final_states(WeakLimitGibbs(fixed_model), (y, lengths), num_chains=3000, num_warmup=40)
    flat = [np.concatenate([d.reshape(2, 3)[0], d.reshape(2, 3)[1, :2]]) for d in draws]
    tv, bound = empirical_tv(exact, flat), tv_bound(exact.values(), len(flat))
    assert tv < bound, (tv, bound)


# ---------------------------------------------------------------------------- Geweke
def hyper_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(3, 1.0), max_states=3, num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


def _stats():
    def self_rate(z):
        s = z["y_states"]
        return jnp.mean(s[1:] == s[:-1])

    return {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "beta0": lambda z: z["y_beta"][0],
        "pi00": lambda z: z["y_trans"][0, 0],
        "probs00": lambda z: z["y_probs"][0, 0],
        "self_rate": self_rate,
        "num_states": lambda z: jnp.sum(jnp.zeros(3, bool).at[z["y_states"]].set(True)),
    }


GEWEKE_LIMIT = 4.5


@pytest.mark.slow
def test_geweke_with_hyperparameter_updates():
    z = geweke_z_scores(WeakLimitGibbs(hyper_model), hyper_model, _stats(), num_steps=8,
                        num_iterations=6000, num_prior=6000)
    assert max(abs(v) for v in z.values()) < GEWEKE_LIMIT, z


@pytest.mark.slow
def test_geweke_detects_printed_gamma_update(monkeypatch):
    monkeypatch.setattr(crp, "resample_gamma", functools.partial(crp.resample_gamma, printed_typo=True))
    z = geweke_z_scores(WeakLimitGibbs(hyper_model), hyper_model, _stats(), num_steps=8,
                        num_iterations=6000, num_prior=6000)
    assert abs(z["gamma"]) > GEWEKE_LIMIT, z
