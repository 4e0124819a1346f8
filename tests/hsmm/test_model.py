"""The HDP-HSMM model class: its sites and roles, discovery, the kernels that refuse it, the
segment process's law (normalization, sampling, the rows integrated out) and an end-to-end fit
with several sequences, ``lengths`` and a missing step."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC
from scipy.special import logsumexp

import numpyro_hdphmm as nh
from numpyro_hdphmm.models.base import HDP_ROLE

EMISSION = nh.emissions.Categorical(2, 1.0)
Y = np.array([0, 0, 1, 1, 1, 0, 0, 1])


def hsmm(**kw):
    opts = dict(max_states=4, max_duration=5)
    opts.update(kw)
    return nh.HDPHSMM(1.0, 2.0, nh.durations.Poisson(2.0, 1.0), EMISSION, **opts)


def model(y):
    nh.sample("y", hsmm(), obs=y)


def test_registry_sites_and_roles():
    assert nh.models.MODEL_CLASSES["hsmm"] is nh.HDPHSMM
    m = hsmm()
    tr = handlers.trace(handlers.seed(model, 0)).get_trace(Y)
    declared = [r.site("y") for r in m.site_roles()]
    traced = [s for s in tr if tr[s]["type"] == "sample"]
    assert sorted(declared) == sorted(traced)
    assert all(tr[r.site("y")]["infer"][HDP_ROLE] == r.role for r in m.site_roles())
    assert tr["y_duration_rate"]["value"].shape == (4,)
    assert isinstance(tr["y_states"]["fn"], nh.SemiMarkovChain)


def test_discovery_and_plan():
    spec = nh.infer.discover(model, (Y,))
    assert spec.sites.kind == "hsmm"
    assert spec.sites.extra == (("duration_rate", "y_duration_rate"),)
    assert "y_duration_rate" in spec.plan.sites("algorithm")
    plan = {row.site: row.reason for row in nh.infer.WeakLimitGibbs(model).update_plan(Y)}
    assert "truncation" in plan["y_duration_rate"] and "HSMM" in plan["y_states"]


@pytest.mark.parametrize("kernel", [nh.infer.BeamSampler, nh.infer.DirectAssignmentGibbs, nh.infer.PGAS,
                                    nh.infer.RCDSampler])
def test_other_kernels_refuse_and_name_the_one_that_samples_it(kernel):
    with pytest.raises(NotImplementedError, match="does not sample the 'hsmm' model class.*WeakLimitGibbs"):
        MCMC(kernel(model), num_warmup=1, num_samples=1, progress_bar=False).run(random.key(0), Y)


def test_split_merge_refused():
    with pytest.raises(NotImplementedError, match="split_merge"):
        MCMC(nh.infer.WeakLimitGibbs(model, split_merge=2), num_warmup=1, num_samples=1,
             progress_bar=False).run(random.key(0), Y)


@pytest.mark.parametrize("bad, match", [
    (dict(max_duration=0), "max_duration"),
    (dict(max_states=1), "max_states"),
    (dict(right_censoring="yes"), "right_censoring"),
])
def test_constructor_validation(bad, match):
    with pytest.raises(ValueError, match=match):
        hsmm(**bad)


def test_duration_must_be_a_family_or_callable():
    with pytest.raises(ValueError, match="`duration`"):
        nh.HDPHSMM(1.0, 2.0, dist.Poisson(3.0), EMISSION, max_states=3, max_duration=5)


def _chain(right_censored=True, left_censored=False, lengths=None, t=5):
    rng = np.random.default_rng(0)
    k = 3
    init = rng.dirichlet(np.ones(k))
    rows = rng.dirichlet(np.ones(k), size=k)
    return nh.SemiMarkovChain(init, rows, nh.durations.Poisson(2.0, 1.0), {"rate": jnp.array([0.5, 2.0, 4.0])}, 4, t,
                              lengths, right_censored=right_censored, left_censored=left_censored)


@pytest.mark.parametrize("left", [False, True])
def test_censored_segment_process_is_normalized(left):
    chain = _chain(left_censored=left)
    paths = jnp.asarray(list(itertools.product(range(3), repeat=5)))
    total = logsumexp(np.asarray(chain.log_prob(paths)))
    assert abs(total) < 1e-5
    # uncensored: the probability that a segment ends exactly at the last step (< 1)
    assert logsumexp(np.asarray(_chain(right_censored=False).log_prob(paths))) < -1e-2


def test_samples_follow_log_prob():
    chain = _chain()
    n = 20000
    draws = np.asarray(chain.sample(random.key(1), (n,)))
    codes = draws @ (3 ** np.arange(5)[::-1])
    freq = np.bincount(codes, minlength=3 ** 5) / n
    paths = jnp.asarray(list(itertools.product(range(3), repeat=5)))
    exact = np.exp(np.asarray(chain.log_prob(paths)))
    assert 0.5 * np.abs(freq - exact).sum() < 0.03


def test_collapsed_log_prob_integrates_the_rows():
    """``collapsed_log_prob`` against a Monte Carlo average of ``exp(log_prob)`` over rows drawn from
    their Dirichlet prior (the self-transition is removed in the segment process)."""
    beta = jnp.array([0.5, 0.3, 0.2, 0.0])
    conc = nh.HDPTransitions(beta, 2.0, 0.0).concentration
    z = jnp.array([0, 0, 1, 2, 2])
    rows = nh.HDPTransitions(beta, 2.0, 0.0).sample(random.key(2), (200000,))
    chain = _chain()
    lp = jax.vmap(lambda r: chain.restricted(r[3], r[:3]).log_prob(z))(rows)
    mc = logsumexp(np.asarray(lp)) - np.log(len(lp))
    np.testing.assert_allclose(chain.collapsed_log_prob(z, conc), mc, atol=0.02)


def test_several_sequences_lengths_and_missing_steps():
    """An end-to-end fit: two Gaussian sequences of different lengths, one missing step; the posterior
    finds the two regimes and the padded steps copy the last valid state."""
    true = nh.HDPHSMM(1.0, 3.0, nh.durations.Poisson(30.0, 3.0), nh.emissions.GaussianNIW(jnp.zeros(1), 0.01, 3.0,
                                                                                           jnp.eye(1)),
                      max_states=3, max_duration=30, num_steps=60)
    rng = np.random.default_rng(3)
    z = np.repeat([0, 1, 0, 1, 0, 1], 10)
    y = np.stack([np.where(z == 0, -3.0, 3.0) + rng.normal(size=60), np.where(z == 1, -3.0, 3.0) + rng.normal(size=60)])
    y = y[..., None]
    y[0, 5] = np.nan
    lengths = np.array([60, 45])

    def fit(y, lengths):
        m = nh.HDPHSMM(1.0, 3.0, nh.durations.Poisson(2.0, 0.2), nh.emissions.GaussianNIW.weakly_informative(y),
                       max_states=6, max_duration=40)
        nh.sample("y", m, obs=y, lengths=lengths)

    mcmc = MCMC(nh.infer.WeakLimitGibbs(fit), num_warmup=40, num_samples=40, progress_bar=False)
    mcmc.run(random.key(0), y, lengths, extra_fields=("ffbs_ok",))
    s = mcmc.get_samples()
    assert np.all(np.asarray(mcmc.get_extra_fields()["ffbs_ok"]))
    assert np.median(np.asarray(s["y_num_states"])) == 2
    states = np.asarray(s["y_states"])
    assert np.all(states[:, 1, 45:] == states[:, 1, 44:45])
    assert true.max_duration == 30


def test_rows_stay_finite_when_a_weight_underflowed():
    """A weak-limit weight that underflowed to 0 gives a self-transition of 0, not NaN (the Beta
    sampler returns NaN at a zero shape)."""
    from numpyro_hdphmm.infer.moves.semi_markov import sample_semi_markov_rows

    beta = jnp.array([0.6, 0.4, 0.0, 0.0])
    n = jnp.array([[0, 2, 0], [1, 0, 0], [0, 0, 0]])
    rows = sample_semi_markov_rows(random.key(0), beta, jnp.asarray(2.0), n, jnp.array([1, 0, 0]))
    assert np.all(np.isfinite(np.asarray(rows)))
    np.testing.assert_allclose(np.asarray(rows).sum(-1), 1.0, rtol=1e-5)
    assert float(rows[2, 2]) == 0.0


def test_warns_when_the_duration_truncation_binds():
    """One long regime with max_duration = 3: every sweep after warmup has a segment of 3 steps."""
    y = np.zeros(12, int)

    def short(y):
        nh.sample("y", nh.HDPHSMM(1.0, 2.0, nh.durations.Poisson(20.0, 1.0), EMISSION, max_states=4, max_duration=3),
                  obs=y)

    with pytest.warns(RuntimeWarning, match="max_duration"):
        MCMC(nh.infer.WeakLimitGibbs(short), num_warmup=2, num_samples=3, progress_bar=False).run(random.key(0), y)
