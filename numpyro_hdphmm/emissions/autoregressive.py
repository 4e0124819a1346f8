"""Vector-autoregressive emissions with a matrix-normal-inverse-Wishart prior (AR-HMM).

Model (Fox et al. 2011, "Bayesian nonparametric inference of switching dynamic linear models";
Fox 2009, PhD thesis, MNIW appendix)::

    x_t = [y_{t-1}; y_{t-2}; ...; y_{t-p}; 1]      (the trailing 1 only when ``affine``)
    y_t = A_{z_t} x_t + e_t,   e_t ~ Normal(0, Sigma_{z_t})
    Sigma ~ InvWishart(df, scale),   A | Sigma ~ MatrixNormal(loc, Sigma, col_precision^{-1})

``A`` is ``(D, D p + a)`` with ``a = 1`` if affine: columns ``[(j-1) D, j D)`` multiply lag ``j``
and the last column is the intercept.

**Presample convention.**  Values before the start of a sequence equal the family's ``center``
(zero unless the family was built with one; :meth:`AutoRegressive.weakly_informative` uses the
data mean): ``y_{-1} = ... = y_{-p} = c`` (with ``c = 0`` as in dynamax's linear autoregressive
HMM).  The first ``p`` steps are therefore modelled with partly-presample regressors rather than
dropped; with ``c`` the data mean they are not artificial outliers for data far from zero.

**Missing values.**  A NaN anywhere in ``y_s`` makes step ``s`` invalid and also steps
``s+1, ..., s+p`` (their regressors are unknown); NaNs are replaced by 0 in both the targets and
the regressors so every density stays finite.

**Numerics: the centred parameterization.**  With an intercept (``affine``), a shift of the data by
a point ``c`` (``center``) is an exact reparameterization of the regression::

    y_t - c = A_c [y_{t-1} - c; ...; y_{t-p} - c; 1] + e_t,
    A_c = (lag blocks of A,  intercept + sum_j A_j c - c)

so the family stores its prior in these centred coordinates (``A_c ~ MN(loc_c, Sigma,
col_precision_c^{-1})``, the same ``Sigma``), and computes every statistic, posterior, evidence
and predictive from the centred targets and regressors: no difference of large raw moments,
no near-singular regressor Gram matrix when the data sit far from zero.  The prior, parameters
``A`` and sites the user sees are in the original coordinates (``loc``, ``col_precision`` are
mapped on demand); the maps ``A <-> A_c`` are unit-triangular (Jacobian 1), so densities are
unchanged.  :meth:`AutoRegressive.weakly_informative` centres at the data mean, which makes the
data-scaled prior (and float32 accuracy) invariant to the data's offset; ``center = 0`` (the
default of the constructor) is the plain parameterization.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpyro.distributions as dist

import numpy as np
from numpyro.distributions import constraints

from numpyro_hdphmm._core.validation import (
    as_data_array,
    check_finite,
    check_positive_definite,
    check_shape,
    check_static_int,
    default_float_dtype,
    is_concrete,
)
from numpyro_hdphmm._core import mniw
from numpyro_hdphmm.emissions._data import (
    check_data_spread,
    check_deviation_range,
    check_dim,
    dimension_hint,
    merge_overrides,
    observed_rows,
    vector_data,
)
from numpyro_hdphmm._core.mniw import MNIWStats
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = [
    "AutoRegressive",
    "ARInputs",
    "MNIWStats",
    "CentredMatrixNormal",
    "coefficients_to_centred",
    "coefficients_from_centred",
    "col_precision_to_centred",
    "col_precision_from_centred",
]


#: the whitened residuals of :meth:`AutoRegressive.log_likelihoods` per block of steps on a CPU
LIKELIHOOD_BLOCK_SIZE = 2 ** 19


def _likelihood_block(num_steps: int, width: int) -> int:
    """Steps per block of :meth:`AutoRegressive.log_likelihoods` (``width = K D``, the residuals of a
    step) and :meth:`AutoRegressive.pointwise_log_likelihood` (``width = D (m + D)``, a step's
    gathered operator): all of them off a CPU or when ``T width`` is at most
    :data:`LIKELIHOOD_BLOCK_SIZE` numbers, else a power of two from 64 up with at most that many per
    block (e.g. 512 steps for ``K D = 1000``)."""
    if jax.default_backend() != "cpu" or num_steps * width <= LIKELIHOOD_BLOCK_SIZE:
        return num_steps
    block = 64
    while 2 * block * width <= LIKELIHOOD_BLOCK_SIZE:
        block *= 2
    return block


def _in_blocks(fn, arrays, block: int):
    """``fn(*arrays)`` over the leading (time) axis in blocks of ``block`` steps (``lax.map``, the
    last block padded with zeros), or at once when ``block`` covers them."""
    num_steps = arrays[0].shape[0]
    if block >= num_steps:
        return fn(*arrays)
    pad = (-num_steps) % block
    blocks = [jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1)).reshape((-1, block) + a.shape[1:]) for a in arrays]
    out = jax.lax.map(lambda b: fn(*b), tuple(blocks))
    return out.reshape((-1,) + out.shape[2:])[:num_steps]


class ARInputs(NamedTuple):
    """The model's view of one sequence: targets ``y (T, D)`` and regressors ``regressor (T, m)``."""

    y: jax.Array
    regressor: jax.Array


def _lag_offset(center, order: int):
    """``u = [c; ...; c]`` (``order`` copies): the lag part of the regressor shift, ``(..., D p)``."""
    return jnp.concatenate([center] * order, axis=-1)


def _shift_matrix(u, m: int):
    """``R (..., m, m)`` with ``x = R x_c``: the identity with ``u`` in the last column above the
    diagonal (lags ``x = x_c + u``, the constant unchanged).  ``R^{-1}`` is ``_shift_matrix(-u)``."""
    eye = jnp.broadcast_to(jnp.eye(m, dtype=u.dtype), u.shape[:-1] + (m, m))
    return eye.at[..., : m - 1, m - 1].add(u)


def coefficients_to_centred(A, center, order: int):
    """``A (..., D, m) -> A_c``: lag blocks unchanged, intercept ``b + sum_j A_j c - c`` (affine
    models; ``m = D p + 1``).  Unit-triangular in ``A``: Jacobian 1."""
    lags = A[..., :-1]
    intercept = A[..., -1] + jnp.einsum("...dk,...k->...d", lags, _lag_offset(center, order)) - center
    return jnp.concatenate([lags, intercept[..., None]], axis=-1)


def coefficients_from_centred(A_c, center, order: int):
    """``A_c (..., D, m) -> A``: the inverse of :func:`coefficients_to_centred`."""
    lags = A_c[..., :-1]
    intercept = A_c[..., -1] + center - jnp.einsum("...dk,...k->...d", lags, _lag_offset(center, order))
    return jnp.concatenate([lags, intercept[..., None]], axis=-1)


def col_precision_to_centred(K, center, order: int):
    """Column precision of ``A`` -> of ``A_c``: ``A_c = A R - c e_m^T`` so ``K_c = R^{-1} K R^{-T}``."""
    Rinv = _shift_matrix(-_lag_offset(center, order), K.shape[-1])
    return mniw.symmetrize(Rinv @ K @ jnp.swapaxes(Rinv, -1, -2))


def col_precision_from_centred(K_c, center, order: int):
    """The inverse of :func:`col_precision_to_centred`: ``K = R K_c R^T``."""
    R = _shift_matrix(_lag_offset(center, order), K_c.shape[-1])
    return mniw.symmetrize(R @ K_c @ jnp.swapaxes(R, -1, -2))


def _prior_to_centred(loc, col_precision, center, order: int, dtype):
    """``(loc_c, col_precision_c)`` of the prior ``loc (..., D, m)``, ``col_precision (..., m, m)``
    given in the original coordinates, as the constructor stores them: on concrete values the map
    runs in float64 (the originals may be ill-conditioned) and the result is cast to ``dtype``."""
    if is_concrete(loc, col_precision, center):
        with jax.enable_x64(True):
            c64 = jnp.asarray(np.asarray(center), jnp.float64)
            loc64 = coefficients_to_centred(jnp.asarray(np.asarray(loc), jnp.float64), c64, order)
            prec64 = col_precision_to_centred(jnp.asarray(np.asarray(col_precision), jnp.float64), c64, order)
            loc, col_precision = np.asarray(loc64), np.asarray(prec64)
        return jnp.asarray(loc, dtype), jnp.asarray(col_precision, dtype)
    return coefficients_to_centred(loc, center, order), col_precision_to_centred(col_precision, center, order)


class CentredMatrixNormal(dist.Distribution):
    r"""The prior of ``A`` when the family is centred at ``c`` (``A`` in original coordinates).

    ``A_c = coefficients_to_centred(A) ~ MatrixNormal(loc_c, Sigma, col_precision_c^{-1})``
    (``base_dist``); ``sample`` maps draws back with :func:`coefficients_from_centred`,
    ``log_prob`` evaluates the base at ``A_c`` (the map has Jacobian 1).  Used for the ``{name}_A``
    site so that the original-coordinate column covariance (ill-conditioned for data far from
    zero) is never formed.
    """

    arg_constraints = {}
    support = constraints.independent(constraints.real, 2)
    pytree_data_fields = ("base_dist", "center")
    pytree_aux_fields = ("order",)

    def __init__(self, base_dist, center, order: int, *, validate_args=None):
        self.base_dist = base_dist
        self.center = center
        self.order = int(order)
        super().__init__(batch_shape=base_dist.batch_shape, event_shape=base_dist.event_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        return coefficients_from_centred(self.base_dist.sample(key, sample_shape), self.center, self.order)

    def log_prob(self, value):
        return self.base_dist.log_prob(coefficients_to_centred(value, self.center, self.order))


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
        center: ``(D,)`` or ``None``: the point the family computes around (module docstring,
            "Numerics") and the presample value; ``None`` is zero.  Needs ``affine``.

    :meth:`centred` builds the family from a prior given in the centred coordinates instead.
    A ``center`` is also the presample value (module docstring).
    Parameters: ``A (K, D, m)``, ``cov (K, D, D)``.  Statistics: :class:`MNIWStats`
    ``(N, sum x x^T, sum y x^T, sum y y^T)`` of the centred targets ``y - c`` and regressors
    ``x - [c; ...; c; 0]``.
    """

    param_names = ("A", "cov")
    conjugate = True
    caches_predictive = True
    ard_columns = True
    _hyper_names = ("loc", "col_precision", "df", "scale")

    def __init__(self, order, loc, col_precision, df, scale, affine: bool = True, center=None):
        order = check_static_int("order", order)
        affine = bool(affine)
        loc, col_precision, df, scale = _checked_hyper(order, affine, loc, col_precision, df, scale)
        center = _checked_center(center, affine, loc.shape[-2], loc.dtype)
        if center is not None:
            loc, col_precision = _prior_to_centred(loc, col_precision, center, order, df.dtype)
        self._set(order, affine, loc, col_precision, df, scale, center)

    @classmethod
    def centred(cls, order, loc, col_precision, df, scale, center=None, affine: bool = True) -> "AutoRegressive":
        """The family whose prior is given in the centred coordinates (module docstring):
        ``y_t - c = A_c [y_{t-1} - c; ...; 1] + e_t``, ``A_c ~ MN(loc, Sigma, col_precision^{-1})``,
        ``Sigma ~ IW(df, scale)``.  ``center=None`` is ``c = 0`` (then identical to the
        constructor).  Same shapes and checks as the constructor."""
        order = check_static_int("order", order)
        affine = bool(affine)
        loc, col_precision, df, scale = _checked_hyper(order, affine, loc, col_precision, df, scale)
        center = _checked_center(center, affine, loc.shape[-2], loc.dtype)
        obj = object.__new__(cls)
        obj._set(order, affine, loc, col_precision, df, scale, center)
        return obj

    def _set(self, order, affine, loc_c, col_precision_c, df, scale, center):
        D = loc_c.shape[-2]
        m = loc_c.shape[-1]
        batch = jnp.broadcast_shapes(loc_c.shape[:-2], col_precision_c.shape[:-2], df.shape, scale.shape[:-2])
        self.loc_centred = jnp.broadcast_to(loc_c, batch + (D, m))
        self.col_precision_centred = jnp.broadcast_to(col_precision_c, batch + (m, m))
        self.df = jnp.broadcast_to(df, batch)
        self.scale = jnp.broadcast_to(scale, batch + (D, D))
        self.has_center = center is not None
        self.center = jnp.broadcast_to(jnp.zeros((D,), loc_c.dtype) if center is None else center, batch + (D,))
        self.dim = int(D)
        self.order = order
        self.affine = affine

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        children = (self.loc_centred, self.col_precision_centred, self.df, self.scale, self.center)
        return children, (self.dim, self.order, self.affine, self.has_center)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.loc_centred, obj.col_precision_centred, obj.df, obj.scale, obj.center = children
        obj.dim, obj.order, obj.affine, obj.has_center = aux
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

    @property
    def min_sequence_length(self) -> int:
        """``order + 1``: a shorter sequence has no step whose regressor holds an observed lag."""
        return self.order + 1

    @property
    def loc(self):
        """``M_0 (..., D, m)``, the prior mean of ``A`` in the original coordinates."""
        if not self.has_center:
            return self.loc_centred
        return coefficients_from_centred(self.loc_centred, self.center, self.order)

    @property
    def col_precision(self):
        """``K_0 (..., m, m)``, the column precision of ``A`` in the original coordinates (for a
        family centred far from zero this matrix is ill-conditioned: the family never uses it)."""
        if not self.has_center:
            return self.col_precision_centred
        return col_precision_from_centred(self.col_precision_centred, self.center, self.order)

    def to_centred_col_precision(self, col_precision):
        """``col_precision (..., m, m)``, a column precision of ``A`` in the original coordinates,
        as the constructor would store it (:attr:`col_precision_centred`: ``R^{-1} K R^{-T}``, module
        docstring; in float64 on concrete values, then in the family's dtype).  Unchanged without a
        ``center``.  Model discovery compares it with :attr:`col_precision_centred` to recognize a
        diagonal ``col_precision = diag(lambda)`` of a Gamma site (automatic relevance determination,
        :mod:`numpyro_hdphmm.infer.moves.column_precision`) without forming the ill-conditioned
        original matrix from the stored one."""
        dtype = self.df.dtype
        col_precision = jnp.asarray(col_precision, dtype)
        if not self.has_center:
            return col_precision
        return _prior_to_centred(self.loc, col_precision, self.center, self.order, dtype)[1]

    def column_quadratic_forms(self, params) -> jax.Array:
        r"""``q (m,)`` with ``q_j = sum_k (a_kj - m_j)^T Sigma_k^{-1} (a_kj - m_j)``: ``a_kj`` the
        ``j``-th column of ``params["A"] (K, D, m)``, ``Sigma_k = params["cov"] (K, D, D)``, ``m_j``
        the ``j``-th column of :attr:`loc` (original coordinates; the family a prior, batch shape
        ``()``).

        With ``col_precision = diag(lambda)`` the matrix-normal prior of the ``K`` states is, as a
        function of ``lambda``, ``prod_j lambda_j^{K D / 2} exp(-lambda_j q_j / 2)`` (Gupta & Nagar
        2000, def. 2.2.1: ``tr(Sigma^{-1} (A - M) diag(lambda) (A - M)^T) = sum_j lambda_j (a_j -
        m_j)^T Sigma^{-1} (a_j - m_j)``, ``log|diag(lambda)|^{D/2} = D/2 sum_j log lambda_j``).  With
        a ``center`` the stored prior is ``MN(M_c, Sigma, K_c^{-1})`` of ``A_c``, and ``A_c - M_c = (A -
        M) R``, ``K_c = R^{-1} K R^{-T}``, ``|K_c| = |K|``, so the density is the same function of
        ``K = diag(lambda)`` in the original coordinates."""
        E = params["A"] - self.loc  # (K, D, m)
        W = mniw.whiten(mniw.cholesky(params["cov"]), E)  # Sigma_k^{-1/2} (A_k - M)
        return jnp.sum(W * W, axis=(0, 1))

    def _hyper(self):
        """The prior in the centred coordinates, as :mod:`numpyro_hdphmm._core.mniw` takes it."""
        return (self.loc_centred, self.col_precision_centred, self.df, self.scale)

    def _to_centred(self, A):
        return coefficients_to_centred(A, self.center, self.order) if self.has_center else A

    def _from_centred(self, A_c):
        return coefficients_from_centred(A_c, self.center, self.order) if self.has_center else A_c

    def _centre_inputs(self, x: "ARInputs") -> "ARInputs":
        """``(y - c, regressor - [c; ...; c; 0])`` (unchanged when the family has no center)."""
        if not self.has_center:
            return x
        shift = jnp.concatenate([_lag_offset(self.center, self.order), jnp.zeros(self.center.shape[:-1] + (1,), self.center.dtype)], -1)
        return ARInputs(x.y - self.center, x.regressor - shift)

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """``y (..., T, D)``: trailing dimension ``D``, real numbers, no infinities (NaN marks
        missing), deviations from ``center`` that fit the float type (see
        :func:`~numpyro_hdphmm.emissions._data.check_deviation_range`)."""
        y = as_data_array(name, y)
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != self.dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.dim}), got {jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)
        if is_concrete(y, self.center, self.scale) and self.batch_shape == ():
            check_deviation_range(name, y, self.center, self.scale, np.dtype(self.scale.dtype), "`center`")

    def clustering_features(self, y):
        """``(N, T, 3 D)`` features of ``y (N, T, D)`` for the data-driven start's k-means: what
        the autoregressive likelihood sees, the dynamics, beside the level.  With ``u_t = y_t - ybar``
        (``ybar`` the mean over every observed step), the features of step ``t`` are ``y_t``, the
        signed square root of the lag-one product ``u_t * u_{t-1}`` (its window mean is the local
        lag-one autocovariance: persistence or oscillation) and ``|y_t - y_{t-1}|`` (the local size
        of the increments), each elementwise.  Regimes that share their marginal distribution and
        differ in their dynamics (a coefficient, a noise scale) are then apart in the features, as
        they are in the likelihood; the first step of a sequence, which has no predecessor, and the
        steps next to a missing value have NaN (missing) lag features."""
        y = super().clustering_features(y)
        prev = jnp.concatenate([jnp.full_like(y[:, :1], jnp.nan), y[:, :-1]], axis=1)
        observed = ~jnp.isnan(y)
        mean = jnp.sum(jnp.where(observed, y, 0.0), (0, 1)) / jnp.maximum(jnp.sum(observed, (0, 1)), 1)
        product = (y - mean) * (prev - mean)
        return jnp.concatenate([y, jnp.sign(product) * jnp.sqrt(jnp.abs(product)), jnp.abs(y - prev)], axis=-1)

    def _regressor(self, lags):
        """``lags (..., p, D)`` (most recent first) -> regressor ``(..., m)``."""
        flat = lags.reshape(lags.shape[:-2] + (self.order * self.dim,))
        if self.affine:
            flat = jnp.concatenate([flat, jnp.ones(flat.shape[:-1] + (1,), flat.dtype)], axis=-1)
        return flat

    def _presample(self, dtype):
        """``(D,)``: the value of ``y_t`` before the start of a sequence (``center``, zero by default)."""
        if not self.has_center:
            return jnp.zeros((self.dim,), dtype)
        return jnp.asarray(self.center, dtype).reshape(-1, self.dim)[0]

    def prepare(self, y):
        """``y (T, D) -> (ARInputs(y (T, D), regressor (T, m)), valid (T,))``.

        ``regressor_t = [y_{t-1}; ...; y_{t-p}; 1]`` with ``center`` (zero by default) before the
        start (presample convention); ``valid_t`` requires rows ``t, t-1, ..., t-p`` (those inside
        the sequence) to be NaN-free.  NaNs are replaced by ``center``.
        """
        y = jnp.asarray(y)
        if not jnp.issubdtype(y.dtype, jnp.floating):
            y = y.astype(jnp.result_type(float))
        T, p = y.shape[0], self.order
        fill = self._presample(y.dtype)
        row_ok = ~jnp.any(jnp.isnan(y), axis=-1)
        y0 = jnp.where(row_ok[:, None], y, fill)
        ypad = jnp.concatenate([jnp.broadcast_to(fill, (p, self.dim)), y0], axis=0)  # (T + p, D)
        okpad = jnp.concatenate([jnp.ones((p,), bool), row_ok], axis=0)
        lags = jnp.stack([ypad[p - j : p - j + T] for j in range(1, p + 1)], axis=1)  # (T, p, D)
        valid = row_ok
        for j in range(1, p + 1):
            valid = valid & okpad[p - j : p - j + T]
        return ARInputs(y0, self._regressor(lags)), valid

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights) -> MNIWStats:
        """``(N (K,), sum x x^T (K, m, m), sum y x^T (K, D, m), sum y y^T (K, D, D))`` of the
        centred targets and regressors (module docstring, "Numerics")."""
        w = jnp.asarray(weights, jnp.result_type(x.y))
        xc = self._centre_inputs(x)
        return mniw.mniw_statistics(xc.y, xc.regressor, w)

    def label_statistics(self, x, labels, num_states: int) -> MNIWStats:
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)`` in ``O(T (m + D)^2)``: the
        per-state Gram matrices of ``[x_t; y_t]`` (centred) by
        :func:`~numpyro_hdphmm._core.segments.label_grams` (:func:`~numpyro_hdphmm._core.mniw.mniw_label_statistics`)."""
        xc = self._centre_inputs(x)
        return mniw.mniw_label_statistics(xc.y, xc.regressor, labels, num_states)

    def posterior(self, stats: MNIWStats) -> "AutoRegressive":
        """MNIW posterior (Minka 1998; Fox 2009, PhD thesis, MNIW appendix): ``K_n = K_0 + S_xx``,
        ``M_n = (M_0 K_0 + S_yx) K_n^{-1}``, ``nu_n = nu_0 + N``,
        ``Psi_n = Psi_0 + S_yy + M_0 K_0 M_0^T - M_n K_n M_n^T``, in the centred coordinates (the
        result keeps the family's ``center``)."""
        Mn, Kn, dfn, Psin = mniw.mniw_posterior(*self._hyper(), stats)
        center = jnp.broadcast_to(self.center, dfn.shape + (self.dim,))
        return self.tree_unflatten((self.dim, self.order, self.affine, self.has_center), (Mn, Kn, dfn, Psin, center))

    def log_marginal_likelihood(self, stats: MNIWStats) -> jax.Array:
        """Closed-form MNIW evidence (see :func:`numpyro_hdphmm._core.mniw.mniw_log_marginal`), shape ``(K,)``
        (a shift of the data has Jacobian 1: the centred evidence is the evidence)."""
        return mniw.mniw_log_marginal(*self._hyper(), stats)

    def log_predictive(self, x, stats: MNIWStats) -> jax.Array:
        """Student-t predictive of one ``x = ARInputs(y (D,), regressor (m,))``: dof
        ``nu_n - D + 1``, location ``M_n x``, shape ``Psi_n (1 + x^T K_n^{-1} x) / (nu_n - D + 1)``
        (centred coordinates)."""
        Mn, Kn, dfn, Psin = mniw.mniw_posterior(*self._hyper(), stats)
        xc = self._centre_inputs(x)
        return mniw.mniw_log_predictive(xc.y, xc.regressor, Mn, Kn, dfn, Psin)

    def predictive_cache(self, stats: MNIWStats) -> mniw.PredictiveCache:
        """The Student-t predictive of :meth:`log_predictive` factorized per state
        (:func:`~numpyro_hdphmm._core.mniw.mniw_predictive_cache`, centred coordinates)."""
        return mniw.mniw_predictive_cache(*self._hyper(), stats)

    def cached_log_predictive(self, x, cache: mniw.PredictiveCache) -> jax.Array:
        """:meth:`log_predictive` of one ``x = ARInputs(y (D,), regressor (m,))`` from
        :meth:`predictive_cache` (:func:`~numpyro_hdphmm._core.mniw.mniw_cached_log_predictive`): ``(K,)``."""
        xc = self._centre_inputs(x)
        return mniw.mniw_cached_log_predictive(xc.y, xc.regressor, cache)

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``cov ~ IW(df, scale)`` (Bartlett), ``A_c ~ MN(loc_c, cov, col_precision_c^{-1})``,
        returned in the original coordinates (``A``)."""
        shape = tuple(sample_shape) + self.batch_shape
        A_c, cov = mniw.mniw_sample(rng_key, *self._hyper(), shape)
        return {"A": self._from_centred(A_c), "cov": cov}

    def log_prior(self, params) -> jax.Array:
        """``log IW(cov | df, scale) + log MN(A | loc, cov, col_precision^{-1})``, shape ``(K,)``
        (evaluated at ``A_c``: the map has Jacobian 1)."""
        return mniw.mniw_log_density(self._to_centred(params["A"]), params["cov"], *self._hyper())

    # ------------------------------------------------------------------ likelihood
    def _whitening(self, params):
        """``(W (K, D, m + D), log|cov_k| (K,))`` with ``W_k = L_k^{-1} [-A_k, I]``: ``W_k [x_t; y_t] =
        L_k^{-1} (y_t - A_k x_t)``, the whitened residual (``L_k`` the Cholesky factor of ``cov_k``;
        one small triangular inverse per state)."""
        chol = mniw.cholesky(params["cov"])  # (K, D, D)
        A = params["A"]
        D = A.shape[-2]
        eye = jnp.broadcast_to(jnp.eye(D, dtype=chol.dtype), chol.shape)
        inv = jax.scipy.linalg.solve_triangular(chol, eye, lower=True)
        W = jnp.concatenate([-jnp.matmul(inv, A, precision=jax.lax.Precision.HIGHEST), inv], axis=-1)
        return W, mniw.logdet_from_cholesky(chol)

    def log_likelihoods(self, x, params) -> jax.Array:
        """``(T, K)`` log densities ``log N(y_t | A_k x_t, cov_k)``.

        The whitened residual of every state is one linear map of the step's ``[x_t; y_t]``
        (:meth:`_whitening`), so all states' residuals are one ``(T, m + D) x (m + D, K D)`` matrix
        product, followed by the sum of squares over ``D``.  On a CPU, when the ``(T, K D)``
        residuals are large, the product runs in blocks of steps whose residuals stay in cache
        (:func:`_likelihood_block`; measured on 2 cores, ``T = 10^5``, ``K = 100``, ``D = 10``,
        ``m = 31``, float32: 0.16 s against 0.68 s for the means ``A_k x_t``, the differences and
        their whitening as three ``(K, D, T)`` arrays)."""
        W, logdet = self._whitening(params)
        K, D, n = W.shape[-3:]
        W = W.reshape(K * D, n).T  # (m + D, K D)
        z = jnp.concatenate([x.regressor, x.y], axis=-1).astype(W.dtype)  # (T, m + D)

        def maha(rows):
            e = jnp.matmul(rows, W, precision=jax.lax.Precision.HIGHEST).reshape(rows.shape[0], K, D)
            return jnp.sum(e * e, axis=-1)

        q = _in_blocks(maha, (z,), _likelihood_block(z.shape[0], K * D))
        return -0.5 * q - 0.5 * logdet - 0.5 * self.dim * mniw.LOG_2PI

    def pointwise_log_likelihood(self, y, params, states) -> jax.Array:
        """``log N(y_t | A_{z_t} x_t, cov_{z_t})`` for one sequence, ``(T,)``, 0 at missing steps: each
        step's own state only (its whitening operator gathered, :meth:`_whitening`), ``O(T D (m + D))``
        rather than the ``O(T K D (m + D))`` of :meth:`log_likelihoods`; in blocks of steps on a CPU
        (:func:`_likelihood_block`)."""
        x, valid = self.prepare(y)
        W, logdet = self._whitening(params)
        D, n = W.shape[-2:]
        z = jnp.concatenate([x.regressor, x.y], axis=-1).astype(W.dtype)
        states = jnp.asarray(states)

        def maha(rows, s):
            e = jnp.einsum("tdn,tn->td", W[s], rows, precision=jax.lax.Precision.HIGHEST)
            return jnp.sum(e * e, axis=-1)

        q = _in_blocks(maha, (z, states), _likelihood_block(z.shape[0], D * n))
        ll = -0.5 * q - 0.5 * logdet[states] - 0.5 * self.dim * mniw.LOG_2PI
        return jnp.where(valid, ll, 0.0)

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """Generate ``y (T, D)`` sequentially with ``lax.scan`` from the presample values (``center``):
        :meth:`sample_continuation` of ``order`` presample lags."""
        init = jnp.broadcast_to(self._presample(jnp.result_type(params["A"])), (self.order, self.dim))
        return self.sample_continuation(rng_key, params, states, init)

    @property
    def num_lags(self) -> int:
        """``order``: ``y_t`` depends on ``y_{t-1}, ..., y_{t-p}``."""
        return self.order

    def sample_continuation(self, rng_key, params, states, lags) -> jax.Array:
        """``y_{T+1:T+h} (h, D)`` continuing from ``lags (p, D)`` (``lags[j] = y_{T-j}``, the lag layout
        of :meth:`prepare`): ``y_{T+s} = A_z [y_{T+s-1}; ...; y_{T+s-p}; 1] + L_z eps`` with ``L_z
        L_z^T = Sigma_z``, one ``lax.scan`` over the ``h`` steps of ``states (h,)``."""
        states = jnp.asarray(states)
        A = params["A"]
        chol = mniw.cholesky(params["cov"])
        eps = jax.random.normal(rng_key, states.shape + (self.dim,), jnp.result_type(A))

        def step(lags, inp):
            z, e = inp
            y = A[z] @ self._regressor(lags) + chol[z] @ e
            lags = jnp.concatenate([y[None], lags[:-1]], axis=0)
            return lags, y

        _, ys = jax.lax.scan(step, jnp.asarray(lags).astype(jnp.result_type(A)), (states, eps))
        return ys

    # ------------------------------------------------------------------ expected statistics
    def expected_log_likelihoods(self, x, stats: MNIWStats) -> jax.Array:
        """``E_q[log N(y_t | A_k x_t, cov_k)]`` under the MNIW posterior
        (:func:`numpyro_hdphmm._core.mniw.mniw_expected_log_likelihood`): ``x = ARInputs(y (T, D), regressor (T, m))`` ->
        ``(T, K)``."""
        post = self.posterior(stats)
        return mniw.mniw_expected_log_likelihood(x.y, x.regressor, *post._hyper())

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """``{name}_cov ~ InverseWishart(df, scale)`` then ``{name}_A ~ MatrixNormal(loc, cov,
        col_precision^{-1})`` (a :class:`CentredMatrixNormal` when the family has a ``center``),
        each with batch shape ``(num_states,)``."""
        batch = (num_states,)
        cov = emission_site(
            f"{name}_cov", dist.InverseWishart(self.df, scale_matrix=self.scale).expand(batch)
        )
        m = self.num_regressors
        Ck = mniw.cholesky(self.col_precision_centred)
        eye = jnp.broadcast_to(jnp.eye(m, dtype=Ck.dtype), Ck.shape)
        col_cov = mniw.cho_solve(Ck, eye)  # K_0^{-1}
        fn = dist.MatrixNormal(self.loc_centred, mniw.cholesky(cov), mniw.cholesky(col_cov)).expand(batch)
        if self.has_center:
            fn = CentredMatrixNormal(fn, self.center, self.order)
        A = emission_site(f"{name}_A", fn)
        return {"A": A, "cov": cov}

    @classmethod
    def weakly_informative(cls, data, order: int = 1, affine: bool = True, **overrides) -> "AutoRegressive":
        """Data-scaled prior for ``data (..., T, D)`` (NaN rows allowed), centred at the data.

        With ``c`` the mean of the observed rows (``0`` when not ``affine``), in the centred
        coordinates of the module docstring (``y_t - c = A_c x_t + e_t``, ``x_t`` the lags minus
        ``c`` and the constant 1):

        * ``loc_c = 0``: the prior is centred on "no dynamics around the data mean"
          (``y_t = c + e_t``); with the weak ``col_precision`` below the data dominate (we do not
          centre on a random walk, which would bias non-persistent series).  In the original
          coordinates: lag blocks 0, intercept ``c``.
        * ``col_precision_c = 0.01 * diag(mean_t x_t x_t^T)`` (centred regressors): a
          unit-information (Zellner g-prior style) scaling per regressor, divided by 100, so ``A``
          is in the units of the data and ten prior standard deviations wide.
        * ``df = D + 2`` (finite prior mean of ``Sigma``).
        * ``scale`` = residual covariance of a pooled (ridge-stabilized) least-squares VAR fit,
          plus a ``1e-6`` ridge, so ``E[Sigma]`` is that covariance.

        The moments use the steps that are observed and whose lags are observed values (the
        first ``order`` steps of each sequence, whose regressors hold presample values, are left
        out), so the prior is the same for the data shifted or rescaled.  Overrides (``loc``,
        ``col_precision``, ``df``, ``scale``) are in the original coordinates, as for the
        constructor.  ``data=None`` gives the prior for standardized data (``c = 0``,
        ``col_precision = 0.01 I``, ``scale = I``) with ``D`` from the ``scale``/``loc`` override,
        else the keyword ``dim``, else 1.

        Raises ``ValueError`` naming ``data`` for data that cannot scale a prior: no observed
        step, too few usable steps for the order (at least ``D order + a + 1``, without a ``scale``
        override), infinities, non-numeric values, or a spread beyond the float type's range.
        """
        order = check_static_int("order", order)
        affine = bool(affine)
        m_fn = lambda D: D * order + int(affine)
        dim = overrides.pop("dim", None)
        allowed = ("loc", "col_precision", "df", "scale")
        merge_overrides(dict.fromkeys(allowed), overrides, "AutoRegressive.weakly_informative")
        dtype = default_float_dtype()
        if data is None:
            D = check_dim(dim, dimension_hint(overrides, ("scale", -1), ("loc", -2)))
            m = m_fn(D)
            center = np.zeros(D, dtype)
            second, resid_cov = np.ones(m), np.eye(D)
        else:
            data = vector_data(data, dim)
            D = data.shape[-1]
            m = m_fn(D)
            if is_concrete(data):
                rows, _ = observed_rows("data", data, need=1)
                center = rows.mean(0) if affine else np.zeros(D)
                check_data_spread("data", rows.var(0), dtype, "scale" not in overrides)
                centred = np.asarray(data, float) - center
                second, resid_cov, count = _weakly_informative_moments(jnp.asarray(centred, dtype), order, affine)
                if float(count) <= m and "scale" not in overrides:
                    raise ValueError(
                        f"`data` has {int(count)} usable step(s) (observed, with observed lags) for an order-{order} "
                        f"autoregression with {m} regressor(s); estimating the residual covariance needs more than "
                        f"{m}. Pass more or longer sequences, a lower `order`, or `scale` explicitly."
                    )
            else:
                valid = ~jnp.any(jnp.isnan(data), axis=-1)
                rows = jnp.where(valid[..., None], data, 0.0).reshape(-1, D)
                center = jnp.sum(rows, 0) / jnp.maximum(jnp.sum(valid), 1)
                center = center if affine else jnp.zeros_like(center)
                second, resid_cov, _ = _weakly_informative_moments(jnp.asarray(data, dtype) - center, order, affine)
        prior_c = dict(
            loc=jnp.zeros((D, m), dtype),
            col_precision=jnp.diag(0.01 * jnp.asarray(second, dtype)),
            df=D + 2.0,
            scale=mniw.regularize_scale(jnp.asarray(resid_cov, dtype)),
        )
        center = center if affine else None
        if "loc" in overrides or "col_precision" in overrides:
            # overrides are in the original coordinates: express the defaults there too
            if center is not None:
                if is_concrete(center):
                    with jax.enable_x64(True):
                        c64 = jnp.asarray(np.asarray(center), jnp.float64)
                        prior_c["loc"] = np.asarray(coefficients_from_centred(jnp.asarray(np.asarray(prior_c["loc"]), jnp.float64), c64, order))
                        prior_c["col_precision"] = np.asarray(
                            col_precision_from_centred(jnp.asarray(np.asarray(prior_c["col_precision"]), jnp.float64), c64, order)
                        )
                else:
                    prior_c["loc"] = coefficients_from_centred(prior_c["loc"], center, order)
                    prior_c["col_precision"] = col_precision_from_centred(prior_c["col_precision"], center, order)
            return cls(order, affine=affine, center=center, **{**prior_c, **overrides})
        return cls.centred(order, center=center, affine=affine, **{**prior_c, **overrides})


def _checked_hyper(order: int, affine: bool, loc, col_precision, df, scale):
    """Shape and value checks of the four hyperparameters (ValueError naming the argument);
    returns them as arrays of the default float dtype."""
    dtype = jnp.result_type(float)
    for name, value in (("loc", loc), ("col_precision", col_precision), ("df", df), ("scale", scale)):
        if is_concrete(value):
            as_data_array(name, value)
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
    mniw.check_df(df, D, "df")
    check_positive_definite("scale", scale)
    try:
        jnp.broadcast_shapes(loc.shape[:-2], col_precision.shape[:-2], df.shape, scale.shape[:-2])
    except ValueError as e:
        raise ValueError(f"`loc`, `col_precision`, `df` and `scale` have incompatible batch shapes: {e}") from None
    return loc, col_precision, df, scale


def _checked_center(center, affine: bool, D: int, dtype):
    """``center`` as a ``(D,)`` array (``None`` stays ``None``); ValueError naming it otherwise."""
    if center is None:
        return None
    if not affine:
        raise ValueError(
            "`center` needs affine=True: without an intercept a shift of the data is not a reparameterization."
        )
    if is_concrete(center):
        as_data_array("center", center)
    center = jnp.asarray(center, dtype)
    check_shape("center", center, (D,), "one value per output dimension")
    check_finite("center", center)
    return center


@functools.partial(jax.jit, static_argnums=(1, 2))
def _weakly_informative_moments(data, order: int, affine: bool):
    """``data (..., T, D)`` (already centred) -> (mean regressor second moments ``(m,)``, residual
    covariance ``(D, D)`` of a pooled ridge least-squares VAR fit, number of usable steps ``()``)
    over the steps that are observed and whose ``order`` lags are observed values (the first
    ``order`` steps of a sequence, whose regressors hold presample values, are left out)."""
    T, D = data.shape[-2:]
    m = D * order + int(affine)
    seqs = data.reshape((-1, T, D))
    tmp = AutoRegressive.tree_unflatten((D, order, affine, False), (None,) * 5)  # prepare needs no hyperparameters
    x, valid = jax.vmap(tmp.prepare)(seqs)
    valid = valid & (jnp.arange(T) >= order)[None, :]  # regressors of observed lags only
    ys, regs, ok = x.y.reshape(-1, D), x.regressor.reshape(-1, m), valid.reshape(-1)
    stats = mniw.mniw_statistics(ys, regs, ok.astype(ys.dtype)[:, None])
    stats = jax.tree_util.tree_map(lambda a: a[0], stats)
    n = jnp.maximum(stats.count, 1.0)
    second = jnp.diagonal(stats.sum_xx) / n
    second = jnp.where(second > 0, second, 1.0)
    # pooled least squares with a tiny ridge: residual sum of squares S_yy - S_yx S_xx^{-1} S_xy
    ridge = jnp.diag(1e-8 * second * n + 1e-12)
    _, _, _, rss = mniw.mniw_posterior(jnp.zeros((D, m), ys.dtype), ridge, 0.0, jnp.zeros((D, D), ys.dtype), stats)
    resid_cov = jnp.where(stats.count > m, rss / jnp.maximum(stats.count - m, 1.0), jnp.eye(D, dtype=ys.dtype))
    return second, resid_cov, stats.count
