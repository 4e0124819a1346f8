r"""Diagnostics of HDP-HMM posteriors, by purpose (``numpyro_hdphmm.diagnostics``):

* :mod:`~numpyro_hdphmm.results.diagnostics.labellings`: label-invariant comparisons of state
  sequences (:func:`relabel`, :func:`hamming_distance`, :func:`mutual_information`,
  :func:`adjusted_rand_index`, :func:`adjusted_mutual_information`) and summaries of draws
  (:func:`coassignment_matrix`, :func:`num_states`), host NumPy/SciPy;
* :mod:`~numpyro_hdphmm.results.diagnostics.heldout`: the held-out predictive log-likelihood
  of posterior draws (:func:`predictive_log_likelihood`, :class:`PredictiveLogLikelihood`), JAX;
* :mod:`~numpyro_hdphmm.results.diagnostics.plotting`: a sequence drawn with its segmentation
  (:func:`plot_segmentation`).

Conventions: a labelling is an integer array ``(..., T)`` (leading axes are draws or other
batch axes); negative entries (``-1``, the padding of :func:`numpyro_hdphmm.datasets.load_mocap6`)
mark steps that carry no label and are left out of every count.
"""

from numpyro_hdphmm.results.diagnostics.heldout import PredictiveLogLikelihood, predictive_log_likelihood
from numpyro_hdphmm.results.diagnostics.labellings import (
    adjusted_mutual_information,
    adjusted_rand_index,
    coassignment_matrix,
    hamming_distance,
    mutual_information,
    num_states,
    relabel,
)
from numpyro_hdphmm.results.diagnostics.plotting import plot_duration_posterior, plot_segmentation

__all__ = [
    "relabel",
    "hamming_distance",
    "mutual_information",
    "adjusted_rand_index",
    "adjusted_mutual_information",
    "coassignment_matrix",
    "num_states",
    "PredictiveLogLikelihood",
    "predictive_log_likelihood",
    "plot_duration_posterior",
    "plot_segmentation",
]
