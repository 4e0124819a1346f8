r"""Stochastic collapsed variational inference for HMMs and HDP-HMMs: the shared numerics.

Wang & Blunsom (2014), "Stochastic collapsed variational inference for sequential data"
(its printed errors: ``docs/errata.md``, "Stochastic collapsed variational inference").  Notation: ``K`` states (the truncation), restaurants ``j = 0..K`` where
row ``K`` (LAST, the package's convention) is the start state ``z_0`` of the paper, dishes
``k = 0..K-1``; ``C_jk`` the number of transitions ``j -> k`` (the start row counts first
states), ``t_k(x, z)`` the emission sufficient statistics of state ``k``.

The pieces, each a pure jittable function:

* :func:`robbins_monro_step_size` and :func:`stochastic_average`: ``rho_n = (tau + n)^-kappa``
  and the weighted average ``(1 - rho) old + rho new`` of eqs. 11, 12, 14-16;
* :func:`log_mean_transitions` / :func:`expected_log_transitions`: the local update's
  transition term, zeroth-order collapsed ``log theta_hat`` (eq. 9) or the uncollapsed
  ``E_q[log theta]`` of stochastic VI (Foti et al. 2014);
* :func:`expected_counts`: forward-backward of a batch of sequences under a surrogate HMM,
  returning node marginals, expected transition counts (start row included) and, for the HDP
  update, the App. B statistics ``sum_t log(1 - q(z_{t-1} = j, z_t = k))``;
* :func:`crp_expected_tables`, :func:`expected_table_counts` (eqs. 19-22) and
  :func:`expected_log_eta` (eqs. 23-26): the "fast approximate" expected numbers of tables
  and expected log Beta auxiliaries on ``R`` replicates of a batch;
* :func:`stick_expectations`, :func:`geometric_pseudo_counts` (App. A) and
  :func:`hdp_update` (eqs. 14-16): the stochastic update of ``q(pi_tilde)``, ``q(alpha)`` and
  ``q(gamma)``;
* :func:`transition_merge_gains` and :func:`merge_pair`: the pieces of the merge move of
  :func:`~numpyro_hdphmm.infer.collapsed_svi.core.scvi_update` (the change of the collapsed
  transition evidence when two states become one, and the merge itself).

Everything is in log space where it matters (transitions, forward-backward, the probabilities
of "no customer"); no function tests the type of anything.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import digamma, gammaln

from numpyro_hdphmm._core.hmm import hmm_filter, hmm_smoother, hmm_smoother_fast

__all__ = [
    "robbins_monro_step_size",
    "stochastic_average",
    "log_mean_transitions",
    "expected_log_transitions",
    "ExpectedCounts",
    "expected_counts",
    "crp_expected_tables",
    "expected_table_counts",
    "expected_log_eta",
    "StickExpectations",
    "stick_expectations",
    "geometric_pseudo_counts",
    "HDPPosterior",
    "HDPPriors",
    "hdp_update",
    "hdp_kl",
    "transition_merge_gains",
    "merge_pair",
]


# ------------------------------------------------------------------------------ schedules
def robbins_monro_step_size(step, tau, kappa):
    r"""``rho_n = (tau + n)^(-kappa)`` (the paper's schedule with ``tau = 1``, Sec. 3; Hoffman
    et al. 2013 eq. 27 with a delay ``tau``).  ``n = step`` counts updates from 0, so with
    ``tau = 1`` the first update has ``rho_0 = 1`` and overwrites the random initialization.
    The Robbins-Monro conditions ``sum rho = inf``, ``sum rho^2 < inf`` hold for
    ``kappa in (0.5, 1]`` (the paper also runs ``kappa = 0.5``)."""
    dtype = jnp.result_type(tau, kappa, float)
    return jnp.power(jnp.asarray(tau, dtype) + jnp.asarray(step, dtype), -jnp.asarray(kappa, dtype))


def stochastic_average(old, new, rho):
    """``(1 - rho) old + rho new`` for every leaf of two pytrees of the same structure (eqs. 11,
    12, 14-16)."""
    return jax.tree_util.tree_map(lambda a, b: (1.0 - rho) * a + rho * b.astype(a.dtype), old, new)


# ------------------------------------------------------------------------ local transitions
def _row_pseudo_counts(pseudo_counts, kappa, num_states):
    """``(K+1, K)`` Dirichlet pseudo-counts of the rows: ``a_k (+ kappa [j = k])``; start row last
    without self bias."""
    a = jnp.broadcast_to(pseudo_counts, (num_states,))
    sticky = jnp.concatenate([jnp.eye(num_states, dtype=a.dtype), jnp.zeros((1, num_states), a.dtype)], 0)
    return a[None, :] + kappa * sticky


def log_mean_transitions(pseudo_counts, counts, kappa=0.0):
    r"""Zeroth-order collapsed transitions (eq. 9): ``log theta_hat_jk = log(a_k + kappa [j = k] +
    E[C_jk]) - log sum_l (a_l + kappa [j = l] + E[C_jl])``, normalized over the ``K`` represented
    states (the truncation; ``docs/errata.md``, "Stochastic collapsed variational inference" item 3).

    ``pseudo_counts``: ``a_k = G[alpha pi_k]`` (HDP-HMM) or a symmetric Dirichlet parameter
    (finite HMM), scalar or ``(K,)``; ``counts (K+1, K)`` expected counts, start row last;
    ``kappa``: the sticky self bias (0 in the paper).  Returns ``(K+1, K)``.  This is also the
    posterior mean of the rows given the counts.
    """
    conc = _row_pseudo_counts(pseudo_counts, kappa, counts.shape[-1]) + counts
    return jnp.log(conc) - jnp.log(jnp.sum(conc, -1, keepdims=True))


def expected_log_transitions(pseudo_counts, counts, kappa=0.0):
    r"""Uncollapsed stochastic VI (Foti et al. 2014; Beal 2003): ``E_q[log theta_jk] =
    psi(lambda_jk) - psi(sum_l lambda_jl)`` with ``q(theta_j) = Dir(lambda_j)``, ``lambda_jk = a_k
    + kappa [j = k] + E[C_jk]``.  Rows are sub-normalized (``sum_k exp < 1``).  ``(K+1, K)``."""
    conc = _row_pseudo_counts(pseudo_counts, kappa, counts.shape[-1]) + counts
    return digamma(conc) - digamma(jnp.sum(conc, -1, keepdims=True))


# --------------------------------------------------------------------- forward-backward
class ExpectedCounts(NamedTuple):
    r"""Result of :func:`expected_counts` for a batch ``(*B)`` of sequences.

    log_normalizer : (*B,)
        ``log Z_n = log sum_z prod_t theta_hat_{z_{t-1} z_t} phi_hat_{z_t}(x_t)``: the log
        normalizer of ``q(z^n)``, which is the zeroth-order collapsed ELBO of the sequence.
    marginals : (*B, T, K)
        ``q(z_t = k)``; 0 at padded steps ``t >= length``.
    transition_counts : (*B, K+1, K)
        ``E[C^n_jk] = sum_{t=1}^{L-1} q(z_{t-1} = j, z_t = k)`` for the state rows and
        ``q(z_0 = k)`` for the start row (last); sums to the length ``L`` of each sequence.
    log_no_transition : (*B, K+1, K) or None
        ``sum_t log(1 - q(z_{t-1} = j, z_t = k))``, eq. 21 (start row: ``log(1 - q(z_0 = k))``).
    log_no_departure : (*B, K+1) or None
        ``sum_{t=1}^{L-1} log(1 - q(z_{t-1} = j))``, eq. 25; ``-inf`` for the start row (every
        sequence leaves the start state).
    """

    log_normalizer: jax.Array
    marginals: jax.Array
    transition_counts: jax.Array
    log_no_transition: Optional[jax.Array] = None
    log_no_departure: Optional[jax.Array] = None


def _log1m(p):
    """``log(1 - p)`` for probabilities ``p`` (``-inf`` at ``p >= 1``)."""
    return jnp.where(p < 1.0, jnp.log1p(-jnp.minimum(p, 1.0)), -jnp.inf)


def _log_no_pair(log_filtered, smoothed, trans, length):
    r"""``log prod_{t=1}^{L-1} (1 - xi_t(i, j))`` for one sequence, ``(K, K)``, by one scan over time.

    ``xi_t(i, j) = q(z_t = j) p(z_{t-1} = i | z_t = j, x_{0:t-1})`` with the backward kernel
    ``p(z_{t-1} = i | z_t = j, x_{0:t-1}) = f_{t-1}(i) A(i, j) / sum_i' f_{t-1}(i') A(i', j)``
    (the Markov property; ``f`` the filtered marginals), so the ``(T, K, K)`` pairwise marginals
    are never stored.  The product is taken in probability space and its log at the end: ``K^2``
    logarithms per sequence instead of ``T K^2``.  A product that underflows to 0 gives ``-inf``,
    exact for its only use, ``q(C^(R) > 0) = 1 - prod^R`` (``prod < 1e-38`` there).
    """
    T, K = log_filtered.shape

    def step(prod, inp):
        t, lf_prev, g_t = inp
        f = jnp.exp(lf_prev - jnp.max(lf_prev))
        joint = f[:, None] * trans  # f_{t-1}(i) A(i, j)
        col = jnp.sum(joint, axis=0)
        xi = joint * jnp.where(col > 0, g_t / jnp.where(col > 0, col, 1.0), 0.0)[None, :]
        return jnp.where(t < length, prod * (1.0 - jnp.minimum(xi, 1.0)), prod), None

    prod, _ = lax.scan(step, jnp.ones((K, K), log_filtered.dtype),
                       (jnp.arange(1, T), log_filtered[:-1], smoothed[1:]))
    return jnp.where(prod > 0, jnp.log(jnp.where(prod > 0, prod, 1.0)), -jnp.inf)


def expected_counts(log_transitions, log_likelihoods, mask, lengths, pair_statistics: bool = False) -> ExpectedCounts:
    r"""Forward-backward of a batch of sequences under one surrogate HMM (eqs. 9-10 and the local
    statistics of Sec. 2.2; App. B eqs. 21 and 25 with ``pair_statistics``).

    Args:
        log_transitions: ``(K+1, K)`` ``log theta_hat`` (rows need not be normalized), start row last.
        log_likelihoods: ``(*B, T, K)`` ``log phi_hat_k(x_t)``.
        mask: ``(*B, T)`` bool, False where the observation is missing or padded.
        lengths: ``(*B,)`` int, steps ``t >= length`` are padding.
        pair_statistics: also return the App. B statistics (one more scan over the pairwise
            marginals; the HDP update needs them).

    The smoother is :func:`~numpyro_hdphmm._core.hmm.hmm_smoother_fast` (its expected transition
    counts are the state rows; the start row is ``q(z_0)``), with :func:`~numpyro_hdphmm._core.hmm.hmm_smoother`
    (and :func:`~numpyro_hdphmm._core.hmm.hmm_filter`) for the whole batch when a rescaled forward
    pass underflowed: the result is exact either way, and the batch pays for the log-space pass
    only when it needs it.  Returns :class:`ExpectedCounts`.
    """
    num_states = log_likelihoods.shape[-1]
    num_steps = log_likelihoods.shape[-2]
    log_init, log_a = log_transitions[num_states], log_transitions[:num_states]
    fast = hmm_smoother_fast(log_init, log_a, log_likelihoods, mask=mask, length=lengths)

    def exact():
        post = hmm_smoother(log_init, log_a, log_likelihoods, mask=mask, length=lengths, method="sequential")
        log_filtered = (hmm_filter(log_init, log_a, log_likelihoods, mask=mask, length=lengths,
                                   method="sequential").log_filtered if pair_statistics else fast.log_filtered)
        return post.log_smoothed, post.marginal_loglik, post.expected_transition_counts, log_filtered

    def quick():
        return fast.log_smoothed, fast.marginal_loglik, fast.expected_transition_counts, fast.log_filtered

    log_smoothed, loglik, state_counts, log_filtered = lax.cond(jnp.all(fast.ok), quick, exact)
    inside = jnp.arange(num_steps) < lengths[..., None]  # (*B, T)
    marginals = jnp.exp(log_smoothed) * inside[..., None]
    counts = jnp.concatenate([state_counts, marginals[..., :1, :]], axis=-2)
    if not pair_statistics:
        return ExpectedCounts(loglik, marginals, counts)
    batch = log_likelihoods.shape[:-2]
    flat = lambda a: a.reshape((-1,) + a.shape[len(batch):]) if batch else a[None]
    trans = jnp.exp(log_a - jnp.max(log_a))  # one global scale: rows need not be normalized
    pairs = jax.vmap(_log_no_pair, in_axes=(0, 0, None, 0))(
        flat(log_filtered), flat(marginals), trans, flat(jnp.asarray(lengths)))
    pairs = pairs.reshape(batch + pairs.shape[1:])
    start = _log1m(marginals[..., 0, :])  # (*B, K)
    no_transition = jnp.concatenate([pairs, start[..., None, :]], axis=-2)
    departs = jnp.arange(num_steps) < lengths[..., None] - 1  # steps 0..L-2 leave their state
    no_departure = jnp.sum(jnp.where(departs[..., None], _log1m(marginals), 0.0), axis=-2)
    no_departure = jnp.concatenate([no_departure, jnp.full(batch + (1,), -jnp.inf, no_departure.dtype)], axis=-1)
    return ExpectedCounts(loglik, marginals, counts, no_transition, no_departure)


# ------------------------------------------------------------------------------ tables
def crp_expected_tables(concentration, num_customers):
    r"""Exact expected number of tables of a CRP with concentration ``c`` after ``n`` customers:
    ``E[s] = sum_{i=0}^{n-1} c / (c + i) = c (psi(c + n) - psi(c))`` (Antoniak 1974; Teh et al.
    2008, the identity behind eq. 19), for real ``n >= 0`` (0 at ``n = 0``)."""
    c = jnp.asarray(concentration)
    safe = jnp.where(c > 0, c, 1.0)
    return jnp.where(c > 0, safe * (digamma(safe + num_customers) - digamma(safe)), 0.0)


def _replicated_occupancy(expected, log_no_customer, replicates):
    """``(q(C^(R) > 0), E_+[C^(R)])`` of App. B eqs. 20/22 (24/26)."""
    occupied = -jnp.expm1(replicates * log_no_customer)  # 1 - exp(R log q(C = 0))
    positive = occupied > 0
    expected_plus = jnp.where(positive, replicates * expected / jnp.where(positive, occupied, 1.0), 0.0)
    return occupied, expected_plus


def expected_table_counts(concentration, expected, log_no_customer, replicates):
    r"""The expected number of tables on ``R`` replicates of a batch, App. B eqs. 19-22:

    ``E[s^(R)] ~ c q(C^(R) > 0) (psi(c + E_+[C^(R)]) - psi(c))``, with
    ``q(C^(R) > 0) = 1 - exp(R log q(C = 0))`` and ``E_+[C^(R)] = R E[C] / q(C^(R) > 0)``.

    ``concentration``: ``c = G[alpha pi_k]`` (plus ``kappa`` on the sticky diagonal);
    ``expected``: ``E[C]`` of the batch; ``log_no_customer``: ``log q(C = 0)`` of the batch,
    ``sum_t log(1 - q(pair))`` (eq. 21, summed over the batch's sequences, which the
    approximation treats as independent); ``replicates``: ``R = N / batch size`` (the paper's
    artificial data set of ``N`` replicates of one sequence).  Elementwise, any shape.
    """
    occupied, expected_plus = _replicated_occupancy(expected, log_no_customer, replicates)
    return occupied * crp_expected_tables(concentration, expected_plus)


def expected_log_eta(concentration, expected, log_no_customer, replicates):
    r"""``E[log eta_j^(R)] ~ q(C_j.^(R) > 0) (psi(c) - psi(c + E_+[C_j.^(R)]))``, App. B eqs. 23-26,
    with ``c = E[alpha]`` (the paper; plus ``kappa`` for the sticky state rows), ``expected`` the
    restaurant sizes ``E[C_j.]`` and ``log_no_customer = sum_t log(1 - q(z_{t-1} = j))``.  The
    auxiliary ``eta_j ~ Beta(c, C_j.)`` turns ``Gamma(c) / Gamma(c + C_j.)`` into ``eta_j^c``."""
    occupied, expected_plus = _replicated_occupancy(expected, log_no_customer, replicates)
    return occupied * (digamma(concentration) - digamma(concentration + expected_plus))


# ------------------------------------------------------------------------------ sticks
class StickExpectations(NamedTuple):
    """``log_stick = E[log pi_tilde_k]``, ``log_rest = E[log(1 - pi_tilde_k)]`` (App. A eq. 17) and
    ``log_weight = E[log pi_k] = E[log pi_tilde_k] + sum_{l<k} E[log(1 - pi_tilde_l)]``, each ``(K,)``."""

    log_stick: jax.Array
    log_rest: jax.Array
    log_weight: jax.Array


def stick_expectations(u, v) -> StickExpectations:
    r"""Expectations under ``q(pi_tilde_k) = Beta(u_k, v_k)`` (App. A eq. 17)."""
    total = digamma(u + v)
    log_stick = digamma(u) - total
    log_rest = digamma(v) - total
    before = jnp.cumsum(log_rest) - log_rest
    return StickExpectations(log_stick, log_rest, log_stick + before)


class HDPPosterior(NamedTuple):
    """The variational posterior of the HDP's top level (eq. 13): ``q(pi_tilde_k) = Beta(u_k, v_k)``
    ``(K,)``, ``q(alpha) = Gamma(alpha_shape, alpha_rate)``, ``q(gamma) = Gamma(gamma_shape,
    gamma_rate)`` (rate parameterization), and ``pseudo_counts (K,)``: the ``G[alpha pi_k]`` the
    local update uses (the paper's 0.1 before the first HDP update)."""

    u: jax.Array
    v: jax.Array
    alpha_shape: jax.Array
    alpha_rate: jax.Array
    gamma_shape: jax.Array
    gamma_rate: jax.Array
    pseudo_counts: jax.Array


class HDPPriors(NamedTuple):
    """``(shape, rate)`` of the Gamma priors of ``alpha`` and ``gamma`` (``None``: a constant of the
    model, whose ``q`` is a point mass that never moves)."""

    alpha: Optional[tuple] = None
    gamma: Optional[tuple] = None


def _gamma_moments(shape, rate):
    """``(E[x], G[x] = exp E[log x])`` of ``Gamma(shape, rate)`` (App. A eq. 18)."""
    return shape / rate, jnp.exp(digamma(shape)) / rate


def geometric_pseudo_counts(posterior: HDPPosterior, priors: HDPPriors, alpha=None):
    r"""``G[alpha pi_k] = G[alpha] G[pi_k]`` (App. A): ``G[alpha] = exp(psi(a_alpha)) / b_alpha``
    (or the model's constant ``alpha``), ``G[pi_k] = exp(E[log pi_k])``.  ``(K,)``."""
    g_pi = jnp.exp(stick_expectations(posterior.u, posterior.v).log_weight)
    g_alpha = alpha if priors.alpha is None else _gamma_moments(posterior.alpha_shape, posterior.alpha_rate)[1]
    return g_alpha * g_pi


def hdp_update(posterior: HDPPosterior, priors: HDPPriors, counts, log_no_transition, log_no_departure,
               replicates, rho, *, alpha=None, gamma=None, kappa=0.0) -> HDPPosterior:
    r"""The stochastic update of ``q(pi_tilde)``, ``q(alpha)``, ``q(gamma)`` from one large batch
    (eqs. 14-16 with App. B), in the paper's order ``u, v -> alpha -> gamma``.

    ``counts (K+1, K)``: the batch's summed ``E[C^n]`` (start row last); ``log_no_transition (K+1,
    K)``, ``log_no_departure (K+1,)``: the batch's summed App. B statistics
    (:class:`ExpectedCounts`); ``replicates``: ``R = N / (sequences in the batch)`` (with
    statistics already scaled to the data set, e.g. stratified minibatches each weighted by
    ``N_b / M_b``: ``R = 1``); ``rho``: the step size; ``alpha``/``gamma``: the model's constants
    where :class:`HDPPriors` has no prior.

    1. tables ``E[s_jk] ~ c_jk q(C > 0) (psi(c_jk + E_+C) - psi(c_jk))`` (eq. 19) with ``c_jk =
       G[alpha pi_k] + kappa [j = k]``.  Sticky extension (``kappa > 0``, not in the paper): a
       diagonal table's dish was an override with probability ``kappa / (G[alpha pi_k] + kappa)``
       (Fox et al. eq. 34 at the geometric means); the informative tables ``mbar`` drop them.
    2. ``u_k <- (1-rho) u_k + rho (1 + E[mbar_.k])``, ``v_k <- (1-rho) v_k + rho (E[gamma] +
       sum_{l>k} E[mbar_.l])`` (eq. 14).
    3. ``a_alpha <- (1-rho) a_alpha + rho (a0 + E[mbar_..])``, ``b_alpha <- (1-rho) b_alpha + rho
       (b0 - sum_j E[log eta_j])`` (eq. 15), ``E[log eta_j]`` by eq. 23 with ``E[alpha]`` (+ kappa for
       the state rows).
    4. ``a_gamma <- (1-rho) a_gamma + rho (a0 + K)``, ``b_gamma <- (1-rho) b_gamma + rho (b0 -
       sum_k E[log(1 - pi_tilde_k)])`` (eq. 16) at the new ``u, v``.
    5. ``pseudo_counts = G[alpha pi_k]`` at the new posterior.
    """
    num_states = counts.shape[-1]
    dtype = counts.dtype
    g_ap = posterior.pseudo_counts
    sticky = jnp.concatenate([jnp.eye(num_states, dtype=dtype), jnp.zeros((1, num_states), dtype)], 0)
    conc = g_ap[None, :] + kappa * sticky
    tables = expected_table_counts(conc, counts, log_no_transition, replicates)
    override = jnp.where(sticky > 0, kappa / (g_ap[None, :] + kappa), 0.0) if kappa else 0.0
    informative = tables * (1.0 - override)
    dish = jnp.sum(informative, axis=0)  # E[mbar_.k]
    after = jnp.sum(dish) - jnp.cumsum(dish)  # sum_{l > k}
    e_gamma = gamma if priors.gamma is None else posterior.gamma_shape / posterior.gamma_rate
    u = (1.0 - rho) * posterior.u + rho * (1.0 + dish)
    v = (1.0 - rho) * posterior.v + rho * (e_gamma + after)
    alpha_shape, alpha_rate = posterior.alpha_shape, posterior.alpha_rate
    if priors.alpha is not None:
        e_alpha = posterior.alpha_shape / posterior.alpha_rate
        eta_conc = e_alpha + kappa * jnp.concatenate([jnp.ones((num_states,), dtype), jnp.zeros((1,), dtype)])
        log_eta = expected_log_eta(eta_conc, jnp.sum(counts, -1), log_no_departure, replicates)
        alpha_shape = (1.0 - rho) * alpha_shape + rho * (priors.alpha[0] + jnp.sum(informative))
        alpha_rate = (1.0 - rho) * alpha_rate + rho * (priors.alpha[1] - jnp.sum(log_eta))
    gamma_shape, gamma_rate = posterior.gamma_shape, posterior.gamma_rate
    if priors.gamma is not None:
        log_rest = stick_expectations(u, v).log_rest
        gamma_shape = (1.0 - rho) * gamma_shape + rho * (priors.gamma[0] + num_states)
        gamma_rate = (1.0 - rho) * gamma_rate + rho * (priors.gamma[1] - jnp.sum(log_rest))
    new = HDPPosterior(u, v, alpha_shape, alpha_rate, gamma_shape, gamma_rate, g_ap)
    return new._replace(pseudo_counts=geometric_pseudo_counts(new, priors, alpha).astype(g_ap.dtype))


def _kl_gamma(shape_q, rate_q, shape_p, rate_p):
    """``KL(Gamma(a_q, b_q) || Gamma(a_p, b_p))`` (rate parameterization)."""
    return ((shape_q - shape_p) * digamma(shape_q) - gammaln(shape_q) + gammaln(shape_p)
            + shape_p * (jnp.log(rate_q) - jnp.log(rate_p)) + shape_q * (rate_p - rate_q) / rate_q)


def hdp_kl(posterior: HDPPosterior, priors: HDPPriors, gamma=None):
    r"""``KL(q(pi_tilde) q(alpha) q(gamma) || p)`` with ``p(pi_tilde_k | gamma) = Beta(1, gamma)`` and
    the Gamma priors: ``sum_k E_q[log q(pi_tilde_k) - log p(pi_tilde_k | gamma)]`` (``E[log gamma]``,
    ``E[gamma]`` under ``q(gamma)`` or at the constant) plus the Gamma-Gamma KLs.  The top-level
    terms of the collapsed ELBO (eq. 8) that the local log normalizers do not hold."""
    st = stick_expectations(posterior.u, posterior.v)
    if priors.gamma is None:
        e_gamma, e_log_gamma = gamma, jnp.log(gamma)
    else:
        e_gamma = posterior.gamma_shape / posterior.gamma_rate
        e_log_gamma = digamma(posterior.gamma_shape) - jnp.log(posterior.gamma_rate)
    log_b = gammaln(posterior.u) + gammaln(posterior.v) - gammaln(posterior.u + posterior.v)
    log_q = -log_b + (posterior.u - 1.0) * st.log_stick + (posterior.v - 1.0) * st.log_rest
    log_p = e_log_gamma + (e_gamma - 1.0) * st.log_rest
    kl = jnp.sum(log_q - log_p)
    if priors.alpha is not None:
        kl = kl + _kl_gamma(posterior.alpha_shape, posterior.alpha_rate, *priors.alpha)
    if priors.gamma is not None:
        kl = kl + _kl_gamma(posterior.gamma_shape, posterior.gamma_rate, *priors.gamma)
    return kl


# --------------------------------------------------------------------- merge moves
def transition_merge_gains(pseudo_counts, counts, kappa=0.0):
    r"""``(K, K)`` change of the collapsed transition term when state ``j`` is merged into state
    ``i`` (entry ``[i, j]``; the diagonal is ``-inf``).

    The term is the Dirichlet-multinomial evidence of the rows at the counts (integers or not),
    ``sum_r [log G(A_r) - log G(A_r + N_r) + sum_k log G(P_rk + C_rk) - log G(P_rk)]`` with
    ``P_rk = a_k + kappa [r = k]`` (:func:`log_mean_transitions`'s pseudo-counts, start row last
    without self bias), ``A_r = sum_k P_rk``, ``N_r = sum_k C_rk``, ``counts (K+1, K)``
    ``C``.  The merge adds column ``j`` to column ``i`` in every row and row ``j`` to row ``i``
    (the pseudo-counts held fixed: state ``j`` keeps ``a_j`` and no counts).  Every row other than
    ``i`` and ``j`` changes in two entries, rows ``i`` and ``j`` become one row, so each gain costs
    ``O(K)``: ``O(K^3)`` time and memory for all pairs, against ``O(K^4)`` by recomputing the term
    after each merge (the test compares the two).
    """
    K = counts.shape[-1]
    P = _row_pseudo_counts(pseudo_counts, kappa, K)
    a = jnp.broadcast_to(pseudo_counts, (K,)).astype(counts.dtype)
    A, N = jnp.sum(P, -1), jnp.sum(counts, -1)  # (K+1,)
    row_value = gammaln(A) - gammaln(A + N) + jnp.sum(gammaln(P + counts) - gammaln(P), -1)  # (K+1,)
    # columns j into i in row r: G[r, i, j]
    own = gammaln(P + counts)  # (K+1, K)
    joined = gammaln(P[:, :, None] + counts[:, :, None] + counts[:, None, :])  # (K+1, K_i, K_j)
    G = joined - own[:, :, None] - own[:, None, :] + gammaln(P)[:, None, :]
    rows = jnp.arange(K)
    in_row_i = G[rows[:, None], rows[:, None], rows[None, :]]  # G[i, i, j]
    in_row_j = G[rows[None, :], rows[:, None], rows[None, :]]  # G[j, i, j]
    columns = jnp.sum(G, 0) - in_row_i - in_row_j
    # rows i and j as one row: columns k != i, j summed; the merged self entry with a_i + kappa
    state_counts = counts[:K]
    pair_rows = state_counts[:, None, :] + state_counts[None, :, :]  # (K_i, K_j, K) C_ik + C_jk
    F = gammaln(a + pair_rows) - gammaln(a)  # (K_i, K_j, K)
    off = jnp.sum(F, -1) - F[rows[:, None], rows[None, :], rows[:, None]] - F[rows[:, None], rows[None, :], rows[None, :]]
    self_count = (state_counts[rows[:, None], rows[:, None]] + state_counts[rows[:, None], rows[None, :]]
                  + state_counts[rows[None, :], rows[:, None]] + state_counts[rows[None, :], rows[None, :]])
    A_state = jnp.sum(a) + kappa
    merged = (gammaln(A_state) - gammaln(A_state + N[:K, None] + N[None, :K]) + off
              + gammaln(a[:, None] + kappa + self_count) - gammaln(a[:, None] + kappa))
    gains = columns + merged - row_value[:K, None] - row_value[None, :K]
    return jnp.where(jnp.eye(K, dtype=bool), -jnp.inf, gains)


def merge_pair(counts, stats, i, j):
    """Merge state ``j`` into state ``i``: ``counts (K+1, K)`` column ``j`` added to column ``i``
    and row ``j`` to row ``i``, ``stats`` (pytree, leading axis ``K``) row ``j`` added to row
    ``i``; state ``j`` left with no counts and zero statistics."""
    counts = counts.at[:, i].add(counts[:, j]).at[:, j].set(0.0)
    counts = counts.at[i].add(counts[j]).at[j].set(0.0)
    stats = jax.tree_util.tree_map(lambda s: s.at[i].add(s[j]).at[j].set(jnp.zeros_like(s[j])), stats)
    return counts, stats
