r"""Clustering numerics for data-driven starting states: windowed sums along time, k-means with
k-means++ seeding, greedy Bayesian merging and the BIC of the Gaussian HMM a labelling implies,
all with static shapes (pure JAX, jittable).

Used by :mod:`numpyro_hdphmm.infer.plumbing.initialization`; nothing here knows about emission families
"""

from __future__ import annotations

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax, random

from numpyro_hdphmm._core.hmm import hmm_marginal_loglik

__all__ = ["window_sum", "kmeans", "merge_mixture", "hmm_bic"]


def window_sum(values, window: int):
    r"""Centred moving sums along time: ``out[n, t] = sum_{|s - t| <= h} values[n, s]`` with
    ``h = window // 2`` (truncated at the ends of the time axis), for ``values (N, T, ...)``.

    Computed from a cumulative sum (``O(N T)``, no loop over time).  Padded or missing steps
    must be zero in ``values`` (they then add nothing); sequences never mix (axis 0 is kept)."""
    values = jnp.asarray(values)
    half = window // 2
    num_steps = values.shape[1]
    zero = jnp.zeros_like(values[:, :1])
    csum = jnp.concatenate([zero, jnp.cumsum(values, axis=1)], axis=1)  # csum[:, t] = sum_{s < t}
    t = jnp.arange(num_steps)
    hi = jnp.minimum(t + half + 1, num_steps)
    lo = jnp.maximum(t - half, 0)
    return jnp.take(csum, hi, axis=1) - jnp.take(csum, lo, axis=1)


def kmeans(rng_key, points, weights, num_clusters: int, num_iterations: int = 20):
    r"""Weighted k-means (Lloyd's algorithm) with k-means++ seeding (Arthur & Vassilvitskii 2007).

    ``points (M, D)``, ``weights (M,)`` (0: the point is ignored; at least one must be positive).
    Seeding: the first centre is a point drawn with probability ``proportional to w_i``, each
    next one with probability ``proportional to w_i d_i^2`` (``d_i`` the distance to the nearest
    centre so far).  Then ``num_iterations`` rounds of: assign every point to its nearest centre,
    move every centre to the weighted mean of its points (an empty cluster keeps its centre).
    Returns ``labels (M,)`` int32 in ``[0, num_clusters)`` (the nearest centre of every point,
    ignored ones included) and ``centres (num_clusters, D)``."""
    points = jnp.asarray(points)
    dtype = points.dtype
    weights = jnp.asarray(weights, dtype)
    tiny = jnp.finfo(dtype).tiny
    keys = random.split(rng_key, num_clusters)

    def sq_dist(centres):
        return jnp.sum((points[:, None, :] - centres[None, :, :]) ** 2, -1)  # (M, C)

    first = random.categorical(keys[0], jnp.log(jnp.maximum(weights, tiny)))
    centres = jnp.broadcast_to(points[first], (num_clusters,) + points.shape[1:])
    nearest = jnp.sum((points - points[first]) ** 2, -1)

    def seed(c, carry):
        centres, nearest = carry
        logits = jnp.where(weights > 0, jnp.log(jnp.maximum(weights * nearest, tiny)), -jnp.inf)
        # every point coincides with a centre: draw among the weighted points
        logits = jnp.where(jnp.any(weights * nearest > 0), logits, jnp.log(jnp.maximum(weights, tiny)))
        pick = random.categorical(keys[c], logits)
        centres = centres.at[c].set(points[pick])
        return centres, jnp.minimum(nearest, jnp.sum((points - points[pick]) ** 2, -1))

    centres, _ = lax.fori_loop(1, num_clusters, seed, (centres, nearest))

    def lloyd(_, centres):
        labels = jnp.argmin(sq_dist(centres), -1)
        one_hot = jax.nn.one_hot(labels, num_clusters, dtype=dtype) * weights[:, None]
        mass = jnp.sum(one_hot, 0)
        means = (one_hot.T @ points) / jnp.maximum(mass, tiny)[:, None]
        return jnp.where(mass[:, None] > 0, means, centres)

    centres = lax.fori_loop(0, num_iterations, lloyd, centres)
    return jnp.argmin(sq_dist(centres), -1).astype(jnp.int32), centres


def _mixture_log_densities(points, log_w, means, var):
    """``log w_c + log N(x_i | mu_c, diag var_c)``: ``(M, C)`` for ``points (M, D)``, ``log_w (C,)``
    (``-inf`` for inactive components), ``means, var (C, D)``."""
    quad = jnp.sum((points[:, None, :] - means[None]) ** 2 / var[None], -1)
    return log_w - 0.5 * (quad + jnp.sum(jnp.log(2.0 * jnp.pi * var), -1))


def _mixture_em(points, weights, log_w, means, var, floor, num_iterations: int):
    """``num_iterations`` EM steps of a weighted diagonal-Gaussian mixture; inactive components
    (``log_w = -inf``) stay inactive.  Returns ``(log_w, means, var)``."""
    tiny = jnp.finfo(points.dtype).tiny
    active = jnp.isfinite(log_w)

    def step(_, params):
        log_w, means, var = params
        a = _mixture_log_densities(points, log_w, means, var)
        r = jnp.exp(a - jax.nn.logsumexp(a, -1, keepdims=True)) * weights[:, None]  # (M, C)
        mass = jnp.sum(r, 0)
        safe = jnp.maximum(mass, tiny)[:, None]
        new_means = (r.T @ points) / safe
        new_var = jnp.maximum((r.T @ points**2) / safe - new_means**2, floor)
        keep = active & (mass > 0)
        log_w = jnp.where(keep, jnp.log(jnp.maximum(mass, tiny) / jnp.sum(mass)), -jnp.inf)
        return (log_w, jnp.where(keep[:, None], new_means, means), jnp.where(keep[:, None], new_var, var))

    return lax.fori_loop(0, num_iterations, step, (log_w, means, var))


def merge_mixture(points, weights, labels, num_clusters: int, em_iterations: int = 10, min_clusters: int = 1):
    r"""Greedy merging of over-split clusters by the Bayesian information criterion of the whole
    mixture.

    ``points (M, D)``, ``weights (M,)`` (a point's weight is how many observations it counts for;
    0: ignored), ``labels (M,)`` in ``[0, C)``.  The clusters start a mixture of diagonal
    Gaussians (weights, means and variances of the labelled points, variances floored at
    ``1e-3`` of the data's per-dimension variance for lattice-valued features), refined by
    ``em_iterations`` EM steps.  Then, up to ``C - 1`` times: every pair ``(i, j)`` of
    components is scored by the log-likelihood of the mixture in which they are replaced by one
    moment-matched component (``w = w_i + w_j``, ``mu = (w_i mu_i + w_j mu_j) / w``, second moments
    likewise); the best pair's mixture gets ``em_iterations`` EM steps and replaces the current
    one when its BIC is higher, ``LL' - LL > -(2 D + 1)/2 log n`` (one component fewer:
    ``D`` means, ``D`` variances and a weight; ``n = sum w``); otherwise the merging stops.  It
    also stops at ``min_clusters`` components (the data-driven start keeps 2: a sampler that
    moves one step at a time leaves a one-state start only slowly, while it empties a superfluous
    state in a few sweeps).

    Against a test of each pair on its own, the whole mixture sees that two adjacent k-means
    cells of one Gaussian blob are one component (each cell alone is a truncated, flat-topped
    piece that two Gaussians always fit better).  Returns ``labels (M,)`` int32: each point's most
    probable component.  ``O(C^3 M D)`` (``C - 1`` rounds of ``C (C - 1) / 2`` pairs)."""
    points = jnp.asarray(points)
    dtype = points.dtype
    weights = jnp.asarray(weights, dtype)
    tiny = jnp.finfo(dtype).tiny
    num_dims = points.shape[-1]
    n = jnp.maximum(jnp.sum(weights), 1.0)
    centre = jnp.sum(weights[:, None] * points, 0) / n
    floor = 1e-3 * jnp.sum(weights[:, None] * (points - centre) ** 2, 0) / n + tiny
    one_hot = jax.nn.one_hot(labels, num_clusters, dtype=dtype) * weights[:, None]
    mass = jnp.sum(one_hot, 0)
    safe = jnp.maximum(mass, tiny)[:, None]
    means = (one_hot.T @ points) / safe
    var = jnp.maximum((one_hot.T @ points**2) / safe - means**2, floor)
    means = jnp.where(mass[:, None] > 0, means, centre)
    log_w = jnp.where(mass > 0, jnp.log(jnp.maximum(mass, tiny) / n), -jnp.inf)
    params = _mixture_em(points, weights, log_w, means, var, floor, em_iterations)
    ii, jj = (jnp.asarray(a) for a in np.triu_indices(num_clusters, 1))
    penalty = 0.5 * (2 * num_dims + 1) * jnp.log(n)

    def log_lik(params):
        return jnp.sum(weights * jax.nn.logsumexp(_mixture_log_densities(points, *params), -1))

    def merged(params, i, j):
        log_w, means, var = params
        wi, wj = jnp.exp(log_w[i]), jnp.exp(log_w[j])
        w = wi + wj
        mu = (wi * means[i] + wj * means[j]) / w
        second = (wi * (var[i] + means[i] ** 2) + wj * (var[j] + means[j] ** 2)) / w
        return (log_w.at[i].set(jnp.log(w)).at[j].set(-jnp.inf), means.at[i].set(mu),
                var.at[i].set(jnp.maximum(second - mu**2, floor)))

    def one_round(_, carry):
        params, done = carry
        log_w, means, var = params
        a = _mixture_log_densities(points, log_w, means, var)  # (M, C)
        top = jnp.max(a, -1, keepdims=True)
        e = jnp.exp(a - top)  # (M, C); inactive components: 0
        total = jnp.sum(e, -1)
        wi, wj = jnp.exp(log_w[ii]), jnp.exp(log_w[jj])  # (P,)
        w = wi + wj
        mu = (wi[:, None] * means[ii] + wj[:, None] * means[jj]) / jnp.maximum(w, tiny)[:, None]
        second = (wi[:, None] * (var[ii] + means[ii] ** 2) + wj[:, None] * (var[jj] + means[jj] ** 2))
        v = jnp.maximum(second / jnp.maximum(w, tiny)[:, None] - mu**2, floor)  # (P, D)
        b = _mixture_log_densities(points, jnp.log(jnp.maximum(w, tiny)), mu, v)  # (M, P)
        rest = jnp.maximum(total[:, None] - e[:, ii] - e[:, jj], 0.0)
        cand = jnp.sum(weights[:, None] * jnp.logaddexp(top + jnp.log(rest), b), 0)  # (P,)
        cand = jnp.where(jnp.isfinite(log_w[ii]) & jnp.isfinite(log_w[jj]), cand, -jnp.inf)
        best = jnp.argmax(cand)
        proposal = _mixture_em(points, weights, *merged(params, ii[best], jj[best]), floor, em_iterations)
        active = jnp.sum(jnp.isfinite(log_w))
        accept = ((~done) & jnp.isfinite(cand[best]) & (active > min_clusters)
                  & (log_lik(proposal) - log_lik(params) > -penalty))
        params = jax.tree_util.tree_map(lambda new, old: jnp.where(accept, new, old), proposal, params)
        return params, done | ~accept

    params, _ = lax.fori_loop(0, num_clusters - 1, one_round, (params, jnp.zeros((), bool)))
    return jnp.argmax(_mixture_log_densities(points, *params), -1).astype(jnp.int32)


def hmm_bic(features, weights, valid, labels, num_clusters: int):
    r"""The Bayesian information criterion of the Gaussian HMM that a labelling implies: a score
    that compares labellings of the same data made from different features (e.g. window means
    over windows of different lengths).

    ``features (N, T, D)``, ``weights (N, T, D)`` (0 where a value is missing), ``valid (N, T)``
    (steps inside the sequences), ``labels (N, T)`` in ``[0, C)``.  The plug-in HMM: each used
    label a diagonal Gaussian (the mean and variance of its steps' features, variances floored
    at ``1e-3``), the transition matrix and initial distribution the label's transition and start
    frequencies (plus 1/2 for every pair of used labels); its log-likelihood with the states
    summed out (the forward algorithm, :func:`~numpyro_hdphmm._core.hmm.hmm_marginal_loglik`)
    minus ``p / 2 log n``, ``p = K 2 D + K (K - 1) + K - 1`` for ``K`` used labels, ``n`` the valid
    steps.  Returns a scalar."""
    features = jnp.asarray(features)
    dtype = features.dtype
    num_dims = features.shape[-1]
    valid = jnp.asarray(valid, bool)
    one_hot = jax.nn.one_hot(labels, num_clusters, dtype=dtype) * valid[..., None]  # (N, T, C)
    mass = jnp.einsum("ntc,ntd->cd", one_hot, weights)  # (C, D)
    used = jnp.sum(one_hot, (0, 1)) > 0
    safe = jnp.maximum(mass, 1.0)
    mean = jnp.einsum("ntc,ntd->cd", one_hot, weights * features) / safe
    var = jnp.maximum(jnp.einsum("ntc,ntd->cd", one_hot, weights * features**2) / safe - mean**2, 1e-3)
    log_lik = -0.5 * jnp.einsum("ntcd,ntd->ntc", (features[:, :, None, :] - mean) ** 2 / var
                                + jnp.log(2.0 * jnp.pi * var), weights)
    log_lik = jnp.where(used, log_lik, -jnp.inf)
    both = used[:, None] & used[None, :]
    pairs = (valid[:, 1:] & valid[:, :-1]).astype(dtype)[..., None]
    counts = jnp.einsum("ntc,ntd->cd", one_hot[:, :-1] * pairs, one_hot[:, 1:]) + 0.5 * both
    log_trans = jnp.where(both, jnp.log(jnp.maximum(counts, 0.5) / jnp.maximum(jnp.sum(counts, -1, keepdims=True), 1.0)),
                          -jnp.inf)
    first = jnp.sum(one_hot[:, 0], 0) + 0.5 * used
    log_init = jnp.where(used, jnp.log(jnp.maximum(first, 0.5) / jnp.sum(first)), -jnp.inf)
    total = jnp.sum(jax.vmap(lambda ll, m: hmm_marginal_loglik(log_init, log_trans, ll, m))(log_lik, valid))
    k = jnp.sum(used).astype(dtype)
    num_params = k * 2 * num_dims + k * (k - 1) + k - 1
    return total - 0.5 * num_params * jnp.log(jnp.maximum(jnp.sum(valid), 1).astype(dtype))
