"""What a kernel reports beside the draws: ``lp`` (the log joint of what the model uses),
``data_loglik`` and the ``nonfinite`` flag with its warning.

``lp`` integrates the transition rows out and leaves the emission parameters (and, under the weak
limit, the weights) of unused slots out: moving those must not change it, moving a used slot's
parameters must.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import log_likelihood

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import WeakLimitGibbs


def model(y):
    kappa = numpyro.sample("kappa", dist.Gamma(5.0, 1.0))
    emission = nh.emissions.GaussianNIW(jnp.zeros(1), 0.1, 3.0, jnp.eye(1))
    nh.sample("y", nh.StickyHDPHMM(2.0, 2.0, kappa, emission, max_states=6), obs=y)


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    y = np.concatenate([rng.normal(-3, 0.5, 25), rng.normal(3, 0.5, 25)])[:, None].astype(np.float32)
    kernel = WeakLimitGibbs(model)
    state = kernel.init(jax.random.key(0), 0, None, (y,), {})
    for _ in range(5):
        state = kernel.sample(state, (y,), {})
    return kernel, state, y


def _with(state, name, value):
    return state._replace(z={**state.z, name: value})


def test_lp_ignores_unused_slots(fitted):
    kernel, state, y = fitted
    states = np.asarray(state.z["y_states"])
    used = np.zeros(6, bool)
    used[states] = True
    assert used.any() and not used.all()
    free, taken = int(np.flatnonzero(~used)[0]), int(np.flatnonzero(used)[0])
    base = float(kernel.refresh(state, (y,), {}).lp)
    mu = state.z["y_mu"]
    moved_free = kernel.refresh(_with(state, "y_mu", mu.at[free].add(50.0)), (y,), {})
    assert float(moved_free.lp) == pytest.approx(base, abs=1e-3)
    moved_taken = kernel.refresh(_with(state, "y_mu", mu.at[taken].add(5.0)), (y,), {})
    assert abs(float(moved_taken.lp) - base) > 10.0
    # the weights of unused slots, renormalized among themselves, do not matter either
    beta = np.asarray(state.z["y_beta"], np.float64)
    rest = np.flatnonzero(~np.append(used, False))  # unused slots (the last entry is the remainder)
    shuffled = beta.copy()
    shuffled[rest[:2]] = beta[rest[:2]][::-1]
    moved_beta = kernel.refresh(_with(state, "y_beta", jnp.asarray(shuffled, jnp.float32)), (y,), {})
    assert float(moved_beta.lp) == pytest.approx(base, abs=1e-3)


def test_data_loglik_is_the_observed_site(fitted):
    kernel, state, y = fitted
    z = {k: jnp.asarray(v)[None] for k, v in state.z.items()}  # one draw
    expected = float(jnp.sum(log_likelihood(model, z, y)["y"]))
    assert float(state.data_loglik) == pytest.approx(expected, rel=1e-5, abs=1e-3)
    assert not bool(state.nonfinite)


def test_nonfinite_values_warn_naming_the_site(fitted):
    kernel, state, y = fitted
    broken = _with(state, "kappa", jnp.asarray(jnp.nan, jnp.float32))  # a sweep from a NaN concentration
    with pytest.warns(RuntimeWarning, match=r"NaN or infinite values at [^(]*\b(kappa|y_trans|lp)\b"):
        out = jax.jit(lambda s: kernel.sample(s, (y,), {}))(broken)  # as MCMC runs it (no eager checks)
        jax.block_until_ready(out)
    assert bool(out.nonfinite)
