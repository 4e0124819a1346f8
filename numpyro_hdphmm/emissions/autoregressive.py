"""Vector-autoregressive emissions with a matrix-normal-inverse-Wishart prior (AR-HMM).

Model (Fox et al. 2011, "Bayesian nonparametric inference of switching dynamic linear models";
Fox 2009, PhD thesis, MNIW appendix)::

    x_t = [y_{t-1}; y_{t-2}; ...; y_{t-p}; 1]      (the trailing 1 only when ``affine``)
    y_t = A_{z_t} x_t + e_t,   e_t ~ Normal(0, Sigma_{z_t})
    Sigma ~ InvWishart(df, scale),   A | Sigma ~ MatrixNormal(loc, Sigma, col_precision^{-1})

``A`` is ``(D, D p + a)`` with ``a = 1`` if affine: columns ``[(j-1) D, j D)`` multiply lag ``j``
and the last column is the intercept.

**Presample convention.**  Values before the start of a sequence are zero:
``y_{-1} = ... = y_{-p} = 0`` (as in dynamax's linear autoregressive HMM).  The first ``p``
steps are therefore modelled with partly-zero regressors rather than dropped.

**Missing values.**  A NaN anywhere in ``y_s`` makes step ``s`` invalid and also steps
``s+1, ..., s+p`` (their regressors are unknown); NaNs are replaced by 0 in both the targets and
the regressors so every density stays finite.

**Numerics.**  As for :class:`GaussianNIW`, the statistics are raw weighted moments; in float32
centre data whose mean is large relative to its spread.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist

from numpyro_hdphmm._core.validation import (
    check_static_int,
    check_finite,
    check_positive_definite,
    check_shape,
)
from numpyro_hdphmm.emissions import _mniw
from numpyro_hdphmm.emissions._mniw import MNIWStats
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["AutoRegressive", "ARInputs", "MNIWStats"]


class ARInputs(NamedTuple):
    """The model's view of one sequence: targets ``y (T, D)`` and regressors ``regressor (T, m)``."""

    y: jax.Array
    regressor: jax.Array


@jax.tree_util.register_pytree_node_class
class AutoRegressive(EmissionFamily):
    """Order-``p`` vector autoregression per state with an MNIW prior.

    Args:
        order: ``p >= 1`` (static).
        loc: ``(..., D, D p + a)`` prior mean ``M_0`` of ``A``.
        col_precision: ``(..., m, m)`` positive-definite ``K_0``, ``m = D p + a``; the column
            covariance of ``A`` given ``Sigma`` is ``K_0^{-1}``.
        df: ``(...)`` ``nu_0 > D - 1``.
        scale: ``(..., D, D)`` positive-definite ``Psi_0``.
        affine: include the intercept column (static).

    Parameters: ``A (K, D, m)``, ``cov (K, D, D)``.  Statistics: :class:`MNIWStats`
    ``(N, sum x x^T, sum y x^T, sum y y^T)`` with ``x`` the regressor.
    """

    param_names = ("A", "cov")
    conjugate = True
    _hyper_names = ("loc", "col_precision", "df", "scale")

    def __init__(self, order, loc, col_precision, df, scale, affine: bool = True):
        order = check_static_int("order", order)
        affine = bool(affine)
        dtype = jnp.result_type(float)
        loc = jnp.asarray(loc, dtype)
        if jnp.ndim(loc) < 2:
            raise ValueError(f"`loc` must have shape (..., D, D * order + {int(affine)}), got {jnp.shape(loc)}.")
        D = loc.shape[-2]
        m = D * order + int(affine)
        check_shape("loc", loc, (None,) * (loc.ndim - 2) + (D, m), f"(..., D, D * order + {int(affine)})")
        col_precision = jnp.asarray(col_precision, dtype)
        df = jnp.asarray(df, dtype)
        scale = jnp.asarray(scale, dtype)
        if jnp.ndim(col_precision) < 2:
            raise ValueError(f"`col_precision` must have shape (..., {m}, {m}), got {jnp.shape(col_precision)}.")
        check_shape("col_precision", col_precision, (None,) * (col_precision.ndim - 2) + (m, m), "(..., m, m)")
        if jnp.ndim(scale) < 2:
            raise ValueError(f"`scale` must have shape (..., {D}, {D}), got {jnp.shape(scale)}.")
        check_shape("scale", scale, (None,) * (scale.ndim - 2) + (D, D), "(..., D, D)")
        check_finite("loc", loc)
        check_positive_definite("col_precision", col_precision)
        _mniw.check_df(df, D, "df")
        check_positive_definite("scale", scale)
        try:
            batch = jnp.broadcast_shapes(loc.shape[:-2], col_precision.shape[:-2], df.shape, scale.shape[:-2])
        except ValueError as e:
            raise ValueError(f"`loc`, `col_precision`, `df` and `scale` have incompatible batch shapes: {e}") from None
        self.loc = jnp.broadcast_to(loc, batch + (D, m))
        self.col_precision = jnp.broadcast_to(col_precision, batch + (m, m))
        self.df = jnp.broadcast_to(df, batch)
        self.scale = jnp.broadcast_to(scale, batch + (D, D))
        self.dim = int(D)
        self.order = order
        self.affine = affine

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.loc, self.col_precision, self.df, self.scale), (self.dim, self.order, self.affine)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.loc, obj.col_precision, obj.df, obj.scale = children
        obj.dim, obj.order, obj.affine = aux
        return obj

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return (self.dim,)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.df))

    @property
    def num_regressors(self) -> int:
        """``m = D * order + (1 if affine else 0)``."""
        return self.dim * self.order + int(self.affine)

    def _hyper(self):
        return (self.loc, self.col_precision, self.df, self.scale)

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """``y (..., T, D)``: trailing dimension ``D``, no infinities (NaN marks missing)."""
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != self.dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.dim}), got {jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)

    def _regressor(self, lags):
        """``lags (..., p, D)`` (most recent first) -> regressor ``(..., m)``."""
        flat = lags.reshape(lags.shape[:-2] + (self.order * self.dim,))
        if self.affine:
            flat = jnp.concatenate([flat, jnp.ones(flat.shape[:-1] + (1,), flat.dtype)], axis=-1)
        return flat

    def prepare(self, y):
        """``y (T, D) -> (ARInputs(y (T, D), regressor (T, m)), valid (T,))``.

        ``regressor_t = [y_{t-1}; ...; y_{t-p}; 1]`` with zeros before the start (presample
        convention); ``valid_t`` requires rows ``t, t-1, ..., t-p`` (those inside the sequence)
        to be NaN-free.  NaNs are replaced by 0.
        """
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        T, p = y.shape[0], self.order
        row_ok = ~jnp.any(jnp.isnan(y), axis=-1)
        y0 = jnp.where(row_ok[:, None], y, jnp.zeros((), y.dtype))
        ypad = jnp.concatenate([jnp.zeros((p, self.dim), y.dtype), y0], axis=0)  # (T + p, D)
        okpad = jnp.concatenate([jnp.ones((p,), bool), row_ok], axis=0)
        lags = jnp.stack([ypad[p - j : p - j + T] for j in range(1, p + 1)], axis=1)  # (T, p, D)
        valid = row_ok
        for j in range(1, p + 1):
            valid = valid & okpad[p - j : p - j + T]
        return ARInputs(y0, self._regressor(lags)), valid

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights) -> MNIWStats:
        """``(N (K,), sum x x^T (K, m, m), sum y x^T (K, D, m), sum y y^T (K, D, D))``."""
        w = jnp.asarray(weights, jnp.result_type(x.y))
        return _mniw.mniw_statistics(x.y, x.regressor, w)

    def posterior(self, stats: MNIWStats) -> "AutoRegressive":
        """MNIW posterior (Minka 1998; Fox 2009, PhD thesis, MNIW appendix): ``K_n = K_0 + S_xx``,
        ``M_n = (M_0 K_0 + S_yx) K_n^{-1}``, ``nu_n = nu_0 + N``,
        ``Psi_n = Psi_0 + S_yy + M_0 K_0 M_0^T - M_n K_n M_n^T``."""
        hyper = _mniw.mniw_posterior(*self._hyper(), stats)
        return self.tree_unflatten((self.dim, self.order, self.affine), hyper)

    def log_marginal_likelihood(self, stats: MNIWStats) -> jax.Array:
        """Closed-form MNIW evidence (see :func:`._mniw.mniw_log_marginal`), shape ``(K,)``."""
        return _mniw.mniw_log_marginal(*self._hyper(), stats)

    def log_predictive(self, x, stats: MNIWStats) -> jax.Array:
        """Student-t predictive of one ``x = ARInputs(y (D,), regressor (m,))``: dof
        ``nu_n - D + 1``, location ``M_n x``, shape ``Psi_n (1 + x^T K_n^{-1} x) / (nu_n - D + 1)``."""
        post = self.posterior(stats)
        return _mniw.mniw_log_predictive(x.y, x.regressor, *post._hyper())

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``cov ~ IW(df, scale)`` (Bartlett), ``A ~ MN(loc, cov, col_precision^{-1})``."""
        shape = tuple(sample_shape) + self.batch_shape
        A, cov = _mniw.mniw_sample(rng_key, *self._hyper(), shape)
        return {"A": A, "cov": cov}

    def log_prior(self, params) -> jax.Array:
        """``log IW(cov | df, scale) + log MN(A | loc, cov, col_precision^{-1})``, shape ``(K,)``."""
        return _mniw.mniw_log_density(params["A"], params["cov"], *self._hyper())

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``(T, K)`` log densities ``log N(y_t | A_k x_t, cov_k)`` (one small triangular inverse per state, then a matrix product)."""
        chol = _mniw.cholesky(params["cov"])  # (K, D, D)
        mean = jnp.einsum("kdm,tm->kdt", params["A"], x.regressor)  # (K, D, T)
        diff = x.y.T[None] - mean
        z = _mniw.whiten(chol, diff)
        maha = jnp.sum(z * z, axis=-2)
        ll = -0.5 * maha - 0.5 * _mniw.logdet_from_cholesky(chol)[:, None] - 0.5 * self.dim * _mniw._LOG_2PI
        return ll.T

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """Generate ``y (T, D)`` sequentially with ``lax.scan`` from zero presample values."""
        states = jnp.asarray(states)
        A = params["A"]
        chol = _mniw.cholesky(params["cov"])
        eps = jax.random.normal(rng_key, states.shape + (self.dim,), jnp.result_type(A))

        def step(lags, inp):
            z, e = inp
            y = A[z] @ self._regressor(lags) + chol[z] @ e
            lags = jnp.concatenate([y[None], lags[:-1]], axis=0)
            return lags, y

        init = jnp.zeros((self.order, self.dim), jnp.result_type(A))
        _, ys = jax.lax.scan(step, init, (states, eps))
        return ys

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats: MNIWStats) -> jax.Array:
        """``E_q[log N(y_t | A_k x_t, cov_k)]`` under the MNIW posterior
        (:func:`._mniw.mniw_expected_log_likelihood`): ``x = ARInputs(y (T, D), regressor (T, m))`` ->
        ``(T, K)``."""
        post = self.posterior(stats)
        return _mniw.mniw_expected_log_likelihood(x.y, x.regressor, *post._hyper())

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """``{name}_cov ~ InverseWishart(df, scale)`` then ``{name}_A ~ MatrixNormal(loc, cov,
        col_precision^{-1})``, each with batch shape ``(num_states,)``."""
        batch = (num_states,)
        cov = emission_site(
            f"{name}_cov", dist.InverseWishart(self.df, scale_matrix=self.scale).expand(batch)
        )
        m = self.num_regressors
        Ck = _mniw.cholesky(self.col_precision)
        eye = jnp.broadcast_to(jnp.eye(m, dtype=Ck.dtype), Ck.shape)
        col_cov = _mniw._cho_solve(Ck, eye)  # K_0^{-1}
        A = emission_site(
            f"{name}_A",
            dist.MatrixNormal(self.loc, _mniw.cholesky(cov), _mniw.cholesky(col_cov)).expand(batch),
        )
        return {"A": A, "cov": cov}

    @classmethod
    def weakly_informative(cls, data, order: int = 1, affine: bool = True, **overrides) -> "AutoRegressive":
        """Data-scaled prior for ``data (..., T, D)`` (NaN rows allowed).

        * ``loc = 0``: the prior is centred on "no dynamics"; with the weak ``col_precision``
          below the data dominate (we do not centre on a random walk, which would bias
          non-persistent series).
        * ``col_precision = 0.01 * diag(mean_t x_t x_t^T)``: a unit-information (Zellner
          g-prior style) scaling per regressor, divided by 100, so ``A`` is in the units of the
          data and ten prior standard deviations wide.
        * ``df = D + 2`` (finite prior mean of ``Sigma``).
        * ``scale`` = residual covariance of a pooled (ridge-stabilized) least-squares VAR fit
          over all valid steps, plus a ``1e-6`` ridge, so ``E[Sigma]`` is that covariance.
        """
        data = jnp.asarray(data, jnp.result_type(float))
        if jnp.ndim(data) < 2:
            raise ValueError(f"`data` must have shape (..., T, D), got {jnp.shape(data)}.")
        order = check_static_int("order", order)
        D = data.shape[-1]
        m = D * order + int(bool(affine))
        second, resid_cov = _weakly_informative_moments(data, order, bool(affine))
        kwargs = dict(
            loc=jnp.zeros((D, m), resid_cov.dtype),
            col_precision=jnp.diag(0.01 * second),
            df=D + 2.0,
            scale=resid_cov,
        )
        unknown = set(overrides) - set(kwargs)
        if unknown:
            raise ValueError(f"unknown argument(s) {sorted(unknown)} for AutoRegressive.weakly_informative.")
        kwargs.update(overrides)
        return cls(order, affine=affine, **kwargs)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _weakly_informative_moments(data, order: int, affine: bool):
    """``data (..., T, D)`` -> (mean regressor second moments ``(m,)``, regularized residual
    covariance ``(D, D)`` of a pooled ridge least-squares VAR fit over all valid steps)."""
    T, D = data.shape[-2:]
    m = D * order + int(affine)
    seqs = data.reshape((-1, T, D))
    tmp = AutoRegressive.tree_unflatten((D, order, affine), (None,) * 4)  # prepare needs no hyperparameters
    x, valid = jax.vmap(tmp.prepare)(seqs)
    ys, regs, ok = x.y.reshape(-1, D), x.regressor.reshape(-1, m), valid.reshape(-1)
    stats = _mniw.mniw_statistics(ys, regs, ok.astype(ys.dtype)[:, None])
    stats = jax.tree_util.tree_map(lambda a: a[0], stats)
    n = jnp.maximum(stats.count, 1.0)
    second = jnp.diagonal(stats.sum_xx) / n
    second = jnp.where(second > 0, second, 1.0)
    # pooled least squares with a tiny ridge: residual sum of squares S_yy - S_yx S_xx^{-1} S_xy
    ridge = jnp.diag(1e-8 * second * n + 1e-12)
    _, _, _, rss = _mniw.mniw_posterior(jnp.zeros((D, m), ys.dtype), ridge, 0.0, jnp.zeros((D, D), ys.dtype), stats)
    resid_cov = jnp.where(stats.count > m, rss / jnp.maximum(stats.count - m, 1.0), jnp.eye(D, dtype=ys.dtype))
    return second, _mniw.regularize_scale(resid_cov)
