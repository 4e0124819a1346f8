r"""What to do with posterior draws of an HDP-HMM, by purpose.

* :mod:`~numpyro_hdphmm.results.posterior`: the finite HMM of each draw and its state
  posteriors (:func:`viterbi`, :func:`smooth`, :func:`posterior_state_marginals`,
  :func:`marginal_log_likelihood`);
* :mod:`~numpyro_hdphmm.results.labels`: label switching undone (:func:`relabel_samples`), the
  Bayes point estimate of the segmentation (:func:`point_segmentation`), per-state summaries;
* :mod:`~numpyro_hdphmm.results.segments`: the table of segments of state sequences
  (:func:`segments_table`) and the posterior of each state's duration law
  (:func:`duration_posterior`);
* :mod:`~numpyro_hdphmm.results.predictive`: forecasts past the end of the data
  (:func:`forecast`);
* :mod:`~numpyro_hdphmm.results.dynamics`: each mode's linear dynamics of an HDP-SLDS or AR-HMM
  (:func:`dynamics_summary`: eigenvalues, fixed points, occupancy);
* :mod:`~numpyro_hdphmm.results.evidence`: the marginal likelihood ``log p(y)`` of a tempered run
  by stepping stones (:func:`log_evidence`);
* :mod:`~numpyro_hdphmm.results.arviz`: ArviZ conversion (:func:`to_inference_data`);
* :mod:`~numpyro_hdphmm.results.diagnostics`: label-invariant comparisons of segmentations,
  the held-out predictive log-likelihood and a segmentation plot.

Every name here is also an attribute of :mod:`numpyro_hdphmm` (``nh.viterbi``,
``nh.diagnostics``, ``nh.labels``, ...).
"""

from numpyro_hdphmm.results import arviz, diagnostics, dynamics, evidence, labels, posterior, predictive, segments
from numpyro_hdphmm.results.dynamics import dynamics_summary
from numpyro_hdphmm.results.evidence import log_evidence
from numpyro_hdphmm.results.arviz import to_inference_data
from numpyro_hdphmm.results.labels import point_segmentation, relabel_samples
from numpyro_hdphmm.results.posterior import marginal_log_likelihood, posterior_state_marginals, smooth, viterbi
from numpyro_hdphmm.results.predictive import forecast
from numpyro_hdphmm.results.segments import duration_posterior, segments_table

__all__ = [
    "arviz",
    "diagnostics",
    "duration_posterior",
    "dynamics",
    "dynamics_summary",
    "evidence",
    "forecast",
    "labels",
    "log_evidence",
    "marginal_log_likelihood",
    "point_segmentation",
    "posterior",
    "posterior_state_marginals",
    "predictive",
    "relabel_samples",
    "segments",
    "segments_table",
    "smooth",
    "to_inference_data",
    "viterbi",
]
