"""Conjugate emission families: one protocol (:class:`EmissionFamily`), six families.

=====================  ==========================================  =====================
family                 prior                                       parameters (sites)
=====================  ==========================================  =====================
``GaussianNIW``        Normal-inverse-Wishart (full covariance)    ``mu``, ``cov``
``DiagonalGaussian``   Normal-Gamma per dimension                  ``mu``, ``precision``
``Categorical``        Dirichlet                                   ``probs``
``Poisson``            Gamma                                       ``rate``
``VonMisesFisher``     vMF on the mean direction (known kappa)     ``mu``
``AutoRegressive``     matrix-normal-inverse-Wishart               ``A``, ``cov``
=====================  ==========================================  =====================

``DPMixture(base, concentration, max_components)``: weak-limit DP-mixture emissions over any of
these families (Fox et al. Sec. VI); sites ``weights`` and the base's parameters, ``(K, L', ...)``.

``hierarchical_categorical(name, C, concentration, base_concentration)`` (inside a model): the
RCD paper's two-level emission prior, ``Categorical`` around a shared base site ``name`` that every
kernel draws exactly.

``CustomEmission(fn, num_states)``: non-conjugate emissions written as plain NumPyro, ``fn: k ->
Distribution`` over the user's own sites (``StickyHDPHMM(..., emission=fn)`` wraps it); blocked
kernels only (the parameters are updated by the inner NUTS kernel).
"""

from numpyro_hdphmm.emissions.base import EmissionFamily, OneHot, as_weights, emission_site, state_weights
from numpyro_hdphmm.emissions.gaussian import GaussianNIW
from numpyro_hdphmm.emissions.autoregressive import AutoRegressive
from numpyro_hdphmm.emissions.diagonal import DiagonalGaussian
from numpyro_hdphmm.emissions.categorical import Categorical, hierarchical_categorical
from numpyro_hdphmm.emissions.poisson import Poisson
from numpyro_hdphmm.emissions.vmf import VonMisesFisher
from numpyro_hdphmm.emissions.dp_mixture import DPMixture
from numpyro_hdphmm.emissions.custom import CustomEmission

__all__ = [
    "EmissionFamily",
    "emission_site",
    "state_weights",
    "OneHot",
    "as_weights",
    "GaussianNIW",
    "AutoRegressive",
    "DiagonalGaussian",
    "Categorical",
    "hierarchical_categorical",
    "Poisson",
    "VonMisesFisher",
    "DPMixture",
    "CustomEmission",
]
