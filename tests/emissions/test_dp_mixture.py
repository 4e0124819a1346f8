"""DPMixture: protocol conformance, brute-force likelihoods, the explicit sites, and the exact
stationary distribution of its Gibbs update ``update_parameters`` on a tiny problem."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from scipy.special import gammaln, logsumexp, roots_genlaguerre

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em
from numpyro_hdphmm.emissions import DPMixture, dp_mixture

K, LC = 3, 4  # HMM states, mixture components

BASES = {
    "gaussian_niw": lambda: em.GaussianNIW(loc=np.zeros(2), mean_precision=1.0, df=5.0, scale=np.eye(2)),
    "diagonal": lambda: em.DiagonalGaussian(loc=np.zeros(2), mean_precision=1.0, concentration=3.0, rate=2.0),
    "categorical": lambda: em.Categorical(num_categories=4, concentration=1.0),
    "poisson": lambda: em.Poisson(concentration=2.0, rate=1.0),
}


@pytest.fixture(params=sorted(BASES))
def mixture(request):
    return DPMixture(BASES[request.param](), 1.5, LC)


def _data(mix, t, key=0):
    k1, k2, k3 = jax.random.split(jax.random.key(key), 3)
    params = mix.sample_parameters(k1, (K,))
    states = jax.random.randint(k2, (t,), 0, K)
    return mix.sample_observations(k3, params, states), params, states


def test_shapes_and_brute_force_likelihood(mixture):
    y, params, states = _data(mixture, 25)
    base = mixture.base
    assert mixture.param_names == ("weights",) + base.param_names
    assert params["weights"].shape == (K, LC)
    for p in base.param_names:
        assert params[p].shape[:2] == (K, LC)
    assert y.shape == (25,) + tuple(base.event_shape)
    x, valid = mixture.prepare(y)
    ll = np.asarray(mixture.log_likelihoods(x, params))
    assert ll.shape == (25, K) and np.all(np.isfinite(ll))
    # brute force: one base evaluation per component, no reshaping of the parameters
    per_component = np.stack(
        [np.asarray(base.log_likelihoods(x, {p: params[p][:, j] for p in base.param_names})) for j in range(LC)], -1
    )
    expected = logsumexp(per_component + np.log(np.asarray(params["weights"]))[None], axis=-1)
    np.testing.assert_allclose(ll, expected, rtol=1e-10, atol=1e-10)
    lp = np.asarray(mixture.log_prior(params))
    expected_lp = np.asarray(
        dist.Dirichlet(jnp.full(LC, 1.5 / LC)).log_prob(params["weights"])
    ) + sum(np.asarray(base.log_prior({p: params[p][:, j] for p in base.param_names})) for j in range(LC))
    np.testing.assert_allclose(lp, expected_lp, rtol=1e-9)
    # the Gibbs update keeps every shape
    w = em.state_weights(states, valid.at[3].set(False), K)  # one missing step
    update = jax.jit(lambda m, key, p, prior: m.update_parameters(key, x, w, p, prior), static_argnums=3)
    new, sigma = update(mixture, jax.random.key(1), params, None)
    assert {p: v.shape for p, v in new.items()} == {p: v.shape for p, v in params.items()}
    assert float(sigma) == 1.5
    new, sigma = update(mixture, jax.random.key(1), params, (2.0, 1.0))
    assert np.isfinite(float(sigma)) and float(sigma) > 0
    assert np.all(np.isfinite(np.asarray(mixture.log_prior(new))))


def test_conjugate_methods_are_not_available(mixture):
    y, params, states = _data(mixture, 5)
    x, valid = mixture.prepare(y)
    for call in (
        lambda: mixture.sufficient_statistics(x, em.state_weights(states, valid, K)),
        lambda: mixture.posterior(None),
        lambda: mixture.log_marginal_likelihood(None),
        lambda: mixture.log_predictive(x[0], None),
    ):
        with pytest.raises(NotImplementedError, match="no conjugate closed form"):
            call()


def test_sample_observations_frequencies():
    """Categorical base: P(y = c | z = k) = sum_j psi_kj probs_kjc."""
    mix = DPMixture(em.Categorical(3, 1.0), 1.0, 2)
    params = {"weights": jnp.array([[0.3, 0.7], [0.9, 0.1]]),
              "probs": jnp.array([[[0.8, 0.1, 0.1], [0.1, 0.1, 0.8]], [[0.2, 0.6, 0.2], [1 / 3, 1 / 3, 1 / 3]]])}
    states = jnp.repeat(jnp.arange(2), 40000)
    y = np.asarray(mix.sample_observations(jax.random.key(0), params, states))
    for k in range(2):
        freq = np.bincount(y[states == k], minlength=3) / 40000
        expected = np.einsum("j,jc->c", params["weights"][k], params["probs"][k])
        np.testing.assert_allclose(freq, expected, atol=0.01)


def _model(base, sigma_prior=True, num_steps=6):
    def model(y=None):
        sigma = numpyro.sample("sigma", dist.Gamma(2.0, 1.0)) if sigma_prior else 1.0
        hmm = nh.StickyHDPHMM(1.0, 1.0, 2.0, DPMixture(base, sigma, LC), max_states=K, num_steps=num_steps)
        nh.sample("y", hmm, obs=y)

    return model


def test_sample_sites_under_nh_sample(mixture):
    model = _model(mixture.base)
    tr = handlers.trace(handlers.seed(model, 3)).get_trace()
    names = [f"y_{p}" for p in mixture.param_names]
    for name in names:
        assert tr[name]["infer"]["hdphmm_role"] == "emission", name
    assert tr["y_weights"]["value"].shape == (K, LC)
    for p in mixture.base.param_names:
        assert tr[f"y_{p}"]["value"].shape[:2] == (K, LC)
    # the sites' log densities add up to the family's log prior (conditionals consistent)
    params = {p: tr[f"y_{p}"]["value"] for p in mixture.param_names}
    sigma = tr["sigma"]["value"]
    site_lp = sum(float(jnp.sum(tr[n]["fn"].log_prob(tr[n]["value"]))) for n in names)
    family_lp = float(jnp.sum(DPMixture(mixture.base, sigma, LC).log_prior(params)))
    np.testing.assert_allclose(site_lp, family_lp, rtol=1e-9)
    # substituted values are used, and the later sites are conditioned on them
    other = mixture.sample_parameters(jax.random.key(9), (K,))
    sub = handlers.trace(handlers.seed(handlers.substitute(model, data={f"y_{p}": v for p, v in other.items()}), 3)).get_trace()
    site_lp = sum(float(jnp.sum(sub[n]["fn"].log_prob(sub[n]["value"]))) for n in names)
    family_lp = float(jnp.sum(DPMixture(mixture.base, sub["sigma"]["value"], LC).log_prior(other)))
    np.testing.assert_allclose(site_lp, family_lp, rtol=1e-9)
    # the observed site is the mixture likelihood
    obs = tr["y"]
    ll = DPMixture(mixture.base, sigma, LC).pointwise_log_likelihood(obs["value"], params, tr["y_states"]["value"])
    np.testing.assert_allclose(np.asarray(obs["fn"].log_prob(obs["value"])), np.asarray(ll), rtol=1e-10)


def test_traced_concentration_and_pytree():
    base = em.GaussianNIW(np.zeros(1), 0.5, 3.0, np.eye(1))
    params = DPMixture(base, 1.0, LC).sample_parameters(jax.random.key(0), (K,))

    @jax.jit
    def lp(sigma):
        return jnp.sum(DPMixture(base, sigma, LC).log_prior(params))

    g = jax.grad(lp)(2.0)
    assert np.isfinite(float(g))
    mix = DPMixture(base, 2.0, LC)
    leaves, tree = jax.tree_util.tree_flatten(mix)
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert isinstance(again, DPMixture) and again.max_components == LC
    out = jax.jit(lambda m, x: m.log_likelihoods(x, params))(mix, jnp.zeros((4, 1)))
    assert out.shape == (4, K)


def test_bad_arguments():
    base = em.Categorical(3)
    with pytest.raises(ValueError, match="max_components"):
        DPMixture(base, 1.0, 0)
    with pytest.raises(ValueError, match="concentration"):
        DPMixture(base, -1.0, 3)
    with pytest.raises(ValueError, match="concentration"):
        DPMixture(base, jnp.ones(2), 3)
    with pytest.raises(ValueError, match="base_family"):
        DPMixture("gaussian", 1.0, 3)
    with pytest.raises(ValueError, match="base_family"):
        DPMixture(em.Categorical(3, np.ones((2, 3))), 1.0, 3)


def test_weakly_informative():
    y = np.random.default_rng(0).normal(size=(50, 2))
    mix = DPMixture.weakly_informative(y, max_components=7)
    assert isinstance(mix.base, em.GaussianNIW) and mix.max_components == 7
    np.testing.assert_allclose(np.asarray(mix.base.loc), y.mean(0), rtol=1e-8)
    counts = np.random.default_rng(0).poisson(3.0, size=40)
    mix = DPMixture.weakly_informative(counts, base_family=em.Poisson, concentration=2.0)
    assert isinstance(mix.base, em.Poisson) and float(mix.concentration) == 2.0
    with pytest.raises(ValueError, match="base_family"):
        DPMixture.weakly_informative(y, base_family="niw")


# ------------------------------------------------------- stationary distribution of the update
# Fixed states z and categorical observations x; sigma ~ Gamma(A, B).  The update leaves
# p(sigma, psi, theta | x, z) invariant; two label-invariant statistics are compared with their
# exact values (component indicators s enumerated, psi and theta integrated, sigma by quadrature):
# E[sigma | x, z] and each state's predictive P(y = 0 | z = k, x, z) = E[sum_j psi_kj theta_kj0].
A, B, L2, C2 = 2.0, 1.0, 2, 2
Z_FIXED = np.array([0, 0, 0, 0, 1, 1, 1])
X_FIXED = np.array([0, 0, 0, 1, 1, 1, 0])


def _exact_update_targets():
    nodes, wts = roots_genlaguerre(80, A - 1.0)  # int sigma^(A-1) e^(-sigma) f(sigma)
    sigma = nodes / B
    num_states = Z_FIXED.max() + 1
    log_terms, e_sigma, e_pred = [], [], []
    for s in itertools.product(range(L2), repeat=len(X_FIXED)):
        s = np.array(s)
        n = np.zeros((num_states, L2))
        np.add.at(n, (Z_FIXED, s), 1)
        c = np.zeros((num_states, L2, C2))
        np.add.at(c, (Z_FIXED, s, X_FIXED), 1)
        log_py = np.sum(gammaln(C2 * 1.0) - gammaln(C2 + n) + np.sum(gammaln(1.0 + c) - gammaln(1.0), -1))
        sg = sigma[:, None, None]
        nk = n.sum(-1)
        log_ps = np.sum(gammaln(sg[..., 0]) - gammaln(sg[..., 0] + nk), -1) + np.sum(
            gammaln(sg / L2 + n) - gammaln(sg / L2), (-1, -2))
        log_w = np.log(wts) + log_ps + log_py  # (nodes,)
        e_psi = (sg / L2 + n) / (sg[..., 0] + nk)[..., None]  # (nodes, K, L')
        e_theta0 = (1.0 + c[..., 0]) / (C2 + n)
        pred = np.sum(e_psi * e_theta0, -1)  # (nodes, K)
        log_terms.append(log_w)
        e_sigma.append(sigma)
        e_pred.append(pred)
    log_terms = np.concatenate(log_terms)
    w = np.exp(log_terms - logsumexp(log_terms))
    return {
        "sigma": np.sum(w * np.concatenate(e_sigma)),
        "pred0": np.sum(w * np.concatenate(e_pred)[:, 0]),
        "pred1": np.sum(w * np.concatenate(e_pred)[:, 1]),
    }


def _run_update_chains(num_chains=4000, num_iterations=25, seed=0):
    base = em.Categorical(C2, 1.0)
    num_states = Z_FIXED.max() + 1
    x = jnp.asarray(X_FIXED)
    w = jax.nn.one_hot(jnp.asarray(Z_FIXED), num_states)

    def chain(key):
        k0, k1, key = jax.random.split(key, 3)
        sigma0 = jax.random.gamma(k0, A) / B
        params0 = DPMixture(base, sigma0, L2).sample_parameters(k1, (num_states,))

        def step(carry, k):
            params, sigma = carry
            params, sigma = DPMixture(base, sigma, L2).update_parameters(k, x, w, params, (A, B))
            return (params, sigma), None

        (params, sigma), _ = jax.lax.scan(step, (params0, sigma0), jax.random.split(key, num_iterations))
        pred = jnp.sum(params["weights"] * params["probs"][..., 0], -1)
        return {"sigma": sigma, "pred0": pred[0], "pred1": pred[1]}

    out = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.key(seed), num_chains))
    return {k: np.asarray(v) for k, v in out.items()}


def _z_scores(draws, exact):
    return {k: (draws[k].mean() - exact[k]) / (draws[k].std() / np.sqrt(len(draws[k]))) for k in exact}


@pytest.fixture(scope="module")
def exact_update():
    return _exact_update_targets()


def test_update_parameters_stationary_distribution(exact_update):
    z = _z_scores(_run_update_chains(), exact_update)
    assert max(abs(v) for v in z.values()) < 4.0, (z, exact_update)


def test_update_parameters_detects_psi_without_counts(exact_update, monkeypatch):
    """Negative control: psi drawn from Dir(sigma/L') without the indicator counts (eq. 65 wrong)."""
    monkeypatch.setattr(dp_mixture, "_psi_posterior_concentration", lambda c, n, counts: c / n + 0.0 * counts)
    z = _z_scores(_run_update_chains(), exact_update)
    assert max(abs(v) for v in z.values()) > 4.0, z


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.negative_control
def test_update_parameters_detects_wrong_concentration_update(exact_update, monkeypatch):
    """Negative control: the sigma update without the psi-integrating CRP tables (the
    ``L' -> inf`` form, components in use counted instead of tables)."""
    real = dp_mixture.crp.sample_crp_tables
    monkeypatch.setattr(dp_mixture.crp, "sample_crp_tables",
                        lambda key, counts, conc, total: (jnp.asarray(counts) > 0).astype(jnp.int32))
    try:
        z = _z_scores(_run_update_chains(), exact_update)
    finally:
        monkeypatch.setattr(dp_mixture.crp, "sample_crp_tables", real)
    assert abs(z["sigma"]) > 4.0, z
