"""The infinite-model kernels with emissions written as plain NumPyro (``CustomEmission``): the
uncollapsed emission step of DirectAssignmentGibbs and the relabel-free BeamSampler, against the
exact partition posterior of the infinite model, with negative controls."""

import time

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs
from numpyro_hdphmm.infer.algorithms import beam
from numpyro_hdphmm.emissions.custom import ExplicitLikelihoods

from _checks import empirical_tv, exact_infinite_posterior, final_states, tv_bound

ALPHA, KAPPA, C, ETA = 2.0, 1.5, 2, 0.3  # ETA: Dirichlet prior of the emission (sharp: informative)
Y = [0, 0, 1, 1, 0]
# (gamma, capacity) per kernel: the beam's slices need a capacity that gamma = 3 would exhaust
SETUP = {DirectAssignmentGibbs: (3.0, 8), BeamSampler: (0.5, 10)}


def custom_model(gamma, capacity):
    """Categorical emissions with the user's Dirichlet(ETA) site: the same posterior over
    partitions as the conjugate ``Categorical(C, ETA)`` family, with ``theta`` explicit."""

    def model(y):
        probs = numpyro.sample("probs", dist.Dirichlet(jnp.full(C, ETA)).expand([capacity]).to_event(1))
        hmm = nh.StickyHDPHMM(gamma, ALPHA, KAPPA, lambda k: dist.Categorical(probs=probs[k]), max_states=capacity)
        nh.sample("y", hmm, obs=y)

    return model


@pytest.fixture(scope="module")
def exact():
    return {g: exact_infinite_posterior([Y], g, ALPHA, KAPPA, C, ETA) for g, _ in SETUP.values()}


def _tv(kernel_cls, exact, num_chains=1000, num_warmup=40):
    gamma, capacity = SETUP[kernel_cls]
    exact = exact[gamma]
    kernel = kernel_cls(custom_model(gamma, capacity))
    start = time.time()
    draws = final_states(kernel, (np.array(Y),), num_chains=num_chains, num_warmup=num_warmup)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    print(f"{type(kernel).__name__}: TV {tv:.4f}, bound {bound:.4f}, {time.time() - start:.1f} s")
    return tv, bound


@pytest.mark.slow  # 107 s; every kernel's default exactness check is its conformance enumeration
@pytest.mark.statistical
def test_direct_assignment_custom_emission_enumeration(exact):
    tv, bound = _tv(DirectAssignmentGibbs, exact)
    assert tv < bound, (tv, bound)


@pytest.mark.slow  # 127 s; the direct-assignment case stays in the default set
@pytest.mark.statistical
def test_beam_custom_emission_enumeration(exact):
    tv, bound = _tv(BeamSampler, exact)
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_direct_assignment_custom_detects_missing_free_slot_factor(exact, monkeypatch):
    """A new state's weight without the 1/F of the uniform slot assignment (each free slot given
    the whole new-state weight) favours new states: detected."""

    def log_new(self, pre_i, active):
        return jnp.where(active, -jnp.inf, pre_i)

    monkeypatch.setattr(ExplicitLikelihoods, "log_new", log_new)
    tv, bound = _tv(DirectAssignmentGibbs, exact)
    assert tv > bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_beam_custom_detects_likelihoods_of_the_wrong_slots(exact, monkeypatch):
    """The FFBS reading each state's likelihood from the neighbouring slot (the user's parameters
    and the states out of step, as a relabelling that does not move the user's sites would do):
    detected."""
    ffbs = beam.slice_ffbs

    def shifted(key, log_pi, log_u, inst, log_lik, *args):
        return ffbs(key, log_pi, log_u, inst, jnp.roll(log_lik, 1, -1), *args)

    monkeypatch.setattr(beam, "slice_ffbs", shifted)
    tv, bound = _tv(BeamSampler, exact)
    assert tv > bound, (tv, bound)


def test_dp_mixture_rejects_custom_base():
    custom = nh.emissions.CustomEmission(lambda k: dist.Normal(jnp.zeros(3)[k], 1.0), 3)
    with pytest.raises(ValueError, match="base_family"):
        nh.emissions.DPMixture(custom, 1.0, 4)
