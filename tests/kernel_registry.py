"""The kernel registry of the conformance suite (``tests/infer/test_conformance.py``): one line per
kernel variant, with the kernel's options, the model families it samples, and the settings of
each parametrized check (exact enumeration, Geweke, agreement, determinism, model checks).

A new algorithm, or a new variant of one (another mode, proposal, particle count), is covered by
adding one :class:`Entry` to :data:`REGISTRY`: every check that has settings on it then runs
on it.  A new model family is covered by adding it to :data:`FAMILIES` (a builder of a small
model of that family) and to the ``families`` of the entries that sample it; the model-check test
then also asserts that every other entry refuses it with ``NotImplementedError``.

The settings reproduce, one for one, the per-kernel tests they replaced (same problem, same
number of draws, same bound; the map is in the module docstring of ``test_conformance.py``).

Tests outside ``tests/infer`` (``test_hostile_inputs.py``, ``test_hostile_properties.py``) and
``test_determinism.py`` take their kernel lists from here too (:func:`kernel_classes`,
:func:`entries`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

import numpyro_hdphmm as nh

# ------------------------------------------------------------------------ model families
#: the families a kernel may declare: "infinite" (``beta ~ GEM``, what ``nh.StickyHDPHMM`` declares)
#: and "weak_limit" (the Dirichlet weak limit of Fox et al., ``nh.infer.weak_limit(model)``)
FAMILY_NAMES = ("infinite", "weak_limit")


def categorical_model(gamma, alpha, kappa, capacity, num_categories=2, emission_conc=1.0):
    """The enumeration problems' model: a sticky HDP-HMM with fixed concentrations and
    ``Categorical(num_categories, emission_conc)`` emissions (``model(y, lengths=None)``)."""

    def model(y, lengths=None):
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(num_categories, emission_conc),
                              max_states=capacity)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    return model


def geweke_model(capacity, gamma_prior=(2.0, 1.0)):
    """The Geweke tests' model: ``gamma ~ Gamma(gamma_prior)``, ``alpha ~ Gamma(3, 1)``, ``kappa ~
    Gamma(2, 1)``, ``Categorical(3, 1)`` emissions (``model(y=None, num_steps=None)``)."""

    def hyper_model(y=None, num_steps=None):
        gamma = numpyro.sample("gamma", dist.Gamma(*gamma_prior))
        alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
        kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(3, 1.0), max_states=capacity,
                              num_steps=num_steps)
        nh.sample("y", hmm, obs=y)

    return hyper_model


#: family -> a small model of that family (the model-check test: accepted by the entries that
#: declare it, refused with ``NotImplementedError`` by the others)
FAMILIES: dict[str, Callable] = {
    "infinite": lambda: categorical_model(1.0, 2.0, 1.5, 4),
    "weak_limit": lambda: nh.infer.weak_limit(categorical_model(1.0, 2.0, 1.5, 4)),
}


# ------------------------------------------------------------------ Geweke statistics
def self_rate(z):
    s = z["y_states"]
    return jnp.mean(s[1:] == s[:-1])


def num_used(capacity):
    return lambda z: jnp.sum(jnp.zeros(capacity, bool).at[z["y_states"]].set(True))


def weak_limit_statistics(capacity):
    """Label-dependent statistics (the weak limit keeps its labels)."""
    return {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "beta0": lambda z: z["y_beta"][0],
        "pi00": lambda z: z["y_trans"][0, 0],
        "probs00": lambda z: z["y_probs"][0, 0],
        "self_rate": self_rate,
        "num_states": num_used(capacity),
    }


def partition_statistics(capacity):
    """Label-invariant statistics of the states and hyperparameters only (the collapsed kernels
    record states relabelled by first appearance, the prior's labels follow the stick order)."""
    return {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "self_rate": self_rate,
        "num_states": num_used(capacity),
        "first_state_mass": lambda z: jnp.mean(z["y_states"] == z["y_states"][0]),
    }


def first_state_statistics(capacity):
    """Label-invariant statistics that also read the explicit rows and emission parameters at
    the first state (the beam sampler and PGAS relabel states by first appearance)."""
    k = capacity

    def first(z):
        return z["y_states"][0]

    return {
        "gamma": lambda z: z["gamma"],
        "alpha": lambda z: z["alpha"],
        "kappa": lambda z: z["kappa"],
        "beta_first": lambda z: z["y_beta"][first(z)],
        "pi_first_self": lambda z: z["y_trans"][first(z), first(z)],
        "pi_start_first": lambda z: z["y_trans"][k, first(z)],
        "probs_first": lambda z: z["y_probs"][first(z), 0],
        "self_rate": self_rate,
        "num_states": num_used(k),
    }


# --------------------------------------------------------------------------- check settings
@dataclasses.dataclass(frozen=True)
class Enumeration:
    """Exact enumeration: the partition of the last state of ``num_chains`` vectorized chains
    (``num_warmup`` sweeps each) against the exact posterior of ``problem`` (``"single"``: ``y =
    [0, 0, 1, 1, 0]``; ``"padded"``: ``[[0, 1, 1], [1, 0]]`` as a padded batch with ``lengths``;
    ``"missing"``: ``[0, 0, 1, 1, nan]``, the first four steps against the posterior of ``[0, 0,
    1, 1]``), in total variation below :func:`_checks.tv_bound`.  ``hyper``: fixed ``(gamma,
    alpha, kappa)``; ``capacity``: ``max_states`` (the weak limit's ``L`` for an entry whose
    ``target`` is ``"weak_limit"``); ``options``: kernel options for this check."""

    problem: str
    hyper: tuple
    capacity: int
    num_chains: int
    num_warmup: int
    seed: int = 0
    slow: bool = False
    options: tuple = ()


@dataclasses.dataclass(frozen=True)
class Geweke:
    """Geweke's joint-distribution test (:func:`_checks.geweke_z_scores`) on
    :func:`geweke_model` ``(capacity, gamma_prior)`` with the ``statistics`` builder, every
    ``|z| < limit``.  ``run``: ``num_steps``, ``num_iterations``, ``num_prior`` (and
    ``num_chains``); ``options``: kernel options (e.g. ``hyperparameters``)."""

    capacity: int
    statistics: Callable
    run: tuple
    gamma_prior: tuple = (2.0, 1.0)
    options: tuple = ()
    limit: float = 4.5
    label: str = ""


@dataclasses.dataclass(frozen=True)
class Agreement:
    """Posterior means of ``num_states`` and the log-likelihood of the entry against each entry of
    ``others`` on 80 steps of three Gaussian regimes (``GaussianNIW(0, 0.1, 3, I)`` emissions,
    ``StickyHDPHMM(1, 3, 5, max_states=capacity)``), 4 vectorized chains of ``num_samples`` draws
    after ``num_warmup``, within ``4`` standard errors (ArviZ ESS)."""

    others: tuple
    capacity: int
    num_warmup: int
    num_samples: int


@dataclasses.dataclass(frozen=True)
class Entry:
    """One kernel variant: ``cls(model, **options)``.

    ``families``: the model families it samples (:data:`FAMILY_NAMES`); ``target``: the posterior
    its draws follow on an infinite model (``"infinite"``, or ``"weak_limit"`` for a kernel that
    samples the weak limit of ``max_states`` states); ``enumeration`` / ``geweke``: the settings
    of those checks (each one parametrized case); ``agreement``: the cross-kernel check or
    ``None``; ``determinism``: the same-key test runs on it; ``broken``: a negative control (a
    deliberately wrong kernel: every statistical check must fail on it)."""

    name: str
    cls: Callable
    options: tuple = ()
    families: frozenset = frozenset({"infinite"})
    target: str = "infinite"
    enumeration: tuple = ()
    geweke: tuple = ()
    agreement: Agreement | None = None
    determinism: bool = False
    broken: bool = False

    def build(self, model, options=()):
        """The kernel on ``model``: the entry's options, then the check's ``options``."""
        return self.cls(model, **{**dict(self.options), **dict(options)})


def lagged_states(cls):
    """A deliberately wrong kernel (negative control of the conformance checks): ``cls`` whose
    every sweep records the states one step late (``z_t <- z_{t-1}`` for ``t >= 1``, ``z_0``
    kept), an off-by-one in time a forward-filtering backward-sampling pass could make."""

    class Lagged(cls):
        def sample(self, state, model_args, model_kwargs):
            state = super().sample(state, model_args, model_kwargs)
            z = dict(state.z)
            s = z["y_states"]
            z["y_states"] = s.at[..., 1:].set(s[..., :-1])
            return state._replace(z=z)

    Lagged.__name__ = Lagged.__qualname__ = f"Lagged{cls.__name__}"
    return Lagged


def one_sided_swaps(cls):
    """A deliberately wrong tempered kernel (negative control of replica exchange): ``cls`` whose
    swaps are accepted with ``(b_{r+1} - b_r)(-ell_{r+1})``, the log ratio without the lower rung's
    likelihood ``ell_r``."""
    from numpyro_hdphmm.infer.moves.tempering import Tempered

    class OneSidedTempered(Tempered):
        @staticmethod
        def swap_log_ratio(ladder, log_likelihood):
            return (ladder[1:] - ladder[:-1]) * (-log_likelihood[1:])

    class OneSided(cls):
        def __init__(self, model, *, tempering, **options):
            super().__init__(model, **options)
            self.algorithm = OneSidedTempered(self.algorithm, tempering)

    OneSided.__name__ = OneSided.__qualname__ = f"OneSided{cls.__name__}"
    return OneSided


# ------------------------------------------------------------------------------- registry
_WL = (3.0, 2.0, 1.5)  # gamma, alpha, kappa of the weak-limit and direct-assignment problems
_BEAM = (0.5, 2.0, 1.5)  # the beam sampler's and PGAS's (gamma 0.5: few sticks per sweep)
_PGAS_PLAIN = (0.5, 2.0, 0.0)
_GEWEKE_DA = dict(num_steps=6, num_iterations=6000, num_prior=20000)
_GEWEKE_BEAM = dict(num_steps=8, num_chains=16, num_iterations=3000, num_prior=20000)


def _t(d):
    return tuple(sorted(d.items()))


def _wl_enumeration(problem, slow=False, num_chains=3000):
    return Enumeration(problem, _WL, 3, num_chains=num_chains, num_warmup=40, slow=slow)


def _da_enumeration(problem, slow=False):
    return Enumeration(problem, _WL, 8, num_chains=2000, num_warmup=25, slow=slow)


def _beam_enumeration(problem, slow=False, num_chains=2000):
    return Enumeration(problem, _BEAM, 10, num_chains=num_chains, num_warmup=30, slow=slow)


def _pgas_enumeration(hyper):
    return Enumeration("single", hyper, 10, num_chains=2000, num_warmup=30, slow=True)


def _pgas_geweke(proposal):
    return tuple(Geweke(30, first_state_statistics, _t(_GEWEKE_BEAM), gamma_prior=(2.0, 2.0),
                        options=_t(dict(num_particles=4, hyperparameters=h)), label=f"N4-{h}")
                 for h in ("auxiliary", "collapsed"))


REGISTRY: tuple[Entry, ...] = (
    Entry("WeakLimitGibbs", nh.infer.WeakLimitGibbs, families=frozenset(FAMILY_NAMES), target="weak_limit",
          enumeration=(_wl_enumeration("single"), _wl_enumeration("padded", slow=True)),
          geweke=(Geweke(3, weak_limit_statistics, _t(dict(num_steps=8, num_iterations=6000, num_prior=6000))),),
          determinism=True),
    Entry("WeakLimitGibbs-tempered", nh.infer.WeakLimitGibbs, options=_t(dict(tempering=4)),
          families=frozenset(FAMILY_NAMES), target="weak_limit",
          # slow (61 s of a loaded worker; the default set keeps the tempering tests of
          # test_tempering.py, among them the exact evidence and the wiring of the rungs' sweeps)
          enumeration=(_wl_enumeration("single", slow=True), _wl_enumeration("padded", slow=True)),
          agreement=Agreement(("WeakLimitGibbs",), capacity=20, num_warmup=500, num_samples=2000),
          determinism=True),
    Entry("DirectAssignmentGibbs", nh.infer.DirectAssignmentGibbs,
          enumeration=(_da_enumeration("single"), _da_enumeration("padded", slow=True), _da_enumeration("missing", slow=True)),
          geweke=(Geweke(12, partition_statistics, _t(_GEWEKE_DA)),),
          determinism=True),
    Entry("BeamSampler", nh.infer.BeamSampler,
          # 1200 chains in the default set (at 2000: TV 0.040, bound 0.0945; the bound grows as n^-1/2)
          enumeration=(_beam_enumeration("single", num_chains=1200), _beam_enumeration("padded", slow=True)),
          geweke=(Geweke(30, first_state_statistics, _t(_GEWEKE_BEAM), gamma_prior=(2.0, 2.0)),),
          agreement=Agreement(("DirectAssignmentGibbs", "WeakLimitGibbs"), capacity=20, num_warmup=500,
                              num_samples=2000),
          determinism=True),
    Entry("RCDSampler-stepwise", nh.infer.RCDSampler, options=_t(dict(mode="stepwise", block_size=3)),
          geweke=tuple(Geweke(12, partition_statistics, _t(_GEWEKE_DA), options=_t(dict(hyperparameters=h)), label=h)
                       for h in ("collapsed", "auxiliary"))),
    Entry("RCDSampler", nh.infer.RCDSampler, determinism=True),  # the defaults (slice mode)
    Entry("RCDSampler-beam", nh.infer.RCDSampler, options=_t(dict(mode="beam", block_size=3)),
          geweke=tuple(Geweke(12, partition_statistics, _t(_GEWEKE_DA), options=_t(dict(hyperparameters=h)), label=h)
                       for h in ("collapsed", "auxiliary"))),
    Entry("RCDSampler-blocked", nh.infer.RCDSampler, options=_t(dict(mode="blocked", block_size=2)),
          enumeration=(Enumeration("single", _WL, 8, num_chains=2000, num_warmup=30, seed=1, slow=True),)),
    Entry("PGAS-posterior", nh.infer.PGAS, options=_t(dict(proposal="posterior")),
          enumeration=(dataclasses.replace(_pgas_enumeration(_BEAM), options=_t(dict(num_particles=2))),
                       dataclasses.replace(_pgas_enumeration(_PGAS_PLAIN), options=_t(dict(num_particles=10)))),
          geweke=_pgas_geweke("posterior")),
    Entry("PGAS-prior", nh.infer.PGAS, options=_t(dict(proposal="prior")),
          enumeration=(dataclasses.replace(_pgas_enumeration(_BEAM), options=_t(dict(num_particles=2))),
                       dataclasses.replace(_pgas_enumeration(_PGAS_PLAIN), options=_t(dict(num_particles=10)))),
          geweke=_pgas_geweke("prior"),
          agreement=Agreement(("WeakLimitGibbs", "BeamSampler", "DirectAssignmentGibbs"), capacity=32,
                              num_warmup=300, num_samples=1500)),
    Entry("PGAS-N3", nh.infer.PGAS, options=_t(dict(num_particles=3)), determinism=True),
    # negative controls: every statistical check must fail on these (slow)
    Entry("LaggedWeakLimitGibbs", lagged_states(nh.infer.WeakLimitGibbs), families=frozenset(FAMILY_NAMES),
          target="weak_limit", enumeration=(_wl_enumeration("single", slow=True),),
          geweke=(Geweke(3, weak_limit_statistics, _t(dict(num_steps=8, num_iterations=6000, num_prior=6000))),),
          broken=True),
    # (its Geweke case, 16 x 3000 iterations at capacity 30, was not run to the end on the shared
    # 2-core machine: the Geweke check's negative control is LaggedWeakLimitGibbs's)
    Entry("OneSidedWeakLimitGibbs-tempered", one_sided_swaps(nh.infer.WeakLimitGibbs), options=_t(dict(tempering=4)),
          families=frozenset(FAMILY_NAMES), target="weak_limit", enumeration=(_wl_enumeration("single", slow=True),),
          broken=True),
    Entry("LaggedBeamSampler", lagged_states(nh.infer.BeamSampler),
          enumeration=(_beam_enumeration("single", slow=True),), broken=True),
)

BY_NAME = {e.name: e for e in REGISTRY}


def entries(check: str | None = None, *, broken: bool = False):
    """The registry's entries (the working kernels, or the negative controls with
    ``broken=True``) that have settings for ``check`` (``"enumeration"``, ``"geweke"``,
    ``"agreement"``, ``"determinism"``; ``None``: all)."""
    out = [e for e in REGISTRY if e.broken == broken]
    if check is not None:
        out = [e for e in out if getattr(e, check)]
    return out


def kernel_classes():
    """Every kernel class of the registry, once each (the lists of the robustness tests)."""
    return list(dict.fromkeys(e.cls for e in entries()))
