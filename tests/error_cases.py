"""Malformed inputs and the errors they get: the single list behind ``tests/test_errors.py`` and
``docs/errors.md``.

Each case is ``(where, what, argument, call)``: ``call()`` must raise a ``ValueError`` whose
message names ``argument`` (in backticks).  ``tests/test_errors.py`` runs every case; the page
``docs/errors.md`` is rendered from the same list with the messages the calls produce, and a test
fails when the page is out of date.  Regenerate it with::

    PYTHONPATH=. python tests/error_cases.py

Messages are produced with ``jax_enable_x64`` on (as in the test suite); the cases about float32
arithmetic switch it off inside the call.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, List, NamedTuple

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import numpyro.infer.reparam
from numpyro import handlers

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em


class Case(NamedTuple):
    where: str  #: the function or constructor that receives the input
    what: str  #: the malformed input, in words
    argument: str  #: the argument the message must name
    call: Callable[[], object]
    error: type = ValueError  #: NotImplementedError for a NumPyro handler the kernels refuse


# ------------------------------------------------------------------------------ fixtures
def _niw(dim=1):
    return em.GaussianNIW(np.zeros(dim), 1.0, dim + 2.0, np.eye(dim))


def _ar(order=2):
    m = order + 1
    return em.AutoRegressive(order, np.zeros((1, m)), np.eye(m), 3.0, np.eye(1))


def _sample(emission, obs, lengths=None, hmm=None):
    """Run ``nh.sample("y", hmm, obs, lengths)`` in a seeded model (the checks run before any
    compilation, so a failing case costs microseconds)."""

    def model():
        h = hmm if hmm is not None else nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=4)
        nh.sample("y", h, obs=obs, lengths=lengths)

    return handlers.seed(model, 0)()


def _float32(fn):
    def call():
        with jax.enable_x64(False):
            return fn()

    return call


_RNG = np.random.default_rng(0)
_Y1 = _RNG.normal(size=(50, 1))  # one sequence, D = 1
_Y2 = _RNG.normal(size=(50, 2))
_COUNTS = _RNG.integers(0, 3, size=50)


def _batched_gap():
    y = np.stack([_Y1, _Y1])
    y[1] = np.nan
    return y


def _float32_outlier():
    y = _Y1.astype(np.float32).copy()
    y[10, 0] = 1e30
    return y


def _kernel_plan(model, *args, kernel=None):
    """The update plan of ``model`` (discovery only: nothing is compiled)."""
    return (kernel or nh.infer.WeakLimitGibbs)(model).update_plan(*args)


def _hdp_model(y):
    nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 5.0, em.GaussianNIW.weakly_informative(y), max_states=4), obs=y)


def _enumerated():
    """NumPyro's discrete enumeration of the HDP-HMM model (funsor, a test dependency)."""
    from numpyro.contrib.funsor import infer_discrete

    return infer_discrete(_hdp_model, first_available_dim=-2, rng_key=jax.random.key(0))(_Y1)


def _run_with_init(values):
    from numpyro.infer import MCMC, init_to_value

    kernel = nh.infer.WeakLimitGibbs(_hdp_model, init_strategy=init_to_value(values=values))
    MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False).run(jax.random.key(0), _Y1)


class _Deterministic(numpyro.infer.reparam.Reparam):
    def __call__(self, name, fn, obs):
        return None, numpyro.sample(f"{name}_base", fn)


def _in_plate():
    with numpyro.plate("groups", 2):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, em.Poisson(), max_states=4), obs=_COUNTS)


_UNIT = np.stack([np.cos(_Y1[:, 0]), np.sin(_Y1[:, 0])], -1)


# --------------------------------------------------------------------------------- cases
CASES: List[Case] = [
    # ---- data passed to nh.sample (shapes, layout, dtypes)
    Case("nh.sample", "a list of strings as observations", "obs", lambda: _sample(em.Categorical(3), ["a", "b", "a"])),
    Case("nh.sample", "complex observations", "obs", lambda: _sample(_niw(), _Y1 * (1 + 1j))),
    Case("nh.sample", "a ragged list of sequences", "obs", lambda: _sample(em.Categorical(3), [[0, 1, 2], [0, 1]])),
    Case("nh.sample", "Categorical data as a (T, 1) column (`df[['col']].values`)", "obs",
         lambda: _sample(em.Categorical(3), _COUNTS[:, None])),
    Case("nh.sample", "Poisson counts as a (T, 1) column", "obs", lambda: _sample(em.Poisson(), _COUNTS[:, None])),
    Case("nh.sample", "one-dimensional Gaussian data without the event axis (T,)", "obs", lambda: _sample(_niw(), _Y1[:, 0])),
    Case("nh.sample", "two-dimensional Gaussian data transposed, (D, T)", "obs", lambda: _sample(_niw(2), _Y2.T)),
    Case("nh.sample", "observations with too many axes", "obs", lambda: _sample(_niw(), _Y1[None, None])),
    Case("nh.sample", "no time steps", "obs", lambda: _sample(_niw(), np.zeros((0, 1)))),
    Case("nh.sample", "a sequence whose every value is NaN", "obs", lambda: _sample(_niw(), np.full((20, 1), np.nan))),
    Case("nh.sample", "an all-NaN sequence among several", "obs", lambda: _sample(_niw(), _batched_gap(), [50, 50])),
    Case("nh.sample", "infinite observations", "obs", lambda: _sample(_niw(), np.vstack([_Y1, [[np.inf]]]))),
    Case("nh.sample", "a category outside `[0, num_categories)`", "obs", lambda: _sample(em.Categorical(3), np.array([0, 1, 3]))),
    Case("nh.sample", "non-integer categories", "obs", lambda: _sample(em.Categorical(3), np.array([0.0, 1.5, 2.0]))),
    Case("nh.sample", "negative Poisson counts", "obs", lambda: _sample(em.Poisson(), np.array([0, -1, 2]))),
    Case("nh.sample", "von Mises-Fisher data that are not unit vectors", "obs",
         lambda: _sample(em.VonMisesFisher(1.0, np.array([1.0, 0.0])), np.ones((5, 2)))),
    Case("nh.sample", "sequences shorter than the autoregressive order + 1", "obs",
         lambda: _sample(_ar(2), np.zeros((2, 10, 1)), [10, 2])),
    Case("nh.sample", "`lengths` of the wrong shape", "lengths", lambda: _sample(_niw(), np.stack([_Y1, _Y1]), [50])),
    Case("nh.sample", "`lengths` longer than T", "lengths", lambda: _sample(_niw(), np.stack([_Y1, _Y1]), [50, 51])),
    Case("nh.sample", "a zero length", "lengths", lambda: _sample(_niw(), np.stack([_Y1, _Y1]), [50, 0])),
    Case("nh.sample", "float lengths", "lengths", lambda: _sample(_niw(), np.stack([_Y1, _Y1]), [50.0, 20.0])),
    Case("nh.sample", "`lengths` with a single sequence", "lengths", lambda: _sample(_niw(), _Y1, [50])),
    Case("nh.sample", "`hmm` that is not an HDP-HMM", "hmm",
         lambda: _sample(None, _Y1, hmm=nh.HiddenMarkovModel(np.ones(2) / 2, np.eye(2), dist.Normal(np.zeros(2), 1.0)))),
    Case("nh.sample", "an HDP-HMM with batched hyperparameters", "hmm",
         lambda: _sample(None, _Y1, hmm=nh.StickyHDPHMM(np.ones(2), 1.0, 1.0, _niw(), max_states=4))),
    # ---- numerics: values the float type cannot hold
    Case("nh.sample", "one observation of 1e30 among N(0, 1) data, float32", "obs",
         _float32(lambda: _sample(_niw(), _float32_outlier()))),
    Case("nh.sample", "data at 1e5 with a prior centred at 0 and unit scale, float32", "obs",
         _float32(lambda: _sample(_niw(), (_Y1 + 1e5).astype(np.float32)))),
    Case("nh.sample", "Poisson counts whose total exceeds float32's range", "obs",
         _float32(lambda: _sample(em.Poisson(), np.full(10, 1e31)))),
    Case("GaussianNIW.weakly_informative", "the whole series scaled by 1e20, float32", "data",
         _float32(lambda: em.GaussianNIW.weakly_informative(_Y1 * 1e20))),
    Case("GaussianNIW.weakly_informative", "a spread of 1e-25, float32", "data",
         _float32(lambda: em.GaussianNIW.weakly_informative(_Y1 * 1e-25))),
    Case("AutoRegressive.weakly_informative", "the whole series scaled by 1e20, float32", "data",
         _float32(lambda: em.AutoRegressive.weakly_informative(_Y1 * 1e20))),
    # ---- data-scaled priors
    Case("GaussianNIW.weakly_informative", "all-NaN data", "data",
         lambda: em.GaussianNIW.weakly_informative(np.full((10, 2), np.nan))),
    Case("GaussianNIW.weakly_informative", "a single observed row", "data",
         lambda: em.GaussianNIW.weakly_informative(_Y2[:1])),
    Case("GaussianNIW.weakly_informative", "one-dimensional data without the event axis", "data",
         lambda: em.GaussianNIW.weakly_informative(_Y1[:, 0])),
    Case("GaussianNIW.weakly_informative", "`dim` together with data", "dim",
         lambda: em.GaussianNIW.weakly_informative(_Y2, dim=2)),
    Case("DiagonalGaussian.weakly_informative", "a dimension with one observed value", "data",
         lambda: em.DiagonalGaussian.weakly_informative(np.array([[1.0, np.nan], [2.0, 3.0], [0.5, np.nan]]))),
    Case("AutoRegressive.weakly_informative", "too few steps for the order", "data",
         lambda: em.AutoRegressive.weakly_informative(_Y1[:4], order=3)),
    Case("Poisson.weakly_informative", "all-NaN counts", "data", lambda: em.Poisson.weakly_informative(np.full(5, np.nan))),
    Case("Categorical.weakly_informative", "no data and no `num_categories`", "num_categories",
         lambda: em.Categorical.weakly_informative(None)),
    Case("VonMisesFisher.weakly_informative", "no data and no `dim`", "dim",
         lambda: em.VonMisesFisher.weakly_informative(None, concentration=2.0)),
    # ---- emission families' hyperparameters
    Case("GaussianNIW", "a scale matrix that is not positive definite", "scale",
         lambda: em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.array([[1.0, 2.0], [2.0, 1.0]]))),
    Case("GaussianNIW", "a scale matrix that is not symmetric", "scale",
         lambda: em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.array([[1.0, 0.5], [0.0, 1.0]]))),
    Case("GaussianNIW", "df <= D - 1", "df", lambda: em.GaussianNIW(np.zeros(2), 1.0, 1.0, np.eye(2))),
    Case("GaussianNIW", "mean_precision 0", "mean_precision", lambda: em.GaussianNIW(np.zeros(2), 0.0, 4.0, np.eye(2))),
    Case("GaussianNIW", "a scale matrix of the wrong size", "scale", lambda: em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(3))),
    Case("GaussianNIW", "a non-numeric prior mean", "loc", lambda: em.GaussianNIW(["a", "b"], 1.0, 4.0, np.eye(2))),
    Case("DiagonalGaussian", "a negative rate", "rate", lambda: em.DiagonalGaussian(np.zeros(2), rate=-1.0)),
    Case("DiagonalGaussian", "a zero concentration", "concentration", lambda: em.DiagonalGaussian(np.zeros(2), concentration=0.0)),
    Case("Categorical", "one category", "num_categories", lambda: em.Categorical(1)),
    Case("Categorical", "a concentration of the wrong length", "concentration", lambda: em.Categorical(3, np.ones(4))),
    Case("Poisson", "a zero concentration", "concentration", lambda: em.Poisson(0.0)),
    Case("Poisson", "an event shape with two axes", "event_shape", lambda: em.Poisson(event_shape=(2, 3))),
    Case("VonMisesFisher", "a vector of concentrations", "concentration", lambda: em.VonMisesFisher(np.ones(2), np.array([1.0, 0.0]))),
    Case("VonMisesFisher", "a prior mean that is not a unit vector", "prior_mean", lambda: em.VonMisesFisher(1.0, np.array([2.0, 0.0]))),
    Case("AutoRegressive", "order 0", "order", lambda: em.AutoRegressive(0, np.zeros((1, 1)), np.eye(1), 3.0, np.eye(1))),
    Case("AutoRegressive", "a column precision that is not positive definite", "col_precision",
         lambda: em.AutoRegressive(1, np.zeros((1, 2)), -np.eye(2), 3.0, np.eye(1))),
    Case("AutoRegressive", "a center without an intercept", "center",
         lambda: em.AutoRegressive(1, np.zeros((1, 1)), np.eye(1), 3.0, np.eye(1), affine=False, center=[1.0])),
    Case("DPMixture", "a zero concentration", "concentration", lambda: em.DPMixture(_niw(), 0.0, 3)),
    Case("DPMixture", "no components", "max_components", lambda: em.DPMixture(_niw(), 1.0, 0)),
    # ---- distributions and models
    Case("GEM", "a zero concentration", "concentration", lambda: nh.GEM(0.0, 5)),
    Case("GEM", "a float truncation", "truncation", lambda: nh.GEM(1.0, 5.0)),
    Case("HDPTransitions", "beta that is not a probability vector", "beta", lambda: nh.HDPTransitions(np.array([0.7, 0.7]), 1.0)),
    Case("HDPTransitions", "a negative alpha", "alpha", lambda: nh.HDPTransitions(np.ones(3) / 3, -1.0)),
    Case("MarkovChain", "num_steps 0", "num_steps", lambda: nh.MarkovChain(np.ones(2) / 2, np.eye(2), 0)),
    Case("MarkovChain", "initial probabilities that do not sum to one", "initial_probs",
         lambda: nh.MarkovChain(np.array([0.5, 0.6]), np.eye(2), 3)),
    Case("HiddenMarkovModel", "transition rows that do not sum to one", "transition_matrix",
         lambda: nh.HiddenMarkovModel(np.ones(2) / 2, np.full((2, 2), 0.7), dist.Normal(np.zeros(2), 1.0))),
    Case("StickyHDPHMM", "max_states 1", "max_states", lambda: nh.StickyHDPHMM(1.0, 1.0, 1.0, _niw(), max_states=1)),
    Case("StickyHDPHMM", "a negative kappa", "kappa", lambda: nh.StickyHDPHMM(1.0, 1.0, -1.0, _niw(), max_states=4)),
    Case("StickyHDPHMM", "an emission that is neither a family nor a callable", "emission",
         lambda: nh.StickyHDPHMM(1.0, 1.0, 1.0, "gaussian", max_states=4)),
    Case("HDPHMM", "an infinite gamma", "gamma", lambda: nh.HDPHMM(np.inf, 1.0, _niw(), max_states=4)),
    Case("HDPHSMM", "`max_duration=None` with a custom duration law whose support reaches below 0", "duration",
         lambda: nh.HDPHSMM(1.0, 1.0, lambda k: dist.DiscreteUniform(-2 * np.ones(4), 5), _niw(), max_states=4,
                            max_duration=None)),
    # ---- hostile inputs, round 3: precision, integer range, ambiguous layouts, states given, traced data
    Case("nh.sample", "Poisson counts near 1e9, float32 (two regimes 6 sd apart would be merged)", "obs",
         _float32(lambda: _sample(em.Poisson(), np.repeat([1e9, 1e9 + 2e5], 25)))),
    Case("nh.sample", "Poisson counts whose total the collapsed samplers' normalizers cannot resolve, float32", "obs",
         _float32(lambda: _sample(em.Poisson(), np.full(100, 1e5)))),
    Case("nh.sample", "von Mises-Fisher data with a known concentration of 1e7, float32", "obs",
         _float32(lambda: _sample(em.VonMisesFisher(1e7, np.array([1.0, 0.0])), _UNIT))),
    Case("nh.sample", "a (T, 2) count matrix with a scalar-event family (T sequences of 2 steps?)", "obs",
         lambda: _sample(em.Poisson(), np.stack([_COUNTS, _COUNTS], -1))),
    Case("WeakLimitGibbs (any kernel)", "int64 data beyond int32's range as a model argument, float32", "model_args[0]",
         _float32(lambda: _kernel_plan(_hdp_model, (3_000_000_000 + np.arange(50)[:, None]).astype(np.int64)))),
    Case("nh.sample", "states of the wrong shape (a `post_warmup_state` resumed on other data, `init_to_value`)",
         "y_states", lambda: handlers.seed(handlers.substitute(_hdp_model, data={"y_states": np.zeros(7, int)}), 0)(_Y1)),
    Case("MCMC (any kernel)", "`init_to_value` states that are not integers", "init_params['y_states']",
         lambda: _run_with_init({"y_states": np.full(50, 0.5)})),
    Case("Categorical.weakly_informative", "traced data (`jit_model_args=True`, `CollapsedSVI`, `vmap`) without `num_categories`",
         "num_categories", lambda: jax.jit(em.Categorical.weakly_informative)(_COUNTS)),
    # ---- replica exchange
    Case("WeakLimitGibbs (tempering)", "`tempering=1` (one rung: nothing to exchange with)", "tempering",
         lambda: nh.infer.WeakLimitGibbs(_hdp_model, tempering=1)),
    Case("WeakLimitGibbs (tempering)", "a ladder of inverse temperatures that does not end at 1", "tempering",
         lambda: nh.infer.WeakLimitGibbs(_hdp_model, tempering=[0.0, 0.5, 0.9])),
    Case("nh.log_evidence", "the extra fields of a run without `tempering=`", "source",
         lambda: nh.log_evidence({"num_states": np.ones(10)})),
    # ---- NumPyro handlers the kernels cannot honour (NotImplementedError)
    Case("WeakLimitGibbs (any kernel, CollapsedSVI)", "`handlers.scale(model, 1e-3)`", "numpyro.handlers.scale",
         lambda: _kernel_plan(handlers.scale(_hdp_model, 1e-3), _Y1), NotImplementedError),
    Case("WeakLimitGibbs (any kernel, CollapsedSVI)", "`handlers.mask(model, mask=False)`", "numpyro.handlers.mask",
         lambda: _kernel_plan(handlers.mask(_hdp_model, mask=False), _Y1), NotImplementedError),
    Case("WeakLimitGibbs (any kernel, CollapsedSVI)", "`handlers.condition` on the states (a known segmentation)",
         "numpyro.handlers.condition",
         lambda: _kernel_plan(handlers.condition(_hdp_model, data={"y_states": np.zeros(50, int)}), _Y1),
         NotImplementedError),
    Case("WeakLimitGibbs (any kernel, CollapsedSVI)", "`handlers.block` hiding an HDP-HMM site", "numpyro.handlers.block",
         lambda: _kernel_plan(handlers.block(_hdp_model, hide=["y_trans"]), _Y1), NotImplementedError),
    Case("WeakLimitGibbs (any kernel, CollapsedSVI)", "`handlers.reparam` making an HDP-HMM site deterministic",
         "numpyro.handlers.reparam",
         lambda: _kernel_plan(handlers.reparam(_hdp_model, config={"y_mu": _Deterministic()}), _Y1),
         NotImplementedError),
    Case("nh.sample", "`nh.sample` inside a `numpyro.plate`", "numpyro.plate",
         lambda: handlers.seed(_in_plate, 0)(), NotImplementedError),
    Case("nh.sample", "NumPyro's discrete enumeration (`infer_discrete`, `Predictive(..., infer_discrete=True)`)",
         "infer_discrete", _enumerated, NotImplementedError),
]


# ----------------------------------------------------------------------------- the page
def message(case: Case) -> str:
    """The message of the error ``case.call()`` raises (prefixed with the error's type unless a
    ``ValueError``; AssertionError if it raises nothing)."""
    try:
        case.call()
    except case.error as e:
        return str(e) if case.error is ValueError else f"{case.error.__name__}: {e}"
    raise AssertionError(f"{case.where}: {case.what}: no {case.error.__name__} raised")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The Markdown page ``docs/errors.md``."""
    lines = [
        "# Errors: malformed inputs and what they get",
        "",
        "Generated from `tests/error_cases.py` by `PYTHONPATH=. python tests/error_cases.py`; "
        "`tests/test_errors.py` runs every case and fails when this page is out of date. Every "
        "check runs on concrete values before any compilation (inside `jit` only the shape checks "
        "run) and raises a `ValueError` that names the argument; a NumPyro effect handler that the kernels cannot "
        "honour raises a `NotImplementedError` that names the handler and what to do instead. Warnings of a run that works "
        "(capacity, divergences, non-finite values), each with its cause and remedy: {doc}`warnings`.",
        "",
        f"{len(CASES)} cases.",
        "",
        "| # | function | input | argument | message |",
        "|---|---|---|---|---|",
    ]
    for i, case in enumerate(CASES, 1):
        lines.append(f"| {i} | `{case.where}` | {_cell(case.what)} | `{case.argument}` | {_cell(message(case))} |")
    return "\n".join(lines) + "\n"


DOC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "errors.md")


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    numpyro.set_platform("cpu")
    text = render()
    with open(DOC_PATH, "w") as fh:
        fh.write(text)
    print(f"wrote {os.path.normpath(DOC_PATH)} ({len(CASES)} cases)", file=sys.stderr)
