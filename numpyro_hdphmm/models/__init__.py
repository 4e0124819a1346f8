"""Model classes: NumPyro distributions over sequences whose latent structure
:func:`numpyro_hdphmm.sample` declares as explicit sites (:mod:`numpyro_hdphmm.models.base`).

* ``"hmm"``: :class:`~numpyro_hdphmm.StickyHDPHMM` and :class:`~numpyro_hdphmm.HDPHMM`; latent
  structure beyond the HDP layer (``beta``, the rows): the discrete states and the emission
  parameters.
* ``"hsmm"``: :class:`~numpyro_hdphmm.HDPHSMM` (explicit durations); further latent structure:
  the duration parameters (role ``"duration"``), and the states are a
  :class:`~numpyro_hdphmm.SemiMarkovChain`.
* ``"slds"``: :class:`~numpyro_hdphmm.HDPSLDS` (switching linear dynamics); further latent
  structure: the continuous latent path (role ``"latent"``, the data the modes see) and the
  observation parameters (role ``"observation"``).

A new model class is a module here and one line in :data:`MODEL_CLASSES` (``docs/kernels.md``).
"""

from numpyro_hdphmm.models.base import DEFAULT_NUM_STEPS, ModelClass, SiteRole
from numpyro_hdphmm.models.hmm import StickyHDPHMM
from numpyro_hdphmm.models.hsmm import HDPHSMM
from numpyro_hdphmm.models.slds import HDPSLDS

#: the registry of model classes: ``kind -> class`` (one line per model class)
MODEL_CLASSES = {
    "hmm": StickyHDPHMM,
    "hsmm": HDPHSMM,
    "slds": HDPSLDS,
}

# StickyHDPHMM and HDPHMM are documented where users meet them, as numpyro_hdphmm.StickyHDPHMM / HDPHMM
__all__ = ["MODEL_CLASSES", "ModelClass", "SiteRole", "DEFAULT_NUM_STEPS"]
