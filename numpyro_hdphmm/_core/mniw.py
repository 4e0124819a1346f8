"""Matrix-normal-inverse-Wishart (MNIW) conjugate algebra, shared by :class:`GaussianNIW` and
:class:`AutoRegressive`.

Model (``D`` outputs, ``m`` regressors)::

    Sigma          ~ InvWishart(nu0, Psi0)                       (D, D)
    A | Sigma      ~ MatrixNormal(M0, Sigma, K0^{-1})            (D, m)
    y_t | A, Sigma ~ Normal(A x_t, Sigma)                        y_t (D,), x_t (m,)

``MatrixNormal(M, U, V)`` means ``vec(A) ~ N(vec(M), V kron U)`` (row covariance ``U``, column
covariance ``V``), as in :class:`numpyro.distributions.MatrixNormal`.  ``InvWishart(nu, Psi)``
has density ``|Psi|^{nu/2} |Sigma|^{-(nu+D+1)/2} exp(-tr(Psi Sigma^{-1})/2) / (2^{nu D/2}
Gamma_D(nu/2))`` and mean ``Psi / (nu - D - 1)``, as :class:`numpyro.distributions.InverseWishart`.

The normal-inverse-Wishart prior of a Gaussian is the special case ``m = 1``, ``x_t = [1]``,
``A = mu[:, None]``, ``K0 = [[kappa0]]`` (Murphy 2007, sec. 9, is this case written out).

References: T. Minka, "Bayesian linear regression" (1998/2001), eqs. for the MNIW posterior and
evidence; E. Fox, PhD thesis (MIT, 2009), appendix on the MNIW; K. Murphy, "Conjugate Bayesian
analysis of the Gaussian distribution" (2007), sec. 9 (normal-inverse-Wishart): eqs. 250-254
(posterior), and the marginal-likelihood and posterior-predictive (Student-t) results of the
same section; Gelman et al., BDA3, sec. 3.6 and app. A.

Every function broadcasts over leading batch axes of its arguments.  All densities work in log
space; all matrix inverses go through Cholesky factors and triangular solves.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import gammaln, multigammaln

from numpyro_hdphmm._core.random import gamma
from numpyro_hdphmm._core.segments import label_counts, label_grams

__all__ = [
    "MNIWStats",
    "mniw_statistics",
    "mniw_label_statistics",
    "mniw_posterior",
    "mniw_log_marginal",
    "mniw_log_predictive",
    "PredictiveCache",
    "mniw_predictive_cache",
    "mniw_cached_log_predictive",
    "mniw_sample",
    "mniw_log_density",
    "mvt_log_density",
    "inverse_wishart_log_density",
    "sample_inverse_wishart",
    "cholesky",
    "symmetrize",
    "logdet_from_cholesky",
    "check_df",
    "data_moments",
    "regularize_scale",
    "whiten",
    "cho_solve",
    "LOG_2PI",
]

_LOG_PI = 1.1447298858494002  # log(pi)
_LOG_2 = 0.6931471805599453
LOG_2PI = 1.8378770664093453


class MNIWStats(NamedTuple):
    """Weighted sufficient statistics of the regression ``y_t = A x_t + e_t``.

    ``count (...)``: ``sum_t w_t``; ``sum_xx (..., m, m)``: ``sum_t w_t x_t x_t^T``;
    ``sum_yx (..., D, m)``: ``sum_t w_t y_t x_t^T``; ``sum_yy (..., D, D)``: ``sum_t w_t y_t y_t^T``.
    """

    count: jax.Array
    sum_xx: jax.Array
    sum_yx: jax.Array
    sum_yy: jax.Array


# ---------------------------------------------------------------------------- linear algebra
def _mT(a):
    return jnp.swapaxes(a, -1, -2)


def _sym(a):
    return 0.5 * (a + _mT(a))


def symmetrize(a):
    """``(a + a^T) / 2`` over the trailing two axes."""
    return _sym(a)


@jax.jit
def cholesky(a):
    """Lower Cholesky factor of the (symmetrized) matrices ``a (..., n, n)``.  Jitted: an eager
    call (a model run outside ``jit``, e.g. model discovery) is one compiled program per shape
    rather than one per operation."""
    return jnp.linalg.cholesky(_sym(a))


def logdet_from_cholesky(chol):
    """``log|L L^T|`` from the lower Cholesky factor ``chol (..., n, n)``: shape ``(...)``."""
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(chol, axis1=-2, axis2=-1)), axis=-1)


def _bcast_pair(a, b):
    """Broadcast the batch axes (all but the last two) of two matrix stacks."""
    batch = jnp.broadcast_shapes(jnp.shape(a)[:-2], jnp.shape(b)[:-2])
    return (jnp.broadcast_to(a, batch + jnp.shape(a)[-2:]), jnp.broadcast_to(b, batch + jnp.shape(b)[-2:]))


def whiten(chol, b):
    """``chol^{-1} b`` for a long trailing axis of ``b`` (``(..., D, T)``): the small inverse
    ``chol^{-1}`` (one triangular solve against the identity) times ``b`` as one matrix product,
    which XLA runs far faster than a triangular solve with ``T`` right-hand sides."""
    return jnp.matmul(_inverse_of_lower(chol), b, precision=jax.lax.Precision.HIGHEST)


def _tri_solve(chol, b, trans=0):
    """Solve ``L z = b`` (``trans=0``) or ``L^T z = b`` (``trans=1``) for matrices ``b (..., n, k)``."""
    chol, b = _bcast_pair(chol, b)
    return solve_triangular(chol, b, lower=True, trans=trans)


def _inverse_of_lower(chol):
    """``chol^{-1}`` of lower-triangular ``chol (..., n, n)`` (one triangular solve against ``I``)."""
    eye = jnp.broadcast_to(jnp.eye(chol.shape[-1], dtype=chol.dtype), chol.shape)
    return _tri_solve(chol, eye)


def cho_solve(chol, b):
    """``(L L^T)^{-1} b`` for ``b (..., n, k)``."""
    return _tri_solve(chol, _tri_solve(chol, b), trans=1)


# ---------------------------------------------------------------------------- statistics
def mniw_statistics(y, x, weights) -> MNIWStats:
    """Weighted statistics per state: ``y (T, D)``, ``x (T, m)``, ``weights (T, K)`` -> leading ``K``."""
    w = jnp.asarray(weights)
    return MNIWStats(
        count=jnp.sum(w, axis=0),
        sum_xx=jnp.einsum("tk,ti,tj->kij", w, x, x),
        sum_yx=jnp.einsum("tk,ti,tj->kij", w, y, x),
        sum_yy=jnp.einsum("tk,ti,tj->kij", w, y, y),
    )


def mniw_label_statistics(y, x, labels, num_states: int) -> MNIWStats:
    """The statistics of hard labels: ``y (T, D)``, ``x (T, m)``, ``labels (T,)`` (a label outside
    ``[0, K)`` adds nothing) -> leading ``K``; :func:`mniw_statistics` of the one-hot weights, as
    the per-state Gram matrices of ``[x_t; y_t]`` (:func:`~numpyro_hdphmm._core.segments.label_grams`,
    ``O(T (m + D)^2)`` instead of ``O(T K (m + D)^2)``)."""
    m = jnp.shape(x)[-1]
    dtype = jnp.result_type(x, y)
    grams = label_grams(jnp.concatenate([x.astype(dtype), y.astype(dtype)], axis=-1), labels, num_states)
    return MNIWStats(
        count=label_counts(labels, num_states, dtype),
        sum_xx=grams[:, :m, :m],
        sum_yx=grams[:, m:, :m],
        sum_yy=grams[:, m:, m:],
    )


# ---------------------------------------------------------------------------- posterior
def _posterior_and_root(loc, col_precision, df, scale, stats: MNIWStats):
    """:func:`mniw_posterior`'s four results and ``C_n``, the lower Cholesky factor of ``K_n``."""
    Kn = _sym(col_precision + stats.sum_xx)
    B = loc @ col_precision + stats.sum_yx  # (..., D, m)
    Cn = cholesky(Kn)
    G = _tri_solve(Cn, _mT(B))  # (..., m, D)
    Mn = _mT(_tri_solve(Cn, G, trans=1))  # (K_n^{-1} B^T)^T
    quad0 = loc @ col_precision @ _mT(loc)
    Psin = _sym(scale + stats.sum_yy + quad0 - _mT(G) @ G)
    dfn = df + stats.count
    batch = jnp.broadcast_shapes(jnp.shape(Mn)[:-2], jnp.shape(Kn)[:-2], jnp.shape(dfn), jnp.shape(Psin)[:-2])
    D, m = jnp.shape(Mn)[-2:]
    return (
        jnp.broadcast_to(Mn, batch + (D, m)),
        jnp.broadcast_to(Kn, batch + (m, m)),
        jnp.broadcast_to(dfn, batch),
        jnp.broadcast_to(Psin, batch + (D, D)),
        jnp.broadcast_to(Cn, batch + (m, m)),
    )


def mniw_posterior(loc, col_precision, df, scale, stats: MNIWStats):
    """MNIW posterior hyperparameters (Minka 1998; Fox 2009 thesis; Murphy 2007 eqs. 250-254 for m=1).

    ``K_n = K_0 + S_xx``, ``M_n = (M_0 K_0 + S_yx) K_n^{-1}``, ``nu_n = nu_0 + N``,
    ``Psi_n = Psi_0 + S_yy + M_0 K_0 M_0^T - M_n K_n M_n^T``.

    Shapes: ``loc (..., D, m)``, ``col_precision (..., m, m)``, ``df (...)``, ``scale (..., D, D)``;
    returns the same four with the broadcast batch shape of the prior and ``stats``.
    ``M_n K_n M_n^T`` is computed as ``G^T G`` with ``G = C_n^{-1} (M_0 K_0 + S_yx)^T`` and
    ``C_n`` the Cholesky factor of ``K_n``; ``Psi_n`` is symmetrized.
    """
    return _posterior_and_root(loc, col_precision, df, scale, stats)[:4]


def mniw_log_marginal(loc, col_precision, df, scale, stats: MNIWStats):
    """Log evidence ``log p(Y | X)`` under the MNIW prior, shape = broadcast batch shape.

    Minka (1998); for ``m = 1`` the NIW evidence of Murphy (2007) sec. 9::

        -N D/2 log(pi) + D/2 (log|K_0| - log|K_n|) + nu_0/2 log|Psi_0| - nu_n/2 log|Psi_n|
        + log Gamma_D(nu_n/2) - log Gamma_D(nu_0/2)

    ``N`` may be fractional (weighted statistics).
    """
    D = jnp.shape(scale)[-1]
    Mn, Kn, dfn, Psin = mniw_posterior(loc, col_precision, df, scale, stats)
    ld_K0 = logdet_from_cholesky(cholesky(col_precision))
    ld_Kn = logdet_from_cholesky(cholesky(Kn))
    ld_P0 = logdet_from_cholesky(cholesky(scale))
    ld_Pn = logdet_from_cholesky(cholesky(Psin))
    return (
        -0.5 * stats.count * D * _LOG_PI
        + 0.5 * D * (ld_K0 - ld_Kn)
        + 0.5 * df * ld_P0
        - 0.5 * dfn * ld_Pn
        + multigammaln(0.5 * dfn, D)
        - multigammaln(0.5 * df, D)
    )


# ---------------------------------------------------------------------------- densities
def mvt_log_density(y, loc, shape_chol, dof):
    """Multivariate Student-t log density with ``dof`` degrees of freedom, location ``loc`` and
    shape matrix ``S = L L^T`` (``shape_chol = L``)::

        log Gamma((v+D)/2) - log Gamma(v/2) - D/2 log(v pi) - 1/2 log|S| - (v+D)/2 log(1 + d^T S^{-1} d / v)

    (Gelman et al. BDA3 app. A, with shape matrix ``S``; Murphy 2007 sec. 9).  ``y, loc (..., D)``, ``dof (...)``.
    """
    D = jnp.shape(y)[-1]
    z = _tri_solve(shape_chol, (y - loc)[..., None])[..., 0]
    maha = jnp.sum(z * z, axis=-1)
    return (
        gammaln(0.5 * (dof + D))
        - gammaln(0.5 * dof)
        - 0.5 * D * (jnp.log(dof) + _LOG_PI)
        - 0.5 * logdet_from_cholesky(shape_chol)
        - 0.5 * (dof + D) * jnp.log1p(maha / dof)
    )


def mniw_log_predictive(y, x, loc_n, col_precision_n, df_n, scale_n):
    """Posterior predictive ``log p(y | x, data)`` from POSTERIOR hyperparameters.

    The matrix-t predictive at a regressor ``x`` is a multivariate Student-t (Minka 1998;
    Murphy 2007 sec. 9 for ``m=1``, ``x=[1]``): dof ``v = nu_n - D + 1``, location ``M_n x``,
    shape ``Psi_n (1 + x^T K_n^{-1} x) / v``.  ``y (D,)``, ``x (m,)`` broadcast against the
    batch axes of the hyperparameters.
    """
    D = jnp.shape(scale_n)[-1]
    dof = df_n - D + 1
    Cn = cholesky(col_precision_n)
    u = _tri_solve(Cn, jnp.broadcast_to(x, jnp.shape(col_precision_n)[:-1])[..., None])[..., 0]
    c = 1.0 + jnp.sum(u * u, axis=-1)
    shape_chol = cholesky(scale_n) * jnp.sqrt(c / dof)[..., None, None]
    mean = jnp.einsum("...ij,...j->...i", loc_n, x)
    return mvt_log_density(y, mean, shape_chol, dof)


class PredictiveCache(NamedTuple):
    r"""The posterior predictive of :func:`mniw_log_predictive` factorized once per state, so that a
    sampler that scores one step against every state (direct assignment, the restricted collapsed
    draw) pays matrix-vector products per state, and a factorization only for the states whose
    statistics change.  With ``v = nu_n - D + 1``, ``K_n = C_n C_n^T`` and ``Psi_n = L_n L_n^T``,
    the Student-t predictive at ``(y, x)`` is

    ``log p(y | x) = const - D/2 log c - (v + D)/2 log(1 + |L_n^{-1} (y - M_n x)|^2 / c)``,
    ``c = 1 + |C_n^{-1} x|^2``, ``const = log Gamma((v + D)/2) - log Gamma(v/2) - D/2 log(pi) - 1/2 log|Psi_n|``

    (:func:`mvt_log_density` with shape ``Psi_n c / v``: ``log|S| = log|Psi_n| + D log(c / v)``
    and ``d^T S^{-1} d / v = |L_n^{-1} d|^2 / c``).

    ``loc (..., D, m)``: ``M_n``; ``col_root (..., m, m)``: ``C_n^{-1}``; ``scale_root (..., D, D)``:
    ``L_n^{-1}``; ``const (...)``; ``power (...)``: ``(v + D) / 2``.
    """

    loc: jax.Array
    col_root: jax.Array
    scale_root: jax.Array
    const: jax.Array
    power: jax.Array


def mniw_predictive_cache(loc, col_precision, df, scale, stats: MNIWStats) -> PredictiveCache:
    """:class:`PredictiveCache` of the posterior of ``stats`` under the prior ``(loc, col_precision,
    df, scale)`` (shapes as :func:`mniw_posterior`; the cache has the broadcast batch shape)."""
    Mn, _, dfn, Psin, Cn = _posterior_and_root(loc, col_precision, df, scale, stats)
    D = jnp.shape(Psin)[-1]
    Ln = cholesky(Psin)
    dof = dfn - D + 1
    const = (gammaln(0.5 * (dof + D)) - gammaln(0.5 * dof) - 0.5 * D * _LOG_PI
             - 0.5 * logdet_from_cholesky(Ln))
    return PredictiveCache(Mn, _inverse_of_lower(Cn), _inverse_of_lower(Ln), const, 0.5 * (dof + D))


def mniw_cached_log_predictive(y, x, cache: PredictiveCache):
    """:func:`mniw_log_predictive` from a :class:`PredictiveCache`: ``y (D,)``, ``x (m,)`` against
    every state of the cache's batch shape (matrix-vector products only), shape ``(...)``."""
    D = jnp.shape(y)[-1]
    hi = jax.lax.Precision.HIGHEST
    u = jnp.einsum("...ij,j->...i", cache.col_root, x, precision=hi)
    c = 1.0 + jnp.sum(u * u, axis=-1)
    resid = y - jnp.einsum("...ij,j->...i", cache.loc, x, precision=hi)
    z = jnp.einsum("...ij,...j->...i", cache.scale_root, resid, precision=hi)
    return cache.const - 0.5 * D * jnp.log(c) - cache.power * jnp.log1p(jnp.sum(z * z, axis=-1) / c)


def inverse_wishart_log_density(cov, df, scale):
    """``log InvWishart(cov | df, scale)`` (Gelman et al. BDA3 table A.1), shape = batch shape."""
    D = jnp.shape(scale)[-1]
    Ls = cholesky(cov)
    Lp = cholesky(scale)
    tr = jnp.sum(jnp.square(_tri_solve(Ls, Lp)), axis=(-2, -1))  # tr(Psi Sigma^{-1})
    return (
        0.5 * df * logdet_from_cholesky(Lp)
        - 0.5 * df * D * _LOG_2
        - multigammaln(0.5 * df, D)
        - 0.5 * (df + D + 1) * logdet_from_cholesky(Ls)
        - 0.5 * tr
    )


def mniw_log_density(A, cov, loc, col_precision, df, scale):
    """``log IW(cov | df, scale) + log MN(A | loc, cov, col_precision^{-1})``.

    Matrix-normal density (Gupta & Nagar 2000, def. 2.2.1)::

        -D m/2 log(2 pi) - m/2 log|Sigma| + D/2 log|K| - 1/2 tr(Sigma^{-1} (A-M) K (A-M)^T)

    ``A (..., D, m)``, ``cov (..., D, D)``.
    """
    D, m = jnp.shape(A)[-2:]
    Ls = cholesky(cov)
    Ck = cholesky(col_precision)
    E = A - loc
    Q = _tri_solve(Ls, E) @ Ck
    log_mn = (
        -0.5 * D * m * LOG_2PI
        - 0.5 * m * logdet_from_cholesky(Ls)
        + 0.5 * D * logdet_from_cholesky(Ck)
        - 0.5 * jnp.sum(Q * Q, axis=(-2, -1))
    )
    return inverse_wishart_log_density(cov, df, scale) + log_mn


# ---------------------------------------------------------------------------- sampling
def sample_inverse_wishart(key, df, scale, shape: Tuple[int, ...]):
    """Draw ``Sigma ~ InvWishart(df, scale)`` of leading shape ``shape`` via Bartlett.

    ``W = Sigma^{-1} ~ Wishart(df, scale^{-1})`` is ``W = L B B^T L^T`` with ``L L^T = scale^{-1}``
    and ``B`` lower triangular, ``B_ii^2 ~ chi2(df - i)`` (``i = 0..D-1``), ``B_ij ~ N(0, 1)`` below
    the diagonal (Bartlett 1933; Anderson 2003 thm. 7.2.1).  With ``scale = U U^T`` we take
    ``L = U^{-T}``, so ``Sigma = (U B^{-T}) (U B^{-T})^T``: no explicit inverse.
    """
    D = jnp.shape(scale)[-1]
    dtype = jnp.result_type(scale)
    k_chi, k_norm = jax.random.split(key)
    alpha = 0.5 * (jnp.asarray(df, dtype)[..., None] - jnp.arange(D, dtype=dtype))
    chi2 = 2.0 * gamma(k_chi, jnp.broadcast_to(alpha, shape + (D,)))
    normals = jax.random.normal(k_norm, shape + (D, D), dtype=dtype)
    B = jnp.tril(normals, -1) + jnp.sqrt(chi2)[..., None] * jnp.eye(D, dtype=dtype)
    U = jnp.broadcast_to(cholesky(scale), shape + (D, D))
    Rt = solve_triangular(B, _mT(U), lower=True)  # B^{-1} U^T
    return _sym(_mT(Rt) @ Rt)


def mniw_sample(key, loc, col_precision, df, scale, shape: Tuple[int, ...]):
    """Draw ``(A, Sigma)`` from the MNIW with leading shape ``shape`` (sample + batch shape).

    ``Sigma`` by :func:`sample_inverse_wishart`; ``A = M + L_Sigma Z C^{-1}`` with ``Z`` standard
    normal ``(D, m)`` and ``C C^T = K``, so ``vec(A)`` has covariance ``K^{-1} kron Sigma``.
    """
    D, m = jnp.shape(loc)[-2:]
    dtype = jnp.result_type(scale)
    k_iw, k_z = jax.random.split(key)
    cov = sample_inverse_wishart(k_iw, jnp.broadcast_to(df, shape), jnp.broadcast_to(scale, shape + (D, D)), shape)
    Z = jax.random.normal(k_z, shape + (D, m), dtype=dtype)
    X = cholesky(cov) @ Z  # (..., D, m)
    C = jnp.broadcast_to(cholesky(col_precision), shape + (m, m))
    A = jnp.broadcast_to(loc, shape + (D, m)) + _mT(solve_triangular(C, _mT(X), lower=True, trans=1))
    return A, cov


# ---------------------------------------------------------------------------- shared helpers
def check_df(df, dim: int, name: str = "df") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``df > dim - 1`` (concrete values only)."""
    from numpyro_hdphmm._core.validation import is_concrete

    if is_concrete(df):
        import numpy as np

        v = np.asarray(df)
        if not np.all(np.isfinite(v)) or np.any(v <= dim - 1):
            raise ValueError(f"`{name}` must be finite and > D - 1 = {dim - 1}, got {v if v.size < 8 else 'invalid entries'}.")


def data_moments(rows, valid):
    """Mean ``(D,)``, covariance ``(D, D)`` and count of the rows ``rows (N, D)`` where ``valid (N,)``.

    Invalid rows must already hold finite placeholders.  With fewer than two valid rows the
    covariance falls back to the identity (and the mean to zero when none is valid).
    """
    dtype = jnp.result_type(rows)
    w = valid.astype(dtype)
    n = jnp.sum(w)
    mean = jnp.sum(w[:, None] * rows, axis=0) / jnp.maximum(n, 1.0)
    c = (rows - mean) * w[:, None]
    cov = c.T @ c / jnp.maximum(n - 1.0, 1.0)
    D = rows.shape[-1]
    cov = jnp.where(n >= 2, cov, jnp.eye(D, dtype=dtype))
    return mean, cov, n


@jax.jit
def regularize_scale(cov):
    """``cov`` plus a small ridge (``1e-6`` of the mean variance, or 1 if that is 0) so it is PD,
    and, for (nearly) collinear dimensions, a ridge that bounds the condition number by
    ``1 / (CONDITION_RIDGE eps)`` in ``cov``'s dtype.  Jitted (as :func:`cholesky`)."""
    D = cov.shape[-1]
    level = jnp.trace(cov) / D
    level = jnp.where(level > 0, level, 1.0)
    bad = ~jnp.all(jnp.isfinite(cov))
    cov = jnp.where(bad, jnp.eye(D, dtype=cov.dtype), cov)
    level = jnp.where(bad, 1.0, level)
    cov = _sym(cov) + 1e-6 * level * jnp.eye(D, dtype=cov.dtype)
    # (nearly) collinear dimensions: raise the smallest eigenvalue to CONDITION_RIDGE * eps(dtype) of the
    # largest, so the posterior scatter's Cholesky factors and inverse-Wishart draws stay finite in the dtype
    # (well-conditioned covariances are unchanged)
    eig = jnp.linalg.eigvalsh(cov)
    floor = eig[-1] * CONDITION_RIDGE * jnp.finfo(cov.dtype).eps
    return cov + jnp.maximum(floor - eig[0], 0.0) * jnp.eye(D, dtype=cov.dtype)


#: the smallest eigenvalue of a data-scaled prior scale, as a multiple of ``eps * largest``
#: (:func:`regularize_scale`): a condition number of at most ``1 / (CONDITION_RIDGE eps)``
#: (8.4e3 in float32)
CONDITION_RIDGE = 1e3


def mniw_expected_log_likelihood(y, x, loc_n, col_precision_n, df_n, scale_n):
    """``E_q[log N(y_t | A x_t, Sigma)]`` under ``q(A, Sigma) = MNIW(M_n, K_n, nu_n, Psi_n)`` for every
    step and state: ``y (T, D)``, ``x (T, m)``, hyperparameters with batch ``(K,)`` -> ``(T, K)``.

    With ``Sigma ~ IW(nu, Psi)`` and ``A | Sigma ~ MN(M, Sigma, K^{-1})`` (Beal 2003 ch. 5; Bishop
    2006 eqs. 10.64-10.65 for the NIW case)::

        E[log|Sigma|] = log|Psi| - D log 2 - sum_{i=1}^{D} psi((nu + 1 - i) / 2)
        E[(y - A x)^T Sigma^{-1} (y - A x)] = nu (y - M x)^T Psi^{-1} (y - M x) + D x^T K^{-1} x

    and ``E[log N] = -D/2 log(2 pi) - E[log|Sigma|]/2 - E[quadratic form]/2``.
    """
    from jax.scipy.special import digamma

    D = jnp.shape(scale_n)[-1]
    chol_psi = cholesky(scale_n)  # (K, D, D)
    e_logdet = (logdet_from_cholesky(chol_psi) - D * _LOG_2
                - jnp.sum(digamma(0.5 * (df_n[..., None] - jnp.arange(D, dtype=scale_n.dtype))), axis=-1))
    resid = y.T[None] - jnp.einsum("kdm,tm->kdt", loc_n, x)  # (K, D, T)
    maha = jnp.sum(jnp.square(whiten(chol_psi, resid)), axis=-2)  # (K, T)
    lev = jnp.sum(jnp.square(whiten(cholesky(col_precision_n), jnp.broadcast_to(x.T, (loc_n.shape[0],) + x.T.shape))),
                  axis=-2)  # x^T K^{-1} x, (K, T)
    quad = df_n[:, None] * maha + D * lev
    return (-0.5 * D * LOG_2PI - 0.5 * e_logdet[:, None] - 0.5 * quad).T
