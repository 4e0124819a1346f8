r"""State posteriors from posterior draws: Viterbi paths, smoothed marginals, pointwise likelihood.

Every function here takes the model (or its emission family) and posterior draws ``samples``
(``mcmc.get_samples()``, flat ``(S, ...)`` or grouped by chain ``(C, D, ...)``) and, for each
draw ``s``, forms the finite HMM of the draw over its ``K`` represented states,

.. math::

    \log \pi^{(s)}_0 = \log \mathrm{trans}^{(s)}[K, :K], \qquad
    \log A^{(s)} = \log \mathrm{trans}^{(s)}[:K, :K], \qquad
    \log e^{(s)}_t(k) = \log f(y_t \mid \theta^{(s)}_k),

(the start row is the LAST row of ``{name}_trans``; ``e`` is the emission family's
``log_likelihoods`` at the draw's parameters ``{name}_{p}``), and runs the log-space message
passing of :mod:`numpyro_hdphmm._core.hmm` on it, vectorized over draws (``lax.map``) and
sequences (``vmap``), jitted:

==================================  =========================================================
function                            per draw ``s`` (``B`` = the sequence axes, ``(N,)`` or ``()``)
==================================  =========================================================
:func:`viterbi`                     ``argmax_z p(z | y, theta^(s))`` ``(S, *B, T)`` and
                                    ``log p(z*, y | theta^(s))`` (Rabiner 1989 eqs. 32-35)
:func:`smooth`                      ``p(z_t = k | y, theta^(s))`` ``(S, *B, T, K)`` and
                                    ``log p(y | theta^(s))`` (forward-backward, eqs. 24-27)
:func:`posterior_state_marginals`   ``(1/S) sum_s p(z_t = k | y, theta^(s))`` ``(*B, T, K)``
:func:`marginal_log_likelihood`     ``log p(y_t | y_{<t}, theta^(s))`` at every observed step
                                    (the forward filter's normalizers, eq. 103)
==================================  =========================================================

**HDP-HSMM.**  For a model of class ``"hsmm"`` (:class:`~numpyro_hdphmm.HDPHSMM`, read from the
observed site's model object) each draw's model is instead its states site's segment process
(:class:`~numpyro_hdphmm.SemiMarkovChain` traced at the draw: start row, rows without the
self-transition, the truncated duration laws at ``{name}_duration_*``, the model's censoring;
:class:`SemiMarkovDraws`), and the explicit-duration messages of :mod:`numpyro_hdphmm._core.hsmm`
replace the HMM's: :func:`~numpyro_hdphmm._core.hsmm.hsmm_viterbi` (the most likely
segmentation), :func:`~numpyro_hdphmm._core.hsmm.hsmm_smoother` and the one-step-ahead
normalizers of :func:`~numpyro_hdphmm._core.hsmm.hsmm_forward` (states and durations summed out).
``renormalize`` then renormalizes the start row only (the segment rows are always renormalized
over the represented states); ``method="particle"``, :func:`numpyro_hdphmm.forecast` and the
calls given an EmissionFamily instead of the model raise ``NotImplementedError``.

**HDP-SLDS.**  For a model of class ``"slds"`` (:class:`~numpyro_hdphmm.HDPSLDS`) the modes of
draw ``s`` given its latent path ``x^(s)`` (the site ``{name}_latent``, ``(S, T, D)`` or ``(S, N,
T, D)``) and its parameters are exactly an HMM whose emission family is the dynamics family (the
:class:`~numpyro_hdphmm.emissions.AutoRegressive` of the site ``{name}_latent``, at the
draw's ``{name}_A``, ``{name}_cov``) and whose data is ``x^(s)``: the functions above run on it,
each draw on its own latent path (mapped with the draws), so that :func:`viterbi` is ``argmax_z
p(z | x^(s), theta^(s))`` (the mode segmentation given the latent states, Fox et al. 2011) with
``log p(z*, x^(s) | theta^(s))``, :func:`smooth` is ``p(z_t = k | x^(s), theta^(s))`` with ``log
p(x^(s) | theta^(s))``, and :func:`posterior_state_marginals` averages them, a Rao-Blackwellized
estimate of ``p(z_t = k | y)`` (``x^(s)``, ``theta^(s)`` being joint posterior draws).  ``y`` and
``lengths`` must be None (the latent paths exist for the training data only; the lengths are the
model's).  :func:`marginal_log_likelihood` raises ``NotImplementedError``: ``log p(y | theta)``
of an SLDS sums over every mode path with the latent path integrated out, which has no closed
form (its cost grows exponentially in ``T``); the pointwise log-likelihood given the latent path
is ``nh.to_inference_data(mcmc, log_likelihood="conditional")``'s (and ``az.from_numpyro``'s).

**Unrepresented states.**  Column ``K`` of ``{name}_trans`` (the mass of the states that are not
represented; zero under the weak limit) is dropped, so the rows are sub-stochastic and the
HMM is that of the paths which never leave the represented states.  Smoothing and Viterbi are
then the posterior of the states given ``y``, ``theta`` and "no new state", the conditional
that the samplers' ``{name}_states`` site targets (:class:`~numpyro_hdphmm.MarkovChain`'s
``log_prob``), and the likelihood is ``log p(y, no new state | theta) <= log p(y | theta)``
(equal under the weak limit).  ``renormalize=True`` renormalizes the rows over the represented
states instead (the HMM conditioned step by step on staying represented).

**New sequences.**  ``y`` (``(T, *event)`` or ``(N, T, *event)`` with ``lengths``, NaN =
missing: the emission is dropped, the transition kept) may be any sequences, not only the
training data (the default when ``y`` is None; an HDP-SLDS has only its training data, above).
The parameters are the posterior draws given the TRAINING data: the results are ``p(z* | y*,
theta)`` for ``theta ~ p(theta | y_train)``, not updated by the new sequences (reweighting the
draws by ``exp(log_likelihood)`` would do that).

**Label switching.**  Per-draw results use each draw's own labels.  Averages over draws
(:func:`posterior_state_marginals`) are meaningful only when the labels agree across draws:
relabel the draws first (:func:`numpyro_hdphmm.relabel_samples`); the label-invariant summary of
per-draw paths is :func:`numpyro_hdphmm.point_segmentation`.

Padded steps (``t >= lengths[n]``) carry no state: Viterbi states ``-1`` (the "no label"
convention of :mod:`numpyro_hdphmm.results.diagnostics`), probabilities 0, log-likelihood 0.

The module also holds the pieces that read an HDP-HMM out of posterior draws, shared with
:func:`numpyro_hdphmm.forecast` and :func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`:
:func:`flatten_draws`, :func:`trace_emission`, :func:`hmm_draws`, :func:`log_hmm_parameters` and
:func:`as_sequences`.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp
from numpyro import handlers

from numpyro_hdphmm._core.hmm import hmm_filter, hmm_smoother, hmm_viterbi
from numpyro_hdphmm._core.hsmm import hsmm_forward, hsmm_smoother, hsmm_viterbi
from numpyro_hdphmm._core.roles import MODEL_KEY
from numpyro_hdphmm._core.random import uniform_open
from numpyro_hdphmm._core.smc import adapted_filter
from numpyro_hdphmm._core.validation import check_static_int, is_concrete
from numpyro_hdphmm.distributions import EmissionLikelihood
from numpyro_hdphmm.emissions.base import EmissionFamily

__all__ = [
    "ViterbiPaths",
    "SmoothedStates",
    "MarginalLogLikelihood",
    "viterbi",
    "smooth",
    "posterior_state_marginals",
    "marginal_log_likelihood",
    "HMMDraws",
    "SemiMarkovDraws",
    "flatten_draws",
    "trace_emission",
    "hmm_draws",
    "log_hmm_parameters",
    "as_sequences",
]


# ============================================================================ shared pieces
class HMMDraws(NamedTuple):
    """Posterior draws of one HDP-HMM, draw axes flattened to one axis ``S``.

    trans : ``(S, K+1, K+1)`` the draws' ``{name}_trans`` (row ``K`` the start row, column ``K``
        the mass of the states not represented)
    params : ``{p: (S, K, ...)}`` the emission parameters ``{name}_{p}``
    emission : the :class:`~numpyro_hdphmm.emissions.EmissionFamily`; its leaves carry a leading
        ``S`` axis when ``emission_batched`` (hyperparameters or user sites that vary by draw)
    emission_batched : bool
    draw_shape : the draw axes of the samples, ``(S,)`` or e.g. ``(chains, draws)``
    samples : every site of the samples whose leading axes are the draw axes, flattened
    observations : the model's observed ``y`` (``None`` unless traced from a model; for an HDP-SLDS
        the observations of its observation model, not the data of the modes' HMM: see ``latent``)
    lengths : the model's ``lengths`` (``None`` unless traced from a model that has them)
    kind : the model class's ``kind`` (``"hmm"``, ``"hsmm"`` for :class:`~numpyro_hdphmm.HDPHSMM`,
        ``"slds"`` for :class:`~numpyro_hdphmm.HDPSLDS`; ``"hmm"`` when read from an EmissionFamily)
    segments : :class:`SemiMarkovDraws` of an HDP-HSMM, else ``None``
    latent : for an HDP-SLDS the draws' latent paths ``{name}_latent`` ``(S, T, D)`` or ``(S, N, T,
        D)``, each draw's data of its modes' HMM (``emission`` is then the dynamics family), else
        ``None``
    """

    trans: jax.Array
    params: Dict[str, jax.Array]
    emission: EmissionFamily
    emission_batched: bool
    draw_shape: Tuple[int, ...]
    samples: Dict[str, jax.Array]
    observations: Optional[jax.Array]
    lengths: Optional[jax.Array]
    kind: str = "hmm"
    segments: Optional["SemiMarkovDraws"] = None
    latent: Optional[jax.Array] = None


class SemiMarkovDraws(NamedTuple):
    """The segment process of each draw of an HDP-HSMM (its states site's
    :class:`~numpyro_hdphmm.SemiMarkovChain` at the draw, :meth:`~numpyro_hdphmm.SemiMarkovChain.tables`),
    in the conventions of :mod:`numpyro_hdphmm._core.hsmm`.

    log_init : ``(S, K)`` the start row
    log_trans : ``(S, K, K)`` the rows with the self-transition removed (``-inf`` diagonal)
    log_dur, log_surv : ``(S, K, D)`` the truncated duration pmf and survival of ``d = 1..D`` (the
        untruncated law's on ``d = 1..T`` when ``max_duration=None``)
    first : ``None``, or the left-censored first segment's ``(log_dur, log_surv)`` ``(S, K, D)`` each
    right_censored : bool, the last segment's term is its survival
    untruncated : ``None``, or for ``max_duration=None`` the duration family and its parameters at
        every draw ``(family, params)`` (leaves with a leading axis ``S``), from which laws beyond
        ``d = T`` are evaluated (forecasts)
    """

    log_init: jax.Array
    log_trans: jax.Array
    log_dur: jax.Array
    log_surv: jax.Array
    first: Optional[Tuple[jax.Array, jax.Array]]
    right_censored: bool
    untruncated: Optional[Tuple] = None


def flatten_draws(samples, name: str = "y", batch_ndims: Optional[int] = None):
    """``(flat, draw_shape)``: the sites of ``samples`` with their draw axes flattened.

    The draw axes are the leading axes of ``{name}_trans (*draw_shape, K+1, K+1)``: all of them
    when ``batch_ndims`` is None, else exactly ``batch_ndims``.  Sites whose leading axes differ
    (a user's deterministic site of another shape) are left out of ``flat``.
    """
    if not isinstance(samples, dict):
        raise ValueError(f"`samples` must be a dict of arrays (mcmc.get_samples()), got {type(samples).__name__}.")
    key = f"{name}_trans"
    if key not in samples:
        raise ValueError(
            f"`samples` lacks '{key}' (a site of numpyro_hdphmm.sample({name!r}, ...)); found {sorted(samples)}. "
            "Pass `name=` if the HDP-HMM has another name."
        )
    trans = jnp.asarray(samples[key])
    nd = trans.ndim - 2 if batch_ndims is None else batch_ndims
    if nd < 1 or trans.ndim != nd + 2 or trans.shape[-1] != trans.shape[-2] or trans.shape[-1] < 2:
        expect = "(*S, K+1, K+1)" if batch_ndims is None else str(("S",) * batch_ndims + ("K+1", "K+1"))
        raise ValueError(f"`samples[{key!r}]` must have shape {expect}, got {trans.shape}.")
    lead = tuple(trans.shape[:nd])
    num = int(np.prod(lead))
    flat = {}
    for k, v in samples.items():
        v = jnp.asarray(v)
        if v.shape[:nd] == lead:
            flat[k] = v.reshape((num,) + v.shape[nd:])
    return flat, lead


def trace_emission(model: Callable, flat, name: str = "y", model_args: tuple = (), model_kwargs: Optional[dict] = None):
    """``(emission, emission_batched, observations, lengths)`` of the HDP-HMM ``name`` in ``model``.

    The model is traced (``handlers.substitute`` + ``seed``) at every draw of ``flat`` (draw axis
    first) to read the emission family, whose hyperparameters may depend on sampled sites, and
    at the first draw for the observed ``y`` and ``lengths`` (``observations`` is ``None`` when
    the site is not observed with these arguments); one jitted call.  When the family's leaves
    are the same at every draw it is returned once (``emission_batched=False``), which shares
    compiled code between calls.  :func:`trace_model` also reads the model class and, for an
    HDP-HSMM, the segment process of each draw.

    For an HDP-SLDS (model class ``"slds"``) the family is the dynamics family, the ``emission`` of
    the latent-path site ``{name}_latent`` (whose data the modes see), and ``lengths`` are that
    site's; ``observations`` are still the observed ``y`` (of the observation model).
    """
    return trace_model(model, flat, name, model_args, model_kwargs)[:4]


def trace_model(model: Callable, flat, name: str = "y", model_args: tuple = (), model_kwargs: Optional[dict] = None):
    """``(emission, emission_batched, observations, lengths, kind, segments)``: :func:`trace_emission`
    and the model class's ``kind`` (the observed site's ``infer["hdphmm_model"].kind``) with, for
    ``kind == "hsmm"``, the :class:`SemiMarkovDraws` read at every draw from the states site's
    :class:`~numpyro_hdphmm.SemiMarkovChain` (its ``tables()``: the duration laws at the draw's
    ``{name}_duration_*`` values), else ``None``."""
    model_kwargs = dict(model_kwargs or {})

    def trace_at(draw):
        tr = handlers.trace(handlers.seed(handlers.substitute(model, data=draw), rng_seed=0)).get_trace(
            *model_args, **model_kwargs
        )
        site = tr.get(name)
        slds = site is not None and getattr((site.get("infer") or {}).get(MODEL_KEY), "kind", "hmm") == "slds"
        # an HDP-SLDS's observed site carries its observation model; its dynamics are at '{name}_latent'
        if site is None or site["type"] != "sample" or not (slds or isinstance(site["fn"], EmissionLikelihood)):
            raise ValueError(
                f"`model`: the model has no HDP-HMM observation site {name!r} declared with "
                f"numpyro_hdphmm.sample({name!r}, ...); pass `name=` or an EmissionFamily."
            )
        return tr

    static = []

    def latent_of(tr):
        latent = tr.get(f"{name}_latent")
        if latent is None or latent["type"] != "sample" or not isinstance(latent.get("fn"), EmissionLikelihood):
            raise ValueError(f"`model`: the HDP-SLDS {name!r} has no latent-path site '{name}_latent' of its dynamics.")
        return latent

    def chain_of(tr):
        chain = tr.get(f"{name}_states", {}).get("fn")
        if chain is None or not hasattr(chain, "tables"):
            raise ValueError(
                f"`model`: the HDP-HSMM {name!r} has no states site '{name}_states' with a segment process."
            )
        return chain

    def traced(samples):
        tr0 = trace_at(jax.tree_util.tree_map(lambda v: v[0], samples))
        site = tr0[name]
        kind = getattr((site.get("infer") or {}).get(MODEL_KEY), "kind", "hmm")
        right_censored = bool(getattr(chain_of(tr0), "right_censored", True)) if kind == "hsmm" else None
        static.extend([site["is_observed"], kind, right_censored])  # static: recorded while tracing

        layer = latent_of(tr0) if kind == "slds" else site  # the site whose data the modes see

        def per_draw(d):
            tr = trace_at(d)
            tables = None
            if kind == "hsmm":
                chain = chain_of(tr)
                log_init, log_trans, (log_dur, log_surv), first = chain.tables()
                law = (chain.duration, chain.duration_params) if getattr(chain, "untruncated", False) else None
                tables = (log_init, log_trans, log_dur, log_surv, first, law)
            fn = latent_of(tr)["fn"] if kind == "slds" else tr[name]["fn"]
            return fn.emission, tables

        families, tables = jax.vmap(per_draw)(samples)
        return families, site["value"], layer["fn"].lengths, tables

    families, value, lengths, tables = jax.jit(traced)(flat)
    observed, kind, right_censored = static
    leaves = jax.tree_util.tree_leaves(families)
    batched = not all(is_concrete(v) and bool(jnp.all(v == v[:1])) for v in leaves)
    if not batched:
        families = jax.tree_util.tree_map(lambda v: v[0], families)
    segments = None if tables is None else SemiMarkovDraws(*tables[:5], right_censored, tables[5])
    return families, batched, (value if observed else None), lengths, kind, segments


def hmm_draws(samples, model_or_emission, name: str = "y", model_args: tuple = (),
              model_kwargs: Optional[dict] = None, batch_ndims: Optional[int] = None) -> HMMDraws:
    """Read the HDP-HMM ``name`` out of posterior draws: :class:`HMMDraws`.

    ``model_or_emission``: the model (traced with :func:`trace_emission`, with ``model_args`` and
    ``model_kwargs``) or its :class:`~numpyro_hdphmm.emissions.EmissionFamily`.  Validates that
    every emission parameter site ``{name}_{p}`` is present with shape ``(*draws, K, ...)``.
    """
    flat, lead = flatten_draws(samples, name, batch_ndims)
    trans = flat[f"{name}_trans"]
    num_states = trans.shape[-1] - 1
    observations = lengths = segments = None
    kind = "hmm"
    if isinstance(model_or_emission, EmissionFamily):
        emission, batched = model_or_emission, False
        durations = sorted(k for k in flat if k.startswith(f"{name}_duration_"))
        if durations:
            raise NotImplementedError(
                f"the samples hold duration sites {durations}: an HDP-HSMM's results need its duration laws, which "
                "only the model gives. Pass the model (not its EmissionFamily) to viterbi/smooth/"
                "posterior_state_marginals/marginal_log_likelihood; results from an EmissionFamily alone "
                "(predictive_log_likelihood) are HMM-only."
            )
    elif callable(model_or_emission):
        emission, batched, observations, lengths, kind, segments = trace_model(
            model_or_emission, flat, name, tuple(model_args), model_kwargs
        )
    else:
        raise ValueError(
            f"`model` must be a NumPyro model or an EmissionFamily, got {type(model_or_emission).__name__}."
        )
    missing = [f"{name}_{p}" for p in emission.param_names if f"{name}_{p}" not in flat]
    if missing:
        raise ValueError(f"`samples` lacks the emission parameter sites {missing} (found {sorted(samples)}).")
    params = {p: flat[f"{name}_{p}"] for p in emission.param_names}
    for p, v in params.items():
        if v.ndim < 2 or v.shape[1] != num_states:
            raise ValueError(
                f"`samples[{f'{name}_{p}'!r}]` must have shape {lead + (num_states,)} + parameter shape, "
                f"got {jnp.shape(samples[f'{name}_{p}'])}."
            )
    latent = None
    if kind == "slds":
        key = f"{name}_latent"
        latent = flat.get(key)
        if latent is None:
            raise ValueError(
                f"`samples` lacks '{key}' (found {sorted(samples)}): the modes of an HDP-SLDS are decoded given "
                "each draw's latent path."
            )
        event = tuple(emission.event_shape)
        event_ok = tuple(latent.shape[latent.ndim - len(event):]) == event
        if latent.ndim not in (len(event) + 2, len(event) + 3) or not event_ok:
            raise ValueError(
                f"`samples[{key!r}]` must have shape {lead} + (T, *event) or {lead} + (N, T, *event) with event "
                f"shape {event}, got {jnp.shape(samples[key])}."
            )
    return HMMDraws(trans, params, emission, batched, lead, flat, observations, lengths, kind, segments, latent)


def log_hmm_parameters(trans, renormalize: bool = False):
    r"""``trans (..., K+1, K+1) -> (log_init (..., K), log_trans (..., K, K))``.

    ``log_init = log trans[K, :K]`` (the start row), ``log_trans = log trans[:K, :K]``: column
    ``K`` dropped (sub-stochastic rows; see the module docstring); with ``renormalize`` each row
    is renormalized over the ``K`` represented states, ``x - logsumexp(x)``.
    """
    k = trans.shape[-1] - 1
    log_init = jnp.log(trans[..., k, :k])
    log_trans = jnp.log(trans[..., :k, :k])
    if renormalize:
        log_init = log_init - logsumexp(log_init, axis=-1, keepdims=True)
        log_trans = log_trans - logsumexp(log_trans, axis=-1, keepdims=True)
    return log_init, log_trans


def as_sequences(emission: EmissionFamily, y, lengths=None, arg: str = "y"):
    """``(y (N, T, *event), lengths (N,) int32, several)`` from one or several sequences.

    ``y`` is ``(T, *event)`` (one sequence, ``several=False``) or ``(N, T, *event)`` padded to a
    common ``T`` with ``lengths (N,)`` integers in ``[1, T]`` (default: all ``T``).  Concrete
    values are checked by the family (``ValueError`` naming ``arg``; NaN = missing is allowed).
    """
    y = jnp.asarray(y)
    event_ndim = len(emission.event_shape)
    if y.ndim == event_ndim + 1:
        if lengths is not None:
            raise ValueError(f"`lengths` is only meaningful for several sequences: `{arg}` of shape (N, T, *event).")
        y, several = y[None], False
    elif y.ndim == event_ndim + 2:
        several = True
    else:
        raise ValueError(
            f"`{arg}` must have shape (T, *event) or (N, T, *event) with event shape "
            f"{tuple(emission.event_shape)}, got {y.shape}."
        )
    if tuple(y.shape[2:]) != tuple(emission.event_shape):
        raise ValueError(f"`{arg}` must end with the event shape {tuple(emission.event_shape)}, got {y.shape}.")
    if is_concrete(y):
        emission.check_observations(y, arg)
    N, T = y.shape[:2]
    if lengths is None:
        lengths = jnp.full((N,), T, jnp.int32)
    else:
        if is_concrete(lengths):
            ln = np.asarray(lengths)
            if ln.shape != (N,) or not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > T):
                raise ValueError(f"`lengths` must be {N} integers in [1, T={T}], got {ln}.")
        elif jnp.shape(lengths) != (N,):
            raise ValueError(f"`lengths` must have shape ({N},), got {jnp.shape(lengths)}.")
        lengths = jnp.asarray(lengths, jnp.int32)
    return y, lengths, several


# ============================================================================ per-draw numerics
def _path_log_joint(log_init, log_trans, ll, valid, lengths, states):
    r"""``log p(z, y | theta) = log pi0(z_0) + sum_{1 <= t < L} log A(z_{t-1}, z_t) + sum_{t observed}
    log e_t(z_t)`` for ``states (N, T)``, ``ll (N, T, K)``, ``valid (N, T)``: shape ``(N,)``."""
    T = states.shape[-1]
    first = log_init[states[:, 0]]
    steps = log_trans[states[:, :-1], states[:, 1:]]
    steps = jnp.where(jnp.arange(1, T) < lengths[:, None], steps, 0.0)
    emit = jnp.take_along_axis(ll, states[..., None], axis=-1)[..., 0]
    return first + jnp.sum(steps, -1) + jnp.sum(jnp.where(valid, emit, 0.0), -1)


def _one_step_terms(log_normalizers, observed):
    r"""Per-step normalizers ``(N, T)`` -> pointwise ``log p(y_t | y_{obs < t})`` at observed steps.

    The normalizer of a missing step is the mass of the transition alone (0 with stochastic rows,
    ``log p(no new state)`` with sub-stochastic ones); it is added to the next observed step, and
    those after the last observed step to the last one, so the observed terms sum to the
    sequence's marginal log-likelihood.  Unobserved entries are 0.
    """
    N, T = observed.shape
    t = jnp.arange(T)
    nxt = lax.cummin(jnp.where(observed, t, T), axis=1, reverse=True)
    last = jnp.max(jnp.where(observed, t, 0), axis=1, keepdims=True)
    target = jnp.where(nxt < T, nxt, last)
    out = jnp.zeros_like(log_normalizers).at[jnp.arange(N)[:, None], target].add(log_normalizers)
    return jnp.where(observed, out, 0.0)


def _viterbi_kind(li, la, ll, valid, lengths):
    z = hmm_viterbi(li, la, ll, mask=valid, length=lengths)
    log_joint = _path_log_joint(li, la, ll, valid, lengths, z)
    return jnp.where(jnp.arange(z.shape[-1]) < lengths[:, None], z, -1), log_joint


def _smooth_kind(li, la, ll, valid, lengths):
    post = hmm_smoother(li, la, ll, mask=valid, length=lengths)
    inside = (jnp.arange(ll.shape[1]) < lengths[:, None])[..., None]
    return jnp.where(inside, jnp.exp(post.log_smoothed), 0.0), post.marginal_loglik


def _marginal_kind(li, la, ll, valid, lengths):
    filt = hmm_filter(li, la, ll, mask=valid, length=lengths)
    return _one_step_terms(filt.log_normalizers, valid), filt.marginal_loglik, valid


def _particle_kind(key, li, la, ll, valid, lengths, num_particles):
    """``_marginal_kind`` with the forward filter's normalizers replaced by the fully adapted
    particle filter's estimates (:func:`numpyro_hdphmm._core.smc.adapted_filter`), one filter of
    ``num_particles`` particles per sequence."""
    n, t = valid.shape
    u = uniform_open(key, (n, t, num_particles + 1), ll.dtype)
    log_l = jax.vmap(adapted_filter, in_axes=(0, None, None, 0, 0, 0))(u, li, la, ll, valid, lengths)
    return _one_step_terms(log_l, valid), jnp.sum(log_l, axis=-1), valid


_KINDS = {"viterbi": _viterbi_kind, "smooth": _smooth_kind, "marginal": _marginal_kind}


def _draw_inputs(fam, pr, y, lengths):
    """``(ll (N, T, K), valid (N, T))``: one draw's emission log-likelihoods (family ``fam`` at
    parameters ``pr``) of the sequences ``y (N, T, *event)`` and their observed steps."""
    x, valid = jax.vmap(fam.prepare)(y)
    valid = valid & (jnp.arange(y.shape[1]) < lengths[:, None])
    ll = jax.vmap(fam.log_likelihoods, in_axes=(0, None))(x, pr)
    return ll, valid


@partial(jax.jit, static_argnames=("kind", "renormalize", "emission_batched", "batch_size", "num_particles",
                                   "data_per_draw"))
def _map_draws(kind, trans, params, emission, y, lengths, renormalize, emission_batched, batch_size,
               keys=None, num_particles=0, data_per_draw=False):
    """``kind`` (viterbi / smooth / marginal / particle) at every draw, ``lax.map`` over draws;
    ``keys (S, ...)``: one PRNG key per draw, for the particle filter only.  ``y`` is ``(N, T,
    *event)``, the same sequences for every draw, or with ``data_per_draw`` ``(S, N, T, *event)``,
    each draw's own (an HDP-SLDS's latent paths), mapped with the draws."""
    log_init, log_trans = log_hmm_parameters(trans, renormalize)

    def one(args):
        li, la, pr, fam, key, yd = args
        ll, valid = _draw_inputs(fam if emission_batched else emission, pr, yd if data_per_draw else y, lengths)
        if kind == "particle":
            return _particle_kind(key, li, la, ll, valid, lengths, num_particles)
        return _KINDS[kind](li, la, ll, valid, lengths)

    fams = emission if emission_batched else None
    ys = y if data_per_draw else None
    return lax.map(one, (log_init, log_trans, params, fams, keys, ys), batch_size=batch_size)


def _segment_args(segments, renormalize):
    """Per-draw leaves of :class:`SemiMarkovDraws` for ``lax.map``/``lax.scan``: ``(log_init,
    log_trans, log_dur, log_surv, first)`` (``renormalize``: the start row over the ``K`` states)."""
    log_init = segments.log_init
    if renormalize:
        log_init = log_init - logsumexp(log_init, axis=-1, keepdims=True)
    return log_init, segments.log_trans, segments.log_dur, segments.log_surv, segments.first


def _hsmm_kind(kind, tables, ll, valid, lengths, right_censored):
    """``kind`` (viterbi / smooth / marginal) of one draw of an HDP-HSMM on the sequences ``ll (N,
    T, K)``, ``valid (N, T)``: the explicit-duration messages of :mod:`numpyro_hdphmm._core.hsmm`
    vmapped over the sequences, with the outputs of the HMM kinds."""
    li, la, ld, ls, first = tables
    t_max = ll.shape[1]
    inside = jnp.arange(t_max) < lengths[:, None]

    def per_sequence(fn):
        return jax.vmap(lambda l, v, n: fn(li, la, ld, ls, l, v, n, right_censored=right_censored, first=first))(
            ll, valid, lengths)

    if kind == "viterbi":
        z, best = per_sequence(hsmm_viterbi)
        return jnp.where(inside, z, -1), best
    if kind == "smooth":
        post = per_sequence(hsmm_smoother)
        return jnp.where(inside[..., None], jnp.exp(post.log_smoothed), 0.0), post.marginal_loglik
    if kind == "marginal":
        fwd = per_sequence(hsmm_forward)
        return _one_step_terms(fwd.log_normalizers, valid), fwd.marginal_loglik, valid
    raise NotImplementedError(
        f"{kind!r} for an HDP-HSMM: the particle filter of method='particle' is written for the HMM; use "
        "method='forward' (exact explicit-duration messages)."
    )


@partial(jax.jit, static_argnames=("kind", "renormalize", "emission_batched", "batch_size", "right_censored"))
def _map_hsmm_draws(kind, segments, params, emission, y, lengths, renormalize, emission_batched, batch_size,
                    right_censored):
    """``kind`` at every draw of an HDP-HSMM (``segments``: the leaves of :class:`SemiMarkovDraws`)."""

    def one(args):
        tables, pr, fam = args
        ll, valid = _draw_inputs(fam if emission_batched else emission, pr, y, lengths)
        return _hsmm_kind(kind, tables, ll, valid, lengths, right_censored)

    fams = emission if emission_batched else None
    return lax.map(one, (_segment_args(segments, renormalize), params, fams), batch_size=batch_size)


@partial(jax.jit, static_argnames=("renormalize", "emission_batched", "right_censored"))
def _mean_hsmm_marginals(segments, params, emission, y, lengths, renormalize, emission_batched, right_censored):
    """:func:`_mean_marginals` of an HDP-HSMM."""
    tables = _segment_args(segments, renormalize)
    num_draws, k = tables[0].shape

    def step(total, args):
        tabs, pr, fam = args
        ll, valid = _draw_inputs(fam if emission_batched else emission, pr, y, lengths)
        probs, _ = _hsmm_kind("smooth", tabs, ll, valid, lengths, right_censored)
        return total + probs, None

    zero = jnp.zeros(y.shape[:2] + (k,), tables[0].dtype)
    fams = emission if emission_batched else None
    total, _ = lax.scan(step, zero, (tables, params, fams))
    return total / num_draws


def _run_kind(kind, draws, y3, lengths, renormalize, batch_size, keys=None, num_particles=0):
    """Dispatch on the model class: the HMM's ``_map_draws`` (an HDP-SLDS's with each draw's latent
    path as its data, ``y3 (S, N, T, D)``) or the HDP-HSMM's ``_map_hsmm_draws``."""
    if draws.kind == "hsmm":
        if kind == "particle":
            raise NotImplementedError(
                "marginal_log_likelihood(method='particle') for an HDP-HSMM: the particle filter is written for the "
                "HMM's rows; use method='forward' (exact explicit-duration messages)."
            )
        segs = draws.segments
        return _map_hsmm_draws(kind, segs._replace(right_censored=None),
                               draws.params, draws.emission, y3, lengths, renormalize, draws.emission_batched,
                               batch_size, segs.right_censored)
    if draws.kind not in ("hmm", "slds"):
        raise NotImplementedError(
            f"state posteriors for the model class {draws.kind!r}: only 'hmm', 'hsmm' and 'slds'.")
    return _map_draws(kind, draws.trans, draws.params, draws.emission, y3, lengths, renormalize,
                      draws.emission_batched, batch_size, keys, num_particles, data_per_draw=draws.kind == "slds")


@partial(jax.jit, static_argnames=("renormalize", "emission_batched", "data_per_draw"))
def _mean_marginals(trans, params, emission, y, lengths, renormalize, emission_batched, data_per_draw=False):
    """``(1/S) sum_s p(z_t = k | y, theta^(s))`` by a scan over draws (memory of one draw); ``y``
    as in :func:`_map_draws` (``data_per_draw``: each draw's own sequences, scanned with it)."""
    log_init, log_trans = log_hmm_parameters(trans, renormalize)
    num_draws, k = log_init.shape

    def step(total, args):
        li, la, pr, fam, yd = args
        ll, valid = _draw_inputs(fam if emission_batched else emission, pr, yd if data_per_draw else y, lengths)
        probs, _ = _smooth_kind(li, la, ll, valid, lengths)
        return total + probs, None

    n, t = y.shape[1:3] if data_per_draw else y.shape[:2]
    zero = jnp.zeros((n, t, k), log_init.dtype)
    fams = emission if emission_batched else None
    ys = y if data_per_draw else None
    total, _ = lax.scan(step, zero, (log_init, log_trans, params, fams, ys))
    return total / num_draws


# ============================================================================ public API
class ViterbiPaths(NamedTuple):
    """Result of :func:`viterbi` (``B`` = ``(N,)`` for several sequences, ``()`` for one).

    states : ``(*draws, *B, T)`` int32 ``argmax_z p(z | y, theta^(s))`` in the draw's own labels
        (``-1`` at padded steps)
    log_joint : ``(*draws, *B)`` ``log p(z*, y | theta^(s))`` of that path (the max-product value)
    """

    states: jax.Array
    log_joint: jax.Array


class SmoothedStates(NamedTuple):
    """Result of :func:`smooth`.

    probs : ``(*draws, *B, T, K)`` ``p(z_t = k | y, theta^(s))`` in the draw's own labels (rows
        sum to 1; 0 at padded steps)
    log_likelihood : ``(*draws, *B)`` ``log p(y | theta^(s))`` with the states summed out
    """

    probs: jax.Array
    log_likelihood: jax.Array


class MarginalLogLikelihood(NamedTuple):
    r"""Result of :func:`marginal_log_likelihood`.

    pointwise : ``(*draws, *B, T)`` ``log p(y_t | y_{obs < t}, theta^(s))`` at observed steps (the
        forward filter's normalizers), 0 at missing and padded steps
    observed : ``(*B, T)`` bool, the steps that carry an observation (``t < lengths``, not NaN)
    total : ``(*draws, *B)`` ``log p(y | theta^(s))``, the sum of ``pointwise`` over time
    """

    pointwise: jax.Array
    observed: jax.Array
    total: jax.Array


def _slds_marginal_refusal(name):
    """The ``NotImplementedError`` of :func:`marginal_log_likelihood` on an HDP-SLDS."""
    return NotImplementedError(
        f"marginal_log_likelihood: the model's {name!r} is an HDP-SLDS, whose likelihood log p(y | theta) sums over "
        "every mode path (K^T of them) with the latent path integrated out for each: it has no closed form and no "
        "exact recursion (the Gaussian mixture over paths grows exponentially in T), so it is not computed. The "
        "pointwise log-likelihood of the data given each draw's latent path, log N(y_t | C x_t + d, R), is in "
        "nh.to_inference_data(mcmc, log_likelihood='conditional') and az.from_numpyro(mcmc) (for az.loo); the modes "
        "given the latent path: nh.viterbi, nh.smooth, nh.posterior_state_marginals."
    )


def _resolve(caller, model, samples, y, lengths, name, model_args, model_kwargs):
    """Draws and sequences for the public function ``caller``: ``(draws, y3, lengths, several)``;
    ``y3`` is ``(N, T, *event)``, or for an HDP-SLDS the draws' latent paths ``(S, N, T, D)``."""
    draws = hmm_draws(samples, model, name, model_args, model_kwargs)
    if draws.kind == "slds":
        if caller == "marginal_log_likelihood":
            raise _slds_marginal_refusal(name)
        for arg, value in (("y", y), ("lengths", lengths)):
            if value is not None:
                raise ValueError(
                    f"`{arg}` must be None for the HDP-SLDS {name!r}: {caller} decodes the modes given each draw's own "
                    f"latent path '{name}_latent', which the draws hold for the training data only (new sequences "
                    "have no latent path); the training data and lengths are read from the model with "
                    "`model_args`/`model_kwargs`."
                )
        _, lengths, several = as_sequences(draws.emission, draws.latent[0], draws.lengths,
                                           f"samples['{name}_latent']")
        return draws, (draws.latent if several else draws.latent[:, None]), lengths, several
    if y is None:
        if draws.observations is None:
            raise ValueError(
                "`y` is required: the model was not traced with observations (pass the training arguments "
                "as `model_args`/`model_kwargs`, or the sequences as `y`)."
                if callable(model) and not isinstance(model, EmissionFamily)
                else "`y` is required when `model` is an EmissionFamily."
            )
        if lengths is not None:
            raise ValueError("`lengths` must come with `y`: without `y` the model's own lengths are used.")
        y, lengths = draws.observations, draws.lengths
    y3, lengths, several = as_sequences(draws.emission, y, lengths, "y")
    return draws, y3, lengths, several


def _shape_out(out, draws, several):
    def fix(v):
        v = v if several else v[:, 0]
        return v.reshape(draws.draw_shape + v.shape[1:])

    return jax.tree_util.tree_map(fix, out)


def _check_batch_size(batch_size):
    return None if batch_size is None else check_static_int("batch_size", batch_size)


def viterbi(model, samples, y=None, *, lengths=None, name: str = "y", model_args: tuple = (),
            model_kwargs: Optional[dict] = None, renormalize: bool = False,
            batch_size: Optional[int] = None) -> ViterbiPaths:
    r"""Most probable state path of each draw: ``argmax_z p(z | y, theta^(s))``.

    Max-product recursion ``delta_t(j) = e_t(j) max_i delta_{t-1}(i) A(i, j)`` in log space
    (Rabiner 1989 eqs. 32-35, :func:`numpyro_hdphmm._core.hmm.hmm_viterbi`) on the HMM of each
    draw (module docstring), with ``log_joint = log p(z*, y | theta^(s))``.

    For an HDP-SLDS (module docstring) each draw's modes are decoded given its latent path
    ``x^(s)``: ``argmax_z p(z | x^(s), theta^(s))`` and ``log p(z*, x^(s) | theta^(s))``, ``B``
    the latent site's sequence axes.

    Args:
        model: the NumPyro model (traced at each draw with ``model_args``/``model_kwargs`` for the
            emission family, and for the observations when ``y`` is None) or the model's
            :class:`~numpyro_hdphmm.emissions.EmissionFamily`.
        samples: posterior draws, ``mcmc.get_samples()`` (``(S, ...)``) or grouped by chain
            (``(C, D, ...)``): ``{name}_trans`` and the emission parameter sites (for an HDP-SLDS
            the dynamics ``{name}_A``, ``{name}_cov`` and the latent paths ``{name}_latent``).
        y: sequences to decode, ``(T, *event)`` or ``(N, T, *event)``; NaN = missing; default:
            the model's observed data.  Must be None for an HDP-SLDS (``ValueError``): the data
            decoded are the draws' latent paths.
        lengths: ``(N,)`` lengths of padded sequences ``y`` (None for an HDP-SLDS, whose lengths
            are the model's).
        name: the name given to :func:`numpyro_hdphmm.sample`.
        renormalize: renormalize the rows over the represented states (module docstring).
        batch_size: draws decoded together (``lax.map``); default one at a time.

    Returns:
        :class:`ViterbiPaths` ``(states (*draws, *B, T), log_joint (*draws, *B))``; ties go to the
        lowest state index.

    Raises:
        ValueError: ``y`` or ``lengths`` given for an HDP-SLDS.
    """
    draws, y3, lengths, several = _resolve("viterbi", model, samples, y, lengths, name, model_args, model_kwargs)
    out = _run_kind("viterbi", draws, y3, lengths, renormalize, _check_batch_size(batch_size))
    return ViterbiPaths(*_shape_out(out, draws, several))


def smooth(model, samples, y=None, *, lengths=None, name: str = "y", model_args: tuple = (),
           model_kwargs: Optional[dict] = None, renormalize: bool = False,
           batch_size: Optional[int] = None) -> SmoothedStates:
    r"""Smoothed state marginals of each draw: ``p(z_t = k | y, theta^(s))``.

    Forward-backward in log space (Rabiner 1989 eqs. 24-27,
    :func:`numpyro_hdphmm._core.hmm.hmm_smoother`): ``p(z_t = k | y) prop. to alpha_t(k)
    beta_t(k)`` on the HMM of each draw.  Memory ``S N T K`` for the result: for many draws use
    :func:`posterior_state_marginals` (the average) or pass a subset of the draws.  For an
    HDP-SLDS: ``p(z_t = k | x^(s), theta^(s))`` and ``log p(x^(s) | theta^(s))`` given each draw's
    latent path ``x^(s)`` (module docstring).

    Arguments as in :func:`viterbi`.

    Returns:
        :class:`SmoothedStates` ``(probs (*draws, *B, T, K), log_likelihood (*draws, *B))``.

    Raises:
        ValueError: ``y`` or ``lengths`` given for an HDP-SLDS.
    """
    draws, y3, lengths, several = _resolve("smooth", model, samples, y, lengths, name, model_args, model_kwargs)
    out = _run_kind("smooth", draws, y3, lengths, renormalize, _check_batch_size(batch_size))
    return SmoothedStates(*_shape_out(out, draws, several))


def posterior_state_marginals(model, samples, y=None, *, lengths=None, name: str = "y",
                              model_args: tuple = (), model_kwargs: Optional[dict] = None,
                              renormalize: bool = False) -> jax.Array:
    r"""Posterior state marginals averaged over draws: ``(1/S) sum_s p(z_t = k | y, theta^(s))``.

    The Rao-Blackwellized Monte Carlo estimate of ``p(z_t = k | y)`` (each draw's smoothed
    marginals, :func:`smooth`, averaged; a scan over draws, so the memory is that of one draw).
    It assumes the labels agree across draws: relabel them first with
    :func:`numpyro_hdphmm.relabel_samples` (states that switch labels between draws would be
    averaged into a blur).  For new sequences the draws are those given the training data (see
    the module docstring).  For an HDP-SLDS the average is ``(1/S) sum_s p(z_t = k | x^(s),
    theta^(s))`` over each draw's latent path ``x^(s)``: the modes' latent path and parameters are
    joint posterior draws, so it is a Rao-Blackwellized estimate of ``p(z_t = k | y)``.

    Arguments as in :func:`viterbi` (all draws, of every chain, are averaged).

    Returns:
        ``(*B, T, K)`` probabilities (0 at padded steps).

    Raises:
        ValueError: ``y`` or ``lengths`` given for an HDP-SLDS.
    """
    draws, y3, lengths, several = _resolve("posterior_state_marginals", model, samples, y, lengths, name,
                                           model_args, model_kwargs)
    if draws.kind == "hsmm":
        segs = draws.segments
        out = _mean_hsmm_marginals(segs._replace(right_censored=None), draws.params, draws.emission, y3, lengths,
                                   renormalize, draws.emission_batched, segs.right_censored)
    else:
        out = _mean_marginals(draws.trans, draws.params, draws.emission, y3, lengths, renormalize,
                              draws.emission_batched, data_per_draw=draws.kind == "slds")
    return out if several else out[0]


def marginal_log_likelihood(model, samples, y=None, *, lengths=None, name: str = "y",
                            model_args: tuple = (), model_kwargs: Optional[dict] = None,
                            renormalize: bool = False, batch_size: Optional[int] = None,
                            method: str = "forward", num_particles: int = 100,
                            rng_key=None) -> MarginalLogLikelihood:
    r"""Pointwise log-likelihood with the states summed out: ``log p(y_t | y_{<t}, theta^(s))``.

    The forward filter's per-step normalizers (Rabiner 1989 eq. 103,
    :func:`numpyro_hdphmm._core.hmm.hmm_filter`),

    .. math::

        \log p(y_t \mid y_{<t}, \theta) = \log \sum_j \alpha_t(j) - \log \sum_i \alpha_{t-1}(i),
        \qquad \sum_t \log p(y_t \mid y_{<t}, \theta) = \log p(y \mid \theta),

    one term per OBSERVED step: missing (NaN) and padded steps are not observations and carry
    no term (``observed`` says which steps do; the transition mass of a missing step is folded
    into the next observed term, so the terms still sum to ``log p(y | theta)``).  Unlike the
    conditional pointwise log-likelihood ``log f(y_t | theta_{z_t})`` that NumPyro computes from
    the sampled states (what ``az.loo`` sees by default), these do not condition on the states;
    each is a one-step-ahead predictive, so LOO on them is leave-future-out in spirit (see
    :func:`numpyro_hdphmm.to_inference_data` with ``log_likelihood="marginal"``).

    ``method="particle"`` replaces the exact normalizers by the estimates of a particle filter
    with ``num_particles`` particles per draw and sequence (the fully adapted filter,
    :func:`numpyro_hdphmm._core.smc.adapted_filter`): ``exp(total)`` is then an unbiased
    estimate of ``p(y | theta^(s))``, and ``total`` a noisy, on average lower, value of its
    log.  It is the evaluation of the restricted-collapsed-draw paper (arXiv:1106.0474, eqs. 38-39,
    100 particles);
    the exact forward algorithm is cheaper and has no Monte Carlo error, so it is the default.

    Arguments as in :func:`viterbi`, and:

    Args:
        method: ``"forward"`` (exact) or ``"particle"``.
        num_particles: particles per filter (``method="particle"``).
        rng_key: PRNG key of the particle filters (required with ``method="particle"``).

    Returns:
        :class:`MarginalLogLikelihood` ``(pointwise (*draws, *B, T), observed (*B, T),
        total (*draws, *B))``.

    Raises:
        NotImplementedError: for an HDP-SLDS, whose ``log p(y | theta)`` (every mode path, the latent
            path integrated out for each) has no closed form; its pointwise log-likelihood given
            the latent path is ``nh.to_inference_data(mcmc, log_likelihood="conditional")``'s.
    """
    if method not in ("forward", "particle"):
        raise ValueError(f"`method` must be 'forward' or 'particle', got {method!r}.")
    particle = method == "particle"
    if particle:
        num_particles = check_static_int("num_particles", num_particles)
        if rng_key is None:
            raise ValueError("`rng_key` is required with method='particle' (a jax.random key).")
    draws, y3, lengths, several = _resolve("marginal_log_likelihood", model, samples, y, lengths, name, model_args,
                                           model_kwargs)
    keys = jax.random.split(rng_key, int(np.prod(draws.draw_shape, dtype=int))) if particle else None
    pointwise, total, observed = _run_kind("particle" if particle else "marginal", draws, y3, lengths, renormalize,
                                           _check_batch_size(batch_size), keys, num_particles if particle else 0)
    pointwise, total = _shape_out((pointwise, total), draws, several)
    observed = observed[0] if several else observed[0, 0]
    return MarginalLogLikelihood(pointwise, observed, total)
