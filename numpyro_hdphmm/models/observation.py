r"""The observation model of a switching linear dynamical system (SLDS): ``y_t = C x_t + d + w_t``.

Fox, Sudderth, Jordan & Willsky, "Bayesian Nonparametric Inference of Switching Dynamic Linear
Models", IEEE TSP 59(4), 2011, eq. (2):

.. math::

    y_t = C x_t + d + w_t, \qquad w_t \sim \mathcal N(0, R),

with ``x_t`` the ``D``-dimensional continuous latent state and ``y_t`` the ``P``-dimensional
observation.  :class:`LinearGaussianObservation` offers the two cases of the paper and its
follow-ups:

* ``C`` **fixed** by the user (e.g. ``[I 0]`` as in Fox et al. Sec. III; the offset ``d`` fixed,
  zero by default): the only parameter is the noise, ``R ~ InvWishart(df, scale)`` (``noise="full"``)
  or ``r_i ~ InvGamma(df / 2, scale_ii / 2)`` per dimension (``noise="diagonal"``, ``R = diag(r)``:
  the one-dimensional inverse Wishart);
* ``C`` **learned**: ``[C d] ~ MatrixNormal(loc, R, col_precision^{-1})`` given ``R`` (a regression
  of ``y_t`` on ``[x_t; 1]``), ``R`` as above; with ``noise="diagonal"`` the rows of ``[C d]`` are
  independent normal-inverse-gamma regressions.

Both are conjugate given the latent path: :meth:`LinearGaussianObservation.update` draws the
parameters from their conditional (the matrix-normal-inverse-Wishart algebra of
:mod:`numpyro_hdphmm._core.mniw`).  **Missing values** (NaN, any subset of the ``P`` dimensions of
a step) are exact: the likelihood of a step is the Gaussian of its observed dimensions, and the
conditional update first draws the missing dimensions from their conditional given the observed
ones, the latent state and ``R`` (data augmentation), then updates from the completed data.
"""

from __future__ import annotations

from typing import Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution

from numpyro_hdphmm._core import mniw
from numpyro_hdphmm._core.kalman import kalman_filter, kalman_smoother
from numpyro_hdphmm._core.validation import (
    as_data_array,
    check_finite,
    check_positive_definite,
    check_shape,
    check_static_int,
    is_concrete,
)

__all__ = ["LinearGaussianObservation", "ObservationLikelihood", "masked_gaussian_log_density"]

_NOISE = ("full", "diagonal")


def masked_gaussian_log_density(value, mean, cov, mask):
    """``log N(value_o | mean_o, cov_oo)`` over the observed dimensions ``o`` of one step
    (``mask (P,)`` True where observed; 0 when none is): the missing dimensions are replaced by
    independent standard normals at 0 (``cov`` becomes ``M cov M + (I - M)``), whose
    ``-log(2 pi) / 2`` each is added back.  ``value (P,)`` may hold NaN where missing."""
    m = mask.astype(cov.dtype)
    diff = jnp.where(mask, value - mean, 0.0)
    cov_m = cov * m[:, None] * m[None, :] + jnp.diag(1.0 - m)
    chol = jnp.linalg.cholesky(mniw.symmetrize(cov_m))
    z = jax.scipy.linalg.solve_triangular(chol, diff, lower=True)
    return -0.5 * jnp.sum(z * z) - 0.5 * mniw.logdet_from_cholesky(chol) - 0.5 * jnp.sum(m) * mniw.LOG_2PI


@jax.tree_util.register_pytree_node_class
class LinearGaussianObservation:
    r"""``y_t = C x_t + d + w_t``, ``w_t ~ N(0, R)`` (module docstring).

    Args:
        obs_dim: ``P``, the dimension of ``y_t`` (static).
        latent_dim: ``D``, the dimension of ``x_t`` (static).
        C: ``(P, D)`` fixed loading matrix, or ``None`` (the default) to learn ``[C d]``.
        offset: ``(P,)`` the fixed ``d`` with a fixed ``C`` (default zero); not allowed with a
            learned ``C`` (the offset is its last column).
        noise: ``"full"`` (``R ~ InvWishart(df, scale)``) or ``"diagonal"`` (``R = diag(r)``,
            ``r_i ~ InvGamma(df / 2, scale_ii / 2)``).
        df: degrees of freedom (default ``P + 2`` for ``"full"``, ``3`` for ``"diagonal"``: the prior
            mean of ``R`` is then ``scale`` (its diagonal)).
        scale: ``(P, P)`` positive definite (default the identity: data on the unit scale).
        loc: ``(P, D + 1)`` prior mean of ``[C d]`` (learned ``C``; default zero).
        col_precision: ``(D + 1, D + 1)`` column precision of ``[C d]`` given ``R`` (learned ``C``;
            default the identity).

    Parameters (sites ``{name}_C`` and ``{name}_R`` of :class:`~numpyro_hdphmm.HDPSLDS`): ``C`` ``(P,
    D + 1)`` (``[C d]``, learned only) and ``R`` (``(P, P)``; ``(P,)`` for ``"diagonal"``).
    """

    def __init__(self, obs_dim: int, latent_dim: int, C=None, offset=None, *, noise: str = "full", df=None,
                 scale=None, loc=None, col_precision=None):
        P = check_static_int("obs_dim", obs_dim)
        D = check_static_int("latent_dim", latent_dim)
        if noise not in _NOISE:
            raise ValueError(f"`noise` must be 'full' or 'diagonal', got {noise!r}.")
        dtype = jnp.result_type(float)
        learned = C is None
        if learned:
            if offset is not None:
                raise ValueError("`offset` is only for a fixed `C`; a learned `C` has the offset as the last column of "
                                 "[C d] (its prior: `loc`, `col_precision`).")
            loc = jnp.zeros((P, D + 1), dtype) if loc is None else jnp.asarray(as_data_array("loc", loc), dtype)
            check_shape("loc", loc, (P, D + 1), "(obs_dim, latent_dim + 1): the prior mean of [C d]")
            check_finite("loc", loc)
            col_precision = (jnp.eye(D + 1, dtype=dtype) if col_precision is None
                             else jnp.asarray(as_data_array("col_precision", col_precision), dtype))
            check_shape("col_precision", col_precision, (D + 1, D + 1), "(latent_dim + 1, latent_dim + 1)")
            check_positive_definite("col_precision", col_precision)
            C = jnp.zeros((P, D), dtype)
            offset = jnp.zeros((P,), dtype)
        else:
            if loc is not None or col_precision is not None:
                raise ValueError("`loc` and `col_precision` are the prior of a learned `C`; with a fixed `C` pass neither.")
            C = jnp.asarray(as_data_array("C", C), dtype)
            check_shape("C", C, (P, D), "(obs_dim, latent_dim)")
            check_finite("C", C)
            offset = jnp.zeros((P,), dtype) if offset is None else jnp.asarray(as_data_array("offset", offset), dtype)
            check_shape("offset", offset, (P,), "(obs_dim,)")
            check_finite("offset", offset)
            loc = jnp.zeros((P, D + 1), dtype)
            col_precision = jnp.eye(D + 1, dtype=dtype)
        df = jnp.asarray(float(P + 2 if noise == "full" else 3.0) if df is None else df, dtype)
        if is_concrete(df) and not (np.ndim(df) == 0 and float(df) > (P - 1 if noise == "full" else 0.0)):
            raise ValueError(f"`df` must be a scalar > {P - 1 if noise == 'full' else 0} for noise={noise!r}, got {df}.")
        scale = jnp.eye(P, dtype=dtype) if scale is None else jnp.asarray(as_data_array("scale", scale), dtype)
        check_shape("scale", scale, (P, P), "(obs_dim, obs_dim)")
        check_positive_definite("scale", scale)
        self._set(P, D, learned, noise, C, offset, df, scale, loc, col_precision)

    def _set(self, P, D, learned, noise, C, offset, df, scale, loc, col_precision):
        self.obs_dim, self.latent_dim, self.learned, self.noise = int(P), int(D), bool(learned), noise
        self.C, self.offset, self.df, self.scale, self.loc, self.col_precision = C, offset, df, scale, loc, col_precision

    def tree_flatten(self):
        return ((self.C, self.offset, self.df, self.scale, self.loc, self.col_precision),
                (self.obs_dim, self.latent_dim, self.learned, self.noise))

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj._set(*aux, *children)
        return obj

    # ------------------------------------------------------------------ shapes and checks
    @property
    def event_shape(self) -> Tuple[int, ...]:
        """``(P,)``: one observation."""
        return (self.obs_dim,)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return ()

    #: a sequence of one step is enough (the latent dynamics start from their presample value)
    min_sequence_length = 1

    @property
    def param_names(self) -> Tuple[str, ...]:
        """``("C", "R")`` with a learned ``C``, ``("R",)`` with a fixed one."""
        return ("C", "R") if self.learned else ("R",)

    def check_observations(self, y, name: str = "obs") -> None:
        """``y (..., T, P)``: real numbers, NaN marks a missing value, no infinities."""
        y = as_data_array(name, y)
        if jnp.ndim(y) < 2 or jnp.shape(y)[-1] != self.obs_dim:
            raise ValueError(f"`{name}` must have shape (..., T, {self.obs_dim}) (obs_dim={self.obs_dim}), got "
                             f"{jnp.shape(y)}.")
        check_finite(name, y, allow_nan=True)

    def prepare(self, y):
        """``y (T, P) -> (y, valid (T,))``: ``valid`` marks the steps with at least one observed
        dimension (the steps that carry an observation)."""
        y = jnp.asarray(y)
        return y, jnp.any(~jnp.isnan(y), axis=-1)

    # ------------------------------------------------------------------ parameters
    def loading(self, params) -> Tuple[jax.Array, jax.Array]:
        """``(C (P, D), d (P,))`` at ``params``."""
        if self.learned:
            return params["C"][:, :-1], params["C"][:, -1]
        return self.C, self.offset

    def noise_cov(self, params) -> jax.Array:
        """``R (P, P)`` at ``params`` (``diag(r)`` for diagonal noise)."""
        R = params["R"]
        return jnp.diag(R) if self.noise == "diagonal" else R

    def kalman_noise(self, params) -> jax.Array:
        """``R`` as :func:`~numpyro_hdphmm._core.kalman.kalman_filter` takes it: the variances ``r (P,)``
        for diagonal noise (its information-form update, D x D work per step), ``R (P, P)`` otherwise."""
        return params["R"]

    def _diag_scale(self):
        return jnp.diagonal(self.scale)

    def sample_sites(self, name: str, infer: Dict) -> Dict[str, jax.Array]:
        """Declare ``{name}_R`` (``InverseWishart(df, scale)``, or ``InverseGamma(df / 2, scale_ii / 2)``
        per dimension) and, for a learned ``C``, ``{name}_C ~ MatrixNormal(loc, R, col_precision^{-1})``,
        each with ``infer`` (the model class's role tag); returns ``{parameter: value}``."""
        infer = lambda p, tag=dict(infer): {**tag, "hdphmm_parameter": p}
        if self.noise == "full":
            R = numpyro.sample(f"{name}_R", dist.InverseWishart(self.df, scale_matrix=self.scale), infer=infer("R"))
            row_tril = mniw.cholesky(R)
        else:
            R = numpyro.sample(f"{name}_R", dist.InverseGamma(0.5 * self.df, 0.5 * self._diag_scale()).to_event(1),
                               infer=infer("R"))
            row_tril = jnp.sqrt(R)[..., :, None] * jnp.eye(self.obs_dim, dtype=R.dtype)
        if not self.learned:
            return {"R": R}
        col_tril = mniw.cholesky(mniw.cho_solve(mniw.cholesky(self.col_precision),
                                                jnp.eye(self.latent_dim + 1, dtype=self.col_precision.dtype)))
        C = numpyro.sample(f"{name}_C", dist.MatrixNormal(self.loc, row_tril, col_tril), infer=infer("C"))
        return {"C": C, "R": R}

    def sample_parameters(self, rng_key, sample_shape=()) -> Dict[str, jax.Array]:
        """A prior draw ``{parameter: value}`` with leading ``sample_shape``."""
        shape = tuple(sample_shape)
        k_r, k_c = random.split(rng_key)
        if self.noise == "full":
            R = mniw.sample_inverse_wishart(k_r, jnp.broadcast_to(self.df, shape), jnp.broadcast_to(
                self.scale, shape + self.scale.shape), shape)
        else:
            R = dist.InverseGamma(0.5 * self.df, 0.5 * self._diag_scale()).sample(k_r, shape)
        if not self.learned:
            return {"R": R}
        Rm = R if self.noise == "full" else jnp.vectorize(jnp.diag, signature="(p)->(p,p)")(R)
        Z = random.normal(k_c, shape + self.loc.shape, self.loc.dtype)
        col = mniw.cholesky(self.col_precision)
        X = mniw.cholesky(Rm) @ Z
        C = self.loc + jnp.swapaxes(jax.scipy.linalg.solve_triangular(
            jnp.broadcast_to(col, shape + col.shape), jnp.swapaxes(X, -1, -2), lower=True, trans=1), -1, -2)
        return {"C": C, "R": R}

    # ------------------------------------------------------------------ likelihood
    def pointwise_log_likelihood(self, y, params, x) -> jax.Array:
        """``log N(y_t,o | C x_t + d, R_oo)`` per step of one sequence, ``y (T, P)`` (NaN: missing),
        ``x (T, D)`` -> ``(T,)`` (0 at a step with no observed dimension)."""
        C, d = self.loading(params)
        R = self.noise_cov(params)
        mean = x @ C.T + d
        mask = ~jnp.isnan(y)
        return jax.vmap(masked_gaussian_log_density, in_axes=(0, 0, None, 0))(y, mean, R, mask)

    def sample_observations(self, rng_key, params, x) -> jax.Array:
        """``y (T, P) = x C^T + d + w``, ``w ~ N(0, R)``, for ``x (T, D)``."""
        C, d = self.loading(params)
        chol = mniw.cholesky(self.noise_cov(params))
        eps = random.normal(rng_key, x.shape[:-1] + (self.obs_dim,), chol.dtype)
        return x @ C.T + d + eps @ chol.T

    # ------------------------------------------------------------------ conditional update
    def impute(self, rng_key, params, x, y, power=1.0):
        """The missing dimensions of ``y (T, P)`` drawn from their conditional given the observed
        ones, ``x (T, D)`` and ``R`` (observed values kept): with ``L = R^{-1}`` and ``u`` the
        missing mask, ``y_u ~ N(mu_u - L_uu^{-1} L_uo (y_o - mu_o), L_uu^{-1} / power)`` (``power``
        ``b > 0``: the conditional under the tempered density ``N(y | mu, R)^b``, :meth:`update`)."""
        C, d = self.loading(params)
        R = self.noise_cov(params)
        mean = x @ C.T + d
        missing = jnp.isnan(y)
        prec = mniw.cho_solve(mniw.cholesky(R), jnp.eye(self.obs_dim, dtype=R.dtype))
        eps = random.normal(rng_key, y.shape, R.dtype)

        def one(mu, yt, u, e):
            um = u.astype(R.dtype)
            resid = jnp.where(u, 0.0, yt - mu)
            lam = prec * um[:, None] * um[None, :] + jnp.diag(1.0 - um)
            rhs = -(prec * um[:, None] * (1.0 - um)[None, :]) @ resid
            chol = jnp.linalg.cholesky(mniw.symmetrize(lam))
            delta = mniw.cho_solve(chol, rhs[:, None])[:, 0] + jax.scipy.linalg.solve_triangular(
                chol, e, lower=True, trans=1) / jnp.sqrt(power)
            return jnp.where(u, mu + delta, yt)

        return jax.vmap(one)(mean, y, missing, eps)

    def update(self, rng_key, params, x, y, valid, power=None) -> Dict[str, jax.Array]:
        """The parameters drawn from their conditional given the latent paths ``x (N, T, D)``, the
        observations ``y (N, T, P)`` (NaN: missing, imputed first: :meth:`impute`) and ``valid (N,
        T)`` (the steps inside the sequences).  Fixed ``C``: ``R ~ IW(df + n, scale + sum e e^T)``
        with ``e = y - C x - d`` (per dimension for diagonal noise); learned ``C``: the MNIW
        posterior of the regression of ``y_t`` on ``[x_t; 1]`` (per row for diagonal noise).

        With ``power`` (a scalar ``b`` in ``[0, 1]``, may be traced) the conditional of the tempered
        target ``p(C, R) prod_t N(y_t,o | C x_t + d, R_oo)^b`` instead (:meth:`tempered_update`)."""
        if power is not None:
            return self.tempered_update(rng_key, params, x, y, valid, power)
        k_imp, k_draw = random.split(rng_key)
        N, T = valid.shape
        keys = random.split(k_imp, N)
        y = jax.vmap(self.impute, in_axes=(0, None, 0, 0))(keys, params, x, y)
        w = valid.reshape(-1).astype(y.dtype)
        ys = y.reshape(-1, self.obs_dim)
        xs = x.reshape(-1, self.latent_dim)
        dtype = self.scale.dtype
        if not self.learned:
            resid = ys - xs @ self.C.T - self.offset
            n = jnp.sum(w)
            if self.noise == "full":
                S = jnp.einsum("t,ti,tj->ij", w, resid, resid)
                R = mniw.sample_inverse_wishart(k_draw, self.df + n, self.scale + S, ())
            else:
                s = jnp.einsum("t,ti->i", w, resid * resid)
                R = dist.InverseGamma(0.5 * (self.df + n), 0.5 * (self._diag_scale() + s)).sample(k_draw)
            return {"R": R.astype(dtype)}
        reg = jnp.concatenate([xs, jnp.ones((xs.shape[0], 1), xs.dtype)], axis=-1)
        if self.noise == "full":
            stats = jax.tree_util.tree_map(lambda a: a[0], mniw.mniw_statistics(ys, reg, w[:, None]))
            post = mniw.mniw_posterior(self.loc, self.col_precision, self.df, self.scale, stats)
            C, R = mniw.mniw_sample(k_draw, *post, ())
            return {"C": C.astype(dtype), "R": R.astype(dtype)}
        # diagonal: P independent one-output regressions (normal-inverse-gamma = MNIW with one row)
        stats = mniw.mniw_statistics(reg, reg, w[:, None])  # count and sum_xx, shared by the rows

        def row(key, yi, loc_i, s_ii):
            st = mniw.MNIWStats(stats.count[0], stats.sum_xx[0], jnp.einsum("t,t,tj->j", w, yi, reg)[None],
                                jnp.sum(w * yi * yi)[None, None])
            post = mniw.mniw_posterior(loc_i[None], self.col_precision, self.df, s_ii[None, None], st)
            c, r = mniw.mniw_sample(key, *post, ())
            return c[0], r[0, 0]

        C, r = jax.vmap(row)(random.split(k_draw, self.obs_dim), ys.T, self.loc, self._diag_scale())
        return {"C": C.astype(dtype), "R": r.astype(dtype)}

    def tempered_update(self, rng_key, params, x, y, valid, power) -> Dict[str, jax.Array]:
        r"""The parameters drawn given ``x, y, valid`` (as :meth:`update`) from the tempered
        conditional ``p(C, R) prod_t N(y_t,o | C x_t + d, R_oo)^b`` (replica exchange: the
        observation likelihood raised to ``b = power``; ``b = 0`` is the prior draw).

        ``N(y | mu, R)^b`` is ``N(y | mu, R / b)`` up to a factor ``|R|^{(1-b)/2}`` (times constants), so
        a tempered Gaussian likelihood is the conjugate one with its statistics weighted by ``b``:

        * **Diagonal noise**: each dimension is its own regression; an observed entry has weight
          ``b``, a missing one weight 0 (its factor integrates to one).
        * **Full noise**: a fully observed step has weight ``b``, a step with no observed entry weight 0.
          A step with some entries missing ``u`` (observed ``o``) completes them by data augmentation
          at the tempered law, ``y_u ~ N(mu_u + R_uo R_oo^{-1} (y_o - mu_o), S / b)`` with ``S = R_uu -
          R_uo R_oo^{-1} R_ou``, and has weight ``b``.  Since ``int N(y | mu, R)^b dy_u =
          N(y_o | mu_o, R_oo)^b |S|^{(1-b)/2}`` (up to constants), the completed target carries the
          factor ``g(R) = prod_t |S_t|^{-(1-b)/2}`` over those steps: the draw from the weighted
          conjugate conditional is a Metropolis-Hastings independence proposal accepted with
          probability ``min(1, g(R') / g(R))`` (always at ``b = 1``, where this is :meth:`update`'s law).
        """
        k_imp, k_draw, k_accept = random.split(rng_key, 3)
        dtype = self.scale.dtype
        b = jnp.asarray(power, y.dtype)
        P = self.obs_dim
        observed = ~jnp.isnan(y) & valid[..., None]  # (N, T, P)
        xs = x.reshape(-1, self.latent_dim)
        if self.noise == "diagonal":
            W = b * observed.reshape(-1, P).astype(y.dtype)  # (NT, P): entry weights
            ys = jnp.where(observed, y, 0.0).reshape(-1, P)
            if not self.learned:
                resid = ys - xs @ self.C.T - self.offset
                R = dist.InverseGamma(0.5 * (self.df + jnp.sum(W, 0)),
                                      0.5 * (self._diag_scale() + jnp.sum(W * resid * resid, 0))).sample(k_draw)
                return {"R": R.astype(dtype)}
            reg = jnp.concatenate([xs, jnp.ones((xs.shape[0], 1), xs.dtype)], axis=-1)

            def row(key, yi, wi, loc_i, s_ii):
                st = mniw.MNIWStats(jnp.sum(wi), jnp.einsum("t,ti,tj->ij", wi, reg, reg),
                                    jnp.einsum("t,t,tj->j", wi, yi, reg)[None], jnp.sum(wi * yi * yi)[None, None])
                post = mniw.mniw_posterior(loc_i[None], self.col_precision, self.df, s_ii[None, None], st)
                c, r = mniw.mniw_sample(key, *post, ())
                return c[0], r[0, 0]

            Cn, r = jax.vmap(row)(random.split(k_draw, P), ys.T, W.T, self.loc, self._diag_scale())
            return {"C": Cn.astype(dtype), "R": r.astype(dtype)}
        # full noise: steps with some entries missing completed at the tempered law, then an MH correction
        safe = jnp.where(b > 0, b, 1.0)
        N = valid.shape[0]
        filled = jax.vmap(self.impute, in_axes=(0, None, 0, 0, None))(random.split(k_imp, N), params, x, y, safe)
        any_obs = jnp.any(observed, -1).reshape(-1)
        partial = any_obs & ~jnp.all(observed, -1).reshape(-1)  # inside, some entries observed, some missing
        w = b * any_obs.astype(y.dtype)
        ys = filled.reshape(-1, P)
        if not self.learned:
            resid = ys - xs @ self.C.T - self.offset
            S = jnp.einsum("t,ti,tj->ij", w, resid, resid)
            proposal = {"R": mniw.sample_inverse_wishart(k_draw, self.df + jnp.sum(w), self.scale + S, ())}
        else:
            reg = jnp.concatenate([xs, jnp.ones((xs.shape[0], 1), xs.dtype)], axis=-1)
            stats = jax.tree_util.tree_map(lambda a: a[0], mniw.mniw_statistics(ys, reg, w[:, None]))
            post = mniw.mniw_posterior(self.loc, self.col_precision, self.df, self.scale, stats)
            Cn, Rn = mniw.mniw_sample(k_draw, *post, ())
            proposal = {"C": Cn, "R": Rn}
        missing = jnp.isnan(y).reshape(-1, P)
        log_ratio = (self.completion_log_factor(proposal["R"].astype(y.dtype), missing, partial, b)
                     - self.completion_log_factor(params["R"].astype(y.dtype), missing, partial, b))
        accept = jnp.log(random.uniform(k_accept, (), y.dtype)) < log_ratio
        return {k: jnp.where(accept, v, params[k]).astype(dtype) for k, v in proposal.items()}

    @staticmethod
    def completion_log_factor(R, missing, partial, power):
        """``log g(R) = -(1 - b)/2 sum_t log|S_t|`` over the steps ``partial (M,)`` (some entries
        observed, some ``missing (M, P)``), ``S_t = R_uu - R_uo R_oo^{-1} R_ou`` the covariance of the
        missing entries given the observed ones (``log|S_t| = log|R| - log|R_oo|``); 0 at ``b = 0``,
        where no step is completed (:meth:`tempered_update`).  ``R (P, P)``."""
        logdet_R = mniw.logdet_from_cholesky(mniw.cholesky(R))

        def logdet_oo(u):
            m = (~u).astype(R.dtype)
            return mniw.logdet_from_cholesky(jnp.linalg.cholesky(
                mniw.symmetrize(R * m[:, None] * m[None, :] + jnp.diag(1.0 - m))))

        terms = jnp.where(partial, logdet_R - jax.vmap(logdet_oo)(missing), 0.0)
        return jnp.where(power > 0, -0.5 * (1.0 - power) * jnp.sum(terms), 0.0)

    def _noise_moments(self, y, valid):
        r"""``(r (P,), q (P,))``: per dimension of ``y (N, T, P)`` the moment estimates of the noise
        variance and of the signal's increment variance of a local-level model (a latent path
        that moves slowly against white noise): with the differences ``u_t = y_t - y_{t-1}``,
        ``Cov(u_t, u_{t-1}) = -r`` and ``Var(u_t) = q + 2 r``, so ``r = -mean(u_t u_{t-1})``
        clipped to ``[0.01, 0.9] mean(u_t^2) / 2`` (a smooth signal makes it negative: the floor;
        ``mean(u^2) / 2`` is all the noise there can be) and ``q = mean(u_t^2) - 2 r``."""
        obs = valid[..., None] & ~jnp.isnan(y)
        yz = jnp.where(obs, y, 0.0)
        both = obs[:, 1:] & obs[:, :-1]
        u = jnp.where(both, yz[:, 1:] - yz[:, :-1], 0.0)
        pairs = both[:, 1:] & both[:, :-1]
        g0 = jnp.sum(u * u, axis=(0, 1)) / jnp.maximum(jnp.sum(both, axis=(0, 1)), 1)
        g1 = jnp.sum(jnp.where(pairs, u[:, 1:] * u[:, :-1], 0.0), axis=(0, 1)) / jnp.maximum(jnp.sum(pairs, axis=(0, 1)), 1)
        r = jnp.clip(-g1, 0.005 * g0, 0.45 * g0)
        fallback = self._diag_scale() / (self.df + 2.0)  # constant data: the prior's scale
        return jnp.where(g0 > 0, r, fallback), jnp.where(g0 > 0, g0 - 2.0 * r, fallback)

    def with_noise_floor(self, R, y, valid) -> jax.Array:
        r"""``R`` (``(P,)`` or ``(P, P)``) with each variance raised to at least the moment estimate
        of the noise from the data's differences (:meth:`_noise_moments`), for the data-driven start:
        ``R`` drawn given a latent path fitted to ``y`` holds what ``C`` cannot reach but can miss
        the noise the path fitted (all of it where ``C`` is square), and a start near ``R = 0``
        lets the first sweeps fit the noise with the dynamics.  A full ``R`` gets the missing
        variance on its diagonal (still positive definite)."""
        floor = self._noise_moments(y, valid)[0].astype(R.dtype)
        if R.ndim == 1:
            return jnp.maximum(R, floor)
        return R + jnp.diag(jnp.maximum(floor - jnp.diagonal(R), 0.0))

    def initial_latent(self, y, valid) -> jax.Array:
        """A starting latent path ``x (N, T, D)`` from ``y (N, T, P)`` (NaN: missing): each dimension
        of ``y`` smoothed first by the local-level model of :meth:`_noise_moments` (Kalman smoother,
        missing steps filled by it), so that the path the data-driven start clusters carries the
        signal rather than the noise, and the residual ``y - C x - d`` that the start's ``R`` is
        drawn from holds the noise (the least-squares path of the raw data leaves none where ``C``
        is square: ``R`` would start near 0 and the first sweeps fit the noise with the dynamics);
        then least squares ``x_t = C^+ (y_t - d)`` with a fixed
        ``C``, or with a learned ``C`` the leading ``D`` principal components of the centred smoothed
        data, scaled to unit variance."""
        w = valid[..., None] & ~jnp.isnan(y)
        wf = w.astype(y.dtype)
        mean = jnp.sum(jnp.where(w, y, 0.0), axis=(0, 1)) / jnp.maximum(jnp.sum(wf, axis=(0, 1)), 1.0)
        r, q = (v.astype(y.dtype) for v in self._noise_moments(y, valid))
        T = y.shape[1]

        def smooth(y_np, o_np, m, r_p, q_p):  # one dimension of one sequence: (T,)
            ones = jnp.ones((T, 1, 1), y.dtype)
            A, b, Q = ones, jnp.zeros((T, 1), y.dtype), q_p * ones
            f = kalman_filter(m[None], A, b, Q, jnp.ones((1, 1), y.dtype), jnp.zeros((1,), y.dtype), r_p[None],
                              jnp.where(o_np, y_np, 0.0)[:, None], o_np[:, None])
            return kalman_smoother(f, A, b, Q)[0][:, 0]

        per_dim = jax.vmap(smooth, in_axes=(1, 1, 0, 0, 0), out_axes=1)  # over P
        filled = jax.vmap(per_dim, in_axes=(0, 0, None, None, None))(y, w, mean, r, q)  # over N
        if not self.learned:
            return jnp.einsum("dp,ntp->ntd", jnp.linalg.pinv(self.C), filled - self.offset)
        centred = (filled - mean) * valid[..., None].astype(y.dtype)
        flat = centred.reshape(-1, self.obs_dim)
        _, s, vt = jnp.linalg.svd(flat, full_matrices=False)
        k = min(self.latent_dim, self.obs_dim)
        scores = flat @ vt[:k].T
        sd = jnp.sqrt(jnp.sum(scores * scores, axis=0) / jnp.maximum(jnp.sum(valid), 1.0))
        scores = scores / jnp.where(sd > 0, sd, 1.0)
        pad = jnp.zeros((flat.shape[0], self.latent_dim - k), y.dtype)
        return jnp.concatenate([scores, pad], axis=-1).reshape(y.shape[:-1] + (self.latent_dim,))


class ObservationLikelihood(Distribution):
    r"""The observed site of an :class:`~numpyro_hdphmm.HDPSLDS`: ``y_t ~ N(C x_t + d, R)``, pointwise
    over time (batch shape ``latent.shape[:-1]``, one term per step for ArviZ's pointwise
    ``log_likelihood``).  NaN dimensions are missing (the term is the Gaussian of the observed
    ones); padded steps (``t >= lengths``) contribute 0."""

    arg_constraints = {}
    pytree_data_fields = ("observation", "params", "latent", "lengths")
    support = constraints.real

    def __init__(self, observation: LinearGaussianObservation, params, latent, lengths=None, *, validate_args=None):
        self.observation = observation
        self.params = params
        self.latent = jnp.asarray(latent)
        self.lengths = None if lengths is None else jnp.asarray(lengths, jnp.int32)
        super().__init__(batch_shape=jnp.shape(self.latent)[:-1], event_shape=observation.event_shape,
                         validate_args=validate_args)

    def log_prob(self, value):
        value = jnp.broadcast_to(value, self.batch_shape + self.event_shape)
        lead = self.batch_shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        T = self.batch_shape[-1]
        out = jax.vmap(lambda y, x: self.observation.pointwise_log_likelihood(y, self.params, x))(
            value.reshape((n, T, -1)), self.latent.reshape((n, T, -1))).reshape(self.batch_shape)
        if self.lengths is not None:
            out = jnp.where(jnp.arange(T) < self.lengths[..., None], out, 0.0)
        return out

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape)
        latent = jnp.broadcast_to(self.latent, shape + self.latent.shape)
        return self.observation.sample_observations(key, self.params, latent)
