"""numpyro-hdphmm: Bayesian nonparametric hidden Markov models for NumPyro.

The (sticky) HDP-HMM as NumPyro distributions (:class:`StickyHDPHMM`, :class:`HDPHMM`) whose
latent structure :func:`sample` declares as explicit sites of a user's model, the parts as
distributions of their own (:class:`GEM`, :class:`HDPTransitions`, :class:`MarkovChain`), a
marginal :class:`HiddenMarkovModel` for NUTS/SVI, and conjugate emission families in
:mod:`numpyro_hdphmm.emissions`.
"""

from numpyro_hdphmm import datasets, diagnostics, emissions, infer
from numpyro_hdphmm.distributions import (
    GEM,
    HDPHMM,
    EmissionLikelihood,
    HDPTransitions,
    HiddenMarkovModel,
    MarkovChain,
    StickyHDPHMM,
    WeakLimitBeta,
)
from numpyro_hdphmm.arviz import to_inference_data
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
    "sample",
    "to_inference_data",
]
