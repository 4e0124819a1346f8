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
"""

from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site, state_weights
from numpyro_hdphmm.emissions.gaussian import GaussianNIW
from numpyro_hdphmm.emissions.autoregressive import AutoRegressive
from numpyro_hdphmm.emissions.diagonal import DiagonalGaussian
from numpyro_hdphmm.emissions.categorical import Categorical
from numpyro_hdphmm.emissions.poisson import Poisson
from numpyro_hdphmm.emissions.vmf import VonMisesFisher

__all__ = [
    "EmissionFamily",
    "emission_site",
    "state_weights",
    "GaussianNIW",
    "AutoRegressive",
    "DiagonalGaussian",
    "Categorical",
    "Poisson",
    "VonMisesFisher",
]
