"""Duration families of the hidden semi-Markov models: one protocol (:class:`DurationFamily`).

=====================  ==============================================  =====================
family                 law of a duration ``d in {1, 2, ...}``          parameters (sites)
=====================  ==============================================  =====================
``Geometric``          ``(1 - stay) stay^(d-1)``, Beta prior           ``stay``
``Poisson``            ``d - 1 ~ Poisson(rate)``, Gamma prior          ``rate``
``NegativeBinomial``   ``d - 1 ~ NB(r, p)``, finite or Gamma prior      ``r``, ``p``
                       on ``r``, Beta prior on ``p``
=====================  ==============================================  =====================

``Custom(fn, num_states)``: any discrete NumPyro distribution over the duration itself, ``fn: k ->
Distribution`` built from the user's own sites (updated by the kernels' inner NUTS kernel).

Every family is the untruncated law; the HSMM model truncates it to ``{1, ..., max_duration}``
and renormalizes, or keeps it with ``max_duration=None`` (then with its survival function
``log_survival``, and, for the negative binomial with integer ``r`` and the geometric, its chain
of phases ``phase_embedding``; :mod:`numpyro_hdphmm.durations.base`).  The model declares the site
``f"{name}_duration_{p}"`` for each parameter ``p``.
"""

from numpyro_hdphmm.durations.base import DurationFamily, DurationStatistics, duration_site, duration_statistics
from numpyro_hdphmm.durations.geometric import Geometric
from numpyro_hdphmm.durations.poisson import Poisson
from numpyro_hdphmm.durations.negative_binomial import FiniteDiscrete, NegativeBinomial
from numpyro_hdphmm.durations.custom import Custom

__all__ = [
    "DurationFamily",
    "DurationStatistics",
    "duration_site",
    "duration_statistics",
    "Geometric",
    "Poisson",
    "NegativeBinomial",
    "FiniteDiscrete",
    "Custom",
]
