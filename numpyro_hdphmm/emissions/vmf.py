"""von Mises-Fisher emissions for directional data (unit vectors), known concentration.

Model, for each state ``k``::

    mu_k ~ vMF(mu_0, kappa_0)                   (prior on the mean direction)
    y_t | z_t = k ~ vMF(mu_k, kappa)            (known, shared concentration kappa)

with the density ``vMF(x | mu, kappa) = C_d(kappa) exp(kappa mu^T x)`` on the unit sphere
``S^{d-1}`` (surface measure), ``C_d(kappa) = kappa^{d/2-1} / ((2 pi)^{d/2} I_{d/2-1}(kappa))``
(Mardia & Jupp 2000, eq. 9.3.4).  The conjugate update, marginal likelihood and predictive are
those of the dd-CRF supplement (``docs/errata.md``, "Von Mises-Fisher"): with the resultant
``R = kappa_0 mu_0 + kappa sum_t x_t``, the posterior is ``vMF(R / ||R||, ||R||)``.

Also provides :class:`VonMisesFisherDistribution`, a NumPyro distribution with Wood's (1994)
rejection sampler for any dimension ``d >= 2``, used for the ``mu`` sample sites.
"""

from __future__ import annotations

from functools import partial
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import lax
from numpyro.distributions import constraints
from numpyro.distributions.util import validate_sample

from numpyro_hdphmm._core.segments import label_counts, label_sums
from numpyro_hdphmm._core.special import vmf_log_normalizer, vmf_mean_resultant_length
from numpyro_hdphmm._core.validation import (
    as_data_array,
    as_parameter,
    check_finite,
    check_ndim,
    check_positive,
    check_unit_vectors,
    is_concrete,
    check_log_likelihood_precision,
)
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["VonMisesFisher", "VonMisesFisherDistribution", "sample_von_mises_fisher"]

_HIGHEST = jax.lax.Precision.HIGHEST


def _float_dtype(*values):
    return jnp.result_type(*[jnp.asarray(v).dtype for v in values], float)


def _safe_norm(v, axis=-1):
    """``||v||`` along ``axis`` with a finite gradient at ``v = 0`` (where it returns 0)."""
    sq = jnp.sum(v * v, axis=axis)
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


# ---------------------------------------------------------------------------------------------
# sampler
# ---------------------------------------------------------------------------------------------
def _sample_one(key, mu, kappa):
    """One draw from ``vMF(mu, kappa)``: ``mu (d,)``, scalar ``kappa >= 0`` -> ``(d,)``.

    Wood (1994), "Simulation of the von Mises Fisher distribution", algorithm VM*: with
    ``m = d - 1``,
    ``b = m / (2 kappa + sqrt(4 kappa^2 + m^2))``, ``x0 = (1 - b) / (1 + b)``, draw
    ``Z ~ Beta(m/2, m/2)``, ``W = (1 - (1 + b) Z) / (1 - (1 - b) Z)``, ``U ~ U(0, 1)`` and
    accept when ``kappa W + m log(1 - x0 W) - c >= log U`` with ``c = kappa x0 + m log(1 - x0^2)``.
    Departures (numerical only): ``b`` in the cancellation-free form above (Wood prints
    ``(-2 kappa + sqrt(4 kappa^2 + m^2)) / m``), and the acceptance test written with
    ``1 - W = 2 b Z / (1 - (1 - b) Z)`` and ``1 - x0 = 2 b / (1 + b)``::

        kappa ((1 - x0) - (1 - W)) + m log(((1 - x0) + x0 (1 - W)) / ((1 - x0)(1 + x0))) >= log U

    so that ``kappa`` up to ~1e4 (``W`` within ~1e-4 of 1) keeps full relative precision in
    float32.  The tangent direction is a standard normal vector projected onto the orthogonal
    complement of ``mu`` and normalized (uniform on that ``(d-2)``-sphere), instead of a
    rotation of the north pole; ``Z`` is drawn as a ratio of chi-squares (``m`` is an integer),
    ``Z = |g_1|^2 / (|g_1|^2 + |g_2|^2)`` with ``g_1, g_2 ~ N(0, I_m)``, which is exactly
    ``Beta(m/2, m/2)``.
    """
    dtype = mu.dtype
    d = mu.shape[-1]
    m = jnp.asarray(d - 1, dtype)
    kappa = jnp.asarray(kappa, dtype)
    b = m / (2.0 * kappa + jnp.sqrt(4.0 * kappa * kappa + m * m))
    x0 = (1.0 - b) / (1.0 + b)
    one_m_x0 = 2.0 * b / (1.0 + b)
    log_norm = jnp.log(one_m_x0) + jnp.log1p(x0)

    def draw(k):
        kz, ku = jax.random.split(k)
        # Z ~ Beta(m/2, m/2) as chi2_m / (chi2_m + chi2_m'), the chi-squares from 2m normals
        g = jax.random.normal(kz, (2, d - 1), dtype)
        sq = jnp.sum(g * g, axis=-1)
        z = sq[0] / (sq[0] + sq[1])
        den = 1.0 - (1.0 - b) * z
        one_m_w = 2.0 * b * z / den
        one_p_w = 2.0 * (1.0 - z) / den
        log_accept = kappa * (one_m_x0 - one_m_w) + m * (jnp.log(one_m_x0 + x0 * one_m_w) - log_norm)
        u = jax.random.uniform(ku, dtype=dtype)
        accept = jnp.log(u) <= log_accept
        return one_m_w, one_p_w, accept

    def cond(state):
        return ~state[3]

    def body(state):
        k = state[0]
        k, sub = jax.random.split(k)
        one_m_w, one_p_w, accept = draw(sub)
        return k, one_m_w, one_p_w, accept

    key, kt = jax.random.split(key)
    init = (key, jnp.zeros((), dtype), jnp.full((), 2.0, dtype), jnp.zeros((), bool))
    _, one_m_w, one_p_w, _ = lax.while_loop(cond, body, init)
    w = 1.0 - one_m_w
    sin = jnp.sqrt(jnp.maximum(one_m_w * one_p_w, 0.0))

    v = jax.random.normal(kt, (d,), dtype)
    v = v - jnp.dot(v, mu) * mu
    v = v - jnp.dot(v, mu) * mu  # second Gram-Schmidt pass: v nearly parallel to mu (d = 2)
    v = v / jnp.maximum(jnp.linalg.norm(v), jnp.finfo(dtype).tiny)
    return w * mu + sin * v


@partial(jax.jit, static_argnums=(3,))
def sample_von_mises_fisher(rng_key, mean_direction, concentration, shape: Tuple[int, ...] = ()):
    """Draws from ``vMF(mean_direction, concentration)``: ``shape + (d,)``.

    ``mean_direction (*b, d)`` unit vectors and ``concentration (*b,)`` (``>= 0``) broadcast
    to ``shape`` (which must end with their broadcast batch shape).  One Wood (1994) rejection
    loop (``lax.while_loop``) per draw, vmapped over the flattened draws.  Jitted (``shape``
    static), so repeated eager calls with new parameter values do not recompile.
    """
    mean_direction = jnp.asarray(mean_direction)
    d = mean_direction.shape[-1]
    dtype = _float_dtype(mean_direction, concentration)
    shape = tuple(shape)
    mu = jnp.broadcast_to(mean_direction.astype(dtype), shape + (d,)).reshape(-1, d)
    kappa = jnp.broadcast_to(jnp.asarray(concentration, dtype), shape).reshape(-1)
    n = mu.shape[0]
    keys = jax.random.split(rng_key, n)
    draws = jax.vmap(_sample_one)(keys, mu, kappa)
    return draws.reshape(shape + (d,))


# ---------------------------------------------------------------------------------------------
# NumPyro distribution
# ---------------------------------------------------------------------------------------------
class VonMisesFisherDistribution(dist.Distribution):
    """The von Mises-Fisher distribution on the unit sphere ``S^{d-1} in R^d``, any ``d >= 2``.

    ``log p(x) = log C_d(kappa) + kappa mu^T x`` with respect to the surface measure
    (Mardia & Jupp 2000, eq. 9.3.4; ``C_d`` from
    :func:`numpyro_hdphmm._core.special.vmf_log_normalizer`, exact also at ``kappa = 0``,
    the uniform distribution).

    Args:
        mean_direction: ``mu (*batch, d)``, unit vectors (constraint ``constraints.sphere``).
        concentration: ``kappa (*batch)``, ``>= 0``.

    ``batch_shape`` is the broadcast of ``mean_direction.shape[:-1]`` and
    ``concentration.shape``; ``event_shape = (d,)``.  ``sample`` uses Wood's (1994) rejection
    sampler (:func:`sample_von_mises_fisher`), not reparameterized.  Registered as a pytree
    (by NumPyro's ``Distribution`` machinery) with the two parameters as leaves.
    """

    arg_constraints = {"mean_direction": constraints.sphere, "concentration": constraints.nonnegative}
    support = constraints.sphere
    reparametrized_params = []

    def __init__(self, mean_direction, concentration, *, validate_args: Optional[bool] = None):
        if jnp.ndim(mean_direction) < 1 or jnp.shape(mean_direction)[-1] < 2:
            raise ValueError(
                f"`mean_direction` must have shape (..., d) with d >= 2, got {jnp.shape(mean_direction)}."
            )
        dtype = _float_dtype(mean_direction, concentration)
        mean_direction = jnp.asarray(mean_direction, dtype)
        concentration = jnp.asarray(concentration, dtype)
        batch_shape = jnp.broadcast_shapes(jnp.shape(mean_direction)[:-1], jnp.shape(concentration))
        event_shape = jnp.shape(mean_direction)[-1:]
        self.mean_direction = jnp.broadcast_to(mean_direction, batch_shape + event_shape)
        self.concentration = jnp.broadcast_to(concentration, batch_shape)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @classmethod
    def infer_shapes(cls, mean_direction, concentration):
        batch_shape = jnp.broadcast_shapes(tuple(mean_direction)[:-1], tuple(concentration))
        return batch_shape, tuple(mean_direction)[-1:]

    def sample(self, key, sample_shape=()):
        """Draws of shape ``sample_shape + batch_shape + (d,)`` (Wood 1994)."""
        shape = tuple(sample_shape) + tuple(self.batch_shape)
        return sample_von_mises_fisher(key, self.mean_direction, self.concentration, shape)

    @validate_sample
    def log_prob(self, value):
        """``log C_d(kappa) + kappa mu^T x``: ``value (..., d)`` -> broadcast batch shape."""
        d = self.event_shape[0]
        dot = jnp.sum(self.mean_direction * value, axis=-1)
        return vmf_log_normalizer(d, self.concentration) + self.concentration * dot

    @property
    def mean(self):
        """``E[x] = A_d(kappa) mu`` with ``A_d = I_{d/2} / I_{d/2-1}`` (Mardia & Jupp eq. 9.3.9)."""
        a = vmf_mean_resultant_length(self.event_shape[0], self.concentration)
        return a[..., None] * self.mean_direction

    @property
    def mode(self):
        return self.mean_direction


# ---------------------------------------------------------------------------------------------
# emission family
# ---------------------------------------------------------------------------------------------
@jax.tree_util.register_pytree_node_class
class VonMisesFisher(EmissionFamily):
    """vMF emissions with known concentration and a vMF prior on each state's mean direction.

    Args:
        concentration: the known within-state concentration ``kappa > 0`` (scalar).
        prior_mean: ``mu_0 (*batch, D)``, unit vector(s), ``D >= 2`` (rescaled to exactly unit
            norm; vectors off the sphere by more than 1e-4 are rejected).
        prior_concentration: ``kappa_0 > 0``, shape broadcasting with ``prior_mean.shape[:-1]``.
            Small values (e.g. 1e-5 as in the dd-CRF supplement's experiments) give an
            almost uniform prior over directions.

    Observations are unit vectors ``y (T, D)``; a row with any NaN is missing.  The parameter
    is ``mu (K, D)`` (site ``f"{name}_mu"``).  Sufficient statistics are the dict
    ``{"count": (K,), "sum": (K, D)}``: weighted number of steps and resultant
    ``sum_t w_tk x_t``.  The posterior is the same class with ``prior_mean (K, D)`` and
    ``prior_concentration (K,)`` (which may be exactly 0, the uniform distribution, when the
    resultant cancels).  Dimensions up to a few hundred and concentrations from 0 to ~1e4 are
    handled in log space (:mod:`numpyro_hdphmm._core.special`).
    """

    param_names = ("mu",)
    conjugate = True
    _hyper_names = ("concentration", "prior_mean", "prior_concentration")

    def __init__(self, concentration, prior_mean, prior_concentration=1e-2):
        concentration, prior_mean, prior_concentration = (
            as_parameter(n, v)
            for n, v in (("concentration", concentration), ("prior_mean", prior_mean), ("prior_concentration", prior_concentration))
        )
        check_ndim("concentration", concentration, 0, "the known concentration is a scalar")
        check_positive("concentration", concentration)
        if jnp.ndim(prior_mean) < 1 or jnp.shape(prior_mean)[-1] < 2:
            raise ValueError(f"`prior_mean` must have shape (..., D) with D >= 2, got {jnp.shape(prior_mean)}.")
        check_finite("prior_mean", prior_mean)
        check_unit_vectors("prior_mean", prior_mean)
        check_positive("prior_concentration", prior_concentration)
        try:
            batch = jnp.broadcast_shapes(jnp.shape(prior_mean)[:-1], jnp.shape(prior_concentration))
        except ValueError:
            raise ValueError(
                f"`prior_concentration` of shape {jnp.shape(prior_concentration)} does not broadcast with "
                f"`prior_mean` of shape {jnp.shape(prior_mean)} (batch part {jnp.shape(prior_mean)[:-1]})."
            ) from None
        dtype = _float_dtype(concentration, prior_mean, prior_concentration)
        mu0 = jnp.asarray(prior_mean, dtype)
        mu0 = mu0 / jnp.linalg.norm(mu0, axis=-1, keepdims=True)
        D = mu0.shape[-1]
        self.concentration = jnp.asarray(concentration, dtype)
        self.prior_mean = jnp.broadcast_to(mu0, batch + (D,))
        self.prior_concentration = jnp.broadcast_to(jnp.asarray(prior_concentration, dtype), batch)

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.concentration, self.prior_mean, self.prior_concentration), ()

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.concentration, obj.prior_mean, obj.prior_concentration = children
        return obj

    # ------------------------------------------------------------------ shapes
    @property
    def dim(self) -> int:
        """The ambient dimension ``D`` (observations lie on ``S^{D-1}``)."""
        return int(jnp.shape(self.prior_mean)[-1])

    @property
    def event_shape(self) -> Tuple[int, ...]:
        return (self.dim,)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.prior_concentration))

    def prior_distribution(self) -> VonMisesFisherDistribution:
        """``vMF(prior_mean, prior_concentration)`` on ``mu``, batch shape :attr:`batch_shape`."""
        return VonMisesFisherDistribution(self.prior_mean, self.prior_concentration)

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """Shape ``(..., T, D)``; unit vectors within 1e-4 (NaN rows = missing); no infinities."""
        y = as_data_array(name, y)
        shape = tuple(jnp.shape(y))
        if len(shape) < 2 or shape[-1] != self.dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.dim}), got {shape}.")
        if is_concrete(y):
            check_finite(name, y, allow_nan=True)
            check_unit_vectors(name, y, atol=1e-4, allow_nan=True)
            if is_concrete(self.concentration):
                # kappa mu.y per step; the collapsed samplers' normalizers log C(|kappa sum y|) up to kappa n
                kappa = float(np.max(np.asarray(self.concentration)))
                n = int(np.sum(~np.any(np.isnan(np.asarray(y, float)), axis=-1)))
                check_log_likelihood_precision(
                    name, f"the known concentration is {kappa:.3g} over {n} observed steps", kappa * max(n, 1),
                    np.dtype(self.concentration.dtype), "Lower `concentration`, or ")

    def prepare(self, y):
        """``y (T, D) -> (x (T, D), valid (T,))``.

        A row with any NaN is missing and replaced by the placeholder ``e_1 = (1, 0, ..., 0)``;
        observed rows are rescaled to exactly unit norm (they are unit within the tolerance of
        :meth:`check_observations`).
        """
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        valid = ~jnp.any(jnp.isnan(y), axis=-1)
        placeholder = jnp.zeros((y.shape[-1],), y.dtype).at[0].set(1.0)
        x = jnp.where(valid[:, None], y, placeholder)
        norm = jnp.linalg.norm(x, axis=-1, keepdims=True)
        x = x / jnp.where(norm > 0, norm, 1.0)
        return x, valid

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights):
        """``x (T, D)``, ``weights (T, K)`` -> ``{"count": (K,), "sum": (K, D)}``."""
        weights = jnp.asarray(weights)
        dtype = jnp.result_type(x, weights)
        weights = weights.astype(dtype)
        s = jnp.matmul(weights.T, x.astype(dtype), precision=_HIGHEST)
        return {"count": jnp.sum(weights, axis=0), "sum": s}

    def label_statistics(self, x, labels, num_states: int):
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)``: a segment sum by label
        (:func:`~numpyro_hdphmm._core.segments.label_sums`), ``O(T D)``."""
        dtype = jnp.result_type(x, float)
        return {"count": label_counts(labels, num_states, dtype), "sum": label_sums(x.astype(dtype), labels, num_states)}

    def _resultant(self, stats):
        """``R = kappa_0 mu_0 + kappa sum_t w_t x_t`` : ``(K, D)``."""
        return self.prior_concentration[..., None] * self.prior_mean + self.concentration * stats["sum"]

    def posterior(self, stats) -> "VonMisesFisher":
        """``mu | x ~ vMF(R / ||R||, ||R||)`` (the supplement's eqs. 4-7); batch ``(K,)``.

        Departure: where ``||R|| = 0`` (the resultant cancels exactly) the posterior is the
        uniform distribution; it is stored as concentration 0 with the prior mean direction.
        """
        R = self._resultant(stats)
        kt = _safe_norm(R)
        positive = kt > 0
        mu = jnp.where(positive[..., None], R / jnp.where(positive, kt, 1.0)[..., None],
                       jnp.broadcast_to(self.prior_mean, R.shape))
        return self.tree_unflatten((), (self.concentration, mu, kt))

    def log_marginal_likelihood(self, stats) -> jax.Array:
        """``log C_d(kappa_0) + N log C_d(kappa) - log C_d(||R||)``: ``(K,)``.

        Exact for fractional weights (``N = sum_t w_t``).
        """
        d = self.dim
        kt = _safe_norm(self._resultant(stats))
        return (
            vmf_log_normalizer(d, self.prior_concentration)
            + stats["count"] * vmf_log_normalizer(d, self.concentration)
            - vmf_log_normalizer(d, kt)
        )

    def log_predictive(self, x, stats) -> jax.Array:
        """``log C_d(kappa) + log C_d(||R||) - log C_d(||R + kappa x||)``, ``x (D,)`` -> ``(K,)``.

        The ratio of marginal likelihoods with and without ``x`` (the collapsed vMF predictive
        has no other closed form).
        """
        d = self.dim
        R = self._resultant(stats)
        return (
            vmf_log_normalizer(d, self.concentration)
            + vmf_log_normalizer(d, _safe_norm(R))
            - vmf_log_normalizer(d, _safe_norm(R + self.concentration * x))
        )

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``mu ~ vMF(mu_0, kappa_0)`` (Wood 1994): ``sample_shape + batch_shape + (D,)``."""
        return {"mu": self.prior_distribution().sample(rng_key, tuple(sample_shape))}

    def log_prior(self, params) -> jax.Array:
        """``log vMF(mu_k | mu_0, kappa_0)``: ``(K,)``."""
        return self.prior_distribution().log_prob(params["mu"])

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``log C_d(kappa) + kappa x_t^T mu_k``: ``x (T, D)`` -> ``(T, K)``."""
        mu = params["mu"]
        cross = jnp.matmul(x.astype(mu.dtype), mu.T, precision=_HIGHEST)
        return vmf_log_normalizer(self.dim, self.concentration) + self.concentration * cross

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ vMF(mu_{z_t}, kappa)``: ``(T, D)``."""
        mu = params["mu"][jnp.asarray(states)]
        return sample_von_mises_fisher(rng_key, mu, self.concentration, mu.shape[:-1])

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats) -> jax.Array:
        """``E_q[log vMF(x_t | mu_k, kappa)] = log C_d(kappa) + kappa A_d(kappa_n) mu_n^T x_t`` under
        ``q(mu_k) = vMF(mu_n, kappa_n)`` (``E[mu] = A_d(kappa_n) mu_n``, Mardia & Jupp 2000 eq. 9.3.9):
        ``x (T, D)`` -> ``(T, K)``."""
        post = self.posterior(stats)
        mean = vmf_mean_resultant_length(self.dim, post.prior_concentration)[:, None] * post.prior_mean
        cross = jnp.matmul(x.astype(mean.dtype), mean.T, precision=_HIGHEST)
        return vmf_log_normalizer(self.dim, self.concentration) + self.concentration * cross

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Site ``f"{name}_mu"``: :class:`VonMisesFisherDistribution`, batch ``(K,)``, event ``(D,)``."""
        K = int(num_states)
        fn = VonMisesFisherDistribution(
            jnp.broadcast_to(self.prior_mean, (K, self.dim)),
            jnp.broadcast_to(self.prior_concentration, (K,)),
        )
        return {"mu": emission_site(f"{name}_mu", fn)}

    @classmethod
    def weakly_informative(cls, data, concentration=None, prior_concentration=1e-2, dim=None) -> "VonMisesFisher":
        """A data-based prior for unit vectors ``data (..., T, D)`` (NaN rows = missing).

        * ``prior_mean``: the normalized mean direction of the observed rows (``e_1`` if the
          resultant vanishes);
        * ``prior_concentration``: ``1e-2`` by default -- for ``D >= 2`` the prior density
          varies by a factor ``exp(2 kappa_0) ~ 1.02`` over the sphere, i.e. practically
          uniform, while keeping the prior mean direction well defined;
        * ``concentration`` (unless given): the approximate maximum-likelihood estimate of
          Banerjee et al. (2005, eq. 4.4), ``kappa = r (D - r^2) / (1 - r^2)`` with ``r`` the
          mean resultant length of the pooled data (``r`` clipped to ``[1e-3, 1 - 1e-6]``).
          Pooling states lowers ``r``, so this under-estimates the within-state concentration
          when the states point in different directions; pass ``concentration`` when known.

        ``data=None`` (no data) needs ``dim`` and ``concentration``: the prior mean direction is
        then ``e_1`` (nearly irrelevant at the default ``prior_concentration``).
        """
        if data is None:
            if dim is None or concentration is None:
                raise ValueError(
                    "VonMisesFisher.weakly_informative(None): without data pass `dim` (the dimension D of the "
                    "unit vectors) and the known `concentration`."
                )
            if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 2:
                raise ValueError(f"`dim` must be an integer >= 2, got {dim!r}.")
            return cls(concentration, np.eye(int(dim))[0], prior_concentration)
        if not is_concrete(data):  # traced data (jit_model_args, CollapsedSVI, vmap): no value checks
            if jnp.ndim(data) < 2 or jnp.shape(data)[-1] < 2:
                raise ValueError(f"`data` must have shape (..., T, D) with D >= 2, got {jnp.shape(data)}.")
            D = jnp.shape(data)[-1]
            flat = jnp.asarray(data, jnp.result_type(float)).reshape(-1, D)
            valid = ~jnp.any(jnp.isnan(flat), axis=-1)
            resultant = jnp.where(valid[:, None], flat, 0.0).sum(0)
            norm = jnp.linalg.norm(resultant)
            prior_mean = jnp.where(norm > 0, resultant / jnp.where(norm > 0, norm, 1.0), jnp.eye(D, dtype=flat.dtype)[0])
            if concentration is None:
                r = jnp.clip(norm / jnp.maximum(valid.sum(), 1), 1e-3, 1.0 - 1e-6)
                concentration = r * (D - r * r) / (1.0 - r * r)
            return cls(concentration, prior_mean, prior_concentration)
        arr = np.asarray(as_data_array("data", data), dtype=float)
        if arr.ndim < 2 or arr.shape[-1] < 2:
            raise ValueError(f"`data` must have shape (..., T, D) with D >= 2, got {arr.shape}.")
        check_finite("data", arr, allow_nan=True)
        check_unit_vectors("data", arr, atol=1e-4, allow_nan=True)
        D = arr.shape[-1]
        flat = arr.reshape(-1, D)
        rows = flat[~np.any(np.isnan(flat), axis=-1)]
        if rows.shape[0] == 0:
            raise ValueError("`data` has no observed (non-NaN) rows.")
        resultant = rows.sum(0)
        norm = np.linalg.norm(resultant)
        prior_mean = resultant / norm if norm > 0 else np.eye(D)[0]
        if concentration is None:
            r = float(np.clip(norm / rows.shape[0], 1e-3, 1.0 - 1e-6))
            concentration = r * (D - r * r) / (1.0 - r * r)
        return cls(concentration, prior_mean, prior_concentration)
