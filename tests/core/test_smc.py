"""The fully adapted particle filter (``_core.smc.adapted_filter``) against the exact forward
algorithm: its likelihood estimate is unbiased (checked by many independent filters, with a
negative control that drops the resampling), and with many particles its per-step terms are the
forward filter's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_hdphmm._core import smc
from numpyro_hdphmm._core.hmm import hmm_filter

# sticky two-state HMM with strong, repeated evidence: without resampling the particles that
# start in the wrong state keep weighing the estimate down (a 14% bias at 2 particles)
STICKY = dict(
    log_init=np.log([0.5, 0.5]),
    log_trans=np.log([[0.97, 0.02], [0.02, 0.97]]),  # sub-stochastic rows: mass leaves
    log_lik=np.log([[1, 1], [1, 0.02], [0.02, 1], [1, 0.02], [1, 0.02], [1, 0.02]]),
)
MASK = np.array([1, 1, 0, 1, 1, 1], bool)  # step 2 missing
LENGTH = 5  # step 5 is padding


def _random_case():
    rng = np.random.default_rng(3)
    return dict(
        log_init=np.log(rng.dirichlet(np.ones(3))),
        log_trans=np.log(rng.dirichlet(0.5 * np.ones(4), 3)[:, :3]),
        log_lik=np.log(rng.uniform(0.01, 1.0, (6, 3))),
    )


def _exact(case):
    return float(hmm_filter(case["log_init"], case["log_trans"], case["log_lik"], mask=MASK,
                            length=LENGTH).marginal_loglik)


def _ratio_z(case, num_particles=2, num_filters=40000):
    """z-score of ``mean exp(estimate - exact) - 1`` over independent filters."""
    def one(key):
        u = 1.0 - jax.random.uniform(key, (MASK.shape[0], num_particles + 1))
        return smc.adapted_filter(u, case["log_init"], case["log_trans"], case["log_lik"], MASK, LENGTH)

    log_l = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(1), num_filters))
    ratio = np.exp(np.asarray(log_l, np.float64).sum(-1) - _exact(case))
    return (ratio.mean() - 1.0) / (ratio.std() / np.sqrt(num_filters))


@pytest.mark.parametrize("case", [STICKY, _random_case()], ids=["sticky", "random"])
def test_adapted_filter_is_unbiased(case):
    assert abs(_ratio_z(case)) < 4


def test_adapted_filter_without_resampling_is_biased(monkeypatch):
    """The negative control: with the resampling dropped (each particle keeps its own lineage) the
    product of per-step means is no longer unbiased, and the test above sees it."""
    monkeypatch.setattr(smc, "systematic_ancestors", lambda u, log_w, num: jnp.arange(num))
    assert _ratio_z(STICKY) < -10


def test_adapted_filter_with_many_particles_is_the_forward_filter():
    case = _random_case()
    filt = hmm_filter(case["log_init"], case["log_trans"], case["log_lik"], mask=MASK, length=LENGTH)
    u = 1.0 - jax.random.uniform(jax.random.PRNGKey(0), (MASK.shape[0], 20001))
    log_l = smc.adapted_filter(u, case["log_init"], case["log_trans"], case["log_lik"], MASK, LENGTH)
    np.testing.assert_allclose(log_l[:LENGTH], filt.log_normalizers[:LENGTH], atol=0.03)
    assert log_l[0] == pytest.approx(float(filt.log_normalizers[0]), abs=1e-5)  # step 0 is exact
    assert float(log_l[LENGTH]) == 0.0  # padding
