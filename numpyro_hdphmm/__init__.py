"""numpyro-hdphmm: Bayesian nonparametric hidden Markov models for NumPyro.

The (sticky) HDP-HMM as NumPyro distributions (:class:`StickyHDPHMM`, :class:`HDPHMM`) whose
latent structure :func:`sample` declares as explicit sites of a user's model, the parts as
distributions of their own (:class:`GEM`, :class:`HDPTransitions`, :class:`MarkovChain`), a
marginal :class:`HiddenMarkovModel` for NUTS/SVI, and conjugate emission families in
:mod:`numpyro_hdphmm.emissions`.  After sampling: state posteriors from the draws
(:func:`viterbi`, :func:`smooth`, :func:`posterior_state_marginals`,
:func:`marginal_log_likelihood`), label switching undone (:func:`relabel_samples`), the Bayes
point estimate of the segmentation (:func:`point_segmentation`), forecasts (:func:`forecast`) and
ArviZ conversion (:func:`to_inference_data`).
"""

from numpyro_hdphmm import datasets, diagnostics, emissions, infer, labels, models, posterior
from numpyro_hdphmm.distributions import (
    GEM,
    EmissionLikelihood,
    HDPTransitions,
    HiddenMarkovModel,
    MarkovChain,
    WeakLimitBeta,
)
from numpyro_hdphmm.models import HDPHMM, StickyHDPHMM
from numpyro_hdphmm.arviz import to_inference_data
from numpyro_hdphmm.labels import point_segmentation, relabel_samples
from numpyro_hdphmm.posterior import marginal_log_likelihood, posterior_state_marginals, smooth, viterbi
from numpyro_hdphmm.predictive import forecast
from numpyro_hdphmm.primitives import sample

__version__ = "0.1.0"

__all__ = [
    "GEM",
    "HDPHMM",
    "EmissionLikelihood",
    "HDPTransitions",
    "HiddenMarkovModel",
    "MarkovChain",
    "StickyHDPHMM",
    "WeakLimitBeta",
    "datasets",
    "diagnostics",
    "emissions",
    "forecast",
    "infer",
    "labels",
    "models",
    "marginal_log_likelihood",
    "point_segmentation",
    "posterior",
    "posterior_state_marginals",
    "relabel_samples",
    "sample",
    "smooth",
    "to_inference_data",
    "viterbi",
]
