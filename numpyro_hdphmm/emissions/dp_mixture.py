r"""Dirichlet-process mixture emissions under the weak-limit approximation (Fox et al., Sec. VI).

Model, for each HMM state ``k`` (Fox et al. eqs. 58-59 with the degree-``L'`` weak limit of
eq. 64; the corrected eq. 63: ``docs/errata.md``, "Sticky HDP-HMM" item 2)::

    psi_k          ~ Dir(sigma/L', ..., sigma/L')          mixture weights over L' components  (64)
    theta_{k,j}    ~ H(lambda)                             j = 1..L', the base family's prior  (59)
    s_t | z_t = k  ~ psi_k                                 component indicator                 (58)
    y_t | z_t, s_t ~ F(theta_{z_t, s_t})                                                       (59)

``H``/``F`` is any conjugate family of :mod:`numpyro_hdphmm.emissions` (the *base*), e.g.
:class:`~numpyro_hdphmm.emissions.GaussianNIW` for Fox et al.'s infinite Gaussian mixtures.

Parameters (leading axis ``K`` = HMM states): ``weights (K, L')`` and every base parameter ``p``
with shape ``(K, L', ...)``.  ``param_names = ("weights",) + base.param_names``: the base names
are kept as they are (sites ``{name}_weights``, ``{name}_mu``, ``{name}_cov`` for a Gaussian
base), which is unambiguous because no base family has a parameter called ``weights``
(construction fails if one does).

The component indicators ``s`` are not a site of the model: the likelihood of a state is the
mixture ``sum_j psi_kj f(y | theta_kj)`` (:meth:`DPMixture.log_likelihoods`), so the states'
FFBS sums them out, and :meth:`DPMixture.update_parameters` draws them given the states as the
auxiliary variables of the weak-limit Gibbs step (Fox et al. Alg. 4; the joint ``(z_t, s_t)`` draw
of eq. 69 is FFBS on the mixture likelihoods followed by ``s_t | z_t``, notes §2.5).

The concentration ``sigma`` may be a constant or a traced value (a user's sample site such as
``sigma = numpyro.sample("sigma", dist.Gamma(1.0, 1.0))``); kernels that recognize such a site
give it the exact auxiliary-variable update of :meth:`DPMixture.update_parameters`.

A mixture has no conjugate closed forms: :meth:`sufficient_statistics`, :meth:`posterior`,
:meth:`log_marginal_likelihood` and :meth:`log_predictive` raise ``NotImplementedError``.
"""

from __future__ import annotations

import operator
from typing import Tuple

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax import random
from jax.scipy.special import gammaln
from numpyro import handlers
from numpyro.distributions import constraints
from numpyro.primitives import Messenger

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core import random as draws
from numpyro_hdphmm._core.random import categorical, dirichlet
from numpyro_hdphmm._core.validation import as_parameter, check_positive
from numpyro_hdphmm.emissions.base import EmissionFamily, as_weights, emission_site, state_weights
from numpyro_hdphmm.emissions.collapsed import (
    CollapsedStatistics,
    add_to_row,
    new_state_in_first_free_slot,
    prior_predictive,
)

__all__ = ["DPMixture", "MixtureWeightsPrior", "MixtureStatistics"]

#: auxiliary-variable sweeps of the concentration update per call (Fox et al. App. III
#: recommend alternating the auxiliaries and the concentration "for several iterations")
NUM_CONCENTRATION_STEPS = 5


def _safe_log(x):
    x = jnp.asarray(x)
    return jnp.log(jnp.maximum(x, jnp.finfo(x.dtype).tiny))


def _psi_posterior_concentration(concentration, num_components: int, counts):
    """``sigma/L' + n'_k.``: the Dirichlet parameters of ``psi_k | s`` (Fox et al. eq. 65)."""
    return concentration / num_components + counts


class MixtureWeightsPrior(dist.Distribution):
    r"""``psi ~ Dir(sigma/L', ..., sigma/L')`` (Fox et al. eq. 64) with batch shape ``batch_shape``.

    Like :class:`~numpyro_hdphmm.WeakLimitBeta`, draws come from log-space Gamma variates and
    ``log_prob`` treats underflowed zeros as the smallest normal number, so the log density stays
    finite for the small concentrations ``sigma/L'`` the weak limit produces.
    """

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.simplex
    pytree_data_fields = ("concentration",)
    pytree_aux_fields = ("num_components",)

    def __init__(self, concentration, num_components: int, batch_shape=(), *, validate_args=None):
        self.concentration = jnp.asarray(concentration, jnp.result_type(concentration, float))
        self.num_components = int(num_components)
        batch_shape = jax.lax.broadcast_shapes(tuple(batch_shape), jnp.shape(self.concentration))
        super().__init__(batch_shape=batch_shape, event_shape=(self.num_components,), validate_args=validate_args)

    def _conc(self):
        return jnp.expand_dims(self.concentration, -1) / self.num_components

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + self.batch_shape + self.event_shape
        return dirichlet(key, jnp.broadcast_to(self._conc(), shape))

    def log_prob(self, value):
        a = self._conc()
        log_norm = gammaln(self.concentration) - self.num_components * gammaln(a[..., 0])
        return log_norm + jnp.sum((a - 1.0) * _safe_log(value), -1)

    @property
    def mean(self):
        return jnp.full(self.batch_shape + self.event_shape, 1.0 / self.num_components)


class _ComponentBatch(dist.Distribution):
    """A distribution of batch shape ``(K * L',)`` seen with batch shape ``(K, L')``."""

    pytree_data_fields = ("base_dist",)
    pytree_aux_fields = ("_grid",)

    def __init__(self, base_dist, grid: Tuple[int, int]):
        self.base_dist = base_dist
        self._grid = tuple(grid)
        if tuple(base_dist.batch_shape) != (grid[0] * grid[1],):
            raise ValueError(
                f"the base family's site has batch shape {base_dist.batch_shape}, expected ({grid[0] * grid[1]},)."
            )
        super().__init__(batch_shape=self._grid, event_shape=base_dist.event_shape)

    @property
    def support(self):
        return self.base_dist.support

    def sample(self, key, sample_shape=()):
        v = self.base_dist.sample(key, sample_shape)
        return v.reshape(tuple(sample_shape) + self._grid + self.event_shape)

    def log_prob(self, value):
        event_ndim = len(self.event_shape)
        lead = jnp.shape(value)[: jnp.ndim(value) - event_ndim - 2]
        flat = jnp.reshape(value, lead + (self._grid[0] * self._grid[1],) + self.event_shape)
        return self.base_dist.log_prob(flat).reshape(lead + self._grid)


class _SiteFound(Exception):
    """Raised by :class:`_NextSite` to stop the base's ``sample_sites`` at the site it reads."""


class _NextSite(Messenger):
    """Supplies the values in ``known`` to the sites already declared and records the
    ``(name, fn, infer)`` of the first other sample site, then stops the run (nothing is sampled)."""

    def __init__(self, known):
        super().__init__()
        self.known = known
        self.site = None

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        if msg["name"] in self.known:
            msg["value"] = self.known[msg["name"]]
            return
        self.site = (msg["name"], msg["fn"], msg.get("infer"))
        raise _SiteFound


def _check_components(max_components) -> int:
    try:
        if isinstance(max_components, bool):
            raise TypeError
        n = operator.index(max_components)
    except TypeError:
        raise ValueError(f"`max_components` must be an integer >= 1, got {max_components!r}.") from None
    if n < 1:
        raise ValueError(f"`max_components` must be an integer >= 1, got {n}.")
    return n


@jax.tree_util.register_pytree_node_class
class DPMixture(EmissionFamily):
    r"""Weak-limit DP-mixture emissions over a conjugate base family (Fox et al. Sec. VI).

    Args:
        base_family: a prior of :mod:`numpyro_hdphmm.emissions` (batch shape ``()``), the
            component family ``H``/``F``.
        concentration: ``sigma > 0``, the DP concentration of every state's mixture; a constant or
            a traced value (a sample site of the user's model).
        max_components: ``L'``, the number of components of the weak limit (static).

    Parameters: ``weights (K, L')`` and the base parameters with shape ``(K, L', ...)`` (see the
    module docstring for the naming).
    """

    _hyper_names = ("concentration",)
    #: the component indicators are drawn given unscaled component likelihoods: no exact tempered update
    temperable = False

    def __init__(self, base_family, concentration, max_components):
        if not isinstance(base_family, EmissionFamily):
            raise ValueError(
                f"`base_family` must be an emission family of numpyro_hdphmm.emissions, got {type(base_family).__name__}."
            )
        if tuple(base_family.batch_shape) != ():
            raise ValueError(f"`base_family` must be a prior (batch shape ()), got batch shape {base_family.batch_shape}.")
        if not base_family.param_names:
            raise ValueError(
                f"`base_family` must be a conjugate family with parameters of its own (e.g. GaussianNIW), got "
                f"{type(base_family).__name__}; write a mixture emission as a callable over your own sites instead."
            )
        if "weights" in base_family.param_names:
            raise ValueError("`base_family` must not have a parameter named 'weights' (the mixture weights' name).")
        concentration = as_parameter("concentration", concentration)
        if jnp.ndim(concentration) != 0:
            raise ValueError(f"`concentration` must be a scalar, got shape {jnp.shape(concentration)}.")
        check_positive("concentration", concentration)
        self.base = base_family
        self.concentration = jnp.asarray(concentration, jnp.result_type(concentration, float))
        self.max_components = _check_components(max_components)

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.base, self.concentration), (self.max_components,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.base, obj.concentration = children
        (obj.max_components,) = aux
        return obj

    @property
    def param_names(self) -> Tuple[str, ...]:
        return ("weights",) + tuple(self.base.param_names)

    # ------------------------------------------------------------------ capabilities
    #: the weights' prior ``Dir(sigma/L')`` is set by the concentration
    dp_concentration_params = ("weights",)

    @property
    def dp_concentration(self):
        """``sigma``, the concentration of every state's mixture."""
        return self.concentration

    def with_dp_concentration(self, value) -> "DPMixture":
        return self.tree_unflatten((self.max_components,), (self.base, jnp.asarray(value, self.concentration.dtype)))

    def collapsed_statistics(self, capacity: int) -> "MixtureStatistics":
        """Weights and components integrated out (Fox et al. Alg. 3): :class:`MixtureStatistics`."""
        return MixtureStatistics(self, capacity)

    @property
    def base_param_names(self) -> Tuple[str, ...]:
        return tuple(self.base.param_names)

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return tuple(self.base.event_shape)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return ()

    # ------------------------------------------------------------------ data (delegated)
    @property
    def min_sequence_length(self) -> int:
        return self.base.min_sequence_length

    def check_observations(self, y, name: str = "obs") -> None:
        self.base.check_observations(y, name)

    def prepare(self, y):
        return self.base.prepare(y)

    def clustering_features(self, y):
        return self.base.clustering_features(y)

    # ------------------------------------------------------------------ helpers
    def _flat(self, params):
        """Base parameters ``(K, L', ...) -> (K * L', ...)``."""
        return {p: jnp.reshape(params[p], (-1,) + jnp.shape(params[p])[2:]) for p in self.base.param_names}

    def _grid(self, flat, num_states: int):
        return {p: jnp.reshape(v, (num_states, self.max_components) + jnp.shape(v)[1:]) for p, v in flat.items()}

    def component_log_likelihoods(self, x, params) -> jax.Array:
        """``log psi_kj + log f(x_t | theta_kj)``: shape ``(T, K, L')`` (NOT masked)."""
        psi = params["weights"]
        num_states = psi.shape[0]
        ll = self.base.log_likelihoods(x, self._flat(params))
        ll = ll.reshape(ll.shape[0], num_states, self.max_components)
        return ll + _safe_log(psi)[None]

    # ------------------------------------------------------------------ not conjugate
    def _no_closed_form(self, what):
        raise NotImplementedError(
            f"DPMixture.{what}: a mixture emission has no conjugate closed form. Blocked samplers update "
            "its parameters with DPMixture.update_parameters (component indicators as auxiliary variables)."
        )

    def sufficient_statistics(self, x, weights):
        self._no_closed_form("sufficient_statistics")

    def posterior(self, stats):
        self._no_closed_form("posterior")

    def log_marginal_likelihood(self, stats):
        self._no_closed_form("log_marginal_likelihood")

    def log_predictive(self, x, stats):
        self._no_closed_form("log_predictive")

    def sample_posterior(self, rng_key, stats):
        self._no_closed_form("sample_posterior")

    # ------------------------------------------------------------------ prior
    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``psi ~ Dir(sigma/L')`` (eq. 64) and ``theta_j ~ H`` (eq. 59): ``weights
        sample_shape + (L',)``, base parameters ``sample_shape + (L', ...)``."""
        k_psi, k_theta = random.split(rng_key)
        sample_shape = tuple(sample_shape)
        weights = MixtureWeightsPrior(self.concentration, self.max_components).sample(k_psi, sample_shape)
        theta = self.base.sample_parameters(k_theta, sample_shape + (self.max_components,))
        return {"weights": weights, **theta}

    def log_prior(self, params) -> jax.Array:
        """``log Dir(psi_k | sigma/L') + sum_j log H(theta_kj)``: shape ``(K,)``."""
        psi = params["weights"]
        num_states = psi.shape[0]
        lp_psi = MixtureWeightsPrior(self.concentration, self.max_components).log_prob(psi)
        lp_theta = self.base.log_prior(self._flat(params)).reshape(num_states, self.max_components)
        return lp_psi + jnp.sum(lp_theta, -1)

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params) -> jax.Array:
        """``log sum_j psi_kj f(x_t | theta_kj)`` (eq. 58-59 with ``s_t`` summed out): ``(T, K)``."""
        return jax.nn.logsumexp(self.component_log_likelihoods(x, params), axis=-1)

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``s_t ~ psi_{z_t}`` then ``y_t ~ F(theta_{z_t, s_t})`` (the base's sampler, so that
        families with temporal dependence keep it): ``(T, *event_shape)``."""
        k_s, k_y = random.split(rng_key)
        states = jnp.asarray(states)
        psi = params["weights"]
        s = random.categorical(k_s, _safe_log(psi)[states], axis=-1)
        return self.base.sample_observations(k_y, self._flat(params), states * self.max_components + s)

    # ------------------------------------------------------------------ Gibbs update
    def sample_components(self, rng_key, x, weights, params):
        """``s_t | z_t, y_t, psi, theta``: ``p(s_t = j) ∝ psi_{z_t j} f(y_t | theta_{z_t j})``
        (the second half of Fox et al.'s joint draw, eq. 69).  ``weights (T, K)`` one-hot rows
        (zero rows: missing steps).  Returns the ``(T,)`` indicators (arbitrary where the row is zero)."""
        logits = self.component_log_likelihoods(x, params)  # (T, K, L')
        z = jnp.argmax(weights, axis=-1)
        logits_z = jnp.take_along_axis(logits, z[:, None, None], axis=1)[:, 0]
        return random.categorical(rng_key, logits_z, axis=-1)

    def sample_concentration(self, rng_key, counts, prior, max_total: int):
        r"""Exact auxiliary-variable update of ``sigma ~ Gamma(a, b)`` given the indicators,
        with every ``psi_k`` integrated out (derived here; cf. Fox et al. eq. 94, App. III).

        ``counts (K, L')``: ``n'_kj = #{t: z_t = k, s_t = j}``, ``n_k = n'_k.``; ``max_total``
        (static) bounds ``sum(counts)`` (e.g. the number of steps).  Returns the new ``sigma``.  Target::

            p(sigma | s) ∝ p(sigma) prod_{k: n_k > 0} Gamma(sigma)/Gamma(sigma + n_k)
                           prod_j Gamma(sigma/L' + n'_kj)/Gamma(sigma/L')

        * ``prod_j Gamma(c + n)/Gamma(c) = sum_m |s(n, m)| c^m``: tables
          ``m'_kj ~ CRP-tables(n'_kj, sigma/L')`` (:func:`~numpyro_hdphmm._core.crp.sample_crp_tables`)
          turn the product into ``sigma^{M} L'^{-M}``, ``M = sum m'_kj``;
        * ``Gamma(sigma)/Gamma(sigma + n) = (1 + n/sigma) B(sigma + 1, n)/Gamma(n)``: with
          ``r_k ~ Beta(sigma + 1, n_k)`` and ``b_k ~ Bernoulli(n_k / (n_k + sigma))`` (Escobar & West)
          the factor becomes ``r_k^sigma sigma^{-b_k}``;
        * ``sigma | m', r, b ~ Gamma(a + M - sum_k b_k, b - sum_k log r_k)``.

        The three conditionals are cycled :data:`NUM_CONCENTRATION_STEPS` times (each leaves
        ``p(sigma | s)`` invariant).  Without the tables (``L' -> inf``: ``m'_kj -> 1(n'_kj > 0)``)
        this is Fox et al.'s eq. 94 with ``K'_k`` the components in use.
        """
        shape, rate = prior
        dtype = jnp.result_type(self.concentration, float)
        counts = jnp.asarray(counts, jnp.int32)
        n_k = jnp.sum(counts, -1)
        occupied = n_k > 0
        flat = counts.reshape(-1)
        num_components = self.max_components
        total = int(max_total)

        def step(sigma, key):
            k_m, k_r, k_b, k_s = random.split(key, 4)
            m = crp.sample_crp_tables(k_m, flat, jnp.broadcast_to(sigma / num_components, flat.shape), total)
            r = draws.beta(k_r, jnp.broadcast_to(sigma + 1.0, n_k.shape).astype(dtype), jnp.maximum(n_k, 1).astype(dtype))
            b = random.bernoulli(k_b, n_k / (n_k + sigma)) & occupied
            log_r = jnp.sum(jnp.where(occupied, jnp.log(jnp.maximum(r, jnp.finfo(dtype).tiny)), 0.0))
            post_shape = shape + jnp.sum(m).astype(dtype) - jnp.sum(b).astype(dtype)
            post_rate = rate - log_r
            new = draws.gamma(k_s, post_shape, post_rate)
            return jnp.maximum(new, jnp.finfo(dtype).tiny), None

        sigma, _ = jax.lax.scan(step, jnp.asarray(self.concentration, dtype), random.split(rng_key, NUM_CONCENTRATION_STEPS))
        return sigma

    def update_parameters(self, rng_key, x, weights, params, concentration_prior=None):
        r"""One Gibbs update of ``(s, sigma, psi, theta)`` given the states (Fox et al. Alg. 4
        steps 2 and 5, eqs. 65-66, 69); leaves ``p(psi, theta, sigma | x, z)`` invariant.

        ``x`` prepared observations (leading axis ``T``), ``weights (T, K)`` one-hot state
        indicators with zero rows at missing steps, ``params`` the current values.

        1. ``s_t | z_t, y_t, psi, theta`` (:meth:`sample_components`);
        2. if ``concentration_prior = (a, b)``: ``sigma | s`` with ``psi`` integrated out
           (:meth:`sample_concentration`), else ``sigma`` is kept;
        3. ``psi_k | s, sigma ~ Dir(sigma/L' + n'_k1, ..., sigma/L' + n'_kL')`` (eq. 65);
        4. ``theta_kj | {y_t: z_t = k, s_t = j} ~`` the base's conjugate posterior (eq. 66).

        Returns ``(params, sigma)``.
        """
        k_s, k_rest = random.split(rng_key)
        weights = as_weights(weights)
        s = self.sample_components(k_s, x, weights, params)
        return self.update_given_components(k_rest, x, weights, s, concentration_prior)

    def update_given_components(self, rng_key, x, weights, s, concentration_prior=None):
        """Steps 2-4 of :meth:`update_parameters` given the component indicators ``s (T,)``
        (also used by the direct-assignment kernel, whose sweep draws ``s`` with the mixture
        integrated out).  Returns ``(params, sigma)``."""
        k_sigma, k_psi, k_theta = random.split(rng_key, 3)
        weights = as_weights(weights)
        num_steps, num_states = weights.shape
        num_components = self.max_components
        comp = weights[:, :, None] * jax.nn.one_hot(s, num_components, dtype=weights.dtype)[:, None, :]  # (T, K, L')
        counts = jnp.sum(comp, axis=0)
        sigma = self.concentration
        if concentration_prior is not None:
            sigma = self.sample_concentration(k_sigma, jnp.round(counts), concentration_prior, num_steps)
        psi = dirichlet(k_psi, _psi_posterior_concentration(sigma, num_components, counts))
        stats = self.base.sufficient_statistics(x, comp.reshape(num_steps, num_states * num_components))
        theta = self.base.sample_posterior(k_theta, stats)
        return {"weights": psi, **self._grid(theta, num_states)}, sigma

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Sites ``{name}_weights ~ Dir(sigma/L')`` (:class:`MixtureWeightsPrior`, batch ``(K,)``,
        event ``(L',)``), then the base family's sites ``{name}_{p}`` with batch ``(K, L')``.

        The base's own conditionals are reused: its :meth:`sample_sites` is run (hidden from the
        model's handlers) with ``K * L'`` states, once per base site, with the values of the sites
        already declared supplied and the run stopped at the next site (nothing is sampled there);
        the model then declares that site with its distribution seen with batch shape ``(K, L')``.
        """
        grid = (int(num_states), self.max_components)
        size = grid[0] * grid[1]
        weights = emission_site(f"{name}_weights", MixtureWeightsPrior(self.concentration, self.max_components, (grid[0],)))
        params = {"weights": weights}
        known = {}
        for _ in self.base.param_names:
            probe = _NextSite(known)
            try:
                with handlers.block(), probe:
                    self.base.sample_sites(name, size)
            except _SiteFound:
                pass
            if probe.site is None:
                raise ValueError(
                    f"DPMixture: the base family {type(self.base).__name__} declares {len(known)} sites, "
                    f"expected one per parameter {self.base.param_names}."
                )
            site_name, fn, infer = probe.site
            value = numpyro.sample(site_name, _ComponentBatch(fn, grid), infer=dict(infer or {}))
            known[site_name] = jnp.reshape(value, (size,) + jnp.shape(value)[2:])
            params[site_name[len(name) + 1:]] = value
        return params

    @classmethod
    def weakly_informative(cls, data, base_family=None, concentration=1.0, max_components=10, **overrides) -> "DPMixture":
        """``DPMixture(base_family.weakly_informative(data, **overrides), concentration, max_components)``.

        ``base_family`` is a family class (default :class:`~numpyro_hdphmm.emissions.GaussianNIW`)
        whose data-scaled prior becomes the component prior; ``concentration`` ``sigma = 1`` (about
        ``log(1 + n)`` components for ``n`` observations of a state), ``max_components = 10``.
        """
        if base_family is None:
            from numpyro_hdphmm.emissions.gaussian import GaussianNIW

            base_family = GaussianNIW
        if not (isinstance(base_family, type) and issubclass(base_family, EmissionFamily)):
            raise ValueError(f"`base_family` must be an emission family class, got {base_family!r}.")
        return cls(base_family.weakly_informative(data, **overrides), concentration, max_components)

    def __repr__(self) -> str:
        return f"DPMixture({self.base!r}, concentration={self.concentration}, max_components={self.max_components})"


class MixtureStatistics(CollapsedStatistics):
    r"""DP-mixture emissions (Fox et al. Sec. VI-A, Alg. 3) with the mixture weights ``psi_k ~
    Dir(sigma/L')`` and the components integrated out: component indicators ``s`` (time
    flattened), per-(state, component) base statistics ``(K * L', ...)`` and counts ``n'_kj (K,
    L')``.  The state predictive (eq. 61) is ``sum_j (n'_kj + sigma/L') / (sigma + n'_k.) f(y |
    stats_kj)``: the Dirichlet-multinomial predictive of the model's ``L'`` components, whose
    ``L' -> inf`` limit is the CRP of eq. 63 with the corrected denominators ``sigma + n'_k.``
    (notes erratum 2).  After the sweep the concentration (when a kernel updates it), the weights
    and the components are drawn given the indicators (:meth:`DPMixture.update_given_components`)."""

    def __init__(self, emission: DPMixture, capacity: int):
        self.emission, self.capacity = emission, capacity
        self.base, self.width = emission.base, emission.max_components
        self.conc = emission.concentration

    def delta(self, x_i, dtype):
        row = jax.tree_util.tree_map(lambda a: a[None], x_i)
        return self.base.sufficient_statistics(row, jnp.ones((1, 1), dtype))

    def init(self, rng_key, x, valid, states, params, dtype):
        weights = state_weights(states, valid, self.capacity, dtype)
        s = self.emission.sample_components(rng_key, x, weights, params).astype(jnp.int32)
        cell = states * self.width + s
        onehot = jax.nn.one_hot(cell, self.capacity * self.width, dtype=dtype) * valid[:, None].astype(dtype)
        stats = self.base.sufficient_statistics(x, onehot)
        counts = jnp.sum(onehot, 0).reshape(self.capacity, self.width)
        return s, stats, counts

    def precompute(self, x, params, dtype):
        """The base family's prior predictive of every step ``(steps,)`` (a new state's first
        component is a new component)."""
        return prior_predictive(self.base, x, dtype)

    def log_new(self, pre_i, active):
        return new_state_in_first_free_slot(pre_i, active)

    def remove(self, est, i, delta, weight, k):
        s, stats, counts = est
        stats = add_to_row(stats, k * self.width + s[i], delta, -weight)
        return s, stats, counts.at[k, s[i]].add(-weight)

    def free(self, est, k, when=True):
        s, stats, counts = est

        def one(a):
            rows = jax.lax.dynamic_slice_in_dim(a, k * self.width, self.width, 0)
            return jax.lax.dynamic_update_slice_in_dim(a, jnp.where(when, jnp.zeros_like(rows), rows), k * self.width, 0)

        return s, jax.tree_util.tree_map(one, stats), counts.at[k].set(jnp.where(when, 0.0, counts[k]))

    def _log_component_weights(self, counts):
        prior = self.conc / self.width
        return jnp.log(counts + prior) - jnp.log(self.conc + jnp.sum(counts, -1, keepdims=True))

    def log_predictive(self, est, x_i, pre_i):
        s, stats, counts = est
        comp = self.base.log_predictive(x_i, stats).reshape(self.capacity, self.width)
        joint = self._log_component_weights(counts) + comp
        return jax.nn.logsumexp(joint, -1), comp

    def add(self, est, i, delta, weight, k, comp, u):
        s, stats, counts = est
        log_w = self._log_component_weights(counts[k]) + jnp.where(weight > 0, comp[k], 0.0)
        j = categorical(jnp.exp(log_w - jnp.max(log_w)), u)
        stats = add_to_row(stats, k * self.width + j, delta, weight)
        return s.at[i].set(j), stats, counts.at[k, j].add(weight)

    def draw_parameters(self, rng_key, est, family, x, weights, params, concentration_prior=None):
        """``sigma``, ``psi`` and the components given the indicators of the sweep."""
        return family.update_given_components(rng_key, x, weights, est[0], concentration_prior)
