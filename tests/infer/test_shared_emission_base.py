"""The shared emission base (the RCD paper's two-level emission prior,
``nh.emissions.hierarchical_categorical``): the exact update of ``phi`` on its own, its
recognition, and every MCMC kernel against exact enumeration of the states and ``phi``.

Model: ``phi ~ Dir(b0 / C)``, ``probs_k | phi ~ Dir(s phi)`` for every state, ``y_t | z_t = k ~
Cat(probs_k)``.  With two symbols ``phi`` is one number, and the exact posterior of the partition
and of ``phi`` is a sum over partitions of a quadrature over ``phi`` (``_checks.shared_base_emission``).
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from scipy import stats

import numpyro_hdphmm as nh
from numpyro_hdphmm._core import crp
from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, PGAS, RCDSampler, WeakLimitGibbs

from _checks import empirical_tv, exact_shared_base_posterior, shared_base_emission, tv_bound

GAMMA, ALPHA, KAPPA, C = 0.5, 2.0, 1.5, 2  # gamma as in the beam and PGAS tests: capacity 10 is rarely reached
# the weak limit with L = 3: gamma as in its own tests (the quadrature over beta ~ Dir(gamma / L) of
# the exact posterior is accurate when gamma / L is not far below 1)
GAMMA_WEAK_LIMIT = 3.0
SCALE, B0 = 1.5, 3.0  # phi ~ Beta(1.5, 1.5)
Y = [0, 0, 0, 0, 1]
NUM_CHAINS, NUM_WARMUP = 2000, 30


def shared_model(max_states, random_scale=False, gamma=GAMMA):
    def model(y):
        scale = numpyro.sample("scale", dist.Gamma(*SCALE_PRIOR)) if random_scale else SCALE
        emission = nh.emissions.hierarchical_categorical("phi", C, concentration=scale, base_concentration=B0)
        hmm = nh.StickyHDPHMM(gamma, ALPHA, KAPPA, emission, max_states=max_states)
        nh.sample("y", hmm, obs=y)

    return model


def handwritten_model(y):
    phi = numpyro.sample("phi", dist.Dirichlet(jnp.full(C, B0 / C)))
    hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, SCALE * phi), max_states=8)
    nh.sample("y", hmm, obs=y)


def base_chain(counts, num_chains, num_sweeps, scale_prior=None, seed=0, update=None):
    """``num_chains`` independent chains of the ``(phi, scale)`` update given fixed ``counts``,
    from prior draws: ``(phi (chains, C), scale (chains,))``; ``update``: another update with the
    signature of ``crp.sample_shared_base`` (a deliberately wrong variant)."""
    counts = jnp.asarray(counts, jnp.float64)
    prior = jnp.full(C, B0 / C)
    max_total = int(np.sum(counts))
    update = update or crp.sample_shared_base

    def one(key):
        k0, k1, k2 = jax.random.split(key, 3)
        phi0 = jax.random.dirichlet(k0, prior)
        s0 = SCALE if scale_prior is None else jax.random.gamma(k2, scale_prior[0]) / scale_prior[1]
        body = lambda i, c: update(jax.random.fold_in(k1, i), counts, c[1] * c[0], prior, max_total, scale_prior)
        return jax.lax.fori_loop(0, num_sweeps, body, (phi0, jnp.asarray(s0, jnp.float64)))

    phi, scale = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), num_chains))
    return np.asarray(phi), np.asarray(scale)


def tables_ignored(key, counts, concentration, prior, max_total, scale_prior=None):
    """Wrong: every customer at a table of its own (``m = n``)."""
    return jax.random.dirichlet(key, prior + jnp.sum(jnp.round(counts), 0)), jnp.sum(concentration)


_EXACT_UPDATE = crp.sample_shared_base  # the variants below call it while it is monkeypatched


def auxiliaries_ignored(key, counts, concentration, prior, max_total, scale_prior=None):
    """Wrong: the scale from ``Gamma(a + m.., b)``, the ``Beta`` auxiliaries left out.  Where the
    scale is held fixed (``scale_prior=None``: the data-driven start draws the base given its
    states) there is no scale to get wrong: the exact update."""
    phi, scale = _EXACT_UPDATE(key, counts, concentration, prior, max_total, None)
    if scale_prior is None:
        return phi, scale
    m_total = jnp.sum(crp.sample_crp_tables(jax.random.fold_in(key, 7), jnp.round(counts).astype(jnp.int32).reshape(-1),
                                            jnp.broadcast_to(concentration, counts.shape).reshape(-1), max_total))
    return phi, jax.random.gamma(jax.random.fold_in(key, 8), scale_prior[0] + m_total) / scale_prior[1]


SCALE_PRIOR = (2.0, 1.0)


def exact_marginals(counts, scale_prior=None):
    """Grids and CDFs of ``phi_0`` and of the scale given ``counts`` (with ``scale_prior``: the
    scale random), from the unnormalized joint density on a grid."""
    from scipy.special import gammaln

    grid = np.linspace(1e-6, 1 - 1e-6, 4001)
    scales = np.array([SCALE]) if scale_prior is None else np.linspace(1e-4, 25.0, 2501)
    b = B0 / C
    log_f = np.broadcast_to((b - 1) * (np.log(grid) + np.log1p(-grid)), (scales.size, grid.size)).copy()
    conc = scales[:, None, None] * np.stack([grid, 1 - grid], -1)[None]
    log_f += np.sum(gammaln(conc[:, :, None, :] + counts) - gammaln(conc[:, :, None, :]), axis=(2, 3))
    log_f += np.sum(gammaln(scales[:, None]) - gammaln(scales[:, None] + counts.sum(-1)), -1)[:, None]
    if scale_prior is not None:
        log_f += ((scale_prior[0] - 1) * np.log(scales) - scale_prior[1] * scales)[:, None]
    f = np.exp(log_f - log_f.max())
    cdf = lambda m: np.cumsum(m) / np.sum(m)
    return (grid, cdf(f.sum(0))), (scales, cdf(f.sum(1)))


COUNTS = np.array([[5.0, 0.0], [1.0, 3.0], [2.0, 2.0]])


@pytest.mark.parametrize("variant", ["exact", "tables_ignored"])
def test_phi_update_matches_the_exact_conditional(variant):
    """20 updates from prior draws, 4000 chains, against the exact ``p(phi | counts)`` (KS test);
    the variant without the Antoniak tables (``m = n``) fails."""
    phi, _ = base_chain(COUNTS, 4000, 20, update=None if variant == "exact" else tables_ignored)
    (grid, cdf), _ = exact_marginals(COUNTS)
    p = stats.kstest(phi[:, 0], lambda x: np.interp(x, grid, cdf)).pvalue
    evaluate = shared_base_emission(SCALE, (B0 / C, B0 / C))
    assert abs(evaluate(COUNTS)[1] - np.sum(np.diff(cdf, prepend=0.0) * grid)) < 1e-3  # the two quadratures agree
    assert p > 1e-3 if variant == "exact" else p < 1e-6, p


@pytest.mark.parametrize("variant", ["exact", "auxiliaries_ignored"])
def test_phi_and_scale_update_match_the_exact_conditional(variant):
    """With ``scale ~ Gamma(2, 1)``: 40 updates of ``(phi, scale)`` from prior draws, 4000 chains,
    both marginals against the exact joint ``p(phi, scale | counts)`` (KS tests); the variant
    that leaves out the ``Beta`` auxiliaries fails."""
    phi, scale = base_chain(COUNTS, 4000, 40, SCALE_PRIOR, update=None if variant == "exact" else auxiliaries_ignored)
    (grid, cdf), (scales, cdf_s) = exact_marginals(COUNTS, SCALE_PRIOR)
    p_phi = stats.kstest(phi[:, 0], lambda x: np.interp(x, grid, cdf)).pvalue
    p_scale = stats.kstest(scale, lambda x: np.interp(x, scales, cdf_s)).pvalue
    if variant == "exact":
        assert p_phi > 1e-3 and p_scale > 1e-3, (p_phi, p_scale)
    else:
        assert p_scale < 1e-6, p_scale


def test_recognized_from_the_helper_and_from_a_handwritten_model():
    for model in (shared_model(8), handwritten_model):
        plan = DirectAssignmentGibbs(model).update_plan(np.array(Y))
        row = {u.site: u for u in plan}["phi"]
        assert row.update == "exact" and "shared emission base" in row.reason, str(plan)


def test_the_scale_is_recognized_with_the_base():
    plan = {u.site: u for u in BeamSampler(shared_model(8, random_scale=True)).update_plan(np.array(Y))}
    assert plan["phi"].update == "exact" and plan["scale"].update == "exact", plan
    assert "scale of the shared emission base" in plan["scale"].reason

    def scale_feeds_alpha(y):
        scale = numpyro.sample("scale", dist.Gamma(*SCALE_PRIOR))
        emission = nh.emissions.hierarchical_categorical("phi", C, concentration=scale, base_concentration=B0)
        nh.sample("y", nh.StickyHDPHMM(GAMMA, ALPHA + scale, KAPPA, emission, max_states=4), obs=y)

    plan = {u.site: u for u in BeamSampler(scale_feeds_alpha).update_plan(np.array(Y))}
    assert plan["phi"].update == "exact" and plan["scale"].update == "inner", plan


def _reason(model):
    plan = WeakLimitGibbs(model).update_plan(np.array(Y))
    return {u.site: u for u in plan}["phi"]


def test_not_recognized_when_it_feeds_something_else_or_is_not_proportional():
    def feeds_alpha(y):
        phi = numpyro.sample("phi", dist.Dirichlet(jnp.full(C, B0 / C)))
        hmm = nh.StickyHDPHMM(GAMMA, ALPHA + phi[0], KAPPA, nh.emissions.Categorical(C, SCALE * phi), max_states=4)
        nh.sample("y", hmm, obs=y)

    def shifted(y):
        phi = numpyro.sample("phi", dist.Dirichlet(jnp.full(C, B0 / C)))
        hmm = nh.StickyHDPHMM(GAMMA, ALPHA, KAPPA, nh.emissions.Categorical(C, 1.0 + phi), max_states=4)
        nh.sample("y", hmm, obs=y)

    row = _reason(feeds_alpha)
    assert row.update == "inner" and "enters other sites" in row.reason
    row = _reason(shifted)
    assert row.update == "inner" and "not a constant times it" in row.reason


def test_helper_validates_its_arguments():
    def model(y, **kwargs):
        emission = nh.emissions.hierarchical_categorical("phi", **kwargs)
        nh.sample("y", nh.HDPHMM(1.0, 1.0, emission, max_states=4), obs=y)

    for kwargs, match in [({"num_categories": 1}, "num_categories"),
                          ({"num_categories": 2, "concentration": 0.0}, "concentration"),
                          ({"num_categories": 2, "base_concentration": -1.0}, "base_concentration"),
                          ({"num_categories": 2, "concentration": np.ones(2)}, "scalar")]:
        with pytest.raises(ValueError, match=match):
            numpyro.handlers.seed(model, 0)(np.array(Y), **kwargs)


def test_collapsed_svi_refuses_it():
    with pytest.raises(NotImplementedError, match="shared emission base"):
        nh.infer.CollapsedSVI(shared_model(8)).init(jax.random.key(0), np.array(Y))


KERNELS = {
    "direct_assignment": lambda m: DirectAssignmentGibbs(m),
    "beam": lambda m: BeamSampler(m),
    "rcd_stepwise": lambda m: RCDSampler(m, mode="stepwise"),
    "rcd_blocked": lambda m: RCDSampler(m, mode="blocked", block_size=2),
    "pgas": lambda m: PGAS(m),
    "weak_limit": lambda m: WeakLimitGibbs(m),
}


def final_draws(kernel, y, seed=0, num_warmup=NUM_WARMUP):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=1, num_chains=NUM_CHAINS, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mcmc.run(jax.random.key(seed), y)
    s = mcmc.get_samples()
    return np.asarray(s["y_states"]).reshape(NUM_CHAINS, -1), np.asarray(s["phi"])[:, 0], s.get("scale")


def z_score(draws, mean):
    return (np.mean(draws) - mean) / (np.std(draws) / np.sqrt(np.size(draws)))


def check_against_enumeration(name, seed=0, num_warmup=NUM_WARMUP, random_scale=False):
    """``(TV of the partition, its bound, z of the mean of phi, z of the mean of the scale)``."""
    weak = name == "weak_limit"
    gamma = GAMMA_WEAK_LIMIT if weak else GAMMA
    exact, phi_mean, scale_mean = exact_shared_base_posterior(
        [Y], gamma, ALPHA, KAPPA, SCALE, (B0 / C, B0 / C), num_states=3 if weak else None,
        scale_prior=SCALE_PRIOR if random_scale else None)
    model = shared_model(3 if weak else 10, random_scale, gamma)
    states, phi, scale = final_draws(KERNELS[name](model), np.array(Y), seed, num_warmup)
    tv, bound = empirical_tv(exact, states), tv_bound(exact.values(), len(states))
    z_scale = z_score(np.asarray(scale), scale_mean) if random_scale else 0.0
    print(f"{name}{' (random scale)' if random_scale else ''}: TV {tv:.4f} (bound {bound:.4f}), "
          f"phi mean z {z_score(phi, phi_mean):.2f}, scale mean z {z_scale:.2f}")
    return tv, bound, z_score(phi, phi_mean), z_scale


# slow (75-136 s each): the kernels' call sites of the base update against enumeration; the default
# set checks the update itself against its exact conditional (test_phi_and_scale_update_match_the_exact_conditional)
# and each kernel against enumeration in tests/infer/test_conformance.py
# (test_kernels_match_enumeration_slow has every kernel, both ways)
@pytest.mark.parametrize("name", [pytest.param("direct_assignment", marks=[pytest.mark.slow, pytest.mark.statistical]),
                                  pytest.param("rcd_stepwise", marks=[pytest.mark.slow, pytest.mark.statistical]),
                                  pytest.param("weak_limit", marks=[pytest.mark.slow, pytest.mark.statistical])])
def test_kernels_match_enumeration(name):
    """The partition of the states (total variation) and the mean of ``phi`` (z-score) of the
    last draw of 2000 chains against the exact posterior."""
    tv, bound, z, _ = check_against_enumeration(name)
    assert tv < bound and abs(z) < 4.0, (tv, bound, z)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("name", ["beam"])
def test_kernels_match_enumeration_random_scale(name):
    """The same with ``scale ~ Gamma(2, 1)`` a site of the model: the mean of the scale too."""
    tv, bound, z, z_scale = check_against_enumeration(name, random_scale=True)
    assert tv < bound and abs(z) < 4.0 and abs(z_scale) < 4.0, (tv, bound, z, z_scale)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("random_scale", [False, True], ids=["fixed-scale", "random-scale"])
@pytest.mark.parametrize("name", ["direct_assignment", "beam", "pgas", "rcd_stepwise", "rcd_blocked", "weak_limit"])
def test_kernels_match_enumeration_slow(name, random_scale):
    tv, bound, z, z_scale = check_against_enumeration(name, random_scale=random_scale)
    assert tv < bound and abs(z) < 4.0 and abs(z_scale) < 4.0, (tv, bound, z, z_scale)


@pytest.mark.slow  # negative control of test_kernels_match_enumeration
@pytest.mark.statistical
@pytest.mark.negative_control
@pytest.mark.parametrize("wrong", [tables_ignored, auxiliaries_ignored], ids=lambda f: f.__name__)
def test_enumeration_detects_a_wrong_base_update(wrong, monkeypatch):
    monkeypatch.setattr(crp, "sample_shared_base", wrong)
    random_scale = wrong is auxiliaries_ignored
    tv, bound, z, z_scale = check_against_enumeration("direct_assignment", random_scale=random_scale)
    assert max(abs(z), abs(z_scale)) > 4.0 or tv > bound
