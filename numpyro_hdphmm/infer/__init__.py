"""Inference for the (sticky) HDP-HMM: NumPyro MCMC kernels and a stochastic variational fitter, one module per algorithm.

=========================  ====================================================================
kernel                     algorithm
=========================  ====================================================================
``WeakLimitGibbs``         blocked Gibbs on the weak-limit approximation (Fox et al., Alg. 2)
``DirectAssignmentGibbs``  collapsed step-wise Gibbs on the infinite model (Fox et al., Alg. 1, 3)
``BeamSampler``            slice sampling and FFBS on the infinite model (Van Gael et al. 2008)
``PGAS``                   particle Gibbs with ancestor sampling (Tripuraneni et al. 2015)
``RCDSampler``             restricted collapsed draw on the HCRP-HMM (arXiv:1106.0474, 2011)
``CollapsedSVI``           stochastic collapsed variational inference (Wang & Blunsom 2014)
=========================  ====================================================================

Every MCMC kernel is an :class:`~numpyro_hdphmm.infer.plumbing.adapter.HDPKernel` (the NumPyro adapter) around an
:class:`~numpyro_hdphmm.infer.contract.Algorithm` (the pure core); :func:`~numpyro_hdphmm.infer.plumbing.discovery.discover`
finds the model's sites and the update plan once, before compilation (``kernel.update_plan(...)``).
``CollapsedSVI`` is a fitter that mirrors ``numpyro.infer.SVI`` (``init``/``update``/``run``/``get_params``)
on the same models (the package :mod:`numpyro_hdphmm.infer.collapsed_svi`), its pure core in :mod:`numpyro_hdphmm.infer.collapsed_svi.core` and :mod:`numpyro_hdphmm._core.cvi`;
``numpyro.infer.SVI(model, CollapsedGuide(model, ...), optim, CollapsedELBO())`` makes the same updates through
NumPyro's own SVI loop.
``WeakLimitGibbs(model, mesh=sequence_mesh())`` and ``BeamSampler(model, mesh=...)`` split the sequences over
the devices (and processes) of a :class:`jax.sharding.Mesh` (:mod:`numpyro_hdphmm.infer.plumbing.sharding`, ``docs/scaling.md``).
"""

from numpyro_hdphmm.infer.algorithms import KERNELS, PGAS, BeamSampler, DirectAssignmentGibbs, RCDSampler, WeakLimitGibbs
from numpyro_hdphmm.infer.algorithms.weak_limit import weak_limit
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel, HDPState
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, UpdatePlan, discover
from numpyro_hdphmm.infer.plumbing.initialization import init_to_data
from numpyro_hdphmm.infer.plumbing.sharding import sequence_mesh
from numpyro_hdphmm.infer.collapsed_svi import CollapsedELBO, CollapsedGuide, CollapsedSVI, CollapsedSVIState, RobbinsMonro

__all__ = [
    "Algorithm",
    "BeamSampler",
    "CollapsedSVI",
    "CollapsedGuide",
    "CollapsedELBO",
    "CollapsedSVIState",
    "DirectAssignmentGibbs",
    "Explicit",
    "HDPKernel",
    "HDPState",
    "KERNELS",
    "RobbinsMonro",
    "ModelSpec",
    "PGAS",
    "RCDSampler",
    "UpdatePlan",
    "WeakLimitGibbs",
    "discover",
    "sequence_mesh",
    "init_to_data",
    "weak_limit",
]
