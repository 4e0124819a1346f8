"""Replica exchange on the HDP-SLDS (``WeakLimitGibbs(model, tempering=R)``): the observation
likelihood ``p(y | x, C, R)`` raised to the power ``b``.  Each piece against an exact answer, each
with a negative control built here:

* the latent-path block at ``b`` (the Kalman sampler with the noise ``R / b``; no observation at
  ``b = 0``) with the modes' FFBS, against ``p_b(z | y)`` by enumeration;
* the tempered conditional of the observation parameters: for diagonal noise the closed-form
  inverse gamma; for full noise with partly missing steps (completed at the tempered law, then a
  Metropolis-Hastings correction) the tempered posterior by importance sampling from the prior;
  for a learned ``C`` the weights (power 2 on ``y`` is power 1 on ``y`` twice);
* the swaps' ``log p(y | x_r)``: the model's own log density of ``y``;
* each rung sweeps its own latent path and its own observation parameters.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from scipy import stats

import numpyro
import numpyro_hdphmm as nh
from numpyro_hdphmm._core.hmm import hmm_posterior_sample_fast
from numpyro_hdphmm.infer.moves import tempering
from numpyro_hdphmm.infer.moves.slds import sample_latent
from numpyro_hdphmm.infer.plumbing.discovery import ObservedData
from tests.infer._checks import chi_square_pvalue, empirical_tv_keys, tv_bound
from tests.slds.test_slds import (A_TINY, PI, PI0, Q_TINY, R_TINY, TINY_T, Y_TINY, _exact_mode_posterior, dynamics,
                                  slds, synthetic)


# --------------------------------------------------------------------------- the blocks at temperature b
def _tempered_observed(power):
    """The tiny problem's observed data as a rung at ``power`` sees it (the tempering's own view)."""
    family = nh.LinearGaussianObservation(1, 1, C=np.eye(1), noise="diagonal")
    observed = ObservedData(family, jnp.asarray(Y_TINY)[None], jnp.ones((1, TINY_T), bool))
    b = jnp.asarray(power, observed.y.dtype)
    return observed._replace(family=tempering.PoweredObservation(family, b), y=jnp.where(b > 0, observed.y, jnp.nan))


def _tempered_gibbs_modes(observed, num_chains=3000, num_sweeps=25):
    """Final modes of chains of the two blocks ``z | x`` (FFBS) and ``x | z, y`` (the latent block
    with the rung's observed data) on the tiny order-1 problem."""
    dyn = nh.emissions.AutoRegressive(1, loc=np.zeros((1, 2)), col_precision=np.eye(2), df=3.0, scale=0.05 * np.eye(1))
    params = {"A": jnp.asarray(A_TINY[1]), "cov": jnp.asarray(Q_TINY)}
    obs_params = {"R": jnp.asarray([R_TINY])}
    lengths = jnp.full((1,), TINY_T, jnp.int32)
    log_init, log_trans = jnp.log(jnp.asarray(PI0)), jnp.log(jnp.asarray(PI))

    def sweep(carry, key):
        z, x = carry
        k_z, k_x = random.split(key)
        z_new, _, _ = hmm_posterior_sample_fast(k_z, log_init, log_trans, dyn.log_likelihoods(dyn.prepare(x[0])[0], params))
        return (z_new, sample_latent(k_x, z_new[None], params, obs_params, dyn, observed, lengths)), None

    def chain(key):
        k0, k1 = random.split(key)
        z0 = random.bernoulli(k0, 0.5, (TINY_T,)).astype(jnp.int32)
        x0 = sample_latent(k1, z0[None], params, obs_params, dyn, observed, lengths)
        return jax.lax.scan(sweep, (z0, x0), random.split(random.fold_in(key, 1), num_sweeps))[0][0]

    draws = jax.jit(jax.vmap(chain))(random.split(random.key(0), num_chains))
    return [tuple(int(v) for v in row) for row in np.asarray(draws)]


@pytest.mark.statistical
@pytest.mark.parametrize("power", [0.25, 0.0])
def test_latent_block_at_a_temperature_against_enumeration(power):
    """``p_b(z | y) ∝ p(z) int p(x | z) N(y | x, R)^b dx``: the Gaussian marginal with ``R / b``
    (``b = 0``: the prior of the modes).  The negative control, the untempered rung's data, fails."""
    exact = _exact_mode_posterior(1, R=R_TINY / power if power > 0 else np.inf)
    draws = _tempered_gibbs_modes(_tempered_observed(power))
    tv, bound, p = empirical_tv_keys(exact, draws), tv_bound(exact.values(), len(draws)), chi_square_pvalue(exact, draws)
    bad = _tempered_gibbs_modes(_tempered_observed(1.0))
    p_bad = chi_square_pvalue(exact, bad)
    print(f"SLDS blocks at b = {power}: TV {tv:.4f}, bound {bound:.4f}, chi-square p {p:.3g}; "
          f"untempered control: TV {empirical_tv_keys(exact, bad):.4f}, p {p_bad:.3g}")
    assert tv < bound and p > 1e-4
    assert p_bad < 1e-4


# --------------------------------------------------------------------------- the observation parameters
POWER = 0.3
X_OBS = np.random.default_rng(4).standard_normal((1, 8, 2))
Y_OBS = X_OBS + 0.7 * np.random.default_rng(5).standard_normal((1, 8, 2))
Y_OBS[0, [1, 3, 5], 0] = np.nan  # partly observed steps
Y_OBS[0, [2, 4], 1] = np.nan
Y_OBS[0, 6] = np.nan             # a step with no observed entry
VALID = np.ones((1, 8), bool)


def test_diagonal_noise_tempered_conditional_is_the_inverse_gamma():
    """Diagonal noise, fixed ``C = I``: ``r_i | x, y ~ InvGamma((df + b n_i) / 2, (s_ii + b S_i) / 2)``
    over the observed entries of dimension ``i`` (one draw per key: no chain).  The untempered
    update (the control) fails."""
    obs = nh.LinearGaussianObservation(2, 2, C=np.eye(2), noise="diagonal", df=3.0, scale=0.5 * np.eye(2))
    params = {"R": jnp.ones(2)}
    args = (jnp.asarray(X_OBS), jnp.asarray(Y_OBS), jnp.asarray(VALID))
    keys = random.split(random.key(0), 20000)
    draws = jax.jit(jax.vmap(lambda k: obs.tempered_update(k, params, *args, POWER)["R"]))(keys)
    control = jax.jit(jax.vmap(lambda k: obs.update(k, params, *args)["R"]))(keys)
    resid = Y_OBS[0] - X_OBS[0]
    for i in range(2):
        o = ~np.isnan(resid[:, i])
        exact = stats.invgamma(0.5 * (3.0 + POWER * o.sum()), scale=0.5 * (0.5 + POWER * np.sum(resid[o, i] ** 2)))
        p = stats.kstest(np.asarray(draws[:, i]), exact.cdf).pvalue
        p_bad = stats.kstest(np.asarray(control[:, i]), exact.cdf).pvalue
        print(f"r_{i}: KS p {p:.3g}; untempered control p {p_bad:.3g}")
        assert p > 1e-3 and p_bad < 1e-6


def _full_noise_chain_and_reference(corrected=True, num_chains=4000, num_steps=40):
    """Final ``R`` of chains of the full-noise tempered update (fixed ``C = I``, the partly observed
    steps completed), and the tempered posterior's moments by importance sampling from the
    inverse-Wishart prior, weights ``prod_t N(y_t,o | x_t,o, R_oo)^b``."""
    df, scale = 4.0, 0.5 * np.eye(2)
    obs = nh.LinearGaussianObservation(2, 2, C=np.eye(2), noise="full", df=df, scale=scale)
    args = (jnp.asarray(X_OBS), jnp.asarray(Y_OBS), jnp.asarray(VALID))

    def chain(key):
        k0, k1 = random.split(key)
        p0 = obs.sample_parameters(k0)
        step = lambda p, k: (obs.tempered_update(k, p, *args, POWER), None)
        return jax.lax.scan(step, p0, random.split(k1, num_steps))[0]["R"]

    draws = np.asarray(jax.jit(jax.vmap(chain))(random.split(random.key(1), num_chains)), float)
    prior = stats.invwishart(df, scale).rvs(400000, random_state=np.random.default_rng(2))
    logw = np.zeros(len(prior))
    for t in range(Y_OBS.shape[1]):
        o = ~np.isnan(Y_OBS[0, t])
        if not o.any():
            continue
        r = (Y_OBS[0, t] - X_OBS[0, t])[o]
        Roo = prior[:, o][:, :, o]
        _, logdet = np.linalg.slogdet(Roo)
        rb = np.broadcast_to(r, (len(prior), len(r)))
        quad = np.einsum("ni,ni->n", np.linalg.solve(Roo, rb[..., None])[..., 0], rb)
        logw += POWER * (-0.5 * quad - 0.5 * logdet)
    w = np.exp(logw - logw.max())
    w /= w.sum()

    def summaries(R):
        return {"log R00": np.log(R[:, 0, 0]), "log R11": np.log(R[:, 1, 1]),
                "corr": R[:, 0, 1] / np.sqrt(R[:, 0, 0] * R[:, 1, 1])}

    z = {}
    ref, got = summaries(prior), summaries(draws)
    for name in ref:
        mean = np.sum(w * ref[name])
        is_var = np.sum(w ** 2 * (ref[name] - mean) ** 2)
        z[name] = (got[name].mean() - mean) / np.sqrt(got[name].var() / len(draws) + is_var)
    return z


@pytest.mark.statistical
def test_full_noise_tempered_conditional_with_partly_observed_steps(monkeypatch):
    """Full noise: the completion of the partly observed steps at the tempered law and its
    Metropolis-Hastings factor ``|S_t|^{-(1-b)/2}`` leave the tempered posterior invariant (the
    chains' final ``R`` against importance sampling); without the factor (the control) they do not."""
    z = _full_noise_chain_and_reference()
    print("full noise, tempered:", {k: round(v, 2) for k, v in z.items()})
    assert max(abs(v) for v in z.values()) < 4.0, z
    monkeypatch.setattr(nh.LinearGaussianObservation, "completion_log_factor",
                        staticmethod(lambda R, missing, partial, power: jnp.zeros((), R.dtype)))
    z_bad = _full_noise_chain_and_reference()
    print("control without the completion factor:", {k: round(v, 2) for k, v in z_bad.items()})
    assert max(abs(v) for v in z_bad.values()) > 5.0, z_bad


def test_learned_loading_weights_are_the_power():
    """A learned ``[C d]`` (diagonal and full noise): the tempered conditional at ``b = 2`` on ``y`` is
    the one at ``b = 1`` on ``y`` twice (the statistics are linear in the weights), draw for draw;
    ``b = 1`` on ``y`` once is not."""
    x = jnp.asarray(X_OBS)
    y = jnp.asarray(X_OBS + 0.3)  # fully observed
    for noise in ("diagonal", "full"):
        obs = nh.LinearGaussianObservation(2, 2, noise=noise, df=4.0, scale=0.5 * np.eye(2))
        params = obs.sample_parameters(random.key(0))
        key = random.key(1)
        twice = obs.tempered_update(key, params, x, y, jnp.asarray(VALID), 2.0)
        doubled = obs.tempered_update(key, params, jnp.concatenate([x, x], 1), jnp.concatenate([y, y], 1),
                                      jnp.ones((1, 16), bool), 1.0)
        once = obs.tempered_update(key, params, x, y, jnp.asarray(VALID), 1.0)
        for k in twice:
            np.testing.assert_allclose(twice[k], doubled[k], rtol=2e-4, atol=1e-5)
            assert not np.allclose(twice[k], once[k], rtol=1e-3)


# --------------------------------------------------------------------------- the kernel's wiring
def _fit_model(noise="diagonal"):
    obs = nh.LinearGaussianObservation(2, 2, C=np.eye(2), noise=noise, scale=0.02 * np.eye(2))

    def model(y, lengths=None):
        nh.sample("y", slds(obs), obs=y, lengths=lengths)

    y, _, _ = synthetic(40, seed=2)
    y2, _, _ = synthetic(40, seed=3)
    ys = np.stack([y, y2])
    ys[0, 5:7, 0] = np.nan
    ys[1, 10:12] = np.nan
    ys[1, 30:] = np.nan
    return model, ys, np.array([40, 30])


@pytest.fixture(scope="module")
def tempered_start():
    model, ys, lengths = _fit_model()
    kernel = nh.infer.WeakLimitGibbs(model, tempering=3)
    state = kernel.init(random.key(0), 0, None, (ys, lengths), {})
    return model, ys, lengths, kernel, state


def test_swap_log_likelihood_is_the_models_density_of_y(tempered_start):
    """``log p(y | x_r, C_r, R_r)`` of each rung, as the swaps read it, equals the log density of the
    model's observed site at that rung's values (NumPyro's trace; missing entries and padding out)."""
    model, ys, lengths, kernel, state = tempered_start
    spec, view = kernel._spec, kernel._view((ys, lengths), {}, state.z)
    replicas = state.algorithm.replicas
    for r in range(3):
        explicit = jax.tree_util.tree_map(lambda a: a[r], replicas)
        ours = float(tempering.TEMPERING["slds"].log_likelihood(view, spec, explicit))
        values = {**state.z, "y_latent": explicit.extra["latent"], "y_R": explicit.extra["observation_R"]}
        tr = numpyro.handlers.trace(numpyro.handlers.substitute(numpyro.handlers.seed(model, 0), data=values)
                                    ).get_trace(ys, lengths)
        theirs = float(jnp.sum(tr["y"]["fn"].log_prob(tr["y"]["value"])))
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)


def test_every_rung_sweeps_its_own_latent_path(tempered_start, monkeypatch):
    """Each rung's sweep sees its own latent path and observation noise and its own power (the
    view holds the untempered rung's); the wiring that hands every rung the view's path, built here,
    fails the same check."""
    model, ys, lengths, kernel, state = tempered_start
    algo, inner = kernel.algorithm, state.algorithm
    shift = jnp.asarray([0.0, 10.0, 20.0])
    latent = inner.replicas.extra["latent"] + shift[:, None, None, None]
    inner = inner._replace(replicas=inner.replicas._replace(extra={**inner.replicas.extra, "latent": latent}))
    spec, view = kernel._spec, kernel._view((ys, lengths), {}, state.z)
    seen = []
    base_step = algo.base.step

    def spy(key, replica, spec, view):
        jax.debug.callback(lambda a, b, p: seen.append((float(a), float(b), float(p))), view.data.y[0, 0, 0],
                           replica.extra["latent"][0, 0, 0], view.observed.family.power)
        return base_step(key, replica, spec, view)

    monkeypatch.setattr(algo.base, "step", spy)

    def received():
        seen.clear()
        jax.block_until_ready(algo.step(random.key(1), inner, spec, view))
        jax.effects_barrier()
        return sorted(seen, key=lambda s: s[2])

    got = received()
    assert [p for _, _, p in got] == pytest.approx(list(np.asarray(inner.inverse_temperatures)))
    for seen_path, own_path, _ in got:
        assert seen_path == pytest.approx(own_path)
    slds_tempering = tempering.TEMPERING["slds"]
    old_view = lambda view, spec, explicit, power: slds_tempering.view(view, spec, explicit, power)._replace(data=view.data)
    monkeypatch.setitem(tempering.TEMPERING, "slds", slds_tempering._replace(view=old_view))
    got = received()
    assert not all(a == pytest.approx(b) for a, b, _ in got), got


@pytest.mark.parametrize("noise", ["diagonal", pytest.param("full", marks=pytest.mark.slow)])
def test_tempered_fit_runs_with_missing_values_and_reports_its_swaps(tempered_start, noise):
    """An end-to-end run through NumPyro's ``MCMC`` (two sequences, lengths, missing entries and
    steps): finite draws, one acceptance probability per pair, the ladder from 0 to 1, and
    ``nh.log_evidence`` reads the run."""
    from numpyro.infer import MCMC

    kernel = tempered_start[3]
    if noise != "diagonal":
        model, ys, lengths = _fit_model(noise)
        kernel = nh.infer.WeakLimitGibbs(model, tempering=3)
    ys, lengths = _fit_model(noise)[1:]
    mcmc = MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False)
    mcmc.run(random.key(0), ys, lengths, extra_fields=("swap_accept", "inverse_temperatures", "replica_log_likelihood"))
    s, f = mcmc.get_samples(), mcmc.get_extra_fields()
    assert np.all(np.isfinite(np.asarray(s["y_latent"]))) and np.all(np.isfinite(np.asarray(s["y_R"])))
    assert f["swap_accept"].shape == (10, 2)
    np.testing.assert_allclose(np.asarray(f["inverse_temperatures"])[:, [0, -1]], [[0.0, 1.0]] * 10)
    assert np.isfinite(nh.log_evidence(mcmc).log_evidence)


# --------------------------------------------------------------------------- the whole kernel
Y_AGREE = np.array([[0.3], [0.8], [np.nan], [-0.5], [-0.9], [0.1]])


def _agreement_model(y):
    obs = nh.LinearGaussianObservation(1, 1, C=np.eye(1), noise="diagonal", df=4.0, scale=0.3 * np.eye(1))
    dyn = nh.emissions.AutoRegressive(1, loc=np.zeros((1, 2)), col_precision=np.eye(2), df=3.0, scale=0.2 * np.eye(1))
    nh.sample("y", nh.HDPSLDS(1.0, 2.0, 1.0, dyn, obs, max_states=2), obs=y)


def _final_draws(kernel, num_chains=4000, num_sweeps=400, seed=0):
    """``(modes (chains, T), log R (chains,))`` of the untempered rung after ``num_sweeps`` sweeps of
    vectorized chains started without warmup (a ladder given to a tempered kernel stays).  400 sweeps:
    after 40-80 the plain sampler's ``log R`` and partitions had not forgotten the start (two-sample
    p 0.01-0.03 against the tempered chains, which mix faster; 0.52-0.77 after 400)."""
    keys = random.split(random.key(seed), num_chains)
    state = kernel.init(keys, 0, None, (Y_AGREE,), {})
    state = jax.jit(lambda s: jax.lax.fori_loop(0, num_sweeps, lambda i, x: kernel.sample(x, (Y_AGREE,), {}), s))(state)
    z = kernel.postprocess_fn((Y_AGREE,), {})(state.z)
    return np.asarray(z["y_states"]).reshape(num_chains, -1), np.log(np.asarray(z["y_R"]).reshape(num_chains))


def _agreement(a, b):
    """Two-sample p-values: the chi-square of the mode sequences (label-free: each sequence as its
    partition) and the KS of ``log R``."""
    from tests.infer._checks import partition_key

    ka, kb = [partition_key(s) for s in a[0]], [partition_key(s) for s in b[0]]
    cells = sorted(set(ka) | set(kb))
    table = np.array([[ka.count(c) for c in cells], [kb.count(c) for c in cells]], float)
    table = table[:, table.sum(0) >= 10]
    return stats.chi2_contingency(table)[1], stats.ks_2samp(a[1], b[1]).pvalue


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("broken", [False, pytest.param(True, marks=pytest.mark.negative_control)])
def test_tempered_kernel_agrees_with_the_plain_kernel(broken):
    """The whole tempered kernel (``tempering=[0, 0.5, 1]``, held) against the plain one on a tiny
    HDP-SLDS (``T = 6``, a missing step, ``R`` learned): the untempered rung's partitions of the
    steps and its ``log R`` have the plain sampler's law.  The control, swaps accepted without the
    lower rung's likelihood, does not."""
    from tests.kernel_registry import one_sided_swaps

    plain = _final_draws(nh.infer.WeakLimitGibbs(_agreement_model), seed=6)
    cls = one_sided_swaps(nh.infer.WeakLimitGibbs) if broken else nh.infer.WeakLimitGibbs
    tempered = _final_draws(cls(_agreement_model, tempering=[0.0, 0.5, 1.0]), seed=7)
    p_modes, p_noise = _agreement(plain, tempered)
    print(f"tempered vs plain HDP-SLDS (broken={broken}): partitions p {p_modes:.3g}, log R p {p_noise:.3g}")
    if broken:
        assert min(p_modes, p_noise) < 1e-4
    else:
        assert min(p_modes, p_noise) > 1e-3
