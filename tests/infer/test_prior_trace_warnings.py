"""The starting values (discovery's and init's prior draw) do not warn about the capacity; only the
fit does, with a suggested capacity (issue 19)."""

import warnings

import jax
import numpy as np
import pytest

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import BeamSampler
from numpyro_hdphmm.infer.plumbing.discovery import prior_trace


def crowded_model(y):
    """``gamma = 500`` puts almost all of beta's mass beyond ``K = 2``: a prior draw of the states
    goes beyond the capacity at most steps."""
    hmm = nh.StickyHDPHMM(500.0, 1.0, 0.0, nh.emissions.Categorical(2, 1.0), max_states=2)
    nh.sample("y", hmm, obs=y)


Y = np.zeros(40, np.int32)


def test_prior_trace_draws_represented_states_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = prior_trace(crowded_model, jax.random.key(0), (Y,))
        BeamSampler(crowded_model).update_plan(Y)
        jax.effects_barrier()
    states = np.asarray(trace["y_states"]["value"])
    assert states.shape == (40,) and states.min() >= 0 and states.max() < 2


def test_the_models_own_prior_draw_still_warns():
    """Negative control: drawing the model's states site directly warns (what discovery avoids)."""
    from numpyro import handlers

    with pytest.warns(RuntimeWarning, match="beyond the capacity"):
        handlers.seed(crowded_model, 0)(Y)
        jax.effects_barrier()
