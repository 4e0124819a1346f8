r"""Label switching: relabel whole posterior draws, and the Bayes point estimate of the segmentation.

An HDP-HMM's posterior is invariant to permutations of the state labels, so different draws
(and different chains) may call the same state by different labels, and per-label summaries
(``az.summary`` of ``{name}_mu``, R-hat of ``{name}_beta``) mix states.  Two remedies:

:func:`relabel_samples`
    permute the labels of every draw so that they agree, applying the SAME permutation ``m``
    (old label ``k`` -> new label ``m(k)``) to every state-indexed site of the draw
    (:func:`find_state_sites`): ``{name}_states`` (``z -> m(z)``), the emission parameters
    ``{name}_{p}`` (leading axis ``K``, also a DP-mixture's ``{name}_weights`` and its
    component parameters), ``{name}_beta`` (``K`` entries permuted, the remainder ``beta_K``
    kept last) and ``{name}_trans`` (rows and columns ``0..K-1`` permuted; the start row ``K``
    and the remainder column ``K`` stay last).  A relabelled draw is the same HMM (the same
    transition probabilities between the same emission distributions, the same likelihood)
    and the same segmentation, with labels that mean the same across draws.  Under the weak
    limit (``beta ~ Dir(gamma/L)``, symmetric) its joint density is unchanged too, so the
    relabelled draws are draws of the same posterior; under ``GEM`` the labels also carry the
    stick-breaking (size-biased) order, which relabelling gives up (the partition and the HMM
    are what is summarized then).

    The permutations come from a reference: against a given labelling (e.g. the point
    estimate below, or the true states) each draw's states are matched by the Hungarian
    algorithm (:func:`numpyro_hdphmm.results.diagnostics.relabel`: maximal overlap, i.e. minimal
    Hamming distance); without one, by Stephens' (2000) iterative relabelling (below).

:func:`point_segmentation`
    a single segmentation that summarizes the posterior over partitions of the time steps
    (label-invariant): the partition ``c`` minimizing the posterior expected loss
    ``E[L(c, z) | y] ~ sum_s w_s L(c, z^(s))`` for Binder's loss or the variation of
    information, found by a SALSO-style greedy search (Dahl, Johnson & Mueller 2022).

**Stephens' relabelling** (Stephens 2000, JRSS-B 62, Alg. 2, with hard labels and the quadratic
cost): alternate

1. ``Q[t, k] = (1/S) sum_s [m_s(z^(s)_t) = k]``, the step-wise frequencies of the current
   labels;
2. for every draw, the permutation ``m_s`` maximizing ``sum_t Q[t, m_s(z^(s)_t)]`` (Hungarian
   algorithm on the ``K x K`` expected-overlap matrix, ``diagnostics.relabel(..., soft=True)``);

until no permutation changes.  Each step does not increase ``sum_s sum_t ||e_{m_s(z^(s)_t)} -
Q_t||^2`` (step 1 is its minimizer in ``Q``, step 2 in the permutations), so it stops after
finitely many sweeps.  Stephens minimizes a Kullback-Leibler cost instead; with one-hot
classification probabilities the two differ only in scoring a disagreement by
``-log Q[t, k]`` rather than ``1 - Q[t, k]``; the quadratic cost does not blow up where a label
has frequency 0.  Cost: ``O(S T K + S K^3)`` per sweep (host NumPy/SciPy; 1.3 s in all for
``S = 1000`` draws of ``T = 2058`` steps with 20 states).

**Point estimate.**  For partitions ``c`` and ``c'`` of the ``n`` labelled steps with cluster
sizes ``n_k``, ``n'_j`` and contingency counts ``n_kj``, both losses have the form

.. math::

    L(c, c') = \frac{1}{Z}\Big[\sum_k g(n_k) + \sum_j g(n'_j) - 2 \sum_{k,j} g(n_{kj})\Big],

with ``g(x) = x (x - 1) / 2`` and ``Z = n (n - 1) / 2`` for Binder's loss with equal costs (the
fraction of pairs of steps on which ``c`` and ``c'`` disagree about being together, ``1 - Rand
index``; Binder 1978), and ``g(x) = x log x``, ``Z = n`` for the variation of information
``VI = H(c) + H(c') - 2 I(c, c')`` in nats (Meila 2007).  The expected loss over weighted draws is
the same expression with the draw terms averaged.  Binder's expected loss is a function of the
co-assignment matrix ``P`` (:func:`numpyro_hdphmm.results.diagnostics.coassignment_matrix`):
``sum_{s<t} [c_s = c_t] (1 - P_st) + [c_s != c_t] P_st`` over ``Z``; VI needs the draws themselves
(Wade & Ghahramani 2018 minimize a lower bound computed from ``P``; here the expectation is
exact).  The search works on the counts (memory ``O(S K_max K_draws)``, never ``O(T^2)``):

1. starts: ``num_starts`` partitions, half of them draws spread evenly over the sample, half
   empty (items then enter one at a time: SALSO's sequential allocation), plus the one-cluster
   partition and any ``candidates`` the caller gives (e.g. a Viterbi path);
2. sweeps: each step, in a random order, is removed and put in the cluster (an existing one,
   or a new one) that minimizes the expected loss, which needs only
   ``Delta_k = g(n_k + 1) - g(n_k) - 2 sum_s w_s [g(n^(s)_{k j_s} + 1) - g(n^(s)_{k j_s})]``
   with ``j_s = z^(s)_t`` (for Binder ``Delta_k = sum_{u in k} (1 - 2 P_tu)``); it stays where
   it is unless another cluster is strictly better, so every move lowers the loss and the
   sweeps stop when one changes nothing (or after ``max_sweeps``);
3. merges: in every partition found, the pair of whole clusters whose merge lowers the expected
   loss most is merged, repeatedly, while one does (the change needs only the counts:
   ``g(n_a + n_b) - g(n_a) - g(n_b) - 2 sum_s w_s sum_j [g(n^(s)_aj + n^(s)_bj) - g(n^(s)_aj) -
   g(n^(s)_bj)]``); single-step sweeps cannot make this move when every step of a cluster is
   better off in its own cluster although the cluster as a whole is not; the merged partitions
   get sweeps again, for at most ``max_rounds`` rounds or until no merge helps;
4. the partition with the lowest expected loss (recomputed exactly in float64) wins.

Cost: ``O(num_starts * sweeps * n * S * K_max)`` (jitted, ``lax.fori_loop`` over the steps of a
sweep; the starts one after another, ``lax.map``).  Measured on 2 shared CPU cores, ``n = 2058``
steps, 20 states, the default 8 starts: 2.4 s (VI) / 1.7 s (Binder) for ``S = 200`` draws, 8.3 s /
4.0 s for ``S = 1000``, plus 1-3 s of compilation on the first call of a shape.
A greedy search finds a local minimum (no single-step move and no merge of two clusters lowers
the loss); with these starts it finds the exact minimizer on every enumerable case in the tests
(all partitions of up to 7 steps).
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import xlogy as jax_xlogy
from scipy.special import xlogy as scipy_xlogy

from numpyro_hdphmm._core.validation import check_static_int
from numpyro_hdphmm.results.diagnostics.labellings import as_labels, relabel
from numpyro_hdphmm.results.posterior import flatten_draws

__all__ = [
    "StateSites",
    "find_state_sites",
    "relabel_samples",
    "PointSegmentation",
    "point_segmentation",
    "expected_partition_loss",
    "state_shares",
    "effective_num_states",
    "kept_states",
    "step_agreement",
    "StateSummary",
    "summary",
    "ChainAgreement",
    "chain_agreement",
    "print_summary",
]

_LOSSES = ("vi", "binder")


# ============================================================================ state-indexed sites
class StateSites(NamedTuple):
    """The state-indexed sites of an HDP-HMM ``name`` in a samples dict.

    beta : ``{name}_beta`` (``(*draws, K+1)``)
    trans : ``{name}_trans`` (``(*draws, K+1, K+1)``)
    states : ``{name}_states`` (``(*draws, T)`` or ``(*draws, N, T)``), or ``None`` if absent
    params : the sites with a leading state axis ``(*draws, K, ...)``
    num_states : the capacity ``K``
    """

    beta: Optional[str]
    trans: str
    states: Optional[str]
    params: tuple
    num_states: int


def find_state_sites(samples, name: str = "y", extra_sites: Sequence[str] = ()) -> StateSites:
    """The sites of ``samples`` indexed by the states of the HDP-HMM ``name``.

    ``{name}_beta``, ``{name}_trans``, ``{name}_states`` and every other site ``{name}_*`` (not
    ``{name}_num_states``) whose first axis after the draw axes has size ``K`` (the emission
    parameters of the conjugate families and of :class:`~numpyro_hdphmm.emissions.DPMixture`),
    plus ``extra_sites``: the user's own sites indexed by state (a custom emission's ``loc``,
    ``scale``, ...), which must have a leading axis ``K`` too.  The draw axes are those of
    ``{name}_trans``.
    """
    flat, lead = flatten_draws(samples, name)
    num_states = flat[f"{name}_trans"].shape[-1] - 1
    skip = {f"{name}_trans", f"{name}_beta", f"{name}_states", f"{name}_num_states"}
    params = [k for k, v in flat.items() if k.startswith(f"{name}_") and k not in skip
              and v.ndim >= 2 and v.shape[1] == num_states]
    for k in extra_sites:
        if k not in samples:
            raise ValueError(f"`extra_sites`: {k!r} is not a site of `samples` (found {sorted(samples)}).")
        if k not in flat or flat[k].ndim < 2 or flat[k].shape[1] != num_states:
            raise ValueError(
                f"`extra_sites`: {k!r} must have shape {lead + (num_states,)} + ..., got {np.shape(samples[k])}."
            )
        if k not in params and k not in skip:
            params.append(k)
    beta = f"{name}_beta" if f"{name}_beta" in flat else None
    if beta is not None and flat[beta].shape[1:] != (num_states + 1,):
        raise ValueError(f"`samples[{beta!r}]` must have shape {lead + (num_states + 1,)}, got {np.shape(samples[beta])}.")
    states = f"{name}_states" if f"{name}_states" in flat else None
    return StateSites(beta, f"{name}_trans", states, tuple(params), num_states)


def _step_labels(states, lengths, what: str):
    """``(S, *B, T)`` draws -> ``(S, M)`` int64 over all steps of all sequences (``M = N T``),
    ``-1`` at padded steps; and the layout ``B + (T,)`` to restore."""
    states = as_labels(what, states, min_ndim=2)
    if states.ndim not in (2, 3):
        raise ValueError(f"`{what}` must have shape (S, T) or (S, N, T), got {states.shape}.")
    layout = states.shape[1:]
    if lengths is not None:
        if states.ndim != 3:
            raise ValueError("`lengths` is only meaningful for several sequences: states of shape (S, N, T).")
        ln = np.asarray(lengths)
        N, T = layout
        if ln.shape != (N,) or not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > T):
            raise ValueError(f"`lengths` must be {N} integers in [1, T={T}], got {ln}.")
        states = np.where(np.arange(T)[None, None, :] < ln[None, :, None], states, -1)
    return states.reshape(states.shape[0], -1), layout


# ============================================================================ relabel_samples
def _stephens(labels: np.ndarray, num_states: int, max_iter: int):
    """Stephens-style iterative relabelling (module docstring): ``(mapping (S, K), iterations)``."""
    S, M = labels.shape
    mapping = np.broadcast_to(np.arange(num_states), (S, num_states)).copy()
    valid = labels >= 0
    step = np.broadcast_to(np.arange(M), labels.shape)[valid]
    for it in range(1, max_iter + 1):
        new = np.take_along_axis(mapping, np.maximum(labels, 0), axis=1)[valid]
        Q = np.bincount(step * num_states + new, minlength=M * num_states).reshape(M, num_states) / S
        _, updated = relabel(labels, Q, num_states=num_states, permutation=True, soft=True)
        if np.array_equal(updated, mapping):
            return mapping, it
        mapping = updated
    warnings.warn(
        f"relabel_samples: Stephens' relabelling did not settle in max_iter={max_iter} sweeps; the last "
        "permutations are used.", RuntimeWarning, stacklevel=3,
    )
    return mapping, max_iter


def _permute(value: np.ndarray, inverse: np.ndarray, axis: int) -> np.ndarray:
    """``out[s, ..., j, ...] = value[s, ..., inverse[s, j], ...]`` along ``axis`` (draw axis 0)."""
    shape = [1] * value.ndim
    shape[0], shape[axis] = inverse.shape
    return np.take_along_axis(value, inverse.reshape(shape), axis=axis)


def relabel_samples(samples, reference=None, *, name: str = "y", lengths=None, extra_sites: Sequence[str] = (),
                    max_iter: int = 100, return_permutations: bool = False):
    r"""Undo label switching: permute the labels of every draw so that they agree across draws.

    Every state-indexed site of a draw gets the draw's permutation ``m`` (old label ``k`` -> new
    label ``m(k)``, see the module docstring and :func:`find_state_sites`):
    ``states -> m(states)``, ``param[m(k)] <- param[k]``, ``beta[m(k)] <- beta[k]`` (``beta_K``
    stays last), ``trans[m(i), m(j)] <- trans[i, j]`` (start row ``K`` and remainder column
    ``K`` stay last).  Other sites are returned unchanged.

    Args:
        samples: posterior draws (``mcmc.get_samples()``, ``(S, ...)``, or grouped by chain
            ``(C, D, ...)``: chains are relabelled jointly).  Needs ``{name}_trans`` and
            ``{name}_states``.
        reference: ``None`` (default): Stephens' iterative relabelling (module docstring).  Or a
            labelling of the steps, ``(T,)`` / ``(N, T)`` like one draw of ``{name}_states``,
            with labels ``< K`` (negative = skip), e.g. ``point_segmentation(...).labels`` or
            the true states: every draw is matched to it by the Hungarian algorithm
            (:func:`numpyro_hdphmm.results.diagnostics.relabel` with ``permutation=True``), and the
            states of each draw then carry the labels of the reference clusters they overlap
            most.
        name: the name given to :func:`numpyro_hdphmm.sample`.
        lengths: ``(N,)`` sequence lengths: padded steps are left out of the matching.
        extra_sites: the user's own sites indexed by state (custom emissions: ``loc``,
            ``scale``, ...), permuted like the emission parameters; a ``RuntimeWarning`` names
            sites that look state-indexed (leading axis ``K``) but are not listed.
        max_iter: the most sweeps of Stephens' algorithm.
        return_permutations: also return the permutations.

    Returns:
        the relabelled samples (a new dict, same keys and shapes), and with
        ``return_permutations`` also ``(*draws, K)`` int64 ``m`` (``m[..., k]`` = new label of
        old label ``k``).
    """
    sites = find_state_sites(samples, name, extra_sites)
    if sites.states is None:
        raise ValueError(f"`samples` lacks '{name}_states', which the matching needs (found {sorted(samples)}).")
    max_iter = check_static_int("max_iter", max_iter)
    trans = np.asarray(samples[sites.trans])
    lead = trans.shape[:-2]
    S, K = int(np.prod(lead)), sites.num_states
    flat = {k: np.asarray(samples[k]).reshape((S,) + np.shape(samples[k])[len(lead):])
            for k in (sites.trans, sites.states, sites.beta, *sites.params) if k is not None}
    unlisted = [k for k, v in samples.items() if not k.startswith(f"{name}_") and k not in extra_sites
                and np.ndim(v) > len(lead) and np.shape(v)[: len(lead) + 1] == lead + (K,)]
    if unlisted:
        warnings.warn(
            f"relabel_samples: sites {unlisted} have a leading axis of size K={K} but are not {name}_* sites; "
            "if they are indexed by state (a custom emission's parameters), pass extra_sites=[...] so that they "
            "are permuted with the states.", RuntimeWarning, stacklevel=2,
        )
    labels, layout = _step_labels(flat[sites.states], lengths, f"samples[{sites.states!r}]")
    if labels.size and labels.max() >= K:
        raise ValueError(f"`samples[{sites.states!r}]` must hold labels < K = {K}, got {labels.max()}.")
    if reference is None:
        mapping, _ = _stephens(labels, K, max_iter)
    else:
        ref = as_labels("reference", reference)
        if ref.shape != layout:
            raise ValueError(f"`reference` must have the shape of one draw of {sites.states!r}, {layout}, got {ref.shape}.")
        if lengths is not None:
            ref = np.where(np.arange(layout[-1])[None, :] < np.asarray(lengths)[:, None], ref, -1)
        _, mapping = relabel(labels, ref.reshape(-1), num_states=K, permutation=True)
    inverse = np.argsort(mapping, axis=1)  # inverse[s, m(k)] = k
    extended = np.concatenate([inverse, np.full((S, 1), K)], axis=1)  # start row / remainder column stay

    out = dict(samples)
    new = {sites.states: np.take_along_axis(mapping, flat[sites.states].reshape(S, -1), axis=1)}
    new[sites.trans] = _permute(_permute(flat[sites.trans], extended, 1), extended, 2)
    if sites.beta is not None:
        new[sites.beta] = _permute(flat[sites.beta], extended, 1)
    for k in sites.params:
        new[k] = _permute(flat[k], inverse, 1)
    for k, v in new.items():
        out[k] = jnp.asarray(v.reshape(np.shape(samples[k])).astype(np.asarray(samples[k]).dtype))
    if return_permutations:
        return out, mapping.reshape(lead + (K,))
    return out


# ============================================================================ point estimate
class PointSegmentation(NamedTuple):
    """Result of :func:`point_segmentation`.

    labels : ``(T,)`` or ``(N, T)`` int64 cluster labels ``0, 1, ...`` in order of first
        appearance (``-1`` at unlabelled steps)
    expected_loss : the posterior expected loss of ``labels`` (VI in nats, or Binder's as the
        expected fraction of disagreeing pairs)
    num_clusters : the number of clusters
    """

    labels: np.ndarray
    expected_loss: float
    num_clusters: int


def _compact(labels: np.ndarray) -> np.ndarray:
    """Relabel every row of ``(S, n)`` non-negative labels to ``0..k-1`` (order of first appearance)."""
    out = np.empty_like(labels)
    for s in range(labels.shape[0]):
        _, first, inverse = np.unique(labels[s], return_index=True, return_inverse=True)
        rank = np.empty(first.size, np.int64)
        rank[np.argsort(first)] = np.arange(first.size)
        out[s] = rank[inverse]
    return out


def _loss_terms(loss: str, n: int, xlogy_fn=jax_xlogy):
    """``(g, Z)`` of the loss (module docstring): ``g(x) = x log x`` and ``Z = n`` for VI,
    ``g(x) = x (x - 1) / 2`` and ``Z = n (n - 1) / 2`` for Binder."""
    if loss == "vi":
        return (lambda x: xlogy_fn(x, x)), float(n)
    return (lambda x: 0.5 * x * (x - 1.0)), max(n * (n - 1) / 2.0, 1.0)


def _expected_loss_host(c: np.ndarray, draws: np.ndarray, weights: np.ndarray, loss: str) -> float:
    """Exact ``sum_s w_s L(c, draws[s])`` in float64 (``c (n,)``, ``draws (S, n)``, compact labels)."""
    S, n = draws.shape
    g, Z = _loss_terms(loss, n, scipy_xlogy)
    kc, kd = int(c.max()) + 1, int(draws.max()) + 1
    sizes = np.bincount(c, minlength=kc).astype(float)
    draw_sizes = np.stack([np.bincount(d, minlength=kd) for d in draws]).astype(float)
    joint = np.bincount(((np.arange(S)[:, None] * kc + c[None, :]) * kd + draws).ravel(),
                        minlength=S * kc * kd).reshape(S, kc * kd).astype(float)
    total = g(sizes).sum() + weights @ g(draw_sizes).sum(1) - 2.0 * (weights @ g(joint).sum(1))
    return float(max(total, 0.0) / Z)


@partial(jax.jit, static_argnames=("loss", "max_clusters", "num_draw_labels", "max_sweeps"))
def _search(keys, starts, draws, weights, loss: str, max_clusters: int, num_draw_labels: int, max_sweeps: int):
    """Greedy sweeps from every start (module docstring, step 2): ``(labels (R, n), sweeps (R,))``.

    ``starts (R, n)`` int32 labels in ``[-1, max_clusters)`` (``-1``: not yet allocated),
    ``draws (S, n)`` int32 compact labels in ``[0, K_draws)``, ``weights (S,)`` summing to 1.
    """
    S, n = draws.shape
    g, _ = _loss_terms(loss, n)
    dtype = weights.dtype
    clusters = jnp.arange(max_clusters)
    rows = jnp.arange(S)

    def run(args):
        key, c = args
        valid = c >= 0
        cc = jnp.where(valid, c, max_clusters)  # a trash cluster for unallocated items
        sizes = jnp.zeros(max_clusters + 1, jnp.int32).at[cc].add(1)[:max_clusters]
        joint = jnp.zeros((S, max_clusters + 1, num_draw_labels), jnp.int32)
        joint = joint.at[rows[:, None], cc[None, :], draws].add(1)[:, :max_clusters]

        def move(i, carry):
            c, sizes, joint, order, changed = carry
            t = order[i]
            k0 = c[t]
            j = draws[:, t]
            had = k0 >= 0
            k0c = jnp.maximum(k0, 0)
            dec = had.astype(jnp.int32)
            sizes = sizes.at[k0c].add(-dec)
            joint = joint.at[rows, k0c, j].add(-dec)
            n_k = sizes.astype(dtype)
            m_k = joint[rows[:, None], clusters[None, :], j[:, None]].astype(dtype)  # (S, K_max)
            delta = (g(n_k + 1.0) - g(n_k)) - 2.0 * (weights @ (g(m_k + 1.0) - g(m_k)))
            empty = sizes == 0
            first_empty = jnp.argmax(empty)
            allowed = ~empty | (clusters == first_empty) | (had & (clusters == k0c))
            cost = jnp.where(allowed, delta, jnp.inf)
            best = jnp.argmin(cost)
            new = jnp.where(had & (cost[k0c] <= cost[best]), k0c, best).astype(jnp.int32)
            sizes = sizes.at[new].add(1)
            joint = joint.at[rows, new, j].add(1)
            return c.at[t].set(new), sizes, joint, order, changed | (new != k0)

        def sweep(state):
            c, sizes, joint, key, _, it = state
            key, sub = random.split(key)
            order = random.permutation(sub, n)
            c, sizes, joint, _, changed = lax.fori_loop(0, n, move, (c, sizes, joint, order, False))
            return c, sizes, joint, key, changed, it + 1

        state = (c, sizes, joint, key, True, 0)
        c, _, _, _, _, it = lax.while_loop(lambda s: s[4] & (s[5] < max_sweeps), sweep, state)
        return c, it

    return lax.map(run, (keys, starts))


def _prepare_draws(draws, lengths, weights, what="draws"):
    """``(compact (S, n), labelled (M,), layout, weights (S,))`` of a set of labellings."""
    labels, layout = _step_labels(draws, lengths, what)
    S = labels.shape[0]
    labelled = labels[0] >= 0
    if np.any((labels >= 0) != labelled[None, :]):
        raise ValueError(f"`{what}`: every draw must label the same steps (negative = unlabelled in all of them).")
    if not np.any(labelled):
        raise ValueError(f"`{what}` labels no step.")
    if weights is None:
        w = np.full(S, 1.0 / S)
    else:
        w = np.asarray(weights, dtype=float)
        if w.shape != (S,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"`weights` must be {S} non-negative finite numbers (not all 0), got shape {w.shape}.")
        w = w / w.sum()
    return _compact(labels[:, labelled]), labelled, layout, w


def expected_partition_loss(labels, draws, loss: str = "vi", *, lengths=None, weights=None) -> float:
    r"""Posterior expected loss ``sum_s w_s L(labels, draws[s])`` of a segmentation (module docstring).

    Args:
        labels: ``(T,)`` or ``(N, T)`` candidate segmentation (labels are arbitrary integers;
            only the partition matters; negative = unlabelled, and must match the draws').
        draws: ``(S, T)`` or ``(S, N, T)`` sampled state sequences (e.g. ``samples["y_states"]``).
        loss: ``"vi"`` (variation of information, nats) or ``"binder"`` (expected fraction of
            pairs of steps on which the two partitions disagree).
        lengths: ``(N,)`` sequence lengths (padded steps unlabelled).
        weights: ``(S,)`` non-negative weights of the draws (default equal).

    Returns:
        the expected loss (float).
    """
    if loss not in _LOSSES:
        raise ValueError(f"`loss` must be one of {_LOSSES}, got {loss!r}.")
    compact, labelled, layout, w = _prepare_draws(draws, lengths, weights)
    c = as_labels("labels", labels)
    if c.shape != layout:
        raise ValueError(f"`labels` must have shape {layout} (one draw), got {c.shape}.")
    c = c.reshape(-1)
    if lengths is not None:
        c = np.where(labelled, c, -1)
    if np.any((c >= 0) != labelled):
        raise ValueError("`labels` must label exactly the steps that the draws label.")
    return _expected_loss_host(_compact(c[labelled][None])[0], compact, w, loss)


def _merge_deltas(c: np.ndarray, draws: np.ndarray, weights: np.ndarray, loss: str) -> np.ndarray:
    r"""``(k, k)`` change of the (unnormalized) expected loss when clusters ``a < b`` of ``c`` merge
    (``inf`` elsewhere): ``g(n_a + n_b) - g(n_a) - g(n_b) - 2 sum_s w_s sum_j [g(m^s_aj + m^s_bj) -
    g(m^s_aj) - g(m^s_bj)]`` (module docstring), from the counts, in float64."""
    S, n = draws.shape
    g, _ = _loss_terms(loss, n, scipy_xlogy)
    kc, kd = int(c.max()) + 1, int(draws.max()) + 1
    sizes = np.bincount(c, minlength=kc).astype(float)
    joint = np.bincount(((np.arange(S)[:, None] * kc + c[None, :]) * kd + draws).ravel(),
                        minlength=S * kc * kd).reshape(S, kc, kd).astype(float)
    g_joint = g(joint)
    out = np.full((kc, kc), np.inf)
    for a in range(kc - 1):
        both = joint[:, a:a + 1] + joint[:, a + 1:]  # (S, kc - a - 1, kd)
        pair = (g(both) - g_joint[:, a:a + 1] - g_joint[:, a + 1:]).sum(-1)  # (S, kc - a - 1)
        out[a, a + 1:] = g(sizes[a] + sizes[a + 1:]) - g(sizes[a]) - g(sizes[a + 1:]) - 2.0 * (weights @ pair)
    return out


def _merge_clusters(c: np.ndarray, draws: np.ndarray, weights: np.ndarray, loss: str) -> np.ndarray:
    """Merge whole clusters of ``c`` while a merge lowers the expected loss (the best merge first):
    the move that single-step sweeps cannot make when every step of a cluster prefers its own
    cluster but the cluster as a whole does not belong apart.  Returns compact labels."""
    c = _compact(c[None])[0]
    _, Z = _loss_terms(loss, draws.shape[1])
    while c.max() > 0:
        delta = _merge_deltas(c, draws, weights, loss)
        a, b = np.unravel_index(np.argmin(delta), delta.shape)
        if not delta[a, b] < -1e-12 * Z:
            break
        c = _compact(np.where(c == b, a, c)[None])[0]
    return c


def _candidate_partitions(candidates, labelled, layout, lengths) -> np.ndarray:
    """``(R, n)`` compact labels of the candidate partitions ``(R, *layout)`` (or one, ``layout``)."""
    c = as_labels("candidates", candidates)
    if c.shape == layout:
        c = c[None]
    if c.shape[1:] != layout:
        raise ValueError(f"`candidates` must have shape (R,) + {layout} (partitions like one draw), got {c.shape}.")
    c = c.reshape(c.shape[0], -1)
    if lengths is not None:
        c = np.where(labelled[None], c, -1)
    if np.any((c >= 0) != labelled[None]):
        raise ValueError("`candidates` must label exactly the steps that the draws label.")
    return _compact(c[:, labelled])


def point_segmentation(draws, loss: str = "vi", *, lengths=None, weights=None, max_clusters: Optional[int] = None,
                       num_starts: int = 8, max_sweeps: int = 50, seed: int = 0, candidates=None,
                       max_rounds: int = 10) -> PointSegmentation:
    r"""The segmentation that minimizes the posterior expected loss (Bayes point estimate).

    ``argmin_c sum_s w_s L(c, z^(s))`` over partitions ``c`` of the labelled steps, for the
    variation of information (``loss="vi"``, the default; Meila 2007, Wade & Ghahramani 2018)
    or Binder's loss with equal costs (``"binder"``, the expected fraction of pairs of steps
    put together by one and apart by the other; its expectation is a function of the
    co-assignment matrix).  SALSO-style greedy search seeded by the draws, by sequential
    allocation, by the one-cluster partition and by ``candidates`` (e.g. the Viterbi path of a
    posterior draw), with whole-cluster merges between rounds of single-step sweeps (module
    docstring: algorithm and cost).  Label-invariant: the draws need no relabelling, and may come
    from any sampler or from :func:`viterbi` paths.  The result's ``expected_loss`` is the exact
    expected loss of the estimate: compare it with that of any other segmentation
    (:func:`expected_partition_loss`) to see which summarizes the posterior better.

    Args:
        draws: ``(S, T)`` or ``(S, N, T)`` integer labels of ``S`` draws (``samples["y_states"]``;
            flatten chains first); negative = unlabelled (must be the same steps in every draw).
        loss: ``"vi"`` or ``"binder"``.
        lengths: ``(N,)`` sequence lengths for ``(S, N, T)`` draws (padded steps unlabelled).
        weights: ``(S,)`` non-negative weights of the draws (default equal): e.g. exact posterior
            probabilities of enumerated state sequences.
        max_clusters: the most clusters of the estimate (a static size); default ``min(n, 2 k + 10)``
            with ``k`` the most clusters of any draw and ``n`` the number of labelled steps,
            doubled (and the search continued from its solutions) while the best estimate uses
            them all; a value given here is kept (a ``RuntimeWarning`` when the estimate uses
            all of them).
        num_starts: the number of starts (half of them draws, half sequential allocations), on top
            of the one-cluster partition and ``candidates``.
        max_sweeps: the most sweeps per start.
        seed: seed of the visiting orders and of the draws chosen as starts.
        candidates: more starting partitions, ``(R, T)`` / ``(R, N, T)`` (or one, like one draw),
            labelling the same steps as the draws: e.g. the Viterbi path of the posterior-mean
            parameters, or a segmentation from another method.  The estimate's expected loss is
            never above that of a start.
        max_rounds: the most rounds of whole-cluster merges followed by single-step sweeps.

    Returns:
        :class:`PointSegmentation` ``(labels, expected_loss, num_clusters)``.
    """
    if loss not in _LOSSES:
        raise ValueError(f"`loss` must be one of {_LOSSES}, got {loss!r}.")
    num_starts = check_static_int("num_starts", num_starts)
    max_sweeps = check_static_int("max_sweeps", max_sweeps)
    max_rounds = check_static_int("max_rounds", max_rounds)
    compact, labelled, layout, w = _prepare_draws(draws, lengths, weights)
    S, n = compact.shape
    k_draws = int(compact.max()) + 1
    extra = None if candidates is None else _candidate_partitions(candidates, labelled, layout, lengths)
    k_start = max(k_draws, 1 if extra is None else int(extra.max()) + 1)
    automatic = max_clusters is None
    if automatic:
        max_clusters = min(n, 2 * k_start + 10)
    max_clusters = check_static_int("max_clusters", max_clusters)
    if max_clusters < k_start:
        raise ValueError(
            f"`max_clusters` must be >= {k_start}, the most clusters of a draw or candidate (they seed the search), "
            f"got {max_clusters}."
        )
    rng = np.random.default_rng(seed)
    num_seeded = (num_starts + 1) // 2
    picks = np.linspace(0, S - 1, num_seeded).round().astype(int) if S > 1 else np.zeros(num_seeded, int)
    fixed = [compact[picks], np.zeros((1, n), np.int64)]  # draws spread over the sample, one cluster
    if extra is not None:
        fixed.append(extra)
    starts = np.concatenate(fixed + [np.full((num_starts - num_seeded, n), -1)]).astype(np.int32)
    dtype = jnp.result_type(float)
    table = -(-k_draws // 4) * 4  # the count table's draw-label axis, rounded up: fewer compiled shapes

    def sweeps(starts, max_clusters):
        keys = random.split(random.key(int(rng.integers(2**31))), starts.shape[0])
        found, _ = _search(keys, jnp.asarray(starts), jnp.asarray(compact, jnp.int32), jnp.asarray(w, dtype),
                           loss, max_clusters, table, max_sweeps)
        found = _compact(np.asarray(found, np.int64))
        return found, [_expected_loss_host(c, compact, w, loss) for c in found]

    while True:
        found, losses = sweeps(starts, max_clusters)
        best = int(np.argmin(losses))
        if int(found[best].max()) + 1 < max_clusters or max_clusters == n:
            break
        if not automatic:
            warnings.warn(
                f"point_segmentation: the estimate uses all max_clusters={max_clusters} clusters, so a better one "
                "may need more; raise `max_clusters` (or leave it to the default, which grows as needed).",
                RuntimeWarning, stacklevel=2,
            )
            break
        # every slot in use: continue from the solutions found, with twice the room
        max_clusters, starts = min(n, 2 * max_clusters), found.astype(np.int32)
    # whole-cluster merges, then single-step sweeps from the merged partitions, until neither helps
    result, result_loss = found[best], losses[best]
    for _ in range(max_rounds):
        merged = [_merge_clusters(c, compact, w, loss) for c in found]
        if all(m.max() == c.max() for m, c in zip(merged, found)):
            break
        width = max(int(m.max()) + 1 for m in merged)
        found, losses = sweeps(np.stack(merged).astype(np.int32), max(max_clusters, width))
        best = int(np.argmin(losses))
        if losses[best] < result_loss:
            result, result_loss = found[best], losses[best]
    labels = np.full(labelled.shape, -1, np.int64)
    labels[labelled] = result
    return PointSegmentation(labels.reshape(layout), result_loss, int(result.max()) + 1)


# ============================================================================ summaries
#: default share of the labelled steps a state must hold to count in :func:`effective_num_states`
MIN_SHARE = 0.01


def state_shares(states, num_states: Optional[int] = None, *, lengths=None) -> np.ndarray:
    r"""``(S, K)`` share of each draw's labelled steps in each state: ``n^(s)_k / n``.

    ``states``: ``(S, T)`` or ``(S, N, T)`` draws (``samples["y_states"]``, chains flattened;
    negative = unlabelled); ``num_states``: ``K`` (default: the largest label + 1); ``lengths``:
    ``(N,)`` (padded steps unlabelled).
    """
    labels, _ = _step_labels(states, lengths, "states")
    k = int(labels.max()) + 1 if num_states is None else check_static_int("num_states", num_states)
    if labels.max() >= k:
        raise ValueError(f"`states` must hold labels < num_states = {k}, got {labels.max()}.")
    S = labels.shape[0]
    valid = labels >= 0
    counts = np.bincount((np.arange(S)[:, None] * k + np.maximum(labels, 0))[valid], minlength=S * k).reshape(S, k)
    return counts / np.maximum(valid.sum(1, keepdims=True), 1)


def effective_num_states(states, min_share: float = MIN_SHARE, *, lengths=None) -> np.ndarray:
    r"""Number of states holding at least ``min_share`` of the labelled steps, per draw.

    The raw count (``{name}_num_states``: states labelling at least one step) also counts the
    states a sampler opens for a handful of steps and closes again, which the posterior of an
    HDP-HMM always holds some of: with ``T`` steps, a state of 1-2 steps costs little under the
    prior and moves the count, not the segmentation.  The effective count leaves out states
    below ``min_share`` (default 1% of the steps); report it beside the raw count, and the
    number of clusters of :func:`point_segmentation` (which also merges duplicated states).

    Args:
        states: ``(S, T)`` or ``(S, N, T)`` draws (negative = unlabelled).
        min_share: the share of the labelled steps, in ``(0, 1]``.
        lengths: ``(N,)`` sequence lengths (padded steps unlabelled).

    Returns:
        ``(S,)`` int64.
    """
    if not 0.0 < float(min_share) <= 1.0:
        raise ValueError(f"`min_share` must be in (0, 1], got {min_share}.")
    return np.sum(state_shares(states, lengths=lengths) >= min_share, axis=1).astype(np.int64)


def kept_states(states, num_states: int, *, min_occupancy: float = 0.5, min_share: float = MIN_SHARE,
                lengths=None) -> np.ndarray:
    """The labels of the states that hold at least ``min_share`` of the steps in at least
    ``min_occupancy`` of the draws (after relabelling: the states a per-state summary shows;
    the others hold prior draws in most draws).  ``states (S, T)`` or ``(S, N, T)``; ``(k,)``
    int64 in increasing order.  Used by :func:`summary` and :func:`numpyro_hdphmm.to_inference_data`
    so that both show the same states."""
    if not 0.0 <= float(min_occupancy) <= 1.0:
        raise ValueError(f"`min_occupancy` must be in [0, 1], got {min_occupancy}.")
    if not 0.0 < float(min_share) <= 1.0:
        raise ValueError(f"`min_share` must be in (0, 1], got {min_share}.")
    shares = state_shares(states, num_states, lengths=lengths)
    return np.flatnonzero(np.mean(shares >= min_share, axis=0) >= min_occupancy)


def step_agreement(draws, labels, *, lengths=None) -> np.ndarray:
    r"""Per-step posterior probability that a step is in the state a segmentation gives it.

    Every draw is matched to ``labels`` (e.g. ``point_segmentation(...).labels``) by the
    Hungarian algorithm (:func:`numpyro_hdphmm.results.diagnostics.relabel`, maximal overlap), and the
    result at step ``t`` is the fraction of draws whose matched label at ``t`` is ``labels[t]``:
    1 where every draw agrees, low at uncertain change points.  Label-invariant.

    Args:
        draws: ``(S, T)`` or ``(S, N, T)`` draws (negative = unlabelled).
        labels: ``(T,)`` or ``(N, T)``, the segmentation.
        lengths: ``(N,)`` sequence lengths.

    Returns:
        the shape of ``labels``, float64 (NaN at unlabelled steps).
    """
    flat, layout = _step_labels(draws, lengths, "draws")
    ref = as_labels("labels", labels)
    if ref.shape != layout:
        raise ValueError(f"`labels` must have shape {layout} (one draw), got {ref.shape}.")
    ref = ref.reshape(-1)
    if lengths is not None:
        ref = np.where(flat[0] >= 0, ref, -1)
    k = int(max(flat.max(), ref.max())) + 1
    matched, _ = relabel(flat, ref, num_states=k, permutation=True)
    agree = np.mean(np.asarray(matched) == ref[None], axis=0)
    return np.where(ref >= 0, agree, np.nan).reshape(layout)


def _hdp_site_name(samples) -> str:
    """The name given to ``numpyro_hdphmm.sample`` of the one model in ``samples``: the sites
    ``{name}_states`` and ``{name}_trans``, or, where no rows were kept (a dict of the states
    alone), the one site ``{name}_states`` of integers."""
    names = sorted(k[: -len("_trans")] for k in samples if k.endswith("_trans") and f"{k[:-len('_trans')]}_states" in samples)
    if not names:
        names = sorted(k[: -len("_states")] for k in samples
                       if k.endswith("_states") and np.issubdtype(np.asarray(samples[k]).dtype, np.integer))
    if len(names) != 1:
        raise ValueError(f"`name`: the samples hold {len(names)} HDP-HMMs ({names}); pass the name given to "
                         "numpyro_hdphmm.sample.")
    return names[0]


class StateSummary(NamedTuple):
    """Result of :func:`summary`.

    sites : ``{site: (C, D, ...)}`` the draws that were summarized (grouped by chain): every
        site that is not state-indexed, ``{name}_num_states``, and the state-indexed emission
        parameters and ``{name}_beta`` restricted to the kept states (after relabelling)
    stats : ``numpyro.diagnostics.summary`` of the non-constant ``sites`` (mean, std, quantiles,
        ``n_eff``, ``r_hat``)
    states : the (relabelled) labels of the kept states, the order of the state axis of ``sites``
    occupancy : ``(K,)`` the fraction of draws in which each (relabelled) state labels some step
    constant : ``{site: value}`` of the sites whose draws are all equal (no R-hat or ESS exists)
    point : the :class:`PointSegmentation` of the draws (``None`` with ``point_estimate=False``):
        its ``num_clusters`` is the number of states of the Bayes point estimate
    divergences : ``(C,)`` the inner kernel's divergent sweeps per chain (``None`` when unknown:
        the ``diverging`` extra field of an ``MCMC`` object, or the ``diverging`` argument)
    """

    sites: dict
    stats: dict
    states: np.ndarray
    occupancy: np.ndarray
    constant: dict
    point: Optional[PointSegmentation] = None
    divergences: Optional[np.ndarray] = None


def summary(samples, *, name: Optional[str] = None, relabel: bool = True, reference=None, min_occupancy: float = 0.5,
            prob: float = 0.9, lengths=None, extra_sites: Sequence[str] = (), group_by_chain: bool = True,
            min_share: float = MIN_SHARE, point_estimate: bool = True, diverging=None) -> StateSummary:
    r"""A label-switching-proof summary of HDP-HMM draws (what ``mcmc.print_summary()`` would show).

    NumPyro's ``MCMC.print_summary`` summarizes every element of every site: one row per time step
    for ``{name}_states`` (``T`` rows of NaN R-hat: an integer label is not a quantity to
    average) and per-label rows of label-switched sites (R-hat of ``{name}_beta`` well above 1
    although every chain found the same states).  Here:

    * the draws are relabelled first (:func:`relabel_samples`: Stephens' algorithm, or Hungarian
      matching to ``reference``), so that label ``k`` means the same state in every draw and chain;
    * ``{name}_states`` is replaced by ``{name}_num_states`` (label-invariant; use
      :func:`point_segmentation` or :func:`numpyro_hdphmm.viterbi` for the segmentation) and
      ``{name}_trans`` is left out (``(K+1)^2`` entries; read it from the relabelled samples);
    * the number of states three ways: ``{name}_num_states`` (raw: the states labelling some
      step), ``{name}_effective_states`` (the states holding at least ``min_share`` of the steps,
      :func:`effective_num_states`) and, with ``point_estimate``, the number of clusters of the
      Bayes point estimate :func:`point_segmentation` (VI loss; it also merges duplicated states);
    * the emission parameters (and ``extra_sites``) and ``{name}_beta`` are kept for the states
      that hold at least ``min_share`` of the steps in at least ``min_occupancy`` of the draws
      (:func:`kept_states`; the others hold prior draws in most draws);
      :func:`numpyro_hdphmm.to_inference_data` with ``relabel=True`` keeps the same states;
    * sites whose draws are all equal are listed in ``constant`` instead of getting a NaN row.

    Args:
        samples: ``mcmc.get_samples(group_by_chain=True)`` (``(C, D, ...)``), an ``MCMC`` object
            after ``run``, or flat draws ``(S, ...)`` with ``group_by_chain=False``.
        name: the HDP-HMM's name (default: found from the samples).
        relabel: relabel the draws first (``False``: summarize the labels as sampled).
        reference: a reference labelling for the relabelling (see :func:`relabel_samples`).
        min_occupancy: keep the states used in at least this fraction of draws, in ``[0, 1]``.
        prob: the probability mass of the credible interval.
        lengths: ``(N,)`` sequence lengths (padded steps), for the relabelling.
        extra_sites: the user's own state-indexed sites (custom emissions).
        group_by_chain: whether the samples have a leading chain axis.
        min_share: the share of the steps a state must hold to count as effective (and kept).
        point_estimate: compute the point segmentation (its cost: :func:`point_segmentation`).
        diverging: ``(C, D)`` (or ``(S,)``) the inner kernel's ``diverging`` flags, counted in
            ``divergences``; read from an ``MCMC`` object's extra fields by default.
    """
    from numpyro.diagnostics import summary as numpyro_summary

    if hasattr(samples, "get_samples"):
        if diverging is None:
            diverging = samples.get_extra_fields(group_by_chain=True).get("diverging")
        samples, group_by_chain = samples.get_samples(group_by_chain=True), True
    if not isinstance(samples, dict):
        raise ValueError(f"`samples` must be a dict of draws or an MCMC object, got {type(samples).__name__}.")
    if not 0.0 <= float(min_occupancy) <= 1.0:
        raise ValueError(f"`min_occupancy` must be in [0, 1], got {min_occupancy}.")
    samples = {k: np.asarray(v) for k, v in samples.items()}
    if not group_by_chain:
        samples = {k: v[None] for k, v in samples.items()}
    name = _hdp_site_name(samples) if name is None else name
    if relabel:
        samples = relabel_samples(samples, reference, name=name, lengths=lengths, extra_sites=extra_sites)
        samples = {k: np.asarray(v) for k, v in samples.items()}
    sites = find_state_sites(samples, name, extra_sites)
    K = sites.num_states
    flat_states = samples[sites.states].reshape((-1,) + samples[sites.states].shape[2:])
    shares = state_shares(flat_states, K, lengths=lengths)
    used = shares > 0
    occupancy = used.mean(0)
    kept = kept_states(flat_states, K, min_occupancy=min_occupancy, min_share=min_share, lengths=lengths)
    lead = samples[sites.trans].shape[:2]
    out = {}
    state_indexed = {sites.trans, sites.states, sites.beta, *sites.params}
    for k, v in samples.items():
        if k not in state_indexed and k != f"{name}_num_states":
            out[k] = v
    out[f"{name}_num_states"] = used.sum(1).reshape(lead)
    out[f"{name}_effective_states"] = np.sum(shares >= min_share, axis=1).reshape(lead)
    if sites.beta is not None:
        out[sites.beta] = samples[sites.beta][:, :, kept]
    for k in sites.params:
        out[k] = samples[k][:, :, kept]
    constant = {k: v[0, 0] for k, v in out.items() if v.size and np.all(v == v[:1, :1])}
    varying = {k: v for k, v in out.items() if k not in constant}
    stats = numpyro_summary(varying, prob=prob, group_by_chain=True) if varying else {}
    point = point_segmentation(flat_states, lengths=lengths) if point_estimate else None
    divergences = None
    if diverging is not None:
        diverging = np.asarray(diverging, bool)
        diverging = diverging.reshape(lead) if diverging.size == np.prod(lead) else diverging
        divergences = diverging.reshape(diverging.shape[0] if group_by_chain else 1, -1).sum(1)
    return StateSummary(out, stats, kept, occupancy, constant, point, divergences)


def print_summary(samples, *, name: Optional[str] = None, relabel: bool = True, reference=None,
                  min_occupancy: float = 0.5, prob: float = 0.9, lengths=None, extra_sites: Sequence[str] = (),
                  group_by_chain: bool = True, min_share: float = MIN_SHARE,
                  point_estimate: bool = True, diverging=None) -> StateSummary:
    """Print :func:`summary` as ``numpyro.diagnostics.print_summary`` does (the kept states' labels,
    the constant sites and the occupancy below the table) and, for two or more chains, the verdict
    of :func:`chain_agreement` (R-hat of label-invariant quantities), and return the summary.
    Arguments as :func:`summary`; use it instead of ``mcmc.print_summary()`` for HDP-HMM models."""
    from numpyro.diagnostics import print_summary as numpyro_print_summary

    res = summary(samples, name=name, relabel=relabel, reference=reference, min_occupancy=min_occupancy, prob=prob,
                  lengths=lengths, extra_sites=extra_sites, group_by_chain=group_by_chain, min_share=min_share,
                  point_estimate=point_estimate, diverging=diverging)
    varying = {k: v for k, v in res.sites.items() if k not in res.constant}
    if varying:
        numpyro_print_summary(varying, prob=prob, group_by_chain=True)
    what = "relabelled " if relabel else ""
    raw = [k for k in res.sites if k.endswith("_num_states")][0]
    eff = raw[: -len("_num_states")] + "_effective_states"
    line = (f"number of states: raw (labelling some step) mean {np.mean(res.sites[raw]):.2f}, effective (>= "
            f"{min_share:.0%} of the steps) mean {np.mean(res.sites[eff]):.2f}")
    if res.point is not None:
        line += (f", point segmentation {res.point.num_clusters} (expected VI loss "
                 f"{res.point.expected_loss:.3g})")
    print(line)
    print(f"state-indexed sites: the {what}states holding >= {min_share:.0%} of the steps in >= {min_occupancy:.0%} "
          f"of draws, labels {res.states.tolist()} (occupancy {np.round(res.occupancy[res.states], 2).tolist()}); "
          "states and transition rows left out")
    for k, v in res.constant.items():
        print(f"constant over all draws: {k} = {np.asarray(v).tolist()}")
    if group_by_chain:  # two or more chains: do they agree on label-invariant quantities?
        grouped = samples.get_samples(group_by_chain=True) if hasattr(samples, "get_samples") else samples
        site = f"{name or _hdp_site_name(grouped)}_states"
        shape = np.shape(grouped.get(site, ()))
        if len(shape) >= 3 and shape[0] >= 2 and shape[1] >= 4:
            print("chains: " + chain_agreement(samples, name=name, min_share=min_share, lengths=lengths).verdict)
    if res.divergences is not None:
        total = int(res.divergences.sum())
        print(f"inner-kernel divergences after warmup: {total} (per chain {res.divergences.tolist()})"
              + ("; see docs/errors.md, 'Runtime warnings'" if total else ""))
    return res


class ChainAgreement(NamedTuple):
    """Whether the chains of a run agree, on label-invariant quantities only
    (:func:`chain_agreement`): ``table`` (``{quantity: (R-hat, bulk ESS)}`` for ``num_states``,
    ``effective_states``, ``lp`` where given, and ``coassignment``: the largest R-hat and the
    smallest ESS over the co-assignment indicators ``[z_s = z_t]`` of ``num_pairs`` pairs of steps),
    ``agree`` (every R-hat at most ``max_rhat``) and ``verdict`` (one line)."""

    table: dict
    agree: bool
    verdict: str


def chain_agreement(samples, lp=None, *, name: Optional[str] = None, min_share: float = MIN_SHARE, lengths=None,
                    num_pairs: int = 200, max_rhat: float = 1.05, seed: int = 0) -> ChainAgreement:
    r"""Do the chains agree?  R-hat and bulk ESS (ArviZ's rank-normalized split R-hat and
    ``ess``) of quantities that do not depend on the labels, so that label switching cannot
    inflate them and a real disagreement cannot hide behind it:

    * ``num_states``: the states labelling some step, per draw;
    * ``effective_states``: the states holding at least ``min_share`` of the steps
      (:func:`effective_num_states`);
    * ``lp``: the log joint (the kernels' ``lp`` field), where given;
    * ``coassignment``: for ``num_pairs`` pairs of steps ``(s, t)`` drawn at random (``seed``), the
      indicator ``[z_s = z_t]`` per draw; the largest R-hat and smallest ESS over the pairs.  Chains
      whose segmentations differ (one chain joins two regimes another keeps apart) disagree here
      even when their numbers of states match.

    The verdict says which quantities exceed ``max_rhat`` and what to do.  Chains at different
    numbers of states are either a multimodal posterior that no chain crosses or chains that have
    not mixed yet; either way the draws pooled over the chains are not a posterior sample a user can
    trust, and replica exchange (``WeakLimitGibbs(model, tempering=8)``, ``docs/tempering.md``; the
    HDP-HMM, HDP-HSMM and HDP-SLDS model classes) or longer runs are the remedies.

    Args:
        samples: ``mcmc.get_samples(group_by_chain=True)`` (at least the ``{name}_states`` site,
            ``(C, D, T)`` or ``(C, D, N, T)``), or an ``MCMC`` object after ``run`` (then ``lp`` is
            read from its extra fields).
        lp: ``(C, D)`` log joints, or ``None``.
        name: the HDP-HMM's name (default: found from the samples).
        min_share: the share of the steps a state must hold to count as effective.
        lengths: ``(N,)`` sequence lengths (padded steps left out).
        num_pairs: pairs of steps for the co-assignment.
        max_rhat: the R-hat above which the chains disagree.
        seed: the pairs' random seed.

    Returns:
        :class:`ChainAgreement`.
    """
    import arviz as az

    if hasattr(samples, "get_samples"):
        if lp is None:
            lp = samples.get_extra_fields(group_by_chain=True).get("lp")
        samples = samples.get_samples(group_by_chain=True)
    if not isinstance(samples, dict):
        raise ValueError(f"`samples` must be a dict of draws grouped by chain or an MCMC object, got {type(samples).__name__}.")
    name = _hdp_site_name(samples) if name is None else name
    if f"{name}_states" not in samples:
        raise ValueError(f"`samples` must hold the site '{name}_states'.")
    states = np.asarray(samples[f"{name}_states"])
    if states.ndim not in (3, 4) or states.shape[0] < 2 or states.shape[1] < 4:
        raise ValueError("`samples`: the states must be grouped by chain, (chains, draws, T) or (chains, draws, N, T), "
                         f"with at least 2 chains and 4 draws; got shape {states.shape}.")
    if not 0 < float(max_rhat):
        raise ValueError(f"`max_rhat` must be positive, got {max_rhat}.")
    C, D = states.shape[:2]
    flat = states.reshape(C * D, -1).astype(np.int64)
    if lengths is not None:
        lengths = np.asarray(lengths)
        steps = np.arange(states.shape[-1])
        valid = (steps[None, :] < lengths[:, None]).reshape(-1) if states.ndim == 4 else steps < lengths.reshape(-1)[0]
        flat = np.where(valid[None, :], flat, -1)
    table = {}

    def row(x):
        x = np.asarray(x, np.float64).reshape(C, D)
        if np.all(x == x.flat[0]):  # constant in every chain: they agree trivially
            return 1.0, float(C * D)
        return float(az.rhat(x)), float(az.ess(x))

    table["num_states"] = row([len(np.unique(d[d >= 0])) for d in flat])
    table["effective_states"] = row(effective_num_states(flat, min_share))
    if lp is not None:
        table["lp"] = row(lp)
    labelled = np.flatnonzero(np.all(flat >= 0, axis=0))
    if labelled.size >= 2:
        rng = np.random.default_rng(seed)
        a = rng.choice(labelled, num_pairs)
        b = rng.choice(labelled, num_pairs)
        keep = a != b
        pairs = [row(flat[:, i] == flat[:, j]) for i, j in zip(a[keep], b[keep])]
        if pairs:
            table["coassignment"] = (max(p[0] for p in pairs), min(p[1] for p in pairs))
    bad = [k for k, (r, _) in table.items() if not r <= max_rhat]
    if not bad:
        verdict = (f"the {C} chains agree: R-hat <= {max_rhat} for "
                   f"{', '.join(table)} (smallest bulk ESS {min(e for _, e in table.values()):.0f}).")
    else:
        verdict = (f"the {C} chains DISAGREE on {', '.join(bad)} (R-hat "
                   f"{', '.join(f'{table[k][0]:.2f}' for k in bad)} > {max_rhat}): they sit in different modes or "
                   "have not mixed, so the pooled draws are not yet a posterior sample. Run longer, or use replica "
                   "exchange (WeakLimitGibbs(model, tempering=8), docs/tempering.md), and compare the chains' "
                   "segmentations (nh.point_segmentation per chain).")
    return ChainAgreement(table, not bad, verdict)
