"""Property-based hostile inputs (``hypothesis``): for every emission family, data of any dtype
(booleans, narrow and wide integers, float16/bfloat16/float32/float64/longdouble), magnitude,
offset, length and sequence layout, with 64-bit mode on or off, ``nh.sample`` either refuses the
data with a clear error (a ``ValueError``/``NotImplementedError`` naming an argument in
backticks) or reads exactly the values it was given (to the working float type's rounding):
never a silent change of the data.  The ``_slow`` twin runs every kernel on such data: finite
draws or a clear error.  The default run is short (a few examples, nothing compiled but the
families' constructors); the kernels run under ``-m slow``."""

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as hs

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em
from numpyro_hdphmm.infer.plumbing.discovery import discovery_trace

from kernel_registry import kernel_classes

_COMMON = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
FAST = settings(max_examples=12, **_COMMON)
SLOW = settings(max_examples=40, **_COMMON)

FAMILIES = ("GaussianNIW", "DiagonalGaussian", "AutoRegressive", "Poisson", "Categorical", "VonMisesFisher")
DTYPES = ("bool", "uint8", "int16", "int32", "int64", "uint64", "float16", "bfloat16", "float32", "float64", "longdouble")


def _dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _data(family, dtype, magnitude, offset, num_steps, num_sequences, seed):
    """Data for ``family`` (host float64 before the cast), cast to ``dtype`` where the family's
    support allows it (unit vectors stay floating)."""
    rng = np.random.default_rng(seed)
    shape = (num_steps,) if num_sequences is None else (num_sequences, num_steps)
    if family in ("Poisson", "Categorical"):
        high = 3 if family == "Categorical" else max(2, int(10.0 ** magnitude))
        y = rng.integers(0, high, size=shape).astype(float)
    elif family == "VonMisesFisher":
        angle = rng.normal(size=shape)
        y = np.stack([np.cos(angle), np.sin(angle)], -1)
        dtype = dtype if dtype.kind == "f" or dtype.kind == "V" else np.dtype(float)
    else:
        y = (10.0 ** offset) * np.sign(offset) + (10.0 ** magnitude) * rng.normal(size=shape + (2,))
    if dtype == bool:
        y = (y != 0) if family != "VonMisesFisher" else y
    with np.errstate(all="ignore"):
        cast = np.asarray(y).astype(dtype)
    return cast


def _family(family, data):
    if family == "Categorical":
        return em.Categorical.weakly_informative(data, num_categories=3)
    if family == "VonMisesFisher":
        return em.VonMisesFisher.weakly_informative(data, concentration=2.0)
    return getattr(em, family).weakly_informative(data)


def _clear(error) -> bool:
    return "`" in str(error)


def _read(family, data, num_sequences):
    fam = _family(family, data)
    lengths = None if num_sequences is None else np.full(num_sequences, data.shape[1])

    def model():
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, fam, max_states=3), obs=data, lengths=lengths)

    # as JAX holds it (the conversion a kernel's program or jnp makes: where integers would wrap)
    return np.asarray(jax.numpy.asarray(discovery_trace(model)["y"]["value"]))


def check_data_read_as_given(family, dtype_name, magnitude, offset, num_steps, num_sequences, x64, seed):
    dtype = _dtype(dtype_name)
    with jax.enable_x64(x64):
        data = _data(family, dtype, magnitude, offset, num_steps, num_sequences, seed)
        if family == "AutoRegressive" and num_steps < 3:
            return
        try:
            value = _read(family, data, num_sequences)
        except (ValueError, NotImplementedError) as e:
            assert _clear(e), f"unclear error: {e!r}"
            return
        given = np.asarray(data).astype(np.float64)
        got = value.astype(np.float64)
        eps = np.finfo(np.float64 if x64 else np.float32).eps
        assert got.shape == given.shape
        if family in ("Poisson", "Categorical"):  # counts and categories: exactly
            np.testing.assert_array_equal(got, given)
        else:
            np.testing.assert_allclose(got, given, rtol=2 * eps, atol=0)


_STRATEGIES = dict(
    family=hs.sampled_from(FAMILIES),
    dtype_name=hs.sampled_from(DTYPES),
    magnitude=hs.integers(-6, 12),
    offset=hs.integers(-3, 12),
    num_steps=hs.integers(2, 8),
    num_sequences=hs.sampled_from([None, None, 1, 2]),
    x64=hs.booleans(),
    seed=hs.integers(0, 3),
)


@FAST
@given(**_STRATEGIES)
@example(family="GaussianNIW", dtype_name="int64", magnitude=2, offset=10, num_steps=5, num_sequences=None, x64=False, seed=0)
@example(family="Poisson", dtype_name="uint64", magnitude=10, offset=0, num_steps=4, num_sequences=2, x64=False, seed=1)
@example(family="DiagonalGaussian", dtype_name="bfloat16", magnitude=0, offset=1, num_steps=6, num_sequences=None, x64=True, seed=2)
@example(family="VonMisesFisher", dtype_name="float16", magnitude=0, offset=0, num_steps=3, num_sequences=1, x64=False, seed=3)
def test_data_are_read_as_given_or_refused_clearly(**kw):
    check_data_read_as_given(**kw)


@pytest.mark.slow
@pytest.mark.robustness
@settings(SLOW, max_examples=300)
@given(**_STRATEGIES)
def test_data_are_read_as_given_or_refused_clearly_slow(**kw):
    check_data_read_as_given(**kw)


KERNELS = tuple(kernel_classes())  # every kernel class of the conformance registry (tests/kernel_registry.py)


@pytest.mark.slow
@pytest.mark.robustness
@SLOW
@given(kernel=hs.sampled_from(KERNELS), family=hs.sampled_from(("GaussianNIW", "Poisson", "Categorical")),
       dtype_name=hs.sampled_from(("int64", "float32", "float64")), magnitude=hs.integers(-3, 9),
       offset=hs.integers(-3, 9), x64=hs.booleans(), seed=hs.integers(0, 3))
def test_every_kernel_gives_finite_draws_or_a_clear_error_slow(kernel, family, dtype_name, magnitude, offset, x64, seed):
    from numpyro.infer import MCMC

    with jax.enable_x64(x64):
        data = _data(family, _dtype(dtype_name), magnitude, offset, 24, None, seed)
        if family != "Categorical" and family != "Poisson":
            data = data.reshape(24, 2)

        def model(y):
            nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 5.0, _family(family, y), max_states=4), obs=y)

        try:
            mcmc = MCMC(kernel(model), num_warmup=3, num_samples=3, progress_bar=False)
            mcmc.run(jax.random.key(seed), data, extra_fields=("nonfinite",))
        except (ValueError, NotImplementedError) as e:
            assert _clear(e), f"unclear error: {e!r}"
            return
        assert not np.any(np.asarray(mcmc.get_extra_fields()["nonfinite"]))
