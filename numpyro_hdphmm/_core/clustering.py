r"""Clustering numerics for data-driven starting states: windowed sums along time, k-means with
k-means++ seeding and greedy Bayesian merging, all with static shapes (pure JAX, jittable).

Used by :mod:`numpyro_hdphmm.infer.initialization`; nothing here knows about emission families
"""

from __future__ import annotations

import jax
import numpy as np
import jax.numpy as jnp
from jax import lax, random

__all__ = ["window_sum", "kmeans", "merge_unimodal"]


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


def _log_normal(x, mean, var):
    return -0.5 * (jnp.log(2.0 * jnp.pi * var) + (x - mean) ** 2 / var)


def merge_unimodal(points, weights, labels, num_clusters: int, num_rounds: int, em_iterations: int = 15):
    r"""Greedy merging of k-means clusters whose union looks like one cluster (an over-split blob).

    ``points (M, D)``, ``weights (M,)``, ``labels (M,)`` in ``[0, C)``.  Each of ``num_rounds``
    rounds, for every pair ``i < j`` of non-empty clusters: project the points of both onto the
    line through their centres, fit one Gaussian and (EM from the two clusters' split,
    ``em_iterations`` steps) a two-component Gaussian mixture to the projections, and compare by
    BIC: ``score_ij = (LL_2 - LL_1) - (3/2) log n_ij`` (two more means/variances and a weight).
    The pair with the lowest score is merged (``j`` into ``i``) when the score is negative: a
    second component does not pay for itself, the two clusters are halves of one.  Variances
    are floored at ``1e-3`` of the pair's variance (lattice-valued features).  Returns the new
    ``labels (M,)`` int32."""
    points = jnp.asarray(points)
    dtype = points.dtype
    weights = jnp.asarray(weights, dtype)
    tiny = jnp.finfo(dtype).tiny
    ii, jj = np.triu_indices(num_clusters, 1)
    ii, jj = jnp.asarray(ii), jnp.asarray(jj)

    def one_round(_, labels):
        one_hot = jax.nn.one_hot(labels, num_clusters, dtype=dtype) * weights[:, None]  # (M, C)
        mass = jnp.sum(one_hot, 0)
        centres = (one_hot.T @ points) / jnp.maximum(mass, tiny)[:, None]
        d = centres[jj] - centres[ii]  # (P, D)
        d = d / jnp.maximum(jnp.linalg.norm(d, axis=-1, keepdims=True), tiny)
        proj = d @ points.T  # (P, M)
        wi, wj = one_hot[:, ii].T, one_hot[:, jj].T  # (P, M)
        w = wi + wj
        n = jnp.maximum(jnp.sum(w, -1), tiny)
        mean = jnp.sum(w * proj, -1) / n
        var = jnp.sum(w * (proj - mean[:, None]) ** 2, -1) / n
        floor = 1e-3 * var + tiny
        var = jnp.maximum(var, floor)
        ll1 = jnp.sum(w * _log_normal(proj, mean[:, None], var[:, None]), -1)

        def em(_, r):  # r: responsibility of component i, (P, M)
            ra, rb = w * r, w * (1.0 - r)
            na, nb = jnp.maximum(jnp.sum(ra, -1), tiny), jnp.maximum(jnp.sum(rb, -1), tiny)
            ma, mb = jnp.sum(ra * proj, -1) / na, jnp.sum(rb * proj, -1) / nb
            va = jnp.maximum(jnp.sum(ra * (proj - ma[:, None]) ** 2, -1) / na, floor)
            vb = jnp.maximum(jnp.sum(rb * (proj - mb[:, None]) ** 2, -1) / nb, floor)
            la = jnp.log(na / n)[:, None] + _log_normal(proj, ma[:, None], va[:, None])
            lb = jnp.log(nb / n)[:, None] + _log_normal(proj, mb[:, None], vb[:, None])
            return jax.nn.sigmoid(la - lb), (la, lb)

        r0 = wi / jnp.maximum(w, tiny)
        r = lax.fori_loop(0, em_iterations, lambda k, r: em(k, r)[0], r0)
        _, (la, lb) = em(0, r)
        ll2 = jnp.sum(w * jnp.logaddexp(la, lb), -1)
        score = (ll2 - ll1) - 1.5 * jnp.log(n)
        ok = (mass[ii] > 0) & (mass[jj] > 0) & jnp.isfinite(score)
        score = jnp.where(ok, score, jnp.inf)
        best = jnp.argmin(score)
        do = score[best] < 0
        return jnp.where(do & (labels == jj[best]), ii[best], labels).astype(jnp.int32)

    return lax.fori_loop(0, num_rounds, one_round, jnp.asarray(labels, jnp.int32))
