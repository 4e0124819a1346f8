r"""The exact prior probability of a partition of the states under the infinite sticky HDP-HMM.

Chinese restaurant franchise with loyal customers (Fox et al. 2007, Sec. V-A, eqs. 27-29; Teh et
al. 2006 eqs. 18-20): ``beta ~ GEM(gamma)``, start row ``pi_0 ~ DP(alpha, beta)``, rows
``pi_j ~ DP(alpha + kappa, (alpha beta + kappa delta_j) / (alpha + kappa))``, shared by every
sequence.  Integrating the rows and ``beta`` out, the probability of the *partition* of the steps
into states (labels up to permutation) is a finite sum over table counts, computed here exactly
(NumPy, float64) for enumeration: the exact-enumeration tests of every infinite-model sampler
compare the samplers' draws with it, and the restricted collapsed draw keeps the same table
counts.

Derivation.  Integrating the row ``pi_j`` out of the ``n_j.`` successors of state ``j`` gives
``Gamma(c)/Gamma(c + n_j.) prod_k Gamma(alpha beta_k + kappa d_jk + n_jk) / Gamma(alpha beta_k +
kappa d_jk)`` with ``c = alpha + kappa`` (Fox et al. eq. 76); the start row ``DP(alpha, beta)`` the
same with ``alpha`` and no ``kappa``.  Expanding each rising factorial with unsigned Stirling
numbers of the first kind, ``Gamma(a + n)/Gamma(a) = sum_m |s(n, m)| a^m`` (``m`` tables serving
``k``), and the diagonal binomially, ``(alpha beta_j + kappa)^m = sum_w C(m, w) kappa^w (alpha
beta_j)^{m-w}`` (``w`` overridden tables, eq. 28), turns ``p(z | beta)`` into a sum of monomials
``alpha^{mbar..} kappa^{w.} prod_k beta_k^{mbar_.k}`` over the informative table counts ``mbar_jk =
m_jk - d_jk w_j`` (eq. 35; start-row tables are all informative).  Every used state has
``mbar_.k >= 1``, so summing ``E[prod_k beta_k^{mbar_.k}]`` over the distinct labels of the ``K``
blocks is the top-level CRP (Ewens) EPPF ``gamma^K Gamma(gamma)/Gamma(gamma + mbar..) prod_k
Gamma(mbar_.k)`` (Teh et al. eq. 20).  Hence::

    p(partition) = Gamma(alpha)/Gamma(alpha + n_0.) prod_{j: n_j.>0} Gamma(c)/Gamma(c + n_j.)
                   * sum_{m, w} prod_{jk} |s(n_jk, m_jk)| prod_j C(m_jj, w_j)
                     alpha^{mbar..} kappa^{w.} gamma^K Gamma(gamma)/Gamma(gamma + mbar..)
                     prod_k Gamma(mbar_.k)

with ``m_jk`` in ``[1, n_jk]`` (0 iff ``n_jk = 0``) and ``w_j`` in ``[0, m_jj]``.  The sum over
``(m, w)`` factorizes by dish ``k`` except through ``mbar..``: it is a product of per-dish
polynomials in ``mbar_.k`` (:func:`dish_polynomial`) followed by one convolution over dishes.

The pieces are separate public functions so that the tests' negative controls can replace one
of them with a deliberately wrong formula.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

__all__ = [
    "restricted_growth_strings",
    "partition_labels",
    "transition_counts",
    "stirling1_unsigned",
    "start_restaurant",
    "diagonal_polynomial",
    "dish_polynomial",
    "log_prior_counts",
    "log_partition_prior",
]


def restricted_growth_strings(length: int):
    """All canonical partition labels of ``length`` items in lexicographic order: ``z_0 = 0`` and
    ``z_t <= 1 + max(z_{<t})``; Bell(length) of them."""
    if length < 1:
        raise ValueError(f"`length` must be >= 1, got {length}.")
    out = [(0,)]
    for _ in range(length - 1):
        out = [z + (k,) for z in out for k in range(max(z) + 2)]
    return out


def partition_labels(states):
    """Canonical labels of a state sequence's partition (relabelled by first appearance), a tuple."""
    seen, out = {}, []
    for s in np.asarray(states).reshape(-1):
        out.append(seen.setdefault(int(s), len(seen)))
    return tuple(out)


def transition_counts(flat_states, lengths, num_states=None):
    """``(n (K, K), first (K,))`` of the concatenated state sequences ``flat_states`` split into
    sequences of ``lengths``: ``n[j, k]`` transitions ``j -> k`` within sequences, ``first[k]``
    sequences starting in ``k`` (the start restaurant's customers); ``K = num_states`` (default:
    the largest label + 1)."""
    flat_states = np.asarray(flat_states, int).reshape(-1)
    lengths = [int(t) for t in lengths]
    if not lengths or any(t < 1 for t in lengths) or sum(lengths) != flat_states.size:
        raise ValueError(f"`lengths` must be positive and sum to len(flat_states)={flat_states.size}, got {lengths}.")
    if flat_states.min() < 0:
        raise ValueError("`flat_states` must hold non-negative state labels.")
    num_states = int(flat_states.max()) + 1 if num_states is None else int(num_states)
    n = np.zeros((num_states, num_states), int)
    first = np.zeros(num_states, int)
    start = 0
    for t_len in lengths:
        z = flat_states[start:start + t_len]
        first[z[0]] += 1
        np.add.at(n, (z[:-1], z[1:]), 1)
        start += t_len
    return n, first


def stirling1_unsigned(n_max: int):
    """Unsigned Stirling numbers of the first kind ``|s(n, m)|``, ``0 <= n, m <= n_max``:
    ``|s(n+1, m)| = n |s(n, m)| + |s(n, m-1)|``, ``|s(0, 0)| = 1``, so that ``Gamma(a + n) /
    Gamma(a) = sum_m |s(n, m)| a^m`` (the seatings of ``n`` labelled customers at ``m`` tables)."""
    s = np.zeros((n_max + 1, n_max + 1))
    s[0, 0] = 1.0
    for n in range(n_max):
        s[n + 1, 1:] = n * s[n, 1:] + s[n, :-1]
    return s


def start_restaurant(first, alpha, stirling):
    """The start restaurant ``DP(alpha, beta)``: ``(log Gamma(alpha)/Gamma(alpha + n_0.), polys)``
    with ``polys[k]`` the polynomial in its informative tables for dish ``k`` (coefficient ``m``:
    ``|s(n_0k, m)|``, the ``alpha^m`` factor left to :func:`dish_polynomial`)."""
    first = np.asarray(first, int)
    log_norm = gammaln(alpha) - gammaln(alpha + first.sum())
    polys = [stirling[f, :f + 1] if f > 0 else np.array([1.0]) for f in first]
    return log_norm, polys


def diagonal_polynomial(n_kk: int, kappa: float, stirling):
    """Self-transitions of state ``k``: ``m`` tables of which ``w`` are overridden (weight
    ``|s(n_kk, m)| C(m, w) kappa^w``), as a polynomial in the informative tables ``mbar = m - w``."""
    diag = np.zeros(n_kk + 1)
    for m in range(1, n_kk + 1):
        for w in range(m + 1):
            diag[m - w] += stirling[n_kk, m] * math.comb(m, w) * float(kappa) ** w  # 0.0 ** 0 == 1
    return diag


def dish_polynomial(k: int, n, start_poly, alpha, kappa, stirling):
    """Polynomial in ``mbar_.k`` of dish ``k``: the product over restaurants of their seatings of
    dish ``k`` (:func:`start_restaurant`, :func:`diagonal_polynomial`, ``|s(n_jk, m)|`` off the
    diagonal) times ``alpha^a Gamma(a)`` (the top-level EPPF's ``Gamma(mbar_.k)``)."""
    col = np.asarray(start_poly, float)
    for j in range(n.shape[0]):
        if n[j, k] == 0:
            continue
        col = np.convolve(col, diagonal_polynomial(n[k, k], kappa, stirling) if j == k else stirling[n[j, k], :n[j, k] + 1])
    if col[0] != 0.0:
        raise AssertionError("a used state without informative tables (impossible in the infinite model)")
    a = np.arange(col.size)
    with np.errstate(divide="ignore"):
        return col * np.where(a > 0, alpha ** a * np.exp(gammaln(np.maximum(a, 1))), 0.0)


def log_prior_counts(n, first, gamma, alpha, kappa):
    """Log prior probability of a partition from its transition counts ``n (K, K)`` and start
    counts ``first (K,)`` (every label ``0..K-1`` used); see the module docstring."""
    n = np.asarray(n, int)
    first = np.asarray(first, int)
    num_states = n.shape[0]
    if not ((n.sum(0) + n.sum(1) + first) > 0).all():
        raise ValueError("every state label 0..K-1 must be used")
    c = alpha + kappa
    stirling = stirling1_unsigned(max(int(n.max(initial=0)), int(first.max())))
    log_norm, start_polys = start_restaurant(first, alpha, stirling)
    rows = n.sum(1)
    log_norm += np.sum(gammaln(c) - gammaln(c + rows[rows > 0]))
    total = np.array([1.0])  # polynomial in mbar..
    for k in range(num_states):
        total = np.convolve(total, dish_polynomial(k, n, start_polys[k], alpha, kappa, stirling))
    big = np.arange(total.size)
    pos = total > 0
    log_terms = np.log(total[pos]) + gammaln(gamma) - gammaln(gamma + big[pos])
    return log_norm + num_states * np.log(gamma) + np.logaddexp.reduce(log_terms)


def log_partition_prior(flat_states, lengths, gamma, alpha, kappa):
    """Log prior probability of the partition of ``flat_states`` (the states of sequences of
    ``lengths``, concatenated; any labels) under the infinite sticky HDP-HMM (module docstring)."""
    if not (gamma > 0 and alpha > 0 and kappa >= 0):
        raise ValueError(f"need gamma > 0, alpha > 0, kappa >= 0; got {gamma}, {alpha}, {kappa}.")
    n, first = transition_counts(partition_labels(flat_states), lengths)
    return float(log_prior_counts(n, first, gamma, alpha, kappa))
