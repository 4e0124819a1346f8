"""Kernel conformance suite: the checks every kernel must pass, parametrized over the registry
(``tests/kernel_registry.py``), so that a new kernel or kernel variant is covered by one registry
line.

- **enumeration** (``statistical``): independent draws (the last sweep of many vectorized chains)
  against the exact partition posterior of a tiny problem, in total variation below
  :func:`_checks.tv_bound`;
- **Geweke** (``statistical``, slow): the successive-conditional simulator against prior draws
  (:func:`_checks.geweke_z_scores`);
- **agreement** (``statistical``, slow): posterior means of the number of states and of the
  log-likelihood against other kernels on the same data;
- **model check**: every entry samples the model families it declares and refuses the others with
  ``NotImplementedError`` (discovery only, nothing compiled);
- **negative controls** (``negative_control``, slow): the registry's ``broken`` entries (a kernel
  whose sweep records the states one step late) must fail the enumeration and Geweke checks.

Determinism (the same key gives the same draws, continuation, pickling) is
``test_determinism.py``, over the registry's ``determinism`` entries.

The per-kernel tests these replace (same problem, draws, warm-up and bound):

- ``test_weak_limit.py::test_enumeration_single_sequence`` -> ``test_enumeration[WeakLimitGibbs-single]``
- ``test_weak_limit.py::test_enumeration_several_sequences_with_padding`` -> ``[WeakLimitGibbs-padded]``
- ``test_direct_assignment.py::test_enumeration_single_sequence`` / ``..._several_sequences_with_padding``
  / ``test_enumeration_missing_observation`` -> ``[DirectAssignmentGibbs-single|padded|missing]``
- ``test_beam.py::test_enumeration_single_sequence`` / ``test_enumeration_several_sequences_with_padding``
  (slow) -> ``[BeamSampler-single|padded]``
- ``test_rcd.py::test_partition_enumeration_five_steps_blocked`` (slow) -> ``[RCDSampler-blocked-single]``
- ``test_pgas.py::test_enumeration_single_sequence[4 cases]`` (slow) -> ``[PGAS-posterior|prior-single-N2|N10]``
- ``test_weak_limit.py::test_geweke_with_hyperparameter_updates`` -> ``test_geweke[WeakLimitGibbs]``
- ``test_direct_assignment.py::test_geweke`` -> ``test_geweke[DirectAssignmentGibbs]``
- ``test_beam.py::test_geweke_with_hyperparameter_updates`` -> ``test_geweke[BeamSampler]``
- ``test_rcd.py::test_geweke[4 cases]`` -> ``test_geweke[RCDSampler-stepwise|beam-collapsed|auxiliary]``
- ``test_pgas.py::test_geweke_with_hyperparameter_updates`` / ``..._with_collapsed_hyperparameter_updates``
  -> ``test_geweke[PGAS-posterior|prior-N4-auxiliary|collapsed]``
- ``test_beam.py::test_agrees_with_direct_assignment_and_weak_limit`` -> ``test_agreement[BeamSampler-vs-*]``
- ``test_pgas.py::test_agrees_with_other_kernels`` -> ``test_agreement[PGAS-prior-vs-*]``
- ``test_beam.py::test_weak_limit_model_is_rejected``, ``test_pgas.py::test_weak_limit_model_is_rejected``
  -> ``test_model_families[*-weak_limit]`` (every kernel, through discovery)

The kernels' own negative controls (a monkeypatched slip in one kernel's code) stay in their
modules; the ``broken`` entries here check that each parametrized check can fail at all.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh

from _checks import (callbacks_in_sweep, empirical_tv, exact_infinite_posterior, exact_weak_limit_posterior,
                     final_states, geweke_z_scores, tv_bound)
from kernel_registry import BY_NAME, FAMILIES, FAMILY_NAMES, categorical_model, entries, geweke_model

NUM_CATEGORIES = 2

#: problem -> (the sequences the exact posterior is of, the model arguments, draws -> flat partitions)
PROBLEMS = {
    "single": ([[0, 0, 1, 1, 0]], (np.array([0, 0, 1, 1, 0]),), lambda d: list(d)),
    "padded": ([[0, 1, 1], [1, 0]], (np.array([[0, 1, 1], [1, 0, 0]]), np.array([3, 2])),
               lambda d: [np.concatenate([x.reshape(2, 3)[0], x.reshape(2, 3)[1, :2]]) for x in d]),
    # a NaN observation carries transitions but no likelihood: the first four steps have the
    # posterior of the four observed steps
    "missing": ([[0, 0, 1, 1]], (np.array([0.0, 0.0, 1.0, 1.0, np.nan]),), lambda d: [x[:4] for x in d]),
}


@functools.lru_cache(maxsize=None)
def exact_posterior(target, problem, hyper, capacity):
    seqs = PROBLEMS[problem][0]
    if target == "weak_limit":
        return exact_weak_limit_posterior(seqs, capacity, *hyper, NUM_CATEGORIES, 1.0)
    return exact_infinite_posterior(seqs, *hyper, NUM_CATEGORIES, 1.0)


def _marks(entry, slow):
    marks = [pytest.mark.statistical]
    if entry.broken:
        marks += [pytest.mark.negative_control]
    if slow or entry.broken:
        marks += [pytest.mark.slow]
    return marks


def _label(settings):
    options = dict(settings.options)
    return "".join(f"-N{v}" if k == "num_particles" else f"-{v}" for k, v in options.items())


def _cases(check, slow=lambda s: getattr(s, "slow", True)):
    return [pytest.param(entry, s, marks=_marks(entry, slow(s)),
                         id=f"{entry.name}-{getattr(s, 'problem', '') or ''}{_label(s)}".rstrip("-"))
            for broken in (False, True) for entry in entries(check, broken=broken) for s in getattr(entry, check)]


# --------------------------------------------------------------------------- enumeration
def enumeration_tv(entry, settings):
    """``(TV, bound)`` of the entry's draws on the problem of ``settings``."""
    _, args, flatten = PROBLEMS[settings.problem]
    exact = exact_posterior(entry.target, settings.problem, settings.hyper, settings.capacity)
    model = categorical_model(*settings.hyper, settings.capacity, NUM_CATEGORIES)
    draws = final_states(entry.build(model, settings.options), args, num_chains=settings.num_chains,
                         num_warmup=settings.num_warmup, seed=settings.seed)
    flat = flatten(draws)
    return empirical_tv(exact, flat), tv_bound(exact.values(), len(flat))


@pytest.mark.parametrize("entry, settings", _cases("enumeration"))
def test_enumeration(entry, settings):
    tv, bound = enumeration_tv(entry, settings)
    print(f"{entry.name} {settings.problem}: TV {tv:.4f}, bound {bound:.4f}")
    if entry.broken:
        assert tv > bound, (tv, bound)
    else:
        assert tv < bound, (tv, bound)


@pytest.mark.slow  # three compilations of the loop (14 s); the default enumerations check the law of the draws
def test_final_states_are_mcmc_draws():
    """The enumeration tests' driver (``_checks.final_state``: the kernel's ``init`` and a compiled
    loop of its ``sample``, optimized when long) draws what NumPyro's ``MCMC`` draws, bit for bit,
    on the data of the default enumeration, in both compilations."""
    model = categorical_model(1.5, 2.0, 1.0, 3, NUM_CATEGORIES)
    args = PROBLEMS["single"][1]
    kernel = nh.infer.WeakLimitGibbs(model)
    mcmc = MCMC(kernel, num_warmup=3, num_samples=1, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(7), *args)
    expected = np.asarray(mcmc.get_samples()["y_states"]).reshape(2, -1)
    for optimize in (False, True):
        np.testing.assert_array_equal(final_states(kernel, args, 2, num_warmup=3, seed=7, optimize=optimize), expected)


# --------------------------------------------------------------------------------- Geweke
def geweke_scores(entry, settings):
    model = geweke_model(settings.capacity, settings.gamma_prior)
    forward = nh.infer.weak_limit(model) if entry.target == "weak_limit" else model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # MarkovChain escapes (~1e-6 at the capacities used)
        return geweke_z_scores(entry.build(model, settings.options), forward, settings.statistics(settings.capacity),
                               **dict(settings.run))


def _geweke_cases():
    return [pytest.param(entry, s, marks=_marks(entry, True),
                         id=entry.name + (f"-{s.label}" if s.label else ""))
            for broken in (False, True) for entry in entries("geweke", broken=broken) for s in entry.geweke]


@pytest.mark.parametrize("entry, settings", _geweke_cases())
def test_geweke(entry, settings):
    z = geweke_scores(entry, settings)
    worst = max(abs(v) for v in z.values())
    print(f"Geweke z ({entry.name} {settings.label}):", {k: round(float(v), 2) for k, v in z.items()})
    if entry.broken:
        assert worst > settings.limit, z
    else:
        assert worst < settings.limit, z


# ------------------------------------------------------------------------------ agreement
@functools.lru_cache(maxsize=None)
def _agreement_data():
    rng = np.random.default_rng(1)
    return np.concatenate([rng.normal(-3, 1, 30), rng.normal(3, 1, 30), rng.normal(0, 1, 20)])[:, None]


def _gauss_family():
    return nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, jnp.eye(1))


def _gauss_model(capacity):
    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 3.0, 5.0, _gauss_family(), max_states=capacity), obs=y)

    return model


@functools.lru_cache(maxsize=None)
def agreement_draws(name, capacity, num_warmup, num_samples):
    """``num_states`` and the log-likelihood of 4 vectorized chains (key 0), cached per kernel
    and settings (the subject's draws serve every pair)."""
    y = _agreement_data()
    mcmc = MCMC(BY_NAME[name].build(_gauss_model(capacity)), num_warmup=num_warmup, num_samples=num_samples,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    s = mcmc.get_samples()
    ll = jax.vmap(lambda mu, cov, z: _gauss_family().pointwise_log_likelihood(jnp.asarray(y), {"mu": mu, "cov": cov}, z)
                  .sum())(s["y_mu"], s["y_cov"], s["y_states"])
    return np.asarray(s["y_num_states"], float), np.asarray(ll)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("entry, other", [pytest.param(e, o, id=f"{e.name}-vs-{o}")
                                          for e in entries("agreement") for o in e.agreement.others])
def test_agreement(entry, other):
    """Posterior means of ``num_states`` and of the log-likelihood within 4 standard errors
    (ArviZ ESS over the 4 chains) of another kernel's on the same model (the weak limit at
    ``L = capacity``: its approximation error is far below the Monte Carlo error)."""
    import arviz as az

    a_settings = entry.agreement
    key = (a_settings.capacity, a_settings.num_warmup, a_settings.num_samples)
    mine, theirs = agreement_draws(entry.name, *key), agreement_draws(other, *key)
    for i, stat in enumerate(("num_states", "log-likelihood")):
        a, b = mine[i], theirs[i]
        se = np.sqrt(a.var() / az.ess(a.reshape(4, -1)) + b.var() / az.ess(b.reshape(4, -1)))
        print(f"{stat}: {entry.name} {a.mean():.3f}, {other} {b.mean():.3f}, z {(a.mean() - b.mean()) / se:.2f}")
        assert abs(a.mean() - b.mean()) < 4 * se + 1e-9, (stat, a.mean(), b.mean(), se)


# ---------------------------------------------------------------------------- model checks
@pytest.mark.parametrize("family", FAMILY_NAMES)
@pytest.mark.parametrize("entry", [pytest.param(e, id=e.name) for e in entries()])
def test_model_families(entry, family):
    """Each entry accepts the model families it declares and refuses the others with
    ``NotImplementedError`` naming what it samples (``GEM``), before anything is compiled."""
    kernel = entry.build(FAMILIES[family]())
    y = np.array([0, 1, 1, 0])
    if family in entry.families:
        assert kernel.update_plan(y)
    else:
        with pytest.raises(NotImplementedError, match="GEM"):
            kernel.update_plan(y)


# ---------------------------------------------------------------------------- no host callback
@pytest.mark.parametrize("cls", [pytest.param(c, id=c.__name__) for c in dict.fromkeys(e.cls for e in entries())])
def test_no_host_callback_in_the_sweep(cls):
    """The warnings of a run travel as counters in the state (``HDPState.events``), checked on the
    host when the run returns: no kernel's sweep holds a host callback (a program with one is never
    written to JAX's persistent compilation cache, so every new kernel, process and test would
    compile NumPyro's loop again).  Hyperpriors (the exact concentration updates) and a prior
    start whose ``MarkovChain`` draw would warn on its own are in the model."""

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
        hmm = nh.StickyHDPHMM(gamma, 2.0, 1.0, nh.emissions.Categorical(2, 1.0), max_states=4)
        nh.sample("y", hmm, obs=y)

    y = np.array([0, 0, 1, 1, 0, 1])
    assert callbacks_in_sweep(cls(model), y) == 0
    if cls is nh.infer.WeakLimitGibbs:  # negative control: a sweep that warns through a callback is caught
        class Calling(cls):
            def sample(self, state, model_args, model_kwargs):
                state = super().sample(state, model_args, model_kwargs)
                jax.debug.callback(lambda n: None, state.num_states)
                return state

        assert callbacks_in_sweep(Calling(model), y) > 0
