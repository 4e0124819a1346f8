r"""Shifted Poisson durations with a Gamma prior on the rate (Johnson & Willsky 2013, Sec. 5).

For each state ``k``::

    rate_k ~ Gamma(concentration, rate)                  (Gamma in the rate parameterization)
    D - 1 | rate_k ~ Poisson(rate_k),   P(D = d) = rate_k^(d-1) exp(-rate_k) / (d - 1)!,   d = 1, 2, ...

The shift puts the support on ``{1, 2, ...}`` (every segment lasts at least one step); the mean
duration is ``1 + rate_k``.  Given ``n_k`` complete durations of total excess ``S_k = sum_i
(d_i - 1)``, the posterior is ``Gamma(concentration + S_k, rate + n_k)`` (Gelman et al. 2013,
BDA3 Sec. 2.6, eq. 2.15, applied to the counts ``d_i - 1``).  Note the name clash, as in
:class:`numpyro_hdphmm.emissions.Poisson`: the constructor's ``rate`` is the Gamma prior's rate
``b``; the parameter ``"rate"`` (site ``f"{name}_duration_rate"``) is the Poisson rate ``lambda``.
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import gammainc

from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm.durations._numerics import poisson_log_pmf
from numpyro_hdphmm.durations.base import (
    underflow_floor,
    DurationFamily,
    as_hyperparameter,
    below_support,
    check_mean_duration,
    check_overrides,
    duration_site,
    duration_statistics,
)

__all__ = ["Poisson"]


def positive_gamma(rng_key, a, b):
    """``Gamma(a, b)`` draws (in log space, :func:`numpyro_hdphmm._core.random.log_gamma`) floored at
    the dtype's smallest normal number, so that a draw under a tiny shape that underflowed stays
    inside the Gamma support (a departure from the exact draw by less than ``finfo.tiny``)."""
    lam = jnp.exp(draws.log_gamma(rng_key, a) - jnp.log(b))
    return jnp.maximum(lam, jnp.finfo(lam.dtype).tiny)


@jax.tree_util.register_pytree_node_class
class Poisson(DurationFamily):
    """Shifted Poisson durations ``D - 1 ~ Poisson(rate_k)`` with ``rate_k ~ Gamma(concentration,
    rate)`` (see the module docstring).

    Args:
        concentration: Gamma shape ``a > 0``.
        rate: Gamma rate ``b > 0``; the prior mean duration is ``1 + a / b``.

    Both are scalars or ``(K,)`` vectors.  Parameter (site ``f"{name}_duration_rate"``): ``rate (K,)``.
    """

    param_names = ("rate",)
    conjugate = True
    _hyper_names = ("concentration", "rate")

    def __init__(self, concentration=2.0, rate=0.2):
        concentration = as_hyperparameter("concentration", concentration)
        rate = as_hyperparameter("rate", rate)
        dtype = jnp.result_type(concentration, rate)
        self.concentration = concentration.astype(dtype)
        self.rate = rate.astype(dtype)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.concentration, obj.rate = children
        return obj

    def sample_sites(self, name: str, num_states: int):
        """Site ``f"{name}_duration_rate"``: ``Gamma(concentration, rate)``, shape ``(K,)`` (event ``(K,)``)."""
        self.check_num_states(num_states)
        fn = dist.Gamma(self._per_state(self.concentration, num_states), self._per_state(self.rate, num_states))
        return {"rate": duration_site(name, "rate", fn.to_event(1))}

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``rate ~ Gamma(concentration, rate)``, shape ``sample_shape`` (:func:`positive_gamma`)."""
        shape = jnp.broadcast_shapes(tuple(sample_shape), jnp.shape(self.concentration), jnp.shape(self.rate))
        return {"rate": positive_gamma(rng_key, jnp.broadcast_to(self.concentration, shape), self.rate)}

    def log_pmf(self, params, durations):
        """``(d - 1) log rate_k - rate_k - log (d - 1)!``: ``S + (K,)``, ``-inf`` for ``d < 1``.

        Evaluated in Loader's saddle-point form (:func:`~numpyro_hdphmm.durations._numerics.poisson_log_pmf`),
        whose terms are of the size of the result, so that it stays accurate in float32 for
        durations up to ``10^5`` and beyond (the textbook form cancels terms of size ``d log d``).
        Rates are floored at ``finfo.tiny`` (an underflowed draw gives a finite value)."""
        lam = params["rate"]
        bad, d = below_support(durations)
        x = (d.astype(lam.dtype) - 1.0)[..., None]
        lp = poisson_log_pmf(x, jnp.maximum(lam, jnp.finfo(lam.dtype).tiny))
        return jnp.where(bad[..., None], -jnp.inf, lp)

    def mean(self, params):
        """``1 + rate_k``: ``(K,)``."""
        return 1.0 + params["rate"]

    def log_survival(self, params, durations):
        """``log P(D >= d) = log P(d - 1, rate_k)`` (the regularized lower incomplete gamma function:
        ``P(X >= a) = P(a, lambda)`` for ``X ~ Poisson(lambda)``), ``0`` for ``d <= 1``: ``S + (K,)``;
        where it underflows, its tail extrapolated from the pmf
        (:func:`~numpyro_hdphmm.durations.base.underflow_floor`)."""
        lam = jnp.maximum(params["rate"], jnp.finfo(params["rate"].dtype).tiny)
        d = jnp.maximum(jnp.asarray(durations), 1)
        a = (d.astype(lam.dtype) - 1.0)[..., None]
        tail = gammainc(jnp.maximum(a, 1.0), lam)
        return underflow_floor(jnp.where(a == 0, 1.0, tail), self.log_pmf(params, d),
                               self.log_pmf(params, d + 1))

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states: int):
        """``rate_k ~ Gamma(concentration + S_k, rate + n_k)`` (module docstring); exact, ``params``
        unused; a state without durations gets a prior draw."""
        self.check_num_states(num_states)
        stats = duration_statistics(durations, states, weights, num_states, self.concentration.dtype)
        return {"rate": positive_gamma(rng_key, self.concentration + stats.excess, self.rate + stats.count)}

    @classmethod
    def weakly_informative(cls, mean_duration, **overrides) -> "Poisson":
        """``Gamma(2, 2 / (m - 1))`` on the rate for the mean duration ``m = mean_duration > 1``.

        The prior mean of ``rate`` is ``m - 1``, so the prior mean duration is exactly ``m``;
        ``concentration = 2`` gives a coefficient of variation of ``1 / sqrt(2)`` (the central 90%
        of the prior on the rate spans about ``0.18`` to ``2.4`` times its mean: broad, yet unlike an
        exponential prior (``concentration = 1``) without its mode at ``rate = 0``, i.e. at one-step
        segments).  ``concentration`` may be overridden (``rate`` follows to keep the mean), or both.
        """
        check_overrides(overrides, ("concentration", "rate"), "Poisson.weakly_informative")
        m = check_mean_duration(mean_duration)
        a = as_hyperparameter("concentration", overrides.get("concentration", 2.0))
        return cls(a, overrides.get("rate", a / (m - 1.0)))
