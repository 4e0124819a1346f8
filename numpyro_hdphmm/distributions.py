"""NumPyro distributions of the (sticky) HDP-HMM and its parts.

Model convention, shared by every sampler of the package (Fox et al. 2007, eq. 25, with the
start row made explicit because the paper leaves ``p(z_1)`` unspecified)::

    beta            ~ GEM(gamma)                                   stick-breaking weights
    pi_0            ~ DP(alpha, beta)                              start row, no self bias
    pi_j            ~ DP(alpha + kappa, (alpha beta + kappa delta_j) / (alpha + kappa))
    z_1             ~ pi_0,   z_t ~ pi_{z_{t-1}}
    theta_k         ~ H(lambda),   y_t ~ F(theta_{z_t})

With a capacity of ``K = max_states`` represented states, ``beta`` is stored as ``K + 1``
weights, the last being the total mass of all states not represented; a row ``pi_j`` is the
finite-dimensional Dirichlet marginal of the DP on the partition ``{1}, ..., {K}, {rest}``:
``Dir(alpha beta + kappa e_j)`` over ``K + 1`` atoms.  These are exact marginals of the infinite
model, not a truncation; only a draw that would *use* a state beyond the capacity overflows,
and that is reported (never silently dropped).
"""

from __future__ import annotations

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution
from numpyro.distributions.util import validate_sample

from numpyro_hdphmm._core.crp import log_dirichlet_multinomial, row_counts, transition_counts
from numpyro_hdphmm._core.hmm import hmm_marginal_loglik
from numpyro_hdphmm._core.random import categorical, dirichlet
from numpyro_hdphmm._core.validation import (
    as_parameter,
    check_nonnegative,
    check_positive,
    host_warning,
    host_warnings_enabled,
    is_concrete,
)
from numpyro_hdphmm.emissions.base import EmissionFamily

__all__ = [
    "GEM",
    "WeakLimitBeta",
    "HDPTransitions",
    "MarkovChain",
    "HiddenMarkovModel",
    "EmissionLikelihood",
]


def safe_log(x):
    """``log x`` with zeros (underflowed probabilities) mapped to ``log(tiny)``, not ``-inf``."""
    x = jnp.asarray(x)
    return jnp.log(jnp.maximum(x, jnp.finfo(x.dtype).tiny))


def check_capacity(name: str, value, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"`{name}` must be a Python integer >= {minimum}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    return int(value)


def _check_probability_vectors(name: str, value) -> None:
    """Raise ``ValueError`` unless concrete ``value`` holds probability vectors along its last axis."""
    if is_concrete(value):
        a = np.asarray(value)
        if np.any(~np.isfinite(a)) or np.any(a < 0) or not np.allclose(a.sum(-1), 1.0, atol=1e-4):
            raise ValueError(f"`{name}` must hold probability vectors (non-negative, summing to one along the last axis).")


def warn_escape(count, where: str):
    """Host-side warning (through :func:`~numpyro_hdphmm._core.validation.host_warning`) when draws overflow the capacity."""
    n = int(np.sum(np.asarray(count)))
    if n > 0:
        warnings.warn(
            f"{where}: {n} draw(s) went to a state beyond the capacity (`max_states`); they were "
            "redrawn among the represented states, so these generated sequences come from the model truncated "
            "at max_states. Increase `max_states` if they are meant as draws of the infinite model (prior or "
            "posterior predictive checks, simulated data); the samplers' own starting values never warn.",
            RuntimeWarning,
            stacklevel=2,
        )


# --------------------------------------------------------------------------------------- GEM
class _GlobalWeights(Distribution):
    """Common layout of :class:`GEM` and :class:`WeakLimitBeta`: ``truncation + 1`` weights on the
    simplex, the last being the mass of the states not represented."""

    arg_constraints = {"concentration": constraints.positive}
    support = constraints.simplex
    pytree_data_fields = ("concentration",)
    pytree_aux_fields = ("truncation",)

    def __init__(self, concentration, truncation: int, *, validate_args=None):
        self.truncation = check_capacity("truncation", truncation, 1)
        concentration = as_parameter("concentration", concentration)
        check_positive("concentration", concentration)
        self.concentration = jnp.asarray(concentration, dtype=jnp.result_type(concentration, float))
        super().__init__(
            batch_shape=jnp.shape(self.concentration),
            event_shape=(self.truncation + 1,),
            validate_args=validate_args,
        )


class GEM(_GlobalWeights):
    r"""Stick-breaking weights ``beta ~ GEM(concentration)``, the first ``truncation`` of them.

    ``v_k ~ Beta(1, gamma)``, ``beta_k = v_k prod_{l<k} (1 - v_l)`` (Fox et al. eq. 2).  The value
    has ``truncation + 1`` entries: ``beta_1..beta_K`` and the remaining mass
    ``prod_{l<=K} (1 - v_l)``, so it lies on the simplex and is the *exact* marginal of the first
    ``K`` weights of the infinite GEM (not a truncated GEM that forces ``v_K = 1``).

    Density (w.r.t. Lebesgue measure on the first ``K`` coordinates, numpyro's simplex
    convention): with tails ``s_k = sum_{l>=k} beta_l`` (remainder included), ``v_k = beta_k / s_k``
    and the Jacobian of ``v -> beta`` is ``prod_k s_k``, so
    ``log p(beta) = sum_k [log gamma + (gamma - 1) log(s_{k+1} / s_k) - log s_k]``.

    Sampling is in log space (``log(1 - v) = log(U) / gamma``), so weights far down the stick
    underflow gracefully instead of producing NaN.

    A weight that is exactly 0 marks a slot holding no atom: the kernels of the infinite model
    (``DirectAssignmentGibbs``, ``BeamSampler``) represent only the instantiated states, in slots
    with gaps, plus the remainder.  Such a slot's factor is left out of ``log_prob``, which is then
    the density of the represented sticks: in ``gamma`` it is ``gamma^K beta_rem^(gamma - 1)``
    with ``K`` the number of positive weights, which is the conditional of ``gamma`` given the
    represented weights in the infinite model (given the tables,
    ``(beta_1..beta_K, beta_rem) ~ Dir(m_.1, ..., m_.K, gamma)`` and ``p(m | gamma) ∝ gamma^K
    Gamma(gamma) / Gamma(gamma + m..)``, Teh et al. 2006 eqs. 37-40).  A hyperprior on ``gamma``
    that the kernels update by NUTS (any prior but a Gamma) therefore sees the right density.
    """

    #: the prior of the global weights, as discovery reports it (``ModelSpec.beta_prior``)
    weights_prior = "gem"

    def _log_weights(self, key, sample_shape):
        shape = sample_shape + self.batch_shape + (self.truncation,)
        gamma = jnp.expand_dims(self.concentration, -1)
        u = random.uniform(key, shape, dtype=gamma.dtype, minval=jnp.finfo(gamma.dtype).tiny)
        log_one_minus_v = jnp.log(u) / gamma
        log_v = jnp.log(-jnp.expm1(log_one_minus_v))
        log_tail = jnp.cumsum(log_one_minus_v, axis=-1)
        log_before = jnp.concatenate([jnp.zeros_like(log_tail[..., :1]), log_tail[..., :-1]], -1)
        return jnp.concatenate([log_v + log_before, log_tail[..., -1:]], axis=-1)

    def sample(self, key, sample_shape=()):
        return jnp.exp(self._log_weights(key, tuple(sample_shape)))

    @validate_sample
    def log_prob(self, value):
        value = jnp.asarray(value)
        tails = jnp.flip(jnp.cumsum(jnp.flip(value, -1), -1), -1)  # s_1 .. s_{K+1}
        log_s = safe_log(tails)
        log_ratio = log_s[..., 1:] - log_s[..., :-1]  # log(1 - v_k), k = 1..K
        gamma = jnp.expand_dims(self.concentration, -1)
        terms = jnp.log(gamma) + (gamma - 1.0) * log_ratio - log_s[..., :-1]
        # a slot whose weight is exactly 0 holds no atom (see the class docstring)
        return jnp.sum(jnp.where(value[..., :-1] > 0, terms, 0.0), -1)

    @property
    def mean(self):
        gamma = jnp.expand_dims(self.concentration, -1)
        k = jnp.arange(self.truncation)
        frac = gamma / (1.0 + gamma)
        head = (1.0 / (1.0 + gamma)) * frac**k
        return jnp.concatenate([head, frac**self.truncation], -1)


class WeakLimitBeta(_GlobalWeights):
    r"""The weak-limit approximation of ``GEM(gamma)``: ``beta ~ Dir(gamma/L, ..., gamma/L)``.

    Fox et al. eqs. 38-39 (Ishwaran & Zarepour 2002).  Same layout as :class:`GEM`: the value has
    ``L + 1`` entries, the last (the mass of states not represented) identically zero, so that
    :class:`HDPTransitions` and the explicit sites are unchanged.  The weak-limit kernel samples
    the model with the ``{name}_beta`` site's :class:`GEM` replaced by this distribution.
    """

    #: the prior of the global weights, as discovery reports it (``ModelSpec.beta_prior``)
    weights_prior = "weak_limit"

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + self.batch_shape + (self.truncation,)
        conc = jnp.broadcast_to(jnp.expand_dims(self.concentration, -1) / self.truncation, shape)
        probs = dirichlet(key, conc)
        return jnp.concatenate([probs, jnp.zeros_like(probs[..., :1])], -1)

    @validate_sample
    def log_prob(self, value):
        a = jnp.expand_dims(self.concentration, -1) / self.truncation
        head = value[..., :-1]
        # the last entry is zero for draws of this distribution; it is not checked, so that values
        # passed through numpyro's simplex transforms (which leave ~1e-17 there) keep a density
        return gammaln(self.concentration) - self.truncation * gammaln(a[..., 0]) + jnp.sum((a - 1.0) * safe_log(head), -1)

    @property
    def mean(self):
        shape = self.batch_shape + (self.truncation,)
        head = jnp.full(shape, 1.0 / self.truncation, dtype=self.concentration.dtype)
        return jnp.concatenate([head, jnp.zeros_like(head[..., :1])], -1)


# ----------------------------------------------------------------------------- transitions
class HDPTransitions(Distribution):
    r"""The transition rows of the (sticky) HDP-HMM given the global weights ``beta``.

    ``beta`` has ``K + 1`` entries (last: the mass of the states not represented).  The value is a
    ``(K + 1, K + 1)`` row-stochastic matrix:

    * rows ``j = 0..K-1``: ``pi_j ~ Dir(alpha beta + kappa e_j)`` (Fox et al. eq. 26, the sticky
      finite-partition marginal; ``kappa = 0`` is the HDP-HMM of Teh et al. eq. 20);
    * row ``K`` (the last): the start row ``pi_0 ~ Dir(alpha beta)`` of the first state;
    * column ``K`` (the last): the mass each row gives to states not represented.

    Rows are drawn independently with log-space Gamma variates, so concentrations as small as
    ``alpha beta_k ~ 1e-30`` produce (possibly underflowed) probabilities, never NaN;
    ``log_prob`` treats underflowed zeros as the smallest normal number.  An atom whose
    concentration is exactly zero (the remainder column under the weak-limit approximation,
    where ``beta`` gives it no mass) is a point mass at zero.
    """

    arg_constraints = {
        "beta": constraints.simplex,
        "alpha": constraints.positive,
        "kappa": constraints.nonnegative,
    }
    support = constraints.independent(constraints.simplex, 1)
    pytree_data_fields = ("beta", "alpha", "kappa")

    def __init__(self, beta, alpha, kappa=0.0, *, validate_args=None):
        beta, alpha, kappa = (as_parameter(n, v) for n, v in (("beta", beta), ("alpha", alpha), ("kappa", kappa)))
        if jnp.ndim(beta) < 1 or jnp.shape(beta)[-1] < 2:
            raise ValueError(f"`beta` must have a trailing axis of size K + 1 >= 2, got shape {jnp.shape(beta)}.")
        check_positive("alpha", alpha)
        check_nonnegative("kappa", kappa)
        if is_concrete(beta):
            b = np.asarray(beta)
            if np.any(b < 0) or not np.allclose(b.sum(-1), 1.0, atol=1e-4):
                raise ValueError("`beta` must be a probability vector (non-negative, summing to one).")
        dtype = jnp.result_type(beta, alpha, kappa, float)
        self.beta = jnp.asarray(beta, dtype)
        self.alpha = jnp.asarray(alpha, dtype)
        self.kappa = jnp.asarray(kappa, dtype)
        batch_shape = jax.lax.broadcast_shapes(
            jnp.shape(self.beta)[:-1], jnp.shape(self.alpha), jnp.shape(self.kappa)
        )
        size = jnp.shape(self.beta)[-1]
        super().__init__(batch_shape=batch_shape, event_shape=(size, size), validate_args=validate_args)

    @property
    def num_states(self) -> int:
        return self.event_shape[0] - 1

    @property
    def concentration(self):
        """``(..., K+1, K+1)`` Dirichlet concentrations of the rows (start row last)."""
        size = self.event_shape[0]
        sticky = jnp.eye(size, dtype=self.beta.dtype).at[-1, -1].set(0.0)
        alpha = self.alpha[..., None, None]
        kappa = self.kappa[..., None, None]
        return alpha * self.beta[..., None, :] + kappa * sticky

    def sample(self, key, sample_shape=()):
        conc = jnp.broadcast_to(self.concentration, tuple(sample_shape) + self.batch_shape + self.event_shape)
        return dirichlet(key, conc)

    @validate_sample
    def log_prob(self, value):
        conc = self.concentration
        positive = conc > 0
        safe = jnp.where(positive, conc, 1.0)
        terms = jnp.where(positive, (safe - 1.0) * safe_log(value) - gammaln(safe), 0.0)
        # an atom with zero concentration (e.g. the remainder under the weak limit) is a point mass at 0
        off_atom = jnp.any(~positive & (value > 0), -1)
        row = gammaln(jnp.sum(conc, -1)) + jnp.sum(terms, -1)
        return jnp.sum(jnp.where(off_atom, -jnp.inf, row), -1)

    @property
    def mean(self):
        conc = self.concentration
        return conc / jnp.sum(conc, -1, keepdims=True)


# ---------------------------------------------------------------------------- Markov chain
def sample_markov_chain(key, log_init, log_trans, num_steps: int):
    """Draw ``z_{1:T}`` from a chain whose rows may carry an escape column (see MarkovChain).

    Returns ``(states (T,), escapes)``: draws that landed in the escape column are redrawn among
    the represented states and counted in ``escapes``.  Memory is O(T): two uniforms per step and
    one inverse-CDF draw from the current row (no (T, K) noise array).
    """
    num_states = log_trans.shape[-2]
    has_escape = log_trans.shape[-1] == num_states + 1
    k_u, k_r = random.split(key)
    # uniforms in (0, 1]: the inverse-CDF draw then never picks a zero-weight state
    u = 1.0 - random.uniform(k_u, (num_steps,), dtype=log_trans.dtype)
    u_redraw = 1.0 - random.uniform(k_r, (num_steps,), dtype=log_trans.dtype)

    def draw(log_row, u_t, u_r):
        w = jnp.exp(log_row - jnp.max(log_row))
        z = categorical(w, u_t)
        if not has_escape:
            return z, 0
        escaped = z == num_states
        z_in = categorical(w[:num_states], u_r)
        return jnp.where(escaped, z_in, z), escaped.astype(jnp.int32)

    z0, e0 = draw(log_init, u[0], u_redraw[0])

    def step(carry, inputs):
        z_prev, esc = carry
        z, e = draw(log_trans[z_prev], *inputs)
        return (z, esc + e), z

    (_, escapes), rest = lax.scan(step, (z0, e0), (u[1:], u_redraw[1:]))
    states = jnp.concatenate([z0[None], rest]).astype(jnp.int32)
    return states, escapes


class MarkovChain(Distribution):
    r"""A discrete Markov chain ``z_{1:T}``: ``z_1 ~ initial_probs``, ``z_t ~ transition_matrix[z_{t-1}]``.

    ``initial_probs (..., K)``, ``transition_matrix (..., K, K)``; the support is the integer
    sequences in ``{0..K-1}^T``.  ``log p(z) = log p_0(z_1) + sum_{t>=2} log P(z_{t-1}, z_t)``,
    counting only ``t < lengths`` when ``lengths`` is given (padded steps of batched sequences).

    HDP rows carry one more column, the mass of the states that are not represented: pass
    ``(..., K + 1)`` and ``(..., K, K + 1)``.  ``log_prob`` is then the probability of the path
    among the represented states (the exact joint density the samplers use), and ``sample``
    treats a draw into the extra column as a capacity overflow: it is redrawn among the
    represented states and a ``RuntimeWarning`` is emitted.

    Not enumerable (``has_enumerate_support = False``): the package's kernels sample it.
    """

    arg_constraints = {
        "initial_probs": constraints.simplex,
        "transition_matrix": constraints.independent(constraints.simplex, 1),
    }
    pytree_data_fields = ("initial_probs", "transition_matrix", "lengths")
    pytree_aux_fields = ("num_steps",)
    has_enumerate_support = False
    is_discrete = True

    def __init__(self, initial_probs, transition_matrix, num_steps: int, lengths=None, *, validate_args=None):
        self.num_steps = check_capacity("num_steps", num_steps, 1)
        initial_probs = as_parameter("initial_probs", initial_probs)
        transition_matrix = as_parameter("transition_matrix", transition_matrix)
        lengths = None if lengths is None else as_parameter("lengths", lengths)
        if jnp.ndim(transition_matrix) < 2:
            raise ValueError(f"`transition_matrix` must have shape (..., K, K) or (..., K, K+1), got {jnp.shape(transition_matrix)}.")
        k, cols = jnp.shape(transition_matrix)[-2:]
        if cols not in (k, k + 1):
            raise ValueError(f"`transition_matrix` must have shape (..., K, K) or (..., K, K+1), got {jnp.shape(transition_matrix)}.")
        if jnp.ndim(initial_probs) < 1 or jnp.shape(initial_probs)[-1] != cols:
            raise ValueError(
                f"`initial_probs` must have a trailing axis of size {cols} (matching `transition_matrix`), "
                f"got shape {jnp.shape(initial_probs)}."
            )
        _check_probability_vectors("initial_probs", initial_probs)
        _check_probability_vectors("transition_matrix", transition_matrix)
        dtype = jnp.result_type(initial_probs, transition_matrix, float)
        self.initial_probs = jnp.asarray(initial_probs, dtype)
        self.transition_matrix = jnp.asarray(transition_matrix, dtype)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(self.initial_probs)[:-1], jnp.shape(self.transition_matrix)[:-2])
        if lengths is not None:
            if is_concrete(lengths):
                ln = np.asarray(lengths)
                if not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > self.num_steps):
                    raise ValueError(f"`lengths` must be integers in [1, num_steps={self.num_steps}], got {ln}.")
            lengths = jnp.asarray(lengths, jnp.int32)
            batch_shape = jax.lax.broadcast_shapes(batch_shape, jnp.shape(lengths))
        self.lengths = lengths
        super().__init__(batch_shape=batch_shape, event_shape=(self.num_steps,), validate_args=validate_args)

    @property
    def num_states(self) -> int:
        return self.transition_matrix.shape[-2]

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.independent(constraints.integer_interval(0, self.num_states - 1), 1)

    def collapsed_log_prob(self, value, concentration):
        """``log p(value)`` with the rows ``Dir(concentration)`` (``(K+1, K+1)``, start row last)
        integrated out: the Dirichlet-multinomial of the transition counts of every sequence
        (Fox et al. eq. 37's normalizers), one total."""
        capacity = concentration.shape[-1] - 1
        n, first = transition_counts(value, capacity, self.lengths)
        return log_dirichlet_multinomial(concentration, row_counts(n, first, concentration.dtype))

    def restricted(self, initial_probs, transition_matrix) -> "MarkovChain":
        """The same chain with other start and transition probabilities (e.g. restricted to the
        represented states)."""
        return MarkovChain(initial_probs, transition_matrix, self.num_steps, lengths=self.lengths)

    def _flat_args(self, sample_shape):
        shape = tuple(sample_shape) + self.batch_shape
        n = int(np.prod(shape)) if shape else 1
        init = jnp.broadcast_to(self.initial_probs, shape + self.initial_probs.shape[-1:]).reshape(n, -1)
        trans = jnp.broadcast_to(self.transition_matrix, shape + self.transition_matrix.shape[-2:])
        return shape, n, init, trans.reshape((n,) + self.transition_matrix.shape[-2:])

    def sample_with_intermediates(self, key, sample_shape=()):
        return _draw_markov_chain(self, key, tuple(sample_shape), host_warnings_enabled())

    def sample(self, key, sample_shape=()):
        return self.sample_with_intermediates(key, sample_shape)[0]

    @validate_sample
    def log_prob(self, value):
        value = jnp.asarray(value).astype(jnp.int32)
        k = self.num_states
        log_init = safe_log(self.initial_probs[..., :k])
        log_trans = safe_log(self.transition_matrix[..., :k])
        first = jnp.take_along_axis(
            jnp.broadcast_to(log_init, value.shape[:-1] + (k,)), value[..., :1], -1
        )[..., 0]
        # log P[z_{t-1}, z_t]: one gather from the flattened (K*K,) matrix per step
        pair = value[..., :-1] * k + value[..., 1:]
        flat = jnp.broadcast_to(log_trans, value.shape[:-1] + (k, k)).reshape(value.shape[:-1] + (k * k,))
        picked = jnp.take_along_axis(flat, pair, axis=-1)
        if self.lengths is not None:
            t = jnp.arange(1, self.num_steps)
            picked = jnp.where(t < self.lengths[..., None], picked, 0.0)
        return first + jnp.sum(picked, -1)


# ------------------------------------------------------------------- marginal HMM (NUTS/SVI)
class HiddenMarkovModel(Distribution):
    r"""An HMM with the state sequence summed out: ``p(y_{1:T}) = sum_z p(z) prod_t p(y_t | z_t)``.

    ``initial_probs (..., K)``, ``transition_matrix (..., K, K)`` and an ``emission_distribution``
    whose rightmost batch dimension indexes the ``K`` states (e.g. ``dist.Normal(mu, sigma)`` with
    ``mu`` of shape ``(K,)``).  ``log_prob`` runs the log-space forward algorithm
    (:func:`numpyro_hdphmm._core.hmm.hmm_marginal_loglik`), so the distribution is differentiable
    in every parameter and works under NUTS and SVI.  ``num_steps`` is needed only to ``sample``.
    """

    arg_constraints = {
        "initial_probs": constraints.simplex,
        "transition_matrix": constraints.independent(constraints.simplex, 1),
    }
    pytree_data_fields = ("initial_probs", "transition_matrix", "emission_distribution")
    pytree_aux_fields = ("num_steps",)

    def __init__(self, initial_probs, transition_matrix, emission_distribution, num_steps=None, *, validate_args=None):
        if not isinstance(emission_distribution, Distribution):
            raise ValueError("`emission_distribution` must be a numpyro Distribution whose last batch axis indexes the states.")
        initial_probs = as_parameter("initial_probs", initial_probs)
        transition_matrix = as_parameter("transition_matrix", transition_matrix)
        if jnp.ndim(transition_matrix) < 2 or jnp.shape(transition_matrix)[-1] != jnp.shape(transition_matrix)[-2]:
            raise ValueError(f"`transition_matrix` must have shape (..., K, K), got {jnp.shape(transition_matrix)}.")
        k = jnp.shape(transition_matrix)[-1]
        if jnp.ndim(initial_probs) < 1 or jnp.shape(initial_probs)[-1] != k:
            raise ValueError(f"`initial_probs` must have shape (..., {k}), got {jnp.shape(initial_probs)}.")
        if len(emission_distribution.batch_shape) < 1 or emission_distribution.batch_shape[-1] != k:
            raise ValueError(
                f"`emission_distribution` must have batch shape (..., {k}) (one distribution per state), "
                f"got {emission_distribution.batch_shape}."
            )
        _check_probability_vectors("initial_probs", initial_probs)
        _check_probability_vectors("transition_matrix", transition_matrix)
        if num_steps is not None:
            num_steps = check_capacity("num_steps", num_steps, 1)
        self.num_steps = num_steps
        dtype = jnp.result_type(initial_probs, transition_matrix, float)
        self.initial_probs = jnp.asarray(initial_probs, dtype)
        self.transition_matrix = jnp.asarray(transition_matrix, dtype)
        self.emission_distribution = emission_distribution
        batch_shape = jax.lax.broadcast_shapes(
            jnp.shape(self.initial_probs)[:-1],
            jnp.shape(self.transition_matrix)[:-2],
            emission_distribution.batch_shape[:-1],
        )
        event_shape = (num_steps if num_steps is not None else 1,) + emission_distribution.event_shape
        super().__init__(batch_shape=batch_shape, event_shape=event_shape, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=1)
    def support(self):
        return constraints.independent(self.emission_distribution.support, 1)

    def _log_likelihoods(self, value):
        """``(..., T, K)`` matrix ``log p(y_t | z_t = k)``."""
        ev = len(self.emission_distribution.event_shape)
        y = jnp.expand_dims(value, -1 - ev)  # (..., T, 1, *event)
        return self.emission_distribution.log_prob(y)

    def log_prob(self, value):
        ll = self._log_likelihoods(value)
        batch = jax.lax.broadcast_shapes(ll.shape[:-2], self.batch_shape)
        k = ll.shape[-1]
        ll = jnp.broadcast_to(ll, batch + ll.shape[-2:]).reshape((-1,) + ll.shape[-2:])
        log_init = jnp.broadcast_to(jnp.log(self.initial_probs), batch + (k,)).reshape(-1, k)
        log_trans = jnp.broadcast_to(jnp.log(self.transition_matrix), batch + (k, k)).reshape(-1, k, k)
        out = jax.vmap(hmm_marginal_loglik)(log_init, log_trans, ll)
        return out.reshape(batch)

    def sample_with_intermediates(self, key, sample_shape=()):
        if self.num_steps is None:
            raise ValueError("`num_steps` must be given to HiddenMarkovModel to draw samples.")
        k_states, k_obs = random.split(key)
        chain = MarkovChain(self.initial_probs, self.transition_matrix, self.num_steps)
        states = chain.expand(self.batch_shape).sample(k_states, sample_shape)  # (*S, *B, T)
        draws = self.emission_distribution.sample(k_obs, tuple(sample_shape) + (self.num_steps,))
        # draws: (*S, T, *B_e, K, *event) -> move T next to the state axis and pick z_t
        ev = len(self.emission_distribution.event_shape)
        s = len(tuple(sample_shape))
        draws = jnp.moveaxis(draws, s, -2 - ev)  # (*S, *B_e, T, K, *event)
        idx = states.reshape(states.shape + (1,) * (ev + 1))
        target = jnp.broadcast_shapes(draws.shape[:-1 - ev] + (1,) + draws.shape[draws.ndim - ev:], idx.shape)
        picked = jnp.take_along_axis(jnp.broadcast_to(draws, target[:-1 - ev] + draws.shape[-1 - ev:]), jnp.broadcast_to(idx, target), axis=-1 - ev)
        return jnp.squeeze(picked, -1 - ev), [states]

    def sample(self, key, sample_shape=()):
        return self.sample_with_intermediates(key, sample_shape)[0]


# ------------------------------------------------------------------ observation likelihood
class EmissionLikelihood(Distribution):
    r"""The observed site of an HDP-HMM: ``y_t ~ F(theta_{z_t})``, pointwise over time.

    ``states (..., T)`` index the ``K`` parameter sets in ``params`` (leading axis ``K``); the
    batch shape is ``states.shape`` so that ``log_prob`` returns one term per step (ArviZ's
    pointwise ``log_likelihood``).  Missing steps (NaN observations) and padded steps
    (``t >= lengths``) contribute 0.  Temporal dependence (autoregressive emissions) is handled by
    the family: ``log_prob`` conditions each step on the previous observations of the value.
    """

    arg_constraints = {}
    pytree_data_fields = ("emission", "params", "states", "lengths")
    support = constraints.real

    def __init__(self, emission: EmissionFamily, params, states, lengths=None, *, validate_args=None):
        self.emission = emission
        self.params = params
        self.states = jnp.asarray(states)
        self.lengths = None if lengths is None else jnp.asarray(lengths, jnp.int32)
        super().__init__(
            batch_shape=jnp.shape(self.states), event_shape=emission.event_shape, validate_args=validate_args
        )

    def _map_sequences(self, fn, *arrays):
        lead = self.batch_shape[:-1]
        n = int(np.prod(lead)) if lead else 1
        flat = [a.reshape((n,) + a.shape[len(lead):]) for a in arrays]
        out = jax.vmap(fn)(*flat)
        return out.reshape(lead + out.shape[1:])

    def log_prob(self, value):
        value = jnp.broadcast_to(value, self.batch_shape + self.event_shape)
        out = self._map_sequences(
            lambda y, z: self.emission.pointwise_log_likelihood(y, self.params, z), value, self.states
        )
        if self.lengths is not None:
            t = jnp.arange(self.batch_shape[-1])
            out = jnp.where(t < self.lengths[..., None], out, 0.0)
        return out

    def sample(self, key, sample_shape=()):
        sample_shape = tuple(sample_shape)
        n = int(np.prod(sample_shape)) if sample_shape else 1
        keys = random.split(key, n)

        def one(k):
            lead = self.batch_shape[:-1]
            m = int(np.prod(lead)) if lead else 1
            ks = random.split(k, m)
            states = self.states.reshape((m, self.batch_shape[-1]))
            y = jax.vmap(lambda kk, z: self.emission.sample_observations(kk, self.params, z))(ks, states)
            return y.reshape(lead + y.shape[1:])

        out = jax.vmap(one)(keys)
        return out.reshape(sample_shape + out.shape[1:])


@partial(jax.jit, static_argnums=(2, 3))
def _draw_markov_chain(chain: MarkovChain, key, sample_shape, warn=True):
    """Jitted body of :meth:`MarkovChain.sample_with_intermediates` (compiled once per shape)."""
    shape, n, init, trans = chain._flat_args(sample_shape)
    keys = random.split(key, n)
    states, escapes = jax.vmap(
        lambda k, p0, p: sample_markov_chain(k, safe_log(p0), safe_log(p), chain.num_steps)
    )(keys, init, trans)
    if warn and chain.transition_matrix.shape[-1] == chain.num_states + 1:
        host_warning(warn_escape, escapes, "MarkovChain.sample")
    return states.reshape(shape + (chain.num_steps,)), [escapes.reshape(shape)]
