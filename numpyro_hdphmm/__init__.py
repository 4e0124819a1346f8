"""numpyro-hdphmm: Bayesian nonparametric hidden Markov models for NumPyro.

The (sticky) HDP-HMM as NumPyro distributions (:class:`StickyHDPHMM`, :class:`HDPHMM`) whose
latent structure :func:`sample` declares as explicit sites of a user's model, the parts as
distributions of their own (:class:`GEM`, :class:`HDPTransitions`, :class:`MarkovChain`), the explicit-duration HDP-HSMM
(:class:`HDPHSMM`, state sequences :class:`SemiMarkovChain`, duration laws in
:mod:`numpyro_hdphmm.durations`), the switching linear dynamical system :class:`HDPSLDS` (observed
through :class:`LinearGaussianObservation`), a
marginal :class:`HiddenMarkovModel` for NUTS/SVI, and conjugate emission families in
:mod:`numpyro_hdphmm.emissions`.  After sampling (the subpackage :mod:`numpyro_hdphmm.results`,
whose names are also attributes here): state posteriors from the draws (:func:`viterbi`,
:func:`smooth`, :func:`posterior_state_marginals`, :func:`marginal_log_likelihood`), label
switching undone (:func:`relabel_samples`), the Bayes point estimate of the segmentation
(:func:`point_segmentation`), forecasts (:func:`forecast`), ArviZ conversion
(:func:`to_inference_data`) and diagnostics (:mod:`numpyro_hdphmm.results.diagnostics`).
"""

from numpyro_hdphmm import datasets, durations, emissions, infer, models, results
from numpyro_hdphmm.distributions import (
    GEM,
    EmissionLikelihood,
    HDPTransitions,
    HiddenMarkovModel,
    MarkovChain,
    WeakLimitBeta,
)
from numpyro_hdphmm.models.hmm import HDPHMM, StickyHDPHMM
from numpyro_hdphmm.models.hsmm import HDPHSMM, SemiMarkovChain
from numpyro_hdphmm.models.observation import LinearGaussianObservation
from numpyro_hdphmm.models.slds import HDPSLDS
from numpyro_hdphmm.primitives import sample
from numpyro_hdphmm.results import (
    diagnostics,
    duration_posterior,
    dynamics_summary,
    forecast,
    labels,
    log_evidence,
    marginal_log_likelihood,
    point_segmentation,
    posterior,
    posterior_state_marginals,
    relabel_samples,
    segments_table,
    smooth,
    to_inference_data,
    viterbi,
)

__version__ = "0.1.0"

__all__ = [
    "GEM",
    "HDPHMM",
    "HDPHSMM",
    "HDPSLDS",
    "EmissionLikelihood",
    "LinearGaussianObservation",
    "HDPTransitions",
    "HiddenMarkovModel",
    "MarkovChain",
    "SemiMarkovChain",
    "StickyHDPHMM",
    "WeakLimitBeta",
    "datasets",
    "diagnostics",
    "duration_posterior",
    "durations",
    "dynamics_summary",
    "emissions",
    "forecast",
    "infer",
    "labels",
    "log_evidence",
    "models",
    "marginal_log_likelihood",
    "point_segmentation",
    "posterior",
    "posterior_state_marginals",
    "relabel_samples",
    "results",
    "sample",
    "segments_table",
    "smooth",
    "to_inference_data",
    "viterbi",
]
