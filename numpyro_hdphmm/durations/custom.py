r"""Durations written as plain NumPyro: ``duration=lambda k: dist.Poisson(rate[k])``.

The user samples the duration parameters as ordinary sites of the model and passes a callable
``k -> Distribution`` of the duration ``d`` of a segment in state ``k`` (the value of the
distribution IS the duration, not ``d - 1``), vectorized over ``k`` (called once with ``k =
arange(K)``, it must return a discrete distribution of batch shape ``(K,)`` and event shape
``()``)::

    def model(y):
        rate = numpyro.sample("rate", dist.Gamma(2.0, 0.2).expand([K]).to_event(1))
        hsmm = nh.HDPHSMM(gamma, alpha, duration=lambda k: dist.Poisson(rate[k]),
                          emission=..., max_states=K, max_duration=D)
        nh.sample("y", hsmm, obs=y)

The HSMM wraps the callable in :class:`Custom`.  The family declares no sites
(``param_names = ()``, ``owns_parameters = False``): the parameters are the user's sites, which
the kernels' inner kernel (NUTS by default) updates through the model's log density, in which
the durations enter through :meth:`Custom.log_pmf`.  Truncation: the models truncate every
duration law to ``{1, ..., max_duration}`` and renormalize, so mass the distribution puts on
``d <= 0`` (a Poisson's ``P(d = 0)``) or beyond ``max_duration`` is removed by the
renormalization: ``lambda k: dist.Poisson(rate[k])`` is the Poisson law conditioned on ``1 <= d
<= max_duration``, not the shifted Poisson of :class:`~numpyro_hdphmm.durations.Poisson` (for a
law of ``d - 1``, use the built-in shifted families, or a small ``Distribution`` subclass whose
``log_prob(d)`` evaluates the law of ``d - 1``).

Pytree: the child is the distribution ``fn(arange(K))`` (its parameters are the user's, possibly
traced, site values); the auxiliary data is ``K``.  As in
:class:`~numpyro_hdphmm.emissions.CustomEmission`, the callable itself is not part of the pytree
(an unflattened copy has ``fn = None``).
"""

from __future__ import annotations

from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.distributions.distribution import Distribution

from numpyro_hdphmm._core.validation import check_static_int, is_concrete
from numpyro_hdphmm.durations.base import DurationFamily, below_support, cumulative_log_survival

__all__ = ["Custom"]


@jax.tree_util.register_pytree_node_class
class Custom(DurationFamily):
    """Durations given by a user callable ``fn: k -> Distribution`` over ``d`` (module docstring).

    Args:
        fn: callable mapping the state indices ``k = arange(K)`` to a discrete NumPyro distribution
            of the duration, batch shape ``(K,)``, event shape ``()``, built from the user's sites.
        num_states: the capacity ``K`` (``max_states`` of the model).
    """

    param_names: Tuple[str, ...] = ()
    owns_parameters = False
    conjugate = False

    def __init__(self, fn, num_states: int, *, _distribution=None):
        if _distribution is None:
            if not callable(fn) or isinstance(fn, (Distribution, DurationFamily)):
                raise ValueError(
                    "`duration` must be a DurationFamily or a callable k -> numpyro Distribution over the duration, "
                    f"got {type(fn).__name__}."
                )
            num_states = check_static_int("num_states", num_states)
            d = fn(jnp.arange(num_states))
            if not isinstance(d, Distribution):
                raise ValueError(
                    "`duration`: the callable must return a numpyro Distribution when called with "
                    f"k = arange({num_states}), got {type(d).__name__}."
                )
            if tuple(d.batch_shape) != (num_states,):
                raise ValueError(
                    "`duration`: the callable must be vectorized over the state index: called with "
                    f"k = arange(max_states={num_states}) it must return a distribution of batch shape "
                    f"({num_states},), got batch shape {tuple(d.batch_shape)} (index every per-state "
                    "parameter with k, e.g. lambda k: dist.Poisson(rate[k]))."
                )
            if tuple(d.event_shape) != ():
                raise ValueError(
                    f"`duration`: the distribution must be of one scalar duration (event shape ()), got event shape "
                    f"{tuple(d.event_shape)}."
                )
            if not getattr(d.support, "is_discrete", False):
                raise ValueError(
                    f"`duration`: the distribution must be discrete (a law over the integer durations), got "
                    f"{type(d).__name__} with support {d.support}."
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
        return f"Custom({type(self.distribution).__name__}, num_states={self.num_states})"

    # ------------------------------------------------------------------ protocol
    def check_num_states(self, num_states: int) -> None:
        """Raise ``ValueError`` unless ``num_states`` is the ``K`` the callable was evaluated at."""
        if num_states != self.num_states:
            raise ValueError(f"`num_states` is {num_states}, but the custom duration law was built for "
                             f"num_states = {self.num_states} states.")

    def sample_sites(self, name: str, num_states: int):
        """No sites: the parameters are the user's own.  Returns ``{}``."""
        self.check_num_states(num_states)
        return {}

    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()):
        """``{}``: the parameters are the user's sites (drawn by the user's model)."""
        return {}

    def log_pmf(self, params, durations):
        """``fn(arange(K)).log_prob(d)``: ``S + (K,)``, ``-inf`` for ``d < 1``; ``params`` unused (the
        distribution holds the user's site values).  Differentiable in those values."""
        bad, d = below_support(durations)
        lp = self.distribution.log_prob(d[..., None])
        return jnp.where(bad[..., None], -jnp.inf, lp)

    def lowest_duration(self) -> int:
        """The lower bound of the distribution's support as a Python integer, for the untruncated model
        (``max_duration=None``), which conditions the law on ``d >= 1`` and so needs it to be a concrete
        integer of 0 or above: ``ValueError`` naming ``duration`` otherwise (unbounded below, per-state
        or traced bounds, negative)."""
        bound = getattr(self.distribution.support, "lower_bound", None)
        low = None
        if bound is not None and is_concrete(bound) and len(set(np.ravel(np.asarray(bound)))) == 1:
            low = int(np.ravel(np.asarray(bound))[0])
        if low is None or low < 0:
            raise ValueError(
                "`duration`: max_duration=None keeps the untruncated law conditioned on d >= 1, which needs a "
                "distribution whose support has a concrete lower bound of 0 or above, got support "
                f"{self.distribution.support}; give an integer max_duration (the law is then restricted to "
                "1..max_duration)."
            )
        return low

    def log_mass_from_one(self, params):
        """``log P(D >= 1) = log(1 - P(D = 0))`` for a support starting at 0 (``(K,)``), ``0`` for a
        support starting at 1 or above (:meth:`lowest_duration`, which raises for a support reaching
        below 0)."""
        if self.lowest_duration() >= 1:
            return jnp.zeros(())
        at_zero = self.distribution.log_prob(jnp.zeros((self.num_states,), jnp.int32))
        at_zero = jnp.minimum(at_zero, 0.0)
        return jnp.where(at_zero < -jnp.log(2.0), jnp.log1p(-jnp.exp(at_zero)), jnp.log(-jnp.expm1(at_zero)))

    def log_survival_table(self, params, max_duration: int):
        """``log P(D >= d)`` for ``d = 1..max_duration``: the pmf summed as in
        :func:`~numpyro_hdphmm.durations.base.cumulative_log_survival`, over the law conditioned on
        ``d >= 1`` and scaled back by :meth:`log_mass_from_one`: ``(max_duration, K)``."""
        mass = self.log_mass_from_one(params)
        log_pmf = self.log_pmf(params, jnp.arange(1, max_duration + 1))
        return cumulative_log_survival(log_pmf - mass) + mass

    def mean(self, params):
        """The distribution's ``mean``: ``(K,)`` (untruncated, including any mass it puts on ``d < 1``)."""
        return jnp.broadcast_to(self.distribution.mean, (self.num_states,))

    def sample_posterior(self, rng_key, params, durations, states, weights, num_states: int):
        """Not available: the parameters of a custom duration law are the user's own sites, updated by the
        kernels' inner kernel (NUTS) through the model's log density."""
        raise NotImplementedError(
            "Custom durations: the parameters are the user's own sample sites, which the kernels' inner kernel "
            "(NUTS) updates through the model's log density; the family has no posterior of its own to draw from."
        )

    @classmethod
    def weakly_informative(cls, mean_duration, **overrides):
        """Not available: a custom family's prior is the user's own sites' prior."""
        raise NotImplementedError("Custom durations: the prior is the one of the user's own sites.")
