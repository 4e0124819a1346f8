r"""Per-state emission statistics for samplers that move one step at a time with the emission
parameters integrated out (direct assignment, Fox et al. Alg. 1 and 3; the restricted collapsed
draw).

A sampler asks the family for its strategy (:meth:`EmissionFamily.collapsed_statistics`) and
then, for each step ``i`` in turn, removes the step from its state's statistics, scores every
instantiated state with the posterior predictive of the step and a new state with the prior
predictive, draws, and adds the step to the chosen state.  The strategy objects are plain Python
objects over jittable functions; the statistics they carry (``est``) are pytrees with leading
axis ``K`` (the capacity), updated in place by index.

Strategies: :class:`ConjugateStatistics` (every conjugate family: sufficient statistics and the
closed-form predictive), :class:`CachedStatistics` (a conjugate family whose predictive needs a
factorization per state, e.g. the Student-t of the normal-inverse-Wishart families: the
factorization is kept beside the statistics and redone only for the states a move changes), the
DP mixture's (:class:`~numpyro_hdphmm.emissions.dp_mixture.MixtureStatistics`,
components integrated out too) and the uncollapsed fallback of custom emissions
(:class:`~numpyro_hdphmm.emissions.custom.ExplicitLikelihoods`).  Every strategy implements the
methods of :class:`CollapsedStatistics`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from numpyro_hdphmm._core.slots import first_free_slot
from numpyro_hdphmm.emissions.base import OneHot, state_weights

__all__ = ["CollapsedStatistics", "ConjugateStatistics", "CachedStatistics", "CachedPredictive", "row_of",
           "add_to_row", "set_row_where", "zero_row", "rows_of", "prior_predictive", "new_state_in_first_free_slot"]


def row_of(tree, i):
    """Row ``i`` (a traced index) of every leaf of ``tree`` (leading axis dropped)."""
    return jax.tree_util.tree_map(lambda a: lax.dynamic_index_in_dim(a, i, keepdims=False), tree)


def add_to_row(stats, k, delta, sign):
    """``stats[k] += sign * delta`` for every leaf (``delta`` has a leading axis of size one)."""

    def one(s, d):
        row = lax.dynamic_index_in_dim(s, k, keepdims=True)
        return lax.dynamic_update_index_in_dim(s, (row + sign * d.astype(s.dtype)).astype(s.dtype), k, 0)

    return jax.tree_util.tree_map(one, stats, delta)


def set_row_where(tree, k, rows, when=True):
    """``tree[k] = rows`` for every leaf where ``when`` (a traced bool; ``rows`` with a leading axis of
    size one; the row is left as it is otherwise: a masked update of one row, not a ``lax.cond``
    that copies ``tree``)."""

    def one(s, r):
        row = lax.dynamic_index_in_dim(s, k, keepdims=True)
        return lax.dynamic_update_index_in_dim(s, jnp.where(when, r.astype(s.dtype), row), k, 0)

    return jax.tree_util.tree_map(one, tree, rows)


def zero_row(stats, k, when=True):
    """``stats[k] = 0`` for every leaf where ``when`` (:func:`set_row_where` of zeros)."""
    return set_row_where(stats, k, jax.tree_util.tree_map(lambda s: jnp.zeros_like(s[:1]), stats), when)


def rows_of(tree, start, size: int):
    """Rows ``start .. start + size - 1`` (``start`` traced, ``size`` static) of every leaf."""
    return jax.tree_util.tree_map(lambda a: lax.dynamic_slice_in_dim(a, start, size, 0), tree)


def _removed_row(stats, k, delta, weight, freed):
    """Row ``k`` of ``stats`` (leading axis one) with a step's ``delta`` (``weight`` 0 or 1)
    removed, cleared where ``freed``."""
    return zero_row(add_to_row(rows_of(stats, k, 1), 0, delta, -weight), 0, freed)


def prior_predictive(family, x, dtype):
    """``log int f(x_i | theta) dH(theta)`` for every step ``i``: ``(steps,)`` (the posterior
    predictive given empty statistics)."""
    prior = family.sufficient_statistics(jax.tree_util.tree_map(lambda a: a[:1], x), jnp.zeros((1, 1), dtype))
    return jax.vmap(lambda xt: family.log_predictive(xt, prior)[0])(x)


def new_state_in_first_free_slot(log_pred_new, active):
    """A new state of a collapsed family goes to the first free slot with the whole new-state
    weight (the slot is arbitrary: the sampler relabels the states afterwards): ``(K,)`` log
    weights, ``-inf`` elsewhere."""
    return jnp.where(jnp.arange(active.shape[0]) == first_free_slot(active), log_pred_new, -jnp.inf)


class CollapsedStatistics:
    """The protocol (every method is pure and jittable; ``est`` is the carried statistics).

    ``relabels``: whether the sampler may relabel the states (False when the parameters are the
    user's sites, which stay with their slots).
    """

    relabels = True

    def delta(self, x_i, dtype):
        """The statistics of one observation ``x_i`` (leading axis of size one), or ``None``."""
        raise NotImplementedError

    def init(self, rng_key, x, valid, states, params, dtype):
        """``est``: the statistics of the current assignment ``states (steps,)`` (time flattened)."""
        raise NotImplementedError

    def precompute(self, x, params, dtype):
        """Per-step quantities computed once per sweep (e.g. the prior predictive ``(steps,)``)."""
        raise NotImplementedError

    def remove(self, est, i, delta, weight, k):
        """``est`` with step ``i`` (weight 0 or 1) removed from state ``k``."""
        raise NotImplementedError

    def free(self, est, k, when=True):
        """``est`` with state ``k``'s statistics cleared (its slot was freed) where ``when`` (a
        traced bool), else ``est`` unchanged."""
        raise NotImplementedError

    def log_predictive(self, est, x_i, pre_i):
        """``(log p(x_i | state k's statistics) (K,), aux)`` for every slot."""
        raise NotImplementedError

    def log_new(self, pre_i, active):
        """``(K,)`` log weight of a new state in each slot (``-inf`` at instantiated slots)."""
        raise NotImplementedError

    def add(self, est, i, delta, weight, k, aux, u):
        """``est`` with step ``i`` added to state ``k`` (``u`` a uniform in ``(0, 1]`` for any
        auxiliary choice, e.g. a mixture component)."""
        raise NotImplementedError

    def draw_parameters(self, rng_key, est, family, x, weights, params, concentration_prior=None):
        """``(params, concentration)``: the emission parameters drawn given the states (for the
        record and for the sites the sampler does not collapse), ``weights (steps, K)``."""
        raise NotImplementedError

    # A move of one step from state ``k_old`` to ``k_new`` that writes ``est`` once, at the end
    # (the restricted collapsed draw's step-wise modes): inside a jitted loop XLA:CPU copies a
    # large ``est`` whenever a version of it is read after it was updated, so the predictive
    # after the removal is computed without writing, and the move is written (or not) at once.
    def removed_predictive(self, est, i, x_i, pre_i, delta, weight, k, freed):
        """``(log p(x_i | state's statistics) (K,), aux)`` as :meth:`log_predictive` of ``est``
        with step ``i`` (``weight`` 0 or 1) removed from state ``k`` and, where ``freed``, ``k``'s
        statistics cleared; ``est`` itself is not changed.  Default: remove, free, predict
        (a strategy overrides it with a form that does not write ``est``)."""
        removed = self.free(self.remove(est, i, delta, weight, k), k, freed)
        return self.log_predictive(removed, x_i, pre_i)

    def moved(self, est, i, delta, weight, k_old, freed, k_new, aux, u, keep):
        """``est`` with step ``i`` moved from ``k_old`` to ``k_new`` (:meth:`remove`, :meth:`free`
        where ``freed``, :meth:`add` with ``aux`` from :meth:`removed_predictive` and the
        uniform ``u``) where ``keep`` (a traced bool), else ``est`` exactly.  Default: the three
        updates and a select of every leaf."""
        new = self.add(self.free(self.remove(est, i, delta, weight, k_old), k_old, freed), i, delta, weight, k_new,
                       aux, u)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), new, est)

    def rebuild(self, est, x, valid, states, dtype):
        """``est`` brought up to date with the current observations ``x`` (flattened, ``valid``)
        and ``states (S,)``, for a sampler that carries ``est`` across calls while the data may
        change between them (a Geweke test redraws ``y``).  Default: ``est`` unchanged (the
        statistics are not a function of the data and states alone)."""
        return est

    def log_predictive_bound(self, x):
        """An upper bound (a Python float, static) of :meth:`log_predictive` for any step of
        the prepared observations ``x``: ``0.0`` when the observations are integers (the
        predictive is then a probability mass), else ``inf`` (a density can exceed one).  Lets a
        move stop early once its acceptance ratio, a product of such factors, can only fall
        (split-merge early rejection, RCD paper Alg. 10)."""
        integer = all(jnp.issubdtype(a.dtype, jnp.integer) for a in jax.tree_util.tree_leaves(x))
        return 0.0 if integer else float("inf")


class ConjugateStatistics(CollapsedStatistics):
    """Emission parameters integrated out: per-state sufficient statistics ``(K, ...)``; the
    predictive is the family's closed-form posterior predictive
    (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.log_predictive`)."""

    def __init__(self, emission, capacity: int):
        self.emission, self.capacity = emission, capacity

    def delta(self, x_i, dtype):
        row = jax.tree_util.tree_map(lambda a: a[None], x_i)
        return self.emission.sufficient_statistics(row, jnp.ones((1, 1), dtype))

    def init(self, rng_key, x, valid, states, params, dtype):
        return self.emission.sufficient_statistics(x, state_weights(states, valid, self.capacity, dtype))

    def precompute(self, x, params, dtype):
        return prior_predictive(self.emission, x, dtype)

    def remove(self, est, i, delta, weight, k):
        return add_to_row(est, k, delta, -weight)

    def free(self, est, k, when=True):
        return zero_row(est, k, when)

    def log_predictive(self, est, x_i, pre_i):
        return self.emission.log_predictive(x_i, est), None

    def log_new(self, pre_i, active):
        return new_state_in_first_free_slot(pre_i, active)

    def add(self, est, i, delta, weight, k, aux, u):
        return add_to_row(est, k, delta, weight)

    def draw_parameters(self, rng_key, est, family, x, weights, params, concentration_prior=None):
        return family.update_parameters(rng_key, x, weights, params)

    def rebuild(self, est, x, valid, states, dtype):
        """The sufficient statistics of the current data (deterministic)."""
        return self.init(None, x, valid, states, None, dtype)

    def removed_predictive(self, est, i, x_i, pre_i, delta, weight, k, freed):
        """The predictive of every state from ``est`` as it is, state ``k``'s recomputed from its
        row with the step removed (cleared where ``freed``)."""
        row = _removed_row(est, k, delta, weight, freed)
        pred = self.emission.log_predictive(x_i, est)
        return pred.at[k].set(self.emission.log_predictive(x_i, row)[0]), None

    def moved(self, est, i, delta, weight, k_old, freed, k_new, aux, u, keep):
        """The two rows computed from their current values and written with one scatter per
        leaf (in place); the same arithmetic as :meth:`remove`, :meth:`free`, :meth:`add`."""
        same = k_old == k_new

        def one(a, d):
            d = d.astype(a.dtype)
            old, new = a[k_old], a[k_new]
            removed = jnp.where(freed, jnp.zeros_like(old), old - weight * d[0])
            added = jnp.where(same, removed, new) + weight * d[0]
            values = jnp.stack([jnp.where(same, added, removed), added])
            values = jnp.where(keep, values, jnp.stack([old, new])).astype(a.dtype)
            return a.at[jnp.stack([k_old, k_new])].set(values)

        return jax.tree_util.tree_map(one, est, delta)


def _set_rows(tree, index, rows):
    """``tree[index] = rows`` for every leaf (``index (n,)`` traced, ``rows`` with leading ``n``)."""
    return jax.tree_util.tree_map(lambda a, r: a.at[index].set(r.astype(a.dtype)), tree, rows)


class CachedPredictive(NamedTuple):
    """``est`` of :class:`CachedStatistics`: ``stats`` the sufficient statistics ``(K, ...)``,
    ``cache`` the family's :meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.predictive_cache` of
    every row ``(K, ...)``, and ``empty`` that of empty statistics ``(1, ...)`` (a freed slot's)."""

    stats: Any
    cache: Any
    empty: Any


class CachedStatistics(ConjugateStatistics):
    """:class:`ConjugateStatistics` with each state's posterior predictive kept factorized
    (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.predictive_cache`).  Scoring a step
    against all ``K`` states then costs matrix-vector products
    (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.cached_log_predictive`), and a move
    refactorizes the one or two states whose statistics it changes, instead of all ``K`` at every
    step (for the autoregressive family on motion capture, ``K = 30``, two Cholesky factorizations
    per step instead of about ninety).  The same predictive, so the same law of every draw; the
    numbers agree with :class:`ConjugateStatistics` up to rounding."""

    def init(self, rng_key, x, valid, states, params, dtype):
        """The statistics of the hard labels (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.label_statistics`,
        ``O(T)``: as :class:`ConjugateStatistics`'s one-hot sums up to the order of the additions)
        and the predictive of every row."""
        stats = self.emission.statistics(x, OneHot.of_states(states, valid, self.capacity))
        empty = jax.tree_util.tree_map(lambda a: jnp.zeros_like(a[:1]), stats)
        return CachedPredictive(stats, self.emission.predictive_cache(stats), self.emission.predictive_cache(empty))

    def _with_row(self, est, stats, k):
        """``est`` with statistics ``stats`` and the cache of row ``k`` recomputed from them."""
        row = self.emission.predictive_cache(rows_of(stats, k, 1))
        return est._replace(stats=stats, cache=_set_rows(est.cache, jnp.reshape(k, (1,)), row))

    def remove(self, est, i, delta, weight, k):
        return self._with_row(est, add_to_row(est.stats, k, delta, -weight), k)

    def add(self, est, i, delta, weight, k, aux, u):
        return self._with_row(est, add_to_row(est.stats, k, delta, weight), k)

    def free(self, est, k, when=True):
        return est._replace(stats=zero_row(est.stats, k, when), cache=set_row_where(est.cache, k, est.empty, when))

    def log_predictive(self, est, x_i, pre_i):
        return self.emission.cached_log_predictive(x_i, est.cache), None

    def removed_predictive(self, est, i, x_i, pre_i, delta, weight, k, freed):
        """The cached predictive of every state, state ``k``'s recomputed from its row with the
        step removed (cleared where ``freed``)."""
        row = _removed_row(est.stats, k, delta, weight, freed)
        pred = self.emission.cached_log_predictive(x_i, est.cache)
        return pred.at[k].set(self.emission.log_predictive(x_i, row)[0]), None

    def moved(self, est, i, delta, weight, k_old, freed, k_new, aux, u, keep):
        """:meth:`ConjugateStatistics.moved` on the statistics, and the caches of the two rows
        recomputed from the moved statistics (kept as they were where not ``keep``)."""
        stats = super().moved(est.stats, i, delta, weight, k_old, freed, k_new, aux, u, keep)
        index = jnp.stack([k_old, k_new])
        rows = self.emission.predictive_cache(jax.tree_util.tree_map(lambda a: a[index], stats))
        rows = jax.tree_util.tree_map(lambda new, c: jnp.where(keep, new, c[index]), rows, est.cache)
        return est._replace(stats=stats, cache=_set_rows(est.cache, index, rows))

    def rebuild(self, est, x, valid, states, dtype):
        """The statistics and caches of the current data (deterministic)."""
        return self.init(None, x, valid, states, None, dtype)
