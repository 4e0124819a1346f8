"""CollapsedSVI (Wang & Blunsom 2014): the local step against exact enumeration, one full-batch
update with rho = 1 against an independently written batch zeroth-order collapsed iteration, the
App. B expected table counts against exact CRP expectations, the HDP update (eq. 14) at known
counts, the emission families' expected-statistics terms against Monte Carlo, recovery of a
simulated HMM, and the API (errors, downstream methods)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax.scipy.special import logsumexp
from scipy.optimize import linear_sum_assignment
from scipy.special import digamma

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import crp, cvi
from numpyro_hdphmm._core.crp import transition_counts
from numpyro_hdphmm._core.hmm import hmm_filter, hmm_smoother_fast
from numpyro_hdphmm.infer import CollapsedSVI, CollapsedSVIState, RobbinsMonro
from numpyro_hdphmm.infer.collapsed_svi import Minibatch, length_strata, merge_states, scvi_update
from numpyro_hdphmm.infer.plumbing.discovery import SequenceData

E = nh.emissions


# ------------------------------------------------------------------------- exact references
def enumerate_hmm(log_trans, log_lik, length):
    """Brute force over every path of one sequence: ``(log Z, marginals (T, K), counts (K+1, K),
    pair probabilities (L, K, K))`` of ``q(z) ∝ prod_t exp(log_trans[z_{t-1}, z_t] + log_lik[t, z_t])``
    with the start row ``K`` (last)."""
    K = log_lik.shape[-1]
    T = log_lik.shape[0]
    paths = list(itertools.product(range(K), repeat=length))
    logw = np.array([log_trans[K, z[0]] + log_lik[0, z[0]]
                     + sum(log_trans[z[t - 1], z[t]] + log_lik[t, z[t]] for t in range(1, length)) for z in paths])
    log_z = logsumexp(logw)
    w = np.exp(logw - log_z)
    marg, counts, pairs = np.zeros((T, K)), np.zeros((K + 1, K)), np.zeros((length, K, K))
    for p, z in zip(w, paths):
        counts[K, z[0]] += p
        for t in range(length):
            marg[t, z[t]] += p
        for t in range(1, length):
            counts[z[t - 1], z[t]] += p
            pairs[t, z[t - 1], z[t]] += p
    return float(log_z), marg, counts, pairs


def assert_local_step_exact(log_trans, log_lik, lengths, mask, atol):
    """``expected_counts`` on a batch equals :func:`enumerate_hmm` sequence by sequence: log
    normalizers, node marginals, expected counts (summing to the length) and the eq. 21/25
    statistics (start rows included)."""
    K = log_lik.shape[-1]
    out = cvi.expected_counts(jnp.asarray(log_trans), jnp.asarray(log_lik), mask, jnp.asarray(lengths),
                              pair_statistics=True)
    for n, L in enumerate(lengths):
        log_z, marg, counts, pairs = enumerate_hmm(log_trans, log_lik[n], L)
        np.testing.assert_allclose(out.log_normalizer[n], log_z, rtol=1e-10)
        np.testing.assert_allclose(out.marginals[n], marg, atol=atol)
        np.testing.assert_allclose(out.transition_counts[n], counts, atol=atol)
        np.testing.assert_allclose(np.sum(out.transition_counts[n]), L, rtol=1e-12)
        np.testing.assert_allclose(out.log_no_transition[n][:K], np.sum(np.log1p(-pairs[1:]), 0), atol=atol)
        np.testing.assert_allclose(out.log_no_transition[n][K], np.log1p(-marg[0]), atol=atol)
        np.testing.assert_allclose(out.log_no_departure[n][:K], np.sum(np.log1p(-marg[:L - 1]), 0), atol=atol)


def test_local_step_matches_enumeration():
    """``expected_counts``: log normalizers, node marginals, expected transition counts (start row
    included) and the eq. 21/25 statistics equal brute-force enumeration; counts sum to the lengths.
    Rows deliberately not normalized (the uncollapsed local step's are sub-normalized)."""
    rng = np.random.default_rng(0)
    K, T = 3, 5
    log_trans = np.log(rng.dirichlet(np.ones(K), size=K + 1)) - 0.3 * rng.uniform(size=(K + 1, 1))
    log_lik = np.log(rng.uniform(0.05, 1.0, size=(2, T, K)))
    lengths = np.array([5, 3])
    mask = np.arange(T) < lengths[:, None]
    assert_local_step_exact(log_trans, log_lik, lengths, jnp.asarray(mask), atol=1e-10)


def test_local_step_log_space_fallback_matches_enumeration():
    """When the rescaled forward pass underflows (state 0 nearly absorbing, then an observation
    that rules it out, ``exp(-800)``), ``hmm_smoother_fast`` reports ``ok = False`` and
    ``expected_counts`` takes the log-space smoother for the batch: still exact."""
    K, T = 3, 5
    log_trans = np.log(np.array([[1 - 2e-300, 1e-300, 1e-300], [0.3, 0.4, 0.3], [0.3, 0.3, 0.4],
                                 [1 - 2e-300, 1e-300, 1e-300]]))
    log_lik = np.zeros((2, T, K))
    log_lik[:, 2, 0] = -800.0
    lengths = np.array([5, 3])
    mask = jnp.asarray(np.arange(T) < lengths[:, None])
    fast = hmm_smoother_fast(log_trans[K], log_trans[:K], jnp.asarray(log_lik), mask=mask, length=jnp.asarray(lengths))
    assert not np.any(np.asarray(fast.ok))
    assert_local_step_exact(log_trans, log_lik, lengths, mask, atol=1e-12)


# ------------------------------------------------------- one update = one batch CVB0 iteration
def forward_backward(log_trans, log_lik, length):
    """Reference smoother, independent of the package: scaled forward-backward in probability space
    (Rabiner 1989 eqs. 91-93) over the first ``length`` steps.  Returns ``(log Z, marginals (T, K),
    expected counts (K+1, K))``, the start row ``K`` last."""
    K, T = log_lik.shape[1], log_lik.shape[0]
    theta = np.exp(log_trans)
    lik = np.exp(log_lik[:length])
    fwd, scale = np.zeros((length, K)), np.zeros(length)
    f = theta[K] * lik[0]
    for t in range(length):
        if t:
            f = (fwd[t - 1] @ theta[:K]) * lik[t]
        scale[t] = f.sum()
        fwd[t] = f / scale[t]
    bwd = np.ones((length, K))
    for t in range(length - 2, -1, -1):
        bwd[t] = theta[:K] @ (lik[t + 1] * bwd[t + 1]) / scale[t + 1]
    marg = np.zeros((T, K))
    marg[:length] = fwd * bwd
    counts = np.zeros((K + 1, K))
    counts[K] = marg[0]
    for t in range(1, length):
        counts[:K] += fwd[t - 1][:, None] * theta[:K] * (lik[t] * bwd[t])[None, :] / scale[t]
    return float(np.sum(np.log(scale))), marg, counts


def test_reference_smoother_matches_enumeration():
    """The test's own forward-backward (used below) against enumeration."""
    rng = np.random.default_rng(5)
    log_trans = np.log(rng.dirichlet(np.ones(3), size=4))
    log_lik = np.log(rng.uniform(0.05, 1.0, size=(6, 3)))
    for got, ref in zip(forward_backward(log_trans, log_lik, 4), enumerate_hmm(log_trans, log_lik, 4)):
        np.testing.assert_allclose(got, ref, atol=1e-12)


K_TRUE, C_SIM, PRIOR, EMIT_CONC = 3, 6, 0.1, 0.5


def batch_cvb0_iteration(trans_counts, emit_counts, y, lengths, prior=PRIOR):
    """One batch zeroth-order collapsed iteration of the finite HMM, written from eqs. 9-12 with
    rho = 1 and the given sequences as the data set: ``theta_hat_jk = (a + E[C_jk]) / sum_l (a +
    E[C_jl])`` (``a = prior``, scalar or ``(K,)``), ``phi_hat_kw = (b + E[n_kw]) / (W b + E[n_k.])``, ``q(z^n)`` by the reference
    forward-backward, the sequences' own counts not subtracted, and the new statistics the sums of
    the sequences' expected counts.  Returns ``(counts, emission counts, sum_n log Z_n)``."""
    K = trans_counts.shape[1]
    theta = (prior + trans_counts) / np.sum(prior + trans_counts, -1, keepdims=True)
    phi = (EMIT_CONC + emit_counts) / np.sum(EMIT_CONC + emit_counts, -1, keepdims=True)
    new_c, new_e, total = np.zeros((K + 1, K)), np.zeros((K, emit_counts.shape[1])), 0.0
    for seq, L in zip(y, lengths):
        log_z, marg, counts = forward_backward(np.log(theta), np.log(phi[:, seq].T), L)
        new_c += counts
        np.add.at(new_e.T, seq[:L], marg[:L])
        total += log_z
    return new_c, new_e, total


@pytest.fixture(scope="module")
def fitted_setup(simulated):
    """The finite-HMM fitter initialized on the simulated training set (rho = 1, full batch), its
    prepared data, and a random start of the global statistics."""
    (y, lengths, _, _), _ = simulated
    svi = CollapsedSVI(sim_model, num_states=K_TRUE, hdp=False, step_size=1.0, transition_prior=PRIOR)
    state = svi.init(jax.random.key(0), y, lengths)
    x, valid = jax.vmap(svi.emission.prepare)(jnp.asarray(y))
    valid = valid & (jnp.arange(y.shape[1]) < jnp.asarray(lengths)[:, None])
    data = SequenceData(None, x, valid, jnp.asarray(lengths))
    rng = np.random.default_rng(1)
    trans_counts = rng.exponential(size=(K_TRUE + 1, K_TRUE)) * 30
    emit_counts = rng.exponential(size=(K_TRUE, C_SIM)) * 30
    state = state._replace(transition_counts=jnp.asarray(trans_counts),
                           emission_stats={"counts": jnp.asarray(emit_counts), "total": jnp.sum(emit_counts, -1)})
    return svi, state, data, trans_counts, emit_counts


def test_full_batch_update_is_batch_cvb0_iteration(fitted_setup, simulated):
    """``CollapsedSVI.update`` on the whole data set (60 sequences of lengths 15-30, padded) with
    rho = 1 is one batch zeroth-order collapsed iteration; the loss is ``-sum_n log Z_n``."""
    (y, lengths, _, _), _ = simulated
    svi, state, _, trans_counts, emit_counts = fitted_setup
    new, loss = svi.update(state, y, lengths)
    ref_c, ref_e, ref_total = batch_cvb0_iteration(trans_counts, emit_counts, y, lengths)
    np.testing.assert_allclose(new.transition_counts, ref_c, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(new.emission_stats["counts"], ref_e, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(new.emission_stats["total"], ref_e.sum(-1), rtol=1e-9)
    np.testing.assert_allclose(-loss, ref_total, rtol=1e-10)  # finite HMM: no top-level KL
    np.testing.assert_allclose(np.sum(new.transition_counts), np.sum(lengths), rtol=1e-12)
    assert int(new.step) == 1


def test_full_batch_comparison_detects_unnormalized_rows(fitted_setup, simulated, monkeypatch):
    """Negative control: eq. 9 read literally (``theta_hat ∝`` left unnormalized, notes/scvi.md §2.2)
    changes q(z^n), and the comparison above fails (the pure core, traced afresh)."""
    (y, lengths, _, _), _ = simulated
    svi, state, data, trans_counts, emit_counts = fitted_setup
    ref_c, _, _ = batch_cvb0_iteration(trans_counts, emit_counts, y, lengths)
    update = lambda: jax.jit(lambda s, d, e: scvi_update(s, Minibatch(d, 1.0), e, svi.config))(state, data, svi.emission)
    np.testing.assert_allclose(update()[0].transition_counts, ref_c, rtol=1e-9)
    monkeypatch.setattr(cvi, "log_mean_transitions", lambda a, counts, kappa=0.0: jnp.log(a + counts))
    bad = np.asarray(update()[0].transition_counts)
    assert np.max(np.abs(bad - ref_c)) > 1e-2


def test_full_batch_objective_increases(fitted_setup, simulated):
    """Repeated full-batch updates with rho = 1 (batch CVB0): the objective ``sum_n log Z_n`` does
    not decrease (measured: strictly increasing over 15 iterations from the random start)."""
    (y, lengths, _, _), _ = simulated
    svi, state, _, _, _ = fitted_setup
    losses = []
    for _ in range(15):
        state, loss = svi.update(state, y, lengths)
        losses.append(float(loss))
    assert np.all(np.diff(losses) <= 1e-8 * np.abs(losses[1:])), losses


def test_stochastic_average_and_scale(fitted_setup, simulated):
    """With rho < 1 and a minibatch of M of N sequences: ``(1 - rho) old + rho (N / M) sum_B`` (eqs.
    11-12, minibatch form; the pure core with a minibatch of 4 sequences standing for 15 each), and
    ``rho_n`` taken at the state's update count."""
    (y, lengths, _, _), _ = simulated
    svi, state, data, trans_counts, emit_counts = fitted_setup
    four = SequenceData(None, data.x[:4], data.valid[:4], data.lengths[:4])
    config = svi.config._replace(step_size=RobbinsMonro(1.0, 0.5))
    new, _ = jax.jit(lambda s, d, e: scvi_update(s, Minibatch(d, 15.0), e, config))(
        state._replace(step=jnp.asarray(3, jnp.int32)), four, svi.emission)
    ref_c, ref_e, _ = batch_cvb0_iteration(trans_counts, emit_counts, y[:4], lengths[:4])
    rho = 4.0 ** -0.5
    np.testing.assert_allclose(new.transition_counts, (1 - rho) * trans_counts + rho * 15.0 * ref_c, rtol=1e-9)
    np.testing.assert_allclose(new.emission_stats["counts"], (1 - rho) * emit_counts + rho * 15.0 * ref_e, rtol=1e-9)
    assert int(new.step) == 4


def test_robbins_monro_schedule():
    rho = RobbinsMonro(1.0, 0.7)
    np.testing.assert_allclose([rho(n) for n in range(4)], [(1.0 + n) ** -0.7 for n in range(4)])
    np.testing.assert_allclose(RobbinsMonro(4.0, 0.5)(5), 9.0 ** -0.5)


# -------------------------------------------------------------------- HDP: tables and sticks
def exact_crp_tables(c, n):
    """``E[#tables]`` of a CRP(c) after n customers, by the seating recursion (customer i opens a
    table with probability c / (c + i))."""
    return sum(c / (c + i) for i in range(n))


def test_expected_tables_exact_crp():
    for c in (0.1, 1.0, 7.5):
        for n in (0, 1, 5, 40):
            np.testing.assert_allclose(cvi.crp_expected_tables(c, float(n)), exact_crp_tables(c, n), rtol=1e-10)
    # App. B with a certainly occupied restaurant (q(C = 0) = 0) and R replicates: exact
    np.testing.assert_allclose(cvi.expected_table_counts(2.0, 3.0, -jnp.inf, 4.0), exact_crp_tables(2.0, 12), rtol=1e-10)


def test_expected_tables_against_exact_expectation_over_counts():
    """Eqs. 19-22 against the exact ``E_C[E[s | C]]`` where ``C`` counts independent pairs (the
    independence the approximation assumes, eq. 21): ``C = sum_t Bernoulli(p_t)`` over 12 steps on
    ``R`` replicates.  Measured relative errors of the approximation (Teh et al. 2008):

    * frequent pairs (``p_t`` in 0.02-0.6): 3.6% (c = 0.5) and 4.2% (c = 2) for ``R = 1``, 0.03%
      and 0.05% for ``R = 50`` (the occupancy term is then 1 and the error Jensen's gap);
    * rare pairs (``p_t`` in 0.005-0.08): 2.1% and 2.0% for ``R = 1``, 5.0% for ``R = 5``, where
      dropping the occupancy term ``q(C > 0)`` (eq. 20) would be 68%, 22% and 14% off.
    """
    for (lo, hi), c, R, tol in (((0.02, 0.6), 0.5, 1, 0.06), ((0.02, 0.6), 2.0, 1, 0.06),
                                ((0.02, 0.6), 0.5, 50, 0.002), ((0.02, 0.6), 2.0, 50, 0.002),
                                ((0.005, 0.08), 0.5, 1, 0.03), ((0.005, 0.08), 2.0, 1, 0.03),
                                ((0.005, 0.08), 0.5, 5, 0.07)):
        p = np.random.default_rng(2).uniform(lo, hi, size=12)
        probs = np.array([1.0])  # distribution of the total count over R replicates
        for _ in range(R):
            for pt in p:
                probs = np.convolve(probs, [1 - pt, pt])
        exact = sum(pr * exact_crp_tables(c, n) for n, pr in enumerate(probs))
        approx = cvi.expected_table_counts(c, float(np.sum(p)), float(np.sum(np.log1p(-p))), float(R))
        assert abs(float(approx) / exact - 1) < tol, (lo, c, R, float(approx), exact)


def test_hdp_update_eq14_at_known_counts():
    """``hdp_update`` with rho = 1, certain counts (q(C > 0) = 1 where C > 0), constant alpha and
    gamma: ``u_k = 1 + sum_j E[s_jk]``, ``v_k = gamma + sum_{l > k} sum_j E[s_jl]`` with the exact
    CRP table expectations ``E[s_jk] = c_k (psi(c_k + C_jk) - psi(c_k))``, ``c_k = G[alpha pi_k]``."""
    K, gamma, alpha = 3, 1.5, 2.0
    counts = np.array([[4.0, 1.0, 0.0], [2.0, 6.0, 0.0], [0.0, 0.0, 0.0], [3.0, 1.0, 0.0]])
    no_customer = np.where(counts > 0, -np.inf, 0.0)
    post = cvi.HDPPosterior(jnp.ones(K), jnp.full(K, gamma), jnp.asarray(alpha), jnp.asarray(1.0), jnp.asarray(gamma),
                            jnp.asarray(1.0), jnp.asarray([0.4, 0.3, 0.2]))
    new = cvi.hdp_update(post, cvi.HDPPriors(), jnp.asarray(counts), jnp.asarray(no_customer),
                         jnp.zeros(K + 1), 1.0, 1.0, alpha=alpha, gamma=gamma)
    c = np.array([0.4, 0.3, 0.2])
    tables = np.where(counts > 0, c * (digamma(c + counts) - digamma(c)), 0.0)
    dish = tables.sum(0)
    np.testing.assert_allclose(new.u, 1 + dish, rtol=1e-10)
    np.testing.assert_allclose(new.v, gamma + (dish.sum() - np.cumsum(dish)), rtol=1e-10)
    # G[alpha pi_k] at the new sticks (App. A)
    e_log_pi = digamma(new.u) - digamma(new.u + new.v)
    e_log_rest = digamma(new.v) - digamma(new.u + new.v)
    np.testing.assert_allclose(new.pseudo_counts, alpha * np.exp(e_log_pi + np.cumsum(e_log_rest) - e_log_rest),
                               rtol=1e-10)


# ------------------------------------------------------------- emission families: eq. 10 terms
FAMILIES = {
    "categorical": (lambda: E.Categorical(4, 0.7), lambda r: r.integers(4, size=(12,))),
    "poisson": (lambda: E.Poisson(2.0, 0.5), lambda r: r.poisson(3.0, size=(12,))),
    "diagonal": (lambda: E.DiagonalGaussian(np.zeros(2), 1.0, 2.0, 1.0), lambda r: r.normal(size=(12, 2))),
    "gaussian": (lambda: E.GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2)), lambda r: r.normal(size=(12, 2))),
    "vmf": (lambda: E.VonMisesFisher(5.0, np.array([1.0, 0.0, 0.0]), 1.0),
            lambda r: (lambda v: v / np.linalg.norm(v, axis=-1, keepdims=True))(r.normal(size=(12, 3)))),
    "autoregressive": (lambda: E.AutoRegressive(1, np.zeros((2, 3)), np.eye(3), 4.0, np.eye(2)),
                       lambda r: r.normal(size=(12, 2))),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_terms_against_monte_carlo(name):
    """``predictive_log_likelihoods = log E_q[f(x_t | theta_k)]`` and ``expected_log_likelihoods =
    E_q[log f(x_t | theta_k)]`` under ``q(theta_k) = p(theta | stats_k)`` (soft statistics), against
    4000 draws of ``sample_posterior``: each within 5 Monte Carlo standard errors (delta method for the
    log of the mean)."""
    make, gen = FAMILIES[name]
    fam = make()
    r = np.random.default_rng(0)
    y = jnp.asarray(gen(r))
    x, valid = fam.prepare(y)
    w = jnp.asarray(r.dirichlet(np.ones(3), size=y.shape[0])) * valid[:, None]
    stats = fam.sufficient_statistics(x, w)
    S = 4000
    ll = jax.vmap(lambda k: fam.log_likelihoods(x, fam.sample_posterior(k, stats)))(jax.random.split(jax.random.key(1), S))
    v = np.asarray(valid)[:, None]
    pred = np.asarray(fam.predictive_log_likelihoods(x, stats))
    mc_pred = np.asarray(logsumexp(ll, 0) - np.log(S))
    lik = np.exp(np.asarray(ll) - np.max(np.asarray(ll), 0))  # delta-method standard error of log mean f
    se_pred = np.std(lik, 0) / (np.sqrt(S) * np.mean(lik, 0))
    assert np.max(np.where(v, np.abs(pred - mc_pred) / (se_pred + 1e-3), 0)) < 5.0
    ell = np.asarray(fam.expected_log_likelihoods(x, stats))
    se = np.asarray(jnp.std(ll, 0)) / np.sqrt(S)
    assert np.max(np.where(v, np.abs(ell - np.asarray(jnp.mean(ll, 0))) / se, 0)) < 5.0


# ------------------------------------------------------------------- recovery on simulated data
def simulate(rng, num_sequences, min_len=15, max_len=30):
    """A sticky 3-state HMM with categorical emissions on 6 symbols (two per state), sequences of
    lengths ``min_len..max_len`` padded with 0: ``(y, lengths, states, (log_init, log_trans, log_emit))``."""
    trans = np.full((K_TRUE, K_TRUE), 0.05) + 0.85 * np.eye(K_TRUE)
    trans /= trans.sum(1, keepdims=True)
    emit = np.full((K_TRUE, C_SIM), 0.02)
    for k in range(K_TRUE):
        emit[k, 2 * k:2 * k + 2] = 0.5
    emit /= emit.sum(1, keepdims=True)
    lengths = rng.integers(min_len, max_len + 1, size=num_sequences)
    y = np.zeros((num_sequences, max_len), np.int64)
    z = np.zeros((num_sequences, max_len), np.int64)
    for n, L in enumerate(lengths):
        z[n, 0] = rng.integers(K_TRUE)
        for t in range(1, L):
            z[n, t] = rng.choice(K_TRUE, p=trans[z[n, t - 1]])
        y[n, :L] = [rng.choice(C_SIM, p=emit[k]) for k in z[n, :L]]
    return y, lengths, z, (np.full(K_TRUE, -np.log(K_TRUE)), np.log(trans), np.log(emit))


def sim_model(y, lengths=None):
    hmm = nh.StickyHDPHMM(1.0, 1.0, 0.0, E.Categorical(C_SIM, 0.5), max_states=4)
    nh.sample("y", hmm, obs=y, lengths=lengths)


def true_per_step(y, lengths, params):
    log_init, log_trans, log_emit = params
    ll = jnp.asarray(log_emit.T[y])
    valid = jnp.arange(y.shape[1]) < jnp.asarray(lengths)[:, None]
    return float(jnp.sum(hmm_filter(log_init, log_trans, ll, mask=valid, length=jnp.asarray(lengths)).marginal_loglik)
                 / np.sum(lengths))


def hamming_after_matching(true_states, fitted_states, lengths):
    valid = np.arange(true_states.shape[1]) < lengths[:, None]
    a, b = true_states[valid], fitted_states[valid]
    confusion = np.zeros((a.max() + 1, max(b.max() + 1, a.max() + 1)))
    np.add.at(confusion, (a, b), 1)
    rows, cols = linear_sum_assignment(-confusion)
    return 1.0 - confusion[rows, cols].sum() / a.size


@pytest.fixture(scope="module")
def simulated():
    rng = np.random.default_rng(3)
    train = simulate(rng, 60)
    test = simulate(rng, 30)
    return train, test


def test_recovery_finite_hmm_minibatches(simulated):
    """SCVI on minibatches of 20 of 60 variable-length sequences (length strata, padding), 20
    passes, ``rho_n = (1 + n)^-0.6``; of 3 restarts the fit with the highest training predictive
    likelihood is kept (CVB0, like EM, has local optima: a state covering two regimes).  Its
    Viterbi paths match the true states up to relabelling (Hamming distance < 0.07; measured
    0.051, the true parameters' own Viterbi paths 0.048), and its held-out per-token log-likelihood
    is within 0.03 nats of the true parameters' (measured -1.376 against -1.362)."""
    (y, lengths, z, truth), (y_test, len_test, _, _) = simulated
    svi = CollapsedSVI(sim_model, num_states=K_TRUE, batch_size=20, step_size=RobbinsMonro(1.0, 0.6), hdp=False)
    fits = [svi.run(jax.random.key(seed), 60, y, lengths, progress_bar=False) for seed in range(3)]
    scores = [float(svi.predictive_log_likelihood(f.params, y, lengths).per_step) for f in fits]
    best = fits[int(np.argmax(scores))]
    assert isinstance(best.state, CollapsedSVIState) and best.losses.shape == (60,)
    paths = np.asarray(svi.viterbi(best.params, y, lengths))
    assert hamming_after_matching(z, paths, lengths) < 0.07
    report = svi.convergence(best)  # one pass = 3 updates; the three states in use
    assert report.window == 3 and report.num_steps == 60 and report.states_used == 3
    assert np.isfinite(report.relative_change) and ("NOT converged" in str(report)) != report.converged
    held_out = svi.predictive_log_likelihood(best.params, y_test, len_test)
    assert int(held_out.num_observed) == int(np.sum(len_test))
    assert abs(float(held_out.per_step) - true_per_step(y_test, len_test, truth)) < 0.03
    # the result of the MCMC diagnostics, with one parameter value (S = 1)
    assert isinstance(held_out, nh.diagnostics.PredictiveLogLikelihood)
    assert held_out.per_draw.shape == (1,) and held_out.per_sequence.shape == (1, len(len_test))
    np.testing.assert_allclose(held_out.per_draw, [held_out.log_likelihood], rtol=1e-12)
    np.testing.assert_allclose(np.sum(held_out.per_sequence), held_out.log_likelihood, rtol=1e-12)
    np.testing.assert_allclose(held_out.perplexity, np.exp(-held_out.per_step), rtol=1e-12)


@pytest.mark.slow
def test_recovery_hdp_heldout(simulated):
    """SCVI-HDP (4 states, alpha and gamma with Gamma priors: q(alpha), q(gamma) updated) on the same
    data: held-out per-token log-likelihood within 0.03 nats of the true parameters' (measured
    -1.373 to -1.388 over three seeds with constant alpha, gamma), the sticks' q a proper Beta."""
    (y, lengths, _, truth), (y_test, len_test, _, _) = simulated

    def model(y, lengths=None):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 2.0))
        alpha = numpyro.sample("alpha", dist.Gamma(2.0, 2.0))
        hmm = nh.StickyHDPHMM(gamma, alpha, 0.0, E.Categorical(C_SIM, 0.5), max_states=4)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    svi = CollapsedSVI(model, num_states=4, batch_size=20, step_size=RobbinsMonro(1.0, 0.6))
    fits = [svi.run(jax.random.key(seed), 60, y, lengths, progress_bar=False) for seed in range(3)]
    best = max(fits, key=lambda f: float(svi.predictive_log_likelihood(f.params, y, lengths).per_step))
    held_out = float(svi.predictive_log_likelihood(best.params, y_test, len_test).per_step)
    assert abs(held_out - true_per_step(y_test, len_test, truth)) < 0.03
    p = best.params
    assert np.all(np.asarray(p["sticks_u"]) > 0) and np.all(np.asarray(p["sticks_v"]) > 0)
    assert float(p["alpha_shape"]) != 2.0 and float(p["gamma_rate"]) != 2.0  # q(alpha), q(gamma) moved


# ------------------------------------------------------------------------------------ the API
def test_invalid_arguments():
    with pytest.raises(ValueError, match="num_states"):
        CollapsedSVI(sim_model, num_states=0)
    with pytest.raises(ValueError, match="batch_size"):
        CollapsedSVI(sim_model, batch_size=2.5)
    with pytest.raises(ValueError, match="step_size"):
        CollapsedSVI(sim_model, step_size=1.5)
    with pytest.raises(ValueError, match="step_size"):
        CollapsedSVI(sim_model, step_size=RobbinsMonro(0.5, 0.7))
    with pytest.raises(ValueError, match="hdp=False"):
        CollapsedSVI(sim_model, collapsed=False)
    with pytest.raises(ValueError, match="transition_prior"):
        CollapsedSVI(sim_model, transition_prior=0.0)


def test_init_errors(fitted_setup, simulated):
    (y, lengths, _, _), _ = simulated
    svi, state = fitted_setup[:2]
    with pytest.raises(ValueError, match="num_states"):
        CollapsedSVI(sim_model, num_states=5).init(jax.random.key(0), y, lengths)
    with pytest.raises(ValueError, match="batch_size"):
        CollapsedSVI(sim_model, batch_size=61).init(jax.random.key(0), y, lengths)
    with pytest.raises(RuntimeError, match="init"):
        CollapsedSVI(sim_model).viterbi({}, y)
    with pytest.raises(ValueError, match="num_steps"):
        svi.run(jax.random.key(0), 0, y, lengths)
    assert set(svi.get_params(state)) == {"transition_counts", "emission_stats", "pseudo_counts", "sticks_u",
                                          "sticks_v", "alpha_shape", "alpha_rate", "gamma_shape", "gamma_rate"}


def test_custom_emission_is_refused():
    def model(y):
        probs = numpyro.sample("probs", dist.Dirichlet(jnp.ones(2)).expand([2]).to_event(1))
        hmm = nh.StickyHDPHMM(1.0, 1.0, 0.0, lambda k: dist.Categorical(probs=probs[k]), max_states=2)
        nh.sample("y", hmm, obs=y)

    with pytest.raises(NotImplementedError, match="custom emissions"):
        CollapsedSVI(model).init(jax.random.key(0), np.array([0, 1, 1]))


def test_dp_mixture_emission_is_refused():
    """DP-mixture emissions have no closed-form q(theta) given expected statistics: refused by name."""
    from numpyro_hdphmm.emissions import DPMixture

    def model(y):
        hmm = nh.StickyHDPHMM(1.0, 1.0, 0.0, DPMixture(E.Categorical(2, 1.0), 1.0, 2), max_states=2)
        nh.sample("y", hmm, obs=y)

    with pytest.raises(NotImplementedError, match="DP-mixture"):
        CollapsedSVI(model).init(jax.random.key(0), np.array([0, 1, 1]))


@pytest.mark.slow
def test_random_kappa_is_refused():
    def model(y):
        kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
        hmm = nh.StickyHDPHMM(1.0, 1.0, kappa, E.Categorical(2, 1.0), max_states=2)
        nh.sample("y", hmm, obs=y)

    with pytest.raises(NotImplementedError, match="kappa"):
        CollapsedSVI(model).init(jax.random.key(0), np.array([0, 1, 1]))


# ------------------------------------------------------------------ downstream, other variants
@pytest.mark.slow
def test_downstream_draws_predictive_arviz(simulated):
    """``run`` with the progress bar, draws of every latent site from q (``sample_posterior``), fed to
    ``numpyro.infer.Predictive``; ``to_inference_data`` has the posterior and the ``variational``
    group with the ELBO trace; state marginals are distributions over the K states."""
    (y, lengths, _, _), _ = simulated
    svi = CollapsedSVI(sim_model, num_states=K_TRUE, batch_size=20, hdp=False)
    fit = svi.run(jax.random.key(0), 30, y, lengths, progress_bar=True)
    assert fit.losses.shape == (30,) and np.all(np.isfinite(np.asarray(fit.losses)))
    draws = svi.sample_posterior(jax.random.key(1), fit.params, y, lengths, num_samples=3)
    assert draws["y_states"].shape == (3,) + y.shape and draws["y_trans"].shape == (3, 5, 5)
    assert int(jnp.max(draws["y_states"])) < K_TRUE
    pred = numpyro.infer.Predictive(sim_model, posterior_samples=draws)(jax.random.key(2), y, lengths)
    assert pred["y"].shape == (3,) + y.shape
    idata = svi.to_inference_data(fit, y, lengths, num_samples=5)
    assert "variational" in idata.groups() and idata.variational["elbo"].shape == (30,)
    marg = np.asarray(svi.state_marginals(fit.params, y, lengths))
    valid = np.arange(y.shape[1]) < lengths[:, None]
    np.testing.assert_allclose(marg.sum(-1)[valid], 1.0, rtol=1e-10)


@pytest.mark.slow
def test_uncollapsed_baseline_and_gaussian_family(simulated):
    """The uncollapsed SVI baseline (``collapsed=False``) fits the categorical data (held-out within
    0.05 nats of the truth, best of 3 restarts); SCVI-HDP with NIW Gaussian emissions (4 states for 3)
    recovers well-separated Gaussian regimes (Hamming < 0.02 after matching)."""
    (y, lengths, z, truth), (y_test, len_test, _, _) = simulated
    svi = CollapsedSVI(sim_model, num_states=K_TRUE, batch_size=20, hdp=False, collapsed=False)
    fits = [svi.run(jax.random.key(seed), 60, y, lengths, progress_bar=False) for seed in range(3)]
    best = max(fits, key=lambda f: float(svi.predictive_log_likelihood(f.params, y, lengths).per_step))
    held_out = float(svi.predictive_log_likelihood(best.params, y_test, len_test).per_step)
    assert abs(held_out - true_per_step(y_test, len_test, truth)) < 0.05

    def gaussian_model(y, lengths=None):
        hmm = nh.StickyHDPHMM(1.0, 1.0, 0.0, E.GaussianNIW(np.zeros(2), 0.1, 4.0, np.eye(2)), max_states=4)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    means = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0]])
    yg = means[z] + 0.5 * np.random.default_rng(4).normal(size=z.shape + (2,))
    svi = CollapsedSVI(gaussian_model, num_states=4, batch_size=20)
    fit = svi.run(jax.random.key(0), 40, yg, lengths, progress_bar=False)
    assert hamming_after_matching(z, np.asarray(svi.viterbi(fit.params, yg, lengths)), lengths) < 0.02


def test_length_strata_partition():
    """The length strata partition the sequences, each padded to a width that holds its members,
    with per-minibatch sizes ``M_b ~ M N_b / N`` (the weights ``N_b / M_b`` of the unbiased
    estimate)."""
    lengths = np.random.default_rng(0).integers(5, 200, size=500)
    strata = length_strata(lengths, 50, 200, max_strata=3)
    assert 1 < len(strata) <= 3
    members = np.concatenate([s.indices for s in strata])
    np.testing.assert_array_equal(np.sort(members), np.arange(500))
    for s in strata:
        assert np.all(lengths[s.indices] <= s.width) and s.num_sequences == s.indices.size
        assert abs(s.batch_size - 50 * s.num_sequences / 500) <= 1
    assert sum(s.width * s.num_sequences for s in strata) < 0.8 * 200 * 500  # measured 77344 against 100000
    (only,) = length_strata(lengths, 50, 200, max_strata=1)
    assert only.width == 200 and only.batch_size == 50


@pytest.mark.slow
def test_full_batch_update_hdp(simulated):
    """SCVI-HDP, full batch, rho = 1: the local step uses the pseudo-counts ``G[alpha pi_k]`` of the
    current q (eq. 9 with a non-symmetric prior, against the independent iteration), and the new
    top-level q is ``hdp_update`` of the batch's statistics (App. B, ``R = N / N = 1``)."""
    (y, lengths, _, _), _ = simulated
    svi = CollapsedSVI(sim_model, num_states=K_TRUE, step_size=1.0, merge=False)  # the paper's update as printed
    state = svi.init(jax.random.key(0), y, lengths)
    rng = np.random.default_rng(1)
    trans_counts = rng.exponential(size=(K_TRUE + 1, K_TRUE)) * 30
    emit_counts = rng.exponential(size=(K_TRUE, C_SIM)) * 30
    pseudo = np.array([0.5, 0.2, 0.05])
    state = state._replace(transition_counts=jnp.asarray(trans_counts), hdp=state.hdp._replace(pseudo_counts=jnp.asarray(pseudo)),
                           emission_stats={"counts": jnp.asarray(emit_counts), "total": jnp.sum(emit_counts, -1)})
    new, _ = svi.update(state, y, lengths)
    ref_c, ref_e, _ = batch_cvb0_iteration(trans_counts, emit_counts, y, lengths, prior=pseudo)
    np.testing.assert_allclose(new.transition_counts, ref_c, rtol=1e-9)
    np.testing.assert_allclose(new.emission_stats["counts"], ref_e, rtol=1e-9, atol=1e-9)
    log_trans = cvi.log_mean_transitions(jnp.asarray(pseudo), jnp.asarray(trans_counts))
    log_emit = jnp.log((EMIT_CONC + emit_counts) / np.sum(EMIT_CONC + emit_counts, -1, keepdims=True))
    valid = jnp.arange(y.shape[1]) < jnp.asarray(lengths)[:, None]
    local = cvi.expected_counts(log_trans, log_emit.T[y], valid, jnp.asarray(lengths), pair_statistics=True)
    ref_q = cvi.hdp_update(state.hdp, svi.config.priors, jnp.sum(local.transition_counts, 0),
                           jnp.sum(local.log_no_transition, 0), jnp.sum(local.log_no_departure, 0), 1.0, 1.0,
                           alpha=svi.config.alpha, gamma=svi.config.gamma)
    for got, ref in zip(new.hdp, ref_q):
        np.testing.assert_allclose(got, ref, rtol=1e-9)
    assert int(new.hdp_step) == 1


# ------------------------------------------------------------------ through numpyro.infer.SVI
STATE_SITE = nh.infer.collapsed_svi.STATE_SITE


def _same(a, b):
    """Bit-for-bit equality of two pytrees (typed PRNG keys compared by their data)."""
    leaves = list(zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
    key = lambda u: jax.random.key_data(u) if jnp.issubdtype(u.dtype, jax.dtypes.prng_key) else u
    return len(leaves) > 0 and all(bool(jnp.all(key(u) == key(v))) for u, v in leaves)


@pytest.fixture(scope="module")
def numpyro_svi(simulated):
    """``SVI(sim_model, CollapsedGuide(...), Adam, CollapsedELBO())`` initialized on the simulated
    training set (minibatches of 20 of 60 sequences, length strata), and its initial state."""
    from numpyro.infer import SVI

    (y, lengths, _, _), _ = simulated
    guide = nh.infer.CollapsedGuide(sim_model, num_states=K_TRUE, batch_size=20, step_size=RobbinsMonro(1.0, 0.6),
                                    hdp=False)
    svi = SVI(sim_model, guide, numpyro.optim.Adam(1e-3), nh.infer.CollapsedELBO())
    return svi, guide, svi.init(jax.random.key(0), y, lengths)


def test_numpyro_svi_update_equals_collapsed_svi_update(numpyro_svi, simulated):
    """One ``svi.update`` of NumPyro's SVI with the collapsed guide and loss equals one step of
    ``CollapsedSVI.run`` from the same state, bit for bit (state and loss), and so does the second;
    the comparison is sensitive (the first step's state differs from the second's).  The state is
    the guide's mutable site (``svi.get_params`` is empty); ``Predictive`` given
    ``SVIRunResult.params`` instead of ``guide.get_params(...)`` fails with a ValueError naming
    what to pass, and a guide of another kind is refused by the loss."""
    from numpyro.infer import Predictive

    (y, lengths, _, _), _ = simulated
    svi, guide, st = numpyro_svi
    carry = st.mutable_state[STATE_SITE]
    assert isinstance(carry.state, CollapsedSVIState) and svi.get_params(st) == {}
    one, loss_one = svi.update(st, y, lengths)
    two, loss_two = svi.update(one, y, lengths)
    ref = guide.fitter.run(jax.random.key(1), 2, y, lengths, init_state=carry.state)
    assert [float(loss_one), float(loss_two)] == [float(v) for v in ref.losses]
    assert _same(two.mutable_state[STATE_SITE].state, ref.state)
    assert not _same(one.mutable_state[STATE_SITE].state, ref.state)
    with pytest.raises(ValueError, match=r"guide.get_params\(svi_result.state\)"):
        Predictive(sim_model, guide=guide, params={}, num_samples=2)(jax.random.key(2), y, lengths)
    with pytest.raises(ValueError, match="CollapsedGuide"):
        nh.infer.CollapsedELBO().loss_with_mutable_state(jax.random.key(0), dict(st.mutable_state), sim_model,
                                                         lambda *a, **k: None, y, lengths)


@pytest.mark.slow
def test_numpyro_svi_run_stable_update_minibatch_and_draws(numpyro_svi, simulated):
    """``svi.stable_update`` (jitted) and ``svi.run`` (``lax.scan``) equal ``CollapsedSVI.run``; an
    ``svi.update`` on fewer sequences than the data set is ``CollapsedSVI.update`` on them as a
    minibatch; a non-finite step is skipped with a NaN loss; ``guide.get_params`` feeds the
    downstream methods and ``Predictive(model, guide=guide, params=...)``."""
    from numpyro.infer import Predictive

    (y, lengths, _, _), _ = simulated
    svi, guide, st = numpyro_svi
    carry = st.mutable_state[STATE_SITE]
    ref = guide.fitter.run(jax.random.key(1), 3, y, lengths, init_state=carry.state, progress_bar=False)
    stable, stable_loss = jax.jit(svi.stable_update)(st, y, lengths)
    assert float(stable_loss) == float(ref.losses[0])
    run = svi.run(jax.random.key(1), 3, y, lengths, init_state=st, progress_bar=False)
    assert _same(run.state.mutable_state[STATE_SITE].state, ref.state)
    np.testing.assert_array_equal(np.asarray(run.losses), np.asarray(ref.losses))
    mb, mb_loss = svi.update(st, y[:20], lengths[:20])
    upd, upd_loss = guide.fitter.update(carry.state, y[:20], lengths[:20])
    assert float(mb_loss) == float(upd_loss) and _same(mb.mutable_state[STATE_SITE].state, upd)
    bad = carry._replace(state=carry.state._replace(transition_counts=carry.state.transition_counts * jnp.nan))
    skipped, nan_loss = svi.update(st._replace(mutable_state={STATE_SITE: bad}), y, lengths)
    assert np.isnan(float(nan_loss)) and _same(skipped.mutable_state[STATE_SITE].state.step, bad.state.step)
    params = guide.get_params(run.state)
    held = guide.predictive_log_likelihood(params, y, lengths)
    assert float(held.per_step) == float(guide.fitter.predictive_log_likelihood(ref.params, y, lengths).per_step)
    draws = Predictive(sim_model, guide=guide, params=params, num_samples=2, return_sites=["y_states", "y_probs"])(
        jax.random.key(2), y, lengths)
    assert draws["y_states"].shape == (2,) + y.shape and draws["y_probs"].shape[0] == 2
    assert guide.convergence(run).num_steps == 3 and guide.convergence(run).window == 3
    # the stopping rule: pass by pass (3 updates), stopped after the second pass (the first change
    # is below a huge tol), the same updates as one run of 6
    stopped = guide.fitter.run(jax.random.key(1), 30, y, lengths, init_state=carry.state, progress_bar=False, tol=1e9)
    six = guide.fitter.run(jax.random.key(1), 6, y, lengths, init_state=carry.state, progress_bar=False)
    assert stopped.losses.shape == (6,) and _same(stopped.state, six.state)
    np.testing.assert_array_equal(np.asarray(stopped.losses), np.asarray(six.losses))


def test_convergence_report_and_stopping_rule_on_losses(fitted_setup, simulated):
    """``CollapsedSVI.convergence``: the relative change of the mean loss over the last window
    against the window before (NaN and not converged with fewer than two windows); ``run(tol=)``
    refuses a non-positive tolerance."""
    svi = fitted_setup[0]
    (y, lengths, _, _), _ = simulated
    flat = svi.convergence(np.r_[np.full(4, 100.0), np.full(4, 100.05)], window=4, rtol=1e-3)
    assert flat.converged and abs(flat.relative_change - 5e-4) < 1e-12 and flat.states_used is None
    moving = svi.convergence(np.r_[np.full(4, 100.0), np.full(4, 90.0)], window=4, rtol=1e-3)
    assert not moving.converged and abs(moving.relative_change - 0.1) < 1e-12
    assert not svi.convergence(np.ones(5), window=4).converged
    with pytest.raises(ValueError, match="`tol`"):
        svi.run(jax.random.key(0), 5, y, lengths, tol=0.0)


# ------------------------------------------------------------------ the merge move
def _rows_evidence(pseudo, kappa, counts):
    """The collapsed transition term: ``sum_r log DirMult(C_r | a + kappa e_r)`` (start row last,
    no self bias), by the package's Dirichlet-multinomial of the MCMC kernels."""
    K = counts.shape[1]
    P = np.asarray(pseudo)[None, :] + kappa * np.vstack([np.eye(K), np.zeros((1, K))])
    return float(crp.log_dirichlet_multinomial(jnp.asarray(P), jnp.asarray(counts)))


def test_transition_merge_gains_match_recomputation():
    """The O(K^3) gains of merging j into i equal the transition term recomputed after the merge
    (rows and columns added, pseudo-counts fixed), sticky or not, integer counts or not; a variant
    that merges the columns only (forgetting that rows i and j become one row) is off by
    hundreds of nats (negative control)."""
    rng = np.random.default_rng(0)
    K = 5
    for kappa, counts in ((0.0, rng.gamma(0.5, 10.0, (K + 1, K))), (2.5, rng.poisson(8.0, (K + 1, K)).astype(float))):
        a = rng.gamma(1.0, 1.0, K)
        gains = np.asarray(cvi.transition_merge_gains(jnp.asarray(a), jnp.asarray(counts), kappa))
        base = _rows_evidence(a, kappa, counts)
        stats = {"x": jnp.zeros((K, 2))}
        worst = broken = 0.0
        for i, j in itertools.permutations(range(K), 2):
            merged, _ = cvi.merge_pair(jnp.asarray(counts), stats, i, j)
            worst = max(worst, abs(_rows_evidence(a, kappa, np.asarray(merged)) - base - gains[i, j]))
            columns_only = counts.copy()
            columns_only[:, i] += columns_only[:, j]
            columns_only[:, j] = 0.0
            broken = max(broken, abs(_rows_evidence(a, kappa, columns_only) - base - gains[i, j]))
        assert worst < 1e-8 and broken > 10.0
        assert np.all(np.isneginf(np.diag(gains)))


def _labelled(y, lengths, labels, num_states, emission, scale=1.0):
    n, first = transition_counts(jnp.asarray(labels), num_states, jnp.asarray(lengths))
    valid = np.arange(y.shape[1]) < np.asarray(lengths)[:, None]
    weights = nh.emissions.state_weights(jnp.asarray(labels), jnp.asarray(valid), num_states).reshape(-1, num_states)
    counts = scale * jnp.concatenate([n, first[None]], 0).astype(float)
    stats = jax.tree_util.tree_map(lambda s: scale * s, emission.sufficient_statistics(jnp.asarray(y).reshape(-1), weights))
    return counts, stats


def test_merge_move_merges_a_duplicate_and_nothing_else(simulated):
    """``merge_states`` on the simulated 3-state data: where one true state's steps are labelled
    0 or 3 at random (a duplicate), the move merges exactly 3 into 0 and leaves the other states
    as they are; with the true labels it merges nothing (the collapsed joint of distinct states
    falls when they are merged)."""
    (y, lengths, z, _), _ = simulated
    svi = CollapsedSVI(sim_model, num_states=4, batch_size=20)
    state = svi.init(jax.random.key(0), y, lengths)
    emission, config = svi.emission, svi.config
    rng = np.random.default_rng(1)
    split = np.where((z == 0) & (rng.random(z.shape) < 0.5), 3, z)
    duplicate = _labelled(y, lengths, split, 4, emission)
    state = state._replace(transition_counts=duplicate[0], emission_stats=duplicate[1])
    merged = merge_states(state, duplicate, emission, config)
    assert int(merged.merges) == 1
    expected = _labelled(y, lengths, z, 4, emission)
    np.testing.assert_allclose(merged.transition_counts, expected[0], atol=1e-9)
    np.testing.assert_allclose(merged.emission_stats["counts"], expected[1]["counts"], atol=1e-9)
    truth = state._replace(transition_counts=expected[0], emission_stats=expected[1])
    assert int(merge_states(truth, expected, emission, config).merges) == 0


def test_merge_option_is_for_the_hdp():
    with pytest.raises(ValueError, match="merge=True"):
        CollapsedSVI(sim_model, hdp=False, merge=True)
    with pytest.raises(ValueError, match="`merge` must be True or False"):
        CollapsedSVI(sim_model, merge="yes")
