"""The protocol every emission family implements.

An emission family is a conjugate prior ``p(theta | lambda)`` together with a likelihood
``f(y | theta)``.  One object holds the prior hyperparameters ``lambda``; the posterior given
sufficient statistics is again an object of the same class whose hyperparameters carry a
leading batch axis (one entry per state).  Families are JAX pytrees (hyperparameters are the
leaves, sizes and orders the static auxiliary data), so they pass through ``jit``, ``vmap`` and
``jax.eval_shape`` and can be closed over or passed as arguments.

Terminology used by every method:

``y``
    raw observations, shape ``(T, *event_shape)``; NaN marks a missing step.
``x, valid = family.prepare(y)``
    the model's view of the observations: a pytree whose leaves have leading axis ``T`` (for
    most families just ``y`` with NaNs replaced by a harmless placeholder; for the
    autoregressive family ``y`` together with its lagged regressors), and a boolean ``(T,)``
    mask of the steps that carry information.
``stats``
    sufficient statistics: a pytree of weighted sums over time, leading axis ``K`` (one entry
    per state).  Statistics add: the statistics of a union of data sets are the sum.
``weights``
    the weight of each step in each state: a ``(T, K)`` array (soft or scaled weights), or
    :class:`OneHot` (hard labels ``(T,)`` standing for the one-hot matrix, what a sweep has given
    the states).  :meth:`EmissionFamily.statistics` takes either: hard labels go to
    :meth:`EmissionFamily.label_statistics`, whose overrides compute the per-state sums in
    ``O(T)`` rather than the ``O(T K)`` of the matrix (:mod:`numpyro_hdphmm._core.segments`).
``params``
    emission parameters ``theta``: a dict ``{param_name: array}`` with leading axis ``K``.

All array methods are pure and jittable.  ``check_observations`` is the one exception: it runs
on concrete arrays and raises ``ValueError`` naming the argument.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpyro

__all__ = ["EmissionFamily", "OneHot", "as_weights", "state_weights", "emission_site"]

Params = Dict[str, jax.Array]
Stats = Any


def state_weights(states, valid, num_states: int, dtype=None):
    """One-hot ``(T, K)`` weights of the states, zeroed where ``valid`` is False."""
    dtype = dtype or jnp.result_type(float)
    return jax.nn.one_hot(states, num_states, dtype=dtype) * valid[..., None].astype(dtype)


@jax.tree_util.register_pytree_node_class
class OneHot:
    """Hard state labels in place of the ``(T, K)`` one-hot weight matrix they stand for.

    ``labels (T,)`` integers: step ``t`` has weight 1 in state ``labels[t]`` and 0 elsewhere; a
    label outside ``[0, num_states)`` (the kernels use ``num_states`` for a missing step) is a zero
    row.  ``num_states`` is static.  :meth:`dense` is the matrix (as :func:`state_weights`); the
    families' :meth:`EmissionFamily.statistics` and ``update_parameters`` take either form.
    """

    def __init__(self, labels, num_states: int):
        self.labels = labels
        self.num_states = int(num_states)

    @classmethod
    def of_states(cls, states, valid, num_states: int) -> "OneHot":
        """The labels of ``states (...)`` with ``num_states`` where ``valid`` is False (flattened to
        one time axis): the hard form of ``state_weights(states, valid, num_states)`` reshaped to
        ``(-1, num_states)``."""
        labels = jnp.where(jnp.asarray(valid), jnp.asarray(states), num_states)
        return cls(labels.reshape(-1).astype(jnp.int32), num_states)

    @property
    def shape(self):
        return (jnp.shape(self.labels)[0], self.num_states)

    def dense(self, dtype=None) -> jax.Array:
        """The ``(T, K)`` one-hot matrix (zero rows at labels outside ``[0, K)``)."""
        return jax.nn.one_hot(self.labels, self.num_states, dtype=dtype or jnp.result_type(float))

    def tree_flatten(self):
        return (self.labels,), self.num_states

    @classmethod
    def tree_unflatten(cls, num_states, children):
        return cls(children[0], num_states)

    def __repr__(self) -> str:
        return f"OneHot(labels={jnp.shape(self.labels)}, num_states={self.num_states})"


def as_weights(weights, dtype=None) -> jax.Array:
    """``weights`` as a ``(T, K)`` array: :meth:`OneHot.dense` of hard labels, else ``jnp.asarray``
    (``dtype``: the one-hot matrix's float type; an array keeps its own unless given)."""
    if isinstance(weights, OneHot):
        return weights.dense(dtype)
    return jnp.asarray(weights) if dtype is None else jnp.asarray(weights, dtype)


class EmissionFamily:
    """Base class of the conjugate emission families (see the module docstring).

    Subclasses implement the abstract methods below and register themselves as pytrees with
    :func:`jax.tree_util.register_pytree_node_class` (``tree_flatten`` returns the
    hyperparameters as children and the static configuration as auxiliary data).
    """

    #: names of the emission parameters; the model declares the site ``f"{name}_{p}"`` for each
    param_names: Tuple[str, ...] = ()

    # ------------------------------------------------------------------ capabilities
    # What a kernel may do with the family; kernels read these, never the family's type.

    #: closed-form posterior, marginal likelihood and posterior predictive
    #: (:meth:`posterior`, :meth:`log_marginal_likelihood`, :meth:`log_predictive`): the
    #: parameters can be integrated out
    conjugate: bool = False
    #: whether the family implements :meth:`predictive_cache` and :meth:`cached_log_predictive`
    #: (a collapsed sampler then keeps each state's predictive factorized, :class:`~numpyro_hdphmm.emissions.collapsed.CachedStatistics`)
    caches_predictive: bool = False
    #: the parameters are sites the family declares (:meth:`sample_sites`) and a kernel draws
    #: (:meth:`update_parameters`); ``False``: they are the user's own sites, which the kernels'
    #: inner kernel updates (:class:`~numpyro_hdphmm.emissions.CustomEmission`)
    owns_parameters: bool = True
    #: the parameters whose prior is set by the family's own DP concentration
    #: (:attr:`dp_concentration`), e.g. a DP mixture's weights
    dp_concentration_params: Tuple[str, ...] = ()
    #: the prior of every state's parameters is one Dirichlet ``concentration (C,)`` over
    #: ``num_categories`` symbols (with ``with_concentration`` and ``counts`` statistics), which a
    #: model may write as a scalar times a shared base site (the RCD paper's two-level emission
    #: prior, :func:`numpyro_hdphmm.emissions.hierarchical_categorical`); kernels then draw the
    #: base exactly
    dirichlet_base: bool = False
    #: the prior of every state's regression matrix is ``A_k | Sigma_k ~ MN(loc, Sigma_k,
    #: col_precision^{-1})`` (``A_k (D, m)``), whose column precision a model may write as
    #: ``diag(lambda)`` of a Gamma site (automatic relevance determination, Fox et al. 2011); the
    #: family has ``dim`` (``D``), ``num_regressors`` (``m``), ``col_precision_centred``,
    #: ``to_centred_col_precision`` and ``column_quadratic_forms``; kernels that keep the
    #: parameters explicit then draw ``lambda`` exactly
    #: (:mod:`numpyro_hdphmm.infer.moves.column_precision`)
    ard_columns: bool = False
    #: :meth:`sufficient_statistics` is linear in the weights and :meth:`update_parameters` draws
    #: from the conditional given them alone, so that the weights ``b`` (instead of 1) give the
    #: conditional of the likelihood raised to the power ``b`` (exponential families; replica
    #: exchange, :mod:`numpyro_hdphmm.infer.moves.tempering`)
    temperable: bool = True

    @property
    def dp_concentration(self):
        """The concentration of the family's own Dirichlet-process prior (a DP mixture's
        ``sigma``), which a kernel may update exactly (:meth:`update_parameters`'
        ``concentration_prior``); ``None`` for families without one."""
        return None

    def with_dp_concentration(self, value) -> "EmissionFamily":
        """A copy with :attr:`dp_concentration` replaced (families without one: ``self``)."""
        return self

    def collapsed_statistics(self, capacity: int):
        """The per-state statistics a collapsed sampler keeps while it moves one step at a time
        (:mod:`numpyro_hdphmm.emissions.collapsed`): for a conjugate family the sufficient
        statistics and the closed-form posterior predictive.  Raises ``NotImplementedError`` for a
        family whose parameters cannot be integrated out."""
        if not self.conjugate:
            raise NotImplementedError(
                f"{type(self).__name__} has no closed-form posterior predictive, so its parameters cannot be "
                "integrated out by a collapsed sampler."
            )
        from numpyro_hdphmm.emissions.collapsed import CachedStatistics, ConjugateStatistics

        return CachedStatistics(self, capacity) if self.caches_predictive else ConjugateStatistics(self, capacity)

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        """Shape of one observation ``y_t``."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        """Batch shape of the hyperparameters: ``()`` for a prior, ``(K,)`` for ``K`` posteriors."""
        raise NotImplementedError

    @property
    def min_sequence_length(self) -> int:
        """The shortest sequence the family can model: 1 (an autoregression of order ``p`` needs
        ``p + 1``); :func:`numpyro_hdphmm.sample` refuses shorter sequences."""
        return 1

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        """Validate concrete observations ``y`` of shape ``(..., T, *event_shape)``.

        Raises ``ValueError`` naming ``name`` on a wrong trailing shape, on values outside the
        support (negative counts, out-of-range categories, non-unit vectors), or on infinities.
        NaN is allowed: it marks a missing observation.
        """
        raise NotImplementedError

    def clustering_features(self, y):
        """``(N, T, D')`` real features of observations ``y (N, T, *event_shape)`` (NaN marks a
        missing value) whose Euclidean distances the data-driven start's k-means uses
        (:func:`numpyro_hdphmm.infer.plumbing.initialization.cluster_states`).  Default: the observations
        themselves, the event flattened; a family whose values are labels, not magnitudes,
        overrides it (:class:`~numpyro_hdphmm.emissions.Categorical`)."""
        y = jnp.asarray(y)
        dtype = y.dtype if jnp.issubdtype(y.dtype, jnp.inexact) else jnp.result_type(float)
        return y.astype(dtype).reshape(y.shape[0], y.shape[1], -1)

    def prepare(self, y):
        """``y (T, *event_shape) -> (x, valid)``: sanitized observations and the ``(T,)`` mask.

        NaN entries (missing steps) are replaced by a placeholder inside the support so that
        every downstream log density is finite and has finite gradients; ``valid`` is False
        there.  Batched sequences are handled by ``jax.vmap`` over a leading axis.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ conjugate machinery
    def sufficient_statistics(self, x, weights) -> Stats:
        """Weighted sufficient statistics: ``x`` from :meth:`prepare`, ``weights (T, K)``.

        ``weights[t, k]`` is the weight of step ``t`` in state ``k`` (one-hot state indicators
        times the validity mask, see :func:`state_weights`).  Returns a pytree with leading
        axis ``K``.
        """
        raise NotImplementedError

    def label_statistics(self, x, labels, num_states: int) -> Stats:
        """The statistics of hard labels: ``x`` from :meth:`prepare` (leading axis ``T``), ``labels
        (T,)`` integers, a label outside ``[0, num_states)`` a step of no state.  Equal, up to the
        order of the floating-point additions, to ``sufficient_statistics(x, one_hot(labels,
        num_states))``, which is the default; the conjugate families override it with per-state
        sums in ``O(T)`` (:mod:`numpyro_hdphmm._core.segments`) instead of the ``O(T K)`` of the
        one-hot matrix."""
        dtype = jnp.result_type(*(leaf.dtype for leaf in jax.tree_util.tree_leaves(x)
                                  if jnp.issubdtype(leaf.dtype, jnp.floating)), float)
        return self.sufficient_statistics(x, OneHot(labels, num_states).dense(dtype))

    def statistics(self, x, weights) -> Stats:
        """:meth:`sufficient_statistics` of ``weights (T, K)``, or :meth:`label_statistics` of
        :class:`OneHot` labels: the one entry point of the kernels (module docstring, ``weights``)."""
        if isinstance(weights, OneHot):
            return self.label_statistics(x, weights.labels, weights.num_states)
        return self.sufficient_statistics(x, weights)

    def posterior(self, stats) -> "EmissionFamily":
        """The conjugate posterior: a family of the same class, batch shape = that of ``stats``."""
        raise NotImplementedError

    def log_marginal_likelihood(self, stats) -> jax.Array:
        """``log p(x_{assigned to k}) = log int prod_t f(x_t | theta)^{w_tk} p(theta) dtheta``, shape ``(K,)``."""
        raise NotImplementedError

    def predictive_cache(self, stats):
        """Per-state quantities of the posterior predictive computed once from ``stats`` (leading
        axis ``K``), from which :meth:`cached_log_predictive` scores one observation against every
        state without refactorizing (families with ``caches_predictive = True``)."""
        raise NotImplementedError(f"{type(self).__name__} keeps no predictive cache.")

    def cached_log_predictive(self, x, cache) -> jax.Array:
        """:meth:`log_predictive` of ONE observation ``x`` from :meth:`predictive_cache`'s
        ``cache``: ``(K,)``, equal to ``log_predictive(x, stats)`` up to rounding."""
        raise NotImplementedError(f"{type(self).__name__} keeps no predictive cache.")

    def log_predictive(self, x, stats) -> jax.Array:
        """Log posterior predictive density of ONE observation ``x`` (a pytree without a time
        axis, as one row of :meth:`prepare`'s output) given each state's statistics: ``(K,)``.

        Families implement the closed form (e.g. Student-t for Gaussian families), so that the
        chain rule ``sum_t log p(x_t | x_<t) = log p(x_1:T)`` is an independent check.
        """
        raise NotImplementedError

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()) -> Params:
        """Draw ``theta ~ p(theta | lambda)``; leading shape ``sample_shape + batch_shape``."""
        raise NotImplementedError

    def sample_posterior(self, rng_key, stats) -> Params:
        """Draw ``theta_k ~ p(theta | stats_k, lambda)`` for every state: leading axis ``K``."""
        return self.posterior(stats).sample_parameters(rng_key)

    def update_parameters(self, rng_key, x, weights, params: Params, concentration_prior=None):
        """One Gibbs update of the emission parameters given the states: ``(params, concentration)``.

        ``x`` from :meth:`prepare` (time flattened, leading axis ``T``), ``weights (T, K)`` as in
        :meth:`sufficient_statistics` or :class:`OneHot` labels (:meth:`statistics`), ``params`` the current values (leading axis ``K``).  For a
        conjugate family this is the exact draw ``theta_k ~ p(theta | stats_k, lambda)`` and the
        current ``params`` are not used; families with latent structure of their own (e.g.
        :class:`~numpyro_hdphmm.emissions.DPMixture`) override it with a step that leaves
        ``p(theta | x, states)`` invariant.  ``concentration_prior``: ``(shape, rate)`` of a Gamma
        prior on the family's own concentration when a kernel recognized one (else ``None``);
        the second return value is the updated concentration (``None`` for families without one).
        """
        return self.sample_posterior(rng_key, self.statistics(x, weights)), None

    def log_prior(self, params: Params) -> jax.Array:
        """``log p(theta_k | lambda)`` for each state ``k``: shape ``(K,)``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params: Params) -> jax.Array:
        """The ``(T, K)`` matrix ``log f(x_t | theta_k)`` (NOT masked: combine with ``valid``)."""
        raise NotImplementedError

    def pointwise_log_likelihood(self, y, params: Params, states) -> jax.Array:
        """``log f(y_t | theta_{z_t})`` for one sequence, shape ``(T,)``, 0 at missing steps."""
        x, valid = self.prepare(y)
        ll = self.log_likelihoods(x, params)
        picked = jnp.take_along_axis(ll, jnp.asarray(states)[:, None], axis=1)[:, 0]
        return jnp.where(valid, picked, 0.0)

    def sample_observations(self, rng_key, params: Params, states) -> jax.Array:
        """Draw ``y_t ~ f(. | theta_{z_t})`` for one state sequence ``states (T,)``.

        Returns ``(T, *event_shape)``.  Families with temporal dependence (autoregressive)
        override this with a scan.
        """
        raise NotImplementedError

    # ------------------------------------------------------------------ continuing a sequence
    @property
    def num_lags(self) -> int:
        """``p``: how many past observations the density of ``y_t`` conditions on,
        ``f(y_t | theta, y_{t-p:t-1})``.  0 (the default): the observations are independent given
        the states; an autoregression of order ``p``: ``p``.  A forecast
        (:func:`numpyro_hdphmm.forecast`) passes the last ``p`` observed values to
        :meth:`sample_continuation`."""
        return 0

    def sample_continuation(self, rng_key, params: Params, states, lags) -> jax.Array:
        """Draw ``y_{T+1:T+h}`` continuing an observed sequence, for the states ``states (h,)`` of the
        continuation: ``y_{T+s} ~ f(. | theta_{z_{T+s}}, y_{T+s-p:T+s-1})``.

        ``lags (p, *event_shape)`` are the last ``p = num_lags`` values before the continuation,
        most recent first (``lags[j] = y_{T-j}``).  Returns ``(h, *event_shape)``.  Default (a
        family with ``num_lags == 0``): :meth:`sample_observations`, ``lags`` unused.
        """
        return self.sample_observations(rng_key, params, states)

    # ------------------------------------------------------------------ expected statistics
    # Variational inference (numpyro_hdphmm.infer.CollapsedSVI) keeps *expected* statistics: the
    # :meth:`sufficient_statistics` of soft weights ``weights[t, k] = q(z_t = k)`` (fractional
    # counts), averaged over minibatches.  Statistics are sums over time, so they average and
    # scale linearly.  The posterior given such statistics is the variational posterior of the
    # parameters, ``q(theta_k) = p(theta | stats_k, lambda)``; the two methods below are what a
    # local step needs of it.

    def predictive_log_likelihoods(self, x, stats) -> jax.Array:
        """``(T, K)`` log posterior predictive ``log p(x_t | stats_k) = log E_q[f(x_t | theta_k)]``
        of every step given each state's (expected, possibly fractional) statistics.

        This is the zeroth-order collapsed emission term of stochastic collapsed variational
        inference (Wang & Blunsom 2014, eq. 10: ``phi_hat_k(w) ∝ h(w) exp{a_g(lambda_1 + t(w) +
        E[t_k], lambda_2 + 1 + E[C_k])}``, normalized over ``w``), and the plug-in emission of the
        held-out predictive.  ``x`` from :meth:`prepare` (leading axis ``T``).  Default:
        :meth:`log_predictive` mapped over time (the posterior does not depend on ``x`` and is
        computed once); families override it with a cheaper closed form where there is one.
        """
        if not self.conjugate:
            raise NotImplementedError(
                f"{type(self).__name__} has no closed-form posterior predictive given expected statistics."
            )
        return jax.vmap(lambda xt: self.log_predictive(xt, stats))(x)

    def expected_log_likelihoods(self, x, stats) -> jax.Array:
        """``(T, K)`` ``E_q[log f(x_t | theta_k)]`` under ``q(theta_k) = p(theta | stats_k, lambda)``.

        The local step of uncollapsed (mean-field) stochastic variational inference (Hoffman et al.
        2013; Foti et al. 2014 for HMMs): ``q(z)`` is an HMM with emissions ``exp E_q[log f]``.
        ``x`` from :meth:`prepare`.  Every conjugate family implements the closed form.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement expected_log_likelihoods (needed by uncollapsed "
            "stochastic variational inference)."
        )

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int) -> Params:
        """Declare the emission parameters as NumPyro sample sites ``f"{name}_{p}"``.

        Must be called inside a NumPyro model; each site has shape ``(num_states, ...)`` and a
        NumPyro distribution built from the prior (conditionals in order, e.g. the covariance
        before the mean that depends on it).  Returns the parameter dict.
        """
        raise NotImplementedError

    @classmethod
    def weakly_informative(cls, data, **kwargs) -> "EmissionFamily":
        """A data-scaled, weakly informative prior for observations ``data (..., T, *event)``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers
    def __repr__(self) -> str:
        leaves = ", ".join(
            f"{k}={getattr(self, k).shape if hasattr(getattr(self, k), 'shape') else getattr(self, k)}"
            for k in getattr(self, "_hyper_names", ())
        )
        return f"{type(self).__name__}({leaves})"


def emission_site(name: str, fn, **kwargs):
    """``numpyro.sample`` with the site tagged as an emission parameter (kernels look for it)."""
    return numpyro.sample(name, fn, infer={"hdphmm_role": "emission"}, **kwargs)
