"""The algorithms: one module per algorithm, each a pure core on the typed contract
(:mod:`numpyro_hdphmm.infer.contract`) and its NumPyro kernel (an
:class:`~numpyro_hdphmm.infer.plumbing.adapter.HDPKernel` subclass).

A new algorithm is a module here and one line in :data:`KERNELS` (``docs/kernels.md``, "Adding an
algorithm"); the conformance tests (``tests/``) cover every kernel of the registry.
"""

from numpyro_hdphmm.infer.algorithms.beam import BeamSampler
from numpyro_hdphmm.infer.algorithms.direct_assignment import DirectAssignmentGibbs
from numpyro_hdphmm.infer.algorithms.pgas import PGAS
from numpyro_hdphmm.infer.algorithms.rcd import RCDSampler
from numpyro_hdphmm.infer.algorithms.weak_limit import WeakLimitGibbs

#: the registry of MCMC kernels (one line per algorithm); each kernel's ``algorithm.model_classes``
#: says which model classes it samples
KERNELS = (
    WeakLimitGibbs,
    DirectAssignmentGibbs,
    BeamSampler,
    RCDSampler,
    PGAS,
)

__all__ = ["KERNELS", "WeakLimitGibbs", "DirectAssignmentGibbs", "BeamSampler", "RCDSampler", "PGAS"]
