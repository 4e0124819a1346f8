"""Non-conjugate emissions written as plain NumPyro: ``emission=lambda k: dist.StudentT(nu, loc[k], scale[k])``.

The user samples the emission parameters as ordinary sites of the model and passes a callable
``k -> Distribution`` of ONE observation given state ``k``, vectorized over ``k`` (called once
with ``k = arange(K)``, it must return a distribution of batch shape ``(K,)``)::

    def model(y):
        loc = numpyro.sample("loc", dist.Normal(0.0, 10.0).expand([K]))
        scale = numpyro.sample("scale", dist.LogNormal(0.0, 1.0).expand([K]))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission=lambda k: dist.StudentT(4.0, loc[k], scale[k]),
                              max_states=K)
        nh.sample("y", hmm, obs=y)

``StickyHDPHMM`` wraps the callable in :class:`CustomEmission`.  The family declares no sites of
its own (``param_names = ()``): the parameters ``theta_k`` are the user's sites, which the
kernels' inner kernel (NUTS by default) updates from ``p(theta | z, y)``, i.e. the product of the
user's prior and ``prod_t f(y_t | theta_{z_t})`` (Fox et al. eq. 42 without conjugacy).  The
blocked samplers (``WeakLimitGibbs``) only need the ``(T, K)`` log-likelihood
matrix ``log f(y_t | theta_k)`` for forward filtering / backward sampling (Fox et al. eqs.
43-48); the infinite-model kernels (``BeamSampler``, ``DirectAssignmentGibbs``) also use it and
never relabel the states of such a model, because the parameters of a slot are the user's
values, which the kernel cannot move.  The collapsed direct-assignment sampler falls back to
this uncollapsed step: its posterior predictive (Fox et al. eq. 30) has no closed form here, so
every conjugate-only method raises ``NotImplementedError``.

Pytree: the child is the distribution ``fn(arange(K))`` (its parameters are the user's, possibly
traced, site values); the auxiliary data is ``K``.  The callable itself is not part of the
pytree (it closes over the values of one model run, and is not needed once the batched
distribution exists); an unflattened copy has ``fn = None``.  The distribution must be a pytree
in NumPyro's sense (every built-in distribution is: ``pytree_data_fields``).
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from numpyro.distributions.distribution import Distribution

from numpyro_hdphmm._core.validation import check_static_int, is_concrete
from numpyro_hdphmm.emissions.base import EmissionFamily
from numpyro_hdphmm.emissions.collapsed import CollapsedStatistics

__all__ = ["CustomEmission", "ExplicitLikelihoods"]

_NOT_CONJUGATE = (
    "CustomEmission.{method}: emissions written as a NumPyro distribution have no conjugate prior, so their "
    "parameters cannot be integrated out; the kernels keep them explicit (the user's sites, updated by the "
    "inner NUTS kernel) and only need log_likelihoods."
)


@jax.tree_util.register_pytree_node_class
class CustomEmission(EmissionFamily):
    """Emissions given by a user callable ``fn: k -> Distribution`` (see the module docstring).

    Args:
        fn: callable mapping an integer array of state indices ``k`` (shape ``(K,)``) to a NumPyro
            distribution of one observation per state: batch shape ``(K,)``, any event shape.
        num_states: the capacity ``K`` (``max_states`` of the HDP-HMM).

    Missing observations: a step with a NaN anywhere in ``y_t`` is missing (``valid`` False) and
    :meth:`prepare` replaces it by a fixed placeholder drawn from state 0's distribution (key
    ``PRNGKey(0)``, gradients stopped), which lies in the support of that distribution, so the
    log-likelihood and its gradients stay finite for every family whose support does not depend
    on its parameters (kernels mask the step out anyway).
    """

    param_names: Tuple[str, ...] = ()
    #: the parameters are the user's sites (updated by a kernel's inner kernel)
    owns_parameters = False
    #: the inner kernel moves the parameters with the untempered likelihood
    temperable = False

    def __init__(self, fn, num_states: int, *, _distribution=None):
        if _distribution is None:
            if not callable(fn) or isinstance(fn, (Distribution, EmissionFamily)):
                raise ValueError(
                    "`emission` must be an EmissionFamily or a callable k -> numpyro Distribution, "
                    f"got {type(fn).__name__}."
                )
            num_states = check_static_int("num_states", num_states)
            d = fn(jnp.arange(num_states))
            if not isinstance(d, Distribution):
                raise ValueError(
                    "`emission`: the callable must return a numpyro Distribution when called with "
                    f"k = arange({num_states}), got {type(d).__name__}."
                )
            if tuple(d.batch_shape) != (num_states,):
                raise ValueError(
                    f"`emission`: the callable must be vectorized over the state index: called with "
                    f"k = arange(max_states={num_states}) it must return a distribution of batch shape "
                    f"({num_states},), got batch shape {tuple(d.batch_shape)} (index every per-state "
                    "parameter with k, e.g. lambda k: dist.Normal(loc[k], scale[k]))."
                )
            _distribution = d
        self.fn = fn
        self.num_states = int(num_states)
        self.distribution = _distribution

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        return (self.distribution,), (self.num_states,)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(None, aux[0], _distribution=children[0])

    def __repr__(self) -> str:
        return f"CustomEmission({type(self.distribution).__name__}, num_states={self.num_states})"

    # ------------------------------------------------------------------ shapes
    @property
    def event_shape(self) -> Tuple[int, ...]:
        return tuple(self.distribution.event_shape)

    @property
    def batch_shape(self) -> Tuple[int, ...]:
        return ()

    # ------------------------------------------------------------------ data
    def check_observations(self, y, name: str = "obs") -> None:
        ev = self.event_shape
        shape = tuple(np.shape(y))
        if len(shape) < len(ev) + 1 or (ev and shape[len(shape) - len(ev):] != ev):
            raise ValueError(f"`{name}` must have shape (..., T, *{ev}) for this emission, got {shape}.")
        if not is_concrete(y):
            return
        v = np.asarray(y)
        if not (np.issubdtype(v.dtype, np.number) or v.dtype == bool):
            raise ValueError(f"`{name}` must be numeric, got dtype {v.dtype}.")
        if np.issubdtype(v.dtype, np.inexact) and np.any(np.isinf(v)):
            raise ValueError(f"`{name}` must not contain infinite values (NaN marks a missing observation).")

    def _missing(self, y):
        y = jnp.asarray(y)
        nan = jnp.isnan(y) if jnp.issubdtype(y.dtype, jnp.inexact) else jnp.zeros(y.shape, bool)
        ev = len(self.event_shape)
        return jnp.any(nan, axis=tuple(range(1, 1 + ev))) if ev else nan

    def placeholder(self, dtype):
        """The value that replaces a missing observation: a fixed draw of state 0 (see class doc)."""
        draw = self.distribution.sample(jax.random.PRNGKey(0))[0]
        return lax.stop_gradient(jnp.asarray(draw, dtype))

    def prepare(self, y):
        y = jnp.asarray(y)
        missing = self._missing(y)
        if jnp.issubdtype(y.dtype, jnp.inexact):
            fill = self.placeholder(y.dtype)
            mask = missing.reshape(missing.shape + (1,) * len(self.event_shape))
            y = jnp.where(mask, fill, y)
        return y, ~missing

    # ------------------------------------------------------------------ likelihood
    def log_likelihoods(self, x, params=None) -> jax.Array:
        """``log f(x_t | theta_k)`` for every step and state, ``(T, K)``: the distribution
        ``fn(arange(K))`` evaluated at ``x[:, None, ...]``."""
        x = jnp.asarray(x)
        ev = len(self.event_shape)
        return self.distribution.log_prob(jnp.expand_dims(x, x.ndim - ev))

    def sample_observations(self, rng_key, params, states) -> jax.Array:
        """``y_t ~ fn(z_t)``: one draw per step and state, the state's kept, ``(T, *event)``."""
        states = jnp.asarray(states)
        draws = self.distribution.sample(rng_key, (states.shape[0],))  # (T, K, *event)
        ev = len(self.event_shape)
        idx = states.reshape(states.shape + (1,) * (ev + 1))
        idx = jnp.broadcast_to(idx, states.shape + (1,) + draws.shape[2:])
        return jnp.take_along_axis(draws, idx, axis=1)[:, 0]

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int):
        """Nothing to declare: the parameters are the user's own sites."""
        return {}

    def sample_parameters(self, rng_key, sample_shape=()):
        """No parameters of the family's own (they are the user's sites, fixed here): ``{}``.

        Returning the empty draw (rather than raising) lets :meth:`StickyHDPHMM.sample` draw
        synthetic data at the user's parameter values.  (A kernel that instantiates a state in a
        free slot uses the user's current value for that slot, a prior draw at stationarity, and
        never relabels the slots: it cannot move the user's sites along with the states.)
        """
        return {}

    def update_parameters(self, rng_key, x, weights, params, concentration_prior=None):
        """Unchanged: the inner kernel of the HDP kernel (NUTS by default) updates the user's sites."""
        return params, None

    def collapsed_statistics(self, capacity: int) -> "ExplicitLikelihoods":
        """No closed form to integrate the parameters out: the uncollapsed strategy
        :class:`ExplicitLikelihoods` (the likelihoods at the current parameters)."""
        return ExplicitLikelihoods(self, capacity)

    # ------------------------------------------------------------------ conjugate-only
    def sufficient_statistics(self, x, weights):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="sufficient_statistics"))

    def posterior(self, stats):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="posterior"))

    def log_marginal_likelihood(self, stats):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="log_marginal_likelihood"))

    def log_predictive(self, x, stats):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="log_predictive"))

    def sample_posterior(self, rng_key, stats):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="sample_posterior"))

    def log_prior(self, params):
        raise NotImplementedError(_NOT_CONJUGATE.format(method="log_prior"))

    @classmethod
    def weakly_informative(cls, data, **kwargs):
        raise NotImplementedError(
            "CustomEmission has no prior of its own: put priors on the sites your callable reads."
        )


class ExplicitLikelihoods(CollapsedStatistics):
    r"""Emission parameters kept explicit, for emissions without a conjugate prior (the user's
    sites of a :class:`CustomEmission`): the uncollapsed emission step.  Within a sweep the
    parameters of every slot are fixed at their current values; the kernel's inner kernel (NUTS)
    updates them given the states afterwards (Fox et al. eq. 42 without conjugacy).

    A step's likelihood under an instantiated state ``k`` is ``f(y_i | theta_k)``, a row of the
    ``(steps, K)`` log-likelihood matrix.  A new state has no closed-form prior predictive; it is
    placed in one of the ``F`` free slots, whose parameters are draws from the prior (no step
    uses them), with weight ``alpha beta_rem (...) / F * f(y_i | theta_j)`` for free slot ``j``:
    the exact conditional of ``z_i`` in the model extended by the free slots' parameters and a
    uniformly random assignment of states to slots (the number of assignments of ``K`` states
    to ``L`` slots changes by the factor ``1/F`` when a state is added).  It is Neal's (2000)
    Algorithm 8 with the ``F`` free slots as the auxiliary components, which converges to the
    prior predictive as ``F`` grows.  States keep their slots (no relabelling)."""

    relabels = False

    def __init__(self, emission, capacity: int):
        self.emission, self.capacity = emission, capacity

    def delta(self, x_i, dtype):
        return None

    def init(self, rng_key, x, valid, states, params, dtype):
        return ()

    def precompute(self, x, params, dtype):
        """``log f(y_i | theta_k)`` for every step and slot ``(steps, K)``."""
        return self.emission.log_likelihoods(x, params).astype(dtype)

    def remove(self, est, i, delta, weight, k):
        return est

    def free(self, est, k, when=True):
        return est

    def log_predictive(self, est, x_i, pre_i):
        return pre_i, None

    def log_new(self, pre_i, active):
        num_free = jnp.sum(~active).astype(pre_i.dtype)
        return jnp.where(active, -jnp.inf, pre_i - jnp.log(jnp.maximum(num_free, 1.0)))

    def add(self, est, i, delta, weight, k, aux, u):
        return est

    def draw_parameters(self, rng_key, est, family, x, weights, params, concentration_prior=None):
        """Unchanged: the inner kernel updates the user's sites."""
        return params, None

    def removed_predictive(self, est, i, x_i, pre_i, delta, weight, k, freed):
        return pre_i, None

    def moved(self, est, i, delta, weight, k_old, freed, k_new, aux, u, keep):
        return est

    def log_predictive_bound(self, x):
        """No bound: a user's likelihood may be a density."""
        return float("inf")
