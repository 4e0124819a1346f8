"""ArviZ conversion that works with both ArviZ generations.

``to_inference_data(mcmc)`` returns what the installed ArviZ calls its data container:

* ArviZ 0.x (package ``arviz < 1``): ``arviz.from_numpyro(mcmc, ...)``, an ``InferenceData``;
* ArviZ 1.x (package ``arviz-base``, imported as ``arviz_base``, which ``arviz >= 1`` re-exports):
  ``arviz_base.from_numpyro(mcmc, ...)``, an ``xarray.DataTree``.

Both are called with the MCMC object and the same keywords (``log_likelihood``, ``coords``,
``dims``, ``posterior_predictive``, ``prior``, ...).  Either way the groups are the same:
``posterior`` (the model's sites, ``{name}_states`` over the ``"time"`` dimension that
:func:`numpyro_hdphmm.sample` names, ``{name}_num_states``), ``sample_stats`` (``lp``,
``num_states``, ``overflow``, ``diverging``, ...), pointwise ``log_likelihood`` (one term per
time step) and ``observed_data``.  ArviZ is imported only when this function is called: the
package itself does not need it.
"""

from __future__ import annotations

import importlib

__all__ = ["to_inference_data"]

_BACKENDS = ("arviz", "arviz_base")


def _major_version(module) -> int:
    try:
        return int(str(getattr(module, "__version__", "0")).split(".")[0])
    except ValueError:
        return 0


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _resolve_backend(backend):
    """``(module_name, from_numpyro)`` of the backend to use."""
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"`backend` must be None, 'arviz' (ArviZ 0.x) or 'arviz_base' (ArviZ 1.x), got {backend!r}.")
    if backend in (None, "arviz"):
        az = _import("arviz")
        if az is not None and _major_version(az) < 1:
            return "arviz", az.from_numpyro
        if backend == "arviz":
            if az is None:
                raise ImportError("to_inference_data(backend='arviz') needs ArviZ 0.x: pip install 'arviz<1'.")
            # arviz >= 1 is a meta-package over arviz_base: fall through to it
    base = _import("arviz_base")
    if base is not None:
        return "arviz_base", base.from_numpyro
    raise ImportError(
        "to_inference_data needs ArviZ: install ArviZ 0.x (pip install 'arviz<1', returns InferenceData) "
        "or ArviZ 1.x (pip install arviz-base, returns xarray.DataTree)."
    )


def to_inference_data(mcmc, *, backend=None, **kwargs):
    """Convert a finished :class:`numpyro.infer.MCMC` run of an HDP-HMM model for ArviZ.

    Args:
        mcmc: the MCMC object after ``run`` (any kernel of :mod:`numpyro_hdphmm.infer`, or a
            :class:`numpyro.infer.Gibbs` containing one).
        backend: ``None`` (default: ArviZ 0.x when ``arviz < 1`` is installed, else
            ``arviz_base``), ``"arviz"`` or ``"arviz_base"``.
        **kwargs: passed to ``from_numpyro`` (``log_likelihood``, ``coords``, ``dims``,
            ``posterior_predictive``, ``prior``, ``predictions``, ``constant_data``, ...).
            ``log_likelihood`` defaults to ``True`` with both backends (ArviZ 1.x's own default
            is ``False``), so the pointwise ``log_likelihood`` group is always there for
            ``loo``/``waic`` unless asked otherwise.

    Returns:
        ``arviz.InferenceData`` (ArviZ 0.x) or ``xarray.DataTree`` (ArviZ 1.x).

    Raises:
        ImportError: when neither ArviZ 0.x nor ``arviz_base`` is installed.
    """
    _, from_numpyro = _resolve_backend(backend)
    kwargs.setdefault("log_likelihood", True)  # arviz_base's default (rcParams) is False
    return from_numpyro(mcmc, **kwargs)
