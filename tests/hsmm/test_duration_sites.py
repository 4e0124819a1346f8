"""Duration laws whose parameters the inner kernel updates: a ``Custom`` law over the user's own
site, and ``NegativeBinomial.gamma_r`` (real ``r``: no exact conditional draw), both through the
segment process's density with the rows integrated out."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

import numpyro_hdphmm as nh


def _data():
    rng = np.random.default_rng(5)
    z = np.concatenate([np.full(1 + rng.poisson(11), k % 2) for k in range(14)])[:150]
    return (np.where(z == 0, -2.0, 2.0) + 0.7 * rng.normal(size=z.size))[:, None]


def test_custom_duration_over_a_user_site():
    y = _data()

    def model(y):
        mean = numpyro.sample("mean_duration", dist.Gamma(2.0, 0.2))
        duration = lambda k: dist.Poisson(jnp.broadcast_to(mean, jnp.shape(k)))  # the duration itself, truncated
        m = nh.HDPHSMM(1.0, 2.0, duration, nh.emissions.GaussianNIW.weakly_informative(y), max_states=4,
                       max_duration=40)
        nh.sample("y", m, obs=y)

    kernel = nh.infer.WeakLimitGibbs(model)
    assert "mean_duration" in kernel.update_plan(y).sites("inner")
    # the inner kernel starts the user's site where NumPyro's default init puts it (~2 here, far in the
    # tail): it takes a few dozen sweeps to reach the segments' scale, hence the longer warmup
    mcmc = MCMC(kernel, num_warmup=200, num_samples=40, progress_bar=False)
    mcmc.run(random.key(0), y)
    mean = np.asarray(mcmc.get_samples()["mean_duration"])
    # durations 1 + Poisson(11): a zero-truncated Poisson of mean ~12 fits them
    assert 8.0 < mean.mean() < 16.0, mean.mean()
    assert np.std(mean) > 0


@pytest.mark.slow
def test_negative_binomial_with_a_gamma_prior_on_r():
    y = _data()

    def model(y):
        m = nh.HDPHSMM(1.0, 2.0, nh.durations.NegativeBinomial.gamma_r(), nh.emissions.GaussianNIW.weakly_informative(y),
                       max_states=4, max_duration=40)
        nh.sample("y", m, obs=y)

    kernel = nh.infer.WeakLimitGibbs(model)
    plan = kernel.update_plan(y)
    assert {"y_duration_r", "y_duration_p"} <= set(plan.sites("inner"))
    mcmc = MCMC(kernel, num_warmup=60, num_samples=60, progress_bar=False)
    mcmc.run(random.key(0), y)
    s = mcmc.get_samples()
    r, p = np.asarray(s["y_duration_r"]), np.asarray(s["y_duration_p"])
    states = np.asarray(s["y_states"])[-1]
    k = np.bincount(states).argmax()
    mean = 1 + r[:, k] * p[:, k] / (1 - p[:, k])
    assert 7.0 < mean.mean() < 18.0, mean.mean()


# ============================================================ the truncated duration update alone
TRUNC_R, TRUNC_D = (1, 2, 3), 10
# state 0: three left-censored first segments of 1 step, a complete one of 5 and a right-censored last one
# of 2; the whole fourth sequence (4 steps: left- and right-censored at once)
CENSORED_STATES = jnp.array([[0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 0, 0],
                             [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                             [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
                             [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
CENSORED_LENGTHS = jnp.array([13, 6, 4, 4], jnp.int32)
#: state 0's segments of CENSORED_STATES by how they are scored
SEGMENTS = {"left": (1, 1, 1), "complete": (5,), "right": (2,), "both": (4,)}


def _exact_truncated_r_posterior(left_censored):
    """``p(r | segments of state 0)`` of the shifted NB truncated to ``{1..D}`` (``r`` uniform on
    ``TRUNC_R``, ``p ~ Beta(2, 2)`` integrated out by the midpoint rule), with the left-censored
    segments (:data:`SEGMENTS`) scored by the residual-life law ``P(D >= d) / E[D]`` (its survival
    where also right-censored) or, without left-censoring, as ordinary segments."""
    from scipy import stats
    from scipy.special import betaln, logsumexp

    p = (np.arange(20000) + 0.5) / 20000
    log_prior_p = np.log(p) + np.log1p(-p) - betaln(2.0, 2.0)
    d = np.arange(1, TRUNC_D + 1)
    out = []
    for r in TRUNC_R:
        log_pmf = stats.nbinom(r, 1 - p[:, None]).logpmf(d[None] - 1)
        log_pmf -= logsumexp(log_pmf, 1, keepdims=True)
        log_surv = np.flip(np.logaddexp.accumulate(np.flip(log_pmf, 1), 1), 1)  # P(D >= d)
        log_mean = logsumexp(log_surv, 1)
        residual_surv = np.flip(np.logaddexp.accumulate(np.flip(log_surv, 1), 1), 1) - log_mean[:, None]
        col = lambda table, k: table[:, k - 1]
        terms = sum(col(log_pmf, k) for k in SEGMENTS["complete"]) + sum(col(log_surv, k) for k in SEGMENTS["right"])
        if left_censored:
            terms = terms + sum(col(log_surv, k) - log_mean for k in SEGMENTS["left"])
            terms = terms + sum(col(residual_surv, k) for k in SEGMENTS["both"])
        else:
            terms = terms + sum(col(log_pmf, k) for k in SEGMENTS["left"]) + sum(col(log_surv, k) for k in SEGMENTS["both"])
        out.append(logsumexp(terms + log_prior_p))
    out = np.array(out)
    return np.exp(out - logsumexp(out))


def _truncated_updated_r(left_censored, num_chains, num_steps=40):
    """State 0's ``r`` after ``num_steps`` truncated duration updates
    (:func:`~numpyro_hdphmm.infer.moves.semi_markov.sample_duration_parameters`) in ``num_chains``
    independent chains, for :data:`CENSORED_STATES`."""
    import jax

    from numpyro_hdphmm._core import hsmm
    from numpyro_hdphmm.infer.moves import semi_markov

    family = nh.durations.NegativeBinomial(2.0, 2.0, r_values=TRUNC_R)
    grid = jnp.arange(1, TRUNC_D + 1)

    def chain(key):
        k0, k_steps = jax.random.split(key)
        params = family.sample_parameters(k0, (2,))

        def step(params, key):
            log_dur, log_surv = hsmm.duration_tables(family.log_pmf(params, grid).T)
            new, _ = semi_markov.sample_duration_parameters(key, family, params, CENSORED_STATES, CENSORED_LENGTHS,
                                                            log_dur, log_surv, right_censored=True,
                                                            left_censored=left_censored)
            return new, None

        params, _ = jax.lax.scan(step, params, jax.random.split(k_steps, num_steps))
        return params["r"][0]

    return np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(random.key(11), num_chains)))


@pytest.mark.statistical
def test_truncated_duration_update_targets_the_censored_posterior():
    """The truncated model's duration step (censored segments completed, conjugate proposal, the
    truncation mass and the left-censored segments' mean in the ratio) leaves ``p(r, p | segments)``
    invariant with left- and right-censored segments, one of them both at once: ``r``'s law after
    40 steps against the exact posterior.  The negative control runs the step without
    left-censoring (the first segments scored as ordinary ones) on the same segments."""
    check_r_law("truncated duration update", "without left-censoring", _truncated_updated_r,
                _exact_truncated_r_posterior(True), _exact_truncated_r_posterior(False), 2000)


def check_r_law(label, control, updated_r, exact, control_target, num_chains):
    """State 0's ``r`` after the duration updates, ``updated_r(True, n)`` (``False``: the negative
    control), against the exact posterior ``exact`` over ``r = 1..3``: the TV distance is within
    the Monte Carlo bound, the control's beyond it."""
    from tests.infer._checks import tv_bound

    freq = np.bincount(updated_r(True, num_chains) - 1, minlength=3) / num_chains
    wrong = np.bincount(updated_r(False, num_chains) - 1, minlength=3) / num_chains
    bound = tv_bound(exact, num_chains)
    tv, tv_wrong = 0.5 * np.abs(freq - exact).sum(), 0.5 * np.abs(wrong - exact).sum()
    print(f"{label}: r posterior {np.round(exact, 3)}, draws {np.round(freq, 3)}: TV {tv:.4f} (bound {bound:.4f}); "
          f"{control} {np.round(wrong, 3)}: TV {tv_wrong:.4f} (its own target {np.round(control_target, 3)})")
    assert tv < bound < tv_wrong
