r"""The model as the inner kernel and the reported log joint see it: the transition rows integrated
out (:class:`CollapseRows`, Fox et al. eq. 37's Dirichlet-multinomial) and the slots no step uses
left out (:class:`StatesInUse`).  Both act on the sites by their role tags
(:data:`~numpyro_hdphmm.models.base.HDP_ROLE`), so they serve every model class."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.primitives import Messenger

from numpyro_hdphmm.infer.plumbing.discovery import unwrap
from numpyro_hdphmm.models.base import HDP_ROLE

__all__ = ["CollapseRows", "StatesInUse", "collapse_rows"]


class _CollapsedChain(dist.Distribution):
    """The states site of the inner kernel's model: the log-probability of the observed states
    with the transition rows integrated out (the chain's ``collapsed_log_prob``: for a Markov chain
    the Dirichlet-multinomial of its transition counts, for a semi-Markov chain that of its segment
    transitions plus the durations), put on the first element of the batch (it does not factor
    over sequences)."""

    support = constraints.nonnegative_integer

    def __init__(self, chain, concentration, batch_shape, event_shape):
        self.chain, self.concentration = chain, concentration
        super().__init__(batch_shape=batch_shape, event_shape=event_shape)

    def sample(self, key, sample_shape=()):
        raise NotImplementedError("the collapsed states site is observed (conditioned) in the inner model")

    def log_prob(self, value):
        total = self.chain.collapsed_log_prob(value, self.concentration)
        if not self.batch_shape:
            return total
        return jnp.zeros(self.batch_shape, total.dtype).at[(0,) * len(self.batch_shape)].set(total)


class CollapseRows(Messenger):
    """The model as the inner kernel sees it: the transition rows integrated out.

    The ``{name}_trans`` site contributes nothing and the ``{name}_states`` site the probability of
    the states given ``alpha``, ``beta``, ``kappa`` with the rows integrated out (Dirichlet-
    multinomial, Fox et al. eq. 37's normalizers).  The inner kernel then updates every site that
    shapes the rows (hyperpriors without an exact update, however the model computes ``alpha`` and
    ``kappa``) from its conditional with the rows integrated out, and the algorithm redraws the rows
    from ``Dir(alpha beta + kappa e_j + n_j.)`` afterwards (a partially collapsed Gibbs block,
    :meth:`~numpyro_hdphmm.infer.contract.Algorithm.resume`).  Evaluating the rows' Dirichlet density instead is inexact in
    floating point: a row entry whose concentration is tiny (``alpha beta_k`` for an unused
    weak-limit state) underflows to 0, and the density at the clamped value drives ``alpha``
    upwards without bound.
    """

    def __init__(self, fn=None):
        self._concentration = None
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        role = (msg.get("infer") or {}).get(HDP_ROLE)
        if role == "trans":
            self._concentration = msg["fn"].concentration
            msg["fn"] = msg["fn"].mask(False)
        elif role == "states" and self._concentration is not None:
            chain = msg["fn"]  # several sequences without lengths: MarkovChain expanded by the plate
            msg["fn"] = _CollapsedChain(unwrap(chain), self._concentration, tuple(chain.batch_shape),
                                        tuple(chain.event_shape))


class _AggregatedWeights(dist.Distribution):
    """``beta ~ Dir(gamma/L)`` seen on (the states in use, the rest): by the aggregation property
    ``(beta_used, sum of the others) ~ Dir(gamma/L 1_k, (L - k) gamma/L)``.  With the rows
    integrated out the states depend on ``beta`` only through ``beta_used`` (an unused column
    takes no transition), so this is the weak-limit joint with the unused weights integrated
    out; each tiny unused weight would otherwise add ``(gamma/L - 1) log beta_l``, tens of nats
    that change every sweep."""

    support = constraints.simplex

    def __init__(self, concentration, capacity, used):
        self.concentration, self.capacity, self.used = concentration, capacity, used
        super().__init__(batch_shape=(), event_shape=(capacity + 1,))

    def sample(self, key, sample_shape=()):
        raise NotImplementedError("only evaluated at the kernel's values")

    def log_prob(self, value):
        gamma = jnp.asarray(self.concentration, value.dtype)
        a = gamma / self.capacity
        num_used = jnp.sum(self.used)
        rest_conc = (self.capacity - num_used) * a
        head = value[:-1]
        rest = jnp.sum(jnp.where(self.used, 0.0, head))
        tiny = jnp.finfo(value.dtype).tiny
        used_terms = jnp.sum(jnp.where(self.used, (a - 1.0) * jnp.log(jnp.maximum(head, tiny)) - gammaln(a), 0.0))
        rest_term = jnp.where(num_used < self.capacity,
                              (rest_conc - 1.0) * jnp.log(jnp.maximum(rest, tiny)) - gammaln(jnp.maximum(rest_conc, tiny)), 0.0)
        return gammaln(gamma) + used_terms + rest_term


class StatesInUse(Messenger):
    """The model as the reported log joint sees it: the emission parameters of slots no step
    uses are left out (they are prior draws, part of no likelihood), and a weak-limit ``beta``
    is aggregated over the unused slots (:class:`_AggregatedWeights`)."""

    def __init__(self, fn=None, used=None):
        self.used = used
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "sample":
            return
        role = (msg.get("infer") or {}).get(HDP_ROLE)
        fn = msg["fn"]
        if role == "emission":
            capacity = self.used.shape[0]
            if len(fn.batch_shape) and fn.batch_shape[0] == capacity:
                msg["fn"] = fn.mask(self.used.reshape((capacity,) + (1,) * (len(fn.batch_shape) - 1)))
        elif role == "beta" and getattr(unwrap(fn), "weights_prior", None) == "weak_limit":
            msg["fn"] = _AggregatedWeights(unwrap(fn).concentration, self.used.shape[0], self.used)


def collapse_rows(model):
    """``model`` with the transition rows integrated out (:class:`CollapseRows`): the inner
    kernel's model for every algorithm that keeps ``beta`` explicit."""
    return CollapseRows(model)
