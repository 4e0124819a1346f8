"""Inference for the (sticky) HDP-HMM: NumPyro MCMC kernels, one module per algorithm.

=========================  =========================================================
kernel                 algorithm
=========================  =========================================================
``WeakLimitGibbs``         blocked Gibbs on the weak-limit approximation (Fox et al., Alg. 2)
``DirectAssignmentGibbs``  collapsed step-wise Gibbs on the infinite model (Fox et al., Alg. 1)
=========================  =========================================================

Every kernel is built on :class:`~numpyro_hdphmm.infer.base.HDPKernel`.
"""

from numpyro_hdphmm.infer.base import HDPKernel, HDPState
from numpyro_hdphmm.infer.beam import BeamSampler
from numpyro_hdphmm.infer.direct_assignment import DirectAssignmentGibbs
from numpyro_hdphmm.infer.weak_limit import WeakLimitGibbs, weak_limit

__all__ = ["BeamSampler", "DirectAssignmentGibbs", "HDPKernel", "HDPState", "WeakLimitGibbs", "weak_limit"]
