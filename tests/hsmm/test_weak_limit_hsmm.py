"""WeakLimitGibbs on the HDP-HSMM: exact enumeration of the posterior over segmentations (T = 6,
L = 3, Poisson durations truncated at max_duration, right-censoring on and off), its negative
control (the censored last segment scored as complete), and Geweke's joint-distribution test with
duration, emission and hyperparameter sites."""

import itertools
import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy.special import gammaln, logsumexp

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import hsmm
from numpyro_hdphmm.infer.moves import semi_markov

from tests.infer._checks import _simplex_rule, callbacks_in_sweep, empirical_tv, final_states, geweke_z_scores, partition_key, tv_bound

Y = np.array([0, 0, 1, 1, 1, 0])
GAMMA, ALPHA, CONC, RATE, MAX_D = 1.5, 2.0, 2.0, 1.0, 4


def _model(right_censoring):
    def model(y):
        hsmm_model = nh.HDPHSMM(GAMMA, ALPHA, nh.durations.Poisson(CONC, RATE), nh.emissions.Categorical(2, 1.0),
                                max_states=3, max_duration=MAX_D, right_censoring=right_censoring)
        nh.sample("y", hsmm_model, obs=y)

    return model


def truncated_poisson_marginal(durations, censored):
    """``log p(durations)`` of one state's segments with its Poisson rate integrated out by
    quadrature (Gamma(CONC, RATE) prior, the law truncated to ``1..MAX_D``): ``censored[i]`` scores
    segment ``i`` by the survival ``P(D >= d)``."""
    lam = np.linspace(1e-4, 30.0, 6001)
    log_prior_lam = CONC * np.log(RATE) - gammaln(CONC) + (CONC - 1) * np.log(lam) - RATE * lam
    d = np.arange(1, MAX_D + 1)
    log_pmf = (d[:, None] - 1) * np.log(lam)[None] - lam[None] - gammaln(d)[:, None]  # (D, grid)
    log_dur = log_pmf - logsumexp(log_pmf, 0)
    log_surv = np.logaddexp.accumulate(log_dur[::-1], 0)[::-1]
    if np.any(np.asarray(durations) > MAX_D):
        return -np.inf
    terms = sum((log_surv if c else log_dur)[dur - 1] for dur, c in zip(durations, censored))
    return logsumexp(terms + log_prior_lam) + np.log(lam[1] - lam[0])


def exact_hsmm_posterior(y, right_censored, num_states=3, num_categories=2, emission_conc=1.0,
                         duration_marginal=truncated_poisson_marginal, left_censored=False, power=1.0):
    """Exact posterior over the partitions of the steps under the weak-limit HDP-HSMM: the rows
    integrated out (the start row's and each row's off-diagonal Dirichlet-multinomial), ``beta ~
    Dir(gamma/L)`` by quadrature, the emission probabilities integrated out (Dirichlet-categorical)
    and each state's duration parameters by ``duration_marginal(durations, censored)`` (by default
    the truncated Poisson law's, by quadrature on a grid of rates: its likelihood is not conjugate);
    with ``left_censored`` each entry of ``censored`` is ``(right, left)``, ``left`` marking the
    sequence's first segment.  ``power``: the emission likelihood raised to it (a rung of replica
    exchange: the Dirichlet-categorical marginal of the counts scaled by ``power``)."""
    L = num_states
    nodes, weights = _simplex_rule(L)
    log_prior_beta = gammaln(GAMMA) - L * gammaln(GAMMA / L) + np.sum((GAMMA / L - 1) * np.log(nodes), -1)
    post = {}
    t = len(y)
    for z in itertools.product(range(L), repeat=t):
        z = np.array(z)
        counts_y = np.zeros((L, num_categories))
        np.add.at(counts_y, (z, y), power)
        log_py = np.sum(gammaln(num_categories * emission_conc) - gammaln(num_categories * emission_conc
                                                                          + counts_y.sum(-1))
                        + np.sum(gammaln(emission_conc + counts_y) - gammaln(emission_conc), -1))
        ends, dur = (np.asarray(a) for a in hsmm.segments(jnp.asarray(z)))
        log_pd = 0.0
        for k in range(L):
            steps = np.flatnonzero(ends & (z == k))
            if len(steps):
                flags = [right_censored and step == t - 1 for step in steps]
                if left_censored:
                    flags = [(f, step == np.flatnonzero(ends)[0]) for f, step in zip(flags, steps)]
                log_pd += duration_marginal(dur[steps], flags)
        if not np.isfinite(log_pd):
            continue
        n = np.zeros((L, L))
        starts = np.flatnonzero(np.r_[False, z[1:] != z[:-1]])
        for s in starts:
            n[z[s - 1], z[s]] += 1
        conc = ALPHA * nodes  # (Q, L)
        log_rows = (gammaln(conc.sum(-1)) - gammaln(conc.sum(-1) + 1) + gammaln(conc[:, z[0]] + 1)
                    - gammaln(conc[:, z[0]]))
        for j in range(L):
            if n[j].sum() == 0:
                continue
            off = np.delete(conc, j, axis=1)
            cnt = np.delete(n[j], j)
            log_rows = log_rows + (gammaln(off.sum(-1)) - gammaln(off.sum(-1) + cnt.sum())
                                   + np.sum(gammaln(off + cnt) - gammaln(off), -1))
        log_joint = np.log(np.sum(weights * np.exp(log_rows + log_prior_beta))) + log_py + log_pd
        key = partition_key(z)
        post[key] = np.logaddexp(post.get(key, -np.inf), log_joint)
    keys = list(post)
    logs = np.array([post[k] for k in keys])
    return dict(zip(keys, np.exp(logs - logsumexp(logs))))


NUM_CHAINS, NUM_WARMUP = 3000, 40


def _tv(right_censored, kernel):
    exact = exact_hsmm_posterior(Y, right_censored)
    draws = final_states(kernel, (Y,), NUM_CHAINS, NUM_WARMUP)
    return empirical_tv(exact, draws), tv_bound(exact.values(), NUM_CHAINS)


@pytest.mark.statistical
@pytest.mark.parametrize("right_censored", [True, pytest.param(False, marks=pytest.mark.slow)])  # 90 s each
def test_exact_enumeration(right_censored):
    tv, bound = _tv(right_censored, nh.infer.WeakLimitGibbs(_model(right_censored)))
    print(f"HSMM enumeration (right_censored={right_censored}): TV {tv:.4f}, bound {bound:.4f}")
    assert tv < bound


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_negative_control_censored_segment_scored_as_complete(monkeypatch):
    """The sampler's segmentation step scores the censored last segment as complete (``P(d)``
    instead of ``P(D >= d)``): the enumeration test above rejects it."""
    original = semi_markov._ffbs_rows
    monkeypatch.setattr(semi_markov, "_ffbs_rows", lambda emission, right_censored: original(emission, False))
    tv, bound = _tv(True, nh.infer.WeakLimitGibbs(_model(True)))
    print(f"HSMM enumeration, broken censoring: TV {tv:.4f}, bound {bound:.4f}")
    assert tv > bound


def _rung_states(kernel, num_chains=NUM_CHAINS, num_sweeps=NUM_WARMUP):
    """The states ``(R, num_chains, T)`` of every rung after ``num_sweeps`` sweeps of a tempered
    kernel started without warmup (so the ladder it was given stays)."""
    import jax

    keys = jax.random.split(jax.random.key(0), num_chains)
    state = kernel.init(keys, 0, None, (Y,), {})
    state = jax.jit(lambda s: jax.lax.fori_loop(0, num_sweeps, lambda i, x: kernel.sample(x, (Y,), {}), s))(state)
    states = np.asarray(state.algorithm.replicas.states)  # (chains, R, ...)
    return np.moveaxis(states.reshape(num_chains, states.shape[1], -1), 1, 0)


LADDER = [0.0, 0.4, 1.0]


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("broken", [False, pytest.param(True, marks=pytest.mark.negative_control)])
def test_tempered_rungs_against_enumeration(broken):
    """Replica exchange on the HDP-HSMM (``tempering=[0, 0.4, 1]``, held): the untempered rung's
    segmentations against the exact posterior and the middle rung's against the exact tempered
    one (the emission likelihood to the power 0.4).  The control, swaps accepted without the lower
    rung's likelihood (``tests/kernel_registry.py::one_sided_swaps``), fails."""
    from tests.kernel_registry import one_sided_swaps

    cls = one_sided_swaps(nh.infer.WeakLimitGibbs) if broken else nh.infer.WeakLimitGibbs
    rungs = _rung_states(cls(_model(True), tempering=LADDER))
    out = []
    for r in (1, 2):
        exact = exact_hsmm_posterior(Y, True, power=LADDER[r])
        out.append((empirical_tv(exact, rungs[r]), tv_bound(exact.values(), NUM_CHAINS)))
    print(f"HSMM tempered rungs (broken={broken}): " + ", ".join(f"b={LADDER[r]}: TV {tv:.4f} (bound {b:.4f})"
                                                                 for r, (tv, b) in zip((1, 2), out)))
    if broken:
        assert any(tv > b for tv, b in out)
    else:
        assert all(tv < b for tv, b in out)


def test_tempered_hsmm_run_reports_its_swaps():
    """``WeakLimitGibbs(hsmm_model, tempering=3)`` runs through NumPyro's ``MCMC`` with the swap
    fields, and ``nh.log_evidence`` reads them."""
    from numpyro.infer import MCMC
    import jax

    mcmc = MCMC(nh.infer.WeakLimitGibbs(_model(True), tempering=3), num_warmup=8, num_samples=12, progress_bar=False)
    mcmc.run(jax.random.key(0), Y, extra_fields=("swap_accept", "inverse_temperatures", "replica_log_likelihood"))
    f = mcmc.get_extra_fields()
    assert f["swap_accept"].shape == (12, 2) and f["replica_log_likelihood"].shape == (12, 3)
    assert np.isfinite(nh.log_evidence(mcmc).log_evidence)


def geweke_model(y=None, num_steps=None):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    model = nh.HDPHSMM(gamma, alpha, nh.durations.Poisson(2.0, 1.0), nh.emissions.Categorical(3, 1.0), max_states=3,
                       max_duration=5, num_steps=num_steps)
    nh.sample("y", model, obs=y)


def _num_segments(z):
    s = z["y_states"]
    return 1 + jnp.sum(s[1:] != s[:-1])


STATISTICS = {
    "gamma": lambda z: z["gamma"],
    "alpha": lambda z: z["alpha"],
    "beta0": lambda z: z["y_beta"][0],
    "pi01": lambda z: z["y_trans"][0, 1],
    "pi00": lambda z: z["y_trans"][0, 0],
    "rate0": lambda z: z["y_duration_rate"][0],
    "probs00": lambda z: z["y_probs"][0, 0],
    "first_state": lambda z: z["y_states"][0],
    "segments": _num_segments,
}


def check_geweke(model, statistics, label):
    """Geweke's test of ``WeakLimitGibbs`` on an HSMM ``model(y, num_steps)`` (8 steps, 6000 iterations and
    prior draws): every ``|z| < 4``."""
    kernel = nh.infer.WeakLimitGibbs(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        z = geweke_z_scores(kernel, nh.infer.weak_limit(model), statistics, num_steps=8, num_iterations=6000,
                            num_prior=6000)
    print(f"{label} Geweke z:", {k: round(float(v), 2) for k, v in z.items()})
    assert max(abs(v) for v in z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.statistical
def test_geweke():
    check_geweke(geweke_model, STATISTICS, "HSMM")


def test_no_host_callback_in_the_sweep():
    """The HSMM sweep, with its own run event (a segment at ``max_duration``), holds no host callback:
    the events are counters in the state, checked when the run returns (as for the HMM kernels,
    ``tests/infer/test_conformance.py::test_no_host_callback_in_the_sweep``)."""
    y = np.array([0, 0, 1, 1, 0, 1])
    assert callbacks_in_sweep(nh.infer.WeakLimitGibbs(geweke_model), y, y.shape[-1]) == 0
