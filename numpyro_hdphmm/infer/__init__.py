"""Inference for the (sticky) HDP-HMM: NumPyro MCMC kernels, one module per algorithm.

=========================  ====================================================================
kernel                     algorithm
=========================  ====================================================================
``WeakLimitGibbs``         blocked Gibbs on the weak-limit approximation (Fox et al., Alg. 2)
``DirectAssignmentGibbs``  collapsed step-wise Gibbs on the infinite model (Fox et al., Alg. 1, 3)
``BeamSampler``            slice sampling and FFBS on the infinite model (Van Gael et al. 2008)
``PGAS``                   particle Gibbs with ancestor sampling on the infinite model (Tripuraneni et al. 2015)
=========================  ====================================================================

Every kernel is an :class:`~numpyro_hdphmm.infer.base.HDPKernel` (the NumPyro adapter) around an
:class:`~numpyro_hdphmm.infer.base.Algorithm` (the pure core); :func:`~numpyro_hdphmm.infer.discovery.discover`
finds the model's sites and the update plan once, before compilation (``kernel.update_plan(...)``).
"""

from numpyro_hdphmm.infer.base import Algorithm, Explicit, HDPKernel, HDPState
from numpyro_hdphmm.infer.beam import BeamSampler
from numpyro_hdphmm.infer.direct_assignment import DirectAssignmentGibbs
from numpyro_hdphmm.infer.discovery import ModelSpec, UpdatePlan, discover
from numpyro_hdphmm.infer.pgas import PGAS
from numpyro_hdphmm.infer.weak_limit import WeakLimitGibbs, weak_limit

__all__ = [
    "Algorithm",
    "BeamSampler",
    "DirectAssignmentGibbs",
    "Explicit",
    "HDPKernel",
    "HDPState",
    "ModelSpec",
    "PGAS",
    "UpdatePlan",
    "WeakLimitGibbs",
    "discover",
    "weak_limit",
]
