"""Inference for the (sticky) HDP-HMM: NumPyro MCMC kernels, one module per algorithm.

=====================  =============================================================
kernel                 algorithm
=====================  =============================================================
``WeakLimitGibbs``     blocked Gibbs on the weak-limit approximation (Fox et al., Alg. 2)
=====================  =============================================================

Every kernel is built on :class:`~numpyro_hdphmm.infer.base.HDPKernel`.
"""

from numpyro_hdphmm.infer.base import HDPKernel, HDPState
from numpyro_hdphmm.infer.weak_limit import WeakLimitGibbs, weak_limit

__all__ = ["HDPKernel", "HDPState", "WeakLimitGibbs", "weak_limit"]
