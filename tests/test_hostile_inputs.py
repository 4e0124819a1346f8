"""Hostile inputs, round 3: no silent change of the data (integers beyond int32, unusual float
dtypes, counts beyond the float type's precision, an ambiguous ``(T, 2)`` matrix), NumPyro's
effect handlers honoured or refused by name, and the data-scaled priors on traced data.
(The messages themselves: ``tests/error_cases.py`` / ``docs/errors.md``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import MCMC, init_to_value
from numpyro.infer.reparam import Reparam

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em
from numpyro_hdphmm.infer.plumbing.discovery import discovery_trace

from kernel_registry import kernel_classes
from numpyro_hdphmm.infer import CollapsedSVI, WeakLimitGibbs

KERNELS = kernel_classes()  # every kernel class of the conformance registry (tests/kernel_registry.py)
_RNG = np.random.default_rng(0)
_Y = _RNG.normal(size=(30, 1))
_Y[15:] += 4.0


def _model(y, gamma_prior=False):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0)) if gamma_prior else 1.0
    nh.sample("y", nh.StickyHDPHMM(gamma, 1.0, 5.0, em.GaussianNIW.weakly_informative(y), max_states=4), obs=y)


def _obs_value(emission, obs, lengths=None):
    def model():
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=4), obs=obs, lengths=lengths)

    return discovery_trace(model)["y"]["value"]  # the latent sites at fixed points: nothing drawn or compiled


# ------------------------------------------------------------------ no silent change of the data
def test_integers_beyond_int32_are_read_as_floats_not_wrapped():
    y = (3_000_000_000 + np.arange(20)[:, None]).astype(np.int64)
    with jax.enable_x64(False):
        value = np.asarray(jnp.asarray(_obs_value(em.GaussianNIW.weakly_informative(y), y)))
        assert value.dtype.kind == "f" and np.all(value > 2.9e9)  # before: wrapped to -1.29e9
        counts = (2**31 + np.arange(5)).astype(np.int64)
        with pytest.raises(ValueError, match="float64|64-bit"):  # counts that large need float64 anyway
            _obs_value(em.Poisson(), counts)
        # a kernel's compiled program receives the argument from JAX, which would wrap it: refused
        with pytest.raises(ValueError, match=r"`model_args\[0\]`.*wrap"):
            WeakLimitGibbs(_model).update_plan(y)
    # int32-range integers are unchanged (and stay integers)
    small = np.arange(5, dtype=np.int64)
    assert np.asarray(_obs_value(em.Poisson(), small)).dtype.kind in "iu"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "longdouble"])
def test_unusual_float_dtypes_are_read_as_floats(dtype):
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    y = np.round(_Y * 4) / 4  # exactly representable in every one of them
    value = np.asarray(_obs_value(em.GaussianNIW.weakly_informative(y), y.astype(dt)))
    assert value.dtype in (np.float32, np.float64)
    np.testing.assert_array_equal(value, y)


def test_poisson_counts_beyond_the_float_precision_are_refused_in_float32_only():
    counts = np.repeat([1e9, 1e9 + 2e5], 20)
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"`obs`.*rounding error in float32.*jax_enable_x64"):
            _obs_value(em.Poisson(), counts)
        _obs_value(em.Poisson(), np.repeat([1e3, 1.2e3], 20))  # small counts pass
    _obs_value(em.Poisson(), counts)  # float64: fine


def test_scalar_data_with_more_sequences_than_steps_needs_lengths():
    counts = _RNG.poisson(3.0, size=(40, 2))
    with pytest.raises(ValueError, match=r"`obs` of shape \(40, 2\).*event_shape=2.*lengths="):
        _obs_value(em.Poisson(), counts)
    assert np.shape(_obs_value(em.Poisson(event_shape=2), counts)) == (40, 2)  # two channels
    assert np.shape(_obs_value(em.Poisson(), counts, lengths=np.full(40, 2))) == (40, 2)  # confirmed
    assert np.shape(_obs_value(em.Poisson(), counts.T)) == (2, 40)  # 2 sequences of 40 steps


# ------------------------------------------------------------------ NumPyro's handlers
@pytest.mark.parametrize("kernel", KERNELS + [CollapsedSVI], ids=lambda k: k.__name__)
def test_scale_is_refused_by_every_kernel(kernel):
    model = handlers.scale(_model, 1e-3)
    with pytest.raises(NotImplementedError, match=r"numpyro\.handlers\.scale"):
        if kernel is CollapsedSVI:
            kernel(model).init(jax.random.key(0), _Y)
        else:
            kernel(model).update_plan(_Y)


class _Deterministic(Reparam):
    """A reparameterization that draws an auxiliary site and makes the original a deterministic one."""

    def __call__(self, name, fn, obs):
        return None, numpyro.sample(f"{name}_base", fn)


@pytest.mark.parametrize(
    "wrap, handler",
    [
        (lambda m: handlers.mask(m, mask=False), r"numpyro\.handlers\.mask"),
        (lambda m: handlers.condition(m, data={"y_states": np.repeat([0, 1], 15)}), r"known segmentation.*handlers\.condition"),
        (lambda m: handlers.condition(m, data={"y_beta": np.full(5, 0.2)}), r"handlers\.condition"),
        (lambda m: handlers.block(m, hide=["y_states"]), r"numpyro\.handlers\.block"),
        (lambda m: handlers.reparam(m, config={"y_mu": _Deterministic()}), r"numpyro\.handlers\.reparam"),
        (lambda m: handlers.reparam(m, config={"y_beta": _Deterministic()}), r"numpyro\.handlers\.reparam"),
        (lambda m: handlers.condition(m, data={"y_cov": np.eye(1)[None].repeat(4, 0)}), r"handlers\.condition"),
    ],
    ids=["mask", "condition-states", "condition-beta", "block", "reparam-params", "reparam-beta", "condition-params"],
)
def test_handlers_on_the_hdp_sites_are_refused_by_name(wrap, handler):
    with pytest.raises(NotImplementedError, match=handler):
        WeakLimitGibbs(wrap(_model)).update_plan(_Y)


def test_handlers_on_other_sites_and_seed_work():
    # condition on a hyperparameter: it leaves the plan (a constant), the rest is unchanged
    plan = WeakLimitGibbs(handlers.condition(_model, data={"gamma": 2.0})).update_plan(_Y, True)
    assert "gamma" not in [row.site for row in plan]
    assert "gamma" in [row.site for row in WeakLimitGibbs(_model).update_plan(_Y, True)]
    # seed and substitute (by NumPyro's rules a kernel's own values take precedence) trace as without them
    for wrap in (lambda m: handlers.seed(m, 3), lambda m: handlers.substitute(m, data={"gamma": 2.0})):
        assert [r.site for r in WeakLimitGibbs(wrap(_model)).update_plan(_Y, True)] == [
            r.site for r in WeakLimitGibbs(_model).update_plan(_Y, True)]


@pytest.mark.slow  # two compilations of a kernel (about a minute on 2 cores)
@pytest.mark.robustness
def test_seeded_model_gives_the_same_draws():
    def run(model):
        mcmc = MCMC(WeakLimitGibbs(model), num_warmup=2, num_samples=3, progress_bar=False)
        mcmc.run(jax.random.key(1), _Y)
        return mcmc.get_samples()["y_states"]

    np.testing.assert_array_equal(run(_model), run(handlers.seed(_model, 7)))


def test_plate_around_nh_sample_is_refused():
    def model():
        with numpyro.plate("groups", 2):
            nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, em.Poisson(), max_states=4), obs=np.arange(10))

    with pytest.raises(NotImplementedError, match=r"numpyro\.plate"):
        discovery_trace(model)


def test_states_of_the_wrong_shape_are_refused():
    for wrap in (lambda m: handlers.substitute(m, data={"y_states": np.zeros(7, int)}),
                 lambda m: handlers.condition(m, data={"y_states": np.zeros(7, int)})):
        with pytest.raises(ValueError, match=r"`y_states` has shape \(7,\) but the data give \(30,\)"):
            discovery_trace(wrap(_model), (_Y,))
    bad = init_to_value(values={"y_states": np.full(30, 1.5)})
    with pytest.raises(ValueError, match=r"`init_params\['y_states'\]` must hold integer states"):
        MCMC(WeakLimitGibbs(_model, init_strategy=bad), num_warmup=1, num_samples=1, progress_bar=False).run(
            jax.random.key(0), _Y)


# ------------------------------------------------------------------ traced data
_FAMILIES = {
    "GaussianNIW": (em.GaussianNIW.weakly_informative, _Y),
    "DiagonalGaussian": (em.DiagonalGaussian.weakly_informative, _Y),
    "AutoRegressive": (em.AutoRegressive.weakly_informative, _Y),
    "Poisson": (em.Poisson.weakly_informative, _RNG.poisson(3.0, size=30).astype(float)),
    "Categorical": (lambda d: em.Categorical.weakly_informative(d, num_categories=3), _RNG.integers(0, 3, 30)),
    "VonMisesFisher": (lambda d: em.VonMisesFisher.weakly_informative(d),
                       np.stack([np.cos(_Y[:, 0]), np.sin(_Y[:, 0])], -1)),
}


@pytest.mark.parametrize("family", list(_FAMILIES))
def test_weakly_informative_on_traced_data_matches_concrete(family):
    build, data = _FAMILIES[family]
    concrete = jax.tree_util.tree_leaves(build(data))
    traced = jax.tree_util.tree_leaves(jax.jit(build)(data))
    batched = jax.tree_util.tree_leaves(jax.vmap(build)(np.stack([data, data])))
    for c, t, b in zip(concrete, traced, batched):
        np.testing.assert_allclose(t, c, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(b[0], c, rtol=1e-6, atol=1e-9)


def test_categorical_weakly_informative_on_traced_data_needs_num_categories():
    with pytest.raises(ValueError, match="`num_categories`"):
        jax.jit(em.Categorical.weakly_informative)(np.arange(5))


def test_collinear_channels_get_a_well_conditioned_prior_scale():
    y = np.hstack([_Y, 2 * _Y + 3]).astype(np.float32)
    with jax.enable_x64(False):
        scale = np.asarray(em.GaussianNIW.weakly_informative(y).scale, float)
        eig = np.linalg.eigvalsh(scale)
        assert eig[0] / eig[-1] >= 999 * np.finfo(np.float32).eps  # before: 5e-7 (about 4 eps)
    data = _RNG.normal(size=(30, 2))  # well conditioned: the covariance and the 1e-6 ridge only, as before
    cov = np.cov(data, rowvar=False)
    expected = cov + 1e-6 * np.trace(cov) / 2 * np.eye(2)
    np.testing.assert_allclose(np.asarray(em.GaussianNIW.weakly_informative(data).scale), expected, rtol=1e-12)
