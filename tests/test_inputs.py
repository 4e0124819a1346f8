"""What a user may pass as data: lists, NumPy dtypes, pandas, JAX arrays; the same model reads
them the same way.  Data-less priors (``weakly_informative(None)``) and the README model under
``Predictive`` without data (prior predictive checks).  (Malformed inputs: ``test_errors.py``.)"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

import numpyro_hdphmm as nh
from numpyro_hdphmm import emissions as em

K = 4


def _model(emission):
    def model(obs, lengths):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=K), obs=obs, lengths=lengths)

    return model


def _trace(emission, obs, lengths=None, latent=None):
    """The observed site's value and pointwise log-likelihood; ``latent`` (values of the latent
    sites) skips the prior draws."""
    model = handlers.substitute(_model(emission), data=latent) if latent else _model(emission)
    tr = handlers.trace(handlers.seed(model, 0)).get_trace(obs, lengths)
    latent = {k: v["value"] for k, v in tr.items() if v["type"] == "sample" and not v["is_observed"]}
    return np.asarray(tr["y"]["value"]), np.asarray(tr["y"]["fn"].log_prob(tr["y"]["value"])), latent


def _same(emission, reference, *others, lengths=None):
    """Every input in ``others`` is read exactly as the NumPy array ``reference`` (same value,
    same log-likelihood at the same latent values)."""
    value, lp, latent = _trace(emission, reference, lengths)
    assert np.all(np.isfinite(lp))
    for other in others:
        v, l, _ = _trace(emission, other, lengths, latent)
        np.testing.assert_array_equal(v.astype(float), value.astype(float))
        np.testing.assert_allclose(l, lp, rtol=1e-12)


def test_lists_numpy_dtypes_and_jax_arrays_are_read_alike():
    rng = np.random.default_rng(0)
    ints = rng.integers(0, 3, size=30)
    cat = em.Categorical(3)
    _same(cat, ints, ints.tolist(), ints.astype(np.uint8), ints.astype(float), jnp.asarray(ints))
    _same(em.Poisson(), ints, tuple(ints.tolist()))
    _same(cat, (ints == 1).astype(int), ints == 1)  # booleans are categories 0/1
    y = rng.normal(size=(30, 2))
    niw = em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2))
    _same(niw, np.round(3 * y), np.round(3 * y).tolist(), np.round(3 * y).astype(np.int32))  # ints for a Gaussian family
    # several sequences as nested lists, lengths as a list
    seqs = np.round(3 * np.stack([y[:20], y[10:]]))
    _same(niw, seqs, seqs.tolist(), lengths=[20, 15])


def test_pandas_objects_are_accepted():
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"symbol": rng.integers(0, 3, size=25), "x": rng.normal(size=25), "z": rng.normal(size=25)})
    _same(em.Categorical(3), df["symbol"].to_numpy(), df["symbol"])
    _same(em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2)), df[["x", "z"]].to_numpy(), df[["x", "z"]])
    _same(em.GaussianNIW(np.zeros(1), 1.0, 3.0, np.eye(1)), df[["x"]].to_numpy(), df[["x"]])
    # a nullable integer column with a missing value: NaN, a missing step
    col = pd.Series([0, 1, None, 2, 1], dtype="Int64")
    _same(em.Categorical(3), np.array([0, 1, np.nan, 2, 1]), col)
    # lengths as a Series, weakly_informative on a DataFrame
    seqs = np.stack([df[["x", "z"]].to_numpy(), df[["x", "z"]].to_numpy()[::-1]])
    _same(em.GaussianNIW(np.zeros(2), 1.0, 4.0, np.eye(2)), seqs, lengths=pd.Series([25, 12]))
    fam = em.GaussianNIW.weakly_informative(df[["x", "z"]])
    np.testing.assert_allclose(fam.loc, df[["x", "z"]].mean().to_numpy(), rtol=1e-12)
    # a categorical (string) column is refused with the way out
    with pytest.raises(ValueError, match=r"`obs`.*cat\.codes"):
        _trace(em.Categorical(3), pd.Series(["a", "b", "a"]))


def test_pandas_is_not_imported_by_the_package():
    import subprocess
    import sys

    code = "import sys, numpyro_hdphmm; sys.exit('pandas' in sys.modules and 'arviz' not in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize(
    "cls, kwargs, event",
    [
        (em.GaussianNIW, {}, (1,)),
        (em.GaussianNIW, {"dim": 3}, (3,)),
        (em.DiagonalGaussian, {"dim": 2}, (2,)),
        (em.AutoRegressive, {"dim": 2, "order": 2}, (2,)),
        (em.Poisson, {}, ()),
        (em.Categorical, {"num_categories": 4}, ()),
        (em.VonMisesFisher, {"dim": 3, "concentration": 5.0}, (3,)),
        (em.DPMixture, {"dim": 2}, (2,)),
    ],
)
def test_weakly_informative_without_data(cls, kwargs, event):
    """``weakly_informative(None)``: the documented prior for standardized data."""
    fam = cls.weakly_informative(None, **kwargs)
    assert fam.event_shape == event and fam.batch_shape == ()
    params = fam.sample_parameters(jax.random.key(0), (3,))
    assert all(np.all(np.isfinite(np.asarray(v))) for v in params.values())
    if cls is em.GaussianNIW:
        np.testing.assert_array_equal(fam.loc, 0.0)
        np.testing.assert_array_equal(fam.scale, np.eye(event[0]))


def readme_model(y):
    """The model of the README, verbatim."""
    gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.01))
    kappa = numpyro.sample("kappa", dist.Gamma(10.0, 0.1))
    hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa,
                          emission=nh.emissions.GaussianNIW.weakly_informative(y), max_states=20)
    nh.sample("y", hmm, obs=y)


def test_readme_model_prior_predictive_without_data():
    """``Predictive(model)(key, None)`` on the README model draws standardized sequences of the
    documented default length (issue 19)."""
    draws = Predictive(readme_model, num_samples=3)(jax.random.key(0), None)
    assert draws["y"].shape == (3, nh.models.DEFAULT_NUM_STEPS, 1)
    assert draws["y_states"].shape == (3, nh.models.DEFAULT_NUM_STEPS)
    assert np.all(np.isfinite(np.asarray(draws["y"])))


def test_num_steps_without_obs_comes_from_lengths():
    def model(lengths):
        hmm = nh.StickyHDPHMM(1.0, 1.0, 1.0, em.Poisson(), max_states=K)
        return nh.sample("y", hmm, lengths=lengths)

    tr = handlers.trace(handlers.seed(model, 0)).get_trace([7, 3])
    assert tr["y"]["value"].shape == (2, 7) and tr["y_states"]["value"].shape == (2, 7)
