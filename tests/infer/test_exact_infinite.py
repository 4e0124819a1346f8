"""Validation of the exact enumeration of the infinite sticky HDP-HMM (``_checks.py``):
``log_infinite_prior_partition`` and ``exact_infinite_posterior``, against which the
infinite-model kernels (direct assignment, beam) are tested.

Checks: (1) the prior sums to one over all partitions; (2) it equals, to rounding, an
independent exact enumeration of the sequential Chinese restaurant franchise with loyal
customers (Fox et al. 2007 eqs. 27-29: every table choice, override and top-level dish choice
of every customer, no Stirling numbers or closed forms); (3) it agrees in total variation with
forward draws of the package's stick-breaking generative model (``nh.StickyHDPHMM``), one and
two sequences, and the posterior agrees with those draws conditioned on the observations
(rejection); (4) deliberately wrong formulas fail (2) and (3).
"""

import contextlib
import math
import warnings
from unittest import mock

import jax
import numpy as np
import pytest
from scipy.special import gammaln

import numpyro_hdphmm as nh
import partition_oracle as partition

import _checks
from _checks import (
    empirical_tv,
    exact_infinite_posterior,
    log_infinite_prior_partition,
    partition_key,
    restricted_growth_strings,
    tv_bound,
)

GAMMA, ALPHA, KAPPA = 1.0, 1.0, 2.0
NUM_STEPS = 4
MAX_STATES = 12
NUM_DRAWS = 20_000
PARAMS = [(1.0, 2.0, 1.0), (0.5, 1.0, 0.0), (3.0, 0.7, 5.0), (2.0, 0.3, 0.0)]
LAYOUTS = [[1], [2], [3], [4], [5], [6], [2, 3], [1, 1, 2], [3, 3], [1, 4]]


def _prior_dict(lengths, gamma, alpha, kappa, wrong=None):
    """``partition -> prior probability`` over all partitions (``wrong``: a key of :data:`WRONG`,
    the package's formula with one piece replaced by a deliberately wrong one)."""
    out = {}
    with _wrong_formula(wrong):
        for z in restricted_growth_strings(sum(lengths)):
            n, first = _checks.infinite_transition_counts(z, lengths)
            out[z] = float(np.exp(partition.log_prior_counts(n, first, gamma, alpha, kappa)))
    return out


def _normalized(d):
    total = sum(d.values())
    return {k: v / total for k, v in d.items()}


def _tv(p, q):
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def _stirling_second_kind(n_max):
    """Stirling numbers of the second kind: the wrong kind, for a negative control."""
    s = np.zeros((n_max + 1, n_max + 1))
    s[0, 0] = 1.0
    for n in range(n_max):
        s[n + 1, 1:] = np.arange(1, n_max + 1) * s[n, 1:] + s[n, :-1]
    return s


def _overrides_informative(n_kk, kappa, stirling):
    """Overridden tables counted as informative (``mbar = m`` instead of ``m - w``)."""
    diag = np.zeros(n_kk + 1)
    for m in range(1, n_kk + 1):
        for w in range(m + 1):
            diag[m] += stirling[n_kk, m] * math.comb(m, w) * float(kappa) ** w
    return diag


def _start_row_with_kappa(first, alpha, stirling):
    """The start restaurant with concentration ``alpha + kappa`` (as if it were sticky)."""
    a0 = alpha + KAPPA
    log_norm = gammaln(a0) - gammaln(a0 + np.sum(first))
    polys = [stirling[f, :f + 1] * (a0 / alpha) ** np.arange(f + 1) if f > 0 else np.array([1.0]) for f in first]
    return log_norm, polys


WRONG = {
    "overridden tables informative": ("diagonal_polynomial", _overrides_informative),
    "Stirling numbers of the second kind": ("stirling1_unsigned", _stirling_second_kind),
    "start row with concentration alpha + kappa": ("start_restaurant", _start_row_with_kappa),
}


@contextlib.contextmanager
def _wrong_formula(name):
    if name is None:
        yield
        return
    attribute, replacement = WRONG[name]
    with mock.patch.object(partition, attribute, replacement):
        yield


# ------------------------------------------------------------- independent exact reference
def crf_tree_prior(lengths, gamma, alpha, kappa):
    """Exact prior over partitions by enumerating every path of the sequential Chinese
    restaurant franchise with loyal customers (Fox et al. eqs. 27-29, Teh et al. eqs. 12-15).

    The ``t``-th state is a customer of restaurant ``z_{t-1}`` (of the start restaurant at the
    first step of each sequence).  It joins an existing table with probability
    ``n_table / (n_r + c_r)`` or opens one with ``c_r / (n_r + c_r)``, ``c_r = alpha + kappa``
    (``alpha`` for the start restaurant).  A new table of state restaurant ``r`` is overridden
    to serve ``r`` with probability ``rho = kappa / (alpha + kappa)``; otherwise (and always
    in the start restaurant) its dish comes from the top-level CRP over the informative
    tables: dish ``d`` with ``mbar_d / (mbar + gamma)``, a new dish with ``gamma / (mbar +
    gamma)``.  The customer's state is the dish of its table.
    """
    c = alpha + kappa
    rho = kappa / c
    starts = set(np.cumsum([0] + list(lengths))[:-1].tolist())
    total = sum(lengths)
    out = {}

    def visit(t, z, rest, top, prob):
        if t == total:
            key = partition_key(z)
            out[key] = out.get(key, 0.0) + prob
            return
        r = "start" if t in starts else z[-1]
        conc = alpha if r == "start" else c
        tables = rest.get(r, ())
        denom = sum(cnt for cnt, _ in tables) + conc
        for i, (cnt, dish) in enumerate(tables):
            seated = tables[:i] + ((cnt + 1, dish),) + tables[i + 1:]
            visit(t + 1, z + (dish,), {**rest, r: seated}, top, prob * cnt / denom)
        p_new = conc / denom
        if r != "start" and kappa > 0:
            visit(t + 1, z + (r,), {**rest, r: tables + ((1, r),)}, top, prob * p_new * rho)
        p_considered = p_new * (1.0 if r == "start" else 1.0 - rho)
        m_tot = sum(top)
        for d, m in enumerate(top):
            visit(t + 1, z + (d,), {**rest, r: tables + ((1, d),)},
                  top[:d] + (m + 1,) + top[d + 1:], prob * p_considered * m / (m_tot + gamma))
        d = len(top)
        visit(t + 1, z + (d,), {**rest, r: tables + ((1, d),)}, top + (1,),
              prob * p_considered * gamma / (m_tot + gamma))

    visit(0, (), {}, (), 1.0)
    return out


# ------------------------------------------------------------------------ exact checks
def test_restricted_growth_strings_are_bell_many_canonical_keys():
    for t, bell in zip(range(1, 8), [1, 2, 5, 15, 52, 203, 877]):
        keys = restricted_growth_strings(t)
        assert len(keys) == len(set(keys)) == bell
        assert all(partition_key(k) == k for k in keys)


@pytest.mark.parametrize("gamma,alpha,kappa", PARAMS)
@pytest.mark.parametrize("lengths", LAYOUTS, ids=str)
def test_prior_sums_to_one(lengths, gamma, alpha, kappa):
    total = sum(np.exp(log_infinite_prior_partition(z, lengths, gamma, alpha, kappa))
                for z in restricted_growth_strings(sum(lengths)))
    assert abs(total - 1.0) < 1e-12, total


@pytest.mark.parametrize("gamma,alpha,kappa", PARAMS)
@pytest.mark.parametrize("lengths", [[1], [3], [5], [6], [3, 2], [2, 1, 2], [4, 2]], ids=str)
def test_prior_matches_sequential_crf_enumeration(lengths, gamma, alpha, kappa):
    tree = crf_tree_prior(lengths, gamma, alpha, kappa)
    exact = _prior_dict(lengths, gamma, alpha, kappa)
    assert abs(sum(tree.values()) - 1.0) < 1e-12
    assert set(tree) == set(exact)
    err = max(abs(exact[k] - tree[k]) for k in exact)
    assert err < 1e-12, err


def test_prior_is_label_invariant():
    z = [3, 3, 7, 3, 1]
    assert log_infinite_prior_partition(z, [3, 2], 1.0, 2.0, 1.0) == log_infinite_prior_partition(
        partition_key(z), [3, 2], 1.0, 2.0, 1.0)


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_formulas_fail_crf_enumeration(name):
    """Negative control: each deliberately wrong formula differs from the CRF enumeration."""
    lengths = [3, 3]
    tree = crf_tree_prior(lengths, GAMMA, ALPHA, KAPPA)
    wrong = _normalized(_prior_dict(lengths, GAMMA, ALPHA, KAPPA, wrong=name))
    assert _tv(tree, wrong) > 1e-3, _tv(tree, wrong)


def test_posterior_is_prior_times_dirichlet_multinomial():
    seqs = [[0, 1, 1], [1, 0]]
    post = exact_infinite_posterior(seqs, GAMMA, ALPHA, KAPPA, 2, 0.7)
    assert abs(sum(post.values()) - 1.0) < 1e-12
    assert set(post) == set(restricted_growth_strings(5))
    # an uninformative emission prior (huge concentration: every y has prob ~2^-T) gives the prior
    flat = exact_infinite_posterior(seqs, GAMMA, ALPHA, KAPPA, 2, 1e6)
    prior = _prior_dict([3, 2], GAMMA, ALPHA, KAPPA)
    assert max(abs(flat[k] - prior[k]) for k in prior) < 1e-4
    assert max(abs(post[k] - prior[k]) for k in prior) > 1e-2
    # a direct check of one ratio: all-in-one-state vs all-distinct
    y = np.array([0, 1, 1, 1, 0])
    a, b = (0, 0, 0, 0, 0), (0, 1, 2, 3, 4)
    log_dm = lambda z: _checks._log_dirmult_partition(z, y, 2, 0.7)
    want = (log_infinite_prior_partition(a, [3, 2], GAMMA, ALPHA, KAPPA) + log_dm(a)
            - log_infinite_prior_partition(b, [3, 2], GAMMA, ALPHA, KAPPA) - log_dm(b))
    assert abs(np.log(post[a] / post[b]) - want) < 1e-10


def test_input_validation():
    with pytest.raises(ValueError, match="lengths"):
        log_infinite_prior_partition([0, 1, 0], [2], 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="gamma"):
        log_infinite_prior_partition([0, 1], [2], 0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="kappa"):
        log_infinite_prior_partition([0, 1], [2], 1.0, 1.0, -1.0)
    with pytest.raises(ValueError, match="sequences"):
        exact_infinite_posterior([[0, 2]], 1.0, 1.0, 0.0, 2, 1.0)
    with pytest.raises(ValueError, match="sequences"):
        exact_infinite_posterior([], 1.0, 1.0, 0.0, 2, 1.0)


# ---------------------------------------------------------------- forward simulation
def _draw(gamma, alpha, kappa, num_steps, max_states, num_draws, second_len, seed):
    """Partitions of ``num_draws`` forward draws of the stick-breaking model: one sequence of
    ``num_steps`` from ``nh.StickyHDPHMM`` and, sharing its ``beta``, rows and start row, a second
    one of ``second_len`` from ``nh.MarkovChain``.  Returns (states, second, y, overflow fraction)."""
    hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(2, 1.0),
                          max_states=max_states, num_steps=num_steps)
    k1, k2 = jax.random.split(jax.random.key(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow: counted and bounded below
        y, inter = hmm.sample_with_intermediates(k1, (num_draws,))
        trans = inter["trans"]
        chain = nh.MarkovChain(trans[:, max_states], trans[:, :max_states], second_len)
        second, (escapes,) = chain.sample_with_intermediates(k2)
    overflow = np.mean((np.asarray(inter["overflow"]) + np.asarray(escapes)) > 0)
    return np.asarray(inter["states"]), np.asarray(second), np.asarray(y), overflow


@pytest.fixture(scope="module")
def forward():
    states, second, y, overflow = _draw(GAMMA, ALPHA, KAPPA, NUM_STEPS, MAX_STATES, NUM_DRAWS, 2, seed=0)
    # a draw past the capacity is redrawn (a bias of at most this fraction in TV): keep it negligible
    assert overflow < 2e-3, overflow
    return states, second, y


def test_prior_matches_forward_simulation(forward):
    states = forward[0]
    exact = _prior_dict([NUM_STEPS], GAMMA, ALPHA, KAPPA)
    tv, bound = empirical_tv(exact, states), tv_bound(exact.values(), len(states))
    assert tv < bound, (tv, bound)


def test_prior_two_sequences_matches_forward_simulation(forward):
    states, second = forward[0], forward[1]
    flat = np.concatenate([states[:, :3], second], 1)  # sequences of lengths 3 and 2
    exact = _prior_dict([3, 2], GAMMA, ALPHA, KAPPA)
    tv, bound = empirical_tv(exact, flat), tv_bound(exact.values(), len(flat))
    assert tv < bound, (tv, bound)


@pytest.mark.parametrize("name,lengths", [("overridden tables informative", [NUM_STEPS]),
                                          ("start row with concentration alpha + kappa", [3, 2])])
def test_wrong_formulas_fail_forward_simulation(forward, name, lengths):
    """Negative control: the same TV check rejects a deliberately wrong formula."""
    states, second = forward[0], forward[1]
    flat = states if lengths == [NUM_STEPS] else np.concatenate([states[:, :3], second], 1)
    wrong = _normalized(_prior_dict(lengths, GAMMA, ALPHA, KAPPA, wrong=name))
    tv, bound = empirical_tv(wrong, flat), tv_bound(wrong.values(), len(flat))
    assert tv > bound, (tv, bound)


def _conditioned_on_constant_y(forward):
    """Draws whose observations are all equal: by the 0 <-> 1 symmetry of the emission prior,
    exact posterior draws given ``y = 0000`` (rejection sampling)."""
    states, _, y = forward
    keep = np.all(y == y[:, :1], axis=1)
    return states[keep]


def test_posterior_matches_rejection_sampling(forward):
    accepted = _conditioned_on_constant_y(forward)
    exact = exact_infinite_posterior([[0] * NUM_STEPS], GAMMA, ALPHA, KAPPA, 2, 1.0)
    tv, bound = empirical_tv(exact, accepted), tv_bound(exact.values(), len(accepted))
    assert len(accepted) > 4000
    assert tv < bound, (tv, bound, len(accepted))


@pytest.mark.parametrize("wrong", ["emission_conc", "prior"])
def test_wrong_posterior_fails_rejection_sampling(forward, wrong):
    """Negative control: a wrong emission concentration, or a wrong prior, is rejected."""
    accepted = _conditioned_on_constant_y(forward)
    if wrong == "emission_conc":
        post = exact_infinite_posterior([[0] * NUM_STEPS], GAMMA, ALPHA, KAPPA, 2, 10.0)
    else:
        with _wrong_formula("overridden tables informative"):
            post = exact_infinite_posterior([[0] * NUM_STEPS], GAMMA, ALPHA, KAPPA, 2, 1.0)
    tv, bound = empirical_tv(post, accepted), tv_bound(post.values(), len(accepted))
    assert tv > bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("gamma,alpha,kappa", [(1.0, 2.0, 1.0), (0.5, 1.0, 0.0)])
def test_prior_matches_forward_simulation_large(gamma, alpha, kappa):
    """100k draws, T = 5 (52 partitions) and sequences of lengths (3, 3) (203 partitions)."""
    states, second, _, overflow = _draw(gamma, alpha, kappa, 5, 16, 100_000, 3, seed=1)
    assert overflow < 1e-3, overflow
    for lengths, flat in (([5], states), ([3, 3], np.concatenate([states[:, :3], second], 1))):
        exact = _prior_dict(lengths, gamma, alpha, kappa)
        tv, bound = empirical_tv(exact, flat), tv_bound(exact.values(), len(flat))
        print(f"{(gamma, alpha, kappa)} lengths={lengths}: TV {tv:.4f} < bound {bound:.4f}")
        assert tv < bound, (lengths, tv, bound)
