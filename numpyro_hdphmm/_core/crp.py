r"""Chinese-restaurant-franchise bookkeeping and auxiliary-variable hyperparameter updates.

Shared by every sampler of the (sticky) HDP-HMM.  Notation (Fox et al. 2007, Sec. V-A; the
paper's printed errors: ``docs/errata.md``, "Sticky HDP-HMM"): restaurant ``j`` is the state a transition leaves (the start row
is one more restaurant, without self bias), ``n_jk`` the number of transitions ``j -> k``,
``m_jk`` the number of tables in restaurant ``j`` serving dish ``k``, ``w_j`` the number of
override (sticky) tables in restaurant ``j``, ``mbar_jk`` the informative tables.

All functions are pure, jittable and vmappable, with static shapes.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
from jax import random
from jax.scipy.special import gammaln

from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.slice_sampling import coordinate_slice_sample

__all__ = [
    "TableCounts",
    "Concentrations",
    "HyperPriors",
    "GlobalDraw",
    "transition_counts",
    "sample_binomial_counts",
    "row_counts",
    "prior_row_concentrations",
    "row_concentrations",
    "log_dirichlet_multinomial",
    "sample_crp_tables",
    "sample_table_counts",
    "resample_alpha_kappa",
    "resample_c_rho",
    "resample_gamma",
    "resample_gamma_weak_limit",
    "resample_hyperparameters",
    "HYPERPARAMETER_UPDATES",
    "log_states_given_beta",
    "log_gamma_given_tables",
    "sample_alpha_kappa_collapsed",
    "sample_gamma_collapsed",
    "sample_beta",
    "sample_shared_base",
    "sample_rows",
    "sample_global",
]


def transition_counts(states, capacity: int, lengths=None):
    r"""Counts of a (batch of) state sequence(s): ``(n (K, K), first (K,))``.

    ``states (..., T)``; ``n_jk`` counts transitions ``z_{t-1} = j -> z_t = k`` over steps
    ``1 <= t < length``; ``first_k`` counts sequences whose first state is ``k`` (the start
    row's customers; a sequence of length 0 has none).  ``lengths (...,)`` marks padding
    (``None``: all steps valid).
    """
    states = jnp.asarray(states)
    t = states.shape[-1]
    valid = jnp.ones(states.shape, bool) if lengths is None else jnp.arange(t) < jnp.asarray(lengths)[..., None]
    pair = states[..., :-1] * capacity + states[..., 1:]
    weight = valid[..., 1:].astype(jnp.int32)
    n = jnp.zeros(capacity * capacity, jnp.int32).at[pair.reshape(-1)].add(weight.reshape(-1))
    first = jnp.zeros(capacity, jnp.int32).at[states[..., 0].reshape(-1)].add(valid[..., 0].reshape(-1).astype(jnp.int32))
    return n.reshape(capacity, capacity), first


def _customers(counts, max_total: int):
    """The customers of groups with ``counts (G,)`` laid out in one array of static length
    ``max_total >= sum(counts)``: ``(labels, rank, valid)``, each ``(max_total,)``: the group of each
    position, its 0-based rank within the group and whether it holds a customer."""
    groups = counts.shape[0]
    labels = jnp.repeat(jnp.arange(groups), counts, total_repeat_length=max_total)
    starts = jnp.cumsum(counts) - counts
    position = jnp.arange(max_total)
    return labels, position - starts[labels], position < jnp.sum(counts)


def sample_crp_tables(rng_key, counts, concentration, max_total: int):
    r"""Number of occupied tables of CRPs: ``m_g ~ sum_{i=0}^{n_g - 1} Ber(c_g / (c_g + i))``.

    This is the exact draw from ``p(m | n, c) = Gamma(c)/Gamma(c + n) s(n, m) c^m`` (Antoniak
    1974; Fox et al. eq. 32, Alg. 1 step 3a): customer ``i`` (0-based) of a restaurant opens a new
    table with probability ``c / (c + i)``.  ``counts (G,)`` non-negative integers with
    ``sum(counts) <= max_total`` (static); ``concentration (G,)`` (``c = 0`` gives no table unless
    ``n > 0``, where the first customer always opens one).  Cost O(max_total + G): the customers
    are laid out once with ``jnp.repeat`` and each gets one Bernoulli.
    """
    counts = jnp.asarray(counts, jnp.int32)
    labels, rank, valid = _customers(counts, max_total)
    c = jnp.asarray(concentration)[labels]
    dtype = jnp.result_type(c, float)
    prob = jnp.where(rank == 0, 1.0, c / (c + rank.astype(dtype)))
    new_table = (random.uniform(rng_key, (max_total,), dtype) < prob) & valid
    return jnp.zeros(counts.shape[0], jnp.int32).at[labels].add(new_table.astype(jnp.int32))


def sample_binomial_counts(rng_key, counts, probs, max_total: int):
    r"""``w_g ~ Binomial(n_g, p_g)``, exactly, as the number of successes among ``n_g`` Bernoulli
    trials laid out as :func:`sample_crp_tables` lays out its customers: ``counts (G,)``
    non-negative integers with ``sum(counts) <= max_total`` (static), ``probs (G,)`` in
    ``[0, 1]``.  Cost O(max_total + G), and one uniform draw: a much smaller program than
    :func:`jax.random.binomial`'s rejection sampler (the sweep's compile time), for the small
    totals of table counts."""
    counts = jnp.asarray(counts, jnp.int32)
    labels, _, valid = _customers(counts, max_total)
    p = jnp.asarray(probs)[labels]
    success = (random.uniform(rng_key, (max_total,), jnp.result_type(p, float)) < p) & valid
    return jnp.zeros(counts.shape[0], jnp.int32).at[labels].add(success.astype(jnp.int32))


class TableCounts(NamedTuple):
    """Auxiliary tables of the sticky CRF (Fox et al. eqs. 31-35).

    ``m (K+1, K)``: tables per restaurant (rows ``0..K-1`` the states, row ``K`` the start row)
    and dish; ``w (K,)``: override tables per state restaurant; ``mbar (K+1, K)``: informative
    tables (``m`` with ``w`` removed from the diagonal).
    """

    m: jax.Array
    w: jax.Array
    mbar: jax.Array


def sample_table_counts(rng_key, n, first, beta, alpha, kappa, max_total: int) -> TableCounts:
    r"""Draw ``m``, ``w``, ``mbar`` given transition counts (Fox et al. Alg. 1 step 3).

    ``n (K, K)`` transition counts, ``first (K,)`` start-row counts, ``beta (>= K,)`` global
    weights (entries past ``K`` ignored), ``alpha``, ``kappa``.  Restaurant ``j < K`` seats dish
    ``k`` with concentration ``alpha beta_k + kappa delta_jk``; the start row with
    ``alpha beta_k``.  Overrides: ``w_j ~ Binomial(m_jj, rho / (rho + beta_j (1 - rho)))`` with
    ``rho = kappa / (alpha + kappa)`` (eq. 34; notes erratum 12), ``mbar_jj = m_jj - w_j``.
    ``max_total`` bounds ``sum(n) + sum(first)`` (static, e.g. the number of observations).
    """
    k = n.shape[0]
    beta = jnp.asarray(beta)[:k]
    k_tables, k_over = random.split(rng_key)
    counts = jnp.concatenate([n, first[None]], 0)  # (K+1, K)
    sticky = jnp.concatenate([jnp.eye(k, dtype=beta.dtype), jnp.zeros((1, k), beta.dtype)], 0)
    conc = alpha * beta[None, :] + kappa * sticky
    m = sample_crp_tables(k_tables, counts.reshape(-1), conc.reshape(-1), max_total).reshape(k + 1, k)
    rho = kappa / (alpha + kappa)
    p_override = rho / (rho + beta * (1.0 - rho))
    m_diag = jnp.diagonal(m[:k])
    w = sample_binomial_counts(k_over, m_diag, p_override, max_total)  # sum(m) <= sum(counts) <= max_total
    w = jnp.where(kappa > 0, w, 0)
    mbar = m.at[jnp.arange(k), jnp.arange(k)].add(-w)
    return TableCounts(m=m, w=w, mbar=mbar)


def _log_beta_aux(rng_key, alpha, kappa, n, first):
    r"""Auxiliary ``r_j ~ Beta(alpha + kappa, n_j.)`` per state restaurant and ``r_0 ~ Beta(alpha, n_0)``
    for the start row; returns ``(sum_j log r_j, log r_0)`` over occupied restaurants.

    ``Gamma(c)/Gamma(c + n) ∝ int_0^1 r^{c-1} (1 - r)^{n-1} dr``: with ``r ~ Beta(c, n)`` the
    Gamma-function ratios of the restaurants' Dirichlet-multinomial become ``r^c`` factors.
    """
    dtype = jnp.result_type(alpha, kappa, float)
    start = jnp.sum(first)
    k_s, k_0 = random.split(rng_key)
    sum_log_r = _sum_log_beta_aux(k_s, alpha + kappa, jnp.sum(n, -1), dtype)
    r0 = draws.beta(k_0, jnp.asarray(alpha, dtype), jnp.maximum(start, 1).astype(dtype))
    log_r0 = jnp.where(start > 0, jnp.log(jnp.maximum(r0, jnp.finfo(dtype).tiny)), 0.0)
    return sum_log_r, log_r0


def _sum_log_beta_aux(rng_key, concentration, sizes, dtype):
    r"""``sum_j log r_j`` over the restaurants with ``sizes_j > 0``, ``r_j ~ Beta(c, sizes_j)``
    (Escobar & West 1995, eq. 14, one auxiliary per restaurant): the Gamma-function ratio
    ``Gamma(c) / Gamma(c + n_j)`` of each restaurant's likelihood as an ``r_j^c`` factor, so a
    Gamma prior on ``c`` stays conjugate.  ``sizes (J,)`` integers, ``concentration`` scalar."""
    r = draws.beta(rng_key, jnp.broadcast_to(concentration, sizes.shape).astype(dtype),
                   jnp.maximum(sizes, 1).astype(dtype))
    return jnp.sum(jnp.where(sizes > 0, jnp.log(jnp.maximum(r, jnp.finfo(dtype).tiny)), 0.0))


def _gamma_draw(key, shape, rate, dtype):
    return draws.gamma(key, jnp.asarray(shape, dtype), jnp.asarray(rate, dtype))


def resample_alpha_kappa(rng_key, alpha, kappa, tables: TableCounts, n, first, alpha_prior=None, kappa_prior=None):
    r"""Exact update of ``alpha ~ Gamma(a1, b1)`` and/or ``kappa ~ Gamma(a2, b2)`` (independent priors).

    The sticky CRF (Fox et al. eqs. 28-32) gives, with the start row ``Dir(alpha beta)``,
    ``p(alpha, kappa | m, w, n) ∝ p(alpha) p(kappa) alpha^{m.. - w.} kappa^{w.}
    prod_j Gamma(alpha + kappa)/Gamma(alpha + kappa + n_j.) * Gamma(alpha)/Gamma(alpha + n_0)``
    (each table either considered a dish through ``alpha beta`` or was overridden through
    ``kappa``; ``m..`` counts the start row's tables too).  With the ``Beta`` auxiliaries of
    :func:`_log_beta_aux` the two are conditionally independent Gammas:
    ``alpha ~ Gamma(a1 + m.. - w., b1 - sum_j log r_j - log r_0)``,
    ``kappa ~ Gamma(a2 + w., b2 - sum_j log r_j)``.  (Derived here; Fox et al. resample
    ``alpha + kappa`` and ``rho`` instead, see :func:`resample_c_rho`.)  A prior of ``None``
    keeps that parameter fixed.
    """
    k_aux, k_a, k_k = random.split(rng_key, 3)
    dtype = jnp.result_type(alpha, kappa, float)
    sum_log_r, log_r0 = _log_beta_aux(k_aux, alpha, kappa, n, first)
    m_total = jnp.sum(tables.m).astype(dtype)
    w_total = jnp.sum(tables.w).astype(dtype)
    if alpha_prior is not None:
        alpha = _gamma_draw(k_a, alpha_prior[0] + m_total - w_total, alpha_prior[1] - sum_log_r - log_r0, dtype)
    if kappa_prior is not None:
        kappa = _gamma_draw(k_k, kappa_prior[0] + w_total, kappa_prior[1] - sum_log_r, dtype)
    return alpha, kappa


def resample_c_rho(rng_key, alpha, kappa, tables: TableCounts, n, first, c_prior, rho_prior, num_mh: int = 32):
    r"""Exact update of ``c = alpha + kappa ~ Gamma(a, b)`` and ``rho = kappa / c ~ Beta(e, f)``.

    Fox et al. eqs. 50-53 (App. III), extended to the start row ``Dir(alpha beta)``, whose
    concentration ``alpha = (1 - rho) c`` couples the two.  With the auxiliaries of
    :func:`_log_beta_aux` (``r_0 ~ Beta((1 - rho) c, n_0)``):

    * ``c | rho, r ~ Gamma(a + m.., b - sum_j log r_j - (1 - rho) log r_0)`` (eq. 53 when there is
      no start row);
    * ``rho | c, r, w ∝ Beta(rho; e + w., f + m.. - w.) exp(-rho c log r_0)`` (eq. 50 times the
      start-row tilt), sampled by ``num_mh`` independence Metropolis-Hastings steps that propose
      from the Beta factor (acceptance ``exp(-c log r_0 (rho' - rho))``).

    Returns ``(alpha, kappa)``.
    """
    k_aux, k_c, k_mh = random.split(rng_key, 3)
    dtype = jnp.result_type(alpha, kappa, float)
    c = alpha + kappa
    rho = kappa / c
    sum_log_r, log_r0 = _log_beta_aux(k_aux, alpha, kappa, n, first)
    m_total = jnp.sum(tables.m).astype(dtype)
    w_total = jnp.sum(tables.w).astype(dtype)
    c = _gamma_draw(k_c, c_prior[0] + m_total, c_prior[1] - sum_log_r - (1.0 - rho) * log_r0, dtype)
    tilt = -c * log_r0  # >= 0
    a_post, b_post = rho_prior[0] + w_total, rho_prior[1] + m_total - w_total

    def mh(rho_cur, key):
        k_prop, k_acc = random.split(key)
        prop = draws.beta(k_prop, jnp.asarray(a_post, dtype), jnp.asarray(b_post, dtype))
        accept = jnp.log(random.uniform(k_acc, (), dtype)) < tilt * (prop - rho_cur)
        return jnp.where(accept, prop, rho_cur), None

    rho, _ = jax.lax.scan(mh, rho, random.split(k_mh, num_mh))
    return (1.0 - rho) * c, rho * c


def resample_gamma(rng_key, gamma, num_dishes, num_informative_tables, shape, rate):
    r"""Escobar-West update of ``gamma ~ Gamma(shape, rate)`` (Fox et al. eqs. 54-56, 92-93).

    Target ``p(gamma | Kbar, mbar..) ∝ p(gamma) gamma^Kbar Gamma(gamma) / Gamma(gamma + mbar..)``:
    ``eta ~ Beta(gamma + 1, mbar..)``, ``odds = (shape + Kbar - 1) / (mbar.. (rate - log eta))``,
    ``pi = odds / (1 + odds)``, ``gamma ~ pi Gamma(shape + Kbar, rate - log eta) + (1 - pi)
    Gamma(shape + Kbar - 1, rate - log eta)``.  The paper prints the odds as the mixing
    probability (notes erratum 3); the tests' negative control builds that variant itself.
    """
    k_eta, k_mix, k_g = random.split(rng_key, 3)
    dtype = jnp.result_type(gamma, float)
    mbar = jnp.maximum(num_informative_tables, 1).astype(dtype)
    eta = draws.beta(k_eta, jnp.asarray(gamma + 1.0, dtype), mbar)
    post_rate = rate - jnp.log(eta)
    odds = (shape + num_dishes - 1.0) / (mbar * post_rate)
    pi = odds / (1.0 + odds)
    extra = (random.uniform(k_mix, (), dtype) < pi).astype(dtype)
    g = draws.gamma(k_g, jnp.asarray(shape + num_dishes - 1.0 + extra, dtype), post_rate)
    # with no informative table the likelihood is flat: draw from the prior
    return jnp.where(num_informative_tables > 0, g, draws.gamma(k_g, jnp.asarray(shape, dtype), rate))


def resample_gamma_weak_limit(rng_key, gamma, mbar_dishes, capacity: int, shape, rate, max_total: int):
    r"""Exact update of ``gamma ~ Gamma(shape, rate)`` under the weak limit ``beta ~ Dir(gamma/L)``.

    Integrating ``beta`` out, the informative tables' dishes are Dirichlet-multinomial:
    ``p(mbar | gamma) ∝ Gamma(gamma)/Gamma(gamma + mbar..) prod_k Gamma(gamma/L + mbar_k)/Gamma(gamma/L)``.
    The product is augmented with top-level tables ``u_k ~ CRP-tables(mbar_k, gamma/L)``
    (:func:`sample_crp_tables`), after which ``gamma`` has the Antoniak form with
    ``Kbar = sum_k u_k`` and :func:`resample_gamma` applies.  As ``L -> inf``, ``u_k -> 1(mbar_k > 0)``
    and this reduces to Fox et al. eq. 56, which the paper uses (approximately) for the weak limit.
    """
    k_u, k_g = random.split(rng_key)
    mbar_dishes = jnp.asarray(mbar_dishes, jnp.int32)
    conc = jnp.broadcast_to(gamma / capacity, mbar_dishes.shape)
    u = sample_crp_tables(k_u, mbar_dishes, conc, max_total)
    return resample_gamma(k_g, gamma, jnp.sum(u), jnp.sum(mbar_dishes), shape, rate)


# ---------------------------------------------------------------------- rows given the states
def row_counts(n, first, dtype):
    """The transition counts ``n (K, K)`` and start counts ``first (K,)`` as the ``(K+1, K+1)``
    count matrix of the rows (start row last, nothing in the remainder column)."""
    capacity = first.shape[0]
    counts = jnp.zeros((capacity + 1, capacity + 1), dtype)
    return counts.at[:capacity, :capacity].set(n).at[capacity, :capacity].set(first)


def prior_row_concentrations(beta, alpha, kappa):
    """``(K+1, K+1)`` Dirichlet concentrations of the rows a priori: ``alpha beta + kappa e_j`` for
    the state rows and ``alpha beta`` for the start row (last), the last column being the mass of
    the states not represented (Fox et al. eqs. 26, 39)."""
    capacity = beta.shape[0] - 1
    sticky = jnp.eye(capacity + 1, dtype=beta.dtype).at[capacity, capacity].set(0.0)
    return alpha * beta[None, :] + kappa * sticky


def row_concentrations(beta, alpha, kappa, n, first):
    """``(K+1, K+1)`` Dirichlet concentrations of the rows given the states: ``alpha beta +
    kappa e_j + n_j.`` for the state rows and ``alpha beta + n_0.`` for the start row (last), the
    last column being the mass of the states not represented (Fox et al. eqs. 37, 41)."""
    return prior_row_concentrations(beta, alpha, kappa) + row_counts(n, first, beta.dtype)


def log_dirichlet_multinomial(concentration, counts):
    """``sum_j log [Gamma(c_j.) / Gamma(c_j. + n_j.) prod_k Gamma(c_jk + n_jk) / Gamma(c_jk)]``: the
    probability of the transitions with the rows ``Dir(c_j)`` integrated out (Fox et al. eq. 76); an
    atom with zero concentration takes no transition (``-inf`` if it does)."""
    positive = concentration > 0
    safe = jnp.where(positive, concentration, 1.0)
    atoms = jnp.where(positive, gammaln(safe + counts) - gammaln(safe), jnp.where(counts > 0, -jnp.inf, 0.0))
    total = jnp.sum(concentration, -1)
    return jnp.sum(gammaln(total) - gammaln(total + jnp.sum(counts, -1)) + jnp.sum(atoms, -1))


def sample_rows(rng_key, beta, alpha, kappa, n, first):
    """The rows ``pi_j ~ Dir(alpha beta + kappa e_j + n_j.)`` and the start row ``Dir(alpha beta +
    n_0.)`` (last) over (slots, rest), ``(K+1, K+1)`` (Fox et al. eqs. 37, 41)."""
    return draws.dirichlet(rng_key, row_concentrations(beta, alpha, kappa, n, first))


# ------------------------------------------------------------- hyperparameters given the tables
class Concentrations(NamedTuple):
    """The HDP-HMM's concentrations: ``gamma`` (top level), ``alpha`` (rows), ``kappa`` (self bias)."""

    gamma: jax.Array
    alpha: jax.Array
    kappa: jax.Array


class HyperPriors(NamedTuple):
    """``(shape, rate)`` of the Gamma priors (``rho``: ``(a, b)`` of its Beta prior) of the
    concentrations that get an exact auxiliary-variable update; ``None`` keeps one fixed.

    Either ``alpha`` and/or ``kappa`` (independent Gamma priors) or ``c = alpha + kappa`` and
    ``rho = kappa / c`` together (Fox et al. App. III), never both pairs."""

    gamma: Optional[Tuple] = None
    alpha: Optional[Tuple] = None
    kappa: Optional[Tuple] = None
    c: Optional[Tuple] = None
    rho: Optional[Tuple] = None


def resample_hyperparameters(rng_key, hyper: Concentrations, priors: HyperPriors, tables: TableCounts, n, first, *,
                             weak_limit: bool, max_total: int) -> Concentrations:
    """Exact auxiliary-variable updates of the concentrations with a prior in ``priors``, given
    the tables drawn at the current values (:func:`sample_table_counts`).

    ``alpha``/``kappa``: :func:`resample_alpha_kappa`; ``c``/``rho``: :func:`resample_c_rho`;
    ``gamma``: :func:`resample_gamma` with ``Kbar`` the number of dishes with an informative table
    (infinite model, Fox et al. eq. 56) or :func:`resample_gamma_weak_limit` (``weak_limit``:
    ``beta ~ Dir(gamma/L)``).  ``max_total`` bounds the number of informative tables (static).
    """
    k_conc, k_gamma = random.split(rng_key)
    gamma, alpha, kappa = hyper
    if priors.c is not None:
        alpha, kappa = resample_c_rho(k_conc, alpha, kappa, tables, n, first, priors.c, priors.rho)
    elif priors.alpha is not None or priors.kappa is not None:
        alpha, kappa = resample_alpha_kappa(k_conc, alpha, kappa, tables, n, first, priors.alpha, priors.kappa)
    if priors.gamma is not None:
        mbar_dishes = jnp.sum(tables.mbar, 0)
        if weak_limit:
            gamma = resample_gamma_weak_limit(k_gamma, gamma, mbar_dishes, mbar_dishes.shape[0], *priors.gamma, max_total)
        else:
            gamma = resample_gamma(k_gamma, gamma, jnp.sum(mbar_dishes > 0), jnp.sum(mbar_dishes), *priors.gamma)
    return Concentrations(gamma, alpha, kappa)


# ------------------------------------------------- collapsed updates (rows or beta integrated out)
#: the hyperparameter updates :func:`sample_global` offers (``"auxiliary"``: Fox et al.'s
#: auxiliary variables given the tables; ``"collapsed"``: slice sampling of the collapsed
#: conditionals)
HYPERPARAMETER_UPDATES = ("auxiliary", "collapsed")

#: slice widths of the collapsed updates, in log / logit space
_SLICE_WIDTH = 1.0


def log_states_given_beta(beta, alpha, kappa, n, first):
    r"""``log p(z | beta, alpha, kappa)`` with the transition rows integrated out.

    A product of Dirichlet-multinomials (Fox et al. eq. 76): state row ``j`` contributes
    ``log Gamma(alpha + kappa) - log Gamma(alpha + kappa + n_j.) + sum_k [log Gamma(alpha beta_k +
    kappa d_jk + n_jk) - log Gamma(alpha beta_k + kappa d_jk)]`` and the start row the same with
    ``alpha`` and the first states ``first``.  ``beta (K+1,)`` (last: the remaining mass),
    ``n (K, K)``, ``first (K,)``; a scalar (:func:`log_dirichlet_multinomial` of
    :func:`prior_row_concentrations`)."""
    return log_dirichlet_multinomial(prior_row_concentrations(beta, alpha, kappa), row_counts(n, first, beta.dtype))


def log_gamma_given_tables(gamma, mbar_dishes, *, weak_limit: bool):
    r"""``log p(mbar | gamma)`` up to a constant, ``beta`` integrated out: the likelihood of the
    top-level concentration given the informative tables ``mbar_dishes (K,)`` (``mbar_.k``).

    Infinite model (the top-level CRP's EPPF, Teh et al. 2006 eq. 20; Fox et al. eq. 54):
    ``Kbar log gamma + log Gamma(gamma) - log Gamma(gamma + mbar..)``, ``Kbar`` the dishes with an
    informative table.  Weak limit (``beta ~ Dir(gamma/L)``, Dirichlet-multinomial):
    ``log Gamma(gamma) - log Gamma(gamma + mbar..) + sum_k [log Gamma(gamma/L + mbar_.k) -
    log Gamma(gamma/L)]``."""
    dtype = jnp.result_type(gamma, float)
    mbar = jnp.asarray(mbar_dishes).astype(dtype)
    base = gammaln(gamma) - gammaln(gamma + jnp.sum(mbar))
    if weak_limit:
        share = gamma / mbar.shape[0]
        return base + jnp.sum(gammaln(share + mbar) - gammaln(share))
    return base + jnp.sum(mbar > 0).astype(dtype) * jnp.log(gamma)


def _log_gamma_prior(x, prior):
    """``log Gamma(x; shape, rate)`` up to a constant (``-inf`` for ``x <= 0``)."""
    shape, rate = prior
    return jnp.where(x > 0, (shape - 1.0) * jnp.log(x) - rate * x, -jnp.inf)


def sample_alpha_kappa_collapsed(rng_key, alpha, kappa, beta, n, first, priors: HyperPriors, num_cycles: int = 3):
    r"""Slice-sampling update of ``alpha`` and ``kappa`` from ``p(alpha, kappa | z, beta)`` with the
    rows integrated out (:func:`log_states_given_beta`): no tables, no auxiliary variables.

    With both free (``priors.alpha`` and ``priors.kappa`` Gamma, or ``priors.c`` Gamma and
    ``priors.rho`` Beta) the coordinates are ``u = log(alpha + kappa)`` and ``v = logit(rho)``,
    ``rho = kappa / (alpha + kappa)``, which the self-transition counts and the row totals
    identify nearly separately; the target in ``(u, v)`` is the prior times the likelihood times
    the Jacobian ``c^2 rho (1 - rho)`` (independent Gamma priors on ``alpha = (1 - rho) c`` and
    ``kappa = rho c``) or ``c rho (1 - rho)`` (priors on ``c`` and ``rho``).  With one of them free
    the coordinate is its log (Jacobian ``alpha`` or ``kappa``).  ``num_cycles`` sweeps of
    :func:`~numpyro_hdphmm._core.slice_sampling.coordinate_slice_sample`.  Returns ``(alpha, kappa)``.
    """
    dtype = beta.dtype
    alpha, kappa = jnp.asarray(alpha, dtype), jnp.asarray(kappa, dtype)
    loglik = lambda a, k: log_states_given_beta(beta, a, k, n, first)
    if priors.c is not None or (priors.alpha is not None and priors.kappa is not None):

        def log_target(x):
            c, log_rho, log_1m_rho = jnp.exp(x[0]), -jax.nn.softplus(-x[1]), -jax.nn.softplus(x[1])
            a, k = c * jnp.exp(log_1m_rho), c * jnp.exp(log_rho)
            if priors.c is not None:
                (e, f) = priors.rho
                prior = _log_gamma_prior(c, priors.c) + (e - 1.0) * log_rho + (f - 1.0) * log_1m_rho + x[0]
            else:
                prior = _log_gamma_prior(a, priors.alpha) + _log_gamma_prior(k, priors.kappa) + 2.0 * x[0]
            return prior + log_rho + log_1m_rho + loglik(a, k)

        c = alpha + kappa
        x = coordinate_slice_sample(rng_key, jnp.stack([jnp.log(c), jnp.log(kappa) - jnp.log(alpha)]), log_target,
                                    _SLICE_WIDTH, num_cycles)
        c, rho = jnp.exp(x[0]), jax.nn.sigmoid(x[1])
        return c * (1.0 - rho), c * rho
    if priors.alpha is not None:
        log_target = lambda x: _log_gamma_prior(jnp.exp(x[0]), priors.alpha) + x[0] + loglik(jnp.exp(x[0]), kappa)
        x = coordinate_slice_sample(rng_key, jnp.log(alpha)[None], log_target, _SLICE_WIDTH, num_cycles)
        return jnp.exp(x[0]), kappa
    if priors.kappa is not None:
        log_target = lambda x: _log_gamma_prior(jnp.exp(x[0]), priors.kappa) + x[0] + loglik(alpha, jnp.exp(x[0]))
        x = coordinate_slice_sample(rng_key, jnp.log(kappa)[None], log_target, _SLICE_WIDTH, num_cycles)
        return alpha, jnp.exp(x[0])
    return alpha, kappa


def sample_gamma_collapsed(rng_key, gamma, mbar_dishes, prior, *, weak_limit: bool, num_cycles: int = 3):
    r"""Slice-sampling update of ``gamma ~ Gamma(shape, rate)`` (``prior``) from ``p(gamma | mbar)``
    with ``beta`` integrated out (:func:`log_gamma_given_tables`), in ``log gamma`` (Jacobian
    ``gamma``): ``num_cycles`` updates, no auxiliary variables."""
    dtype = jnp.result_type(gamma, float)
    log_target = lambda x: (_log_gamma_prior(jnp.exp(x[0]), prior) + x[0]
                            + log_gamma_given_tables(jnp.exp(x[0]), mbar_dishes, weak_limit=weak_limit))
    x = coordinate_slice_sample(rng_key, jnp.log(jnp.asarray(gamma, dtype))[None], log_target, _SLICE_WIDTH, num_cycles)
    return jnp.exp(x[0])


def sample_beta(rng_key, mbar_dishes, gamma, *, weak_limit: bool):
    """``beta | tables``, ``(K+1,)`` (last: the mass of the states not represented).

    Infinite model: ``(beta_1..beta_K, beta_rem) ~ Dir(mbar_.1, ..., mbar_.K, gamma)`` (Teh et al.
    2006 eq. 37; Fox et al. eq. 36); a slot without informative tables gets exactly 0.  Weak
    limit: ``beta ~ Dir(gamma/L + mbar_.k)`` over the ``L`` states and 0 for the rest (Fox et al.
    eq. 41; the paper's Alg. 2 step 4 prints the index bound as K, it is L)."""
    dtype = jnp.result_type(gamma, float)
    mbar = mbar_dishes.astype(dtype)
    if weak_limit:
        head = draws.dirichlet(rng_key, gamma / mbar.shape[0] + mbar)
        return jnp.concatenate([head, jnp.zeros((1,), dtype)])
    return draws.dirichlet(rng_key, jnp.concatenate([mbar, jnp.asarray(gamma, dtype)[None]]))


def sample_shared_base(rng_key, counts, concentration, prior, max_total: int, scale_prior=None):
    r"""The shared base ``phi (C,)`` of a two-level emission prior, and its scale, given the
    emission counts.

    Model (the RCD paper's HCRP emission prior over a finite symbol set, Sec. 5.1; Teh et al.
    2006 Sec. 5 for the DP form): ``phi ~ Dir(prior)``, ``probs_k | phi ~ Dir(s phi)`` for every
    state, ``y_t | z_t = k ~ Cat(probs_k)``, optionally ``s ~ Gamma(a, b)``.  With the ``probs_k``
    integrated out, state ``k`` is a restaurant whose customers are its emissions ``n_kc``; given
    the tables ``m_kc ~ p(m | n_kc, s phi_c) ∝ s(n_kc, m) (s phi_c)^m`` (Antoniak 1974;
    :func:`sample_crp_tables`)

        p(phi, s | m, n) ∝ p(phi) prod_c phi_c^{m_.c} * p(s) s^{m..} prod_k Gamma(s) / Gamma(s + n_k.)

    (``sum_c phi_c = 1``), so ``phi | m ~ Dir(prior + m_.c)`` and, independently, with ``r_k ~
    Beta(s, n_k.)`` for the states that emit (``Gamma(s)/Gamma(s + n) ∝ int r^{s-1} (1-r)^{n-1}
    dr``), ``s ~ Gamma(a + m.., b - sum_k log r_k)`` (Teh et al. 2006 App. A; Escobar & West
    1995).  The draws leave ``p(phi, s | y, z)`` invariant (data augmentation: exact).

    ``counts (K, C)`` whole non-negative emission counts (rounded here); ``concentration (C,)``
    the current ``s phi``; ``prior (C,)`` ``> 0``; ``max_total >= sum(counts)`` (static, e.g. the
    number of steps); ``scale_prior``: ``(a, b)``, or ``None`` to keep ``s``.  Returns ``(phi (C,),
    s)``: ``phi`` floored at the smallest normal number (a share that underflowed in the draw;
    the density of ``phi`` stays finite), ``s`` the current ``sum(concentration)`` when kept.
    """
    k_tables, k_base, k_aux, k_scale = random.split(rng_key, 4)
    counts = jnp.round(jnp.asarray(counts)).astype(jnp.int32)
    num_states, num_symbols = counts.shape
    conc = jnp.broadcast_to(jnp.asarray(concentration), (num_states, num_symbols))
    dtype = conc.dtype
    m = sample_crp_tables(k_tables, counts.reshape(-1), conc.reshape(-1), max_total).reshape(num_states, num_symbols)
    phi = draws.dirichlet(k_base, jnp.asarray(prior, dtype) + jnp.sum(m, 0).astype(dtype), interior=True)
    scale = jnp.sum(conc[0])
    if scale_prior is not None:
        sum_log_r = _sum_log_beta_aux(k_aux, scale, jnp.sum(counts, -1), dtype)
        scale = _gamma_draw(k_scale, scale_prior[0] + jnp.sum(m).astype(dtype), scale_prior[1] - sum_log_r, dtype)
    return phi, scale


class GlobalDraw(NamedTuple):
    """Result of :func:`sample_global`: ``beta (K+1,)``, ``trans (K+1, K+1)``, the new
    :class:`Concentrations`, the tables they were drawn with, and the counts ``n``, ``first``."""

    beta: jax.Array
    trans: jax.Array
    hyper: Concentrations
    tables: TableCounts
    n: jax.Array
    first: jax.Array


def sample_global(rng_key, states, lengths, beta, hyper: Concentrations, priors: HyperPriors, *,
                  weak_limit: bool, hyperparameters: str = "auxiliary", hyper_cycles: int = 3,
                  gamma_cycles: int = 3) -> GlobalDraw:
    """The global step given the state sequences, shared by every sampler with explicit ``beta``.

    ``states (N, T)``, ``lengths (N,)``, ``beta (K+1,)`` current weights.

    ``hyperparameters="auxiliary"``: tables, overrides and informative tables with the rows
    integrated out (Fox et al. Alg. 1 step 3, eqs. 31-35, :func:`sample_table_counts`), the exact
    auxiliary-variable updates given them (:func:`resample_hyperparameters`), ``beta | tables``
    (:func:`sample_beta`) and the rows ``| counts`` (:func:`sample_rows`).  The first three form
    one draw from their joint conditional with the rows integrated out, the rows then from their
    full conditional, which leaves the joint posterior invariant.

    ``hyperparameters="collapsed"``: ``(alpha, kappa) | z, beta`` with the rows and the tables
    integrated out (:func:`sample_alpha_kappa_collapsed`), then the tables given the new values,
    ``gamma | mbar`` with ``beta`` integrated out (:func:`sample_gamma_collapsed`), ``beta |
    tables, gamma`` and the rows: a partially collapsed Gibbs sweep (each block is drawn from its
    conditional with the rows integrated out, and the rows last from their full conditional), so
    the joint posterior stays invariant.  ``hyper_cycles`` slice-sampling cycles of the
    ``(alpha, kappa)`` update (each density evaluation costs ``O(K^2)``) and ``gamma_cycles`` of
    the ``gamma`` update (``O(K)``); the weak-limit kernel, whose sweep is cheap, uses 1 and 3
    (``docs/benchmarks.md``, "Hyperparameter mixing": on the README's example 3 cycles of
    ``(alpha, kappa)`` cost about 30% more time per sweep for no ESS the targets need).
    Without the tables in the loop the concentrations no longer move by the small steps of
    auxiliary variables drawn at their current values.
    """
    if hyperparameters not in HYPERPARAMETER_UPDATES:
        raise ValueError(f"`hyperparameters` must be one of {HYPERPARAMETER_UPDATES}, got {hyperparameters!r}.")
    k_tables, k_hyper, k_beta, k_rows = random.split(rng_key, 4)
    capacity = beta.shape[0] - 1
    dtype = beta.dtype
    n, first = transition_counts(states, capacity, lengths)
    max_total = states.shape[0] * states.shape[1]
    if hyperparameters == "collapsed":
        k_ak, k_gamma = random.split(k_hyper)
        gamma, alpha, kappa = (jnp.asarray(v, dtype) for v in hyper)
        alpha, kappa = sample_alpha_kappa_collapsed(k_ak, alpha, kappa, beta, n, first, priors, hyper_cycles)
        tables = sample_table_counts(k_tables, n, first, beta, alpha, kappa, max_total)
        if priors.gamma is not None:
            gamma = sample_gamma_collapsed(k_gamma, gamma, jnp.sum(tables.mbar, 0), priors.gamma, weak_limit=weak_limit,
                                           num_cycles=gamma_cycles)
        hyper = Concentrations(gamma, alpha, kappa)
    else:
        tables = sample_table_counts(k_tables, n, first, beta, hyper.alpha, hyper.kappa, max_total)
        hyper = resample_hyperparameters(k_hyper, hyper, priors, tables, n, first, weak_limit=weak_limit,
                                         max_total=max_total)
    hyper = Concentrations(*(jnp.asarray(v, dtype) for v in hyper))
    beta = sample_beta(k_beta, jnp.sum(tables.mbar, 0), hyper.gamma, weak_limit=weak_limit).astype(dtype)
    trans = sample_rows(k_rows, beta, hyper.alpha, hyper.kappa, n, first)
    return GlobalDraw(beta, trans, hyper, tables, n, first)
