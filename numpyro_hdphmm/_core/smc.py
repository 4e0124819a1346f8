r"""Sequential Monte Carlo pieces of particle Gibbs with ancestor sampling, written once.

Notation (Andrieu, Doucet & Holenstein 2010, "Particle Markov chain Monte Carlo methods";
Lindsten, Jordan & Schön 2014, "Particle Gibbs with ancestor sampling"): ``N`` particles with
unnormalized log weights ``log w^i``, normalized weights ``W^i = w^i / sum_j w^j``, ancestor
indices ``a^i_t`` (the particle at ``t - 1`` that particle ``i`` at ``t`` descends from).  The
conditional SMC keeps one particle (the reference) on a fixed trajectory ``x'``; the others are
resampled and propagated as in an ordinary particle filter.

``multinomial_ancestors(u, log_w)``
    ``a^i ~ Cat(W)`` independently, by inversion of the weights' CDF (the resampling the
    conditional SMC needs: the non-reference particles' ancestors are conditionally i.i.d., which
    is what makes the ancestor-sampling and final-selection weights below exact);
``systematic_ancestors(u, log_w, num)``
    the lower-variance scheme of an unconditional particle filter (Carpenter, Clifford &
    Fearnhead 1999), for plain SMC (the fully adapted filter below): the conditional SMC of
    particle Gibbs uses the multinomial scheme, whose conditionally independent draws the ancestor-sampling weights assume;
``ancestor_sample(u, log_w, log_transition_to_reference)``
    the reference particle's new ancestor, ``P(a = i) ∝ w^i_{t-1} p(x'_t | x^i_{t-1})``
    (Lindsten et al. 2014, eq. 16 for a Markovian target);
``select_particle(u, log_w)``
    the trajectory returned at the end, ``P(k = i) ∝ w^i_T`` (the final-time weights);
``trace_lineage(states, ancestors, index)``
    the ancestral path of particle ``index`` at the last step;
``effective_sample_size(log_w)``
    ``1 / sum_i W_i^2`` (Kong, Liu & Wong 1994), between 1 and ``N``;
``search_rows(cdf, rows, values)``
    inverse-CDF lookups in precomputed cumulative rows, ``O(log S)`` per lookup (no row is
    copied), for proposals that must not cost ``O(S)`` per particle;
``adapted_filter(u, log_init, log_trans, log_likelihoods, mask, length)``
    the fully adapted particle filter of a finite-state HMM (Pitt & Shephard 1999): per-step
    estimates of ``p(y_t | y_{<t})`` whose product is an unbiased estimate of ``p(y)``.

Every draw takes its uniforms on ``(0, 1]`` (:func:`numpyro_hdphmm._core.random.uniform_open`) from
the caller, so a caller can replay the same randomness.  Every function is pure, jittable and
vmappable; weights are in log space throughout (a particle of weight ``-inf`` is never drawn).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

__all__ = [
    "normalize_log_weights",
    "effective_sample_size",
    "multinomial_ancestors",
    "systematic_ancestors",
    "ancestor_sample",
    "select_particle",
    "trace_lineage",
    "search_rows",
    "adapted_filter",
]


def normalize_log_weights(log_w):
    """``(log W (N,), log sum_i w^i)``: the log normalized weights and the log normalizer
    (``-inf`` when every weight is 0, the normalized weights then uniform)."""
    top = jnp.max(log_w)
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    log_total = jnp.log(jnp.sum(jnp.exp(log_w - top))) + top
    safe = jnp.where(jnp.isfinite(log_total), log_total, 0.0)
    uniform = jnp.full_like(log_w, -jnp.log(log_w.shape[-1]))
    return jnp.where(jnp.isfinite(log_total), log_w - safe, uniform), log_total


def effective_sample_size(log_w):
    """``1 / sum_i W_i^2`` of the log weights ``(N,)``: between 1 and ``N``."""
    log_norm, _ = normalize_log_weights(log_w)
    return 1.0 / jnp.sum(jnp.exp(2.0 * log_norm))


def _cumulative(log_w):
    """Cumulative normalized weights ``(N,)``, last entry exactly 1."""
    log_norm, _ = normalize_log_weights(log_w)
    cs = jnp.cumsum(jnp.exp(log_norm))
    return cs / cs[-1]


def _invert(cs, positions):
    """``#{i : cs_i < p}`` for every position ``p`` in ``(0, 1]``: the inverse CDF (a weight-0
    particle, whose cumulative sum equals its predecessor's, is never drawn)."""
    return jnp.minimum(jnp.searchsorted(cs, positions, side="left"), cs.shape[0] - 1).astype(jnp.int32)


def multinomial_ancestors(u, log_w):
    """``a^m ~ Cat(W)`` independently for each uniform ``u (M,)`` on ``(0, 1]``: ``(M,)`` int32.

    Inverse CDF, ``O(M log N)``.  In the conditional SMC the ``N - 1`` non-reference particles
    draw their ancestors this way (Andrieu et al. 2010, the conditional SMC update)."""
    return _invert(_cumulative(log_w), u)


def systematic_ancestors(u, log_w, num: int):
    """Systematic resampling (Carpenter et al. 1999): one uniform ``u`` on ``(0, 1]`` shared by
    the ``num`` positions ``(m + u) / num``.  ``(num,)`` int32, non-decreasing; particle ``i`` is
    drawn ``floor(num W^i)`` or ``ceil(num W^i)`` times."""
    positions = (jnp.arange(num, dtype=jnp.result_type(u)) + u) / num
    return _invert(_cumulative(log_w), positions)


def ancestor_sample(u, log_w, log_transition_to_reference):
    r"""The reference particle's ancestor at ``t - 1`` (Lindsten et al. 2014, eq. 16, Markovian case):

    ``P(a^N_{t-1} = i) ∝ w^i_{t-1} p(x'_t | x^i_{t-1})``, with ``log_w (N,)`` the weights at
    ``t - 1`` and ``log_transition_to_reference (N,)`` the log transition probability from each
    particle's state at ``t - 1`` into the REFERENCE state ``x'_t`` (the printed formula of
    Tripuraneni et al. uses the particle's own new state, a typo).  ``u`` uniform on ``(0, 1]``.
    Returns an int32 index."""
    return multinomial_ancestors(jnp.reshape(u, (1,)), log_w + log_transition_to_reference)[0]


def select_particle(u, log_w):
    """The index of the trajectory returned by the conditional SMC, ``P(k = i) ∝ w^i_T`` (the
    final-time weights ``log_w (N,)``; Andrieu et al. 2010, the conditional SMC's last step)."""
    return multinomial_ancestors(jnp.reshape(u, (1,)), log_w)[0]


def trace_lineage(states, ancestors, index):
    """The ancestral path of particle ``index`` at the last step: ``states (T, N)`` the particles'
    states, ``ancestors (T, N)`` (``ancestors[t, i]`` is the index at ``t - 1`` of particle ``i``'s
    ancestor; row 0 unused).  ``path[T-1] = states[T-1, b]``, ``b <- ancestors[t, b]`` backwards.
    Returns ``(T,)``."""

    def back(b, inp):
        s_t, a_t = inp
        return a_t[b], s_t[b]

    _, path = lax.scan(back, jnp.asarray(index, jnp.int32), (states, ancestors), reverse=True)
    return path


def search_rows(cdf, rows, values):
    """``#{k : cdf[r, k] < v}`` for every ``(r, v)`` of ``rows (M,)`` and ``values (M,)``, with
    ``cdf (R, S)`` non-decreasing along its last axis: the inverse-CDF draw of index ``k`` when
    ``v = u * cdf[r, -1]`` (a zero-weight entry, equal to its predecessor, is never returned).

    A binary search of ``ceil(log2(S + 1))`` rounds that reads one entry per row and round, so a
    lookup costs ``O(log S)`` however wide the rows (gathering the rows first would cost
    ``O(S)`` each).  Returns ``(M,)`` int32 in ``[0, S]`` (``S``: every entry is below ``v``)."""
    size = cdf.shape[-1]
    rows = jnp.asarray(rows, jnp.int32)
    lo = jnp.zeros(rows.shape, jnp.int32)
    hi = jnp.full(rows.shape, size, jnp.int32)
    for _ in range(max(1, math.ceil(math.log2(size + 1)))):
        mid = (lo + hi) // 2
        below = cdf[rows, jnp.minimum(mid, size - 1)] < values
        go_right = (mid < hi) & below
        lo = jnp.where(go_right, mid + 1, lo)
        hi = jnp.where(go_right | (mid >= hi), hi, mid)
    return lo


def _draw_rows(log_rows, u):
    """One index per row of ``log_rows (P, K)`` (unnormalized log probabilities) with the
    uniforms ``u (P,)``: :func:`multinomial_ancestors` row by row (a row of ``-inf`` draws
    uniformly)."""
    return jax.vmap(lambda log_w, v: multinomial_ancestors(v[None], log_w)[0])(log_rows, u)


def adapted_filter(u, log_init, log_trans, log_likelihoods, mask, length):
    r"""The fully adapted particle filter of a finite-state HMM (Pitt & Shephard 1999,
    "Filtering via simulation: auxiliary particle filters", JASA 94; the look-ahead form of
    Johansen & Doucet 2008): per-step likelihood estimates.

    With ``P`` equally weighted particles ``z^p_{t-1}``, step ``t`` weighs each by its predictive
    ``w^p_t = p(y_t | z^p_{t-1}) = sum_k A(z^p_{t-1}, k) e_t(k)``, estimates

    ``l_t = (1/P) sum_p w^p_t  ~  p(y_t | y_{<t})``,

    resamples ancestors ``a^p`` in proportion to ``w`` (systematic) and moves each particle to
    ``z^p_t ~ p(z_t | z^{a^p}_{t-1}, y_t) ∝ A(z^{a^p}_{t-1}, z_t) e_t(z_t)``, so the particles are
    again equally weighted.  Step 0 is exact: ``l_0 = sum_k pi0(k) e_0(k)``, ``z^p_0 ~ p(z_0 | y_0)``.
    ``prod_t l_t`` is an unbiased estimate of ``p(y)`` (the unbiasedness of SMC's normalizing
    constant under any unbiased resampling, Del Moral 2004, "Feynman-Kac formulae"), and the
    ``l_t`` are the per-word likelihoods ``l(y_i | s_z)`` of the RCD paper's eqs. 38-39.  The
    forward algorithm (``hmm_filter``) computes ``p(y_t | y_{<t})`` exactly.

    Args:
        u: ``(T, P + 1)`` uniforms on ``(0, 1]``: column 0 the step's systematic resampling,
            columns ``1..P`` the particles' moves.
        log_init: ``(K,)`` ``log pi0``.
        log_trans: ``(K, K)`` ``log A`` (rows need not be normalized: a row's missing mass is the
            probability of leaving the represented states, dropped as in ``hmm_filter``).
        log_likelihoods: ``(T, K)`` ``log e_t(k)``.
        mask: ``(T,)`` bool, False = missing observation (its emission is dropped).
        length: int scalar (may be traced); steps ``t >= length`` are padding (``l_t = 1``).

    Returns:
        ``(T,)`` ``log l_t`` (0 at padding).
    """
    num = u.shape[1] - 1
    log_trans = jnp.asarray(log_trans)
    log_e = jnp.where(jnp.asarray(mask)[:, None], log_likelihoods, 0.0)
    first = log_init + log_e[0]
    z0 = _draw_rows(jnp.broadcast_to(first, (num,) + first.shape), u[0, 1:])
    l0 = jnp.where(length > 0, logsumexp(first), 0.0)

    def step(z, inputs):
        t, u_t, e_t = inputs
        log_a = log_trans[z] + e_t  # (P, K)
        log_w = logsumexp(log_a, axis=-1)
        log_l = logsumexp(log_w) - math.log(num)
        ancestors = systematic_ancestors(u_t[0], log_w, num)
        z_new = _draw_rows(log_a[ancestors], u_t[1:])
        inside = t < length
        return jnp.where(inside, z_new, z), jnp.where(inside, log_l, 0.0)

    steps = jnp.arange(1, log_e.shape[0])
    _, rest = lax.scan(step, z0, (steps, u[1:], log_e[1:]))
    return jnp.concatenate([l0[None], rest])
