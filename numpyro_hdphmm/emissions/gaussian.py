"""Multivariate Gaussian emissions with a normal-inverse-Wishart prior (full covariance).

Prior (Murphy 2007, sec. 9; Gelman et al. BDA3 sec. 3.6)::

    Sigma      ~ InvWishart(df, scale)              E[Sigma] = scale / (df - D - 1)
    mu | Sigma ~ Normal(loc, Sigma / mean_precision)
    y_t        ~ Normal(mu_{z_t}, Sigma_{z_t})

The conjugate algebra is the matrix-normal-inverse-Wishart of :mod:`numpyro_hdphmm._core.mniw` with the constant
regressor ``x_t = [1]``: ``A = mu[:, None]``, ``K_0 = [[mean_precision]]``.

The posterior predictive is the exact multivariate Student-t (Murphy 2007 sec. 9).  Fox et al.
(2011, sticky HDP-HMM) use a moment-matched Gaussian instead; we do not.

Numerics: the statistics are weighted moments of the observations whitened by the prior,
``z = L_0^{-1} (y - loc)`` with ``L_0 L_0^T = scale``, and every closed form is evaluated in that
frame and mapped back exactly (see :meth:`GaussianNIW.sufficient_statistics`).  With a
data-scaled prior (:meth:`GaussianNIW.weakly_informative`) the computation is therefore
invariant to the data's offset and units: float32 keeps its accuracy for offsets of 1e5 and
scales from 1e-5 to 1e8 (tests/emissions/test_numerics.py).  Data that cannot be represented at
all in the float type (a squared deviation beyond its range) is refused by
:meth:`GaussianNIW.check_observations` before any sampling, with the remedy.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from numpyro_hdphmm._core.validation import (
    as_data_array,
    as_parameter,
    check_finite,
    check_positive,
    check_positive_definite,
    check_shape,
    default_float_dtype,
    is_concrete,
)
from numpyro_hdphmm._core import mniw
from numpyro_hdphmm._core.segments import label_grams
from numpyro_hdphmm.emissions._data import (
    check_data_spread,
    check_deviation_range,
    check_dim,
    dimension_hint,
    merge_overrides,
    observed_rows,
    vector_data,
)
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["GaussianNIW", "GaussianStats"]


class GaussianStats(NamedTuple):
    """Weighted statistics per state: ``count (K,)``, ``sum_y (K, D)``, ``sum_yy (K, D, D)``."""

    count: jax.Array
    sum_y: jax.Array
    sum_yy: jax.Array


@jax.tree_util.register_pytree_node_class
class GaussianNIW(EmissionFamily):
    """Gaussian emissions, full covariance, normal-inverse-Wishart prior.

    Args:
        loc: ``(..., D)`` prior mean of ``mu``.
        mean_precision: ``(...)`` ``kappa_0 > 0``; ``Cov[mu | Sigma] = Sigma / kappa_0``.
        df: ``(...)`` ``nu_0 > D - 1``, inverse-Wishart degrees of freedom.
        scale: ``(..., D, D)`` positive-definite inverse-Wishart scale ``Psi_0``.

    Hyperparameters are broadcast to a common batch shape (``()`` for a prior, ``(K,)`` for the
    posteriors of ``K`` states).  Parameters: ``mu (K, D)``, ``cov (K, D, D)``.
    """

    param_names = ("mu", "cov")
    conjugate = True
    caches_predictive = True
    _hyper_names = ("loc", "mean_precision", "df", "scale")

    def __init__(self, loc, mean_precision, df, scale):
        loc, mean_precision, df, scale = (
            as_parameter(n, v) for n, v in (("loc", loc), ("mean_precision", mean_precision), ("df", df), ("scale", scale))
        )
        dtype = jnp.result_type(float)
        loc = jnp.asarray(loc, dtype)
        if loc.ndim < 1:
            raise ValueError(f"`loc` must have shape (..., D), got {loc.shape}.")
        D = loc.shape[-1]
        mean_precision = jnp.asarray(mean_precision, dtype)
        df = jnp.asarray(df, dtype)
        scale = jnp.asarray(scale, dtype)
        if jnp.ndim(scale) < 2:
            raise ValueError(f"`scale` must have shape (..., {D}, {D}), got {jnp.shape(scale)}.")
        check_shape("scale", scale, (None,) * (jnp.ndim(scale) - 2) + (D, D), "(..., D, D) with D = loc.shape[-1]")
        check_positive("mean_precision", mean_precision)
        mniw.check_df(df, D, "df")
        check_finite("loc", loc)
        check_positive_definite("scale", scale)
        try:
            batch = jnp.broadcast_shapes(loc.shape[:-1], mean_precision.shape, df.shape, scale.shape[:-2])
        except ValueError as e:
            raise ValueError(f"`loc`, `mean_precision`, `df` and `scale` have incompatible batch shapes: {e}") from None
        self.loc = jnp.broadcast_to(loc, batch + (D,))
        self.mean_precision = jnp.broadcast_to(mean_precision, batch)
        self.df = jnp.broadcast_to(df, batch)
        self.scale = jnp.broadcast_to(scale, batch + (D, D))
        self.dim = int(D)

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.loc, self.mean_precision, self.df, self.scale), (self.dim,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.loc, obj.mean_precision, obj.df, obj.scale = children
        (obj.dim,) = aux
        return obj

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return (self.dim,)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.df))

    # ------------------------------------------------------------------ MNIW view
    def _as_mniw(self):
        """``(M0 (..., D, 1), K0 (..., 1, 1), nu0 (...), Psi0 (..., D, D))``."""
        return (self.loc[..., None], self.mean_precision[..., None, None], self.df, self.scale)

    @staticmethod
    def _mniw_stats(stats: GaussianStats) -> mniw.MNIWStats:
        count = jnp.asarray(stats.count)
        return mniw.MNIWStats(count, count[..., None, None], stats.sum_y[..., None], stats.sum_yy)

    @classmethod
    def _from_hyper(cls, loc, mean_precision, df, scale, dim):
        return cls.tree_unflatten((dim,), (loc, mean_precision, df, scale))

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """``y (..., T, D)``: trailing dimension ``D``, real numbers, no infinities (NaN marks
        missing), and values whose whitened deviations from ``loc`` fit the family's float type
        (:meth:`check_range`)."""
        y = as_data_array(name, y)
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != self.dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.dim}), got {jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)
        self.check_range(y, name)

    def check_range(self, y, name: str = "obs") -> None:
        """Raise ``ValueError`` (naming ``name``, suggesting to rescale or enable float64) when
        concrete ``y (..., T, D)`` cannot be represented in the statistics: the largest squared
        deviation ``|y_t - loc|^2``, or the total ``sum_t |z_t|^2`` of the whitened deviations
        ``z_t = L_0^{-1} (y_t - loc)`` (``L_0 L_0^T = scale``), must stay below the float type's
        maximum times :data:`~numpyro_hdphmm._core.validation.FLOAT_HEADROOM`.  Skipped under
        tracing and for batched (posterior) families."""
        if is_concrete(y, self.loc, self.scale) and self.batch_shape == ():
            check_deviation_range(name, y, self.loc, self.scale, np.dtype(self.scale.dtype), "the prior mean `loc`")

    def prepare(self, y):
        """``y (T, D) -> (x (T, D), valid (T,))``; a row with any NaN is invalid and set to 0."""
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        valid = ~jnp.any(jnp.isnan(y), axis=-1)
        return jnp.where(valid[..., None], y, jnp.zeros((), y.dtype)), valid

    # ------------------------------------------------------------------ conjugate machinery
    #
    # Numerics: every closed form works in the prior's frame ``z = L_0^{-1} (y - loc)`` with
    # ``L_0 L_0^T = scale`` (Cholesky).  The NIW family is closed under this affine map: the prior
    # becomes ``NIW(0, kappa_0, nu_0, I)``, the posterior maps back by ``m_n = loc + L_0 m_n'``,
    # ``Psi_n = L_0 Psi_n' L_0^T``, densities gain the Jacobian ``|L_0|^{-1}`` per observation.  The
    # statistics are then O(1) per step whatever the data's offset and units (no difference of
    # large raw moments, no overflow of ``y y^T`` when the data are large but the prior is scaled
    # to them), and every step is exact algebra.
    def _frame(self):
        """``L_0 (..., D, D)``, the lower Cholesky factor of ``scale``."""
        return mniw.cholesky(self.scale)

    def _frame_prior(self):
        """The prior in the frame: ``(M0 = 0 (..., D, 1), K0 (..., 1, 1), nu0 (...), Psi0 = I (..., D, D))``."""
        eye = jnp.broadcast_to(jnp.eye(self.dim, dtype=self.scale.dtype), self.scale.shape)
        return (jnp.zeros_like(self.loc)[..., None], self.mean_precision[..., None, None], self.df, eye)

    def _whiten(self, x):
        """``z = L_0^{-1} (x - loc)`` for ``x (..., D)`` (prior of batch shape ``()``)."""
        diff = jnp.asarray(x) - self.loc
        flat = diff.reshape(-1, self.dim)
        return mniw.whiten(self._frame(), flat.T).T.reshape(diff.shape)

    def sufficient_statistics(self, x, weights) -> GaussianStats:
        """``(count (K,), sum_y (K, D), sum_yy (K, D, D))``: weighted sums of the WHITENED
        observations ``z_t = L_0^{-1} (x_t - loc)`` and of ``z_t z_t^T``, ``weights (T, K)``.

        Statistics belong to the family object that computed them (the prior of the model): they
        are sums in that prior's frame (see the comment above), additive as ever.
        """
        w = jnp.asarray(weights, jnp.result_type(x))
        z = self._whiten(x)
        return GaussianStats(
            count=jnp.sum(w, axis=0),
            sum_y=jnp.matmul(w.T, z, precision=jax.lax.Precision.HIGHEST),
            sum_yy=jnp.einsum("tk,ti,tj->kij", w, z, z, precision=jax.lax.Precision.HIGHEST),
        )

    def label_statistics(self, x, labels, num_states: int) -> GaussianStats:
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)`` in ``O(T D^2)``: the per-state
        Gram matrices of ``[1; z_t]`` (:func:`~numpyro_hdphmm._core.segments.label_grams`), whose
        corner is the count, first column the sum and the rest the sum of squares."""
        z = self._whiten(x)
        grams = label_grams(jnp.concatenate([jnp.ones(z.shape[:-1] + (1,), z.dtype), z], axis=-1), labels, num_states)
        return GaussianStats(count=grams[:, 0, 0], sum_y=grams[:, 1:, 0], sum_yy=grams[:, 1:, 1:])

    def _frame_posterior(self, stats: GaussianStats):
        """NIW posterior in the frame (Murphy 2007 eqs. 250-254 via :func:`numpyro_hdphmm._core.mniw.mniw_posterior`):
        ``(m_n' (K, D, 1), kappa_n (K, 1, 1), nu_n (K,), Psi_n' (K, D, D))``."""
        return mniw.mniw_posterior(*self._frame_prior(), self._mniw_stats(stats))

    def posterior(self, stats: GaussianStats) -> "GaussianNIW":
        """NIW posterior (Murphy 2007 eqs. 250-254): ``kappa_n = kappa_0 + N``, ``nu_n = nu_0 + N``,
        ``m_n = m_0 + sum (y - m_0) / kappa_n``, ``Psi_n = Psi_0 + sum (y - m_0)(y - m_0)^T -
        kappa_n (m_n - m_0)(m_n - m_0)^T``; computed in the prior's frame and mapped back."""
        Mn, Kn, dfn, Psin = self._frame_posterior(stats)
        L0 = self._frame()
        loc = self.loc + jnp.einsum("...ij,...j->...i", L0, Mn[..., 0])
        scale = mniw.symmetrize(L0 @ Psin @ jnp.swapaxes(L0, -1, -2))
        return self._from_hyper(loc, Kn[..., 0, 0], dfn, scale, self.dim)

    def log_marginal_likelihood(self, stats: GaussianStats) -> jax.Array:
        """Closed-form evidence (Murphy 2007 sec. 9; :func:`numpyro_hdphmm._core.mniw.mniw_log_marginal`) of the
        whitened data plus the Jacobian ``-N/2 log|scale|``, shape ``(K,)``."""
        frame = mniw.mniw_log_marginal(*self._frame_prior(), self._mniw_stats(stats))
        return frame - 0.5 * jnp.asarray(stats.count) * mniw.logdet_from_cholesky(self._frame())

    def log_predictive(self, x, stats: GaussianStats) -> jax.Array:
        """Student-t predictive of one ``x (D,)`` (Murphy 2007 sec. 9): dof ``nu_n - D + 1``,
        location ``m_n``, shape ``Psi_n (kappa_n + 1) / (kappa_n (nu_n - D + 1))``; evaluated at
        ``z = L_0^{-1} (x - loc)`` in the frame, minus ``log|scale| / 2``.  ``(K,)``."""
        Mn, Kn, dfn, Psin = self._frame_posterior(stats)
        kn = Kn[..., 0, 0]
        dof = dfn - self.dim + 1
        c = (kn + 1.0) / (kn * dof)
        shape_chol = mniw.cholesky(Psin) * jnp.sqrt(c)[..., None, None]
        lp = mniw.mvt_log_density(self._whiten(x), Mn[..., 0], shape_chol, dof)
        return lp - 0.5 * mniw.logdet_from_cholesky(self._frame())

    def predictive_cache(self, stats: GaussianStats) -> mniw.PredictiveCache:
        """The Student-t predictive of :meth:`log_predictive` factorized per state: the MNIW cache
        (:func:`~numpyro_hdphmm._core.mniw.mniw_predictive_cache`) of the frame's posterior, the
        regressor ``[1]``, with ``-log|L_0|`` (the frame's Jacobian) in its constant."""
        cache = mniw.mniw_predictive_cache(*self._frame_prior(), self._mniw_stats(stats))
        return cache._replace(const=cache.const - 0.5 * mniw.logdet_from_cholesky(self._frame()))

    def cached_log_predictive(self, x, cache: mniw.PredictiveCache) -> jax.Array:
        """:meth:`log_predictive` of one ``x (D,)`` from :meth:`predictive_cache`: ``(K,)``."""
        z = self._whiten(x)
        return mniw.mniw_cached_log_predictive(z, jnp.ones((1,), z.dtype), cache)

    def sample_posterior(self, rng_key, stats: GaussianStats):
        """``(mu_k, cov_k) ~ NIW(posterior_k)`` for every state: drawn in the frame
        (:func:`numpyro_hdphmm._core.mniw.mniw_sample`) and mapped back, ``mu = loc + L_0 mu'``, ``cov = L_0 cov' L_0^T``."""
        Mn, Kn, dfn, Psin = self._frame_posterior(stats)
        A, cov = mniw.mniw_sample(rng_key, Mn, Kn, dfn, Psin, tuple(jnp.shape(dfn)))
        L0 = self._frame()
        return {"mu": self.loc + jnp.einsum("ij,...j->...i", L0, A[..., 0]), "cov": mniw.symmetrize(L0 @ cov @ L0.T)}

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``cov ~ IW(df, scale)`` (Bartlett), ``mu ~ N(loc, cov / mean_precision)``."""
        shape = tuple(sample_shape) + self.batch_shape
        A, cov = mniw.mniw_sample(rng_key, *self._as_mniw(), shape)
        return {"mu": A[..., 0], "cov": cov}

    def log_prior(self, params) -> jax.Array:
        """``log IW(cov | df, scale) + log N(mu | loc, cov / mean_precision)``, shape ``(K,)``."""
        return mniw.mniw_log_density(params["mu"][..., None], params["cov"], *self._as_mniw())

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``(T, K)`` Gaussian log densities: one small triangular inverse per state, then a matrix product."""
        chol = mniw.cholesky(params["cov"])  # (K, D, D)
        diff = x[None, :, :] - params["mu"][:, None, :]  # (K, T, D)
        z = mniw.whiten(chol, jnp.swapaxes(diff, -1, -2))  # (K, D, T)
        maha = jnp.sum(z * z, axis=-2)  # (K, T)
        ll = -0.5 * maha - 0.5 * mniw.logdet_from_cholesky(chol)[:, None] - 0.5 * self.dim * mniw.LOG_2PI
        return ll.T

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ N(mu_{z_t}, cov_{z_t})``, shape ``(T, D)``."""
        states = jnp.asarray(states)
        chol = mniw.cholesky(params["cov"])
        eps = jax.random.normal(rng_key, states.shape + (self.dim,), jnp.result_type(params["mu"]))
        return params["mu"][states] + jnp.einsum("tij,tj->ti", chol[states], eps)

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats: GaussianStats) -> jax.Array:
        """``E_q[log N(x_t | mu_k, cov_k)]`` under the NIW posterior (Bishop 2006 eq. 10.64-10.65;
        :func:`numpyro_hdphmm._core.mniw.mniw_expected_log_likelihood` with the constant regressor): ``x (T, D)`` ->
        ``(T, K)``."""
        post = self.posterior(stats)
        ones = jnp.ones((x.shape[0], 1), x.dtype)
        return mniw.mniw_expected_log_likelihood(x, ones, *post._as_mniw())

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """``{name}_cov ~ InverseWishart(df, scale)`` then ``{name}_mu ~ MultivariateNormal(loc,
        cov / mean_precision)``, each with batch shape ``(num_states,)``."""
        batch = (num_states,)
        cov = emission_site(
            f"{name}_cov", dist.InverseWishart(self.df, scale_matrix=self.scale).expand(batch)
        )
        tril = mniw.cholesky(cov) / jnp.sqrt(self.mean_precision)[..., None, None]
        mu = emission_site(f"{name}_mu", dist.MultivariateNormal(self.loc, scale_tril=tril).expand(batch))
        return {"mu": mu, "cov": cov}

    @classmethod
    def weakly_informative(cls, data, **overrides) -> "GaussianNIW":
        """Data-scaled prior for ``data (..., T, D)`` (rows with a NaN are ignored).

        ``loc`` = mean of the valid rows, ``mean_precision = 0.01`` (the prior on ``mu`` is ten
        times wider than the data), ``df = D + 2`` (the smallest integer with a finite prior mean
        of ``Sigma``), ``scale`` = covariance of the valid rows (plus a ``1e-6`` ridge), so that
        ``E[Sigma] = scale / (df - D - 1)`` is the pooled data covariance.  Any constructor
        argument in ``overrides`` replaces the default.

        ``data=None`` (no data, e.g. a prior predictive check of a model whose data argument is
        ``None``) gives the same prior for *standardized* data: ``loc = 0``, ``scale = I``, with
        ``D`` from the ``loc`` or ``scale`` override, else the keyword ``dim``, else 1.

        Raises ``ValueError`` (naming ``data``) when the data cannot scale a prior: no observed
        row (all NaN), fewer than two observed rows without a ``scale`` override, infinities,
        non-numeric values, or a spread that the float type cannot hold (rescale, or enable
        float64).  Under tracing (``jit_model_args``) the checks are skipped.
        """
        D = dimension_hint(overrides, ("loc", -1), ("scale", -1))
        if data is None:
            D = check_dim(overrides.pop("dim", None), D)
            dtype = default_float_dtype()
            kwargs = dict(loc=np.zeros(D, dtype), mean_precision=0.01, df=D + 2.0, scale=np.eye(D, dtype=dtype))
            return cls(**merge_overrides(kwargs, overrides, "GaussianNIW.weakly_informative"))
        data = vector_data(data, overrides.pop("dim", None))
        D = data.shape[-1]
        if not is_concrete(data):
            mean, scale = _weakly_informative_moments(jnp.asarray(data, jnp.result_type(float)))
        else:
            rows, _ = observed_rows("data", data, need=1 if "scale" in overrides else 2)
            mean = rows.mean(0)
            cov = np.cov(rows, rowvar=False).reshape(D, D) if rows.shape[0] > 1 else np.eye(D)
            check_data_spread("data", np.diag(cov), default_float_dtype(), "scale" not in overrides)
            scale = mniw.regularize_scale(jnp.asarray(cov, jnp.result_type(float)))
        kwargs = dict(loc=mean, mean_precision=0.01, df=D + 2.0, scale=scale)
        return cls(**merge_overrides(kwargs, overrides, "GaussianNIW.weakly_informative"))


@jax.jit
def _weakly_informative_moments(data):
    """``data (..., T, D)`` -> mean ``(D,)`` and regularized covariance ``(D, D)`` of the valid rows."""
    D = data.shape[-1]
    rows = data.reshape(-1, D)
    valid = ~jnp.any(jnp.isnan(rows), axis=-1)
    rows = jnp.where(valid[:, None], rows, 0.0)
    mean, cov, _ = mniw.data_moments(rows, valid)
    return mean, mniw.regularize_scale(cov)
