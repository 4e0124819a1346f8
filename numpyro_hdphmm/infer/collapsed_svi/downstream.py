r"""What a fitted collapsed-SVI state gives downstream: the plug-in HMM, draws from ``q``, ArviZ.

Functions of the fitted variational parameters (``params``, :meth:`CollapsedSVI.get_params
<numpyro_hdphmm.infer.CollapsedSVI.get_params>`), the emission family and the static
:class:`~numpyro_hdphmm.infer.collapsed_svi.core.SCVIConfig`, behind the methods of
:class:`~numpyro_hdphmm.infer.CollapsedSVI` and :class:`~numpyro_hdphmm.infer.CollapsedGuide`:

* the plug-in HMM (:func:`~numpyro_hdphmm.infer.collapsed_svi.core.plug_in_hmm`: posterior-mean
  transitions, posterior-predictive emissions) on any sequence: :func:`plug_in_state_marginals`,
  :func:`plug_in_viterbi`, :func:`plug_in_predictive_log_likelihood` (a
  :class:`~numpyro_hdphmm.results.diagnostics.PredictiveLogLikelihood` with ``S = 1``);
* draws of every latent site of the model from the variational posterior (:func:`draw_globals`,
  :func:`draw_states`, and :func:`sample_posterior_sites`, the sites of the guide);
* the ArviZ export (:func:`variational_inference_data`): the draws as ``posterior`` and the
  variational parameters and ELBO trace as a group ``variational``.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro import handlers

from numpyro_hdphmm._core.hmm import hmm_filter, hmm_posterior_sample, hmm_smoother, hmm_viterbi
from numpyro_hdphmm._core.random import dirichlet, gamma as draw_gamma
from numpyro_hdphmm.infer.collapsed_svi.core import SCVIConfig, draw_sticks, plug_in_hmm
from numpyro_hdphmm.infer.contract import flatten_time
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, model_view
from numpyro_hdphmm.results.diagnostics.heldout import PredictiveLogLikelihood
from numpyro_hdphmm.results.posterior import as_sequences

__all__ = [
    "plug_in_inputs",
    "plug_in_state_marginals",
    "plug_in_viterbi",
    "plug_in_predictive_log_likelihood",
    "draw_globals",
    "draw_states",
    "sample_posterior_sites",
    "variational_inference_data",
]


# ================================================================================ the plug-in HMM
def plug_in_inputs(emission, config: SCVIConfig, params, y, lengths, arg: str):
    """``(log_init (K,), log_trans (K, K), ll (N, T, K), valid (N, T), lengths (N,), several)``: the
    plug-in HMM (:func:`~numpyro_hdphmm.infer.collapsed_svi.core.plug_in_hmm`) and its emission
    terms on the sequence(s) ``y`` (``(T, ...)`` or ``(N, T, ...)`` with ``lengths``; errors name
    ``arg``); ``several``: ``y`` held several sequences."""
    y, lengths, several = as_sequences(emission, y, lengths, arg)
    x, valid = jax.vmap(emission.prepare)(y)
    valid = valid & (jnp.arange(y.shape[1]) < lengths[:, None])
    log_init, log_trans, stats = plug_in_hmm(params, config)
    ll = emission.predictive_log_likelihoods(flatten_time(x), stats).reshape(valid.shape + (-1,))
    return log_init, log_trans, ll, valid, lengths, several


def plug_in_state_marginals(emission, config: SCVIConfig, params, y, lengths=None):
    """``q(z_t = k)`` under the plug-in HMM (forward-backward, Rabiner eqs. 24-27): ``y (T, ...)``
    -> ``(T, K)``, ``y (N, T, ...)`` -> ``(N, T, K)`` (padded steps 0)."""
    li, la, ll, valid, lengths, several = plug_in_inputs(emission, config, params, y, lengths, "y")
    post = hmm_smoother(li, la, ll, mask=valid, length=lengths)
    out = jnp.exp(post.log_smoothed) * (jnp.arange(valid.shape[1]) < lengths[:, None])[..., None]
    return out if several else out[0]


def plug_in_viterbi(emission, config: SCVIConfig, params, y, lengths=None):
    """The most probable state path under the plug-in HMM (Rabiner eqs. 32-35): ``(T,)`` or
    ``(N, T)``, padded steps copy the last state."""
    li, la, ll, valid, lengths, several = plug_in_inputs(emission, config, params, y, lengths, "y")
    paths = hmm_viterbi(li, la, ll, mask=valid, length=lengths)
    return paths if several else paths[0]


def plug_in_predictive_log_likelihood(emission, config: SCVIConfig, params, y_heldout,
                                      lengths=None) -> PredictiveLogLikelihood:
    """Held-out log-likelihood under the plug-in HMM by the forward algorithm (Rabiner eq. 103):
    :class:`~numpyro_hdphmm.results.diagnostics.PredictiveLogLikelihood` of one parameter value
    (``S = 1``: ``per_draw (1,)``, ``per_sequence (1, N)``), JAX arrays (traceable by ``jax.jit``);
    ``per_step`` is the paper's per-token metric (Sec. 3)."""
    li, la, ll, valid, lengths, _ = plug_in_inputs(emission, config, params, y_heldout, lengths, "y_heldout")
    per_seq = hmm_filter(li, la, ll, mask=valid, length=lengths).marginal_loglik
    total = jnp.sum(per_seq)
    n = jnp.sum(valid)
    per_step = total / jnp.maximum(n, 1)
    return PredictiveLogLikelihood(total, total[None], per_seq[None], n, per_step, jnp.exp(-per_step))


# ================================================================================ draws from q
def draw_globals(rng_key, params, spec: ModelSpec, config: SCVIConfig, emission) -> dict:
    """Explicit values of the model's global sites drawn from the variational posterior: ``alpha``
    and ``gamma`` sites from ``q``; ``beta`` from the sticks ``q(pi_tilde)``; the rows from
    ``Dir(alpha beta_k + kappa [j = k] + E[C_jk])`` over the ``K`` represented states (the finite
    HMM: ``Dir(transition_prior + E[C_j])``), zero on the other slots; the emission parameters from
    ``p(theta | E[t_k])``.  Shapes are the model's (its capacity ``spec.capacity``)."""
    cap = spec.capacity
    K = config.num_states
    k_a, k_g, k_b, k_t, k_e = random.split(rng_key, 5)
    dtype = params["transition_counts"].dtype
    out = {}
    alpha = config.alpha
    if spec.hyper.alpha is not None:
        alpha = draw_gamma(k_a, params["alpha_shape"], params["alpha_rate"])
        out[spec.hyper.alpha] = alpha
    if spec.hyper.gamma is not None:
        out[spec.hyper.gamma] = draw_gamma(k_g, params["gamma_shape"], params["gamma_rate"])
    beta = draw_sticks(k_b, params["sticks_u"], params["sticks_v"], cap).astype(dtype)
    out[spec.sites.beta] = beta
    pseudo = alpha * beta[:K] if config.hdp else jnp.full((K,), config.transition_prior, dtype)
    sticky = jnp.concatenate([jnp.eye(K, dtype=dtype), jnp.zeros((1, K), dtype)], 0)
    conc = pseudo[None, :] + config.kappa * sticky + params["transition_counts"]
    rows = dirichlet(k_t, jnp.maximum(conc, jnp.finfo(dtype).tiny))  # (K+1, K)
    trans = jnp.zeros((cap + 1, cap + 1), dtype)
    trans = trans.at[:K, :K].set(rows[:K]).at[cap, :K].set(rows[K])
    trans = trans.at[K:cap, :K].set(jnp.broadcast_to(rows[K], (cap - K, K)))  # unused slots: never entered
    out[spec.sites.trans] = trans
    stats = jax.tree_util.tree_map(lambda a: jnp.zeros((cap,) + a.shape[1:], a.dtype).at[:K].set(a),
                                   params["emission_stats"])
    theta = emission.sample_posterior(k_e, stats)
    out.update({site: theta[p] for p, site in spec.sites.params})
    return out


def draw_states(rng_key, model, spec: ModelSpec, emission, values, trace, args, kwargs):
    """The states by forward-filtering backward-sampling on the model's observed data given the
    drawn parameters ``values`` (:func:`draw_globals`); ``trace`` a trace of the model at them."""
    with handlers.block():
        view = model_view(model, spec, args, kwargs, {**values, spec.sites.states: jnp.zeros(
            trace[spec.sites.states]["value"].shape, jnp.int32)})
    cap = spec.capacity
    trans = values[spec.sites.trans]
    theta = {p: values[site] for p, site in spec.sites.params}
    data = view.data
    ll = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(data.x, theta)
    tiny = jnp.finfo(trans.dtype).tiny
    log_init = jnp.log(jnp.maximum(trans[cap, :cap], tiny))
    log_a = jnp.log(jnp.maximum(trans[:cap, :cap], tiny))
    states, _ = hmm_posterior_sample(rng_key, log_init, log_a, ll, mask=data.valid, length=data.lengths)
    return states if spec.batched else states[0]


def sample_posterior_sites(model, spec: ModelSpec, config: SCVIConfig, emission, params, args, kwargs) -> None:
    """The guide's sites: every latent site ``Delta`` at a draw from the variational posterior
    given ``params`` (:func:`draw_globals`), and the states (when the model's data are observed)
    by :func:`draw_states` given the drawn parameters; NumPyro's ``prng_key`` seeds both."""
    k_glob, k_states = random.split(numpyro.prng_key())
    values = draw_globals(k_glob, params, spec, config, emission)
    with handlers.block():
        tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=values)).get_trace(*args, **kwargs)
    for site, v in values.items():
        numpyro.sample(site, dist.Delta(v, event_dim=jnp.ndim(v)))
    if tr[spec.sites.obs]["is_observed"]:
        states = draw_states(k_states, model, spec, emission, values, tr, args, kwargs)
        numpyro.sample(spec.sites.states, dist.Delta(states, event_dim=states.ndim))


# ================================================================================ ArviZ
def variational_inference_data(draws: dict, params: dict, losses):
    """ArviZ data of a fit: ``posterior`` (one chain of the ``draws`` from ``q``, a dict of
    ``(num_samples, ...)`` arrays) and a group ``variational`` with the variational ``params``
    (the emission statistics one variable per leaf) and ``elbo`` (``-losses``, dimension
    ``step``).  ArviZ 0.x: an ``InferenceData``; ArviZ 1.x (``arviz_base``) or no ArviZ: an
    ``xarray.DataTree``."""
    import xarray as xr

    posterior = xr.Dataset({k: (["chain", "draw"] + [f"{k}_dim_{i}" for i in range(np.ndim(v) - 1)],
                                np.asarray(v)[None]) for k, v in draws.items()})
    variational = {}
    for k, v in params.items():
        if k == "emission_stats":
            leaves = jax.tree_util.tree_flatten_with_path(v)[0]
            for path, leaf in leaves:
                name = "emission_stats_" + "_".join(str(getattr(p, "key", getattr(p, "name", getattr(p, "idx", p))))
                                                    for p in path)
                variational[name] = ([f"{name}_dim_{i}" for i in range(np.ndim(leaf))], np.asarray(leaf))
        else:
            variational[k] = ([f"{k}_dim_{i}" for i in range(np.ndim(v))], np.asarray(v))
    variational["elbo"] = (["step"], -np.asarray(losses))
    variational = xr.Dataset(variational)
    try:
        import arviz as az

        if int(str(az.__version__).split(".")[0]) < 1:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*variational.*")
                return az.InferenceData(posterior=posterior, variational=variational)
    except ImportError:
        pass
    return xr.DataTree.from_dict({"posterior": posterior, "variational": variational})
