"""The model-class layer: a model class describes its own sites (``site_roles``) and declares them
(``declare``); discovery, the explicit state, the recorded sites and the kernels' refusals are
built from that description.  A toy model class with a latent structure of its own (per-state
"duration" rates, as an explicit-duration model will have) fits as a further instance: discovery
finds its extra site, the kernels that do not list it refuse it naming the kernels that do, and an
algorithm that lists it carries the site in ``Explicit.extra`` with no change to the shared code."""

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer.algorithms.weak_limit import WeakLimit
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.models.base import HDP_ROLE, NAME_KEY, SiteRole

Y = np.asarray(nh.datasets.fox_experiment_a(num_steps=40).observations)
EMISSION = nh.emissions.GaussianNIW.weakly_informative(Y)


def hmm_model(y):
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 5.0, EMISSION, max_states=5), obs=y)


class ToyDurations(nh.StickyHDPHMM):
    """The HMM plus per-state duration rates ``{name}_rate ~ Gamma(2, 1)`` (a latent structure of
    its own, role ``"durations"``) that the observations do not depend on."""

    kind = "toy_durations"

    def site_roles(self):
        return (SiteRole("durations", "rate", description="per-state duration rates"),) + super().site_roles()

    def declare(self, name, obs=None, lengths=None):
        numpyro.sample(f"{name}_rate", dist.Gamma(2.0, 1.0).expand([self.max_states]).to_event(1),
                       infer={HDP_ROLE: "durations", NAME_KEY: name})
        return super().declare(name, obs, lengths)


def toy_model(y):
    nh.sample("y", ToyDurations(1.0, 1.0, 5.0, EMISSION, max_states=5), obs=y)


def test_registry_and_site_roles_describe_the_declared_sites():
    assert nh.models.MODEL_CLASSES["hmm"] is nh.StickyHDPHMM
    hmm = nh.StickyHDPHMM(1.0, 1.0, 5.0, EMISSION, max_states=5)
    tr = handlers.trace(handlers.seed(hmm_model, 0)).get_trace(Y)
    declared = [r.site("y") for r in hmm.site_roles()]
    traced = [s for s in tr if tr[s]["type"] == "sample"]
    assert sorted(declared) == sorted(traced)  # every site, none more
    shared = [s for s in traced if tr[s]["infer"][HDP_ROLE] != "emission"]
    assert shared == [r.site("y") for r in hmm.site_roles() if r.role != "emission"]  # in model order
    assert all(tr[r.site("y")]["infer"][HDP_ROLE] == r.role for r in hmm.site_roles())
    assert tr["y"]["infer"]["hdphmm_model"] is not None
    with pytest.raises(ValueError, match="model class"):
        handlers.seed(lambda: nh.sample("y", dist.Normal(0.0, 1.0), obs=Y), 0)()


def test_discovery_reads_a_new_model_class_from_its_description():
    spec = nh.infer.discover(toy_model, (Y,))
    assert spec.sites.kind == "toy_durations"
    assert spec.sites.extra == (("durations", "y_rate"),)
    assert "y_rate" in spec.sites.owned and "y_rate" not in spec.inner_sites
    assert "y_rate" in spec.plan.sites("algorithm")
    hmm_spec = nh.infer.discover(hmm_model, (Y,))
    assert hmm_spec.sites.kind == "hmm" and hmm_spec.sites.extra == ()


@pytest.mark.parametrize("kernel", [nh.infer.WeakLimitGibbs, nh.infer.BeamSampler])
def test_kernels_refuse_a_model_class_they_do_not_sample(kernel):
    with pytest.raises(NotImplementedError, match="does not sample the 'toy_durations' model class.*no kernel"):
        MCMC(kernel(toy_model), num_warmup=1, num_samples=1, progress_bar=False).run(random.key(0), Y)


class ToyWeakLimit(WeakLimit):
    """The weak-limit sweep plus the durations' exact conditional (their prior: the data do not
    depend on them), drawn into ``Explicit.extra``."""

    model_classes = ("hmm", "toy_durations")

    def step(self, rng_key, state, spec, view):
        new, info = super().step(rng_key, state, spec, view)
        if spec.sites.extra:
            rate = random.gamma(random.fold_in(rng_key, 7), 2.0, (spec.capacity,)).astype(new.beta.dtype)
            new = new._replace(extra={"durations": rate})
        return new, info


class ToyKernel(HDPKernel):
    algorithm = ToyWeakLimit()

    def __init__(self, model, **options):
        super().__init__(model, ToyWeakLimit(), **options)


def test_an_algorithm_that_lists_the_class_carries_its_sites():
    mcmc = MCMC(ToyKernel(toy_model), num_warmup=20, num_samples=300, progress_bar=False)
    mcmc.run(random.key(1), Y)
    rate = np.asarray(mcmc.get_samples()["y_rate"])
    assert rate.shape == (300, 5)
    # the sweep's draws reach the record (not the start's value held fixed) and follow the
    # conditional, here the Gamma(2, 1) prior: mean 2, variance 2 (5 x 300 draws: se of the mean 0.04)
    assert np.all(np.std(rate, 0) > 0.3)
    assert abs(rate.mean() - 2.0) < 0.2 and abs(rate.var() - 2.0) < 0.6


@pytest.mark.slow
def test_negative_control_a_step_that_forgets_the_extra_sites():
    """A step that does not draw ``Explicit.extra`` keeps the start's values for good: the check
    above (the draws vary and follow their conditional) fails on it."""

    class Forgetful(ToyWeakLimit):
        def step(self, rng_key, state, spec, view):
            new, info = super().step(rng_key, state, spec, view)
            return new._replace(extra=state.extra), info

    class ForgetfulKernel(HDPKernel):
        algorithm = Forgetful()

    held = MCMC(ForgetfulKernel(toy_model), num_warmup=2, num_samples=20, progress_bar=False)
    held.run(random.key(1), Y)
    held_rate = np.asarray(held.get_samples()["y_rate"])
    assert np.all(held_rate == held_rate[0])


def test_the_constructor_pattern_shows_every_option():
    import inspect

    for kernel in nh.infer.KERNELS:
        params = inspect.signature(kernel.__init__).parameters
        for option in ("inner_kernel", "exact_hyperparameters", "hyperparameters", "verbose", "init_strategy"):
            assert option in params, (kernel.__name__, option)
            assert f":param {option}:" in kernel.__doc__, (kernel.__name__, option)
        assert "options" not in params
    with pytest.raises(TypeError):
        nh.infer.WeakLimitGibbs(hmm_model, no_such_option=1)
