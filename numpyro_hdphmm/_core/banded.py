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
Q``, so ``J`` is positive definite by construction.

Grouping ``r`` consecutive steps into one super-step of dimension ``r D`` makes the band
block-tridiagonal (two steps at most ``r`` apart lie in the same or in adjacent groups), so the
Cholesky factor ``J = L L^T`` is the block-tridiagonal recursion

.. math::

    L_{S,S-1} = J_{S,S-1} L_{S-1,S-1}^{-T}, \qquad
    L_{S,S} L_{S,S}^T = J_{S,S} - L_{S,S-1} L_{S,S-1}^T, \qquad
    w_S = L_{S,S}^{-1} (h_S - L_{S,S-1} w_{S-1}),

one sequential ``lax.scan`` over the ``ceil(T / r)`` groups with three dense ``r D`` operations
each (the sequence is padded to whole groups with independent standard normal steps, which are
dropped).  A draw is ``x = L^{-T} (w + \epsilon)``, ``\epsilon \sim N(0, I)``, one backward scan
(the mean is ``L^{-T} w``).  Work ``O(T r^2 D^3)``, memory ``O(T r D^2)``; pure JAX, jittable and
vmappable over sequences.  With ``r = 1`` the law is that of
:func:`numpyro_hdphmm._core.kalman.kalman_sample` (the test suite checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular

from numpyro_hdphmm._core.kalman import observation_information
from numpyro_hdphmm._core.linalg import small_matmul

__all__ = ["BandedPosterior", "banded_posterior", "banded_mean", "banded_sample"]


@partial(jax.tree_util.register_dataclass, data_fields=["diag", "below", "whitened"],
         meta_fields=["num_steps", "dim"])
@dataclass(frozen=True)
class BandedPosterior:
    r"""The latent path's posterior ``N(J^{-1} h, J^{-1})`` in factored form (module docstring).

    Steps are grouped by ``r`` into ``M = ceil(T / r)`` super-steps of dimension ``n = r D``
    (module docstring; the last group padded).

    diag : (M, n, n)
        the diagonal blocks ``L_{S,S}`` of the Cholesky factor of ``J`` (lower triangular).
    below : (M, n, n)
        ``L_{S,S-1}`` (zero for ``S = 0``).
    whitened : (M, n)
        ``w = L^{-1} h``.
    num_steps, dim : int (static)
        ``T`` and ``D``.
    """

    diag: jax.Array
    below: jax.Array
    whitened: jax.Array
    num_steps: int
    dim: int


def _sym(m):
    return 0.5 * (m + jnp.swapaxes(m, -1, -2))


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
    obs_prec, obs_h = observation_information(C, d, R, y, obs_mask, t < length)
    band = band.at[:, 0].add(obs_prec)
    h = h + obs_h

    # super-steps of r steps: J[s, s - l] = band[s, l] regrouped into diagonal and sub-diagonal blocks
    groups = -(-T // r)
    pad = groups * r - T
    band = jnp.concatenate([band, jnp.zeros((pad, r + 1, D, D), dtype).at[:, 0].set(jnp.eye(D, dtype=dtype))])
    h = jnp.concatenate([h, jnp.zeros((pad, D), dtype)])
    band = band.reshape(groups, r, r + 1, D, D)  # [S, p, l] = J[S r + p, S r + p - l]
    zero = jnp.zeros((groups, D, D), dtype)
    diag_rows, below_rows = [], []
    for p in range(r):
        diag_rows.append(jnp.concatenate(
            [band[:, p, p - q] if q <= p else jnp.swapaxes(band[:, q, q - p], -1, -2) for q in range(r)], axis=-1))
        below_rows.append(jnp.concatenate([band[:, p, r + p - q] if q >= p else zero for q in range(r)], axis=-1))
    J_diag = jnp.concatenate(diag_rows, axis=-2)  # (M, rD, rD)
    J_below = jnp.concatenate(below_rows, axis=-2)  # J[S, S - 1]
    n = r * D

    def group(carry, inp):
        L_prev, w_prev = carry
        J_SS, J_Sb, h_S = inp
        L_b = solve_triangular(L_prev, J_Sb.T, lower=True).T  # J_{S,S-1} L_{S-1,S-1}^{-T}
        L_SS = jnp.linalg.cholesky(_sym(J_SS - small_matmul(L_b, L_b.T)))
        w = solve_triangular(L_SS, h_S - L_b @ w_prev, lower=True)
        return (L_SS, w), (L_SS, L_b, w)

    init = (jnp.eye(n, dtype=dtype), jnp.zeros((n,), dtype))  # no group before the first: J_{0,-1} = 0
    _, (L_diag, L_below, w) = lax.scan(group, init, (J_diag, J_below, h.reshape(groups, n)))
    return BandedPosterior(L_diag, L_below, w, T, D)


def _back_substitute(post: BandedPosterior, v):
    r"""``x = L^{-T} v`` for ``v (M, n)``: one backward scan over the groups; returns ``(T, D)``."""
    above = jnp.concatenate([post.below[1:], jnp.zeros_like(post.below[:1])])  # L_{S+1,S}

    def step(x_next, inp):
        L_SS, L_up, v_S = inp
        x = solve_triangular(L_SS, v_S - L_up.T @ x_next, lower=True, trans="T")
        return x, x

    _, x = lax.scan(step, jnp.zeros_like(v[0]), (post.diag, above, v), reverse=True)
    return x.reshape(-1, post.dim)[: post.num_steps]


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
