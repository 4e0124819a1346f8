r"""The protocol every duration family implements.

A hidden semi-Markov model (Johnson & Willsky 2013, "Bayesian Nonparametric Hidden Semi-Markov
Models", JMLR 14, Sec. 2) draws, for each segment in state ``k``, a duration ``D`` from the state's
duration distribution ``p(d | theta_k)``.  A duration family holds the prior ``p(theta | lambda)``
of the parameters ``theta`` (hyperparameters ``lambda``) and the law ``p(d | theta)`` of a
duration ``d in {1, 2, ...}``.

Truncation.  A family describes the UNTRUNCATED law on ``{1, 2, ...}``.  The HSMM models
(:class:`numpyro_hdphmm.HDPHSMM`, :class:`numpyro_hdphmm.HSMM`) truncate it to ``{1, ...,
max_duration}`` and renormalize, ``p_trunc(d | theta) = p(d | theta) / sum_{d' <= max_duration}
p(d' | theta)``, from :meth:`DurationFamily.log_pmf`; the families do nothing about truncation
(their :meth:`~DurationFamily.mean` is the untruncated mean, and a family whose law puts mass on
``d = 0``, such as a :class:`~numpyro_hdphmm.durations.Custom` Poisson, loses that mass in the
renormalization).

Families are JAX pytrees like the emission families (:mod:`numpyro_hdphmm.emissions`): the
hyperparameters are the leaves, the static configuration (e.g. the support of a finite prior) is
the auxiliary data, so a family passes through ``jit`` and ``vmap``.  Hyperparameters are scalars
(shared by every state) or vectors of shape ``(K,)`` (one prior per state).

Terminology used by every method:

``params``
    duration parameters ``theta``: a dict ``{param_name: array}`` whose arrays have leading axis
    ``K`` (one entry per state).
``durations, states, weights``
    complete durations of ``M`` segments (static ``M``): ``durations (M,)`` integers ``>= 1``,
    ``states (M,)`` their states in ``[0, K)``, ``weights (M,)`` a 0/1 mask (padded entries have
    weight 0 and are ignored).

All array methods are pure and jittable.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro

from numpyro_hdphmm._core.roles import HDP_ROLE, NAME_KEY
from numpyro_hdphmm._core.validation import as_parameter, check_positive, is_concrete

__all__ = [
    "DurationFamily",
    "DurationStatistics",
    "duration_statistics",
    "duration_site",
    "as_hyperparameter",
    "below_support",
    "check_mean_duration",
    "check_overrides",
    "open_unit_interval",
]

Params = Dict[str, jax.Array]


class DurationStatistics(NamedTuple):
    """Per-state sufficient statistics of complete durations (each ``(K,)``).

    ``count[k] = sum_i w_i 1[s_i = k]`` (the number of segments in state ``k``) and
    ``excess[k] = sum_i w_i 1[s_i = k] (d_i - 1)`` (their total duration beyond the first step,
    the statistic of the shifted families)."""

    count: jax.Array
    excess: jax.Array


def duration_statistics(durations, states, weights, num_states: int, dtype=None) -> DurationStatistics:
    """:class:`DurationStatistics` of ``durations (M,)`` in ``states (M,)`` with mask ``weights (M,)``.

    Sums by ``jax.ops.segment_sum`` over the states (static ``num_states``); entries with weight 0
    contribute nothing whatever their duration or state."""
    dtype = dtype or jnp.result_type(float)
    w = jnp.asarray(weights, dtype)
    excess = (jnp.asarray(durations).astype(dtype) - 1.0) * w
    states = jnp.asarray(states)
    count = jax.ops.segment_sum(w, states, num_segments=num_states)
    return DurationStatistics(count, jax.ops.segment_sum(excess, states, num_segments=num_states))


def duration_site(name: str, param: str, fn):
    """``numpyro.sample(f"{name}_duration_{param}", fn)`` tagged as a duration parameter of the
    model ``name`` (``infer={"hdphmm_role": "duration", "hdphmm_name": name}``)."""
    return numpyro.sample(f"{name}_duration_{param}", fn, infer={HDP_ROLE: "duration", NAME_KEY: name})


def as_hyperparameter(name: str, value, dtype=None):
    """A positive, finite hyperparameter as a float array of shape ``()`` or ``(K,)``; a ``ValueError``
    names ``name`` otherwise (values are checked only when concrete)."""
    value = as_parameter(name, value)
    if jnp.ndim(value) > 1:
        raise ValueError(
            f"`{name}` must be a scalar (shared by every state) or a vector of shape (K,) (one per state), "
            f"got shape {jnp.shape(value)}."
        )
    if is_concrete(value):
        v = np.asarray(value)
        if not np.issubdtype(v.dtype, np.number):  # booleans, strings, objects
            raise ValueError(f"`{name}` must be a positive number, got {value!r}.")
    check_positive(name, value)
    dtype = dtype or jnp.result_type(value, float)
    return jnp.asarray(value, dtype)


def check_mean_duration(mean_duration, minimum: float = 1.0) -> float:
    """``mean_duration`` as a float ``> minimum`` (a ``ValueError`` names the argument otherwise)."""
    try:
        m = float(mean_duration)
    except (TypeError, ValueError):
        raise ValueError(f"`mean_duration` must be a number > {minimum:g}, got {mean_duration!r}.") from None
    if isinstance(mean_duration, (bool, np.bool_)) or not np.isfinite(m) or m <= minimum:
        raise ValueError(f"`mean_duration` must be a finite number > {minimum:g}, got {mean_duration!r}.")
    return m


def below_support(durations):
    """``durations < 1`` (where every family's log pmf is ``-inf``), and the durations as floats
    with those entries replaced by 1 (so that the formulas and their gradients stay finite)."""
    d = jnp.asarray(durations)
    bad = d < 1
    return bad, jnp.where(bad, 1, d)


def check_overrides(overrides, allowed, where: str) -> None:
    """Raise ``TypeError`` for keyword overrides that ``where`` does not accept."""
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {unknown}; allowed: {sorted(allowed)}.")


def open_unit_interval(p):
    """``p`` kept inside the open interval ``(0, 1)``: a probability drawn as exactly 0 or 1 (a Beta
    draw that rounded there) becomes the dtype's smallest normal number or the largest number below
    1, so that ``log p`` and ``log1p(-p)`` stay finite.  Departure from the exact draw by at most
    one rounding step."""
    dtype = jnp.result_type(p)
    return jnp.clip(p, jnp.finfo(dtype).tiny, jnp.nextafter(jnp.ones((), dtype), jnp.zeros((), dtype)))


class DurationFamily:
    """Base class of the duration families (see the module docstring).

    Subclasses implement the methods below and register themselves as pytrees with
    :func:`jax.tree_util.register_pytree_node_class`.
    """

    #: names of the duration parameters; the model declares the site ``f"{name}_duration_{p}"`` for each
    param_names: Tuple[str, ...] = ()
    #: the parameters are sites the family declares (:meth:`sample_sites`) and a kernel draws
    #: (:meth:`sample_posterior`); ``False``: they are the user's own sites, which the kernels' inner
    #: kernel updates through the model's log density (:class:`~numpyro_hdphmm.durations.Custom`)
    owns_parameters: bool = True
    #: :meth:`sample_posterior` is an exact draw from ``p(theta | complete durations)``
    conjugate: bool = False
    #: names of the hyperparameter leaves (for ``__repr__`` and the pytree)
    _hyper_names: Tuple[str, ...] = ()
    #: hyperparameter leaves that are not per state (e.g. a prior's probabilities over a finite support)
    _shared_names: Tuple[str, ...] = ()

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int) -> Params:
        """Declare the parameters as sites ``f"{name}_duration_{p}"`` (shape ``(num_states, ...)``,
        tagged with the duration role) inside a NumPyro model; returns ``{p: value}``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ prior and law
    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()) -> Params:
        """Prior draws ``theta ~ p(theta | lambda)`` with leading shape ``sample_shape`` (e.g. ``(K,)``)."""
        raise NotImplementedError

    def log_pmf(self, params: Params, durations) -> jax.Array:
        """``log p(D = d | theta_k)`` of the untruncated law: ``durations`` integers of any shape
        ``S``, ``params`` with leading axis ``K``; returns ``S + (K,)``, ``-inf`` where ``d < 1``."""
        raise NotImplementedError

    def mean(self, params: Params) -> jax.Array:
        """``E[D | theta_k]`` of the untruncated law: ``(K,)``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ posterior
    def sample_posterior(self, rng_key, params: Params, durations, states, weights, num_states: int) -> Params:
        """A draw of ``theta_k`` for every state given complete durations (module docstring):
        exact for conjugate parts, an exact MCMC move (leaving the conditional invariant, started
        at ``params``) for the others; states without a duration get prior draws.  Leading axis
        ``num_states``."""
        raise NotImplementedError

    @classmethod
    def weakly_informative(cls, mean_duration, **overrides) -> "DurationFamily":
        """A weakly informative prior whose prior mean duration is ``mean_duration``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ pytree and repr
    def _static(self):
        return ()

    def tree_flatten(self):
        return tuple(getattr(self, k) for k in self._hyper_names), self._static()

    def __repr__(self) -> str:
        leaves = ", ".join(
            f"{k}={getattr(self, k).shape if hasattr(getattr(self, k), 'shape') else getattr(self, k)}"
            for k in self._hyper_names
        )
        return f"{type(self).__name__}({leaves})"

    def _per_state(self, value, num_states: int):
        """A hyperparameter broadcast to ``(num_states,)``."""
        return jnp.broadcast_to(value, (num_states,))

    def check_num_states(self, num_states: int) -> None:
        """Raise ``ValueError`` naming a per-state hyperparameter (shape ``(K',)``) whose size is not the
        model's ``num_states``; scalars fit any ``num_states``."""
        for name in self._hyper_names:
            if name in self._shared_names:
                continue
            shape = jnp.shape(getattr(self, name))
            if shape not in ((), (num_states,)):
                raise ValueError(
                    f"`{name}` has shape {shape}: a per-state hyperparameter must have shape (num_states,) = "
                    f"({num_states},) (or be a scalar)."
                )

