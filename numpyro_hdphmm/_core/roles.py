"""The keys with which the model classes tag their sample sites (``site["infer"]``), in a leaf
module so that every layer (model classes, emission and duration families, discovery) can read
them without importing the model classes (:mod:`numpyro_hdphmm.models.base` documents them)."""

__all__ = ["HDP_ROLE", "NAME_KEY", "MODEL_KEY"]

#: key of ``site["infer"]`` under which every declared site records its role
HDP_ROLE = "hdphmm_role"
#: key of ``site["infer"]`` under which every declared site records the name given to ``numpyro_hdphmm.sample``
NAME_KEY = "hdphmm_name"
#: key of the observed site's ``infer`` holding the model object (the :class:`ModelClass` instance)
MODEL_KEY = "hdphmm_model"
