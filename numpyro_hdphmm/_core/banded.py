r"""Order-``r`` linear Gaussian state space models: the latent path's posterior by its block-banded
precision.

One sequence of a time-varying linear Gaussian state space model whose latent state follows an
order-``r`` vector autoregression from deterministic presample values:

.. math::

    x_t &= \sum_{i=1}^{r} A^{(i)}_t x_{t-i} + b_t + e_t, \qquad e_t \sim N(0, Q_t), \\
    y_t &= C x_t + d + w_t, \qquad\qquad\qquad\;\; w_t \sim N(0, R),

for the steps ``t = 0..T-1`` of the arrays, with ``x_{-i} = x_init[i - 1]`` for ``i = 1..r``
(most recent first).  ``A`` is ``(T, D, D r)``: columns ``[(i-1) D, i D)`` multiply ``x_{t-i}``
(the lag layout of :class:`~numpyro_hdphmm.emissions.AutoRegressive`).  ``y``, ``obs_mask``,
``length``, ``C``, ``d`` and a full or diagonal ``R`` follow the conventions of
:mod:`numpyro_hdphmm._core.kalman` (a partially observed step conditions on exactly its observed
dimensions; steps ``t >= length`` carry no observation and follow the dynamics).

Why not the Kalman filter.  The stacked state ``s_t = [x_t; ...; x_{t-r+1}]`` makes the model
order 1, but its noise ``G e_t`` (``G = [I; 0; ...]``) is singular, and so are the predicted
covariances while the presample values are in the window: the backward sampler's gain
``P_t F^T (F P_t F^T + G Q G^T)^{-1}`` would need a pseudo-inverse.  Instead the posterior of the
whole path ``x_{0:T-1}`` is written as the Gaussian ``N(J^{-1} h, J^{-1})`` whose precision is
block-banded with ``r`` blocks on each side of the diagonal (a Gaussian Markov random field of
order ``r``; Rue & Held (2005), "Gaussian Markov Random Fields", Sec. 2.4 and Algorithm 2.9 for
sampling through the band Cholesky factor):

.. math::

    J &= \sum_t \Big(\sum_{i, j = 0}^{r} E_{t-i} B^{(i)T}_t Q_t^{-1} B^{(j)}_t E_{t-j}^T\Big)
        + \sum_{t < \mathrm{length}} E_t C_t^T R_t^{-1} C_t E_t^T, \\
    h &= \sum_t \sum_{i=0}^{r} E_{t-i} B^{(i)T}_t Q_t^{-1} \Big(b_t + \sum_{j > t} A^{(j)}_t
        x_{t-j}\Big) + \sum_{t < \mathrm{length}} E_t C_t^T R_t^{-1} (y_t - d),

with ``B^{(0)} = I``, ``B^{(i)} = -A^{(i)}``, ``E_s`` the embedding of block ``s`` (terms whose
block index is negative, the presample values, are constants moved into ``h``) and the masked
``C_t, R_t`` of :mod:`~numpyro_hdphmm._core.kalman`.  Every term is a Gram matrix of whitened
rows, ``B^{(i)T} Q^{-1} B^{(j)} = (L_Q^{-1} B^{(i)})^T (L_Q^{-1} B^{(j)})`` with ``L_Q L_Q^T =
Q``, so ``J`` is positive definite by construction.  The band Cholesky factor ``J = L L^T``
(lower, ``r`` blocks below the diagonal) is one sequential ``lax.scan`` over the block rows; then
``w = L^{-1} h`` in the same pass, and a draw is ``x = L^{-T} (w + \epsilon)``,
``\epsilon \sim N(0, I)``, one backward scan (the mean is ``L^{-T} w``).  Work ``O(T r^2 D^3)``,
memory ``O(T r D^2)``; pure JAX, jittable and vmappable over sequences.  With ``r = 1`` the law is
that of :func:`numpyro_hdphmm._core.kalman.kalman_sample` (the test suite checks it).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from numpyro_hdphmm._core.linalg import small_matmul

__all__ = ["BandedPosterior", "banded_posterior", "banded_mean", "banded_sample"]


class BandedPosterior(NamedTuple):
    r"""The latent path's posterior ``N(J^{-1} h, J^{-1})`` in factored form (module docstring).

    chol : (T, r + 1, D, D)
        the band Cholesky factor of ``J``: ``chol[s, l] = L[s, s - l]`` (zero where ``s - l < 0``).
    whitened : (T, D)
        ``w = L^{-1} h``.
    """

    chol: jax.Array
    whitened: jax.Array


def _sym(m):
    return 0.5 * (m + jnp.swapaxes(m, -1, -2))


def _observation_terms(C, d, R, y, obs_mask, valid):
    r"""``(C_t^T R_t^{-1} C_t (T, D, D), C_t^T R_t^{-1} (y_t - d) (T, D))`` at the valid steps
    (zero elsewhere), from the whitened rows of the masked observation model."""
    o = obs_mask & valid[:, None]
    v = jnp.where(o, jnp.where(o, y, 0.0) - d, 0.0)
    if R.ndim == 1:
        w = jnp.where(o, lax.rsqrt(R), 0.0)  # (T, P)
        Ct = w[..., None] * C  # (T, P, D)
        vt = w * v
    else:
        of = o.astype(C.dtype)

        def whiten(of_t, v_t):
            Rt = of_t[:, None] * R * of_t[None, :] + jnp.diag(1.0 - of_t)
            Lr = jnp.linalg.cholesky(_sym(Rt))
            return solve_triangular(Lr, of_t[:, None] * C, lower=True), solve_triangular(Lr, v_t, lower=True)

        Ct, vt = jax.vmap(whiten)(of, v)
    return jnp.einsum("tpi,tpj->tij", Ct, Ct), jnp.einsum("tpi,tp->ti", Ct, vt)


def banded_posterior(x_init, A, b, Q, C, d, R, y, obs_mask=None, length=None) -> BandedPosterior:
    r"""The band Cholesky factor of the latent path's posterior precision and ``L^{-1} h``.

    Args:
        x_init: (r, D) presample values ``x_{-1}, ..., x_{-r}`` (most recent first), or (D,) for
            all of them.
        A: (T, D, D r) lag matrices (entry ``t`` maps ``x_{t-1}, ..., x_{t-r}`` to ``x_t``).
        b: (T, D) offsets.  Q: (T, D, D) positive definite noise covariances.
        C: (P, D), d: (P,), R: (P, P) or (P,): the observation model (as in
            :func:`numpyro_hdphmm._core.kalman.kalman_filter`).
        y: (T, P) observations; obs_mask: (T, P) bool (default ``isfinite(y)``); length: int
            scalar (may be traced), steps ``t >= length`` carry no observation (default ``T``).

    Returns:
        :class:`BandedPosterior` ``(chol (T, r + 1, D, D), whitened (T, D))``.
    """
    dtype = jnp.promote_types(jnp.result_type(A, b, Q, C, d, R, y), jnp.float32)
    A, b, Q, C, d, R = (jnp.asarray(a, dtype) for a in (A, b, Q, C, d, R))
    y = jnp.asarray(y, dtype)
    T, D = b.shape
    r = A.shape[-1] // D
    x_init = jnp.broadcast_to(jnp.asarray(x_init, dtype), (r, D))
    obs_mask = jnp.isfinite(y) if obs_mask is None else jnp.asarray(obs_mask, bool)
    length = jnp.asarray(T if length is None else length, jnp.int32)
    t = jnp.arange(T)

    # whitened dynamics rows L_Q^{-1} [B^(0) ... B^(r)] and right-hand sides (the presample lags moved over)
    lags = A.reshape(T, D, r, D)  # lags[t, :, i - 1, :] = A^(i)_t
    eye = jnp.broadcast_to(jnp.eye(D, dtype=dtype), (T, D, D))
    blocks = jnp.concatenate([eye[:, :, None, :], -lags], axis=2)  # (T, D, r + 1, D)
    before = (jnp.arange(1, r + 1)[None, :] > t[:, None])  # (T, r): lag i reaches the presample
    pre = x_init[jnp.clip(jnp.arange(1, r + 1)[None, :] - t[:, None] - 1, 0, r - 1)]  # (T, r, D)
    rhs = b + jnp.einsum("tdij,tij->td", lags, jnp.where(before[..., None], pre, 0.0))
    Lq = jnp.linalg.cholesky(_sym(Q))
    G = jax.vmap(lambda L, m: solve_triangular(L, m, lower=True))(Lq, blocks.reshape(T, D, (r + 1) * D))
    G = G.reshape(T, D, r + 1, D)
    g = jax.vmap(lambda L, v: solve_triangular(L, v, lower=True))(Lq, rhs)

    band = jnp.zeros((T, r + 1, D, D), dtype)
    h = jnp.zeros((T, D), dtype)
    for i in range(r + 1):  # static: (r + 1)(r + 2) / 2 pairs of lags, each vectorized over the steps
        Gi = G[:, :, i, :]
        h = h.at[: T - i].add(jnp.einsum("tdi,td->ti", Gi, g)[i:])
        for j in range(i, r + 1):
            block = jnp.einsum("tdi,tdj->tij", Gi, G[:, :, j, :])  # J[t - i, t - j] += block[t]
            band = band.at[j - i: T - i, j - i].add(block[j:])
    obs_prec, obs_h = _observation_terms(C, d, R, y, obs_mask, t < length)
    band = band.at[:, 0].add(obs_prec)
    h = h + obs_h

    def row(carry, inp):
        prev, w_prev = carry  # prev[q] = chol row s - 1 - q, w_prev[q] = w_{s - 1 - q}
        J_row, h_s = inp
        new = [None] * (r + 1)
        for lag in range(r, 0, -1):  # L[s, s - lag], columns in increasing order
            S = J_row[lag]
            for a in range(lag + 1, r + 1):
                S = S - small_matmul(new[a], prev[lag - 1, a - lag].T)
            new[lag] = solve_triangular(prev[lag - 1, 0], S.T, lower=True).T
        S0 = J_row[0]
        u = h_s
        for a in range(1, r + 1):
            S0 = S0 - small_matmul(new[a], new[a].T)
            u = u - new[a] @ w_prev[a - 1]
        new[0] = jnp.linalg.cholesky(_sym(S0))
        w = solve_triangular(new[0], u, lower=True)
        out = jnp.stack(new)
        return (jnp.concatenate([out[None], prev[:-1]]), jnp.concatenate([w[None], w_prev[:-1]])), (out, w)

    # rows before the start: identity diagonal and zero band, so their solves are inert
    prev0 = jnp.zeros((r, r + 1, D, D), dtype).at[:, 0].set(jnp.eye(D, dtype=dtype))
    _, (chol, w) = lax.scan(row, (prev0, jnp.zeros((r, D), dtype)), (band, h))
    return BandedPosterior(chol, w)


def _back_substitute(post: BandedPosterior, v):
    r"""``x = L^{-T} v`` for ``v (T, D)``: one backward scan over the block rows."""
    chol = post.chol
    T, r1, D, _ = chol.shape
    r = r1 - 1
    # below[s, a - 1] = L[s + a, s] (zero past the end)
    below = jnp.stack([jnp.concatenate([chol[a:, a], jnp.zeros((a, D, D), chol.dtype)]) for a in range(1, r + 1)], 1)

    def step(after, inp):
        L_ss, low, v_s = inp
        u = v_s - jnp.einsum("aij,ai->j", low, after)
        x = solve_triangular(L_ss, u, lower=True, trans="T")
        return jnp.concatenate([x[None], after[:-1]]), x

    _, x = lax.scan(step, jnp.zeros((r, D), chol.dtype), (chol[:, 0], below, v), reverse=True)
    return x


def banded_mean(post: BandedPosterior):
    r"""The posterior mean of the latent path ``J^{-1} h = L^{-T} w``, (T, D)."""
    return _back_substitute(post, post.whitened)


def banded_sample(rng_key, x_init, A, b, Q, C, d, R, y, obs_mask=None, length=None):
    r"""One draw of the latent path ``x_{0:T-1}`` (T, D) from its posterior given the dynamics and
    the observations: ``x = L^{-T} (w + \epsilon)`` (Rue & Held 2005, Algorithm 2.9; module
    docstring).  Arguments as :func:`banded_posterior`, plus ``rng_key``."""
    post = banded_posterior(x_init, A, b, Q, C, d, R, y, obs_mask, length)
    eps = jax.random.normal(rng_key, post.whitened.shape, post.whitened.dtype)
    return _back_substitute(post, post.whitened + eps)
