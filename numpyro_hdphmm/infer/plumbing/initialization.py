r"""Where the chains of every HDP-HMM kernel start: the ``init_strategy`` argument.

Every kernel (:class:`~numpyro_hdphmm.infer.plumbing.adapter.HDPKernel`) takes ``init_strategy``:

``"data"`` (the default, :func:`init_to_data` with its defaults)
    a start that finds the data.  The states come from clustering short windows of the
    observations (:func:`cluster_states`): for windows of 1, 3 and 10 steps, k-means with
    k-means++ seeding on the standardized window means of ``y`` into a moderate number of
    clusters, then greedy merging of over-split clusters by the BIC of a Gaussian mixture
    (:func:`~numpyro_hdphmm._core.clustering.merge_mixture`), down to two clusters at the fewest;
    of the three labellings the one
    the model itself prefers (:func:`labelling_score`: the labelling's collapsed log joint
    under the model's emission family and prior for conjugate families, the BIC of a plug-in
    Gaussian HMM for the others), optionally refined by rounds of hard EM with the emission
    family's own likelihood.  Long windows average the noise out of persistent (sticky) states;
    short ones keep states that last a few steps apart; the score picks for the data at hand.
    Given
    these states the emission parameters are drawn from their conditional (the family's
    ``update_parameters``) and the tables, ``beta`` and the rows from theirs
    (:func:`numpyro_hdphmm._core.crp.sample_global` with the concentrations held at their
    starting values), so the kernel's first sweep reassigns the states under the family's
    likelihood from parameters that describe the data.  The other latent sites
    (hyperparameters, the inner kernel's sites) start as before: a prior draw (inner sites:
    the inner kernel's own initialization).
``"prior"`` (:data:`PRIOR`)
    every site a draw from the model's prior (the behaviour before issue 16): the states a
    draw of the Markov chain, the emission parameters prior draws.
a NumPyro init strategy (``numpyro.infer.init_to_value(values={...})``, ``init_to_median``, ``init_to_sample``, ...)
    applied, as NumPyro applies it, to every latent site that is not one of the HDP-HMM's own
    sites (hyperparameters, the user's sites of a custom emission, ...), and used for the inner
    NUTS kernel; the HDP-HMM's sites that ``init_to_value`` names are taken as given
    (e.g. ``init_to_value(values={"y_states": z0})`` starts the states at ``z0``), the others
    start as with ``"data"``: given the states (clustered when not given).

Values given to ``MCMC.run(init_params=...)`` (constrained values, as for NumPyro's ``Gibbs``
blocks) override all of these; with ``"data"`` the sites not given are drawn given the states.

Custom emissions (:class:`~numpyro_hdphmm.emissions.CustomEmission`, no conjugate prior, the
parameters are the user's sites): the states are the clusters of the window means (no
likelihood refinement), and the parameters start as the inner kernel initializes them (with a
NumPyro init strategy: that strategy, e.g. ``init_to_value`` for parameter values that match
the clusters), so the first sweep may move the states away from the clusters.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
from jax import lax, random
from numpyro import handlers

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.clustering import hmm_bic, kmeans, merge_mixture, window_sum
from numpyro_hdphmm._core.segments import label_counts
from numpyro_hdphmm.emissions.base import OneHot
from numpyro_hdphmm.infer.moves.emission_base import update_emission_parameters
from numpyro_hdphmm.infer.moves.semi_markov import sample_hdp_layer, sample_semi_markov_rows
from numpyro_hdphmm.infer.moves.slds import observation_parameters

__all__ = ["DATA", "PRIOR", "DataInit", "init_to_data", "resolve_init_strategy", "cluster_states", "labelling_score",
           "states_given", "strategy_values", "given_values", "initial_latent"]

#: the data-driven start (the default)
DATA = "data"
#: the prior-draw start
PRIOR = "prior"


class DataInit(NamedTuple):
    """Options of the data-driven start (:func:`init_to_data`)."""

    num_states: Optional[int] = None
    window: Tuple[int, ...] = (1, 3, 10)
    kmeans_iterations: int = 20
    refine_iterations: int = 0
    merge: bool = True


def init_to_data(num_states: Optional[int] = None, window: Union[int, Sequence[int]] = (1, 3, 10),
                 kmeans_iterations: int = 20, refine_iterations: int = 0, merge: bool = True) -> DataInit:
    r"""The data-driven start with options (``init_strategy="data"`` is ``init_to_data()``).

    :param num_states: clusters of the k-means step (before merging); ``None``:
        ``min(16, max(2, max_states // 2))``, an over-segmentation that the merge step and the
        sampler reduce, while free slots stay for the infinite-model samplers.
    :param window: steps per window (centred; the window means are the k-means features and the
        refinement sums the log-likelihoods over it), or several (at most 8): each gives a
        labelling, and the one with the highest :func:`labelling_score` is the start.
    :param kmeans_iterations: Lloyd iterations.
    :param refine_iterations: hard-EM rounds with the family's likelihood (0: none).
    :param merge: greedily merge over-split clusters, down to two (:func:`cluster_states`, step 3).
    """
    windows = (window,) if isinstance(window, int) and not isinstance(window, bool) else window
    try:
        windows = tuple(windows)
    except TypeError:
        windows = ()
    if not 1 <= len(windows) <= 8:
        raise ValueError(f"`init_strategy`: init_to_data's `window` must be an integer >= 1 or 1 to 8 of them, "
                         f"got {window!r}.")
    for name, value, low in [("window", w, 1) for w in windows] + [("kmeans_iterations", kmeans_iterations, 0),
                                                                   ("refine_iterations", refine_iterations, 0)]:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"`init_strategy`: init_to_data's `{name}` must be an integer >= {low}, got {value!r}.")
    if num_states is not None and (isinstance(num_states, bool) or not isinstance(num_states, int) or num_states < 1):
        raise ValueError(f"`init_strategy`: init_to_data's `num_states` must be None or an integer >= 1, got {num_states!r}.")
    return DataInit(num_states, windows, kmeans_iterations, refine_iterations, bool(merge))


def resolve_init_strategy(init_strategy):
    """``"data"`` -> :class:`DataInit`, ``"prior"`` -> ``"prior"``, a :class:`DataInit` or a callable
    (a NumPyro init strategy) as it is; anything else raises ``ValueError`` naming the argument."""
    if isinstance(init_strategy, str):
        if init_strategy == DATA:
            return DataInit()
        if init_strategy == PRIOR:
            return PRIOR
    elif isinstance(init_strategy, DataInit) or callable(init_strategy):
        return init_strategy
    raise ValueError(
        f"`init_strategy` must be 'data' (cluster the observations), 'prior' (a draw from the prior), "
        f"numpyro_hdphmm.infer.init_to_data(...) or a NumPyro init strategy such as "
        f"numpyro.infer.init_to_value(values={{...}}), got {init_strategy!r}.")


def given_values(init_strategy) -> Dict:
    """The values a NumPyro ``init_to_value(values=...)`` strategy names (``{}`` otherwise)."""
    keywords = getattr(init_strategy, "keywords", None) or {}
    values = keywords.get("values")
    return dict(values) if isinstance(values, dict) else {}


def strategy_values(model, rng_key, init_strategy, owned, model_args, model_kwargs) -> Dict:
    """``{site: value}`` of every latent site of ``model`` with the NumPyro ``init_strategy``
    applied to the sites not in ``owned`` (the HDP-HMM's own sites: given values only, else a
    prior draw, replaced later)."""
    given = given_values(init_strategy)

    def substitute_fn(site):
        if site["name"] in owned:
            return given.get(site["name"])
        return init_strategy(site)

    tr = handlers.trace(handlers.substitute(handlers.seed(model, rng_key), substitute_fn=substitute_fn)).get_trace(
        *model_args, **model_kwargs)
    return {name: site["value"] for name, site in tr.items() if site["type"] == "sample" and not site["is_observed"]}


def _default_clusters(capacity: int) -> int:
    return min(16, max(2, capacity // 2), capacity)


def _features(y, valid):
    """``(N, T, D)`` standardized observations (event flattened, 0 where not valid)."""
    num_seq, num_steps = valid.shape
    dtype = jnp.result_type(y.dtype, float) if jnp.issubdtype(y.dtype, jnp.inexact) else jnp.result_type(float)
    f = jnp.asarray(y, dtype).reshape(num_seq, num_steps, -1)
    ok = valid[..., None] & jnp.isfinite(f)
    w = ok.astype(dtype)
    count = jnp.maximum(jnp.sum(w, (0, 1)), 1.0)
    mean = jnp.sum(jnp.where(ok, f, 0.0), (0, 1)) / count
    var = jnp.sum(jnp.where(ok, (f - mean) ** 2, 0.0), (0, 1)) / count
    scale = jnp.where(var > 0, jnp.sqrt(var), 1.0)
    return jnp.where(ok, (f - mean) / scale, 0.0), w


def cluster_states(rng_key, view, params, capacity: int, options: DataInit):
    r"""Data-driven starting states ``(N, T)`` int32 in ``[0, capacity)`` (module docstring).

    For every window length ``w`` of ``options.window`` (the same compiled code for all, mapped
    over them):

    1. Features: the family's features of the observations (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.clustering_features`:
       the observations themselves, event flattened; categories as a random embedding;
       autoregressive emissions add each step's lag-one product and increment, the dynamics their
       likelihood sees), standardized, ``f_t`` (missing values and padded steps left out), averaged
       over centred windows of ``w`` steps within each sequence: ``fbar_t = sum_{|s-t|<=h} f_s
       / #valid`` (:func:`~numpyro_hdphmm._core.clustering.window_sum`).
    2. k-means (k-means++ seeding) of ``fbar`` over the steps with data in their window into
       ``C`` clusters (:func:`~numpyro_hdphmm._core.clustering.kmeans`).
    3. with ``options.merge``: greedy merging of over-split clusters by the BIC of a diagonal
       Gaussian mixture of the window means (:func:`~numpyro_hdphmm._core.clustering.merge_mixture`;
       neighbouring window means share their data, so every step counts ``1 / w``), down to two
       clusters at the fewest: regimes whose marginal distributions overlap look like one
       Gaussian to the mixture, and a one-state start traps the samplers that move one step at a
       time (``DirectAssignmentGibbs``, ``BeamSampler``; ``docs/benchmarks.md``, "Replica
       exchange", overlap), while a superfluous second state empties within a few sweeps.
    4. Of the labellings, the one with the highest :func:`labelling_score` (the same data and
       score for every window, so the labellings compare).
    5. Families whose parameters the kernel owns, ``options.refine_iterations`` rounds of hard EM
       (default none: the kernel's first sweep does this with the HMM itself):
       ``theta ~ p(theta | y, z)`` (``update_parameters``), then ``z_t = argmax_k sum_{|s-t|<=h}
       valid_s log f(y_s | theta_k)`` over the clusters in use, with the chosen window.
    """
    emission, data = view.emission, view.data
    valid = data.valid
    num_seq, num_steps = valid.shape
    num_clusters = min(options.num_states or _default_clusters(capacity), capacity)
    windows = (options.window,) if isinstance(options.window, int) else tuple(options.window)
    k_means, k_refine = random.split(rng_key)
    f, w = _features(emission.clustering_features(data.y), valid)
    points, point_weights = [], []
    for window in windows:  # static and few: the features of every window, stacked
        sums, counts = window_sum(f, window), window_sum(w, window)
        points.append((sums / jnp.maximum(counts, 1.0)).reshape(num_seq * num_steps, -1))
        point_weights.append(jnp.any(counts > 0, -1).reshape(-1).astype(f.dtype))
    points, point_weights = jnp.stack(points), jnp.stack(point_weights)  # (W, M, D), (W, M)
    scale = jnp.asarray([1.0 / window for window in windows], f.dtype)  # a window mean counts 1/w steps

    def cluster(points, point_weights, scale):
        labels, _ = kmeans(k_means, points, point_weights, num_clusters, options.kmeans_iterations)
        if options.merge:
            labels = merge_mixture(points, point_weights * scale, labels, num_clusters, min_clusters=2)
        labels = labels.reshape(num_seq, num_steps)
        return labels, labelling_score(view, labels, num_clusters, f, w)

    labels, score = jax.vmap(cluster)(points, point_weights, scale)  # (W, N, T), (W,)
    best = jnp.argmax(jnp.where(jnp.isfinite(score), score, -jnp.inf))
    states = labels[best]
    if not emission.owns_parameters or options.refine_iterations == 0:
        return states
    x_flat = jax.tree_util.tree_map(lambda a: a.reshape((num_seq * num_steps,) + a.shape[2:]), data.x)

    def refine(i, states):
        hard = OneHot.of_states(states, valid, capacity)
        used = label_counts(hard.labels, capacity, f.dtype) > 0
        theta, _ = emission.update_parameters(random.fold_in(k_refine, i), x_flat, hard, params)
        log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(data.x, theta)
        log_lik = jnp.where(valid[..., None], log_lik, 0.0)
        summed = jnp.stack([window_sum(log_lik, window) for window in windows])[best]
        score = jnp.where(used, summed, -jnp.inf)
        return jnp.argmax(score, -1).astype(jnp.int32)

    return lax.fori_loop(0, options.refine_iterations, refine, states)


def labelling_score(view, labels, num_labels: int, features, feature_weights):
    r"""How well a labelling ``labels (N, T)`` in ``[0, num_labels)`` of the model's data explains
    them, to choose among labellings (:func:`cluster_states`, step 4).

    Conjugate emission families: the labelling's collapsed log joint under the model's own
    emission prior, ``sum_k log m(y_{z=k}) + log p(z)``: each label's log marginal likelihood
    (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.log_marginal_likelihood`, the
    parameters integrated out; missing observations left out) plus the transitions with the rows
    integrated out under ``Dir(1, ..., 1)`` over the labels in use (the start row likewise;
    :func:`~numpyro_hdphmm._core.crp.log_states_given_beta`).  Both terms carry their own
    penalty for labels and switches (a label pays for its parameters through the prior), so no
    information criterion is needed, and the score is in the family's own likelihood: on the
    motion-capture data (AR(1) emissions) it prefers the 10-step windows' labelling (8 states,
    Hamming distance 0.38 to the annotation) where the Gaussian HMM's BIC preferred the 1-step
    windows' (14 states, 0.52); on the synthetic sets of ``docs/benchmarks.md`` ("Initialization")
    both pick the same window.

    Families without a closed-form marginal (custom emissions, DP mixtures): the BIC of the
    plug-in Gaussian HMM on the standardized observations ``features (N, T, D)`` with
    ``feature_weights`` (:func:`~numpyro_hdphmm._core.clustering.hmm_bic`).  Returns a scalar."""
    emission, data = view.emission, view.data
    dtype = features.dtype
    hard = OneHot.of_states(labels, data.valid, num_labels)  # the families' O(T) statistics of hard labels
    x_flat = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), data.x)
    try:
        marginal = emission.log_marginal_likelihood(emission.statistics(x_flat, hard))
    except NotImplementedError:
        return hmm_bic(features, feature_weights, data.valid, labels, num_labels)
    in_sequence = jnp.arange(labels.shape[1]) < data.lengths[:, None]
    used = jnp.any((jax.nn.one_hot(labels, num_labels, dtype=bool) & in_sequence[..., None]), (0, 1))
    n, first = crp.transition_counts(labels, num_labels, data.lengths)
    num_used = jnp.maximum(jnp.sum(used), 1).astype(dtype)
    uniform = jnp.append(jnp.where(used, 1.0 / num_used, 0.0), 0.0).astype(dtype)  # Dir(1) over the used labels
    transitions = crp.log_states_given_beta(uniform, num_used, jnp.zeros((), dtype), n, first)
    return jnp.sum(jnp.where(used, marginal.astype(dtype), 0.0)) + transitions


def initial_latent(spec, view):
    """The data-driven start of an HDP-SLDS's latent path, in the site's shape (``(T, D)``, or ``(N,
    T, D)`` for several sequences): the observation model's
    :meth:`~numpyro_hdphmm.models.observation.LinearGaussianObservation.initial_latent` (least squares
    through a fixed ``C``, principal components for a learned one)."""
    observed = view.observed
    x = observed.family.initial_latent(observed.y, observed.valid)
    return x if spec.batched else x[0]


def states_given(rng_key, spec, view, start, *, given_params: bool = False, given_beta: bool = False,
                 given_trans: bool = False, given_base: bool = False, given_observation: bool = False):
    """``start`` (an :class:`~numpyro_hdphmm.infer.contract.Explicit`) with what was not given drawn
    given its states: the emission parameters from their conditional (``update_parameters``; the
    user's sites of a custom emission are kept; a shared emission base first, unless
    ``given_base``, its scale held fixed: :func:`~numpyro_hdphmm.infer.moves.emission_base.update_emission_parameters`),
    the tables, ``beta`` and the rows from theirs (:func:`~numpyro_hdphmm._core.crp.sample_global`,
    the concentrations held fixed); for an HDP-SLDS also the observation parameters given the latent
    path, unless ``given_observation`` (``R`` no smaller than the noise the data's differences show,
    :meth:`~numpyro_hdphmm.models.observation.LinearGaussianObservation.with_noise_floor`)."""
    k_theta, k_global = random.split(rng_key)
    if spec.sites.kind == "slds" and not given_observation:
        observed = view.observed
        latent = start.extra["latent"] if spec.batched else start.extra["latent"][None]
        current = observation_parameters(start.extra)
        drawn = observed.family.update(random.fold_in(rng_key, 2), current, latent, observed.y, observed.valid)
        drawn = {**drawn, "R": observed.family.with_noise_floor(drawn["R"], observed.y, observed.valid)}
        start = start._replace(extra={**start.extra, **{f"observation_{p}": v.astype(current[p].dtype)
                                                         for p, v in drawn.items()}})
    capacity = spec.capacity
    data = view.data
    states = start.states
    params = start.params
    if view.emission.owns_parameters and not given_params:
        weights = OneHot.of_states(states, data.valid, capacity)  # hard labels: the families' O(T) statistics
        x_flat = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), data.x)
        base_spec = spec if not given_base else spec._replace(hyper=spec.hyper._replace(emission_base=None))
        # concentrations and ARD column precisions held fixed
        fixed = view._replace(emission_scale_prior=None, dp_concentration_prior=None, column_precision_prior=None)
        params, _, shared = update_emission_parameters(k_theta, base_spec, fixed,
                                                       view.emission, x_flat, weights, params)
        params = {k: jnp.asarray(v, start.params[k].dtype) for k, v in params.items()}
        start = start._replace(hyper={**start.hyper, **{k: jnp.asarray(v, start.hyper[k].dtype) for k, v in shared.items()}})
    beta, trans = start.beta, start.trans
    if spec.sites.kind == "hsmm" and not (given_beta and given_trans):
        # the HDP-HSMM's layer given the segment transitions, the concentrations held fixed (the
        # duration parameters keep their starting values: a clustered start may hold segments beyond
        # max_duration, which the first sweep's segmentation removes)
        drawn_beta, drawn_trans, _, _ = sample_hdp_layer(k_global, states, data.lengths, start.beta, view.hyper,
                                                         crp.HyperPriors())
        beta = beta if given_beta else drawn_beta.astype(start.beta.dtype)
        if not given_trans:
            if given_beta:
                n, first = crp.transition_counts(states, capacity, data.lengths)
                drawn_trans = sample_semi_markov_rows(k_global, beta, view.hyper.alpha,
                                                      n * (1 - jnp.eye(capacity, dtype=n.dtype)), first)
            trans = drawn_trans.astype(start.trans.dtype)
    elif not (given_beta and given_trans):
        draw = crp.sample_global(k_global, states, data.lengths, start.beta, view.hyper, crp.HyperPriors(),
                                 weak_limit=spec.beta_prior == "weak_limit")
        beta = beta if given_beta else draw.beta.astype(start.beta.dtype)
        if not given_trans:
            trans = draw.trans if not given_beta else crp.sample_rows(k_global, beta, view.hyper.alpha, view.hyper.kappa,
                                                                     draw.n, draw.first)
            trans = trans.astype(start.trans.dtype)
    return start._replace(params=params, beta=beta, trans=trans)
