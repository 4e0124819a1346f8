r"""Geometric durations with a Beta prior: the duration law of an HMM's self-transitions.

For each state ``k``::

    stay_k ~ Beta(concentration1, concentration0)
    P(D = d | stay_k) = (1 - stay_k) stay_k^(d - 1),        d = 1, 2, ...

``stay`` is the probability of one more step in the segment (an HMM with self-transition
probability ``stay_k`` has these durations), so an HSMM with geometric durations and the
self-transitions removed is the HMM with ``pi_kk = stay_k`` and the off-diagonal rows scaled by
``1 - stay_k`` (Johnson & Willsky 2013, Sec. 2.2): the family exists for that cross-check.  Given
``n_k`` complete durations of total excess ``S_k = sum_i (d_i - 1)``, the posterior is
``Beta(concentration1 + S_k, concentration0 + n_k)`` (the Beta-geometric conjugacy; Gelman et al.
2013, BDA3 Sec. 2.4 with ``S_k`` successes and ``n_k`` failures).
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import xlogy

from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.phases import PhaseTables
from numpyro_hdphmm._core.validation import is_concrete
from numpyro_hdphmm.durations.base import (
    DurationFamily,
    as_hyperparameter,
    below_support,
    check_mean_duration,
    check_overrides,
    duration_site,
    duration_statistics,
    open_unit_interval,
)

__all__ = ["Geometric"]


@jax.tree_util.register_pytree_node_class
class Geometric(DurationFamily):
    """Geometric durations ``P(d) = (1 - stay) stay^(d - 1)`` with ``stay ~ Beta(concentration1,
    concentration0)`` (see the module docstring).

    Args:
        concentration1: Beta ``a > 0`` (pseudo-count of "one more step").
        concentration0: Beta ``b > 0`` (pseudo-count of "the segment ends"); the prior mean
            duration ``E[1 / (1 - stay)] = (a + b - 1) / (b - 1)`` is finite for ``b > 1``.

    Both are scalars or ``(K,)`` vectors.  Parameter (site ``f"{name}_duration_stay"``): ``stay (K,)``.
    """

    param_names = ("stay",)
    conjugate = True
    _hyper_names = ("concentration1", "concentration0")

    def __init__(self, concentration1=1.0, concentration0=2.0):
        c1 = as_hyperparameter("concentration1", concentration1)
        c0 = as_hyperparameter("concentration0", concentration0)
        dtype = jnp.result_type(c1, c0)
        self.concentration1, self.concentration0 = c1.astype(dtype), c0.astype(dtype)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.concentration1, obj.concentration0 = children
        return obj

    def _prior(self, num_states: int):
        return dist.Beta(self._per_state(self.concentration1, num_states), self._per_state(self.concentration0, num_states))

    def sample_sites(self, name: str, num_states: int):
        """Site ``f"{name}_duration_stay"``: ``Beta(concentration1, concentration0)``, shape ``(K,)``
        (event ``(K,)``)."""
        self.check_num_states(num_states)
        return {"stay": duration_site(name, "stay", self._prior(num_states).to_event(1))}

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``stay ~ Beta(concentration1, concentration0)``, shape ``sample_shape`` (inside ``(0, 1)``,
        :func:`~numpyro_hdphmm.durations.base.open_unit_interval`)."""
        shape = jnp.broadcast_shapes(tuple(sample_shape), jnp.shape(self.concentration1), jnp.shape(self.concentration0))
        a = jnp.broadcast_to(self.concentration1, shape)
        b = jnp.broadcast_to(self.concentration0, shape)
        return {"stay": open_unit_interval(draws.beta(rng_key, a, b))}

    def log_pmf(self, params, durations):
        """``log(1 - stay_k) + (d - 1) log stay_k`` (``log1p``, ``xlogy``): ``S + (K,)``, ``-inf`` for ``d < 1``."""
        stay = params["stay"]
        bad, d = below_support(durations)
        d = d.astype(stay.dtype)[..., None]
        lp = jnp.log1p(-stay) + xlogy(d - 1.0, stay)
        return jnp.where(bad[..., None], -jnp.inf, lp)

    def mean(self, params):
        """``1 / (1 - stay_k)``: ``(K,)``."""
        return 1.0 / (1.0 - params["stay"])

    def log_survival(self, params, durations):
        """``log P(D >= d) = (d - 1) log stay_k``: ``S + (K,)``, ``0`` for ``d <= 1``."""
        stay = params["stay"]
        d = jnp.maximum(jnp.asarray(durations), 1).astype(stay.dtype)[..., None]
        return xlogy(d - 1.0, stay)

    def phase_embedding(self, params):
        """One phase per state: stay with probability ``stay_k``
        (:class:`~numpyro_hdphmm._core.phases.PhaseTables`)."""
        stay = params["stay"]
        return PhaseTables(jnp.zeros(stay.shape + (1,), stay.dtype), jnp.log(stay), jnp.log1p(-stay))

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states: int):
        """``stay_k ~ Beta(concentration1 + S_k, concentration0 + n_k)`` (module docstring); exact,
        ``params`` unused; a state without durations (``n_k = 0``) gets a prior draw."""
        self.check_num_states(num_states)
        stats = duration_statistics(durations, states, weights, num_states, self.concentration1.dtype)
        a = self.concentration1 + stats.excess
        b = self.concentration0 + stats.count
        return {"stay": open_unit_interval(draws.beta(rng_key, a, b))}

    @classmethod
    def weakly_informative(cls, mean_duration, **overrides) -> "Geometric":
        """``Beta(m - 1, 2)`` for the mean duration ``m = mean_duration > 1``.

        ``concentration0 = 2`` is the smallest integer for which the prior mean duration
        ``E[1 / (1 - stay)] = (a + b - 1) / (b - 1)`` is finite, so the prior is as broad as the
        Beta family allows with that mean (its variance is infinite: any duration scale stays
        plausible); ``concentration1 = (m - 1)(concentration0 - 1)`` makes the prior mean
        duration exactly ``m``.  ``concentration0`` may be overridden (``> 1``; ``concentration1``
        follows), or both.
        """
        check_overrides(overrides, ("concentration1", "concentration0"), "Geometric.weakly_informative")
        m = check_mean_duration(mean_duration)
        b = overrides.get("concentration0", 2.0)
        if "concentration1" in overrides:
            return cls(overrides["concentration1"], b)
        b = as_hyperparameter("concentration0", b)
        if is_concrete(b) and not bool(jnp.all(b > 1.0)):
            raise ValueError(
                "`concentration0` must be > 1 for the prior mean duration to be finite (weakly_informative sets "
                f"concentration1 = (mean_duration - 1)(concentration0 - 1)), got {b}."
            )
        return cls((m - 1.0) * (b - 1.0), b)
