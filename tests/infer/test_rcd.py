"""RCDSampler: the joint distribution of states *and table counts* against exact enumeration in
every mode (sticky and not, with and without split-merge), negative controls (the paper's
printed predictive denominator), the Geweke negative control, agreement with
DirectAssignmentGibbs, vectorized chains and the ``Info`` fields.  (The partition enumeration in
blocked mode and the Geweke tests with hyperparameter sites are the conformance suite's,
``test_conformance.py``, driven by ``tests/kernel_registry.py``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import crp, hcrp
from numpyro_hdphmm.infer import DirectAssignmentGibbs, RCDSampler

from kernel_registry import geweke_model, partition_statistics
from _checks import (
    collapsed_jacobian_counted_twice,
    empirical_tv,
    chi_square_pvalue,
    empirical_tv_keys,
    exact_infinite_posterior,
    exact_table_posterior,
    final_state,
    final_states,
    geweke_z_scores,
    table_key,
    tv_bound,
)

C, CAPACITY = 2, 8
STICKY = (3.0, 2.0, 1.5)  # gamma, alpha, kappa
PLAIN = (0.7, 1.0, 0.0)  # the notes' setting (notes/rcd.md §6.2 A)
Y4 = [0, 1, 1, 0]


def fixed_model(gamma, alpha, kappa):
    def model(y):
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, nh.emissions.Categorical(C, 1.0), max_states=CAPACITY)
        nh.sample("y", hmm, obs=y)

    return model


def joint_draws(kernel, y, num_chains=2000, num_warmup=30, seed=0):
    """Independent draws of (partition, tables, overrides): the last state of ``num_chains``
    vectorized chains, keyed by :func:`table_key`; also the chains' mean Gibbs acceptance."""
    state = final_state(kernel, (np.asarray(y),), num_chains, num_warmup, seed)
    collapsed = state.algorithm.collapsed
    labels = np.asarray(collapsed.labels)
    m, w = np.asarray(collapsed.seating.m), np.asarray(collapsed.seating.w)
    keys = [table_key(labels[c], m[c], w[c]) for c in range(num_chains)]
    return keys, float(np.mean(np.asarray(state.gibbs_accept)))


def joint_tv(kernel, y, hyper, **kwargs):
    exact = exact_table_posterior([y], *hyper, C, 1.0)
    keys, accept = joint_draws(kernel, y, **kwargs)
    tv, bound = empirical_tv_keys(exact, keys), tv_bound(exact.values(), len(keys))
    p_value = chi_square_pvalue(exact, keys)
    print("joint TV", tv, "bound", bound, "chi-square p", p_value, "accept", accept)
    return tv, bound, p_value


# --------------------------------------------------------------------------- enumeration
@pytest.mark.statistical
def test_joint_enumeration_stepwise_sticky():
    """Alg. 5 (three customers per step, orphans, loyal customers): states, tables and override
    tables jointly match the exact posterior (partitions summed over nothing: the tables are
    part of the key)."""
    tv, bound, p_value = joint_tv(RCDSampler(fixed_model(*STICKY), mode="stepwise"), Y4, STICKY)
    assert tv < bound and p_value > 1e-4, (tv, bound, p_value)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("mode", ["stepwise", "slice", "blocked", "beam"])
@pytest.mark.parametrize("hyper", [STICKY, PLAIN], ids=["sticky", "plain"])
def test_joint_enumeration_every_mode(mode, hyper):
    kernel = RCDSampler(fixed_model(*hyper), mode=mode, block_size=3)
    tv, bound, p_value = joint_tv(kernel, Y4, hyper, num_chains=4000)
    assert tv < bound and p_value > 1e-4, (mode, tv, bound, p_value)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("mode", ["stepwise", "beam"])
def test_joint_enumeration_split_merge(mode):
    kernel = RCDSampler(fixed_model(*STICKY), mode=mode, block_size=3, split_merge=2)
    tv, bound, p_value = joint_tv(kernel, Y4, STICKY, num_chains=4000)
    assert tv < bound and p_value > 1e-4, (mode, tv, bound, p_value)


def printed_root_weights(seating, gamma, weak_limit=False):
    """The paper's printed predictive (eqs. 31-32, Alg. 2): denominator ``m_.k + gamma`` instead
    of ``m_.. + gamma`` (notes/rcd.md §2.10 #1)."""
    dtype = jnp.result_type(gamma, float)
    root = seating.root.astype(dtype)
    return jnp.where(root > 0, root, gamma) / (root + gamma)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_printed_denominator(monkeypatch):
    """Negative control: with the printed typo the same joint test fails (the notes measured TV
    0.45 on this problem with a pure-Python prototype)."""
    monkeypatch.setattr(hcrp, "root_weights", printed_root_weights)
    tv, bound, p_value = joint_tv(RCDSampler(fixed_model(*PLAIN), mode="stepwise"), Y4, PLAIN)
    assert tv > bound and p_value < 1e-4, (tv, bound, p_value)


def non_sticky_tables(real):
    """A broken re-seating: the tables drawn from the non-sticky conditional (``kappa`` left out:
    concentrations ``alpha beta_k``, no override tables)."""
    return lambda key, n, first, beta, alpha, kappa, max_total: real(key, n, first, beta, alpha, 0.0 * kappa, max_total)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_enumeration_detects_non_sticky_reseating(monkeypatch):
    """Negative control of the collapsed update's re-seating (the default, checked by the joint
    test above with fixed concentrations, where it re-seats the franchise every sweep): with the
    tables drawn as if ``kappa = 0`` the joint of the tables is wrong.  (A subtler slip, ``beta``
    at its conditional mean instead of a draw, was not detected at ``T = 4``: TV 0.051, bound 0.11.)"""
    monkeypatch.setattr(crp, "sample_table_counts", non_sticky_tables(crp.sample_table_counts))
    tv, bound, p_value = joint_tv(RCDSampler(fixed_model(*STICKY), mode="stepwise"), Y4, STICKY)
    assert tv > bound and p_value < 1e-4, (tv, bound, p_value)


# --------------------------------------------------------------------------- arguments
def test_bad_arguments():
    model = fixed_model(*STICKY)
    with pytest.raises(ValueError, match="mode"):
        RCDSampler(model, mode="gibbs")
    with pytest.raises(ValueError, match="block_size"):
        RCDSampler(model, mode="blocked", block_size=0)
    with pytest.raises(ValueError, match="split_merge"):
        RCDSampler(model, split_merge=-1)


# --------------------------------------------------------------------------- Geweke
hyper_model = geweke_model(12)  # the conformance suite's Geweke model of this kernel

GEWEKE_STATS = partition_statistics(12)  # the conformance suite's statistics of this model


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_geweke_detects_collapsed_jacobian_counted_twice(monkeypatch):
    """Negative control of the collapsed update: the ``(alpha, kappa)`` target with the log
    transform's Jacobian ``alpha kappa`` counted twice."""
    collapsed_jacobian_counted_twice(monkeypatch)
    kernel = RCDSampler(hyper_model, mode="stepwise", hyperparameters="collapsed")
    scores = geweke_z_scores(kernel, hyper_model, GEWEKE_STATS, num_steps=6, num_iterations=6000, num_prior=20000)
    print("geweke z (Jacobian twice)", scores)
    assert max(abs(scores["alpha"]), abs(scores["kappa"])) > 4.5, scores


# --------------------------------------------------------------------------- agreement, chains
def _agreement_data():
    rng = np.random.default_rng(3)
    z = np.repeat([0, 1, 2, 1], 10)
    probs = np.array([[0.8, 0.1, 0.05, 0.05], [0.05, 0.8, 0.1, 0.05], [0.05, 0.05, 0.1, 0.8]])
    return np.array([rng.choice(4, p=probs[k]) for k in z])


def agreement_model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    hmm = nh.StickyHDPHMM(gamma, alpha, 2.0, nh.emissions.Categorical(4, 0.5), max_states=30)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow
@pytest.mark.statistical
def test_agrees_with_direct_assignment():
    """Posterior means of the number of states, ``alpha`` and ``gamma``: RCD (slice mode, with
    split-merge) vs DirectAssignmentGibbs on the same model."""
    y = _agreement_data()
    out = {}
    for name, kernel in (("rcd", RCDSampler(agreement_model, mode="slice", split_merge=2)),
                         ("da", DirectAssignmentGibbs(agreement_model))):
        mcmc = MCMC(kernel, num_warmup=200, num_samples=1000, num_chains=8, chain_method="vectorized",
                    progress_bar=False)
        mcmc.run(jax.random.key(5), y)
        s = mcmc.get_samples()
        out[name] = {k: np.asarray(s[k], float).reshape(-1) for k in ("y_num_states", "alpha", "gamma")}
    for k in ("y_num_states", "alpha", "gamma"):
        a, b = out["rcd"][k], out["da"][k]
        se = np.sqrt(a.var() / (len(a) / 20) + b.var() / (len(b) / 20))
        print("agreement", k, a.mean(), b.mean(), se)
        assert abs(a.mean() - b.mean()) < 4 * se, (k, a.mean(), b.mean(), se)


@pytest.mark.slow
def test_vectorized_chains_and_info_fields():
    import arviz as az

    y = _agreement_data()
    mcmc = MCMC(RCDSampler(agreement_model, mode="beam", block_size=5, split_merge=1), num_warmup=20,
                num_samples=20, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0), y, extra_fields=("gibbs_accept", "split_merge_accept", "overflow"))
    extra = mcmc.get_extra_fields()
    acc = np.asarray(extra["gibbs_accept"])
    assert acc.shape == (40,) and np.all((acc >= 0) & (acc <= 1)) and acc.mean() > 0.5
    sm = np.asarray(extra["split_merge_accept"])
    assert np.all((sm >= 0) & (sm <= 1))
    idata = az.from_numpyro(mcmc)
    assert "gibbs_accept" in idata.sample_stats
    assert idata.posterior["y_states"].dims == ("chain", "draw", "time")
    assert not np.array_equal(np.asarray(idata.posterior["alpha"][0]), np.asarray(idata.posterior["alpha"][1]))


# --------------------------------------------------------------------------- other emissions
@pytest.mark.slow
@pytest.mark.statistical
def test_custom_emission_enumeration():
    """Emissions as plain NumPyro (the uncollapsed emission step: likelihoods at the current
    parameters, a new state in a uniformly chosen free slot, the user's ``probs`` moved by the
    inner NUTS): the partition matches the exact posterior of the conjugate model."""
    from test_custom_emission_kernels import ALPHA as A, C as CC, ETA, KAPPA as KK, Y, custom_model

    exact = exact_infinite_posterior([Y], 3.0, A, KK, CC, ETA)
    draws = final_states(RCDSampler(custom_model(3.0, 8), mode="stepwise"), (np.asarray(Y),), num_chains=1000,
                         num_warmup=40, seed=2)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    print("custom TV", tv, "bound", bound)
    assert tv < bound, (tv, bound)


@pytest.mark.slow
@pytest.mark.statistical
def test_dp_mixture_enumeration():
    """DP-mixture emissions (component indicators kept, a labelled seating of the emission
    customers): the partition of the states matches the exact posterior."""
    from test_direct_assignment import exact_mixture_posterior, mixture_model

    y = [0, 2, 1, 1, 0]
    exact = exact_mixture_posterior(y, 3, 0.5)
    draws = final_states(RCDSampler(mixture_model, mode="stepwise"), (np.asarray(y),), num_chains=2000,
                         num_warmup=30, seed=3)
    tv, bound = empirical_tv(exact, draws), tv_bound(exact.values(), len(draws))
    print("dp mixture TV", tv, "bound", bound)
    assert tv < bound, (tv, bound)


def lognormal_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.LogNormal(1.0, 0.5))  # no exact update: the inner NUTS
    hmm = nh.StickyHDPHMM(gamma, alpha, 1.0, nh.emissions.Categorical(3, 1.0), max_states=12, num_steps=num_steps)
    nh.sample("y", hmm, obs=y)


@pytest.mark.slow
@pytest.mark.statistical
def test_geweke_inner_kernel_on_the_seating_density():
    """``alpha`` with a LogNormal prior is moved by the inner NUTS on the density of the states
    and table counts given the concentrations (``beta`` and rows integrated out, the seating
    kept): its prior is recovered."""
    stats = {k: GEWEKE_STATS[k] for k in ("gamma", "alpha", "self_rate", "num_states")}
    scores = geweke_z_scores(RCDSampler(lognormal_model, mode="stepwise"), lognormal_model, stats, num_steps=6,
                             num_iterations=2000, num_prior=20000)
    print("geweke z (inner NUTS)", scores)
    assert all(abs(z) < 4.5 for z in scores.values()), scores


# --------------------------------------------------------------------------- write-once seating
def test_pending_seating_matches_the_dense_updates():
    """The step-wise modes' pending seating (``hcrp.pending``/``commit``: the count matrices
    written once per move) gives the dense updates' factors, predictive rows and columns and,
    committed, the same seating; uncommitted, the seating exactly as it was.  The moves share
    cells (a customer removed and added back in the same cell, the diagonal)."""
    hyper = crp.Concentrations(jnp.float32(1.5), jnp.float32(2.0), jnp.float32(1.0))
    capacity, max_tables = 5, 64
    log_ratios = hcrp.stirling_log_ratios(200, max_tables, jnp.float32)
    rng = np.random.default_rng(0)
    zeros = jnp.zeros((capacity + 1, capacity), jnp.int32)
    seating = hcrp.Seating(zeros, zeros, jnp.zeros(capacity, jnp.int32), jnp.zeros(capacity, jnp.int32),
                           jnp.zeros(capacity + 1, jnp.int32), jnp.zeros((), jnp.int32))
    for _ in range(60):  # a seating of positive probability: customers added one by one
        j, k = int(rng.integers(0, capacity + 1)), int(rng.integers(0, 3))
        seating = hcrp.add_customer(seating, j, k, float(rng.uniform(0.01, 1.0)), hyper, max_tables)[0]
    n = np.asarray(seating.n)
    cells = [tuple(c) for c in np.argwhere(n > 0)]
    for trial in range(12):
        a, b = (cells[int(i)] for i in rng.choice(len(cells), 2))
        # remove a, remove b, add back a (the same cell), add (b's restaurant, a's dish); the last
        # two are masked off in some trials
        when = [True, True, bool(trial % 3), bool(trial % 2)]
        u = rng.uniform(0.01, 0.99, 6)
        dense, moving = seating, hcrp.pending(seating, 4)
        results = []
        for s in ("dense", "pending"):
            x = dense if s == "dense" else moving
            x, r1 = hcrp.remove_customer(x, a[0], a[1], u[0], u[1], log_ratios, hyper, when=when[0])
            x, r2 = hcrp.remove_customer(x, b[0], b[1], u[2], u[3], log_ratios, hyper, when=when[1])
            row, col = hcrp.log_prob_row(x, b[0], hyper), hcrp.log_prob_column(x, a[1], hyper)
            x, r3, o3 = hcrp.add_customer(x, a[0], a[1], u[4], hyper, max_tables, when=when[2])
            x, r4, o4 = hcrp.add_customer(x, b[0], a[1], u[5], hyper, max_tables, when=when[3])
            results.append((x, [r1, r2, r3, r4], row, col))
        (dense, r_dense, row_d, col_d), (moving, r_pending, row_p, col_p) = results
        np.testing.assert_allclose(r_pending, r_dense, rtol=1e-6)
        np.testing.assert_allclose(row_p, row_d, rtol=1e-6)
        np.testing.assert_allclose(col_p, col_d, rtol=1e-6)
        committed = hcrp.commit(hcrp.commit_vectors(seating, moving, True), moving, True)
        for got, want in zip(committed, dense):
            np.testing.assert_array_equal(got, want)
        kept = hcrp.commit(hcrp.commit_vectors(seating, moving, False), moving, False)
        for got, want in zip(kept, seating):
            np.testing.assert_array_equal(got, want)
