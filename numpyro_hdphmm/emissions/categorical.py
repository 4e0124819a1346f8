"""Categorical emissions with a Dirichlet prior (the Dirichlet-multinomial model).

Model, for each state ``k``::

    probs_k ~ Dirichlet(concentration)                       probs_k in the (C-1)-simplex
    y_t | z_t = k ~ Categorical(probs_k)                      y_t in {0, ..., C-1}

References: Murphy (2012), *Machine Learning: A Probabilistic Perspective*, §3.4 (posterior
eq. (3.49), predictive eq. (3.51)) and §5.3.2.2 eq. (5.24) (marginal likelihood).
"""

from __future__ import annotations

import operator
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln, xlogy

from numpyro_hdphmm._core.random import dirichlet
from numpyro_hdphmm._core.segments import clean_labels, label_counts
from numpyro_hdphmm._core.validation import (
    as_data_array,
    check_integer,
    check_log_likelihood_precision,
    check_positive,
    is_concrete,
)
from numpyro_hdphmm.emissions._gamma import as_array, as_float, float_dtype
from numpyro_hdphmm.emissions.base import EmissionFamily, emission_site

__all__ = ["Categorical", "hierarchical_categorical"]


def _check_num_categories(num_categories) -> int:
    try:
        if isinstance(num_categories, bool):
            raise TypeError
        c = operator.index(num_categories)
    except TypeError:
        raise ValueError(f"`num_categories` must be an integer >= 2, got {num_categories!r}.") from None
    if c < 2:
        raise ValueError(f"`num_categories` must be an integer >= 2, got {c}.")
    return c


@jax.tree_util.register_pytree_node_class
class Categorical(EmissionFamily):
    """Categorical emissions over ``num_categories`` symbols with a Dirichlet prior.

    Args:
        num_categories: ``C >= 2`` (static).
        concentration: scalar, ``(C,)`` or ``(*batch, C)`` Dirichlet concentration ``> 0``;
            stored broadcast to ``(*batch, C)``.

    Observations are category indices ``y (T,)``: an integer array, or a float array whose
    NaN entries mark missing steps.  The parameter is ``probs (K, C)``.  Sufficient
    statistics are ``{"counts": (K, C), "total": (K,)}``, the weighted number of times each
    state emitted each category and their row sums (kept so that a one-observation predictive
    costs ``O(K)``, not ``O(K C)``).
    """

    param_names = ("probs",)
    conjugate = True
    _hyper_names = ("concentration",)
    dirichlet_base = True

    def __init__(self, num_categories, concentration=1.0):
        C = _check_num_categories(num_categories)
        concentration = as_array(concentration, "concentration")
        check_positive("concentration", concentration)
        shape = jnp.shape(concentration)
        if len(shape) >= 1 and shape[-1] not in (1, C):
            raise ValueError(
                f"`concentration` must be a scalar or have trailing dimension {C} "
                f"(num_categories), got shape {shape}."
            )
        self.num_categories = C
        conc = as_float(concentration, float_dtype(concentration))
        self.concentration = jnp.broadcast_to(conc, shape[:-1] + (C,))

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.concentration,), (self.num_categories,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        (obj.num_categories,) = aux
        (obj.concentration,) = children
        return obj

    def with_concentration(self, concentration) -> "Categorical":
        """The same family with the Dirichlet concentration replaced (no validation: traced values
        pass, e.g. a shared base drawn inside a sweep)."""
        return self.tree_unflatten((self.num_categories,), (concentration,))

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return ()

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return tuple(jnp.shape(self.concentration)[:-1])

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """Shape ``(..., T)``; integer values in ``[0, C)`` (NaN = missing in float arrays)."""
        y = as_data_array(name, y)
        if jnp.ndim(y) < 1:
            raise ValueError(f"`{name}` must have shape (..., T), got a scalar.")
        if is_concrete(y):
            check_integer(name, np.asarray(y), low=0, high=self.num_categories, allow_nan=True,
                          what=f"category indices 0..{self.num_categories - 1}")
            # the samplers count steps per state in the float type: counts must stay exact
            arr = np.asarray(y)
            n = int(np.sum(~np.isnan(arr))) if arr.dtype.kind == "f" else int(arr.size)
            check_log_likelihood_precision(name, f"{n} observed steps are counted per state", float(n),
                                           np.dtype(self.concentration.dtype), "Split the data into shorter fits, or ")

    def prepare(self, y):
        """``y (T,) -> (x (T,) int32, valid (T,))``; NaN (float input) -> category 0, invalid."""
        y = jnp.asarray(y)
        if jnp.issubdtype(y.dtype, jnp.floating):
            valid = ~jnp.isnan(y)
            x = jnp.where(valid, y, 0).astype(jnp.int32)
        else:
            valid = jnp.ones(y.shape, dtype=bool)
            x = y.astype(jnp.int32)
        return x, valid

    #: the dimension of the categories' embedding for the data-driven start
    CLUSTERING_DIM = 32

    def clustering_features(self, y):
        """``(N, T, 32)`` features of category indices ``y (N, T)`` for the data-driven start's
        k-means: categories are labels, not magnitudes (as numbers, categories 1 and 2 would be
        closer than 1 and 900), so each gets a vector of its own: a fixed random embedding of
        ``C`` independent standard normal vectors in 32 dimensions, whose pairwise distances
        concentrate around one value (Johnson-Lindenstrauss), so that a window's mean is a
        sketch of its histogram of categories.  (One-hot vectors would be exact for few
        categories, but the start standardizes every feature, which would put a rare category
        far from all others.)  Missing values stay NaN."""
        y = jnp.asarray(y)
        observed = ~jnp.isnan(y) if jnp.issubdtype(y.dtype, jnp.floating) else jnp.ones(y.shape, bool)
        index = jnp.where(observed, y, 0).astype(jnp.int32)
        table = np.random.default_rng(0).normal(size=(self.num_categories, self.CLUSTERING_DIM))
        features = jnp.asarray(table, jnp.result_type(float))[index]
        return jnp.where(observed[..., None], features, jnp.nan)

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights):
        """``x (T,)``, ``weights (T, K)`` -> ``{"counts": (K, C), "total": (K,)}``.

        ``counts[k, c] = sum_t weights[t, k] [x_t = c]``, computed as a segment sum of the
        weight rows by category (memory ``O(T K + C K)``; no ``(T, C)`` one-hot matrix).
        """
        weights = jnp.asarray(weights)
        counts = jax.ops.segment_sum(weights, x, num_segments=self.num_categories)  # (C, K)
        return {"counts": counts.T, "total": jnp.sum(weights, 0)}

    def label_statistics(self, x, labels, num_states: int):
        """:meth:`sufficient_statistics` of hard labels ``labels (T,)``: one segment sum over the
        pairs ``(label, symbol)`` (``O(T)``; a label outside ``[0, K)`` adds nothing)."""
        C = self.num_categories
        dtype = jnp.result_type(float)
        pair = clean_labels(labels, num_states) * C + jnp.asarray(x, jnp.int32)  # >= K C: dropped
        counts = jax.ops.segment_sum(jnp.ones(pair.shape, dtype), pair, num_states * C).reshape(num_states, C)
        return {"counts": counts, "total": label_counts(labels, num_states, dtype)}

    def posterior(self, stats) -> "Categorical":
        """``Dirichlet(concentration + counts)`` (MLAPP eq. (3.49)); batch shape ``(K,)``."""
        return self.with_concentration(self.concentration + stats["counts"])

    def log_marginal_likelihood(self, stats) -> jax.Array:
        """Dirichlet-multinomial evidence of the *sequence* (MLAPP eq. (5.24)): ``(K,)``.

        ``log B(alpha + n) - log B(alpha)`` with ``log B(a) = sum_c gammaln(a_c) -
        gammaln(sum_c a_c)``.  No multinomial coefficient: the ordered observations are
        modelled, not their counts.  Valid for fractional counts.
        """
        a = self.concentration
        n = stats["counts"]
        return (
            gammaln(jnp.sum(a, -1))
            - gammaln(jnp.sum(a, -1) + jnp.sum(n, -1))
            + jnp.sum(gammaln(a + n) - gammaln(a), -1)
        )

    def log_predictive(self, x, stats) -> jax.Array:
        """``log (alpha_x + n_x) / (sum_c alpha_c + n)`` (MLAPP eq. (3.51)); ``x`` scalar -> ``(K,)``."""
        a = self.concentration
        picked = jnp.take(a, x, axis=-1) + jnp.take(stats["counts"], x, axis=-1)
        return jnp.log(picked) - jnp.log(jnp.sum(a, -1) + stats["total"])

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``probs ~ Dirichlet(concentration)``: ``sample_shape + (*batch, C)``.

        :func:`numpyro_hdphmm._core.random.dirichlet` normalizes log-Gamma draws, so small
        concentrations do not produce NaN; an entry that underflows (a concentration far below 1,
        e.g. the HCRP emission prior's ``s phi_w`` for a word with no table) is raised to
        ``finfo.tiny`` (``interior=True``), its value to the dtype's resolution, so that the
        Dirichlet density of the draw (the reported ``lp``) stays finite instead of ``+inf`` at an
        exact 0.
        """
        shape = tuple(sample_shape) + self.batch_shape
        probs = dirichlet(rng_key, jnp.broadcast_to(self.concentration, shape + self.concentration.shape[-1:]),
                          interior=True)
        return {"probs": probs}

    def log_prior(self, params) -> jax.Array:
        """``log Dirichlet(probs | concentration)``: ``(K,)``."""
        a = self.concentration
        p = params["probs"]
        log_b = jnp.sum(gammaln(a), -1) - gammaln(jnp.sum(a, -1))
        return jnp.sum(xlogy(a - 1.0, p), -1) - log_b

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``log probs[k, x_t]`` as a ``(T, K)`` gather.

        Departure: probabilities are floored at the dtype's smallest normal number before the
        log, so an underflowed draw gives a very negative but finite log likelihood.
        """
        probs = params["probs"]
        log_p = jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))  # (K, C)
        return jnp.take(log_p.T, x, axis=0)

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ Categorical(probs_{z_t})``: integer ``(T,)``."""
        probs = params["probs"][states]
        log_p = jnp.log(jnp.maximum(probs, jnp.finfo(probs.dtype).tiny))
        return jax.random.categorical(rng_key, log_p, axis=-1)

    # ------------------------------------------------------------------ expected statistics
    def predictive_log_likelihoods(self, x, stats) -> jax.Array:
        """``log (alpha_{x_t} + n_{k x_t}) / (sum_c alpha_c + n_k)`` (MLAPP eq. (3.51); Wang & Blunsom
        eq. 10 for the Dirichlet-categorical), one ``(K, C)`` table gathered by ``x (T,)`` -> ``(T, K)``."""
        conc = self.concentration + stats["counts"]
        log_p = jnp.log(conc) - jnp.log(jnp.sum(conc, -1, keepdims=True))
        return jnp.take(log_p.T, x, axis=0)

    def expected_log_likelihoods(self, x, stats) -> jax.Array:
        """``E_q[log probs_{k x_t}] = psi(alpha_{x_t} + n_{k x_t}) - psi(sum_c alpha_c + n_kc)`` under
        ``q(probs_k) = Dir(alpha + n_k)`` (Blei et al. 2003 eq. 8 form), ``x (T,)`` -> ``(T, K)``."""
        digamma = jax.scipy.special.digamma
        conc = self.concentration + stats["counts"]
        e_log = digamma(conc) - digamma(jnp.sum(conc, -1, keepdims=True))
        return jnp.take(e_log.T, x, axis=0)

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Site ``f"{name}_probs"``: ``Dirichlet``, batch ``(K,)``, event ``(C,)``."""
        conc = jnp.broadcast_to(self.concentration, (num_states, self.num_categories))
        probs = emission_site(f"{name}_probs", dist.Dirichlet(conc))
        return {"probs": probs}

    @classmethod
    def weakly_informative(cls, data, num_categories=None, concentration=0.5) -> "Categorical":
        """A symmetric Dirichlet prior for category indices ``data (..., T)`` (NaN = missing).

        ``num_categories`` defaults to ``max(data) + 1`` (at least 2): categories never seen
        cannot be inferred from the data, so pass it explicitly when the vocabulary is known.
        ``concentration`` defaults to ``0.5`` (the Jeffreys prior of the multinomial), which
        smooths less than the uniform ``1.0`` when ``C`` is large compared with the number of
        steps per state.  ``data=None`` (no data) needs ``num_categories``.
        """
        if data is None:
            if num_categories is None:
                raise ValueError(
                    "Categorical.weakly_informative(None): without data the number of categories is unknown; "
                    "pass `num_categories`."
                )
            return cls(_check_num_categories(num_categories), concentration)
        if not is_concrete(data):  # traced data (jit_model_args, CollapsedSVI, vmap): C cannot come from the values
            if num_categories is None:
                raise ValueError(
                    "`num_categories`: Categorical.weakly_informative got traced data (jit_model_args=True, "
                    "CollapsedSVI, jax.vmap), whose values cannot set the number of categories (a static shape); "
                    "pass `num_categories`."
                )
            return cls(_check_num_categories(num_categories), concentration)
        arr = np.asarray(as_data_array("data", data))
        if arr.ndim < 1:
            raise ValueError("`data` must have shape (..., T), got a scalar.")
        high = None if num_categories is None else _check_num_categories(num_categories)
        check_integer("data", arr, low=0, high=high, allow_nan=True)
        if num_categories is None:
            observed = arr[~np.isnan(arr)] if np.issubdtype(arr.dtype, np.floating) else arr
            if observed.size == 0:
                raise ValueError("`data` has no observed values; pass `num_categories`.")
            num_categories = max(int(observed.max()) + 1, 2)
        return cls(num_categories, concentration)


def hierarchical_categorical(name: str, num_categories, concentration=1.0, base_concentration=1.0) -> Categorical:
    r"""Categorical emissions whose states share a base measure: the two-level (HCRP) emission
    prior of the RCD paper (Sec. 5.1), over a finite symbol set.  Call it inside a model.

    Declares the site ``name``, the shared base ``phi ~ Dir(base_concentration / C, ...)`` (the
    finite form of ``DP(base_concentration, uniform)``), and returns :class:`Categorical` with
    concentration ``concentration * phi``, so that ``probs_k | phi ~ Dir(concentration * phi)``
    (``DP(concentration, phi)`` on ``C`` symbols) for every state: symbols frequent in some states
    become likely in new and rarely visited ones.

    Every MCMC kernel recognizes the site (:attr:`~numpyro_hdphmm.infer.plumbing.discovery.HyperSites.emission_base`)
    and draws ``phi`` exactly each sweep, with the states' emission probabilities integrated out
    (:func:`~numpyro_hdphmm._core.crp.sample_shared_base`); a model that writes the same two lines
    itself is recognized too.  ``concentration`` may be a sample site of the model: a scalar Gamma
    site is drawn exactly too (``HyperSites.emission_scale``), any other goes to the inner kernel.

    Args:
        name: the base's site name.
        num_categories: ``C >= 2``.
        concentration: scalar ``> 0``, the states' concentration around ``phi``.
        base_concentration: scalar ``> 0``, the total mass of ``phi``'s symmetric Dirichlet.
    """
    C = _check_num_categories(num_categories)
    for arg, value in (("concentration", concentration), ("base_concentration", base_concentration)):
        value = as_array(value, arg)
        if jnp.ndim(value) != 0:
            raise ValueError(f"`{arg}` must be a scalar, got shape {jnp.shape(value)}.")
        check_positive(arg, value)
    b0 = as_array(base_concentration, "base_concentration")
    dtype = float_dtype(b0)
    phi = numpyro.sample(name, dist.Dirichlet(jnp.full((C,), as_float(b0, dtype) / C)))
    # a symbol whose share underflowed (Dir(b0 / C) with a large C puts nearly all mass on few
    # symbols) keeps the smallest normal concentration, so that the Dirichlet stays proper
    return Categorical(C, jnp.maximum(as_array(concentration, "concentration") * phi, jnp.finfo(phi.dtype).tiny))
