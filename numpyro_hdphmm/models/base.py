r"""The model-class layer: what every model class of the package declares about itself.

A *model class* (the sticky HDP-HMM today; explicit-duration and switching-linear-dynamics models
next) is a NumPyro distribution over sequences that also implements :class:`ModelClass`:

* :meth:`ModelClass.site_roles` describes its latent structure as :class:`SiteRole` rows, one per
  sample site it declares, in model order: the shared HDP layer (``"beta"``: the global weights,
  ``"trans"``: the transition rows), the emission parameters (``"emission"``, one row per
  parameter of the family), the discrete state sequence (``"states"``), the observations
  (``"obs"``), and any further latent structure of its own (e.g. per-state duration parameters,
  a continuous latent state) under roles of its own;
* :meth:`ModelClass.declare` declares those sites in a NumPyro model (the body of
  :func:`numpyro_hdphmm.sample`), each tagged ``infer={HDP_ROLE: role, "hdphmm_name": name}``, the
  observed site also with the model object under :data:`MODEL_KEY`.

Discovery (:mod:`numpyro_hdphmm.infer.plumbing.discovery`) reads the sites and their roles from
this description, the kernels' explicit state (:class:`~numpyro_hdphmm.infer.contract.Explicit`)
carries the roles beyond the HMM's under ``extra``, and an algorithm declares the model classes it
samples (:attr:`~numpyro_hdphmm.infer.contract.Algorithm.model_classes`).  A new model class is a
module in :mod:`numpyro_hdphmm.models` and one line in :data:`numpyro_hdphmm.models.MODEL_CLASSES`
(``docs/kernels.md``, "Adding a model class").
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple, Tuple

from numpyro_hdphmm._core.roles import HDP_ROLE, MODEL_KEY, NAME_KEY

__all__ = ["HDP_ROLE", "MODEL_KEY", "NAME_KEY", "NOT_ENUMERABLE", "DEFAULT_NUM_STEPS", "SiteRole", "ModelClass",
           "HDP_LAYER_ROLES"]

#: ``infer["enumerate"]`` of the states site: not a mode of enumeration but the reason there is
#: none, which NumPyro's gradient-based algorithms (NUTS, HMC, SA, autoguides) print when they
#: refuse the discrete site ("... But the site y_states is marked as '<this>'")
NOT_ENUMERABLE = (
    "none: the HDP-HMM state sequence of numpyro_hdphmm.sample cannot be enumerated or sampled by NUTS/HMC or an "
    "autoguide; sample it with MCMC(nh.infer.WeakLimitGibbs(model)) (or BeamSampler, DirectAssignmentGibbs, PGAS, "
    "RCDSampler; your other sites get an inner NUTS), fit it with SVI(model, nh.infer.CollapsedGuide(model), optim, "
    "nh.infer.CollapsedELBO()) or nh.infer.CollapsedSVI, or, for a finite HMM, sum the states out with "
    "nh.HiddenMarkovModel (NUTS, SVI)"
)

#: the length of the sequence a model class draws without ``obs`` when neither ``num_steps`` nor
#: ``lengths`` says (a prior predictive check of a model written for data: ``model(None)``)
DEFAULT_NUM_STEPS = 100

#: the roles every model class declares: the shared HDP layer, the discrete states and the data
HDP_LAYER_ROLES = ("beta", "trans", "states", "obs")


class SiteRole(NamedTuple):
    """One site of a model class: ``role`` (``"beta"``, ``"trans"``, ``"emission"``, ``"states"``,
    ``"obs"`` or a role of the class's own latent structure), ``suffix`` (the site is
    ``f"{name}_{suffix}"``, or ``name`` itself when empty), ``parameter`` (for ``"emission"`` rows:
    the family's parameter name; else ``None``) and ``description`` (what it is, for the update
    plan and the docs)."""

    role: str
    suffix: str
    parameter: object = None
    description: str = ""

    @property
    def key(self) -> str:
        """The row's key among the model class's further sites (``Explicit.extra``,
        ``LatentSites.extra``): the role, or ``f"{role}_{parameter}"`` for a row of a parameter
        (e.g. ``"duration_rate"``)."""
        return self.role if self.parameter is None else f"{self.role}_{self.parameter}"

    def site(self, name: str) -> str:
        """The sample site's name for the model declared as ``name``."""
        return f"{name}_{self.suffix}" if self.suffix else name


class ModelClass:
    """Mixin of every model class (see the module docstring).

    ``kind``: the class's key in :data:`numpyro_hdphmm.models.MODEL_CLASSES` (``"hmm"``), which
    algorithms list in their ``model_classes``; ``max_states`` and ``emission``: the capacity and the
    emission family every model class has."""

    kind: ClassVar[str] = ""
    #: the role of the site whose law is the discrete layer's ``EmissionLikelihood``: the data the
    #: modes see (``"obs"``; the HDP-SLDS: ``"latent"``, its continuous latent path)
    layer_role: ClassVar[str] = "obs"

    def site_roles(self) -> Tuple[SiteRole, ...]:
        """The sites :meth:`declare` declares (:class:`SiteRole`), in model order but for the
        emission parameters, which follow the family's ``param_names``."""
        raise NotImplementedError

    def declare(self, name: str, obs=None, lengths=None):
        """Declare the model's sites in the running NumPyro model; returns the observations
        (``obs``, or the draw).  Called by :func:`numpyro_hdphmm.sample`."""
        raise NotImplementedError

    #: the scalar hyperparameters a generative draw is vectorized over: ``_draw_one(key, *values)``
    draw_arguments: ClassVar[Tuple[str, ...]] = ("gamma", "alpha", "kappa")

    def _draw_one(self, key, *hyperparameters):
        """One draw of the generative process: ``(y (T, *event), intermediates)``, the latter with
        ``beta``, ``trans``, ``states``, ``overflow`` and the class's parameters."""
        raise NotImplementedError

    def sample_with_intermediates(self, key, sample_shape=()):
        """``(y, intermediates)``: observations ``(*sample_shape, T, *event)`` and a dict with
        ``beta``, ``trans`` (start row last), the parameters, ``states`` and ``overflow`` (the
        number of draws that needed a state beyond the capacity; a ``RuntimeWarning`` is emitted
        when it is positive)."""
        from numpyro_hdphmm._core.validation import host_warnings_enabled
        from numpyro_hdphmm.models.declare import draw_model  # declare builds on this module

        if self.num_steps is None:
            raise ValueError("`num_steps` must be given to draw a sequence from the model.")
        return draw_model(self, key, tuple(sample_shape), host_warnings_enabled())

    def sample(self, key, sample_shape=()):
        """Observations ``(*sample_shape, T, *event)`` from the generative model."""
        return self.sample_with_intermediates(key, sample_shape)[0]
