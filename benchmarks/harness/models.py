"""The benchmark suite's models and data sets, each defined once.

Every script takes its models from here.  A *model* is a NumPyro model function ``model(y, ...)``
built by a factory; a *problem* (:class:`Problem`) bundles a model with its data, the capacity
and the true states (when the data have them).  :data:`PROBLEMS` maps the names the scripts accept
on their command lines to the problem factories.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

#: the package's MCMC kernels, in the order of every table
KERNELS = ("WeakLimitGibbs", "DirectAssignmentGibbs", "BeamSampler", "RCDSampler", "PGAS")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def kernel(name: str, model: Callable, **options):
    """``nh.infer.<name>(model, **options)``; ``name`` one of :data:`KERNELS`."""
    import numpyro_hdphmm as nh

    if name not in KERNELS:
        raise ValueError(f"`name` must be one of {KERNELS}, got {name!r}.")
    return getattr(nh.infer, name)(model, **options)


# ------------------------------------------------------------------------------ models
def readme_model(max_states: int = 20, sticky: bool = True):
    """The README's model (Fox et al.'s experiment A): Gamma priors on gamma, alpha (and kappa when
    ``sticky``), ``GaussianNIW.weakly_informative`` emissions; ``sticky=False`` is ``nh.HDPHMM``."""
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
        emission = nh.emissions.GaussianNIW.weakly_informative(y)
        if sticky:
            kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
            hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa, emission=emission, max_states=max_states)
        else:
            hmm = nh.HDPHMM(gamma=gamma, alpha=alpha, emission=emission, max_states=max_states)
        nh.sample("y", hmm, obs=y)

    return model


def fixed_model(max_states: int, mean_precision: float | None = None, alpha: float = 1.0, kappa: float = 10.0):
    """Sticky HDP-HMM with constant gamma = 1, ``alpha``, ``kappa`` and the data-scaled NIW prior
    (``mean_precision`` passed on to ``GaussianNIW.weakly_informative`` when given)."""
    import numpyro_hdphmm as nh

    def model(y):
        extra = {} if mean_precision is None else {"mean_precision": mean_precision}
        emission = nh.emissions.GaussianNIW.weakly_informative(y, **extra)
        nh.sample("y", nh.StickyHDPHMM(1.0, alpha, kappa, emission, max_states=max_states), obs=y)

    return model


def set_a_model(max_states: int):
    """The PGAS paper's synthetic set A model: a non-sticky iHMM, alpha ~ Gamma(4, 1), gamma ~
    Gamma(3, 6) (the beam toolbox's hyperpriors), precision nearly fixed at 4, mean ~ N(0, 2^2)."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
        alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
        emission = nh.emissions.DiagonalGaussian(jnp.zeros(1), 1.0 / 16.0, 1000.0, 250.0)
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=max_states), obs=y)

    return model


#: the HCRP emission prior's base concentration and the Gamma prior of its scale (RCD paper)
HCRP_B0, HCRP_SCALE_PRIOR = 1.0, (1.0, 1.0)


def alice_words_model(num_words: int, capacity: int, emission_prior: str = "dirichlet"):
    """The RCD paper's non-sticky HDP-HMM on words: ``(model, emission)``, gamma, alpha ~ Gamma(1, 1),
    ``Categorical(num_words, 0.1)`` emissions (``emission_prior="hcrp"``: the hierarchical
    categorical prior ``phi ~ Dir(HCRP_B0 / V)``, ``probs_k ~ Dir(s phi)``, ``s ~ Gamma(1, 1)``)."""
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    if emission_prior not in ("dirichlet", "hcrp"):
        raise ValueError(f"`emission_prior` must be 'dirichlet' or 'hcrp', got {emission_prior!r}.")
    emission = nh.emissions.Categorical(num_words, 0.1)

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
        family = emission
        if emission_prior == "hcrp":
            s = numpyro.sample("s", dist.Gamma(*HCRP_SCALE_PRIOR))
            family = nh.emissions.hierarchical_categorical("phi", num_words, s, HCRP_B0)
        nh.sample("y", nh.HDPHMM(gamma, alpha, family, max_states=capacity), obs=y)

    return model, emission


def alice_characters_model(concentration: float, capacity: int, num_symbols: int = 27):
    """The PGAS paper's iHMM on characters: ``(model, emission)``, gamma ~ Gamma(3, 6), alpha ~
    Gamma(4, 1), ``Categorical(num_symbols, concentration)`` emissions."""
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    emission = nh.emissions.Categorical(num_symbols, concentration)

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
        alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=capacity), obs=y)

    return model, emission


def example_module(name: str):
    """The module ``examples/<name>.py`` (the examples are the documentation of their models:
    the motion-capture AR-HMM is defined there once and loaded from there)."""
    path = os.path.join(REPO, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def autoregressive_start(values_only: bool):
    """Within the block, the data-driven start clusters autoregressive data on the values alone
    (``values_only``: the family default, the start before 2026-11-29) or on the family's own
    features (values, lag-one products, increments: ``AutoRegressive.clustering_features``); JAX's
    caches are cleared on entry and exit so that the start's programs are traced with them."""
    import jax

    from numpyro_hdphmm.emissions import AutoRegressive
    from numpyro_hdphmm.emissions.base import EmissionFamily

    own = AutoRegressive.__dict__["clustering_features"]
    AutoRegressive.clustering_features = EmissionFamily.clustering_features if values_only else own
    jax.clear_caches()
    try:
        yield
    finally:
        AutoRegressive.clustering_features = own
        jax.clear_caches()


# ------------------------------------------------------------------------------ data
def segments(T: int, num_segments: int = 10) -> np.ndarray:
    """``(T,)`` labels of ``num_segments`` equal blocks."""
    return np.minimum(np.arange(T) * num_segments // T, num_segments - 1)


def segmented_gaussian(T: int, D: int, num_segments: int = 10, seed: int = 0) -> np.ndarray:
    """``(T, D)`` float32: ``num_segments`` equal segments with well-separated means N(0, 5^2)
    plus unit noise (true labels: :func:`segments`)."""
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=5.0, size=(num_segments, D))
    return (means[segments(T, num_segments)] + rng.normal(size=(T, D))).astype(np.float32)


def five_regimes(T: int, seed: int = 0) -> np.ndarray:
    """``(T, 2)`` float32: runs of 200 steps drawn among 5 well-separated 2-D means."""
    rng = np.random.default_rng(seed)
    seg = np.repeat(rng.integers(0, 5, size=T // 200 + 1), 200)[:T]
    means = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0], [-6.0, 0.0], [0.0, -6.0]])
    return (means[seg] + rng.normal(size=(T, 2))).astype(np.float32)


def fox_a(T: int = 1000, seed: int = 0):
    """Fox et al.'s experiment A: ``(y (T, 1) float32, states (T,))``."""
    import numpyro_hdphmm as nh

    data = nh.datasets.fox_experiment_a(num_steps=T, seed=seed)
    return np.asarray(data.observations, np.float32), np.asarray(data.states)


def nested_regimes(num_sequences: int = 3, T: int = 400, contrast: float = 3.0, regime_length: int = 130,
                   flip: float = 0.4, seed: int = 0):
    """Multi-sequence AR(1) data whose stickiness the sequences identify only jointly, with two
    separated modes of ``kappa`` in the posterior: ``(y (N, T, 1) float64, sub-states (N, T))``.

    Three persistent regimes (AR coefficients 0, 0.7 and -0.7), each sequence moving to another
    regime every ``regime_length`` steps; inside a regime the dynamics switch quickly (each step
    with probability ``flip``) between two sub-states: the regime's coefficient minus ``0.25
    contrast`` with noise s.d. ``0.5 (1 + contrast)``, and plus ``0.25 contrast`` with noise s.d. 0.5
    (coefficients clipped to [-0.99, 0.99]).  A sticky
    HDP-AR-HMM explains the data either with a few persistent states (high ``kappa``) or with more
    states that switch every few steps (low ``kappa``); the sub-state labels are ``2 regime +
    sub``."""
    rng = np.random.default_rng(seed)
    centre = np.array([0.0, 0.7, -0.7])
    ys, labels = np.zeros((num_sequences, T)), np.zeros((num_sequences, T), int)
    for n in range(num_sequences):
        regime, sub, prev = rng.integers(3), 0, 0.0
        for t in range(T):
            if t > 0 and t % regime_length == 0:
                regime = (regime + 1 + rng.integers(2)) % 3
            if rng.random() < flip:
                sub = 1 - sub
            a = np.clip(centre[regime] + (0.25 if sub else -0.25) * contrast, -0.99, 0.99)
            prev = a * prev + 0.5 * (1.0 + contrast * (1 - sub)) * rng.normal()
            ys[n, t], labels[n, t] = prev, 2 * regime + sub
    return ys[..., None], labels


# ------------------------------------------------------------------------------ problems
@dataclass(frozen=True)
class Problem:
    """A model with its data: ``model(*args)``; ``truth`` the true states (or ``None``);
    ``hamming(z)`` the normalized Hamming distance of one chain's states to ``truth``."""

    name: str
    model: Callable
    args: tuple
    capacity: int
    T: int
    truth: Any = None
    hamming: Callable | None = None
    description: str = ""


def _hamming(truth):
    import numpyro_hdphmm as nh

    return lambda z: float(nh.diagnostics.hamming_distance(np.asarray(z)[None], truth)[0])


def readme_problem(T: int = 1000, capacity: int = 20, seed: int = 0) -> Problem:
    y, truth = fox_a(T, seed)
    return Problem("readme", readme_model(capacity), (y,), capacity, T, truth, _hamming(truth),
                   f"the README's model on Fox et al.'s experiment A, T = {T}, max_states = {capacity}")


def segments_problem(T: int = 1000, capacity: int = 30, D: int = 2, seed: int = 0) -> Problem:
    y = segmented_gaussian(T, D, seed=seed)
    truth = segments(T)
    return Problem("segments", fixed_model(capacity), (y,), capacity, T, truth, _hamming(truth),
                   f"{D}-D Gaussian, 10 well-separated segments, constant gamma = 1, alpha = 1, kappa = 10, "
                   f"T = {T}, capacity {capacity}")


def set_a_problem(T: int = 4000, capacity: int = 20, seed: int = 0) -> Problem:
    import numpyro_hdphmm as nh

    data = nh.datasets.pgas_set_a(num_steps=T, seed=seed)
    truth = np.asarray(data.states)
    return Problem("pgas_set_a", set_a_model(capacity), (np.asarray(data.observations, np.float32),), capacity, T,
                   truth, _hamming(truth), f"PGAS synthetic set A, T = {T}, capacity {capacity}")


def mocap_problem(capacity: int = 30) -> Problem:
    """The six motion-capture sequences with ``examples/mocap.py``'s AR(1) HDP-HMM."""
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    ex = example_module("mocap")
    data = nh.datasets.load_mocap6()
    lengths = np.asarray(data.lengths)
    y, _, _ = ex.standardize(data.observations, lengths)
    truth = ex.valid_frames(data.states, lengths)

    def hamming(z):
        return float(nh.diagnostics.hamming_distance(ex.valid_frames(np.asarray(z), lengths)[None], truth)[0])

    return Problem("mocap", ex.make_model(ex.emission_prior(y, lengths), capacity),
                   (y, jnp.asarray(lengths, jnp.int32)), capacity, int(lengths.sum()), truth, hamming,
                   f"motion capture, 6 sequences, AR(1) emissions, capacity {capacity}")


def alice_words_problem(num_words: int = 5000, capacity: int = 60, emission_prior: str = "dirichlet") -> Problem:
    import numpyro_hdphmm as nh

    alice = nh.datasets.load_alice()
    y = np.asarray(alice.tokens[:num_words])
    model, _ = alice_words_model(len(alice.vocabulary), capacity, emission_prior)
    return Problem("alice", model, (y,), capacity, len(y), None, None,
                   f"the first {num_words} words of Alice, capacity {capacity}")


def nested_regimes_model(y, capacity: int):
    """The sticky HDP-AR-HMM of :func:`nested_regimes_problem`: AR(1) emissions with the family's
    weakly informative prior, the README's Gamma hyperpriors, several sequences with ``lengths``."""
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    emission = nh.emissions.AutoRegressive.weakly_informative(y, order=1)

    def model(y, lengths):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
        kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
        hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa, emission=emission, max_states=capacity)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    return model


def nested_regimes_problem(contrast: float = 3.0, capacity: int = 20, seed: int = 0) -> Problem:
    y, labels = nested_regimes(contrast=contrast, seed=seed)
    lengths = np.full(y.shape[0], y.shape[1], np.int32)
    return Problem("nested_regimes", nested_regimes_model(y, capacity), (y, lengths), capacity, int(lengths.sum()),
                   labels, None, f"3 sequences x 400 steps, AR(1) regimes with fast inner switching, contrast {contrast}, "
                   f"capacity {capacity}")


#: name -> factory of a :class:`Problem` (keyword arguments: sizes)
PROBLEMS = {"readme": readme_problem, "fox_a": readme_problem, "segments": segments_problem,
            "pgas_set_a": set_a_problem, "mocap": mocap_problem, "alice": alice_words_problem,
            "nested_regimes": nested_regimes_problem}


def problem(name: str, **sizes) -> Problem:
    if name not in PROBLEMS:
        raise ValueError(f"`name` must be one of {sorted(PROBLEMS)}, got {name!r}.")
    return PROBLEMS[name](**sizes)
