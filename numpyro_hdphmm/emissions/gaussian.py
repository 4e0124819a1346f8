"""Multivariate Gaussian emissions with a normal-inverse-Wishart prior (full covariance).

Prior (Murphy 2007, sec. 9; Gelman et al. BDA3 sec. 3.6)::

    Sigma      ~ InvWishart(df, scale)              E[Sigma] = scale / (df - D - 1)
    mu | Sigma ~ Normal(loc, Sigma / mean_precision)
    y_t        ~ Normal(mu_{z_t}, Sigma_{z_t})

The conjugate algebra is the matrix-normal-inverse-Wishart of :mod:`._mniw` with the constant
regressor ``x_t = [1]``: ``A = mu[:, None]``, ``K_0 = [[mean_precision]]``.

The posterior predictive is the exact multivariate Student-t (Murphy 2007 sec. 9).  Fox et al.
(2011, sticky HDP-HMM) use a moment-matched Gaussian instead; we do not.

Numerics: the statistics are raw (uncentred) weighted moments, so the scatter matrix
``Psi_n`` is a difference of large terms.  In float32 this loses accuracy when the data mean is
large relative to its spread (about 10% error in ``Psi_n`` for mean/std ~ 1000 and T ~ 1e4);
centre the data, or enable float64, in that regime.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist

from numpyro_hdphmm._core.validation import (
    check_finite,
    check_positive,
    check_positive_definite,
    check_shape,
)
from numpyro_hdphmm.emissions import _mniw
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
    _hyper_names = ("loc", "mean_precision", "df", "scale")

    def __init__(self, loc, mean_precision, df, scale):
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
        _mniw.check_df(df, D, "df")
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
    def _mniw_stats(stats: GaussianStats) -> _mniw.MNIWStats:
        count = jnp.asarray(stats.count)
        return _mniw.MNIWStats(count, count[..., None, None], stats.sum_y[..., None], stats.sum_yy)

    @classmethod
    def _from_hyper(cls, loc, mean_precision, df, scale, dim):
        return cls.tree_unflatten((dim,), (loc, mean_precision, df, scale))

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """``y (..., T, D)``: trailing dimension ``D``, no infinities (NaN marks missing)."""
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != self.dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.dim}), got {jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)

    def prepare(self, y):
        """``y (T, D) -> (x (T, D), valid (T,))``; a row with any NaN is invalid and set to 0."""
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        valid = ~jnp.any(jnp.isnan(y), axis=-1)
        return jnp.where(valid[..., None], y, jnp.zeros((), y.dtype)), valid

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights) -> GaussianStats:
        """``(count (K,), sum_y (K, D), sum_yy (K, D, D))`` of ``y - loc``, weighted by ``weights (T, K)``.

        The moments are centred at the prior mean ``loc`` (``weakly_informative`` puts it at the
        data mean), so that ``Psi_n`` is not a difference of large raw moments: float32 stays
        accurate for data far from the origin.  Statistics therefore belong to the family object
        that computed them (as everywhere in the package: the prior of the model).
        """
        w = jnp.asarray(weights, jnp.result_type(x))
        xc = x - self.loc
        return GaussianStats(
            count=jnp.sum(w, axis=0),
            sum_y=w.T @ xc,
            sum_yy=jnp.einsum("tk,ti,tj->kij", w, xc, xc),
        )

    def _as_centred_mniw(self):
        """The prior in coordinates centred at ``loc`` (prior mean zero)."""
        return (jnp.zeros_like(self.loc)[..., None], self.mean_precision[..., None, None], self.df, self.scale)

    def posterior(self, stats: GaussianStats) -> "GaussianNIW":
        """NIW posterior (Murphy 2007 eqs. 250-254) in centred coordinates ``y - m_0``:
        ``kappa_n = kappa_0 + N``, ``m_n = m_0 + sum (y - m_0) / kappa_n``, ``nu_n = nu_0 + N``,
        ``Psi_n = Psi_0 + sum (y - m_0)(y - m_0)^T - kappa_n (m_n - m_0)(m_n - m_0)^T``, via
        :func:`._mniw.mniw_posterior`."""
        Mn, Kn, dfn, Psin = _mniw.mniw_posterior(*self._as_centred_mniw(), self._mniw_stats(stats))
        return self._from_hyper(self.loc + Mn[..., 0], Kn[..., 0, 0], dfn, Psin, self.dim)

    def log_marginal_likelihood(self, stats: GaussianStats) -> jax.Array:
        """Closed-form evidence (Murphy 2007 sec. 9; :func:`._mniw.mniw_log_marginal`; invariant
        under the translation to centred coordinates), shape ``(K,)``."""
        return _mniw.mniw_log_marginal(*self._as_centred_mniw(), self._mniw_stats(stats))

    def log_predictive(self, x, stats: GaussianStats) -> jax.Array:
        """Student-t predictive of one ``x (D,)`` (Murphy 2007 sec. 9): dof ``nu_n - D + 1``,
        location ``m_n``, shape ``Psi_n (kappa_n + 1) / (kappa_n (nu_n - D + 1))``.  ``(K,)``."""
        post = self.posterior(stats)
        dof = post.df - self.dim + 1
        c = (post.mean_precision + 1.0) / (post.mean_precision * dof)
        shape_chol = _mniw.cholesky(post.scale) * jnp.sqrt(c)[..., None, None]
        return _mniw.mvt_log_density(x, post.loc, shape_chol, dof)

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``cov ~ IW(df, scale)`` (Bartlett), ``mu ~ N(loc, cov / mean_precision)``."""
        shape = tuple(sample_shape) + self.batch_shape
        A, cov = _mniw.mniw_sample(rng_key, *self._as_mniw(), shape)
        return {"mu": A[..., 0], "cov": cov}

    def log_prior(self, params) -> jax.Array:
        """``log IW(cov | df, scale) + log N(mu | loc, cov / mean_precision)``, shape ``(K,)``."""
        return _mniw.mniw_log_density(params["mu"][..., None], params["cov"], *self._as_mniw())

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``(T, K)`` Gaussian log densities: one small triangular inverse per state, then a matrix product."""
        chol = _mniw.cholesky(params["cov"])  # (K, D, D)
        diff = x[None, :, :] - params["mu"][:, None, :]  # (K, T, D)
        z = _mniw.whiten(chol, jnp.swapaxes(diff, -1, -2))  # (K, D, T)
        maha = jnp.sum(z * z, axis=-2)  # (K, T)
        ll = -0.5 * maha - 0.5 * _mniw.logdet_from_cholesky(chol)[:, None] - 0.5 * self.dim * _mniw._LOG_2PI
        return ll.T

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ N(mu_{z_t}, cov_{z_t})``, shape ``(T, D)``."""
        states = jnp.asarray(states)
        chol = _mniw.cholesky(params["cov"])
        eps = jax.random.normal(rng_key, states.shape + (self.dim,), jnp.result_type(params["mu"]))
        return params["mu"][states] + jnp.einsum("tij,tj->ti", chol[states], eps)

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats: GaussianStats) -> jax.Array:
        """``E_q[log N(x_t | mu_k, cov_k)]`` under the NIW posterior (Bishop 2006 eq. 10.64-10.65;
        :func:`._mniw.mniw_expected_log_likelihood` with the constant regressor): ``x (T, D)`` ->
        ``(T, K)``."""
        post = self.posterior(stats)
        ones = jnp.ones((x.shape[0], 1), x.dtype)
        return _mniw.mniw_expected_log_likelihood(x, ones, *post._as_mniw())

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """``{name}_cov ~ InverseWishart(df, scale)`` then ``{name}_mu ~ MultivariateNormal(loc,
        cov / mean_precision)``, each with batch shape ``(num_states,)``."""
        batch = (num_states,)
        cov = emission_site(
            f"{name}_cov", dist.InverseWishart(self.df, scale_matrix=self.scale).expand(batch)
        )
        tril = _mniw.cholesky(cov) / jnp.sqrt(self.mean_precision)[..., None, None]
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
        """
        data = jnp.asarray(data, jnp.result_type(float))
        if jnp.ndim(data) < 2:
            raise ValueError(f"`data` must have shape (..., T, D), got {jnp.shape(data)}.")
        D = data.shape[-1]
        mean, scale = _weakly_informative_moments(data)
        kwargs = dict(loc=mean, mean_precision=0.01, df=D + 2.0, scale=scale)
        unknown = set(overrides) - set(kwargs)
        if unknown:
            raise ValueError(f"unknown argument(s) {sorted(unknown)} for GaussianNIW.weakly_informative.")
        kwargs.update(overrides)
        return cls(**kwargs)


@jax.jit
def _weakly_informative_moments(data):
    """``data (..., T, D)`` -> mean ``(D,)`` and regularized covariance ``(D, D)`` of the valid rows."""
    D = data.shape[-1]
    rows = data.reshape(-1, D)
    valid = ~jnp.any(jnp.isnan(rows), axis=-1)
    rows = jnp.where(valid[:, None], rows, 0.0)
    mean, cov, _ = _mniw.data_moments(rows, valid)
    return mean, _mniw.regularize_scale(cov)
