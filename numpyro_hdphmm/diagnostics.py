r"""Label-invariant summaries of sampled state sequences, held-out likelihood and a plot.

HDP-HMM posteriors are invariant to permutations of the state labels (label switching), so
draws are compared to a reference or to one another only through label-invariant quantities:

=================================  ============================================================
function                           what it computes
=================================  ============================================================
:func:`relabel`                    optimal (Hungarian) matching of estimated labels to reference
:func:`hamming_distance`           normalized Hamming distance after optimal relabelling
:func:`mutual_information`         mutual information (nats) / NMI between two labellings
:func:`coassignment_matrix`        ``P(z_s = z_t)`` over draws, ``(T, T)``
:func:`num_states`                 number of distinct states in each draw
:func:`predictive_log_likelihood`  ``log (1/S) sum_s p(y_heldout | pi^(s), theta^(s))``
:func:`plot_segmentation`          observations coloured by (inferred and true) state
=================================  ============================================================

Conventions: a labelling is an integer array ``(..., T)`` (leading axes are draws or other
batch axes); negative entries (``-1``, the padding of :func:`numpyro_hdphmm.datasets.load_mocap6`)
mark steps that carry no label and are left out of every count.  Everything except
:func:`predictive_log_likelihood` (JAX) is NumPy/SciPy on the host.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from scipy.optimize import linear_sum_assignment
from scipy.special import xlogy

from numpyro_hdphmm._core.hmm import hmm_marginal_loglik

__all__ = [
    "relabel",
    "hamming_distance",
    "mutual_information",
    "coassignment_matrix",
    "num_states",
    "PredictiveLogLikelihood",
    "predictive_log_likelihood",
    "plot_segmentation",
]


# ---------------------------------------------------------------------------------- helpers
def _labels(name: str, value, min_ndim: int = 1) -> np.ndarray:
    """Concrete integer labels as an int64 array (``ValueError`` naming ``name`` otherwise)."""
    arr = np.asarray(value)
    if arr.ndim < min_ndim:
        raise ValueError(f"`{name}` must have at least {min_ndim} dimension(s) (..., T), got shape {arr.shape}.")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"`{name}` must hold integer labels, got dtype {arr.dtype}.")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError(f"`{name}` must hold integer labels, got non-integer values.")
    return arr.astype(np.int64)


def _pair(a_name, a, b_name, b):
    """Broadcast two labellings ``(..., T)`` to a common shape; returns flattened ``(B, T)``."""
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"`{a_name}` and `{b_name}` must have the same number of time steps (last axis), "
            f"got shapes {a.shape} and {b.shape}."
        )
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(
            f"`{a_name}` of shape {a.shape} and `{b_name}` of shape {b.shape} do not broadcast."
        ) from None
    T = shape[-1]
    a2 = np.broadcast_to(a, shape).reshape(-1, T)
    b2 = np.broadcast_to(b, shape).reshape(-1, T)
    return a2, b2, shape[:-1]


def _contingency(a2: np.ndarray, b2: np.ndarray, La: int, Lb: int) -> np.ndarray:
    """``(B, La, Lb)`` counts of ``(a_t, b_t)`` pairs over steps where both are >= 0."""
    B = a2.shape[0]
    valid = (a2 >= 0) & (b2 >= 0)
    draw = np.broadcast_to(np.arange(B)[:, None], a2.shape)
    flat = ((draw * La + a2) * Lb + b2)[valid]
    return np.bincount(flat, minlength=B * La * Lb).reshape(B, La, Lb)


# ---------------------------------------------------------------------------------- relabel
def relabel(states, reference, num_states: Optional[int] = None):
    r"""Relabel estimated state sequences to best agree with a reference labelling.

    For every draw separately, the overlap (confusion) matrix ``C[i, j] = #{t : z_t = i,
    r_t = j}`` is formed and the one-to-one matching of estimated labels ``i`` to reference
    labels ``j`` maximizing the total overlap ``sum C[i, m(i)]`` is found with the Hungarian
    algorithm (Kuhn 1955; ``scipy.optimize.linear_sum_assignment``).  This minimizes the
    Hamming distance over all relabellings.  Matched pairs with zero overlap are dropped.
    Estimated labels left unmatched (more estimated than reference labels, or zero overlap)
    get fresh labels ``R, R+1, ...`` with ``R = max(reference) + 1``, in order of decreasing
    occupancy (ties: smaller original label first), so the result is still a relabelling (an
    injective map) of the estimate.

    Args:
        states: ``(..., T)`` integer estimated labels in ``{0, ..., num_states-1}``; negative
            entries are ignored (and returned unchanged).
        reference: ``(..., T)`` integer reference labels (e.g. ``(T,)`` ground truth),
            broadcast against ``states``; negative entries are ignored.
        num_states: number of estimated labels ``L`` (the length of the mapping); default
            ``max(states) + 1``.

    Returns:
        ``(relabelled, mapping)``: ``relabelled`` has the broadcast shape ``(..., T)`` with
        ``relabelled = mapping[states]`` at non-negative entries; ``mapping (..., L)`` gives
        the new label of every estimated label.
    """
    states = _labels("states", states)
    reference = _labels("reference", reference)
    s2, r2, batch = _pair("states", states, "reference", reference)
    L = (int(s2.max()) + 1 if s2.size else 1) if num_states is None else int(num_states)
    if num_states is not None and (isinstance(num_states, bool) or L < 1 or L != num_states):
        raise ValueError(f"`num_states` must be a positive integer, got {num_states!r}.")
    if s2.size and s2.max() >= L:
        raise ValueError(f"`states` must be < num_states = {L}, got maximum {s2.max()}.")
    L = max(L, 1)
    R = max(int(r2.max()) + 1 if r2.size else 0, 0)
    overlap = _contingency(s2, r2, L, max(R, 1))
    occupancy = _contingency(s2, np.zeros_like(s2), L, 1)[..., 0]
    mapping = np.empty((s2.shape[0], L), dtype=np.int64)
    for d in range(s2.shape[0]):
        matched = np.zeros(L, bool)
        if R > 0:
            rows, cols = linear_sum_assignment(overlap[d], maximize=True)
            keep = overlap[d, rows, cols] > 0
            mapping[d, rows[keep]] = cols[keep]
            matched[rows[keep]] = True
        rest = np.flatnonzero(~matched)
        rest = rest[np.lexsort((rest, -occupancy[d, rest]))]
        mapping[d, rest] = R + np.arange(rest.size)
    relabelled = np.where(s2 >= 0, np.take_along_axis(mapping, np.maximum(s2, 0), axis=1), s2)
    T = s2.shape[-1]
    return relabelled.reshape(batch + (T,)), mapping.reshape(batch + (L,))


def hamming_distance(states, reference, normalize: bool = True):
    r"""Hamming distance between estimated and reference state sequences after the OPTIMAL
    relabelling of :func:`relabel` (``sum_t [m(z_t) != r_t]``, divided by the number of
    labelled steps when ``normalize``).

    Fox et al. (2007, Sec. VII; notes Sec. 2.7) relabel GREEDILY (true states in decreasing
    frequency, each matched to the unused estimated label of largest overlap); the greedy
    matching is one feasible matching, so its distance is never smaller than the optimal
    one used here (they often coincide when the estimate is close to the truth).

    Args:
        states: ``(..., T)`` integer estimated labels (negative = unlabelled, skipped).
        reference: ``(..., T)`` integer reference labels, broadcast against ``states``
            (negative = unlabelled, skipped).
        normalize: divide by the number of steps where both labels are non-negative.

    Returns:
        ``(...)`` float64 distances in ``[0, 1]`` (``normalize``) or int64 counts.
    """
    relabelled, _ = relabel(states, reference)
    ref = np.broadcast_to(_labels("reference", reference), relabelled.shape)
    valid = (relabelled >= 0) & (ref >= 0)
    wrong = np.sum((relabelled != ref) & valid, axis=-1)
    if not normalize:
        return wrong
    n = np.sum(valid, axis=-1)
    return np.where(n > 0, wrong / np.maximum(n, 1), np.nan)


# ------------------------------------------------------------------------ mutual information
def mutual_information(a, b, normalized: bool = False):
    r"""Mutual information between two labellings of the same steps, in nats.

    With the empirical joint frequencies ``p_ij = n_ij / n`` over the steps where both labels
    are non-negative (RCD paper, eq. 37; Cover & Thomas eq. 2.28):

    ``MI = sum_ij p_ij log(p_ij / (p_i. p_.j)) = sum_ij (n_ij / n) log(n n_ij / (n_i. n_.j))``.

    It is invariant to relabelling either side and bounded by ``min(H(a), H(b))``.  With
    ``normalized=True`` the normalized mutual information with the ARITHMETIC-mean
    normalization is returned, ``NMI = MI / ((H(a) + H(b)) / 2)`` (Strehl & Ghosh 2002 use the
    geometric mean; scikit-learn's default is the arithmetic one); it lies in ``[0, 1]`` and is
    1 for identical partitions.  When both labellings are constant (``H(a) = H(b) = 0``) NMI
    is defined as 1.

    Args:
        a, b: ``(..., T)`` integer labellings, broadcast against each other (negative = skip).
        normalized: return NMI instead of MI.

    Returns:
        ``(...)`` float64 (NaN where no step is labelled on both sides).
    """
    a = _labels("a", a)
    b = _labels("b", b)
    a2, b2, batch = _pair("a", a, "b", b)
    La = max(int(a2.max()) + 1 if a2.size else 1, 1)
    Lb = max(int(b2.max()) + 1 if b2.size else 1, 1)
    n_ij = _contingency(a2, b2, La, Lb).astype(float)
    n = n_ij.sum(axis=(1, 2))
    n_i = n_ij.sum(axis=2)
    n_j = n_ij.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = n[:, None, None] * n_ij / (n_i[:, :, None] * n_j[:, None, :])
        mi = np.sum(xlogy(n_ij, np.where(n_ij > 0, ratio, 1.0)), axis=(1, 2)) / n
        mi = np.maximum(mi, 0.0)  # rounding can give -1e-17
        if normalized:
            h_a = -np.sum(xlogy(n_i, n_i / n[:, None]), axis=1) / n
            h_b = -np.sum(xlogy(n_j, n_j / n[:, None]), axis=1) / n
            mean_h = 0.5 * (h_a + h_b)
            mi = np.where(mean_h > 0, mi / np.where(mean_h > 0, mean_h, 1.0), 1.0)
            mi = np.minimum(mi, 1.0)
    mi = np.where(n > 0, mi, np.nan)
    return mi.reshape(batch)


# --------------------------------------------------------------------------- co-assignment
def coassignment_matrix(draws, chunk_elements: int = 2**24):
    r"""Posterior co-assignment (similarity) matrix ``P[s, t] = (1/S) sum_d [z^(d)_s = z^(d)_t]``.

    The probability that steps ``s`` and ``t`` are in the same state, estimated from ``S``
    draws; invariant to relabelling every draw (e.g. Fritsch & Ickstadt 2009 for mixture
    posteriors).  Steps with a negative label are in no state (their rows are 0).

    Computed as ``(1/S) sum_d H_d H_d^T`` with the one-hot ``(T, L)`` matrices ``H_d``, over
    chunks of draws whose one-hot block has at most ``chunk_elements`` entries.  Memory: the
    ``(T, T)`` float64 result (200 MB at ``T = 5000``); fine for ``T`` up to about 5000.

    Args:
        draws: ``(S, T)`` (or ``(T,)``, one draw) integer labels.

    Returns:
        ``(T, T)`` float64, symmetric, diagonal 1 at labelled steps.
    """
    draws = _labels("draws", draws)
    if draws.ndim == 1:
        draws = draws[None]
    if draws.ndim != 2:
        raise ValueError(f"`draws` must have shape (S, T) or (T,), got {draws.shape}.")
    S, T = draws.shape
    L = max(int(draws.max()) + 1 if draws.size else 1, 1)
    out = np.zeros((T, T))
    chunk = max(1, int(chunk_elements) // max(T * L, 1))
    eye = np.eye(L + 1, dtype=np.float32)[:, :L]  # row L (for label -1) is all zeros
    for start in range(0, S, chunk):
        block = draws[start : start + chunk]
        idx = np.where(block >= 0, block, L)
        H = eye[idx].transpose(1, 0, 2).reshape(T, -1)  # (T, c * L)
        out += (H @ H.T).astype(np.float64)
    return out / S


def num_states(draws):
    r"""Number of distinct (non-negative) labels in each draw: ``(..., T) -> (...)`` int64."""
    draws = _labels("draws", draws)
    if draws.shape[-1] == 0:
        return np.zeros(draws.shape[:-1], np.int64)
    s = np.sort(np.where(draws >= 0, draws, -1), axis=-1)
    distinct = 1 + np.sum(s[..., 1:] != s[..., :-1], axis=-1)
    return (distinct - (s[..., 0] < 0)).astype(np.int64)


# ------------------------------------------------------------------ predictive likelihood
class PredictiveLogLikelihood(NamedTuple):
    """Result of :func:`predictive_log_likelihood`.

    log_likelihood : ``()`` ``log (1/S) sum_s exp(per_draw[s])``
    per_draw : ``(S,)`` ``log p(y_heldout | pi^(s), theta^(s))`` (all sequences)
    per_sequence : ``(S, N)`` the same per held-out sequence (``N = 1`` for one sequence)
    num_observed : number of held-out steps that carry an observation (not missing/padding)
    perplexity : ``exp(-log_likelihood / num_observed)`` (meaningful for discrete data)
    """

    log_likelihood: np.ndarray
    per_draw: np.ndarray
    per_sequence: np.ndarray
    num_observed: int
    perplexity: np.ndarray


def predictive_log_likelihood(samples, emission, y_heldout, name: str = "y", lengths=None,
                              renormalize: bool = False, batch_size: Optional[int] = None
                              ) -> PredictiveLogLikelihood:
    r"""Held-out predictive log-likelihood from posterior draws of an HDP-HMM.

    For every draw ``s`` the states are summed out by the forward algorithm (Rabiner 1989
    eq. 103, :func:`numpyro_hdphmm._core.hmm.hmm_marginal_loglik`):

    ``l_s = log p(y_heldout | pi^(s), theta^(s)) = log sum_z pi0(z_1) f(y_1 | theta_{z_1})
    prod_t pi_{z_{t-1} z_t} f(y_t | theta_{z_t})``

    with the start row ``pi0 = trans[K, :K]`` (the LAST row of ``{name}_trans``), the state rows
    ``trans[:K, :K]`` and the emission parameters ``{name}_{p}`` of the draw.  The Monte Carlo
    estimate of the posterior predictive ``p(y_heldout | y_train)`` is
    ``log (1/S) sum_s exp(l_s)`` (log-mean-exp over draws).  Several held-out sequences are
    scored jointly (``l_s`` is the sum over sequences, each started from the start row).

    Unrepresented states: the draw's rows put mass ``trans[j, K]`` on states beyond the
    capacity, whose emission parameters are not instantiated (their predictive would need
    the prior).  By default (``renormalize=False``) this mass is simply dropped: the result is
    the probability of the held-out data AND of never leaving the represented states, a
    lower bound on the predictive of the full model that is exact when the leftover mass is
    negligible.  ``renormalize=True`` instead renormalizes the first ``K`` columns of every
    row (the predictive of the ``K``-state HMM conditioned on staying represented).

    Args:
        samples: dict of posterior draws (``mcmc.get_samples()``) with ``{name}_trans``
            ``(*S, K+1, K+1)`` and each emission parameter ``{name}_{p}`` ``(*S, K, ...)``; any
            number of leading draw axes (e.g. chains x draws), flattened.
        emission: the emission family used by the model (supplies ``param_names``,
            ``prepare`` and ``log_likelihoods``).
        y_heldout: ``(T, *event)`` one sequence or ``(N, T, *event)`` several, padded to a
            common ``T`` and with ``lengths (N,)``; NaN marks a missing observation (skipped,
            the transition is still applied).  For autoregressive emissions the presample
            values of each held-out sequence are zero (the family's ``prepare``).
        name: the name given to :func:`numpyro_hdphmm.sample`.
        lengths: optional ``(N,)`` int sequence lengths.
        renormalize: see above.
        batch_size: draws processed together (``jax.lax.map``); default all at once.

    Returns:
        :class:`PredictiveLogLikelihood`.  ``perplexity = exp(-log_likelihood / n)`` with ``n``
        the number of observed held-out steps (the per-word perplexity of RCD eq. 38-39 for
        categorical data).
    """
    for key in [f"{name}_trans"] + [f"{name}_{p}" for p in emission.param_names]:
        if key not in samples:
            raise ValueError(f"`samples` has no site '{key}' (got keys {sorted(samples)}); check `name`.")
    trans = jnp.asarray(samples[f"{name}_trans"])
    if trans.ndim < 3 or trans.shape[-1] != trans.shape[-2] or trans.shape[-1] < 2:
        raise ValueError(f"`samples['{name}_trans']` must have shape (*S, K+1, K+1), got {trans.shape}.")
    lead = trans.shape[:-2]
    S = int(np.prod(lead))
    K = trans.shape[-1] - 1
    trans = trans.reshape((S, K + 1, K + 1))
    params = {}
    for p in emission.param_names:
        v = jnp.asarray(samples[f"{name}_{p}"])
        if v.shape[: len(lead)] != lead or v.ndim <= len(lead) or v.shape[len(lead)] != K:
            raise ValueError(
                f"`samples['{name}_{p}']` must have shape {lead + (K,)} + parameter shape, got {v.shape}."
            )
        params[p] = v.reshape((S,) + v.shape[len(lead):])

    y = jnp.asarray(y_heldout)
    event_ndim = len(emission.event_shape)
    if y.ndim == event_ndim + 1:
        if lengths is not None:
            raise ValueError("`lengths` is only meaningful for several sequences: `y_heldout` of shape (N, T, *event).")
        y = y[None]
    elif y.ndim != event_ndim + 2:
        raise ValueError(
            f"`y_heldout` must have shape (T, *event) or (N, T, *event) with event shape "
            f"{tuple(emission.event_shape)}, got {y.shape}."
        )
    emission.check_observations(y, "y_heldout")
    N, T = y.shape[:2]
    x, valid = jax.vmap(emission.prepare)(y)
    if lengths is None:
        lengths = jnp.full((N,), T, jnp.int32)
    else:
        ln = np.asarray(lengths)
        if ln.shape != (N,) or not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > T):
            raise ValueError(f"`lengths` must be {N} integers in [1, T={T}], got {ln}.")
        lengths = jnp.asarray(ln, jnp.int32)
    valid = valid & (jnp.arange(T)[None, :] < lengths[:, None])
    num_observed = int(np.sum(np.asarray(valid)))

    log_init = jnp.log(trans[:, K, :K])
    log_trans = jnp.log(trans[:, :K, :K])
    if renormalize:
        log_init = log_init - logsumexp(log_init, axis=-1, keepdims=True)
        log_trans = log_trans - logsumexp(log_trans, axis=-1, keepdims=True)

    def one_draw(args):
        li, la, pr = args
        ll = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(x, pr)  # (N, T, K)
        return hmm_marginal_loglik(li, la, ll, mask=valid, length=lengths)  # (N,)

    per_sequence = jax.lax.map(one_draw, (log_init, log_trans, params), batch_size=batch_size)
    per_draw = jnp.sum(per_sequence, axis=-1)
    total = logsumexp(per_draw) - math.log(S)
    perplexity = jnp.exp(-total / max(num_observed, 1))
    return PredictiveLogLikelihood(
        np.asarray(total), np.asarray(per_draw), np.asarray(per_sequence), num_observed, np.asarray(perplexity)
    )


# ------------------------------------------------------------------------------------ plot
def _state_colors(labels: np.ndarray, palette: np.ndarray, cmap) -> np.ndarray:
    """``(T,)`` labels -> ``(1, T, 4)`` RGBA image (transparent where the label is negative).

    The colour of a label is its rank in ``palette`` (the sorted labels shown in the figure),
    modulo the colormap size, so distinct labels get distinct colours whenever there are at
    most ``cmap.N`` of them.
    """
    rank = np.searchsorted(palette, np.maximum(labels, 0))
    rgba = np.asarray(cmap(np.mod(rank, cmap.N)), dtype=float)
    rgba[labels < 0] = 0.0
    return rgba[None]


def plot_segmentation(observations, states, true_states=None, ax=None, cmap: str = "tab10",
                      alpha: float = 0.35, match_colors: bool = True, title: Optional[str] = None):
    r"""Plot a sequence with its segmentation: the observations as lines over a background
    coloured by the inferred state, and, when ``true_states`` is given, a second row showing
    the true states in the same colours.

    Args:
        observations: ``(T,)`` or ``(T, D)`` (each column a line; NaN rows leave gaps).
        states: ``(T,)`` inferred labels (negative: no colour).
        true_states: optional ``(T,)`` true labels.
        ax: ``None`` (a new figure), one ``Axes`` (the true states then go in a strip inset
            below it) or a sequence of two ``Axes``.
        cmap: a qualitative matplotlib colormap name; the labels shown are coloured in order
            (distinct colours for up to ``cmap.N`` labels, then the colours repeat).
        alpha: opacity of the state colours behind the observations.
        match_colors: relabel ``states`` to ``true_states`` with :func:`relabel` first, so
            matched states share a colour.
        title: optional title of the top panel.

    Returns:
        the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    obs = np.asarray(observations, dtype=float)
    if obs.ndim == 1:
        obs = obs[:, None]
    if obs.ndim != 2:
        raise ValueError(f"`observations` must have shape (T,) or (T, D), got {np.shape(observations)}.")
    T = obs.shape[0]
    states = _labels("states", states)
    if states.shape != (T,):
        raise ValueError(f"`states` must have shape ({T},), got {states.shape}.")
    if true_states is not None:
        true_states = _labels("true_states", true_states)
        if true_states.shape != (T,):
            raise ValueError(f"`true_states` must have shape ({T},), got {true_states.shape}.")
        if match_colors and np.any(states >= 0):
            states, _ = relabel(states, true_states)
    colormap = colormaps[cmap]
    shown = [states] if true_states is None else [states, true_states]
    palette = np.unique(np.concatenate([x[x >= 0] for x in shown] + [np.zeros(1, np.int64)]))

    rows = 1 if true_states is None else 2
    if ax is None:
        fig, axes = plt.subplots(
            rows, 1, sharex=True, figsize=(10, 3 + 0.6 * (rows - 1)),
            gridspec_kw={"height_ratios": [5] + [1] * (rows - 1)}, squeeze=False,
        )
        axes = list(axes[:, 0])
    elif isinstance(ax, (list, tuple, np.ndarray)):
        axes = list(np.ravel(ax))
        if len(axes) < rows:
            raise ValueError(f"`ax` must hold {rows} Axes, got {len(axes)}.")
        fig = axes[0].figure
    else:
        axes = [ax]
        fig = ax.figure
        if rows == 2:
            axes.append(ax.inset_axes([0.0, -0.22, 1.0, 0.12], sharex=ax))

    top = axes[0]
    finite = obs[np.isfinite(obs)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    lo, hi = lo - pad, hi + pad
    top.imshow(_state_colors(states, palette, colormap), aspect="auto", interpolation="nearest",
               extent=(-0.5, T - 0.5, lo, hi), alpha=alpha, zorder=0)
    top.plot(np.arange(T), obs, color="k", lw=0.8, zorder=1)
    top.set_xlim(-0.5, T - 0.5)
    top.set_ylim(lo, hi)
    top.set_ylabel("observation")
    if title:
        top.set_title(title)
    if rows == 2:
        strip = axes[1]
        strip.imshow(_state_colors(true_states, palette, colormap), aspect="auto", interpolation="nearest",
                     extent=(-0.5, T - 0.5, 0, 1))
        strip.set_yticks([])
        strip.set_ylabel("true", rotation=0, ha="right", va="center")
        strip.set_xlim(-0.5, T - 0.5)
        strip.set_xlabel("time step")
    else:
        top.set_xlabel("time step")
    return fig
