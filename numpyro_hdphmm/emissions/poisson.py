"""Poisson count emissions with a Gamma prior on the rate.

Model, for each state ``k`` and (for ``event_shape = (D,)``) independent dimensions ``d``::

    rate_kd ~ Gamma(concentration_d, rate_d)        (Gamma in the rate parameterization)
    y_td | z_t = k ~ Poisson(rate_kd)

References: Gelman et al. (2013), *Bayesian Data Analysis* (3rd ed.), §2.6 "Poisson model"
(posterior ``Gamma(a + sum y, b + n)``, eq. (2.15) and the negative-binomial predictive
that follows it) and Appendix A (negative binomial).  Note the name clash: the constructor's
``rate`` is the Gamma prior's rate ``b``; the emission parameter ``"rate"`` (site
``f"{name}_rate"``) is the Poisson rate ``lambda``.
"""

from __future__ import annotations

import operator
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln

from numpyro_hdphmm._core.segments import label_counts, label_sums
from numpyro_hdphmm._core.validation import (
    as_data_array,
    check_float_range,
    check_integer,
    check_log_likelihood_precision,
    check_positive,
    is_concrete,
)
from numpyro_hdphmm.emissions._gamma import (
    HIGHEST,
    as_array,
    as_float,
    broadcast_named,
    check_overrides,
    float_dtype,
    gamma_log_normalizer,
    gamma_log_prob,
    sample_log_gamma,
)
from numpyro_hdphmm.emissions._data import observed_rows
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["Poisson"]


def _check_event_shape(event_shape) -> Tuple[int, ...]:
    try:
        shape = (operator.index(event_shape),) if not isinstance(event_shape, (tuple, list)) else tuple(
            operator.index(s) for s in event_shape
        )
    except TypeError:
        raise ValueError(f"`event_shape` must be () or (D,), got {event_shape!r}.") from None
    if len(shape) > 1 or any(s < 1 for s in shape):
        raise ValueError(f"`event_shape` must be () or (D,) with D >= 1, got {shape}.")
    return shape


@jax.tree_util.register_pytree_node_class
class Poisson(EmissionFamily):
    """Poisson emissions with a conjugate ``Gamma(concentration, rate)`` prior.

    Args:
        concentration: Gamma shape ``a > 0``; scalar or broadcastable to
            ``(*batch, *event_shape)``.
        rate: Gamma rate ``b > 0`` (prior mean of the Poisson rate is ``a / b``).
        event_shape: ``()`` for scalar counts, ``(D,)`` (or ``D``) for ``D`` independent
            count dimensions with per-dimension hyperparameters (static).

    Observations are counts ``y (T, *event_shape)`` (integers, or floats with NaN = missing).
    The parameter is ``rate (K, *event_shape)``.  Sufficient statistics are the dict
    ``{"count", "sum", "sum_log_factorial"}``, each ``(K, *event_shape)``: the weighted number
    of steps, ``sum_t w_tk y_t`` and ``sum_t w_tk log(y_t!)``.
    """

    param_names = ("rate",)
    conjugate = True
    _hyper_names = ("concentration", "rate")

    def __init__(self, concentration=1.0, rate=1.0, event_shape=()):
        event_shape = _check_event_shape(event_shape)
        concentration, rate = as_array(concentration, "concentration"), as_array(rate, "rate")
        check_positive("concentration", concentration)
        check_positive("rate", rate)
        named = {"concentration": concentration, "rate": rate}
        shape = broadcast_named(named, event_shape)
        n_event = len(event_shape)
        if n_event and tuple(shape[-n_event:]) != event_shape:
            raise ValueError(
                f"`concentration` and `rate` broadcast to {shape}, whose trailing dimensions do not "
                f"match event_shape {event_shape}."
            )
        dtype = float_dtype(concentration, rate)
        self._event_shape = event_shape
        self.concentration = jnp.broadcast_to(as_float(concentration, dtype), shape)
        self.rate = jnp.broadcast_to(as_float(rate, dtype), shape)

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.concentration, self.rate), (self._event_shape,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        (obj._event_shape,) = aux
        obj.concentration, obj.rate = children
        return obj

    def _with_hypers(self, concentration, rate) -> "Poisson":
        return self.tree_unflatten((self._event_shape,), (concentration, rate))

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return self._event_shape

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        shape = tuple(jnp.shape(self.concentration))
        return shape[: len(shape) - len(self._event_shape)]

    def _event_axes(self):
        return tuple(range(-len(self._event_shape), 0))

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """Shape ``(..., T, *event_shape)``; non-negative finite integers (NaN = missing) whose
        total fits the float type (the statistics sum them)."""
        n_event = len(self._event_shape)
        shape = tuple(jnp.shape(y))
        if len(shape) < 1 + n_event or shape[len(shape) - n_event :] != self._event_shape:
            expect = "(..., T" + "".join(f", {s}" for s in self._event_shape) + ")"
            raise ValueError(f"`{name}` must have shape {expect}, got {shape}.")
        if is_concrete(y):
            y = np.asarray(as_data_array(name, y))
            check_integer(name, y, low=0, allow_nan=True, what="counts")
            with np.errstate(over="ignore"):
                total = float(np.nansum(y.astype(float)))
            check_float_range(name, "the sum of the counts", total, np.dtype(self.rate.dtype), rescale=False)
            # one step's log-likelihood y log(rate) - rate - log y! has terms of size y (1 + log y) (Stirling)
            with np.errstate(invalid="ignore", divide="ignore"):
                yf = np.nan_to_num(y.astype(float), nan=0.0)
                terms = yf * (1.0 + np.log(np.maximum(yf, 1.0)))
            per_step = terms.reshape(terms.shape[: terms.ndim - n_event] + (-1,)).sum(-1) if n_event else terms
            dtype = np.dtype(self.rate.dtype)
            check_log_likelihood_precision(
                name, f"the counts reach {np.nanmax(yf, initial=0.0):.3g}", float(np.max(per_step, initial=0.0)), dtype)
            # the collapsed kernels' Gamma normalizers log Gamma(a + S) of a state's total S (as large as the sum
            # of the counts) enter every step's predictive log-likelihood as differences
            check_log_likelihood_precision(
                name, f"the counts sum to {total:.3g} (the collapsed samplers' Gamma-Poisson normalizers)",
                total * (1.0 + np.log(max(total, 1.0))), dtype, "Shorten the series, or ")

    def prepare(self, y):
        """``y (T, *event) -> (x (T, *event) float, valid (T,))``.

        A step with any NaN is missing: its row is replaced by zeros (a valid count).
        """
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        nan = jnp.isnan(y)
        valid = ~jnp.any(nan, axis=self._event_axes()) if self._event_shape else ~nan
        mask = valid.reshape(valid.shape + (1,) * len(self._event_shape))
        x = jnp.where(mask, y, jnp.zeros((), y.dtype))
        return x, valid

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights):
        """``x (T, *event)``, ``weights (T, K)`` -> dict of ``(K, *event)`` weighted sums."""
        weights = jnp.asarray(weights)
        dtype = jnp.result_type(x, weights)
        weights = weights.astype(dtype)
        T, K = weights.shape
        xf = x.astype(dtype).reshape(T, -1)
        shape = (K,) + self._event_shape
        s1 = jnp.matmul(weights.T, xf, precision=HIGHEST).reshape(shape)
        lf = jnp.matmul(weights.T, gammaln(xf + 1.0), precision=HIGHEST).reshape(shape)
        count = jnp.sum(weights, axis=0).reshape((K,) + (1,) * len(self._event_shape))
        return {"count": jnp.broadcast_to(count, shape), "sum": s1, "sum_log_factorial": lf}

    def label_statistics(self, x, labels, num_states: int):
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)``: segment sums by label
        (:func:`~numpyro_hdphmm._core.segments.label_sums`), ``O(T)`` per event entry."""
        dtype = jnp.result_type(x, float)
        T = jnp.shape(labels)[0]
        xf = x.astype(dtype).reshape(T, -1)
        shape = (num_states,) + self._event_shape
        sums = label_sums(jnp.concatenate([xf, gammaln(xf + 1.0)], axis=-1), labels, num_states)
        P = xf.shape[-1]
        count = label_counts(labels, num_states, dtype).reshape((num_states,) + (1,) * len(self._event_shape))
        return {"count": jnp.broadcast_to(count, shape), "sum": sums[:, :P].reshape(shape),
                "sum_log_factorial": sums[:, P:].reshape(shape)}

    def posterior(self, stats) -> "Poisson":
        """``Gamma(a + sum w y, b + sum w)`` (BDA3 §2.6); batch shape ``(K,)``."""
        return self._with_hypers(self.concentration + stats["sum"], self.rate + stats["count"])

    def log_marginal_likelihood(self, stats) -> jax.Array:
        """Gamma-Poisson evidence, summed over dimensions: ``(K,)``.

        ``log p(y) = log Gamma(a_n) - a_n log b_n - log Gamma(a) + a log b - sum_t w_t log y_t!``
        with ``a_n = a + sum w y``, ``b_n = b + sum w`` (the ratio of Gamma normalizers;
        BDA3 §2.6).  Exact for fractional weights ``w``.
        """
        an = self.concentration + stats["sum"]
        bn = self.rate + stats["count"]
        per_dim = (
            gamma_log_normalizer(an, bn)
            - gamma_log_normalizer(self.concentration, self.rate)
            - stats["sum_log_factorial"]
        )
        return jnp.sum(per_dim, axis=self._event_axes()) if self._event_shape else per_dim

    def log_predictive(self, x, stats) -> jax.Array:
        """Negative-binomial posterior predictive (BDA3 §2.6; Appendix A), ``x (*event)`` -> ``(K,)``.

        ``log p(x | D) = gammaln(a_n + x) - gammaln(a_n) - gammaln(x + 1)
        + a_n log(b_n / (b_n + 1)) - x log(b_n + 1)``.
        """
        an = self.concentration + stats["sum"]
        bn = self.rate + stats["count"]
        per_dim = (
            gammaln(an + x)
            - gammaln(an)
            - gammaln(x + 1.0)
            - an * jnp.log1p(1.0 / bn)
            - x * jnp.log1p(bn)
        )
        return jnp.sum(per_dim, axis=self._event_axes()) if self._event_shape else per_dim

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``rate ~ Gamma(a, b)`` (drawn in log space): ``sample_shape + (*batch, *event)``."""
        shape = tuple(sample_shape) + tuple(jnp.shape(self.concentration))
        log_rate = sample_log_gamma(rng_key, self.concentration, self.rate, shape, self.concentration.dtype)
        return {"rate": jnp.exp(log_rate)}

    def log_prior(self, params) -> jax.Array:
        """``log Gamma(rate | a, b)`` summed over dimensions: ``(K,)``."""
        lp = gamma_log_prob(params["rate"], self.concentration, self.rate)
        return jnp.sum(lp, axis=self._event_axes()) if self._event_shape else lp

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``log Poisson(x_t | rate_k)`` summed over dimensions: ``x (T, *event)`` -> ``(T, K)``.

        Computed as ``x @ log(rate).T - sum(rate) - sum log x!``.  Departure: rates are floored
        at the dtype's smallest normal number inside the log so an underflowed draw gives a
        finite value (and ``0 log 0 = 0``).
        """
        lam = params["rate"]
        K = lam.shape[0]
        T = x.shape[0]
        lam = lam.reshape(K, -1)
        xf = x.reshape(T, -1).astype(lam.dtype)
        log_lam = jnp.log(jnp.maximum(lam, jnp.finfo(lam.dtype).tiny))
        cross = jnp.matmul(xf, log_lam.T, precision=HIGHEST)
        return cross - jnp.sum(lam, -1)[None, :] - jnp.sum(gammaln(xf + 1.0), -1)[:, None]

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ Poisson(rate_{z_t})``: integer ``(T, *event)``."""
        lam = params["rate"][states]
        return jax.random.poisson(rng_key, lam, lam.shape)

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats) -> jax.Array:
        """``E_q[log Poisson(x_t | rate_k)] = sum_d [x_td (psi(a_kd) - log b_kd) - a_kd / b_kd - log x_td!]``
        under ``q(rate_k) = Gamma(a + sum w y, b + sum w)``: ``x (T, *event)`` -> ``(T, K)``."""
        an = (self.concentration + stats["sum"])
        bn = (self.rate + stats["count"])
        K, T = an.shape[0], x.shape[0]
        e_log = (jax.scipy.special.digamma(an) - jnp.log(bn)).reshape(K, -1)
        e_rate = (an / bn).reshape(K, -1)
        xf = x.reshape(T, -1).astype(an.dtype)
        cross = jnp.matmul(xf, e_log.T, precision=HIGHEST)
        return cross - jnp.sum(e_rate, -1)[None, :] - jnp.sum(gammaln(xf + 1.0), -1)[:, None]

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Site ``f"{name}_rate"``: Gamma, batch ``(K,)``, event ``event_shape``."""
        shape = (num_states,) + self._event_shape
        fn = dist.Gamma(jnp.broadcast_to(self.concentration, shape), jnp.broadcast_to(self.rate, shape))
        if self._event_shape:
            fn = fn.to_event(len(self._event_shape))
        return {"rate": emission_site(f"{name}_rate", fn)}

    @classmethod
    def weakly_informative(cls, data, **overrides) -> "Poisson":
        """A data-scaled Gamma prior for counts ``data (..., T, *event_shape)`` (NaN = missing).

        ``event_shape`` (override, default ``()``) says how many trailing axes are the event.
        With ``m`` the mean observed count per event entry (``1`` when zero):
        ``concentration = 1.0`` and ``rate = concentration / m``, i.e. an exponential prior
        on the Poisson rate with mean ``m`` -- broad (its standard deviation equals its mean)
        yet on the scale of the data.  ``concentration`` and ``rate`` may be overridden; when
        only ``concentration`` is given, ``rate = concentration / m`` keeps the prior mean.

        ``data=None`` gives the prior with ``m = 1``.  Raises ``ValueError`` naming ``data`` when
        it has no observed count (all NaN), non-integer, negative or non-numeric values.
        """
        check_overrides(overrides, ("concentration", "rate", "event_shape"), "Poisson.weakly_informative")
        event_shape = _check_event_shape(overrides.get("event_shape", ()))
        if data is None:
            mean = np.ones(event_shape)
        elif not is_concrete(data):  # traced data (jit_model_args, CollapsedSVI, vmap): no value checks
            n_event = len(event_shape)
            if jnp.ndim(data) < 1 + n_event or tuple(jnp.shape(data)[jnp.ndim(data) - n_event:]) != event_shape:
                raise ValueError(f"`data` must have shape (..., T, *{event_shape}), got {jnp.shape(data)}.")
            flat = jnp.asarray(data, jnp.result_type(float)).reshape((-1,) + event_shape)
            observed = ~jnp.isnan(flat)
            count = observed.sum(0)
            mean = jnp.where(observed, flat, 0.0).sum(0) / jnp.maximum(count, 1)
            mean = jnp.where((count > 0) & (mean > 0), mean, 1.0)
        else:
            arr = as_data_array("data", data)
            arr = np.asarray(arr)
            shape = arr.shape
            n_event = len(event_shape)
            if arr.ndim < 1 + n_event or tuple(shape[arr.ndim - n_event :]) != event_shape:
                raise ValueError(f"`data` must have shape (..., T, *{event_shape}), got {shape}.")
            check_integer("data", arr, low=0, allow_nan=True)
            observed_rows("data", arr, need=1, event_ndim=n_event)
            flat = arr.astype(float).reshape((-1,) + event_shape)
            observed = ~np.isnan(flat)
            count = observed.sum(0)
            mean = np.where(observed, flat, 0.0).sum(0) / np.maximum(count, 1)
            mean = np.where((count > 0) & (mean > 0), mean, 1.0)
        concentration = overrides.get("concentration", 1.0)
        rate = overrides.get("rate", jnp.asarray(concentration) / mean if not is_concrete(mean) else np.asarray(concentration) / mean)
        return cls(concentration, rate, event_shape)
