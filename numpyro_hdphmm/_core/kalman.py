r"""Linear Gaussian state space models: Kalman filter, RTS smoother, FFBS sampler.

One sequence of a time-varying linear Gaussian state space model with a deterministic presample
state ``x_init`` (D,):

.. math::

    x_0^{\rm pre} &= x_{\rm init}, \\
    x_t &= A_t x_{t-1} + b_t + e_t, \qquad e_t \sim N(0, Q_t), \\
    y_t &= C x_t + d + w_t, \qquad\;\; w_t \sim N(0, R),

for the steps ``t = 0..T-1`` of the arrays (``x_{-1} = x_init``).  The dynamics
``A`` (T, D, D), ``b`` (T, D), ``Q`` (T, D, D) vary with time (entry ``t`` is the transition INTO
step ``t``); the observation model ``C`` (P, D), ``d`` (P,), ``R`` is shared by all steps.  ``R``
is either a full positive definite covariance (P, P) or the variances (P,) of a diagonal one; the
diagonal form takes the information-form update below, whose work per step is D x D instead of
P x P.

Conventions shared by all functions
-----------------------------------
``y`` (T, P), ``obs_mask`` (T, P) bool
    ``obs_mask[t, p] = False`` marks a missing entry; ``y`` may hold anything there (NaN
    included: it never reaches arithmetic).  Dimensions may be missing alone: the update of a
    partially observed step uses exactly the observed dimensions, i.e. it conditions on the
    marginal of the full-``R`` Gaussian over the observed dims (Durbin & Koopman (2012), "Time
    Series Analysis by State Space Methods", Sec. 4.10).  It is implemented without dynamic
    shapes: with the 0/1 mask ``m`` the step uses ``C_t = diag(m) C``, innovation
    ``where(m, y - d - C x, 0)`` and ``R_t = diag(m) R diag(m) + diag(1 - m)``, so each missing
    dim becomes an independent standard normal observed at 0 that carries no information on
    ``x``; its ``-0.5 log(2 pi)`` log-density is left out of the log-likelihood.
``length`` int scalar (may be traced)
    steps ``t >= length`` are padding: they get no observation update but still follow the
    dynamics, so their filtered/smoothed moments are prior predictions and their sampled
    states are prior continuations of the sampled trajectory (draws of steps ``t < length`` are
    exact posterior draws all the same).

All functions are pure JAX, jittable and vmappable (vmap them over sequences), and run one
``lax.scan`` per pass over time.

Numerics
--------
Every covariance is kept in a form that is positive semi-definite by construction and then
symmetrized: the filter update with a full ``R`` uses the Joseph form
``(I - K C) P (I - K C)^T + K R K^T`` (Bucy & Joseph (1968)); with a diagonal ``R`` it uses the
information form ``P = L G^{-1} L^T`` with ``P^- = L L^T`` and ``G = I + L^T C_t^T R^{-1} C_t L``
(``G``'s eigenvalues are at least 1, so its Cholesky factor is well conditioned; Bierman (1977)
"Factorization Methods for Discrete Sequential Estimation", Ch. 5, for this square-root use of the
information update); the smoother and the backward sampler use the analogous form
``(I - J A) P (I - J A)^T + J Q J^T (+ J P^s J^T)`` instead of the cancelling difference
``P - J P^pred J^T``.  Linear systems with the innovation and predicted covariances go through
their Cholesky factors.  The log-likelihood is the sum (XLA tree reduction) of per-step terms.
This keeps float32 stable on stiff problems (near unit-root dynamics, small noise, long series).

Cost
----
The filter is one sequential ``lax.scan`` (its covariance recursion is sequential).  The smoother
and the backward sampler compute every step's gain ``J_t`` and conditional covariance at once,
batched over the steps (they depend on the filter's output only), so that their sequential scans
carry only the D-dimensional mean recursion.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import cho_solve, solve_triangular

from numpyro_hdphmm._core.linalg import small_matmul

__all__ = [
    "KalmanFiltered",
    "kalman_filter",
    "kalman_smoother",
    "backward_sample",
    "kalman_sample",
    "observation_information",
    "switching_mode_gibbs",
]

_LOG_2PI = math.log(2.0 * math.pi)


class KalmanFiltered(NamedTuple):
    r"""Result of :func:`kalman_filter` (Kalman (1960) predict/update recursion).

    means : (T, D)
        filtered means ``E[x_t | y_{0:t}]``.
    covs : (T, D, D)
        filtered covariances ``Cov[x_t | y_{0:t}]``.
    predicted_means : (T, D)
        one-step predictions ``E[x_t | y_{0:t-1}] = A_t m_{t-1} + b_t``.
    predicted_covs : (T, D, D)
        ``Cov[x_t | y_{0:t-1}] = A_t P_{t-1} A_t^T + Q_t``.
    log_likelihood : ()
        ``log p(observed entries of y_{0:length-1})`` (prediction error decomposition).
    """

    means: jax.Array
    covs: jax.Array
    predicted_means: jax.Array
    predicted_covs: jax.Array
    log_likelihood: jax.Array


# =============================================================================== small helpers


def _sym(m):
    """Exactly symmetric part ``(M + M^T) / 2`` of the last two axes."""
    return 0.5 * (m + jnp.swapaxes(m, -1, -2))


def _float_dtype(*arrays):
    """Common floating dtype of the inputs (at least float32; float32 stays float32)."""
    return jnp.promote_types(jnp.result_type(*arrays), jnp.float32)


def _rts_gain(P, A_next, Ppred_next):
    r"""Smoothing gain ``J = P_t A_{t+1}^T (P^{pred}_{t+1})^{-1}`` (D, D), by a Cholesky solve:
    ``J^T = (P^{pred}_{t+1})^{-1} A_{t+1} P_t`` (both covariances symmetric)."""
    L = jnp.linalg.cholesky(Ppred_next)
    return cho_solve((L, True), small_matmul(A_next, P)).T


def _backward_conditional(m, P, A_next, Q_next, mpred_next, Ppred_next):
    r"""Gain and PSD-form covariance of ``p(x_t | x_{t+1}, y_{0:t})``.

    Returns ``J`` (D, D) and ``(I - J A) P (I - J A)^T + J Q J^T`` (D, D), symmetrized; the
    conditional mean is ``m + J (x_{t+1} - mpred_next)``.
    """
    J = _rts_gain(P, A_next, Ppred_next)
    IJA = jnp.eye(m.shape[-1], dtype=m.dtype) - small_matmul(J, A_next)
    cov = _sym(small_matmul(small_matmul(IJA, P), IJA.T) + small_matmul(small_matmul(J, Q_next), J.T))
    return J, cov


def _backward_conditionals(filtered: KalmanFiltered, A, Q):
    """:func:`_backward_conditional` of every step ``t < T - 1`` at once (batched over the steps):
    ``J`` (T - 1, D, D) and the conditional covariances (T - 1, D, D)."""
    return jax.vmap(_backward_conditional)(filtered.means[:-1], filtered.covs[:-1], A[1:], Q[1:],
                                           filtered.predicted_means[1:], filtered.predicted_covs[1:])


# =============================================================================== filter


def _update_full(mp, Pp, y_t, o, C, d, R, eye_d):
    """Joseph-form update with a full ``R`` (P, P) and the observed dims ``o`` (P,) bool (module
    docstring).  Returns the filtered mean (D,), covariance (D, D) and the step's log-likelihood."""
    dtype = mp.dtype
    of = o.astype(dtype)
    Ct = of[:, None] * C
    Rt = of[:, None] * R * of[None, :] + jnp.diag(1.0 - of)
    v = jnp.where(o, jnp.where(o, y_t, 0.0) - d - C @ mp, 0.0)
    S = _sym(small_matmul(small_matmul(Ct, Pp), Ct.T) + Rt)
    L = jnp.linalg.cholesky(S)
    K = cho_solve((L, True), small_matmul(Ct, Pp)).T  # (D, P) = Pp C_t^T S^{-1}
    mf = mp + K @ v
    IKC = eye_d - small_matmul(K, Ct)
    Pf = _sym(small_matmul(small_matmul(IKC, Pp), IKC.T) + small_matmul(small_matmul(K, Rt), K.T))
    z = solve_triangular(L, v, lower=True)
    ll = -0.5 * (z @ z + jnp.sum(of) * _LOG_2PI) - jnp.sum(jnp.log(jnp.diagonal(L)))
    return mf, Pf, ll


def _update_diagonal(mp, Pp, y_t, o, C, d, r, eye_d):
    r"""Information-form update with a diagonal ``R = diag(r)``, ``r`` (P,), and the observed dims
    ``o`` (P,) bool: D x D work per step.

    With the whitened rows ``C~ = diag(o / sqrt(r)) C`` and innovation
    ``v~ = o (y_t - d - C m^-) / sqrt(r)``, ``J = C~^T C~`` and ``g = C~^T v~``:
    ``P = (P^{-1}_- + J)^{-1} = L G^{-1} L^T`` with ``P^- = L L^T``, ``G = I + L^T J L = U U^T``
    (so ``P = B^T B``, ``B = U^{-1} L^T``), ``m = m^- + P g``; the log-likelihood
    ``-0.5 (v^T S^{-1} v + log det S + n log 2 pi)`` with ``S = C_t P^- C_t^T + R_t`` follows from
    Woodbury's identity, ``v^T S^{-1} v = |v~|^2 - |B g|^2``, and the determinant lemma,
    ``log det S = sum_o log r + 2 sum log diag U``.  Missing dims drop out exactly (the marginal of
    a diagonal Gaussian).  Returns the filtered mean (D,), covariance (D, D) and log-likelihood.
    """
    w = jnp.where(o, lax.rsqrt(r), 0.0)
    Ct = w[:, None] * C
    v = w * jnp.where(o, jnp.where(o, y_t, 0.0) - d - C @ mp, 0.0)  # NaN never reaches arithmetic
    J = small_matmul(Ct.T, Ct)
    g = Ct.T @ v
    L = jnp.linalg.cholesky(Pp)
    U = jnp.linalg.cholesky(_sym(eye_d + small_matmul(small_matmul(L.T, J), L)))
    B = solve_triangular(U, L.T, lower=True)
    Pf = _sym(small_matmul(B.T, B))
    mf = mp + Pf @ g
    Bg = B @ g
    ll = (-0.5 * (v @ v - Bg @ Bg + jnp.sum(jnp.where(o, _LOG_2PI + jnp.log(r), 0.0)))
          - jnp.sum(jnp.log(jnp.diagonal(U))))
    return mf, Pf, ll


def kalman_filter(x_init, A, b, Q, C, d, R, y, obs_mask=None, length=None) -> KalmanFiltered:
    r"""Kalman filter with exact handling of missing entries (Kalman (1960); Joseph-form update
    for a full ``R``, information-form update for a diagonal one).

    Args:
        x_init: (D,) deterministic presample state ``x_{-1}``.
        A: (T, D, D) transition matrices (entry ``t`` maps ``x_{t-1}`` to ``x_t``).
        b: (T, D) transition offsets.
        Q: (T, D, D) state noise covariances (positive definite).
        C: (P, D) observation matrix.
        d: (P,) observation offset.
        R: (P, P) observation noise covariance (full, positive definite), or (P,) the positive
            variances of a diagonal one.
        y: (T, P) observations; entries with ``obs_mask = False`` are ignored (NaN allowed).
        obs_mask: (T, P) bool, True = observed.  Default: ``isfinite(y)``.
        length: int scalar (may be traced); steps ``t >= length`` get no update.  Default ``T``.

    Returns:
        :class:`KalmanFiltered` with ``means`` (T, D), ``covs`` (T, D, D), ``predicted_means``
        (T, D), ``predicted_covs`` (T, D, D), ``log_likelihood`` ().

    Each step predicts ``m^- = A_t m + b_t``, ``P^- = A_t P A_t^T + Q_t``.  With a full ``R`` and
    the masked ``C_t, R_t`` (module docstring) it forms the innovation ``v = y_t - d - C_t m^-``,
    its covariance ``S = C_t P^- C_t^T + R_t = L L^T`` (Cholesky), the gain
    ``K = P^- C_t^T S^{-1}`` (Cholesky solve), ``m = m^- + K v`` and the Joseph-form covariance
    ``P = (I - K C_t) P^- (I - K C_t)^T + K R_t K^T``; with a diagonal ``R`` the same moments
    come from the information form (:func:`_update_diagonal`).  The log-likelihood is the
    prediction error decomposition ``sum_t -0.5 (v^T S^{-1} v + log det S + n_t log 2 pi)`` over
    the ``n_t`` observed dims of the valid steps.
    """
    dtype = _float_dtype(x_init, A, b, Q, C, d, R, y)
    x_init = jnp.asarray(x_init, dtype)
    A, b, Q = (jnp.asarray(a, dtype) for a in (A, b, Q))
    C, d, R = (jnp.asarray(a, dtype) for a in (C, d, R))
    y = jnp.asarray(y, dtype)
    T, P_dim = y.shape
    D = x_init.shape[-1]
    if obs_mask is None:
        obs_mask = jnp.isfinite(y)
    obs_mask = jnp.asarray(obs_mask, bool)
    length = T if length is None else length
    length = jnp.asarray(length, jnp.int32)
    eye_d = jnp.eye(D, dtype=dtype)
    update = _update_diagonal if R.ndim == 1 else _update_full

    def step(carry, inp):
        m, P = carry
        A_t, b_t, Q_t, y_t, o_t, t = inp
        mp = A_t @ m + b_t
        Pp = _sym(small_matmul(small_matmul(A_t, P), A_t.T) + Q_t)
        mf, Pf, ll = update(mp, Pp, y_t, o_t & (t < length), C, d, R, eye_d)
        return (mf, Pf), (mf, Pf, mp, Pp, ll)

    init = (x_init, jnp.zeros((D, D), dtype))
    xs = (A, b, Q, y, obs_mask, jnp.arange(T, dtype=jnp.int32))
    _, (means, covs, pmeans, pcovs, lls) = lax.scan(step, init, xs)
    return KalmanFiltered(means, covs, pmeans, pcovs, jnp.sum(lls))


# =============================================================================== smoother


def kalman_smoother(filtered: KalmanFiltered, A, b, Q):
    r"""Rauch-Tung-Striebel smoother (Rauch, Tung & Striebel (1965)) from a filter pass.

    Args:
        filtered: :class:`KalmanFiltered` of the same model (T steps).
        A: (T, D, D), b: (T, D), Q: (T, D, D) the dynamics given to :func:`kalman_filter`
            (``b`` enters only through the stored predictions; accepted for symmetry).

    Returns:
        ``(means (T, D), covs (T, D, D))``: ``E[x_t | y]`` and ``Cov[x_t | y]``.

    Backward from ``m^s_{T-1} = m_{T-1}``, ``P^s_{T-1} = P_{T-1}``:
    ``J_t = P_t A_{t+1}^T (P^{pred}_{t+1})^{-1}``,
    ``m^s_t = m_t + J_t (m^s_{t+1} - m^{pred}_{t+1})``,
    ``P^s_t = (I - J_t A_{t+1}) P_t (I - J_t A_{t+1})^T + J_t Q_{t+1} J_t^T + J_t P^s_{t+1} J_t^T``
    (equal to the textbook ``P_t + J_t (P^s_{t+1} - P^{pred}_{t+1}) J_t^T`` but PSD by
    construction).
    """
    del b  # the offsets enter through filtered.predicted_means
    means, covs = filtered.means, filtered.covs
    dtype = means.dtype
    A = jnp.asarray(A, dtype)
    Q = jnp.asarray(Q, dtype)
    J, cond_cov = _backward_conditionals(filtered, A, Q)

    def step(carry, inp):
        ms_next, Ps_next = carry
        m, J_t, cov_t, mp_n = inp
        ms = m + J_t @ (ms_next - mp_n)
        Ps = _sym(cov_t + small_matmul(small_matmul(J_t, Ps_next), J_t.T))
        return (ms, Ps), (ms, Ps)

    xs = (means[:-1], J, cond_cov, filtered.predicted_means[1:])
    _, (ms, Ps) = lax.scan(step, (means[-1], covs[-1]), xs, reverse=True)
    return (jnp.concatenate([ms, means[-1:]], axis=0),
            jnp.concatenate([Ps, covs[-1:]], axis=0))


# =============================================================================== sampling


def backward_sample(rng_key, filtered: KalmanFiltered, A, b, Q):
    r"""One draw of ``x_{0:T-1}`` from the smoothing posterior by backward sampling
    (Carter & Kohn (1994) / Fruhwirth-Schnatter (1994) forward-filtering backward-sampling).

    Args:
        rng_key: PRNG key.
        filtered: :class:`KalmanFiltered` of the same model (T steps).
        A: (T, D, D), b: (T, D), Q: (T, D, D) the dynamics given to :func:`kalman_filter`
            (``b`` enters only through the stored predictions; accepted for symmetry).

    Returns:
        ``x`` (T, D).

    Draws ``x_{T-1} ~ N(m_{T-1}, P_{T-1})`` (the last step of the full array: padding steps are
    part of the model), then backward
    ``x_t | x_{t+1}, y_{0:t} ~ N(m_t + J_t (x_{t+1} - A_{t+1} m_t - b_{t+1}),
    (I - J_t A_{t+1}) P_t (I - J_t A_{t+1})^T + J_t Q_{t+1} J_t^T)`` with
    ``J_t = P_t A_{t+1}^T (P^{pred}_{t+1})^{-1}``, each via the Cholesky factor of the
    (symmetrized) covariance and pre-drawn standard normals.
    """
    del b  # A_{t+1} m_t + b_{t+1} is filtered.predicted_means[t + 1]
    means, covs = filtered.means, filtered.covs
    dtype = means.dtype
    A = jnp.asarray(A, dtype)
    Q = jnp.asarray(Q, dtype)
    eps = jax.random.normal(rng_key, means.shape, dtype)
    J, cond_cov = _backward_conditionals(filtered, A, Q)
    # x_t = J_t x_{t+1} + c_t with c_t = m_t - J_t m^pred_{t+1} + chol(cond_cov_t) eps_t
    c = (means[:-1] - jnp.einsum("tij,tj->ti", J, filtered.predicted_means[1:])
         + jnp.einsum("tij,tj->ti", jnp.linalg.cholesky(cond_cov), eps[:-1]))
    x_last = means[-1] + jnp.linalg.cholesky(covs[-1]) @ eps[-1]

    def step(x_next, inp):
        J_t, c_t = inp
        x = J_t @ x_next + c_t
        return x, x

    _, x = lax.scan(step, x_last, (J, c), reverse=True)
    return jnp.concatenate([x, x_last[None]], axis=0)


def kalman_sample(rng_key, x_init, A, b, Q, C, d, R, y, obs_mask=None, length=None):
    r"""Forward-filtering backward-sampling in one call (Carter & Kohn (1994) /
    Fruhwirth-Schnatter (1994)): :func:`kalman_filter` then :func:`backward_sample`.

    Args: as :func:`kalman_filter`, plus ``rng_key``.

    Returns:
        ``(x (T, D), log_likelihood ())``: one posterior draw of the states and
        ``log p(observed y)``.
    """
    filtered = kalman_filter(x_init, A, b, Q, C, d, R, y, obs_mask, length)
    return backward_sample(rng_key, filtered, A, b, Q), filtered.log_likelihood


# =============================================================================== information form


def observation_information(C, d, R, y, obs_mask, valid):
    r"""The observations' terms of the latent states' log density in information form:
    ``(C_t^T R_t^{-1} C_t (T, D, D), C_t^T R_t^{-1} (y_t - d) (T, D))`` with the masked ``C_t,
    R_t`` of the module docstring (exactly the observed dimensions of the ``valid (T,)`` steps;
    zero elsewhere), from the whitened rows ``R_t^{-1/2} C_t`` (``R`` full ``(P, P)`` or the
    variances ``(P,)``)."""
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


# =============================================================================== switching: modes, x integrated


def _backward_information(info_prec, info_vec, A, b, Q):
    r"""The backward messages ``p(y_{t+1:} | x_t) prop. exp(-x^T Omega_t x / 2 + omega_t^T x)`` of
    every step given the modes (``A, b, Q (T, ...)`` the dynamics INTO each step; ``info_*`` the
    observations' terms, :func:`observation_information`): ``(Omega (T, D, D), omega (T, D))``,
    ``Omega_{T-1} = 0``.  Through the dynamics into ``t + 1`` (``L L^T = Q_{t+1}``,
    ``G = L^T Omega~ L`` with ``Omega~ = Omega_{t+1} + C^T R^{-1} C`` at ``t + 1``):
    ``Omega^ = L^{-T} G (I + G)^{-1} L^{-1}`` (``G (I + G)^{-1} = I - (I + G)^{-1}`` has its
    eigenvalues in ``[0, 1)``: no cancellation of large terms), ``omega^ = L^{-T} (I + G)^{-1}
    L^T omega~``, then ``Omega_t = A^T Omega^ A``, ``omega_t = A^T (omega^ - Omega^ b)``."""
    D = info_vec.shape[-1]
    eye = jnp.eye(D, dtype=info_vec.dtype)

    def step(carry, inp):
        Om, om = carry
        H, h, A_n, b_n, Q_n = inp
        Om_t, om_t = Om + H, om + h
        L = jnp.linalg.cholesky(Q_n)
        G = _sym(small_matmul(small_matmul(L.T, Om_t), L))
        U = jnp.linalg.cholesky(eye + G)
        J_inv = cho_solve((U, True), eye)
        L_inv = solve_triangular(L, eye, lower=True)
        Om_hat = _sym(small_matmul(small_matmul(L_inv.T, eye - J_inv), L_inv))
        om_hat = L_inv.T @ (J_inv @ (L.T @ om_t))
        new = (_sym(small_matmul(small_matmul(A_n.T, Om_hat), A_n)), A_n.T @ (om_hat - Om_hat @ b_n))
        return new, new

    zero = (jnp.zeros((D, D), info_vec.dtype), jnp.zeros((D,), info_vec.dtype))
    _, (Om, om) = lax.scan(step, zero, (info_prec[1:], info_vec[1:], A[1:], b[1:], Q[1:]), reverse=True)
    return jnp.concatenate([Om, zero[0][None]]), jnp.concatenate([om, zero[1][None]])


def _log_message_mass(m, P, Om, om, eye_d):
    r"""``log int N(x; m, P) exp(-x^T Om x / 2 + om^T x) dx`` (``P = L L^T``, ``G = I + L^T Om L``):
    ``-log|G| / 2 - m^T Om m / 2 + om^T m + |G^{-1/2} L^T (om - Om m)|^2 / 2``."""
    L = jnp.linalg.cholesky(P)
    U = jnp.linalg.cholesky(_sym(eye_d + small_matmul(small_matmul(L.T, Om), L)))
    u = solve_triangular(U, L.T @ (om - Om @ m), lower=True)
    return -jnp.sum(jnp.log(jnp.diagonal(U))) - 0.5 * m @ (Om @ m) + om @ m + 0.5 * u @ u


def switching_mode_gibbs(rng_key, states, log_init, log_trans, x_init, A, b, Q, C, d, R, y, obs_mask=None,
                         length=None, backward_messages=True):
    r"""One sweep of single-site Gibbs updates of the modes of a switching linear dynamical system
    with the latent path integrated out (Gerlach, Carter & Kohn (2000), "Efficient Bayesian
    inference for dynamic mixture models", JASA 95; the sampler of Fox et al. (2011) for the
    HDP-SLDS, Sec. IV): for ``t = 0, 1, ...``,

    .. math::

        z_t \sim p(z_t \mid z_{-t}, y) \propto \pi(z_t \mid z_{t-1})\, \pi(z_{t+1} \mid z_t)\,
        p(y_t \mid y_{<t}, z_{\le t}) \int p(x_t \mid y_{\le t}, z_{\le t})\,
        p(y_{>t} \mid x_t, z_{>t})\, dx_t,

    the middle factor from the Kalman filter of the new modes ``z_{<t}`` (one update per candidate
    ``k``), the last from the backward information messages of the current ``z_{>t}``
    (:func:`_backward_information`, one pass before the sweep): ``O(T K D^3)``.

    Args:
        rng_key: PRNG key.
        states: (T,) int the current modes.
        log_init: (K,) start row, log_trans: (K, K) rows (log; sub-stochastic allowed).
        x_init: (D,) presample state.  A: (K, D, D), b: (K, D), Q: (K, D, D) per mode.
        C, d, R, y, obs_mask, length: the observation model and data (:func:`kalman_filter`).
        backward_messages: ``False`` drops the future observations' factor (a deliberately wrong
            sampler for the tests' negative controls).

    Returns:
        (T,) int32 new modes (steps ``t >= length`` unchanged).
    """
    dtype = _float_dtype(x_init, A, b, Q, C, d, R, y)
    A, b, Q, C, d, R = (jnp.asarray(a, dtype) for a in (A, b, Q, C, d, R))
    y = jnp.asarray(y, dtype)
    T, D = y.shape[0], A.shape[-1]
    obs_mask = jnp.isfinite(y) if obs_mask is None else jnp.asarray(obs_mask, bool)
    length = jnp.asarray(T if length is None else length, jnp.int32)
    t_idx = jnp.arange(T, dtype=jnp.int32)
    states = jnp.asarray(states, jnp.int32)
    H, h = observation_information(C, d, R, y, obs_mask, t_idx < length)
    Om, om = _backward_information(H, h, A[states], b[states], Q[states])
    if not backward_messages:
        Om, om = jnp.zeros_like(Om), jnp.zeros_like(om)
    update = _update_diagonal if R.ndim == 1 else _update_full
    eye_d = jnp.eye(D, dtype=dtype)
    gumbel = jax.random.gumbel(rng_key, (T, A.shape[0]), dtype)
    nxt = jnp.concatenate([states[1:], jnp.zeros((1,), jnp.int32)])

    def candidate(m, P, y_t, o_t, Om_t, om_t, A_k, b_k, Q_k):
        mp = A_k @ m + b_k
        Pp = _sym(small_matmul(small_matmul(A_k, P), A_k.T) + Q_k)
        mf, Pf, ll = update(mp, Pp, y_t, o_t, C, d, R, eye_d)
        return mf, Pf, ll + _log_message_mass(mf, Pf, Om_t, om_t, eye_d)

    def step(carry, inp):
        m, P, prev = carry
        t, y_t, o_t, Om_t, om_t, z_old, z_next, g = inp
        inside = t < length
        mf, Pf, score = jax.vmap(candidate, in_axes=(None, None, None, None, None, None, 0, 0, 0))(
            m, P, y_t, o_t & inside, Om_t, om_t, A, b, Q)
        into = jnp.where(t == 0, log_init, log_trans[prev])
        out = jnp.where(t + 1 < length, log_trans[:, z_next], 0.0)
        k = jnp.where(inside, jnp.argmax(into + out + score + g), z_old).astype(jnp.int32)
        return (mf[k], Pf[k], k), k

    init = (jnp.asarray(x_init, dtype), jnp.zeros((D, D), dtype), jnp.zeros((), jnp.int32))
    _, new = lax.scan(step, init, (t_idx, y, obs_mask, Om, om, states, nxt, gumbel))
    return new
