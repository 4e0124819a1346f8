r"""Shifted negative-binomial durations (Johnson & Willsky 2013, Sec. 5 and Sec. 4.4).

For each state ``k``::

    p_k ~ Beta(concentration1, concentration0)
    r_k ~ a finite prior pi(r) on positive integers r_values   (default: uniform on 1..10)
          or Gamma(r_concentration, r_rate) on a real r > 0      (NegativeBinomial.gamma_r)
    D - 1 | r_k, p_k ~ NB(r_k, p_k):
        P(D = d) = C(d - 2 + r, d - 1) p^(d - 1) (1 - p)^r
                 = Gamma(d - 1 + r) / (Gamma(r) (d - 1)!) p^(d - 1) (1 - p)^r,        d = 1, 2, ...

i.e. ``d - 1`` counts the successes (probability ``p``) before the ``r``-th failure; the mean
duration is ``1 + r p / (1 - p)``.  With ``r = 1`` the law is the geometric one.

Posterior given ``n_k`` complete durations ``d_i`` (``x_i = d_i - 1``, ``S_k = sum_i x_i``):

* ``p_k | r_k ~ Beta(concentration1 + S_k, concentration0 + n_k r_k)`` (Beta-NB conjugacy);
* ``r_k`` with ``p_k`` integrated out (the Beta-negative-binomial marginal)::

      p(r | x) ∝ pi(r) prod_i Gamma(x_i + r) / (Gamma(r) x_i!)
                 * B(concentration1 + S_k, concentration0 + n_k r) / B(concentration1, concentration0)

  With the finite prior this is a categorical distribution over ``r_values``, drawn exactly
  (Johnson & Willsky 2013, Sec. 4.4 use the same finite prior on ``r`` with ``p`` integrated
  out); with the Gamma prior, one slice-sampling update of ``log r`` (Neal 2003,
  :func:`numpyro_hdphmm._core.slice_sampling.slice_sample`, the density including the Jacobian
  ``r``) started at the current ``r``, which leaves ``p(r | x)`` invariant.  Then ``p_k | r_k`` is
  drawn exactly.  The pair ``(r, p)`` is thus an exact draw (finite prior) or a move of a
  collapsed Gibbs scheme that leaves ``p(r, p | x)`` invariant (Gamma prior).  A state without
  durations gets an exact prior draw of both.

The finite prior keeps ``r`` an integer (:attr:`NegativeBinomial.integer_r`), which the
state-space embedding of an HSMM with negative-binomial durations needs (each state a chain of
``r`` phases; Johnson & Willsky 2013, Sec. 4.4).
"""

from __future__ import annotations

import operator
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.scipy.special import betainc, betaln
from numpyro.distributions import constraints

from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.phases import negative_binomial_phases
from numpyro_hdphmm._core.slice_sampling import slice_sample
from numpyro_hdphmm._core.validation import as_parameter, is_concrete
from numpyro_hdphmm.durations._numerics import (integer_count_coefficients, log_count_coefficient,
                                                negative_binomial_log_pmf)
from numpyro_hdphmm.durations.base import (
    DurationFamily,
    as_hyperparameter,
    below_support,
    underflow_floor,
    check_mean_duration,
    check_overrides,
    duration_site,
    duration_statistics,
    open_unit_interval,
)
from numpyro_hdphmm.durations.poisson import positive_gamma

__all__ = ["NegativeBinomial", "FiniteDiscrete"]


class FiniteDiscrete(dist.Distribution):
    """A distribution on a finite set of positive integers ``values`` (static) with probabilities
    ``probs (..., R)``: the VALUE of a draw is the integer itself (not its index).

    ``log_prob`` looks the value up (``-inf`` off the set); ``enumerate_support`` lists ``values``.
    Batch shape ``probs.shape[:-1]``, event shape ``()``.  The declared support is the positive
    integers (NumPyro has no finite-set constraint); the values outside ``values`` have
    probability 0.
    """

    arg_constraints = {"probs": constraints.simplex}
    has_enumerate_support = True
    pytree_data_fields = ("probs",)
    pytree_aux_fields = ("values",)

    def __init__(self, values, probs, *, validate_args=None):
        self.values = tuple(int(v) for v in values)
        self.probs = jnp.asarray(probs)
        if jnp.shape(self.probs)[-1:] != (len(self.values),):
            raise ValueError(f"`probs` must have a last axis of size len(values) = {len(self.values)}, "
                             f"got shape {jnp.shape(self.probs)}.")
        super().__init__(batch_shape=jnp.shape(self.probs)[:-1], event_shape=(), validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.positive_integer

    def _values(self):
        return jnp.asarray(self.values, jnp.int32)

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        logits = jnp.log(jnp.broadcast_to(self.probs, shape + (len(self.values),)))
        return self._values()[jax.random.categorical(key, logits)]

    def log_prob(self, value):
        value = jnp.asarray(value)
        match = value[..., None] == self._values()
        log_p = jnp.log(self.probs)
        picked = jnp.sum(jnp.where(match, log_p, 0.0), -1)
        return jnp.where(jnp.any(match, -1), picked, -jnp.inf)

    def enumerate_support(self, expand=True):
        values = self._values().reshape((-1,) + (1,) * len(self.batch_shape))
        return jnp.broadcast_to(values, values.shape[:1] + tuple(self.batch_shape)) if expand else values

    @property
    def mean(self):
        return jnp.sum(self.probs * self._values(), -1)

    @property
    def variance(self):
        v = self._values()
        return jnp.sum(self.probs * v**2, -1) - self.mean**2


def _check_r_values(r_values) -> Tuple[int, ...]:
    try:
        values = tuple(r_values)
    except TypeError:
        raise ValueError(f"`r_values` must be a sequence of distinct positive integers, got {r_values!r}.") from None
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)):
            raise ValueError(f"`r_values` must hold positive integers, got {v!r}.")
        try:
            iv = operator.index(v)
        except TypeError:
            if isinstance(v, (float, np.floating)) and float(v).is_integer():
                iv = int(v)
            else:
                raise ValueError(f"`r_values` must hold positive integers, got {v!r}.") from None
        if iv < 1:
            raise ValueError(f"`r_values` must hold positive integers, got {iv}.")
        out.append(int(iv))
    if not out:
        raise ValueError("`r_values` must hold at least one positive integer, got an empty sequence.")
    if len(set(out)) != len(out):
        raise ValueError(f"`r_values` must hold distinct integers, got {tuple(out)}.")
    return tuple(out)


def _check_r_probs(r_probs, size: int):
    if r_probs is None:
        return jnp.full((size,), 1.0 / size, jnp.result_type(float))
    probs = as_parameter("r_probs", r_probs)
    if jnp.shape(probs) != (size,):
        raise ValueError(f"`r_probs` must have shape ({size},) (one probability per entry of r_values), "
                         f"got shape {jnp.shape(probs)}.")
    if is_concrete(probs):
        v = np.asarray(probs, float)
        if not np.all(np.isfinite(v)) or np.any(v < 0) or abs(v.sum() - 1.0) > 1e-6:
            raise ValueError(f"`r_probs` must be non-negative and sum to 1, got {v}.")
        if np.any(v == 0):
            raise ValueError(f"`r_probs` must be positive (drop the values of r_values with probability 0), got {v}.")
    return jnp.asarray(probs, jnp.result_type(probs, float))


@jax.tree_util.register_pytree_node_class
class NegativeBinomial(DurationFamily):
    """Shifted negative-binomial durations ``D - 1 ~ NB(r_k, p_k)`` (see the module docstring).

    Args:
        concentration1: Beta ``a > 0`` of the prior on ``p`` (pseudo-count of successes).
        concentration0: Beta ``b > 0`` (pseudo-count of failures); ``E[p / (1 - p)] = a / (b - 1)``
            is finite for ``b > 1``.
        r_values: the support of the finite prior on ``r``: distinct positive integers (static;
            default ``1, ..., 10``).
        r_probs: their prior probabilities, shape ``(R,)`` (default uniform).

    ``NegativeBinomial.gamma_r(r_concentration, r_rate, ...)`` instead puts a Gamma prior on a
    real ``r > 0``.  ``concentration1``/``concentration0`` are scalars or ``(K,)`` vectors.
    Parameters (sites ``f"{name}_duration_r"`` then ``f"{name}_duration_p"``): ``r (K,)`` (int32
    with the finite prior, float with the Gamma prior) and ``p (K,)``.
    """

    param_names = ("r", "p")
    _shared_names = ("r_probs",)

    @property
    def conjugate(self) -> bool:
        """An exact joint draw of ``(r, p)`` given complete durations: with the finite prior on
        ``r`` only (the Gamma prior's ``r`` moves by slice sampling, an MCMC move: a model class
        then leaves ``r`` and ``p`` to the inner kernel)."""
        return self.integer_r

    def __init__(self, concentration1=1.0, concentration0=2.0, r_values=tuple(range(1, 11)), r_probs=None):
        c1 = as_hyperparameter("concentration1", concentration1)
        c0 = as_hyperparameter("concentration0", concentration0)
        self.r_values = _check_r_values(r_values)
        probs = _check_r_probs(r_probs, len(self.r_values))
        dtype = jnp.result_type(c1, c0, probs)
        self.concentration1, self.concentration0, self.r_probs = c1.astype(dtype), c0.astype(dtype), probs.astype(dtype)
        self.r_concentration = self.r_rate = None

    @classmethod
    def gamma_r(cls, r_concentration=2.0, r_rate=0.4, concentration1=1.0, concentration0=2.0) -> "NegativeBinomial":
        """Negative-binomial durations with a ``Gamma(r_concentration, r_rate)`` prior (rate
        parameterization) on a real ``r > 0``, updated by slice sampling with ``p`` integrated out
        (module docstring); ``p ~ Beta(concentration1, concentration0)`` as in the constructor."""
        c1 = as_hyperparameter("concentration1", concentration1)
        c0 = as_hyperparameter("concentration0", concentration0)
        a = as_hyperparameter("r_concentration", r_concentration)
        b = as_hyperparameter("r_rate", r_rate)
        dtype = jnp.result_type(c1, c0, a, b)
        obj = object.__new__(cls)
        obj.concentration1, obj.concentration0 = c1.astype(dtype), c0.astype(dtype)
        obj.r_concentration, obj.r_rate = a.astype(dtype), b.astype(dtype)
        obj.r_values = obj.r_probs = None
        return obj

    # ------------------------------------------------------------------ pytree
    @property
    def integer_r(self) -> bool:
        """``True`` with the finite prior on ``r`` (integer ``r``, as the phase embedding needs)."""
        return self.r_values is not None

    @property
    def _hyper_names(self):
        if self.integer_r:
            return ("concentration1", "concentration0", "r_probs")
        return ("concentration1", "concentration0", "r_concentration", "r_rate")

    def _static(self):
        return (self.r_values,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        (obj.r_values,) = aux
        if obj.r_values is not None:
            obj.concentration1, obj.concentration0, obj.r_probs = children
            obj.r_concentration = obj.r_rate = None
        else:
            obj.concentration1, obj.concentration0, obj.r_concentration, obj.r_rate = children
            obj.r_probs = None
        return obj

    def __repr__(self) -> str:
        base = super().__repr__()[:-1]
        return base + (f", r_values={self.r_values})" if self.integer_r else ")")

    # ------------------------------------------------------------------ prior
    def _r_prior(self, num_states: int):
        if self.integer_r:
            return FiniteDiscrete(self.r_values, jnp.broadcast_to(self.r_probs, (num_states, len(self.r_values))))
        return dist.Gamma(self._per_state(self.r_concentration, num_states), self._per_state(self.r_rate, num_states))

    def sample_sites(self, name: str, num_states: int):
        """Sites ``f"{name}_duration_r"`` (:class:`FiniteDiscrete` or ``Gamma``) and
        ``f"{name}_duration_p"`` (``Beta``), each of shape ``(K,)`` (event ``(K,)``)."""
        self.check_num_states(num_states)
        r = duration_site(name, "r", self._r_prior(num_states).to_event(1))
        p_prior = dist.Beta(self._per_state(self.concentration1, num_states), self._per_state(self.concentration0, num_states))
        return {"r": r, "p": duration_site(name, "p", p_prior.to_event(1))}

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``r`` from its prior and ``p ~ Beta(concentration1, concentration0)``, shape ``sample_shape``."""
        k_r, k_p = jax.random.split(rng_key)
        shape = jnp.broadcast_shapes(tuple(sample_shape), jnp.shape(self.concentration1), jnp.shape(self.concentration0))
        if self.integer_r:
            r = jnp.asarray(self.r_values, jnp.int32)[jax.random.categorical(k_r, jnp.log(self.r_probs), shape=shape)]
        else:
            shape = jnp.broadcast_shapes(shape, jnp.shape(self.r_concentration), jnp.shape(self.r_rate))
            r = positive_gamma(k_r, jnp.broadcast_to(self.r_concentration, shape), self.r_rate)
        p = draws.beta(k_p, jnp.broadcast_to(self.concentration1, shape), jnp.broadcast_to(self.concentration0, shape))
        return {"r": r, "p": open_unit_interval(p)}

    # ------------------------------------------------------------------ law
    def log_pmf(self, params, durations):
        """``log Gamma(x + r) - log Gamma(r) - log x! + x log p + r log(1 - p)``, ``x = d - 1``:
        ``S + (K,)``, ``-inf`` for ``d < 1``.

        Evaluated in Loader's saddle-point form
        (:func:`~numpyro_hdphmm.durations._numerics.negative_binomial_log_pmf`), accurate in float32
        for durations up to ``10^5`` and beyond and for extreme ``r`` and ``p``."""
        p = params["p"]
        r = jnp.asarray(params["r"]).astype(p.dtype)
        bad, d = below_support(durations)
        x = (d.astype(p.dtype) - 1.0)[..., None]
        lp = negative_binomial_log_pmf(x, r, p)
        return jnp.where(bad[..., None], -jnp.inf, lp)

    def mean(self, params):
        """``1 + r_k p_k / (1 - p_k)``: ``(K,)``."""
        p = params["p"]
        return 1.0 + jnp.asarray(params["r"]).astype(p.dtype) * p / (1.0 - p)

    def log_survival(self, params, durations):
        """``log P(D >= d) = log I_p(d - 1, r)`` (the regularized incomplete beta function: ``P(X >= a)
        = I_p(a, r)`` for ``X ~ NB(r, p)`` counting successes), ``0`` for ``d <= 1``: ``S + (K,)``; where
        it underflows, its tail extrapolated from the pmf
        (:func:`~numpyro_hdphmm.durations.base.underflow_floor`).  With the finite prior on ``r`` only:
        JAX's ``betainc`` has no gradient in ``r``, so the Gamma prior's real ``r`` raises
        ``NotImplementedError`` and :meth:`log_survival_table` sums the pmf (differentiably)."""
        if not self.integer_r:
            raise NotImplementedError("NegativeBinomial.gamma_r: no differentiable closed-form survival function")
        p = params["p"]
        r = jnp.asarray(params["r"]).astype(p.dtype)
        d = jnp.maximum(jnp.asarray(durations), 1)
        a = (d.astype(p.dtype) - 1.0)[..., None]
        tail = betainc(jnp.maximum(a, 1.0), r, p)
        return underflow_floor(jnp.where(a == 0, 1.0, tail), self.log_pmf(params, d),
                               self.log_pmf(params, d + 1))

    def phase_embedding(self, params):
        """With the finite prior on ``r``: the ``max(r_values)`` phases of each state
        (:func:`numpyro_hdphmm._core.phases.negative_binomial_phases`); ``None`` with the Gamma prior."""
        if not self.integer_r:
            return None
        return negative_binomial_phases(params["r"], params["p"], max(self.r_values))

    # ------------------------------------------------------------------ posterior
    def log_r_marginal(self, r, durations, states, weights, num_states: int):
        """``log p(x_k | r)`` with ``p`` integrated out (module docstring), for each state ``k`` and each
        candidate ``r``: ``r`` of shape ``(K, ...)`` (state ``k``'s candidates in row ``k``), returns the
        same shape.  ``sum_i w_i 1[s_i = k] log [Gamma(x_i + r) / (Gamma(r) x_i!)] + log B(concentration1
        + S_k, concentration0 + n_k r) - log B(concentration1, concentration0)``, the coefficients by
        :func:`~numpyro_hdphmm.durations._numerics.log_count_coefficient` (accurate in float32 for long
        durations)."""
        dtype = self.concentration1.dtype
        r = jnp.asarray(r, dtype)
        stats = duration_statistics(durations, states, weights, num_states, dtype)
        x = jnp.asarray(durations).astype(dtype) - 1.0
        w = jnp.asarray(weights, dtype)
        states = jnp.asarray(states)
        extra = (1,) * (r.ndim - 1)
        r_i = r[states]  # (M, ...): each duration's state's candidates
        terms = jnp.where(w.reshape((-1,) + extra) > 0, log_count_coefficient(x.reshape((-1,) + extra), r_i), 0.0)
        per_state = jax.ops.segment_sum(terms, states, num_segments=num_states)
        c1 = self._per_state(self.concentration1, num_states).reshape((-1,) + extra)
        c0 = self._per_state(self.concentration0, num_states).reshape((-1,) + extra)
        s = stats.excess.reshape((-1,) + extra)
        n = stats.count.reshape((-1,) + extra)
        return per_state + betaln(c1 + s, c0 + n * r) - betaln(c1, c0)

    def _integer_log_r_marginal(self, durations, states, weights, num_states: int):
        """:meth:`log_r_marginal` at the candidates ``r_values`` of the finite prior, the same for every
        state: ``(K, R)``, the coefficients by
        :func:`~numpyro_hdphmm.durations._numerics.integer_count_coefficients` (a cumulative sum of
        ``log1p``)."""
        dtype = self.concentration1.dtype
        stats = duration_statistics(durations, states, weights, num_states, dtype)
        x = jnp.asarray(durations).astype(dtype) - 1.0
        w = jnp.asarray(weights, dtype)
        terms = jnp.where(w[:, None] > 0, integer_count_coefficients(jnp.maximum(x, 0.0), self.r_values), 0.0)
        per_state = jax.ops.segment_sum(terms, jnp.asarray(states), num_segments=num_states)  # (K, R)
        r = jnp.asarray(self.r_values, dtype)[None, :]
        c1 = self._per_state(self.concentration1, num_states)[:, None]
        c0 = self._per_state(self.concentration0, num_states)[:, None]
        return (per_state + betaln(c1 + stats.excess[:, None], c0 + stats.count[:, None] * r) - betaln(c1, c0))

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states: int):
        """``r_k | x`` (finite prior: exact categorical draw over ``r_values``; Gamma prior: one slice
        update of ``log r_k`` from ``params["r"]``), then ``p_k | r_k, x ~ Beta(concentration1 + S_k,
        concentration0 + n_k r_k)`` (module docstring).  States without durations: prior draws."""
        self.check_num_states(num_states)
        k_r, k_p, k_prior = jax.random.split(rng_key, 3)
        dtype = self.concentration1.dtype
        stats = duration_statistics(durations, states, weights, num_states, dtype)
        if self.integer_r:
            values = jnp.asarray(self.r_values, jnp.int32)
            logits = jnp.log(self.r_probs) + self._integer_log_r_marginal(durations, states, weights, num_states)
            r = values[jax.random.categorical(k_r, logits, axis=-1)]
        else:
            r = self._slice_r(k_r, k_prior, jnp.asarray(params["r"], dtype), durations, states, weights, num_states,
                              stats)
        a = self.concentration1 + stats.excess
        b = self.concentration0 + stats.count * r.astype(dtype)
        return {"r": r, "p": open_unit_interval(draws.beta(k_p, a, b))}

    def _slice_r(self, k_slice, k_prior, r0, durations, states, weights, num_states, stats):
        """One slice update of ``u = log r_k`` per state (vmapped), target ``log Gamma(e^u | a, b) + u
        + log p(x_k | r = e^u)`` (the last term as in :meth:`log_r_marginal`); prior draws where
        ``n_k = 0``."""
        dtype = r0.dtype
        a = self._per_state(self.r_concentration, num_states)
        b = self._per_state(self.r_rate, num_states)
        c1 = self._per_state(self.concentration1, num_states)
        c0 = self._per_state(self.concentration0, num_states)
        x = jnp.asarray(durations).astype(dtype) - 1.0
        w = jnp.asarray(weights, dtype)
        states = jnp.asarray(states)

        def log_density(k, u):
            r = jnp.exp(u)
            mine = (w > 0) & (states == k)
            terms = jnp.sum(jnp.where(mine, log_count_coefficient(x, r), 0.0))
            marginal = terms + betaln(c1[k] + stats.excess[k], c0[k] + stats.count[k] * r)
            return jnp.where(jnp.isfinite(u), a[k] * u - b[k] * r + marginal, -jnp.inf)

        keys = jax.random.split(k_slice, num_states)
        u1 = jax.vmap(lambda key, k, u: slice_sample(key, u, lambda v: log_density(k, v)))(
            keys, jnp.arange(num_states), jnp.log(r0))
        r1 = jnp.maximum(jnp.exp(u1), jnp.finfo(dtype).tiny)
        return jnp.where(stats.count > 0, r1, positive_gamma(k_prior, a, b))

    # ------------------------------------------------------------------ weakly informative
    @classmethod
    def weakly_informative(cls, mean_duration, **overrides) -> "NegativeBinomial":
        """``r`` uniform on ``1..10`` (or the Gamma prior when ``r_concentration``/``r_rate`` is given,
        default ``Gamma(2, 0.4)``, mean 5), ``p ~ Beta(a, 2)`` with ``a = (m - 1) / E[r]`` for the mean
        duration ``m = mean_duration > 1``.

        ``E[D] = 1 + E[r] E[p / (1 - p)] = 1 + E[r] a / (b - 1)`` (``r`` and ``p`` independent a
        priori), so the prior mean duration is exactly ``m``; ``concentration0 = b = 2`` is the
        smallest integer for which that mean is finite (the broadest Beta with this mean, as
        :meth:`Geometric.weakly_informative <numpyro_hdphmm.durations.Geometric.weakly_informative>`),
        and the uniform prior on ``r = 1..10`` leaves the shape of the law open, from geometric
        (``r = 1``) to peaked (``r = 10``).  Overrides: ``concentration1``, ``concentration0``
        (``> 1``; ``concentration1`` follows unless given), ``r_values``, ``r_probs``,
        ``r_concentration``, ``r_rate``.
        """
        allowed = ("concentration1", "concentration0", "r_values", "r_probs", "r_concentration", "r_rate")
        check_overrides(overrides, allowed, "NegativeBinomial.weakly_informative")
        m = check_mean_duration(mean_duration)
        gamma_prior = "r_concentration" in overrides or "r_rate" in overrides
        if gamma_prior and ("r_values" in overrides or "r_probs" in overrides):
            raise ValueError("`r_values`/`r_probs` (a finite prior on r) and `r_concentration`/`r_rate` (a Gamma prior "
                             "on r) exclude each other; give one pair.")
        b = as_hyperparameter("concentration0", overrides.get("concentration0", 2.0))
        if gamma_prior:
            ra = as_hyperparameter("r_concentration", overrides.get("r_concentration", 2.0))
            rb = as_hyperparameter("r_rate", overrides.get("r_rate", 0.4))
            mean_r = ra / rb
        else:
            values = _check_r_values(overrides.get("r_values", tuple(range(1, 11))))
            probs = _check_r_probs(overrides.get("r_probs"), len(values))
            mean_r = jnp.sum(probs * jnp.asarray(values, probs.dtype))
        if "concentration1" in overrides:
            a = overrides["concentration1"]
        else:
            if is_concrete(b) and not bool(jnp.all(b > 1.0)):
                raise ValueError(
                    "`concentration0` must be > 1 for the prior mean duration to be finite (weakly_informative sets "
                    f"concentration1 = (mean_duration - 1)(concentration0 - 1) / E[r]), got {b}."
                )
            a = (m - 1.0) * (b - 1.0) / mean_r
        if gamma_prior:
            return cls.gamma_r(ra, rb, a, b)
        return cls(a, b, values, probs)
