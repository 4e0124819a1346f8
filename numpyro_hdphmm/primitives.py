"""``numpyro_hdphmm.sample``: declare a model class (an HDP-HMM) inside a NumPyro model as explicit sites."""

from __future__ import annotations

import numpyro

from numpyro_hdphmm.models import MODEL_CLASSES
from numpyro_hdphmm.models.base import ModelClass

__all__ = ["sample"]


def _check_not_enumerated(name: str) -> None:
    """Refuse NumPyro's funsor-based enumeration (``infer_discrete``, ``Predictive(...,
    infer_discrete=True)``, ``TraceEnum_ELBO``), recognized by its handlers on NumPyro's handler
    stack: it cannot sum or sample the HDP-HMM's state sequence and otherwise fails inside its
    plates with an unrelated ``KeyError`` or ``AssertionError``."""
    for handler in getattr(numpyro.primitives, "_PYRO_STACK", ()):
        if type(handler).__module__.startswith("numpyro.contrib.funsor"):
            raise NotImplementedError(
                f"numpyro_hdphmm.sample('{name}') runs under NumPyro's discrete enumeration (`infer_discrete`, "
                "`Predictive(..., infer_discrete=True)` or `TraceEnum_ELBO`), which cannot enumerate the HDP-HMM's state "
                f"sequence '{name}_states'. Its posterior draws come from the package's kernels "
                "(MCMC(nh.infer.WeakLimitGibbs(model)); Predictive(model, mcmc.get_samples()) keeps them); the most "
                "probable path of each draw is nh.viterbi(model, samples, y), the per-step state probabilities "
                "nh.smooth(model, samples, y)."
            )


def sample(name: str, hmm: ModelClass, obs=None, lengths=None):
    r"""Declare the model ``hmm`` (a model class of :mod:`numpyro_hdphmm.models`, e.g. a
    :class:`~numpyro_hdphmm.StickyHDPHMM`) in a NumPyro model, with its latent structure as sites.

    Mirrors ``numpyro.sample(name, fn, obs=obs)``; the sites are those of ``hmm.site_roles()``,
    declared by ``hmm.declare(name, obs, lengths)``.  For the sticky HDP-HMM, in order:

    ============================  ==========================================  =====================
    site                          distribution                                shape
    ============================  ==========================================  =====================
    ``{name}_beta``               ``GEM(gamma, K)``                           ``(K+1,)``
    ``{name}_trans``              ``HDPTransitions(beta, alpha, kappa)``      ``(K+1, K+1)``
    ``{name}_{p}`` per parameter  the emission family's prior                 ``(K, ...)``
    ``{name}_states``             ``MarkovChain(trans[K], trans[:K], T)``     ``(T,)`` / ``(N, T)``
    ``{name}`` (observed)         ``EmissionLikelihood``, pointwise in time   ``(T, ...)`` / ``(N, T, ...)``
    ============================  ==========================================  =====================

    with ``K = hmm.max_states``.  ``obs`` is one sequence ``(T, *event)`` or several
    ``(N, T, *event)`` padded to a common ``T`` with ``lengths (N,)``; NaN marks a missing
    observation (it contributes nothing to the likelihood and is not imputed).  ``obs`` may be a
    JAX or NumPy array of any boolean, integer or floating dtype, a (nested) Python list, or a
    pandas ``Series``/``DataFrame`` (pandas is not required); ``lengths`` likewise.  A shape
    that could mean two things is refused rather than guessed: ``(N, 1, *event)`` (e.g.
    ``df[["col"]].values`` for a Categorical or Poisson family) would be ``N`` sequences of one
    step.  Every check runs here, on concrete data, before any compilation (see
    ``docs/errors.md``; :mod:`numpyro_hdphmm.models.layout`).

    Without ``obs`` (prior predictive, ``Predictive``) a sequence of ``hmm.num_steps`` steps is
    drawn, or of ``max(lengths)`` steps with ``lengths``, or of
    :data:`~numpyro_hdphmm.models.DEFAULT_NUM_STEPS` (100) steps when neither is given (a model
    written for data, run as ``model(None)``).  Given posterior draws of ``{name}_states``
    (``Predictive(model, samples)(key, None, ...)``), the number of sequences and of steps are
    those of the draws (``(T,)`` one sequence, ``(N, T)`` several, padded steps ``t >= lengths[n]``
    drawn too); ``lengths`` or ``num_steps`` that disagree with the draws raise a ``ValueError``
    naming them.  The time axis is a plate named ``"time"`` (sequences: ``"sequence"``) so that
    ArviZ labels the dimensions.  Every site carries ``infer={"hdphmm_role": ...}`` so kernels can
    find them.

    Returns the observations (``obs``, or the draw).
    """
    if not isinstance(hmm, ModelClass):
        classes = ", ".join(c.__name__ for c in MODEL_CLASSES.values())
        raise ValueError(f"`hmm` must be a model class of numpyro_hdphmm.models ({classes}, HDPHMM), "
                         f"got {type(hmm).__name__}.")
    _check_not_enumerated(name)
    return hmm.declare(name, obs, lengths)
