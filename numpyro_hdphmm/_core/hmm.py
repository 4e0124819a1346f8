r"""Hidden Markov model message passing: filtering, smoothing, sampling, Viterbi.

Every sampler and variational routine in the package goes through these functions.  All inputs
are in LOG space and need not be normalized: the routines implement the general log-space
sum-product (and max-product) recursions for

.. math::

    p(y_{0:T-1}, z_{0:T-1}) \propto \pi(z_0)\, e_0(z_0) \prod_{t=1}^{T-1} A_t(z_{t-1}, z_t)\, e_t(z_t),

with ``log pi = log_initial_probs`` (K,), ``log A_t = log_transition_matrix`` ((K, K), or
(T, K, K) when time-varying; entry ``t`` is the transition INTO step ``t``, entry 0 is unused),
``log e_t = log_likelihoods[t]`` (T, K).  Rows of ``A_t`` and ``pi`` need not sum to one
(sub-stochastic rows, 0/1 indicator matrices as in the beam sampler, ``-inf`` entries are all
fine); the "marginal log-likelihood" is then the log of the total mass
``sum_z pi(z_0) e_0(z_0) prod_t A_t e_t``.

Conventions shared by all functions
-----------------------------------
``mask`` (T,) bool
    ``mask[t] = False`` marks a missing observation: the emission term ``e_t`` is dropped (the
    transition into step ``t`` is still applied).
``length`` int scalar (may be traced)
    steps ``t >= length`` are padding and contribute nothing at all: no transition, no
    emission.  Filtered/smoothed marginals of padded steps copy those of step ``length - 1``;
    sampled and Viterbi states of padded steps copy the last valid state.
``method``
    ``"sequential"`` (one ``lax.scan`` per pass, O(T K^2) work, the fast choice on CPU),
    ``"parallel"`` (``lax.associative_scan`` over K x K log-space matrices, O(T K^3) work but
    O(log T) depth, for GPUs/TPUs; Sarkka & Garcia-Fernandez (2021), "Temporal parallelization
    of inference in hidden Markov models", IEEE TSP 69) or ``"auto"`` (parallel on an
    accelerator when T is large, sequential otherwise).
Batching
    every function also accepts ``log_likelihoods`` with leading batch dimensions
    ``(*B, T, K)``; then ``mask`` may be ``(*B, T)`` or ``(T,)``, ``length`` ``(*B,)`` or a
    scalar, ``log_initial_probs`` ``(*B, K)`` or ``(K,)`` and ``log_transition_matrix``
    ``(*B, K, K)``, ``(*B, T, K, K)``, ``(K, K)`` or ``(T, K, K)``.  Leading dimensions of
    ``log_transition_matrix`` are matched against ``B`` first (so with ``B = (N,)`` and
    ``N == T`` a 3-d matrix is read as batched ``(N, K, K)``).  Sampling functions split
    ``rng_key`` into one key per sequence.  All functions are jittable and vmappable.

Numerics
--------
The sequential forward pass works in rescaled probability space: ``exp`` of the row-scaled
transition matrix ``At_ij = exp(log A_ij - r_i)``, ``r_i = max_j log A_ij``, is computed once
outside the scan; each step forms ``w = exp(log f_{t-1} + r - c)`` (``c`` its max), one
matrix-vector product ``w @ At``, and combines the result with the emissions in LOG space
before normalizing.  Emission log-likelihood spreads of any size (e.g. ``1e4``) are therefore
exact.  The only approximation is that, within one step, transition probabilities smaller than
``~1e-38`` (float32; ``~1e-308`` in float64) times the row maximum and times the largest
filtered probability are flushed to zero.  The marginal log-likelihood is the pairwise
(tree) sum of the per-step normalizers, accurate to ``O(log2(T) eps)`` relative error, which
keeps float32 accurate at ``T = 10^6``.

Sampling
--------
With a fixed transition matrix over 9 to 16 states the sequential FFBS runs from both ends
at once (:func:`_ffbs_two_way`): forward filtering to the midpoint and backward messages from
the end share one loop of ``T/2`` iterations, the midpoint state is drawn from their product,
and the two halves are drawn outwards from it.  The draws have the FFBS's law exactly (the chain
rule of the posterior, from the midpoint); on XLA:CPU, whose loop iterations cost mostly a fixed
amount, the FFBS takes about three quarters of the one-way time there.  Smaller, larger or
time-varying transition matrices use the one-way pass.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_hdphmm._core.random import categorical
from numpyro_hdphmm._core.reduce import block_max, block_sum, pad_states, padded_size
from numpyro_hdphmm._core.validation import check_integer, check_ndim

__all__ = [
    "HMMFilter",
    "HMMPosterior",
    "hmm_filter",
    "hmm_backward_sample",
    "hmm_posterior_sample",
    "hmm_posterior_sample_fast",
    "hmm_smoother",
    "hmm_smoother_fast",
    "HMMSmootherFast",
    "hmm_viterbi",
    "hmm_marginal_loglik",
]

_METHODS = ("auto", "sequential", "parallel")


class HMMFilter(NamedTuple):
    r"""Result of :func:`hmm_filter` (forward pass; Rabiner (1989) eqs. 19-20, scaled as in
    his Sec. V.A).

    log_filtered : (..., T, K)
        ``log p(z_t = k | y_{0:t})`` (normalized over ``k``); the alpha recursion
        ``alpha_t(j) = e_t(j) sum_i alpha_{t-1}(i) A_t(i, j)``, ``alpha_0 = pi * e_0``, divided
        by ``alpha_t``'s sum at every step.
    log_normalizers : (..., T)
        ``log p(y_t | y_{0:t-1}) = log sum_j alpha_t(j) / sum_i alpha_{t-1}(i)`` (0 for padded
        steps).
    marginal_loglik : (...)
        ``log p(y_{0:T-1}) = sum_t log_normalizers[t]`` (pairwise summation).
    """

    log_filtered: jax.Array
    log_normalizers: jax.Array
    marginal_loglik: jax.Array


class HMMPosterior(NamedTuple):
    r"""Result of :func:`hmm_smoother` (forward-backward; Rabiner (1989) eqs. 24-27, 37-38).

    log_smoothed : (..., T, K)
        ``log p(z_t = k | y_{0:T-1}) = log alpha_t(k) + log beta_t(k) - const`` with the backward
        recursion ``beta_t(i) = sum_j A_{t+1}(i, j) e_{t+1}(j) beta_{t+1}(j)``, ``beta_{T-1} = 1``.
    marginal_loglik : (...)
        ``log p(y_{0:T-1})``.
    expected_transition_counts : (..., K, K)
        ``sum_{t=1}^{T-1} p(z_{t-1} = i, z_t = j | y)`` with
        ``xi_t(i, j) prop. to alpha_{t-1}(i) A_t(i, j) e_t(j) beta_t(j)`` (Rabiner eq. 37), summed
        over valid steps only.
    """

    log_smoothed: jax.Array
    marginal_loglik: jax.Array
    expected_transition_counts: jax.Array


# =============================================================================== small helpers


def _finite_or_zero(x):
    return jnp.where(jnp.isfinite(x), x, jnp.zeros_like(x))


def _normalize_log(x, axis=-1):
    """``x - logsumexp(x)`` along ``axis`` and the log-sum-exp (all ``-inf`` rows stay ``-inf``)."""
    m = _finite_or_zero(jnp.max(x, axis=axis, keepdims=True))
    lse = jnp.log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)) + m
    return x - _finite_or_zero(lse), jnp.squeeze(lse, axis)


def _pairwise_sum(x):
    """Sum over the last axis by pairwise (tree) summation: error ``O(log2(n) eps sum|x|)``."""
    n = x.shape[-1]
    if n == 0:
        return jnp.zeros(x.shape[:-1], x.dtype)
    # first level: blocks of 8 summed directly (negligible error), then halving.
    while n > 1:
        if n % 2:
            x = jnp.concatenate([x, jnp.zeros(x.shape[:-1] + (1,), x.dtype)], axis=-1)
            n += 1
        x = x[..., 0::2] + x[..., 1::2]
        n //= 2
    return x[..., 0]


def _row_scaled(log_a):
    """``(At, r)`` with ``At = exp(log_a - r[..., None])``, ``r = max_j log_a[..., i, j]``.

    ``r`` keeps ``-inf`` for all-``-inf`` rows (whose ``At`` row is then 0).
    """
    r = jnp.max(log_a, axis=-1)
    return jnp.exp(log_a - _finite_or_zero(r)[..., None]), r


def _log_matmul(a, b):
    """Log-space matrix product ``log(exp(a) @ exp(b))`` over the last two axes (batched).

    Stable through the usual row-max of ``a`` / column-max of ``b`` shifts.
    """
    am = _finite_or_zero(jnp.max(a, axis=-1, keepdims=True))
    bm = _finite_or_zero(jnp.max(b, axis=-2, keepdims=True))
    c = jnp.matmul(jnp.exp(a - am), jnp.exp(b - bm))
    return jnp.log(c) + am + bm


def _resolve_method(method, T, K):
    if method not in _METHODS:
        raise ValueError(f"`method` must be one of {_METHODS}, got {method!r}.")
    if method != "auto":
        return method
    backend = jax.default_backend()
    # the parallel backward sampler materializes T*K*K tables; keep those bounded.
    if backend != "cpu" and T >= 256 and T * K * K <= 2.5e8:
        return "parallel"
    return "sequential"


def _unroll(K):
    # measured on XLA:CPU: unrolling the scans does not pay off (it splits fusions).
    return 1


def _vecmat(a, m):
    """``a @ m`` for ``a (K,)``, ``m (K, K)``; for small K as a fused multiply-and-reduce,
    which XLA:CPU runs faster than a dot call inside a loop."""
    if a.shape[-1] <= 16:
        return jnp.sum(a[:, None] * m, axis=0)
    return a @ m


# =============================================================================== single sequence


class _Prepared(NamedTuple):
    log_init: jax.Array  # (K,)
    log_a: jax.Array  # (K, K) or (T, K, K)
    lem: jax.Array  # (T, K) masked emissions (0 where missing or padded)
    valid: jax.Array  # (T,) bool: t < length
    length: jax.Array  # () int32


def _prepare(log_init, log_a, ll, mask, length):
    T = ll.shape[0]
    steps = jnp.arange(T)
    length = jnp.asarray(T if length is None else length, jnp.int32)
    valid = steps < length
    keep = valid if mask is None else (valid & mask.astype(bool))
    lem = jnp.where(keep[:, None], ll, jnp.zeros_like(ll))
    return _Prepared(log_init, log_a, lem, valid, length)


def _underflow_threshold(dtype):
    return float(np.sqrt(np.finfo(dtype).tiny))


def _forward_sequential_fast(p: _Prepared):
    """Rescaled probability-space forward pass (Rabiner (1989) Sec. V.A).

    ``a_t = (a_{t-1} @ At_t) * E_t / c_t`` with ``At = exp(log A - max log A)`` and
    ``E_t = exp(log e_t - max_k log e_t(k))`` precomputed outside the scan, ``c_t`` the sum of
    the unnormalized vector, so ``log p(y_t | y_{0:t-1}) = log c_t + max log e_t + max log A``.
    Returns ``(probs (T, K), log_normalizers (T,), ok)``; ``ok`` is False when some ``c_t``
    fell below ``sqrt(tiny)`` (emission mass concentrated where the predicted mass has
    underflowed), in which case the result is not trusted and the log-space pass is used.
    """
    T, K = p.lem.shape
    time_varying = p.log_a.ndim == 3
    if time_varying:
        g = _finite_or_zero(jnp.max(p.log_a, axis=(-2, -1)))
        at = jnp.exp(p.log_a - g[:, None, None])
    else:
        g = _finite_or_zero(jnp.max(p.log_a))
        at = jnp.exp(p.log_a - g)
    m = _finite_or_zero(jnp.max(p.lem, axis=-1))
    em = jnp.exp(p.lem - m[:, None])
    mi = _finite_or_zero(jnp.max(p.log_init))
    b0 = jnp.exp(p.log_init - mi) * em[0]
    c0 = jnp.sum(b0)
    a0 = b0 / c0
    # zero-padded extra states (never reachable) make the per-step loops faster
    K8 = padded_size(K)
    em_pad = pad_states(em, K8, (-1,))
    at_pad = pad_states(at, K8, (-2, -1))
    a0_pad = pad_states(a0, K8, (-1,))

    def _step(a_prev, inp):
        # alpha_t(j) = e_t(j) * sum_i alpha_{t-1}(i) A_t(i, j)      (Rabiner eq. 20)
        if time_varying:
            e_t, valid_t, at_t = inp
        else:
            e_t, valid_t = inp
            at_t = at_pad
        b = _vecmat(a_prev, at_t) * e_t
        c = block_sum(b)
        a = jnp.where(valid_t, b / c, a_prev)
        return a, (a, c)

    xs = (em_pad[1:], p.valid[1:])
    if time_varying:
        xs = xs + (at_pad[1:],)
    _, (probs, cs) = lax.scan(_step, a0_pad, xs, unroll=_unroll(K))
    probs = jnp.concatenate([a0[None], probs[:, :K]], axis=0)
    cs = jnp.concatenate([c0[None], cs])
    g_t = g if not time_varying else jnp.concatenate([jnp.zeros((1,), g.dtype), g[1:]])
    offset = m + g_t + jnp.where(jnp.arange(T) == 0, mi - g_t, 0.0)
    ok = jnp.all(~p.valid | (cs >= _underflow_threshold(p.lem.dtype)))
    lz = jnp.where(p.valid, jnp.log(cs) + offset, jnp.zeros_like(cs))
    # length == 0: step 0 is padding and its filtered marginal is pi alone
    probs = probs.at[0].set(jnp.where(p.valid[0], a0, jnp.exp(p.log_init - mi) / jnp.sum(
        jnp.exp(p.log_init - mi))))
    return probs, lz, ok


def _two_way(log_a, num_states: int) -> bool:
    """Whether :func:`_ffbs_two_way` applies: a fixed transition matrix over 9 to 16 states, where
    it was measured faster on XLA:CPU (``docs/benchmarks.md``, "Two-way FFBS").  Up to 8 states
    one lane's step is already cheap, and above 16 the two-lane step costs more than two one-lane
    steps, so the one-way pass is kept there."""
    return log_a.ndim == 2 and 8 < padded_size(num_states) <= 16


def _ffbs_two_way(key, p: _Prepared):
    r"""Forward filtering, backward sampling run from both ends of the sequence at once.

    With ``L = length`` and the midpoint ``m = (L - 1) // 2``, one loop of ``~T/2`` iterations
    carries two lanes: the forward recursion ``alpha_t = e_t * (alpha_{t-1} @ A)`` for
    ``t = 1..m`` (Rabiner (1989) eq. 20) and the emission-weighted backward recursion
    ``w_t = e_t * (A @ w_{t+1})``, ``w_{L-1} = e_{L-1}`` for ``t = L-2..m+1`` (``w_t = e_t
    beta_t``, Rabiner eq. 25), each normalized to sum one at every step.  Then, exactly by the
    chain rule of the posterior,

    * ``z_m ~ alpha_m(i) beta_m(i)`` with ``beta_m = A @ w_{m+1}`` (``1`` when ``L = 1``);
    * ``z_t | z_{t+1} ~ alpha_t(i) A(i, z_{t+1})`` for ``t = m-1..0`` (Chib (1996));
    * ``z_t | z_{t-1} ~ A(z_{t-1}, j) w_t(j)`` for ``t = m+1..L-1``,

    each side a loop of ``~T/2`` draws.  The filtering loop is half as long as the one-way
    FFBS's and XLA:CPU's cost per iteration is mostly fixed, so at ``8 < K <= 16`` the FFBS takes
    about three quarters of the time (``docs/benchmarks.md``, "Two-way FFBS").
    ``log p(y) = log sum(alpha_m beta_m)`` plus the per-step normalizers of both lanes (pairwise
    sum).  The same uniform ``v_t`` draws step
    ``t``.  Returns ``(states (T,), marginal_loglik (), ok ())``; ``ok`` is False when a step's
    normalizer fell below ``sqrt(tiny)`` (as in :func:`_forward_sequential_fast`).
    """
    T, K = p.lem.shape
    dtype = p.lem.dtype
    last = p.length - 1
    mid = jnp.maximum(last // 2, 0)
    two = p.length >= 2
    g = _finite_or_zero(jnp.max(p.log_a))
    m = _finite_or_zero(jnp.max(p.lem, axis=-1))
    mi = _finite_or_zero(jnp.max(p.log_init))
    K8 = padded_size(K)
    at = pad_states(jnp.exp(p.log_a - g), K8, (-2, -1))
    mats = jnp.stack([at, at.T])  # lane 0: x @ A; lane 1: x @ A^T = A @ x
    last_c = jnp.clip(last, 0, T - 1)
    b0 = pad_states(jnp.exp(p.log_init - mi + p.lem[0] - m[0]), K8, (-1,))
    c0 = block_sum(b0)
    w0 = pad_states(jnp.exp(p.lem[last_c] - m[last_c]), K8, (-1,))
    d0 = block_sum(w0)
    N = max(T // 2, 1)
    i = jnp.arange(N)
    t_lane = jnp.stack([jnp.minimum(i + 1, T - 1), jnp.clip(last - 1 - i, 0, T - 1)], 1)  # (N, 2)
    active = jnp.stack([i + 1 <= mid, last - 1 - i >= mid + 1], 1)  # (N, 2)

    def _pass(x_prev, inp):
        e_t, active_t = inp
        y = jnp.sum(x_prev[:, :, None] * mats, axis=1) * e_t
        c = jnp.sum(y, -1)
        x = jnp.where(active_t[:, None], y / c[:, None], x_prev)
        return x, (x, c)

    e_rows = pad_states(jnp.exp(p.lem[t_lane] - m[t_lane][..., None]), K8, (-1,))  # (N, 2, K8)
    x_end, (xs, cs) = lax.scan(_pass, jnp.stack([b0 / c0, w0 / d0]), (e_rows, active))
    beta_mid = jnp.where(two, at @ x_end[1], jnp.ones((K8,), dtype))
    w_mid = x_end[0] * beta_mid
    s = block_sum(w_mid)
    cs = jnp.where(active, cs, 1.0)
    threshold = _underflow_threshold(dtype)
    valid = p.length > 0
    ok = ~valid | ((c0 >= threshold) & (~two | (d0 >= threshold)) & jnp.all(cs >= threshold) & (s >= threshold))
    terms = jnp.concatenate([
        jnp.where(active, jnp.log(cs) + m[t_lane] + g, 0.0).reshape(-1),
        jnp.stack([jnp.log(c0) + mi + m[0], jnp.where(two, jnp.log(d0) + m[last_c] + g, 0.0), jnp.log(s)]),
    ])
    loglik = jnp.where(valid, _pairwise_sum(terms), 0.0)

    v = 1.0 - jax.random.uniform(key, (T,), dtype=dtype)  # in (0, 1]
    z_mid = categorical(w_mid, v[jnp.clip(mid, 0, T - 1)])
    alphas = jnp.concatenate([b0[None] / c0, xs[:, 0]], 0)  # alphas[t] = alpha_t for t <= m
    ws = jnp.concatenate([w0[None] / d0, xs[:, 1]], 0)  # ws[k] = w_{L-1-k} for L-1-k >= m+1
    back, ahead = mid - 1 - i, mid + 1 + i  # the steps each side draws

    def _draws(matrix, rows, us, on):
        # z_t ~ rows[t] * matrix[z_{t -/+ 1}]; a scan of its own per side: under vmap (chains) two
        # draws per iteration of one loop run slower than the two loops (measured)
        def _draw(z_prev, inp):
            row, u, on_t = inp
            z = jnp.where(on_t, categorical(row * matrix[z_prev], u), z_prev)
            return z, z

        return lax.scan(_draw, z_mid, (rows, us, on))[1]

    z_back = _draws(mats[1], alphas[jnp.clip(back, 0, N)], v[jnp.clip(back, 0, T - 1)], back >= 0)
    z_ahead = _draws(at, ws[jnp.clip(last - ahead, 0, N)], v[jnp.clip(ahead, 0, T - 1)], ahead <= last)
    ts = jnp.arange(T)
    states = jnp.where(ts < mid, z_back[jnp.clip(mid - 1 - ts, 0, N - 1)],
                       jnp.where(ts == mid, z_mid, z_ahead[jnp.clip(ts - mid - 1, 0, N - 1)]))
    states = jnp.where(ts <= last, states, states[last_c])  # padded steps copy the last valid state
    return jnp.where(valid, states, 0), loglik, ok


def _forward_sequential_robust(p: _Prepared):
    """Exact log-space forward pass, used when the rescaled pass underflows.

    ``log alpha_t(j) = logsumexp_i(log f_{t-1}(i) + log A_t(i, j)) + log e_t(j)``: no quantity
    is ever exponentiated outside a max-shifted log-sum-exp, so arbitrarily small transition
    probabilities and arbitrarily large emission spreads are handled.  Costs ``K^2``
    exponentials per step (it is the fallback, not the fast path).
    """
    time_varying = p.log_a.ndim == 3
    lf0, lz0 = _normalize_log(p.log_init + p.lem[0])
    lz0 = jnp.where(p.valid[0], lz0, jnp.zeros_like(lz0))
    K = p.lem.shape[-1]

    def _step(lf_prev, inp):
        if time_varying:
            lem_t, valid_t, log_a_t = inp
        else:
            lem_t, valid_t = inp
            log_a_t = p.log_a
        lf, lz = _normalize_log(jax.nn.logsumexp(lf_prev[:, None] + log_a_t, axis=0) + lem_t)
        lf = jnp.where(valid_t, lf, lf_prev)
        lz = jnp.where(valid_t, lz, jnp.zeros_like(lz))
        return lf, (lf, lz)

    xs = (p.lem[1:], p.valid[1:])
    if time_varying:
        xs = xs + (p.log_a[1:],)
    _, (lfs, lzs) = lax.scan(_step, lf0, xs, unroll=_unroll(K))
    log_filtered = jnp.concatenate([lf0[None], lfs], axis=0)
    log_normalizers = jnp.concatenate([lz0[None], lzs], axis=0)
    return log_filtered, log_normalizers


def _forward_sequential(p: _Prepared):
    """Returns ``(log_filtered (T, K), log_normalizers (T,), filtered probs (T, K), ok)``;
    ``ok`` False means the exact log-space fallback was used."""
    probs, lz, ok = _forward_sequential_fast(p)

    def _fast():
        return jnp.log(probs), lz, probs

    def _robust():
        lf, lz_r = _forward_sequential_robust(p)
        return lf, lz_r, jnp.exp(lf)

    return lax.cond(ok, _fast, _robust) + (ok,)


def _forward_elements(p: _Prepared):
    """Associative-scan elements ``E_t (T, K, K)`` (log space) of the forward pass.

    ``E_0[i, j] = log pi(j) + log e_0(j)`` (all rows equal), ``E_t = log A_t + log e_t[None]``
    for valid ``t >= 1``, the log identity for padded steps, so that row 0 of
    ``E_0 o E_1 o ... o E_t`` (log-space matrix product) is ``log alpha_t`` up to a constant.
    """
    T, K = p.lem.shape
    dtype = p.lem.dtype
    log_a = jnp.broadcast_to(p.log_a, (T, K, K)) if p.log_a.ndim == 2 else p.log_a
    elems = log_a + p.lem[:, None, :]
    log_eye = jnp.where(jnp.eye(K, dtype=bool), jnp.zeros((), dtype), -jnp.inf).astype(dtype)
    elems = jnp.where(p.valid[:, None, None], elems, log_eye)
    first = jnp.broadcast_to(p.log_init + p.lem[0], (K, K))
    return elems.at[0].set(first)


def _compose_normalized(a, b):
    c = _log_matmul(a, b)
    return c - _finite_or_zero(jnp.max(c, axis=(-2, -1), keepdims=True))


def _step_normalizers(p: _Prepared, log_filtered):
    """``log p(y_t | y_{0:t-1})`` for every step from the filtered marginals (vectorized)."""
    log_a = p.log_a if p.log_a.ndim == 2 else p.log_a[1:]
    # log predictive p(z_t = j | y_{0:t-1}) up to the row sums of A:
    pred = _log_matmul(log_filtered[:-1, None, :], log_a)[:, 0, :]
    lz = jax.nn.logsumexp(pred + p.lem[1:], axis=-1)
    lz0 = jax.nn.logsumexp(p.log_init + p.lem[0])
    lz = jnp.concatenate([lz0[None], lz])
    return jnp.where(p.valid, lz, jnp.zeros_like(lz))


def _forward_parallel(p: _Prepared):
    elems = _forward_elements(p)
    prefix = lax.associative_scan(_compose_normalized, elems)
    log_filtered, _ = _normalize_log(prefix[:, 0, :])
    return log_filtered, _step_normalizers(p, log_filtered)


def _filter_single(p: _Prepared, method):
    fwd = _forward_sequential if method == "sequential" else _forward_parallel
    log_filtered, log_normalizers = fwd(p)[:2]
    return HMMFilter(log_filtered, log_normalizers, _pairwise_sum(log_normalizers))


def _backward_sample_sequential(key, probs, log_a, length):
    """``z_{L-1} ~ f_{L-1}``, ``z_t | z_{t+1} ~ f_t(i) A_{t+1}(i, z_{t+1})`` (Fruhwirth-Schnatter
    (2006) Sec. 11.5; Chib (1996)).

    ``probs (T, K)`` are the filtered probabilities (any positive scale per row).  The
    transposed, column-max-scaled transition ``exp(log A[:, j] - max_i log A[i, j])`` is
    computed once; all uniforms are drawn at once; each step is one inverse-CDF draw.
    """
    T, K = probs.shape
    time_varying = log_a.ndim == 3
    v = 1.0 - jax.random.uniform(key, (T,), dtype=probs.dtype)  # in (0, 1]
    last = length - 1
    log_at = jnp.swapaxes(log_a, -1, -2)
    at_t = jnp.exp(log_at - _finite_or_zero(jnp.max(log_at, axis=-1, keepdims=True)))
    K8 = padded_size(K)  # zero-weight padding states are never drawn
    probs = pad_states(probs, K8, (-1,))
    at_t = pad_states(at_t, K8, (-1,))
    one = jnp.ones((K8,), probs.dtype)

    def _step(z_next, inp):
        t, p_t, v_t = inp
        col = at_t[jnp.minimum(t + 1, T - 1), z_next] if time_varying else at_t[z_next]
        w = p_t * jnp.where(t < last, col, one)
        z = categorical(w, v_t)
        z = jnp.where(t <= last, z, z_next)
        return z, z

    ts = jnp.arange(T)
    _, zs = lax.scan(_step, jnp.zeros((), jnp.int32), (ts, probs, v), reverse=True,
                     unroll=_unroll(K))
    # padded steps copy the last valid state
    z_last = zs[jnp.clip(last, 0, T - 1)]
    return jnp.where(ts <= last, zs, z_last)


def _backward_sample_sequential_log(key, log_filtered, log_a, length):
    """Same draws as :func:`_backward_sample_sequential` with log-space weights
    ``log f_t(i) + log A_{t+1}(i, z_{t+1})`` (max-shifted before exponentiating): exact also when
    the filtered probabilities underflow in probability space."""
    T, K = log_filtered.shape
    time_varying = log_a.ndim == 3
    v = 1.0 - jax.random.uniform(key, (T,), dtype=log_filtered.dtype)
    last = length - 1
    log_at = jnp.swapaxes(log_a, -1, -2)
    zero = jnp.zeros((K,), log_filtered.dtype)

    def _step(z_next, inp):
        t, lf_t, v_t = inp
        col = log_at[jnp.minimum(t + 1, T - 1), z_next] if time_varying else log_at[z_next]
        log_w = lf_t + jnp.where(t < last, col, zero)
        w = jnp.exp(log_w - _finite_or_zero(block_max(log_w)))
        z = categorical(w, v_t)
        z = jnp.where(t <= last, z, z_next)
        return z, z

    ts = jnp.arange(T)
    _, zs = lax.scan(_step, jnp.zeros((), jnp.int32), (ts, log_filtered, v), reverse=True)
    z_last = zs[jnp.clip(last, 0, T - 1)]
    return jnp.where(ts <= last, zs, z_last)


def _backward_sample_parallel(key, log_filtered, log_a, length):
    """Parallel backward sampling: draw, for every ``t`` and every possible next state ``j``,
    ``g_t(j) ~ p(z_t | z_{t+1} = j, y_{0:t})``; then ``z_t = g_t(g_{t+1}(... g_{L-1}))`` is a
    reverse associative scan of index maps composed by gathering."""
    T, K = log_filtered.shape
    last = length - 1
    ts = jnp.arange(T)
    log_a_next = (jnp.broadcast_to(log_a, (T, K, K)) if log_a.ndim == 2
                  else jnp.concatenate([log_a[1:], log_a[-1:]], axis=0))
    # log weights over i for each (t, j): f_t(i) + log A_{t+1}(i, j); step `last` unconditional
    cond = (ts < last)[:, None, None]
    log_w = log_filtered[:, :, None] + jnp.where(cond, log_a_next, jnp.zeros_like(log_a_next))
    u = jax.random.uniform(key, (T, K), dtype=log_filtered.dtype)
    w = jnp.exp(log_w - _finite_or_zero(jnp.max(log_w, axis=1, keepdims=True)))
    # g_t(j): a draw over i of column j, for every (t, j) at once
    maps = jax.vmap(jax.vmap(categorical, in_axes=(1, 0)))(w, 1.0 - u)  # (T, K)
    ident = jnp.broadcast_to(jnp.arange(K, dtype=jnp.int32), (T, K))
    maps = jnp.where((ts <= last)[:, None], maps, ident)

    def _compose(later, earlier):
        # (earlier o later)(j) = earlier[later[j]]
        return jnp.take_along_axis(earlier, later, axis=-1)

    composed = lax.associative_scan(_compose, maps, reverse=True)
    zs = composed[:, 0]
    z_last = zs[jnp.clip(last, 0, T - 1)]
    return jnp.where(ts <= last, zs, z_last)


def _backward_sample_single(key, log_filtered, log_a, length, method):
    T = log_filtered.shape[0]
    length = jnp.asarray(T if length is None else length, jnp.int32)
    if method == "sequential":
        return _backward_sample_sequential_log(key, log_filtered, log_a, length)
    return _backward_sample_parallel(key, log_filtered, log_a, length)


def _backward_messages_sequential(p: _Prepared):
    """Scaled backward recursion ``log beta_t (T, K)`` normalized to max 0 (Rabiner eq. 24)."""
    T, K = p.lem.shape
    time_varying = p.log_a.ndim == 3
    at, r = _row_scaled(p.log_a)
    ts = jnp.arange(T)
    last = p.length - 1
    zero = jnp.zeros((K,), p.lem.dtype)

    def _step(lb_next, inp):
        # beta_t(i) = sum_j A_{t+1}(i, j) e_{t+1}(j) beta_{t+1}(j)
        if time_varying:
            t, lem_next, at_n, r_n = inp
        else:
            t, lem_next = inp
            at_n, r_n = at, r
        v = lem_next + lb_next
        c = _finite_or_zero(jnp.max(v))
        lb = jnp.log(at_n @ jnp.exp(v - c)) + r_n + c
        lb = lb - _finite_or_zero(jnp.max(lb))
        lb = jnp.where(t < last, lb, zero)
        return lb, lb

    xs = (ts[:-1], p.lem[1:])
    if time_varying:
        xs = xs + (at[1:], r[1:])
    _, lbs = lax.scan(_step, zero, xs, reverse=True, unroll=_unroll(K))
    return jnp.concatenate([lbs, zero[None]], axis=0)


def _backward_messages_parallel(p: _Prepared):
    """Same messages by a reverse associative scan: ``beta_t = M_{t+1} o ... o M_{T-1} o 1``."""
    T, K = p.lem.shape
    elems = _forward_elements(p)  # E_t = log A_t + log e_t (t >= 1), identity when padded
    elems = jnp.concatenate([elems[1:], jnp.zeros((1, K, K), elems.dtype)], axis=0)

    def _compose(later, earlier):
        return _compose_normalized(earlier, later)

    suffix = lax.associative_scan(_compose, elems, reverse=True)
    lb = suffix[:, :, 0]
    return lb - _finite_or_zero(jnp.max(lb, axis=-1, keepdims=True))


def _smoother_single(p: _Prepared, method):
    if method == "sequential":
        log_filtered, log_normalizers, _, ok = _forward_sequential(p)
        log_beta = _backward_messages_sequential(p)
    else:
        log_filtered, log_normalizers = _forward_parallel(p)
        log_beta = _backward_messages_parallel(p)
    return _smoothed(p, log_filtered, log_normalizers, log_beta)


def _smoothed(p: _Prepared, log_filtered, log_normalizers, log_beta) -> HMMPosterior:
    """Smoothed marginals and expected transition counts from the forward and backward messages."""
    log_smoothed, _ = _normalize_log(log_filtered + log_beta)
    # expected transition counts: xi_t(i, j) prop. to f_{t-1}(i) A_t(i, j) e_t(j) beta_t(j)
    at, r = _row_scaled(p.log_a)
    r_prev = r if r.ndim == 1 else r[1:]
    s = log_filtered[:-1] + r_prev
    u = jnp.exp(s - _finite_or_zero(jnp.max(s, axis=-1, keepdims=True)))  # (T-1, K)
    v = p.lem[1:] + log_beta[1:]
    v = jnp.exp(v - _finite_or_zero(jnp.max(v, axis=-1, keepdims=True)))  # (T-1, K)
    if at.ndim == 2:
        z = jnp.sum((u @ at) * v, axis=-1)
        weight = jnp.where(p.valid[1:] & (z > 0), 1.0 / jnp.where(z > 0, z, 1.0), 0.0)
        counts = ((u * weight[:, None]).T @ v) * at
    else:
        z = jnp.einsum("ti,tij,tj->t", u, at[1:], v)
        weight = jnp.where(p.valid[1:] & (z > 0), 1.0 / jnp.where(z > 0, z, 1.0), 0.0)
        counts = jnp.einsum("ti,tij,tj->ij", u * weight[:, None], at[1:], v)
    return HMMPosterior(log_smoothed, _pairwise_sum(log_normalizers), counts.astype(p.lem.dtype))


def _viterbi_single(p: _Prepared):
    """Max-product recursion ``delta_t(j) = e_t(j) max_i delta_{t-1}(i) A_t(i, j)`` (Rabiner eqs.
    32-35), renormalized to max 0 each step; ties go to the lowest index."""
    T, K = p.lem.shape
    time_varying = p.log_a.ndim == 3
    d0 = p.log_init + p.lem[0]
    d0 = d0 - _finite_or_zero(jnp.max(d0))
    ident = jnp.arange(K, dtype=jnp.int32)

    def _fwd(delta, inp):
        if time_varying:
            lem_t, valid_t, log_a_t = inp
        else:
            lem_t, valid_t = inp
            log_a_t = p.log_a
        scores = delta[:, None] + log_a_t
        bp = jnp.argmax(scores, axis=0).astype(jnp.int32)
        d = jnp.max(scores, axis=0) + lem_t
        d = d - _finite_or_zero(jnp.max(d))
        d = jnp.where(valid_t, d, delta)
        bp = jnp.where(valid_t, bp, ident)
        return d, bp

    xs = (p.lem[1:], p.valid[1:])
    if time_varying:
        xs = xs + (p.log_a[1:],)
    d_last, bps = lax.scan(_fwd, d0, xs, unroll=_unroll(K))
    z_last = jnp.argmax(d_last).astype(jnp.int32)

    def _back(z_next, bp_next):
        z = bp_next[z_next]
        return z, z

    _, zs = lax.scan(_back, z_last, bps, reverse=True, unroll=_unroll(K))
    return jnp.concatenate([zs, z_last[None]])


# =============================================================================== batching / API


def _as_float(x, dtype):
    return jnp.asarray(x, dtype)


def _check_inputs(log_initial_probs, log_transition_matrix, log_likelihoods, mask, length):
    """Validate shapes and split off the batch shape; returns a dict of in-axes info."""
    check_ndim("log_likelihoods", log_likelihoods, tuple(range(2, 2 + 8)), "(*batch, T, K)")
    ll_shape = tuple(jnp.shape(log_likelihoods))
    batch, (T, K) = ll_shape[:-2], ll_shape[-2:]
    nb = len(batch)
    info = {"batch": batch, "T": T, "K": K}

    init_shape = tuple(jnp.shape(log_initial_probs))
    if init_shape == (K,):
        info["init"] = False
    elif nb and init_shape == batch + (K,):
        info["init"] = True
    else:
        raise ValueError(
            f"`log_initial_probs` must have shape ({K},)" + (f" or {batch + (K,)}" if nb else "")
            + f" to match `log_likelihoods` of shape {ll_shape}, got {init_shape}."
        )

    a_shape = tuple(jnp.shape(log_transition_matrix))
    if nb and a_shape[:nb] == batch and a_shape[nb:] in ((K, K), (T, K, K)):
        info["trans"] = True
    elif a_shape in ((K, K), (T, K, K)):
        info["trans"] = False
    else:
        expect = f"({K}, {K}) or ({T}, {K}, {K})"
        if nb:
            expect += f", optionally with leading batch shape {batch}"
        raise ValueError(
            f"`log_transition_matrix` must have shape {expect} to match `log_likelihoods` of "
            f"shape {ll_shape}, got {a_shape}."
        )

    if mask is None:
        info["mask"] = None
    else:
        m_shape = tuple(jnp.shape(mask))
        if m_shape == (T,):
            info["mask"] = False
        elif nb and m_shape == batch + (T,):
            info["mask"] = True
        else:
            raise ValueError(
                f"`mask` must have shape ({T},)" + (f" or {batch + (T,)}" if nb else "")
                + f" to match `log_likelihoods` of shape {ll_shape}, got {m_shape}."
            )
        if jnp.issubdtype(jnp.result_type(mask), jnp.floating):
            raise ValueError("`mask` must be boolean (True = observed), got a floating dtype.")

    if length is None:
        info["length"] = None
    else:
        l_shape = tuple(jnp.shape(length))
        if l_shape == ():
            info["length"] = False
        elif nb and l_shape == batch:
            info["length"] = True
        else:
            raise ValueError(
                "`length` must be a scalar" + (f" or have shape {batch}" if nb else "")
                + f", got shape {l_shape}."
            )
        check_integer("length", length, low=0, high=T + 1)
    return info


def _float_dtype(*xs):
    return jnp.result_type(*[x for x in xs if x is not None], float)


def _run_batched(fn, info, args, batched_flags, out_batch_ndims=None):
    """Apply single-sequence ``fn(*args)`` over the batch shape ``info['batch']``.

    ``batched_flags[i]`` says whether ``args[i]`` carries the leading batch dims.  The batch
    dims are flattened into one axis and mapped with a single ``jax.vmap``.
    """
    batch = info["batch"]
    if not batch:
        return fn(*args)
    n = int(np.prod(batch))
    if n == 1:
        # one sequence: call directly, so that the data-dependent fallback stays a real
        # ``lax.cond`` instead of a vmapped ``select`` that would run both passes
        single = [a.reshape(a.shape[len(batch):]) if (b and a is not None) else a
                  for a, b in zip(args, batched_flags)]
        out = fn(*single)
        return jax.tree_util.tree_map(lambda o: o.reshape(batch + o.shape), out)
    flat = [a.reshape((n,) + a.shape[len(batch):]) if (b and a is not None) else a
            for a, b in zip(args, batched_flags)]
    in_axes = [0 if (b and a is not None) else None for a, b in zip(args, batched_flags)]
    out = jax.vmap(fn, in_axes=in_axes)(*flat)
    return jax.tree_util.tree_map(lambda o: o.reshape(batch + o.shape[1:]), out)


def _standard_args(log_initial_probs, log_transition_matrix, log_likelihoods, mask, length):
    info = _check_inputs(log_initial_probs, log_transition_matrix, log_likelihoods, mask, length)
    dtype = _float_dtype(log_initial_probs, log_transition_matrix, log_likelihoods)
    args = [
        _as_float(log_initial_probs, dtype),
        _as_float(log_transition_matrix, dtype),
        _as_float(log_likelihoods, dtype),
        None if mask is None else jnp.asarray(mask, bool),
        None if length is None else jnp.asarray(length, jnp.int32),
    ]
    flags = [info["init"], info["trans"], True, bool(info["mask"]), bool(info["length"])]
    return info, args, flags


@jax.jit
def _filter_jit_seq(log_init, log_a, ll, mask, length):
    return _filter_single(_prepare(log_init, log_a, ll, mask, length), "sequential")


@jax.jit
def _filter_jit_par(log_init, log_a, ll, mask, length):
    return _filter_single(_prepare(log_init, log_a, ll, mask, length), "parallel")


def hmm_filter(log_initial_probs, log_transition_matrix, log_likelihoods, mask=None, length=None,
               method: str = "auto") -> HMMFilter:
    r"""Forward filtering (the scaled alpha recursion, Rabiner (1989) eqs. 19-20).

    Args:
        log_initial_probs: (K,) ``log pi``.
        log_transition_matrix: (K, K) ``log A[i, j]`` (from ``i`` to ``j``), or (T, K, K) with
            entry ``t`` the transition into step ``t`` (entry 0 unused).  Rows need not be
            normalized; ``-inf`` allowed.
        log_likelihoods: (T, K) ``log e_t(k) = log p(y_t | z_t = k)``.
        mask: optional (T,) bool, False = missing observation (emission dropped).
        length: optional int scalar (may be traced); steps ``t >= length`` are padding.
        method: "sequential", "parallel" or "auto".

    Batch dims: see the module docstring (``log_likelihoods`` (*B, T, K) etc.).

    Returns:
        :class:`HMMFilter` ``(log_filtered (T, K), log_normalizers (T,), marginal_loglik ())``.
    """
    info, args, flags = _standard_args(log_initial_probs, log_transition_matrix,
                                       log_likelihoods, mask, length)
    method = _resolve_method(method, info["T"], info["K"])
    fn = _filter_jit_seq if method == "sequential" else _filter_jit_par
    return _run_batched(fn, info, args, flags)


def hmm_marginal_loglik(log_initial_probs, log_transition_matrix, log_likelihoods, mask=None,
                        length=None, method: str = "auto"):
    r"""``log p(y_{0:T-1}) = sum_t log p(y_t | y_{0:t-1})`` (Rabiner (1989) eq. 103).

    Same arguments as :func:`hmm_filter`; returns shape ``(*B,)``.
    """
    return hmm_filter(log_initial_probs, log_transition_matrix, log_likelihoods, mask, length,
                      method).marginal_loglik


@jax.jit
def _bs_jit_seq(key, log_filtered, log_a, length):
    return _backward_sample_single(key, log_filtered, log_a, length, "sequential")


@jax.jit
def _bs_jit_par(key, log_filtered, log_a, length):
    return _backward_sample_single(key, log_filtered, log_a, length, "parallel")


def _split_keys(rng_key, batch):
    if not batch:
        return rng_key, False
    n = int(np.prod(batch))
    keys = jax.random.split(rng_key, n)
    return keys.reshape(tuple(batch) + keys.shape[1:]), True


def hmm_backward_sample(rng_key, filter_result_or_log_filtered, log_transition_matrix,
                        length=None, method: str = "auto"):
    r"""Backward sampling given the filter (Fruhwirth-Schnatter (2006) Sec. 11.5; Chib (1996)).

    ``z_{L-1} ~ p(z_{L-1} | y)`` (``L = length``), then for ``t = L-2, ..., 0``:
    ``p(z_t = i | z_{t+1}, y_{0:T-1}) prop. to p(z_t = i | y_{0:t}) A_{t+1}(i, z_{t+1})``.

    Args:
        rng_key: PRNG key.
        filter_result_or_log_filtered: :class:`HMMFilter` or its ``log_filtered`` (T, K).
        log_transition_matrix: (K, K) or (T, K, K), as in :func:`hmm_filter`.
        length: optional int scalar; padded steps ``t >= length`` copy the last valid state.
        method: "sequential", "parallel" or "auto".

    Batch dims: ``log_filtered`` (*B, T, K), transition and ``length`` as in :func:`hmm_filter`.

    Returns:
        states (T,) int32.
    """
    lf = (filter_result_or_log_filtered.log_filtered
          if isinstance(filter_result_or_log_filtered, HMMFilter) else filter_result_or_log_filtered)
    check_ndim("filter_result_or_log_filtered", lf, tuple(range(2, 10)), "(*batch, T, K)")
    K = jnp.shape(lf)[-1]
    dummy_init = jnp.zeros(jnp.shape(lf)[:-2] + (K,), jnp.result_type(lf))
    info = _check_inputs(dummy_init, log_transition_matrix, lf, None, length)
    method = _resolve_method(method, info["T"], info["K"])
    dtype = _float_dtype(lf, log_transition_matrix)
    keys, kb = _split_keys(rng_key, info["batch"])
    args = [keys, _as_float(lf, dtype), _as_float(log_transition_matrix, dtype),
            None if length is None else jnp.asarray(length, jnp.int32)]
    flags = [kb, True, info["trans"], bool(info["length"])]
    fn = _bs_jit_seq if method == "sequential" else _bs_jit_par
    return _run_batched(fn, info, args, flags)


def _ffbs_single(key, log_init, log_a, ll, mask, length, method):
    p = _prepare(log_init, log_a, ll, mask, length)
    if method == "sequential" and _two_way(log_a, ll.shape[-1]):
        def _robust():
            log_filtered, log_normalizers = _forward_sequential_robust(p)
            states = _backward_sample_sequential_log(key, log_filtered, log_a, p.length)
            return states, _pairwise_sum(log_normalizers)

        states, loglik, ok = _ffbs_two_way(key, p)
        return lax.cond(ok, lambda: (states, loglik), _robust)
    if method == "sequential":
        log_filtered, log_normalizers, probs, ok = _forward_sequential(p)
        states = lax.cond(
            ok,
            lambda: _backward_sample_sequential(key, probs, log_a, p.length),
            lambda: _backward_sample_sequential_log(key, log_filtered, log_a, p.length),
        )
    else:
        log_filtered, log_normalizers = _forward_parallel(p)
        states = _backward_sample_parallel(key, log_filtered, log_a, p.length)
    return states, _pairwise_sum(log_normalizers)


@jax.jit
def _ffbs_jit_seq(key, log_init, log_a, ll, mask, length):
    return _ffbs_single(key, log_init, log_a, ll, mask, length, "sequential")


@jax.jit
def _ffbs_jit_par(key, log_init, log_a, ll, mask, length):
    return _ffbs_single(key, log_init, log_a, ll, mask, length, "parallel")


def _ffbs_fast_single(key, log_init, log_a, ll, mask, length):
    p = _prepare(log_init, log_a, ll, mask, length)
    if _two_way(log_a, ll.shape[-1]):
        return _ffbs_two_way(key, p)
    probs, lz, ok = _forward_sequential_fast(p)
    states = _backward_sample_sequential(key, probs, log_a, p.length)
    return states, _pairwise_sum(lz), ok


@jax.jit
def _ffbs_fast_jit(key, log_init, log_a, ll, mask, length):
    return _ffbs_fast_single(key, log_init, log_a, ll, mask, length)


@jax.jit
def _ffbs_par_checked(key, log_init, log_a, ll, mask, length):
    states, loglik = _ffbs_single(key, log_init, log_a, ll, mask, length, "parallel")
    return states, loglik, jnp.isfinite(loglik)


def _ffbs_batched(seq_fn, par_fn, rng_key, log_initial_probs, log_transition_matrix,
                  log_likelihoods, mask, length, method):
    """Validate, pick the method, split one key per sequence and map a single-sequence FFBS."""
    info, args, flags = _standard_args(log_initial_probs, log_transition_matrix,
                                       log_likelihoods, mask, length)
    method = _resolve_method(method, info["T"], info["K"])
    keys, kb = _split_keys(rng_key, info["batch"])
    fn = seq_fn if method == "sequential" else par_fn
    return _run_batched(fn, info, [keys] + args, [kb] + flags)


def hmm_posterior_sample_fast(rng_key, log_initial_probs, log_transition_matrix, log_likelihoods,
                              mask=None, length=None, method: str = "auto"):
    r"""FFBS without the exact log-space fallback: ``(states, marginal_loglik, ok)``.

    The sequential variant runs only the rescaled probability-space pass of
    :func:`hmm_posterior_sample`; ``ok`` is False when a step's normalizer underflowed (see the
    module docstring), and then ``states`` must not be used.  Having no data-dependent branch,
    it costs the same under ``jax.vmap`` (vectorized chains) as alone, where
    :func:`hmm_posterior_sample`'s ``lax.cond`` would become a ``select`` that runs both passes.
    The samplers use it and keep the previous state sequence when ``ok`` is False: ``ok``
    depends only on the conditioning values (transitions and likelihoods), never on the current
    states, so skipping the update leaves the target invariant.
    """
    return _ffbs_batched(_ffbs_fast_jit, _ffbs_par_checked, rng_key, log_initial_probs,
                         log_transition_matrix, log_likelihoods, mask, length, method)


def hmm_posterior_sample(rng_key, log_initial_probs, log_transition_matrix, log_likelihoods,
                         mask=None, length=None, method: str = "auto"):
    r"""Forward-filtering backward-sampling: one draw ``z ~ p(z_{0:T-1} | y_{0:T-1})``.

    Arguments as in :func:`hmm_filter` plus ``rng_key``.  Returns ``(states (T,) int32,
    marginal_loglik ())`` (with leading batch dims for batched inputs).
    """
    return _ffbs_batched(_ffbs_jit_seq, _ffbs_jit_par, rng_key, log_initial_probs,
                         log_transition_matrix, log_likelihoods, mask, length, method)


@jax.jit
def _smoother_jit_seq(log_init, log_a, ll, mask, length):
    return _smoother_single(_prepare(log_init, log_a, ll, mask, length), "sequential")


@jax.jit
def _smoother_jit_par(log_init, log_a, ll, mask, length):
    return _smoother_single(_prepare(log_init, log_a, ll, mask, length), "parallel")


def hmm_smoother(log_initial_probs, log_transition_matrix, log_likelihoods, mask=None,
                 length=None, method: str = "auto") -> HMMPosterior:
    r"""Forward-backward smoothing (Rabiner (1989) eqs. 24-27 and 37-38, scaled).

    Arguments as in :func:`hmm_filter`.  Returns :class:`HMMPosterior` ``(log_smoothed (T, K),
    marginal_loglik (), expected_transition_counts (K, K))``; the counts sum ``xi_t`` over valid
    steps ``1 <= t < length`` (so they sum to ``length - 1`` when some path has positive mass).
    """
    info, args, flags = _standard_args(log_initial_probs, log_transition_matrix,
                                       log_likelihoods, mask, length)
    method = _resolve_method(method, info["T"], info["K"])
    fn = _smoother_jit_seq if method == "sequential" else _smoother_jit_par
    return _run_batched(fn, info, args, flags)


class HMMSmootherFast(NamedTuple):
    r"""Result of :func:`hmm_smoother_fast`: the fields of :class:`HMMPosterior`, the filtered
    marginals ``log_filtered (..., T, K)`` (:class:`HMMFilter`) and ``ok (...)``: False where the
    rescaled forward pass underflowed (then the other fields must not be used)."""

    log_filtered: jax.Array
    log_smoothed: jax.Array
    marginal_loglik: jax.Array
    expected_transition_counts: jax.Array
    ok: jax.Array


def _smoother_fast_single(log_init, log_a, ll, mask, length):
    p = _prepare(log_init, log_a, ll, mask, length)
    probs, lz, ok = _forward_sequential_fast(p)
    log_filtered = jnp.log(probs)
    post = _smoothed(p, log_filtered, lz, _backward_messages_sequential(p))
    return HMMSmootherFast(log_filtered, post.log_smoothed, post.marginal_loglik, post.expected_transition_counts, ok)


_smoother_fast_jit = jax.jit(_smoother_fast_single)


def hmm_smoother_fast(log_initial_probs, log_transition_matrix, log_likelihoods, mask=None,
                      length=None) -> HMMSmootherFast:
    r"""Forward-backward smoothing without the exact log-space fallback (sequential method).

    The smoother of :func:`hmm_smoother` over the rescaled probability-space forward pass only,
    which also returns the filtered marginals; ``ok`` is False when a step's normalizer underflowed
    (see the module docstring).  Like :func:`hmm_posterior_sample_fast`, it has no data-dependent
    branch, so a batch of sequences (``jax.vmap``) costs one pass per sequence where
    :func:`hmm_smoother`'s ``lax.cond`` would become a ``select`` that runs both; a caller checks
    ``ok`` and falls back to :func:`hmm_smoother` for the whole batch only when needed.
    Arguments as in :func:`hmm_filter`.
    """
    info, args, flags = _standard_args(log_initial_probs, log_transition_matrix, log_likelihoods, mask, length)
    return _run_batched(_smoother_fast_jit, info, args, flags)


@jax.jit
def _viterbi_jit(log_init, log_a, ll, mask, length):
    return _viterbi_single(_prepare(log_init, log_a, ll, mask, length))


def hmm_viterbi(log_initial_probs, log_transition_matrix, log_likelihoods, mask=None,
                length=None):
    r"""Most probable state path ``argmax_z p(z | y)`` by max-product (Rabiner (1989) eqs.
    32-35), in log space and renormalized every step.

    Ties are broken deterministically (lowest state index, both in the forward maximization and
    in the final argmax).  Arguments as in :func:`hmm_filter`.  Returns states (T,) int32;
    padded steps copy the last valid state.
    """
    info, args, flags = _standard_args(log_initial_probs, log_transition_matrix,
                                       log_likelihoods, mask, length)
    return _run_batched(_viterbi_jit, info, args, flags)
