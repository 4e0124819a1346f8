r"""Label-invariant comparisons and summaries of sampled state sequences.

HDP-HMM posteriors are invariant to permutations of the state labels (label switching), so
draws are compared to a reference or to one another only through label-invariant quantities:

====================================  ============================================================
function                              what it computes
====================================  ============================================================
:func:`relabel`                       optimal (Hungarian) matching of estimated labels to reference
:func:`hamming_distance`              normalized Hamming distance after optimal relabelling
:func:`mutual_information`            mutual information (nats) / NMI between two labellings
:func:`adjusted_rand_index`           scikit-learn's adjusted Rand index (the ``metrics`` extra)
:func:`adjusted_mutual_information`   scikit-learn's adjusted mutual information (``metrics``)
:func:`coassignment_matrix`           ``P(z_s = z_t)`` over draws, ``(T, T)``
:func:`num_states`                    number of distinct states in each draw
====================================  ============================================================

Conventions: a labelling is an integer array ``(..., T)`` (leading axes are draws or other
batch axes); negative entries (``-1``, the padding of :func:`numpyro_hdphmm.datasets.load_mocap6`)
mark steps that carry no label and are left out of every count.  Everything here is
NumPy/SciPy on the host.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import xlogy

__all__ = [
    "relabel",
    "hamming_distance",
    "mutual_information",
    "adjusted_rand_index",
    "adjusted_mutual_information",
    "coassignment_matrix",
    "num_states",
]


# ---------------------------------------------------------------------------------- helpers
def as_labels(name: str, value, min_ndim: int = 1) -> np.ndarray:
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
def _soft_overlap(s2: np.ndarray, w: np.ndarray, L: int) -> np.ndarray:
    """``(B, L, R)`` expected overlaps ``sum_{t: s_t = i} w[t, j]`` of labels ``s2 (B, T)`` with the
    per-step weights ``w`` (``(T, R)`` shared by every row, or ``(B, T, R)``), skipping negative
    labels: one ``bincount`` per reference label ``j`` (no ``(B, T, L)`` one-hot array)."""
    B, T = s2.shape
    R = w.shape[-1]
    valid = s2 >= 0
    flat = (np.arange(B)[:, None] * L + s2)[valid]
    out = np.empty((B * L, R))
    for j in range(R):
        col = np.broadcast_to(w[..., j], (B, T))[valid]
        out[:, j] = np.bincount(flat, weights=col, minlength=B * L)
    return out.reshape(B, L, R)


def relabel(states, reference, num_states: Optional[int] = None, *, permutation: bool = False, soft: bool = False):
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

    A SOFT reference (``soft=True``) ``w (..., T, R)`` (e.g. per-step probabilities of ``R`` reference labels,
    such as posterior state marginals) gives the expected overlap ``C[i, j] = sum_{t: z_t = i}
    w[t, j]``: the matching then minimizes the expected Hamming distance to a labelling drawn
    step by step from ``w``.

    With ``permutation=True`` the mapping is a permutation of ``{0, ..., L-1}`` (what
    relabelling state-indexed parameters needs, see :func:`numpyro_hdphmm.relabel_samples`): the
    reference labels must be ``< L``, every Hungarian match is kept (zero-overlap ones too), and
    the labels left over take the unused labels ``R, ..., L-1`` in order of decreasing occupancy.

    Args:
        states: ``(..., T)`` integer estimated labels in ``{0, ..., num_states-1}``; negative
            entries are ignored (and returned unchanged).
        reference: ``(..., T)`` integer reference labels (e.g. ``(T,)`` ground truth), broadcast
            against ``states``; negative entries are ignored.  With ``soft=True``: non-negative
            weights ``(..., T, R)`` (above) whose leading axes broadcast against ``states``.
        num_states: number of estimated labels ``L`` (the length of the mapping); default
            ``max(states) + 1``.
        permutation: return a permutation of ``{0, ..., L-1}`` (above).
        soft: ``reference`` holds per-step weights of the reference labels (above).

    Returns:
        ``(relabelled, mapping)``: ``relabelled`` has the broadcast shape ``(..., T)`` with
        ``relabelled = mapping[states]`` at non-negative entries; ``mapping (..., L)`` gives
        the new label of every estimated label.
    """
    states = as_labels("states", states)
    if soft:
        weights = np.asarray(reference, dtype=float)
        if weights.ndim < 2 or not np.all(np.isfinite(weights)) or np.any(weights < 0):
            raise ValueError(
                f"`reference` as weights must be a finite non-negative array (..., T, R), got shape {weights.shape}."
            )
        s2, _, batch = _pair("states", states, "reference", np.zeros(weights.shape[:-1], np.int64))
        R = weights.shape[-1]
        if int(np.prod(weights.shape[:-2])) == 1:  # one reference shared by every draw
            w = weights.reshape(weights.shape[-2:])
        else:
            w = np.broadcast_to(weights, batch + weights.shape[-2:]).reshape((-1,) + weights.shape[-2:])
    else:
        reference = as_labels("reference", reference)
        s2, r2, batch = _pair("states", states, "reference", reference)
        R = max(int(r2.max()) + 1 if r2.size else 0, 0)
    L = (int(s2.max()) + 1 if s2.size else 1) if num_states is None else int(num_states)
    if num_states is not None and (isinstance(num_states, bool) or L < 1 or L != num_states):
        raise ValueError(f"`num_states` must be a positive integer, got {num_states!r}.")
    if s2.size and s2.max() >= L:
        raise ValueError(f"`states` must be < num_states = {L}, got maximum {s2.max()}.")
    L = max(L, 1)
    if permutation and R > L:
        raise ValueError(
            f"`reference` has {R} labels but a permutation of the {L} estimated labels (`num_states`) can "
            f"take only labels < {L}; pass a reference with labels < {L} or a larger `num_states`."
        )
    if soft:
        overlap = _soft_overlap(s2, w, L)
    else:
        overlap = _contingency(s2, r2, L, max(R, 1)).astype(float)
    occupancy = _contingency(s2, np.zeros_like(s2), L, 1)[..., 0]
    mapping = np.empty((s2.shape[0], L), dtype=np.int64)
    for d in range(s2.shape[0]):
        matched = np.zeros(L, bool)
        if R > 0:
            rows, cols = linear_sum_assignment(overlap[d, :, :R], maximize=True)
            keep = np.ones(rows.size, bool) if permutation else overlap[d, rows, cols] > 0
            mapping[d, rows[keep]] = cols[keep]
            matched[rows[keep]] = True
        rest = np.flatnonzero(~matched)
        rest = rest[np.lexsort((rest, -occupancy[d, rest]))]
        if permutation:
            free = np.setdiff1d(np.arange(L), mapping[d, matched])
            mapping[d, rest] = free[: rest.size]
        else:
            mapping[d, rest] = R + np.arange(rest.size)
    relabelled = np.where(s2 >= 0, np.take_along_axis(mapping, np.maximum(s2, 0), axis=1), s2)
    T = s2.shape[-1]
    return relabelled.reshape(batch + (T,)), mapping.reshape(batch + (L,))


def hamming_distance(states, reference, normalize: bool = True):
    r"""Hamming distance between estimated and reference state sequences after the OPTIMAL
    relabelling of :func:`relabel` (``sum_t [m(z_t) != r_t]``, divided by the number of
    labelled steps when ``normalize``).

    Fox et al. (2007, Sec. VII) relabel GREEDILY (true states in decreasing
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
    ref = np.broadcast_to(as_labels("reference", reference), relabelled.shape)
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
    a = as_labels("a", a)
    b = as_labels("b", b)
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


# ------------------------------------------------------- scikit-learn partition agreement
def _sklearn_metrics():
    try:
        from sklearn import metrics
    except ImportError:
        raise ImportError(
            "adjusted_rand_index / adjusted_mutual_information use scikit-learn: "
            "pip install 'numpyro-hdphmm[metrics]' (or scikit-learn)."
        ) from None
    return metrics


def _per_pair(score, a_name, a, b_name, b):
    """Apply ``score(labels_true, labels_pred)`` to every broadcast pair of rows, over the steps
    where both labels are non-negative (NaN where there is none)."""
    a2, b2, batch = _pair(a_name, as_labels(a_name, a), b_name, as_labels(b_name, b))
    out = np.full(a2.shape[0], np.nan)
    for i in range(a2.shape[0]):
        valid = (a2[i] >= 0) & (b2[i] >= 0)
        if np.any(valid):
            out[i] = score(a2[i, valid], b2[i, valid])
    return out.reshape(batch)


def adjusted_rand_index(a, b):
    r"""Adjusted Rand index (Hubert & Arabie 1985) between two labellings of the same steps.

    ``ARI = (RI - E[RI]) / (max RI - E[RI])`` under the permutation (hypergeometric) model: 1 for
    identical partitions, about 0 for independent ones; invariant to relabelling either side.
    Computed by scikit-learn's ``adjusted_rand_score`` (an optional dependency:
    ``pip install 'numpyro-hdphmm[metrics]'``) over the steps where both labels are
    non-negative.

    Args:
        a, b: ``(..., T)`` integer labellings, broadcast against each other (negative = skip).

    Returns:
        ``(...)`` float64 (NaN where no step is labelled on both sides).
    """
    return _per_pair(_sklearn_metrics().adjusted_rand_score, "a", a, "b", b)


def adjusted_mutual_information(a, b, average_method: str = "arithmetic"):
    r"""Adjusted mutual information (Vinh, Epps & Bailey 2010) between two labellings.

    ``AMI = (MI - E[MI]) / (mean(H(a), H(b)) - E[MI])`` with the expectation under the
    permutation model (:func:`mutual_information` gives the unadjusted MI/NMI, which grows with
    the number of labels even for unrelated partitions); ``average_method`` is scikit-learn's
    (``"arithmetic"``, ``"geometric"``, ``"min"``, ``"max"``).  Computed by scikit-learn's
    ``adjusted_mutual_info_score`` (optional dependency: ``pip install
    'numpyro-hdphmm[metrics]'``) over the steps where both labels are non-negative.

    Args:
        a, b: ``(..., T)`` integer labellings, broadcast against each other (negative = skip).
        average_method: the normalizer's mean.

    Returns:
        ``(...)`` float64 (NaN where no step is labelled on both sides).
    """
    metrics = _sklearn_metrics()
    return _per_pair(
        lambda x, y: metrics.adjusted_mutual_info_score(x, y, average_method=average_method), "a", a, "b", b
    )


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
    draws = as_labels("draws", draws)
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
    draws = as_labels("draws", draws)
    if draws.shape[-1] == 0:
        return np.zeros(draws.shape[:-1], np.int64)
    s = np.sort(np.where(draws >= 0, draws, -1), axis=-1)
    distinct = 1 + np.sum(s[..., 1:] != s[..., :-1], axis=-1)
    return (distinct - (s[..., 0] < 0)).astype(np.int64)
