"""Diagonal-covariance Gaussian emissions with an independent Normal-Gamma prior per dimension.

Model, for each state ``k`` and dimension ``d`` (Murphy 2007, "Conjugate Bayesian analysis of
the Gaussian distribution", §3)::

    precision_kd ~ Gamma(concentration_d, rate_d)                    (rate parameterization)
    mu_kd | precision_kd ~ N(loc_d, 1 / (mean_precision_d * precision_kd))
    y_td | z_t = k ~ N(mu_kd, 1 / precision_kd)

Murphy's ``(mu_0, kappa_0, alpha_0, beta_0)`` are ``(loc, mean_precision, concentration,
rate)`` here.  Dimensions are independent a priori and a posteriori, so every closed form is
a sum over ``d`` of the univariate one.
"""

from __future__ import annotations

import math
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import gammaln

from numpyro_hdphmm._core.segments import label_counts, label_sums
from numpyro_hdphmm._core.validation import (
    as_data_array,
    check_finite,
    check_positive,
    default_float_dtype,
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
from numpyro_hdphmm.emissions._data import (
    check_data_spread,
    check_deviation_range,
    check_dim,
    dimension_hint,
    observed_rows,
    vector_data,
)
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["DiagonalGaussian"]

_LOG_2PI = math.log(2.0 * math.pi)


def _sample_normal_gamma(rng_key, loc, mean_precision, concentration, rate, shape):
    """``precision ~ Gamma(concentration, rate)`` drawn in log space, ``mu ~ N(loc, 1 /
    (mean_precision precision))``: a dict of two arrays of shape ``shape``."""
    dtype = jnp.result_type(loc)
    k1, k2 = jax.random.split(rng_key)
    log_tau = sample_log_gamma(k1, concentration, rate, shape, dtype)
    z = jax.random.normal(k2, shape, dtype)
    mu = loc + z * jnp.exp(-0.5 * (log_tau + jnp.log(mean_precision)))
    return {"mu": mu, "precision": jnp.exp(log_tau)}


@jax.tree_util.register_pytree_node_class
class DiagonalGaussian(EmissionFamily):
    """Gaussian emissions with diagonal covariance and a per-dimension Normal-Gamma prior.

    Args:
        loc: ``(*batch, D)`` prior mean of ``mu`` (Murphy's ``mu_0``); ``D >= 1``.
        mean_precision: ``(*batch, D)``, ``(D,)`` or scalar ``> 0``: pseudo-count of the mean
            (``kappa_0``); ``mu | precision`` has precision ``mean_precision * precision``.
        concentration: as above, ``> 0``: Gamma shape of the precision (``alpha_0``).
        rate: as above, ``> 0``: Gamma rate of the precision (``beta_0``).

    All four are broadcast to a common shape ``(*batch, D)`` and stored that way.  The
    parameters are ``mu (K, D)`` and ``precision (K, D)`` (inverse variances).

    Sufficient statistics are the dict ``{"count", "sum", "sum_sq"}``, each ``(K, D)``: the
    weighted number of steps, ``sum_t w_tk z_td`` and ``sum_t w_tk z_td^2`` of the observations in
    the prior's frame ``z_td = (y_td - loc_d) / sqrt(rate_d / concentration_d)`` (see
    :meth:`sufficient_statistics`).
    """

    param_names = ("mu", "precision")
    conjugate = True
    _hyper_names = ("loc", "mean_precision", "concentration", "rate")

    def __init__(self, loc, mean_precision=1.0, concentration=1.0, rate=1.0):
        loc, mean_precision, concentration, rate = (
            as_array(v, n) for v, n in ((loc, "loc"), (mean_precision, "mean_precision"), (concentration, "concentration"), (rate, "rate"))
        )
        if jnp.ndim(loc) < 1:
            raise ValueError(
                f"`loc` must have at least one dimension (shape (D,)), got shape {jnp.shape(loc)}."
            )
        check_finite("loc", loc)
        check_positive("mean_precision", mean_precision)
        check_positive("concentration", concentration)
        check_positive("rate", rate)
        named = {
            "loc": loc,
            "mean_precision": mean_precision,
            "concentration": concentration,
            "rate": rate,
        }
        shape = broadcast_named(named)
        if shape[-1] != jnp.shape(loc)[-1]:
            raise ValueError(
                f"`loc` has {jnp.shape(loc)[-1]} dimension(s) but the other hyperparameters "
                f"broadcast to {shape[-1]}; give `loc` the full event shape (D,)."
            )
        dtype = float_dtype(*named.values())
        for key, value in named.items():
            setattr(self, key, jnp.broadcast_to(as_float(value, dtype), shape))

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.loc, self.mean_precision, self.concentration, self.rate), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.loc, obj.mean_precision, obj.concentration, obj.rate = children
        return obj

    @classmethod
    def _from_hypers(cls, loc, mean_precision, concentration, rate):
        return cls.tree_unflatten(None, (loc, mean_precision, concentration, rate))

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.loc)[-1:])

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.loc)[:-1])

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """Shape ``(..., T, D)``, real-valued, no infinities (NaN = missing), and deviations from
        ``loc`` that fit the family's float type (see :meth:`check_range`)."""
        y = as_data_array(name, y)
        D = self.event_shape[0]
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != D:
            raise ValueError(f"`{name}` must have shape (..., T, {D}), got {jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)
        self.check_range(y, name)

    def check_range(self, y, name: str = "obs") -> None:
        """Raise ``ValueError`` (naming ``name``, suggesting to rescale or enable float64) when the
        largest squared deviation ``(y_td - loc_d)^2`` or the total of the scaled squared deviations
        ``z_td^2`` (the statistics, :meth:`sufficient_statistics`) exceeds the float type's maximum
        times :data:`~numpyro_hdphmm._core.validation.FLOAT_HEADROOM`.  Concrete values and prior
        (batch ``()``) families only."""
        if is_concrete(y, self.loc, self.rate, self.concentration) and self.batch_shape == ():
            variance = np.asarray(self.rate, float) / np.asarray(self.concentration, float)
            check_deviation_range(name, y, self.loc, np.diag(variance), np.dtype(self.loc.dtype), "the prior mean `loc`")

    def prepare(self, y):
        """``y (T, D) -> (x (T, D), valid (T,))``: a row with any NaN is a missing step.

        Missing rows are replaced by zeros (every log density stays finite) and marked
        ``valid = False``.
        """
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        valid = ~jnp.any(jnp.isnan(y), axis=-1)
        x = jnp.where(valid[..., None], y, jnp.zeros((), y.dtype))
        return x, valid

    # ------------------------------------------------------------------ conjugate machinery
    #
    # Numerics: the closed forms work in the prior's frame ``z_d = (y_d - loc_d) / s_d`` with the
    # prior scale ``s_d = sqrt(rate_d / concentration_d)`` (the standard deviation of a state whose
    # precision is the prior mean ``concentration / rate``).  The Normal-Gamma family is closed
    # under this map: in the frame the prior is ``NG(0, kappa_0, alpha_0, alpha_0)``; the posterior
    # maps back by ``mu_n = loc + s mu_n'``, ``beta_n = s^2 beta_n'``, and densities gain the
    # Jacobian ``1 / s_d`` per observed value.  The statistics are O(1) per step for data on the
    # prior's scale, whatever their offset and units.
    def _scale(self):
        """``s (*batch, D)``: the prior scale of the frame."""
        return jnp.sqrt(self.rate / self.concentration)

    def sufficient_statistics(self, x, weights):
        """``x (T, D)``, ``weights (T, K)`` -> ``{"count", "sum", "sum_sq"}``, each ``(K, D)``: the
        weighted number of steps and the weighted sums of ``z_td = (x_td - loc_d) / s_d`` and of
        ``z_td^2`` (the prior's frame, see the comment above; prior of batch shape ``()``)."""
        weights = jnp.asarray(weights)
        dtype = jnp.result_type(x, weights)
        z = ((x.astype(dtype) - self.loc) / self._scale()).astype(dtype)
        weights = weights.astype(dtype)
        count = jnp.sum(weights, axis=0)
        s1 = jnp.matmul(weights.T, z, precision=HIGHEST)
        s2 = jnp.matmul(weights.T, z * z, precision=HIGHEST)
        return {"count": jnp.broadcast_to(count[:, None], s1.shape), "sum": s1, "sum_sq": s2}

    def label_statistics(self, x, labels, num_states: int):
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)``: segment sums of ``z`` and
        ``z^2`` by label (:func:`~numpyro_hdphmm._core.segments.label_sums`), ``O(T D)``."""
        dtype = jnp.result_type(x, float)
        z = ((x.astype(dtype) - self.loc) / self._scale()).astype(dtype)
        D = z.shape[-1]
        sums = label_sums(jnp.concatenate([z, z * z], axis=-1), labels, num_states)
        count = label_counts(labels, num_states, dtype)
        return {"count": jnp.broadcast_to(count[:, None], (num_states, D)), "sum": sums[:, :D], "sum_sq": sums[:, D:]}

    def _frame_posterior(self, stats):
        """Normal-Gamma update in the frame, Murphy (2007) §3.3 eqs. (86)-(89) with
        ``mu_0' = 0``, ``beta_0' = alpha_0``: ``(mu_n', kappa_n, alpha_n, beta_n')``.

        With ``S = sum w z`` and ``Q = sum w z^2``: ``kappa_n = kappa_0 + n``, ``mu_n' = S /
        kappa_n``, ``alpha_n = alpha_0 + n/2``, ``beta_n' = beta_0' + (Q - S^2 / kappa_n) / 2``,
        which equals eq. (89) (``sum (z - zbar)^2 / 2 + kappa_0 n zbar^2 / (2 kappa_n)``) without a
        division by ``n`` (so ``n = 0`` and fractional weights are fine); clamped below at
        ``beta_0'`` (its exact lower bound, by Cauchy-Schwarz) against round-off.
        """
        n, s1, s2 = stats["count"], stats["sum"], stats["sum_sq"]
        k0, a0 = self.mean_precision, self.concentration
        kn = k0 + n
        mn = s1 / kn
        an = a0 + 0.5 * n
        bn = jnp.maximum(a0 + 0.5 * (s2 - s1 * s1 / kn), a0)
        return mn, kn, an, bn

    def posterior(self, stats) -> "DiagonalGaussian":
        """The Normal-Gamma posterior (Murphy 2007 eqs. (86)-(89)); batch shape ``(K,)``:
        ``mu_n = loc + s mu_n'``, ``beta_n = s^2 beta_n'`` from the frame."""
        mn, kn, an, bn = self._frame_posterior(stats)
        s = self._scale()
        return self._from_hypers(self.loc + s * mn, kn, an, s * s * bn)

    def log_marginal_likelihood(self, stats) -> jax.Array:
        """Murphy (2007) §3.5 eq. (95), summed over dimensions: shape ``(K,)``.

        ``log p(D) = sum_d [log Gamma(a_n) - log Gamma(a_0) + a_0 log b_0 - a_n log b_n
        + (log k_0 - log k_n) / 2 - n/2 log(2 pi)]``, with ``n`` the (possibly fractional)
        weighted count; evaluated in the frame (``b_0' = a_0``) plus the Jacobian ``-n log s_d``.
        """
        _, kn, an, bn = self._frame_posterior(stats)
        n = stats["count"]
        per_dim = (
            gamma_log_normalizer(an, bn)
            - gamma_log_normalizer(self.concentration, self.concentration)
            + 0.5 * (jnp.log(self.mean_precision) - jnp.log(kn))
            - 0.5 * n * _LOG_2PI
            - n * jnp.log(self._scale())
        )
        return jnp.sum(per_dim, axis=-1)

    def log_predictive(self, x, stats) -> jax.Array:
        """Student-t posterior predictive, Murphy (2007) §3.6 eq. (100), summed over ``d``.

        ``y_d | D ~ t_{2 a_n}(mu_n, b_n (k_n + 1) / (a_n k_n))`` (second argument = squared
        scale), evaluated at ``z = (x - loc) / s`` in the frame minus ``log s_d``.  ``x (D,)``,
        returns ``(K,)``.
        """
        mn, kn, an, bn = self._frame_posterior(stats)
        s = self._scale()
        z = (x - self.loc) / s
        df = 2.0 * an
        scale_sq = bn * (kn + 1.0) / (an * kn)
        z2 = (z - mn) ** 2 / (df * scale_sq)
        per_dim = (
            gammaln(0.5 * (df + 1.0))
            - gammaln(0.5 * df)
            - 0.5 * (jnp.log(df) + math.log(math.pi) + jnp.log(scale_sq))
            - 0.5 * (df + 1.0) * jnp.log1p(z2)
            - jnp.log(s)
        )
        return jnp.sum(per_dim, axis=-1)

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``precision ~ Gamma(alpha, beta)``, ``mu ~ N(loc, 1/(kappa precision))``.

        The precision is drawn in log space so that the standard deviation of ``mu`` stays
        finite even when the precision underflows.  Shapes ``sample_shape + (*batch, D)``.
        """
        return _sample_normal_gamma(rng_key, self.loc, self.mean_precision, self.concentration, self.rate,
                                    tuple(sample_shape) + jnp.shape(self.loc))

    def sample_posterior(self, rng_key, stats):
        """``(mu_k, precision_k)`` from each state's Normal-Gamma posterior, drawn in the frame:
        ``precision = precision' / s^2`` (log space), ``mu = loc + s mu'``.  ``(K, D)`` each."""
        mn, kn, an, bn = self._frame_posterior(stats)
        s = self._scale()
        draw = _sample_normal_gamma(rng_key, mn, kn, an, bn, jnp.shape(mn))
        return {"mu": self.loc + s * draw["mu"], "precision": draw["precision"] / (s * s)}

    def log_prior(self, params) -> jax.Array:
        """``sum_d [log Gamma(tau | alpha, beta) + log N(mu | loc, 1/(kappa tau))]``: ``(K,)``."""
        mu, tau = params["mu"], params["precision"]
        prec_mu = self.mean_precision * tau
        log_normal = 0.5 * (jnp.log(prec_mu) - _LOG_2PI) - 0.5 * prec_mu * (mu - self.loc) ** 2
        return jnp.sum(gamma_log_prob(tau, self.concentration, self.rate) + log_normal, axis=-1)

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``x (T, D)``, ``mu, precision (K, D)`` -> ``(T, K)`` Gaussian log densities."""
        mu, tau = params["mu"], params["precision"]
        const = 0.5 * jnp.sum(jnp.log(tau) - _LOG_2PI, axis=-1)  # (K,)
        quad = jnp.sum(tau[None] * (x[:, None, :] - mu[None]) ** 2, axis=-1)  # (T, K)
        return const[None, :] - 0.5 * quad

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t = mu_{z_t} + eps_t / sqrt(precision_{z_t})``: ``(T, D)``."""
        mu = params["mu"][states]
        tau = params["precision"][states]
        return mu + jax.random.normal(rng_key, mu.shape, mu.dtype) * jax.lax.rsqrt(tau)

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats) -> jax.Array:
        """``E_q[log N(x_t | mu_k, 1/precision_k)]`` under the Normal-Gamma posterior
        (``tau ~ Gamma(a_n, b_n)``, ``mu | tau ~ N(m_n, 1/(k_n tau))``; Bishop 2006 eq. 10.46 form):
        ``sum_d [(psi(a_n) - log b_n - log 2 pi) / 2 - (a_n / b_n (x - m_n)^2 + 1 / k_n) / 2]``,
        ``x (T, D)`` -> ``(T, K)``.  Evaluated in the prior's frame (``z = (x - loc) / s``, the
        posterior's ``m_n', b_n'`` there) minus the Jacobian ``sum_d log s_d``."""
        mn, kn, an, bn = self._frame_posterior(stats)
        s = self._scale()
        z = (x - self.loc) / s
        const = 0.5 * jnp.sum(jax.scipy.special.digamma(an) - jnp.log(bn) - _LOG_2PI - 1.0 / kn, axis=-1)  # (K,)
        const = const - jnp.sum(jnp.log(s), axis=-1)
        quad = jnp.sum((an / bn)[None] * (z[:, None, :] - mn[None]) ** 2, axis=-1)  # (T, K)
        return const[None, :] - 0.5 * quad

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Sites ``f"{name}_precision"`` (Gamma) then ``f"{name}_mu"`` (Normal), each ``(K, D)``.

        Each site has batch shape ``(K,)`` and event shape ``(D,)``.
        """
        shape = (num_states,) + self.event_shape
        conc = jnp.broadcast_to(self.concentration, shape)
        rate = jnp.broadcast_to(self.rate, shape)
        precision = emission_site(f"{name}_precision", dist.Gamma(conc, rate).to_event(1))
        loc = jnp.broadcast_to(self.loc, shape)
        scale = jax.lax.rsqrt(self.mean_precision * precision)
        mu = emission_site(f"{name}_mu", dist.Normal(loc, scale).to_event(1))
        return {"mu": mu, "precision": precision}

    @classmethod
    def weakly_informative(cls, data, **overrides) -> "DiagonalGaussian":
        """A data-scaled prior for ``data (..., T, D)`` (NaN = missing).

        With ``m_d`` and ``v_d`` the per-dimension mean and variance of the observed values
        (``v_d = 1`` when zero: a constant dimension):

        * ``loc = m``: states are centred on the data a priori;
        * ``mean_precision = 0.1``: ``mu`` has prior standard deviation ``sqrt(10) ~ 3.2``
          times the state's own standard deviation;
        * ``concentration = 1.0``, ``rate = concentration * v``: the prior mean of the
          precision is ``1 / v`` (a state as spread as the pooled data) with an exponential,
          i.e. very broad, shape.

        Any of ``loc``, ``mean_precision``, ``concentration``, ``rate`` may be overridden; when
        ``concentration`` is given but ``rate`` is not, ``rate = concentration * v``.

        ``data=None`` gives the prior for standardized data (``m = 0``, ``v = 1``) with ``D`` from
        the ``loc`` override, else the keyword ``dim``, else 1.  Raises ``ValueError`` naming
        ``data`` for data that cannot scale a prior: a dimension with fewer than two observed
        values (without a ``rate`` override), infinities, non-numeric values, or a spread beyond
        the float type's range.
        """
        dim = overrides.pop("dim", None)
        check_overrides(overrides, cls._hyper_names, "DiagonalGaussian.weakly_informative")
        if data is None:
            D = check_dim(dim, dimension_hint(overrides, ("loc", -1)))
            mean, var = np.zeros(D), np.ones(D)
        elif not is_concrete(data):  # traced data (jit_model_args, CollapsedSVI, vmap): no value checks
            flat = jnp.asarray(vector_data(data, dim), jnp.result_type(float))
            flat = flat.reshape(-1, flat.shape[-1])
            observed = ~jnp.isnan(flat)
            count = jnp.maximum(observed.sum(0), 1)
            mean = jnp.where(observed, flat, 0.0).sum(0) / count
            var = jnp.where(observed, (flat - mean) ** 2, 0.0).sum(0) / count
            var = jnp.where(var > 0, var, 1.0)
        else:
            arr = np.asarray(vector_data(data, dim), dtype=float)
            observed_rows("data", arr, need=1, event_ndim=0)  # no steps, infinities, all missing
            flat = arr.reshape(-1, arr.shape[-1])
            observed = ~np.isnan(flat)
            count = observed.sum(0)
            if "rate" not in overrides and np.any(count < 2):
                d = int(np.argmin(count))
                raise ValueError(
                    f"`data` has {int(count[d])} observed value(s) in dimension {d}; the data-scaled prior needs at "
                    "least two per dimension to estimate a spread. Pass more data, or give `rate` explicitly."
                )
            safe = np.where(observed, flat, 0.0)
            mean = safe.sum(0) / np.maximum(count, 1)
            var = np.where(observed, (flat - mean) ** 2, 0.0).sum(0) / np.maximum(count, 1)
            check_data_spread("data", var, default_float_dtype(), "rate" not in overrides)
            var = np.where(var > 0, var, 1.0)
        concentration = overrides.get("concentration", 1.0)
        return cls(
            loc=overrides.get("loc", mean),
            mean_precision=overrides.get("mean_precision", 0.1),
            concentration=concentration,
            rate=overrides.get("rate", jnp.asarray(concentration) * var if not is_concrete(var) else np.asarray(concentration) * var),
        )
