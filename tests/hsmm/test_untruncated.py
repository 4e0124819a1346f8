"""The untruncated HDP-HSMM (``max_duration=None``) and the phase embedding of its negative-binomial
and geometric durations.

* the families' survival functions against SciPy, in float64 and float32;
* the phase chain's backward messages (log space and the sampler's rescaled ones) against the
  explicit-duration messages of the untruncated law (marginal likelihood to 1e-10, censoring on
  and off, missing and padded steps), and its
  segmentations against the exact posterior over labelled segmentations (TV), with a negative
  control (segments entered at the top phase);
* prior draws of the untruncated segment process against its own ``log_prob`` (TV), with a
  negative control (the law renormalized on ``1..T``, as the truncated model does);
* ``WeakLimitGibbs`` on the untruncated model against exact enumeration (negative-binomial
  durations through the phases, Poisson durations through the explicit messages), a negative
  control, and Geweke's joint-distribution test.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy import stats
from scipy.special import betaln, gammaln, logsumexp

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import hsmm, phases
from numpyro_hdphmm.infer.moves import semi_markov

from tests.hsmm.test_duration_sites import CENSORED_LENGTHS, CENSORED_STATES, SEGMENTS, check_r_law
from tests.hsmm.test_weak_limit_hsmm import ALPHA, GAMMA, Y, check_geweke, exact_hsmm_posterior
from tests.infer._checks import empirical_tv, empirical_tv_keys, final_states, tv_bound

R_VALUES, P_A, P_B = (1, 2, 3), 2.0, 2.0
POISSON_CONC, POISSON_RATE = 2.0, 1.0


# ============================================================================ survival functions
FAMILIES = [
    ("poisson", lambda: nh.durations.Poisson(2.0, 0.1), {"rate": [0.5, 10.0, 80.0]},
     lambda d, pr: stats.poisson(np.array(pr["rate"])).logsf(d - 2)),
    ("nb", lambda: nh.durations.NegativeBinomial(), {"r": [1, 4, 9], "p": [0.3, 0.9, 0.5]},
     lambda d, pr: stats.nbinom(pr["r"], 1 - np.array(pr["p"])).logsf(d - 2)),
    ("nb_gamma_r", lambda: nh.durations.NegativeBinomial.gamma_r(), {"r": [1.5, 4.2, 9.0], "p": [0.3, 0.9, 0.5]},
     lambda d, pr: stats.nbinom(pr["r"], 1 - np.array(pr["p"])).logsf(d - 2)),
    ("geometric", lambda: nh.durations.Geometric(), {"stay": [0.3, 0.9, 0.99]},
     lambda d, pr: stats.geom(1 - np.array(pr["stay"])).logsf(d - 1)),
]


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
@pytest.mark.parametrize("name, make, params, reference", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_log_survival_table_matches_scipy(name, make, params, reference, dtype):
    family = make()
    p = {k: jnp.asarray(v, jnp.int32 if k == "r" and name == "nb" else dtype) for k, v in params.items()}
    got = np.asarray(family.log_survival_table(p, 300))
    want = reference(np.arange(1, 301)[:, None], params)
    assert np.all(np.isfinite(got))
    assert np.all(got[~np.isfinite(want)] < -700)  # SciPy's float64 underflows there; ours stays finite
    fin = np.isfinite(want)
    rel = np.abs(got - want)[fin] / np.maximum(1.0, np.abs(want[fin]))
    # float64: closed forms to 1e-10, the summed pmf (the Gamma prior's real r) to 1e-3; float32: 1e-2
    tol = 1e-2 if dtype == jnp.float32 else (1e-3 if name == "nb_gamma_r" else 1e-10)
    assert rel.max() < tol, (name, rel.max())


def test_log_survival_of_custom_conditions_on_one_or_more():
    """A Custom Poisson (mass at 0) under max_duration=None is the Poisson law conditioned on d >= 1."""
    rate = jnp.array([0.7, 3.0])
    family = nh.durations.Custom(lambda k: dist.Poisson(rate[k]), 2)
    chain = nh.SemiMarkovChain(jnp.array([0.5, 0.5]), jnp.array([[0.0, 1.0], [1.0, 0.0]]), family, {}, None, 6)
    _, _, (log_dur, log_surv), _ = chain.tables()
    d = np.arange(1, 7)[:, None]
    law = stats.poisson(np.asarray(rate))
    np.testing.assert_allclose(np.asarray(log_dur).T, law.logpmf(d) - law.logsf(0), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(log_surv).T, law.logsf(d - 1) - law.logsf(0), rtol=1e-8)


# ============================================================================ the phase chain
def _nb_tables(r, p, num_d):
    family = nh.durations.NegativeBinomial(r_values=(1, 2, 3, 4))
    params = {"r": jnp.asarray(r, jnp.int32), "p": jnp.asarray(p)}
    log_dur = family.log_pmf(params, jnp.arange(1, num_d + 1)).T
    log_surv = family.log_survival_table(params, num_d).T
    return family, params, log_dur, log_surv


def _problem(seed=0, k=3, t=9):
    rng = np.random.default_rng(seed)
    a = rng.dirichlet(np.ones(k), size=k)
    np.fill_diagonal(a, 0.0)
    a /= a.sum(1, keepdims=True)
    log_trans = jnp.where(jnp.eye(k, dtype=bool), -jnp.inf, jnp.log(jnp.maximum(a, 1e-300)))
    log_init = jnp.log(jnp.asarray(rng.dirichlet(np.ones(k))))
    return log_init, log_trans, jnp.asarray(rng.normal(size=(t, k)))


@pytest.mark.parametrize("left_censored", [False, True])
@pytest.mark.parametrize("right_censored", [True, False])
def test_phase_messages_match_the_explicit_messages(right_censored, left_censored):
    """The phase messages against the explicit-duration messages of the untruncated law; with
    left-censoring, the phases' residual entry law (:func:`phases.residual_entry`, the expected time
    in each phase) against the explicit residual-life tables (``P(D >= d) / E[D]`` and its survival,
    ``log_residual_tables``): two derivations of the same first-segment law."""
    log_init, log_trans, ll = _problem()
    family, params, log_dur, log_surv = _nb_tables([1, 3, 4], [0.3, 0.6, 0.45], ll.shape[0])
    tables = family.phase_embedding(params)
    entry_first, first = None, None
    if left_censored:
        entry_first = phases.residual_entry(tables)
        first = tuple(v.T for v in family.log_residual_tables(params, ll.shape[0]))
    mask = jnp.array([True] * 4 + [False] + [True] * 4)
    for length in (9, 6, 1):
        got = phases.phase_backward(log_init, log_trans, tables, ll, mask, length, right_censored=right_censored,
                                    log_entry_first=entry_first)
        want = hsmm.hsmm_backward(log_init, log_trans, log_dur, log_surv, ll, mask, length,
                                  right_censored=right_censored, first=first)
        assert abs(float(got.marginal_loglik - want.marginal_loglik)) < 1e-10, length
        _, fast, ok = phases.phase_sample(jax.random.key(0), log_init, log_trans, tables, ll, mask, length,
                                          right_censored=right_censored, log_entry_first=entry_first)
        assert bool(ok) and abs(float(fast - want.marginal_loglik)) < 1e-10, length


@pytest.mark.parametrize("name, make, params, reference", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_residual_life_tables_match_a_direct_sum(name, make, params, reference):
    """``log_residual_tables``: ``P(D >= d) / E[D]`` and its survival against SciPy's survival
    function summed directly (to ``d = 3000``) and the law's mean, float64."""
    family = make()
    p = {k: jnp.asarray(v, jnp.int32 if k == "r" and name == "nb" else jnp.float64) for k, v in params.items()}
    log_res, log_res_surv = (np.asarray(v) for v in family.log_residual_tables(p, 60))
    d = np.arange(1, 3001)[:, None]
    log_sf = reference(d, params)  # log P(D >= d), (3000, K)
    log_mean = logsumexp(log_sf, 0)  # E[D] = sum_d P(D >= d)
    want = log_sf[:60] - log_mean
    want_surv = np.logaddexp.accumulate((log_sf - log_mean)[::-1], 0)[::-1][:60]
    # the pmf summed: the complement while it is above 1e3 eps (to rounding), the tail sum beyond (the mass
    # past the table extrapolated geometrically: 1e-3 relative to the log, as for the summed survival tables)
    floor = np.log(1e3 * np.finfo(np.float64).eps)
    # the residual survival is a complement of complements: its absolute error is ~1000 eps, in the log ~1000 eps / P
    for got_table, want_table, above, k in ((log_res, want, log_sf[:60] > floor, 100),
                                            (log_res_surv, want_surv, want_surv > floor, 1000)):
        tol = 1e-10 + k * np.finfo(np.float64).eps / np.exp(want_table[above])
        assert np.all(np.abs(got_table[above] - want_table[above]) < tol)
        fin = want_table > -600
        rel = np.abs(got_table - want_table)[fin] / np.maximum(1.0, np.abs(want_table[fin]))
        assert rel.max() < 1e-3, rel.max()
        assert np.all(np.isfinite(got_table))


def test_geometric_phases_are_the_hmm_forward_algorithm():
    """One phase per state: the HMM with ``stay`` on the diagonal (to 1e-10)."""
    from numpyro_hdphmm._core.hmm import hmm_marginal_loglik

    log_init, log_trans, ll = _problem(seed=1)
    stay = jnp.array([0.2, 0.7, 0.9])
    tables = nh.durations.Geometric().phase_embedding({"stay": stay})
    a = jnp.exp(log_trans) * (1.0 - stay)[:, None] + jnp.diag(stay)
    got = phases.phase_backward(log_init, log_trans, tables, ll).marginal_loglik
    assert abs(float(got - hmm_marginal_loglik(log_init, jnp.log(a), ll))) < 1e-10


def _exact_segmentations(log_init, log_trans, log_dur, log_surv, ll, right_censored=True):
    t, k = ll.shape
    seqs = np.array(list(itertools.product(range(k), repeat=t)))
    lp = jax.vmap(lambda z: hsmm.hsmm_log_prob(z, log_init, log_trans, log_dur, log_surv, t,
                                               right_censored=right_censored)
                  + jnp.sum(ll[jnp.arange(t), z]))(jnp.asarray(seqs))
    lp = np.asarray(lp)
    return {tuple(s): float(np.exp(v - logsumexp(lp))) for s, v in zip(seqs, lp)}


def _phase_tv(tables, ll, log_init, log_trans, exact, num_draws=40000):
    keys = jax.random.split(jax.random.key(3), num_draws)
    draws = jax.vmap(lambda key: phases.phase_sample(key, log_init, log_trans, tables, ll)[0])(keys)
    return empirical_tv_keys(exact, [tuple(z) for z in np.asarray(draws)]), tv_bound(exact.values(), num_draws)


def test_phase_sampler_draws_the_explicit_posterior_and_detects_a_wrong_entry_law():
    log_init, log_trans, ll = _problem(seed=2, t=5)
    family, params, log_dur, log_surv = _nb_tables([1, 2, 4], [0.5, 0.4, 0.3], 5)
    exact = _exact_segmentations(log_init, log_trans, log_dur, log_surv, ll)
    tables = family.phase_embedding(params)
    tv, bound = _phase_tv(tables, ll, log_init, log_trans, exact)
    # negative control: every segment entered at its top phase (r stages: d >= r, the law of r + NB)
    top = jnp.arange(4)[None, :] == (params["r"] - 1)[:, None]
    wrong = tables._replace(log_entry=jnp.where(top, 0.0, -jnp.inf))
    tv_wrong, _ = _phase_tv(wrong, ll, log_init, log_trans, exact)
    print(f"phase sampler: TV {tv:.4f}, bound {bound:.4f}; wrong entry law: TV {tv_wrong:.4f}")
    assert tv < bound
    assert tv_wrong > bound


@pytest.mark.parametrize("right_censored", [True, False])
def test_phase_sampler_with_left_censoring_draws_the_explicit_posterior(right_censored):
    """A left-censored first segment entered by the residual entry law: the phase sampler's
    segmentations against the exact posterior under the explicit residual-life tables (``T = 5``,
    ``K = 3``, 40,000 draws)."""
    log_init, log_trans, ll = _problem(seed=2, t=5)
    family, params, log_dur, log_surv = _nb_tables([1, 2, 4], [0.5, 0.4, 0.3], 5)
    first = tuple(v.T for v in family.log_residual_tables(params, 5))
    t, k = ll.shape
    seqs = np.array(list(itertools.product(range(k), repeat=t)))
    lp = np.asarray(jax.vmap(lambda z: hsmm.hsmm_log_prob(z, log_init, log_trans, log_dur, log_surv, t,
                                                          right_censored=right_censored, first=first)
                             + jnp.sum(ll[jnp.arange(t), z]))(jnp.asarray(seqs)))
    exact = {tuple(z): float(np.exp(v - logsumexp(lp))) for z, v in zip(seqs, lp)}
    tables = family.phase_embedding(params)
    entry_first = phases.residual_entry(tables)
    n = 40000
    draws = jax.jit(jax.vmap(lambda key: phases.phase_sample(key, log_init, log_trans, tables, ll,
                                                             right_censored=right_censored,
                                                             log_entry_first=entry_first)[0]))(
        jax.random.split(jax.random.key(4), n))
    tv, bound = empirical_tv_keys(exact, [tuple(z) for z in np.asarray(draws)]), tv_bound(exact.values(), n)
    print(f"phase sampler, left-censored (right_censored={right_censored}): TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound


@pytest.mark.parametrize("left_censored", [False, True])
def test_prior_draws_of_the_untruncated_segment_process_follow_its_log_prob(left_censored):
    """``SemiMarkovChain.sample`` with ``max_duration=None`` gives a segment longer than the rest of
    the sequence its probability ``P(D > T)`` (cut at the end), and with left-censoring the first
    segment its residual life; ``log_prob`` sums to one over the sequences.  Renormalizing the law on
    ``1..T`` with no first-segment law (the negative control) does not."""
    t, k = 4, 3
    rows = jnp.array([[0.3, 0.5, 0.2], [0.4, 0.1, 0.5], [0.25, 0.25, 0.5]])
    init = jnp.array([0.5, 0.3, 0.2])
    family = nh.durations.NegativeBinomial(r_values=(1, 2, 3))
    params = {"r": jnp.array([1, 2, 3], jnp.int32), "p": jnp.array([0.5, 0.6, 0.2])}
    chain = nh.SemiMarkovChain(init, rows, family, params, None, t, left_censored=left_censored)
    seqs = np.array(list(itertools.product(range(k), repeat=t)))
    exact = dict(zip(map(tuple, seqs), np.exp(np.asarray(jax.jit(chain.log_prob)(jnp.asarray(seqs))))))
    assert abs(sum(exact.values()) - 1.0) < 1e-10
    n = 40000
    draws = np.asarray(chain.sample(jax.random.key(0), (n,)))
    tv, bound = empirical_tv_keys(exact, list(map(tuple, draws))), tv_bound(exact.values(), n)
    _, _, (log_dur, _), _ = chain.tables()
    wrong = jax.jit(jax.vmap(lambda key: hsmm.sample_segments(key, jnp.log(init), jnp.log(rows), log_dur, t)[0]))(
        jax.random.split(jax.random.key(1), n))
    tv_wrong = empirical_tv_keys(exact, list(map(tuple, np.asarray(wrong))))
    print(f"untruncated prior draws (left_censored={left_censored}): TV {tv:.4f}, bound {bound:.4f}; renormalized "
          f"on 1..T: TV {tv_wrong:.4f}")
    assert tv < bound < tv_wrong


def test_the_untruncated_model_refuses_what_it_does_not_support():
    y = np.zeros((6, 1))
    emission = nh.emissions.GaussianNIW.weakly_informative(y)
    with pytest.raises(ValueError, match="support"):
        nh.HDPHSMM(1.0, 1.0, lambda k: dist.DiscreteUniform(-2 * jnp.ones(3), 5), emission, max_states=3,
                   max_duration=None)


def test_which_families_run_through_the_phases():
    rows = jnp.full((2, 2), 0.5)
    chain = lambda family, params, d: nh.SemiMarkovChain(rows[0], rows, family, params, d, 5)
    nb = {"r": jnp.array([1, 2], jnp.int32), "p": jnp.array([0.3, 0.5])}
    assert semi_markov.uses_phases(chain(nh.durations.NegativeBinomial(), nb, None))
    assert semi_markov.uses_phases(chain(nh.durations.Geometric(), {"stay": jnp.array([0.3, 0.5])}, None))
    assert not semi_markov.uses_phases(chain(nh.durations.NegativeBinomial(), nb, 5))
    assert not semi_markov.uses_phases(chain(nh.durations.NegativeBinomial.gamma_r(),
                                             {"r": jnp.array([1.5, 2.0]), "p": jnp.array([0.3, 0.5])}, None))
    assert not semi_markov.uses_phases(chain(nh.durations.Poisson(), {"rate": jnp.array([1.0, 2.0])}, None))


def test_the_gamma_prior_r_has_a_gradient_in_the_untruncated_log_prob():
    """NUTS updates the Gamma prior's real ``r``: the untruncated survival (summed pmf) is differentiable."""
    rows = jnp.array([[0.0, 1.0], [1.0, 0.0]])
    family = nh.durations.NegativeBinomial.gamma_r()
    z = jnp.array([0, 0, 1, 1, 1, 0])

    def log_prob(r):
        chain = nh.SemiMarkovChain(jnp.array([0.5, 0.5]), rows, family, {"r": r, "p": jnp.array([0.4, 0.6])}, None, 6)
        return chain.log_prob(z)

    g = jax.jit(jax.grad(log_prob))(jnp.array([1.5, 2.5]))
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g) != 0)


# ============================================================================ the kernel
def _segment_term(law, mean, d, censored):
    """One segment's log term under ``law`` (SciPy, of ``d - 1``) with mean duration ``mean``:
    ``censored`` is ``right`` or ``(right, left)``; the pmf, the survival ``P(D >= d)`` (right), the
    residual life ``P(D >= d) / E[D]`` (left) or its survival ``1 - sum_{j < d} P(D >= j) / E[D]``
    (both)."""
    right, left = censored if isinstance(censored, tuple) else (censored, False)
    if not left:
        return law.logsf(d - 2) if right else law.logpmf(d - 1)
    if right:  # sum_{j >= d} P(D >= j) / E[D]: the complement, or (where it cancels) sum_k (k - d + 1) p(k)
        complement = 1.0 - sum(np.exp(law.logsf(j - 2)) for j in range(1, d)) / mean
        k = np.arange(d, d + 3000)[:, None]
        direct = np.sum((k - d + 1) * np.exp(law.logpmf(k - 1)), 0) / mean
        return np.log(np.where(complement > 1e-6, complement, direct))
    return law.logsf(d - 2) - np.log(mean)


def _nb_segment_terms(d, censored):
    """A segment's log term (:func:`_segment_term`) under the shifted NB on a grid of p (rows) for each r
    (columns)."""
    p = (np.arange(4000) + 0.5) / 4000
    out = [_segment_term(stats.nbinom(r, 1 - p), 1.0 + r * p / (1 - p), d, censored) for r in R_VALUES]
    return np.stack(out, -1), p


def nb_marginal(durations, censored):
    """``log p(durations)`` of one state's segments, ``r`` (uniform on ``R_VALUES``) and ``p ~ Beta(P_A,
    P_B)`` integrated out (``p`` by the midpoint rule), untruncated; ``censored[i]``: survival."""
    total = 0.0
    for d, c in zip(durations, censored):
        terms, p = _nb_segment_terms(int(d), c)
        total = total + terms
    log_prior_p = (P_A - 1) * np.log(p) + (P_B - 1) * np.log1p(-p) - betaln(P_A, P_B)
    return logsumexp(total + log_prior_p[:, None]) + np.log(1.0 / len(p)) - np.log(len(R_VALUES))


def poisson_marginal(durations, censored):
    """``log p(durations)`` of one state's segments under untruncated shifted Poisson durations, the rate
    (``Gamma(POISSON_CONC, POISSON_RATE)``) integrated out by quadrature."""
    lam = np.linspace(1e-4, 30.0, 6001)
    log_prior = POISSON_CONC * np.log(POISSON_RATE) - gammaln(POISSON_CONC) + (POISSON_CONC - 1) * np.log(lam) \
        - POISSON_RATE * lam
    law = stats.poisson(lam)
    terms = sum(_segment_term(law, 1.0 + lam, int(d), c) for d, c in zip(durations, censored))
    return logsumexp(terms + log_prior) + np.log(lam[1] - lam[0])


def _model(duration, right_censoring, left_censoring=False):
    def model(y):
        hsmm_model = nh.HDPHSMM(GAMMA, ALPHA, duration, nh.emissions.Categorical(2, 1.0), max_states=3,
                                max_duration=None, right_censoring=right_censoring, left_censoring=left_censoring)
        nh.sample("y", hsmm_model, obs=y)

    return model


NB = nh.durations.NegativeBinomial(P_A, P_B, r_values=R_VALUES)
POISSON = nh.durations.Poisson(POISSON_CONC, POISSON_RATE)
NUM_CHAINS, NUM_WARMUP = 3000, 40


def _kernel_tv(duration, marginal, right_censored, left_censored=False):
    exact = exact_hsmm_posterior(Y, right_censored, duration_marginal=marginal, left_censored=left_censored)
    draws = final_states(nh.infer.WeakLimitGibbs(_model(duration, right_censored, left_censored)), (Y,), NUM_CHAINS,
                         NUM_WARMUP)
    return empirical_tv(exact, draws), tv_bound(exact.values(), NUM_CHAINS)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("family, right_censored, left_censored",
                         [("nb", True, False), ("nb", False, False), ("poisson", True, False), ("nb", True, True),
                          ("poisson", False, True)])
def test_exact_enumeration(family, right_censored, left_censored):
    """WeakLimitGibbs against the exact posterior over partitions (NB through the phases, Poisson through
    the explicit messages), with the first segment left-censored in the last two cases."""
    duration, marginal = (NB, nb_marginal) if family == "nb" else (POISSON, poisson_marginal)
    tv, bound = _kernel_tv(duration, marginal, right_censored, left_censored)
    print(f"untruncated HSMM enumeration ({family}, right_censored={right_censored}, left_censored={left_censored}): "
          f"TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_negative_control_survival_ratio_ignored(monkeypatch):
    """The duration update accepts every proposal (the censored last segment left out of the
    duration parameters' conditional): the enumeration test rejects it."""
    original = semi_markov.sample_untruncated_duration_parameters
    monkeypatch.setattr(semi_markov, "sample_untruncated_duration_parameters",
                        lambda *args, right_censored, left_censored=False: original(*args, right_censored=False,
                                                                                    left_censored=left_censored))
    tv, bound = _kernel_tv(NB, nb_marginal, True)
    print(f"untruncated HSMM enumeration, survival ratio ignored: TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound


def geweke_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    model = nh.HDPHSMM(gamma, alpha, nh.durations.NegativeBinomial(2.0, 3.0, r_values=(1, 2, 3)),
                       nh.emissions.Categorical(3, 1.0), max_states=3, max_duration=None, num_steps=num_steps)
    nh.sample("y", model, obs=y)


STATISTICS = {
    "gamma": lambda z: z["gamma"],
    "alpha": lambda z: z["alpha"],
    "beta0": lambda z: z["y_beta"][0],
    "pi01": lambda z: z["y_trans"][0, 1],
    "r0": lambda z: z["y_duration_r"][0],
    "p0": lambda z: z["y_duration_p"][0],
    "probs00": lambda z: z["y_probs"][0, 0],
    "first_state": lambda z: z["y_states"][0],
    "segments": lambda z: 1 + jnp.sum(z["y_states"][1:] != z["y_states"][:-1]),
}


@pytest.mark.slow
@pytest.mark.statistical
def test_geweke():
    check_geweke(geweke_model, STATISTICS, "untruncated HSMM")


# ============================================================================ the duration update alone
def _exact_r_posterior(complete, censored):
    """``p(r | durations)`` of the shifted NB (``r`` uniform on ``R_VALUES``, ``p ~ Beta(P_A, P_B)``)
    with ``p`` integrated out by the midpoint rule: ``complete`` durations scored by the pmf,
    ``censored`` ones by the survival."""
    p = (np.arange(20000) + 0.5) / 20000
    log_prior_p = (P_A - 1) * np.log(p) + (P_B - 1) * np.log1p(-p) - betaln(P_A, P_B)
    out = []
    for r in R_VALUES:
        law = stats.nbinom(r, 1 - p)
        terms = sum(law.logpmf(d - 1) for d in complete) + sum(law.logsf(d - 2) for d in censored)
        out.append(logsumexp(terms + log_prior_p))
    out = np.array(out)
    return np.exp(out - logsumexp(out))


def _nb_updated_r(states, lengths, seed, num_chains, num_steps, **censoring):
    """The last ``r`` of state 0 after ``num_steps`` untruncated duration updates
    (:func:`~numpyro_hdphmm.infer.moves.semi_markov.sample_untruncated_duration_parameters` with
    ``censoring``) in ``num_chains`` independent chains started from the prior, for the fixed state
    sequences ``states``."""
    def chain(key):
        k0, k_steps = jax.random.split(key)
        params = NB.sample_parameters(k0, (2,))

        def step(params, key):
            new, _ = semi_markov.sample_untruncated_duration_parameters(key, NB, params, states, lengths, **censoring)
            return new, None

        params, _ = jax.lax.scan(step, params, jax.random.split(k_steps, num_steps))
        return params["r"][0]

    return np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(seed), num_chains)))


def _updated_r(right_censored_in_update, num_chains, num_steps=10):
    """:func:`_nb_updated_r` for two sequences: state 0 has a complete segment of 8 steps and a
    right-censored last segment of 1 step (which says nothing: ``P(D >= 1) = 1``; scored as
    complete, it says ``d = 1``)."""
    states = jnp.array([[0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0],
                        [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    return _nb_updated_r(states, jnp.array([19, 19], jnp.int32), 5, num_chains, num_steps,
                         right_censored=right_censored_in_update)


@pytest.mark.statistical
def test_untruncated_duration_update_targets_the_censored_posterior():
    """The Metropolis-Hastings step (conjugate proposal from the complete segments, survival ratio
    of the censored one) leaves ``p(r, p | durations)`` invariant: ``r``'s law after 10 steps against
    the exact posterior; the same step without the survival ratio (the negative control) targets
    the complete segments' posterior instead and is rejected."""
    check_r_law("untruncated duration update", "without the survival ratio", _updated_r, _exact_r_posterior([8], [1]),
                _exact_r_posterior([8, 1], []), 2000)


def _exact_left_r_posterior(left_censored):
    """``p(r | segments of state 0)`` of the untruncated shifted NB for ``CENSORED_STATES``
    (``SEGMENTS``), ``p`` integrated out by the midpoint rule: with left-censoring the first segments
    by the residual life ``P(D >= d) / E[D]`` (its survival ``1 - sum_{j < d} P(D >= j) / E[D]`` for
    the one censored on both sides), without it as ordinary segments."""
    p = (np.arange(20000) + 0.5) / 20000
    log_prior_p = (P_A - 1) * np.log(p) + (P_B - 1) * np.log1p(-p) - betaln(P_A, P_B)
    out = []
    for r in R_VALUES:
        law = stats.nbinom(r, 1 - p)
        terms = sum(_segment_term(law, 1.0 + r * p / (1 - p), d, False) for d in SEGMENTS["complete"])
        terms = terms + sum(_segment_term(law, 1.0 + r * p / (1 - p), d, True) for d in SEGMENTS["right"])
        kinds = {"left": (False, True), "both": (True, True)} if left_censored else {"left": False, "both": True}
        for kind, flags in kinds.items():
            terms = terms + sum(_segment_term(law, 1.0 + r * p / (1 - p), d, flags) for d in SEGMENTS[kind])
        out.append(logsumexp(terms + log_prior_p))
    out = np.array(out)
    return np.exp(out - logsumexp(out))


def _left_updated_r(left_censored, num_chains, num_steps=40):
    """:func:`_nb_updated_r` for ``CENSORED_STATES``, right-censored, left-censored or not."""
    return _nb_updated_r(CENSORED_STATES, CENSORED_LENGTHS, 6, num_chains, num_steps, right_censored=True,
                         left_censored=left_censored)


@pytest.mark.slow  # 75 s: the negative binomial's update in float64, 4,000 chains of 40 steps
@pytest.mark.statistical
def test_untruncated_duration_update_with_left_censoring():
    """The untruncated duration step with left-censored first segments (one of them also
    right-censored) leaves ``p(r, p | segments)`` invariant: ``r``'s law after 40 steps against the
    exact posterior.  The negative control runs the step without left-censoring on the same
    segments."""
    check_r_law("untruncated duration update, left-censored", "without left-censoring", _left_updated_r,
                _exact_left_r_posterior(True), _exact_left_r_posterior(False), 4000)


@pytest.mark.parametrize("left_censored", [False, True])
@pytest.mark.parametrize("right_censored", [True, False])
def test_untruncated_log_prob_is_the_explicit_tables_log_prob(right_censored, left_censored):
    """``SemiMarkovChain.log_prob`` without truncation (the pmf at the segment ends, the survival at the last
    one) equals :func:`~numpyro_hdphmm._core.hsmm.hsmm_log_prob` on the full tables, for the closed-form and the
    summed survival functions, with several sequences of different lengths."""
    rows = jnp.array([[0.3, 0.5, 0.2], [0.4, 0.1, 0.5], [0.25, 0.25, 0.5]])
    init = jnp.array([0.5, 0.3, 0.2])
    z = jnp.array([[0, 0, 1, 1, 1, 2, 2, 0], [2, 2, 2, 2, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    lengths = jnp.array([8, 6, 5])  # the third: one segment, censored on both sides with left-censoring
    cases = [(nh.durations.NegativeBinomial(r_values=(1, 2, 3)), {"r": jnp.array([1, 2, 3], jnp.int32),
                                                                   "p": jnp.array([0.5, 0.6, 0.2])}),
             (nh.durations.NegativeBinomial.gamma_r(), {"r": jnp.array([1.5, 2.5, 0.7]), "p": jnp.array([0.5, 0.6, 0.2])}),
             (nh.durations.Poisson(), {"rate": jnp.array([0.5, 3.0, 7.0])})]
    @jax.jit
    def both(family, params):
        chain = nh.SemiMarkovChain(init, rows, family, params, None, 8, lengths, right_censored=right_censored,
                                   left_censored=left_censored)
        log_init, log_trans, (log_dur, log_surv), first = chain.tables()
        want = jax.vmap(lambda zi, n: hsmm.hsmm_log_prob(zi, log_init, log_trans, log_dur, log_surv, n,
                                                         right_censored=right_censored, first=first))(z, lengths)
        return chain.log_prob(z), want

    for family, params in cases:
        got, want = both(family, params)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_pointwise_log_survival_in_the_far_tail(dtype):
    """Where the incomplete gamma and beta functions underflow, the pointwise survival is the tail
    extrapolated from the pmf: within 1e-3 (relative to the log) of SciPy, and finite."""
    d = np.array([150, 300, 600])
    poisson = nh.durations.Poisson().log_survival({"rate": jnp.asarray([2.0, 5.0], dtype)}, d)
    nb = nh.durations.NegativeBinomial().log_survival({"r": jnp.array([2, 7], jnp.int32),
                                                       "p": jnp.asarray([0.3, 0.5], dtype)}, d)
    want_poisson = stats.poisson([2.0, 5.0]).logsf(d[:, None] - 2)
    want_nb = stats.nbinom([2, 7], 1 - np.array([0.3, 0.5])).logsf(d[:, None] - 2)
    for got, want in ((poisson, want_poisson), (nb, want_nb)):
        got = np.asarray(got)
        fin = np.isfinite(want)
        assert np.all(np.isfinite(got)) and np.all(got[~fin] < -700)
        assert np.max(np.abs(got[fin] - want[fin]) / np.abs(want[fin])) < 1e-3
