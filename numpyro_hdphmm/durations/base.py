r"""The protocol every duration family implements.

A hidden semi-Markov model (Johnson & Willsky 2013, "Bayesian Nonparametric Hidden Semi-Markov
Models", JMLR 14, Sec. 2) draws, for each segment in state ``k``, a duration ``D`` from the state's
duration distribution ``p(d | theta_k)``.  A duration family holds the prior ``p(theta | lambda)``
of the parameters ``theta`` (hyperparameters ``lambda``) and the law ``p(d | theta)`` of a
duration ``d in {1, 2, ...}``.

Truncation.  A family describes the UNTRUNCATED law on ``{1, 2, ...}``.  The HSMM model
(:class:`numpyro_hdphmm.HDPHSMM`) with an integer ``max_duration`` truncates it to ``{1, ...,
max_duration}`` and renormalizes, ``p_trunc(d | theta) = p(d | theta) / sum_{d' <= max_duration}
p(d' | theta)``, from :meth:`DurationFamily.log_pmf`; the families do nothing about truncation
(their :meth:`~DurationFamily.mean` is the untruncated mean, and a family whose law puts mass on
``d = 0``, such as a :class:`~numpyro_hdphmm.durations.Custom` Poisson, loses that mass in the
renormalization).  With ``max_duration=None`` the model keeps the untruncated law; it then needs
the survival function (:meth:`DurationFamily.log_survival`), and a family whose law is
phase-type (:meth:`DurationFamily.phase_embedding`) lets the sampler draw the segmentations
through a chain of phases (:mod:`numpyro_hdphmm._core.phases`).

Families are JAX pytrees like the emission families (:mod:`numpyro_hdphmm.emissions`): the
hyperparameters are the leaves, the static configuration (e.g. the support of a finite prior) is
the auxiliary data, so a family passes through ``jit`` and ``vmap``.  Hyperparameters are scalars
(shared by every state) or vectors of shape ``(K,)`` (one prior per state).

Terminology used by every method:

``params``
    duration parameters ``theta``: a dict ``{param_name: array}`` whose arrays have leading axis
    ``K`` (one entry per state).
``durations, states, weights``
    complete durations of ``M`` segments (static ``M``): ``durations (M,)`` integers ``>= 1``,
    ``states (M,)`` their states in ``[0, K)``, ``weights (M,)`` a 0/1 mask (padded entries have
    weight 0 and are ignored).

All array methods are pure and jittable.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro

from numpyro_hdphmm._core.reduce import cumulative_logsumexp
from numpyro_hdphmm._core.roles import HDP_ROLE, NAME_KEY
from numpyro_hdphmm._core.validation import as_parameter, check_positive, is_concrete

__all__ = [
    "DurationFamily",
    "cumulative_log_survival",
    "underflow_floor",
    "DurationStatistics",
    "duration_statistics",
    "duration_site",
    "as_hyperparameter",
    "below_support",
    "check_mean_duration",
    "check_overrides",
    "open_unit_interval",
]

Params = Dict[str, jax.Array]


class DurationStatistics(NamedTuple):
    """Per-state sufficient statistics of complete durations (each ``(K,)``).

    ``count[k] = sum_i w_i 1[s_i = k]`` (the number of segments in state ``k``) and
    ``excess[k] = sum_i w_i 1[s_i = k] (d_i - 1)`` (their total duration beyond the first step,
    the statistic of the shifted families)."""

    count: jax.Array
    excess: jax.Array


def duration_statistics(durations, states, weights, num_states: int, dtype=None) -> DurationStatistics:
    """:class:`DurationStatistics` of ``durations (M,)`` in ``states (M,)`` with mask ``weights (M,)``.

    Sums by ``jax.ops.segment_sum`` over the states (static ``num_states``); entries with weight 0
    contribute nothing whatever their duration or state."""
    dtype = dtype or jnp.result_type(float)
    w = jnp.asarray(weights, dtype)
    excess = (jnp.asarray(durations).astype(dtype) - 1.0) * w
    states = jnp.asarray(states)
    count = jax.ops.segment_sum(w, states, num_segments=num_states)
    return DurationStatistics(count, jax.ops.segment_sum(excess, states, num_segments=num_states))


def duration_site(name: str, param: str, fn):
    """``numpyro.sample(f"{name}_duration_{param}", fn)`` tagged as a duration parameter of the
    model ``name`` (``infer={"hdphmm_role": "duration", "hdphmm_name": name}``)."""
    return numpyro.sample(f"{name}_duration_{param}", fn, infer={HDP_ROLE: "duration", NAME_KEY: name})


def as_hyperparameter(name: str, value, dtype=None):
    """A positive, finite hyperparameter as a float array of shape ``()`` or ``(K,)``; a ``ValueError``
    names ``name`` otherwise (values are checked only when concrete)."""
    value = as_parameter(name, value)
    if jnp.ndim(value) > 1:
        raise ValueError(
            f"`{name}` must be a scalar (shared by every state) or a vector of shape (K,) (one per state), "
            f"got shape {jnp.shape(value)}."
        )
    if is_concrete(value):
        v = np.asarray(value)
        if not np.issubdtype(v.dtype, np.number):  # booleans, strings, objects
            raise ValueError(f"`{name}` must be a positive number, got {value!r}.")
    check_positive(name, value)
    dtype = dtype or jnp.result_type(value, float)
    return jnp.asarray(value, dtype)


def check_mean_duration(mean_duration, minimum: float = 1.0) -> float:
    """``mean_duration`` as a float ``> minimum`` (a ``ValueError`` names the argument otherwise)."""
    try:
        m = float(mean_duration)
    except (TypeError, ValueError):
        raise ValueError(f"`mean_duration` must be a number > {minimum:g}, got {mean_duration!r}.") from None
    if isinstance(mean_duration, (bool, np.bool_)) or not np.isfinite(m) or m <= minimum:
        raise ValueError(f"`mean_duration` must be a finite number > {minimum:g}, got {mean_duration!r}.")
    return m


def below_support(durations):
    """``durations < 1`` (where every family's log pmf is ``-inf``), and the durations as floats
    with those entries replaced by 1 (so that the formulas and their gradients stay finite)."""
    d = jnp.asarray(durations)
    bad = d < 1
    return bad, jnp.where(bad, 1, d)


def check_overrides(overrides, allowed, where: str) -> None:
    """Raise ``TypeError`` for keyword overrides that ``where`` does not accept."""
    unknown = sorted(set(overrides) - set(allowed))
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword argument(s) {unknown}; allowed: {sorted(allowed)}.")


def open_unit_interval(p):
    """``p`` kept inside the open interval ``(0, 1)``: a probability drawn as exactly 0 or 1 (a Beta
    draw that rounded there) becomes the dtype's smallest normal number or the largest number below
    1, so that ``log p`` and ``log1p(-p)`` stay finite.  Departure from the exact draw by at most
    one rounding step."""
    dtype = jnp.result_type(p)
    return jnp.clip(p, jnp.finfo(dtype).tiny, jnp.nextafter(jnp.ones((), dtype), jnp.zeros((), dtype)))


def cumulative_log_survival(log_pmf, closed_form=None):
    r"""``log P(D >= d)`` for ``d = 1..D`` of a law on ``{1, 2, ...}`` from its ``log_pmf (D, K)``,
    differentiable.

    Two sums of the pmf: the complement ``log(1 - sum_{d' < d} p(d'))`` (cumulative ``logsumexp``,
    then ``log1mexp``), whose absolute error is a few ``eps``, used while it exceeds ``10^3 eps``
    (relative error below ``10^-3``); beyond, the tail on the grid ``logsumexp_{d <= d' <= D}
    log p(d')``, a lower bound whose missing part (``P(D > max_duration)``) is then below ``10^3
    eps`` and, for the decreasing tails of the families, small against the sum.

    ``closed_form (D, K)`` (optional): the family's own log survival function
    (:meth:`DurationFamily.log_survival`), taken wherever it is above ``10^3`` times the smallest
    normal number (:func:`underflow_floor`)."""
    log_pmf = jnp.asarray(log_pmf)
    finfo = jnp.finfo(log_pmf.dtype)
    below = cumulative_logsumexp(log_pmf, axis=0)
    below = jnp.concatenate([jnp.full_like(below[:1], -jnp.inf), below[:-1]], 0)  # log P(D <= d - 1)
    small = below < -jnp.log(2.0)
    safe = jnp.minimum(below, 0.0)
    complement = jnp.where(small, jnp.log1p(-jnp.exp(jnp.where(small, safe, -1.0))),
                           jnp.log(-jnp.expm1(jnp.where(small, -1.0, safe))))
    tail = cumulative_logsumexp(log_pmf, axis=0, reverse=True)
    if log_pmf.shape[0] >= 2:
        log_rho = log_pmf[-1] - log_pmf[-2]
        tail = jnp.logaddexp(tail, _geometric_tail(log_pmf[-1] + log_rho, log_rho, -jnp.inf))  # d > D
    out = jnp.where((below < 0.0) & (complement > jnp.log(1e3 * finfo.eps)), complement, tail)
    if closed_form is not None:
        out = jnp.where(closed_form > jnp.log(1e3 * finfo.tiny), closed_form, out)
    return out


def underflow_floor(survival, log_pmf, log_pmf_next):
    """``log survival`` from a closed-form survival probability ``P(D >= d)``, and where that is below
    ``10^3`` times the smallest normal number (the incomplete gamma and beta functions lose their
    digits to underflow there) the tail extrapolated geometrically from ``log p(d)`` and ``log p(d +
    1)``: ``log p(d) - log(1 - rho)``, ``rho = p(d + 1) / p(d)`` (exact for a geometric tail; for the
    log-concave tails of the built-in families an upper bound whose relative error falls with ``d``
    like the change of ``rho``; ``log p(d)`` itself when ``rho >= 1``)."""
    tiny = jnp.finfo(jnp.result_type(survival)).tiny
    ok = survival > 1e3 * tiny
    tail = _geometric_tail(log_pmf, log_pmf_next - log_pmf, log_pmf)
    return jnp.where(ok, jnp.log(jnp.where(ok, survival, 1.0)), tail)


def _geometric_tail(log_first, log_rho, otherwise):
    """``log sum_{i >= 0} p rho^i = log p - log(1 - rho)`` for ``log p = log_first`` and a ratio
    ``rho < 1``; ``otherwise`` where ``rho >= 1`` or is not finite."""
    decays = jnp.isfinite(log_rho) & (log_rho < 0.0)
    safe_rho = jnp.where(decays, log_rho, -1.0)
    return jnp.where(decays, log_first - jnp.log(-jnp.expm1(safe_rho)), otherwise)


class DurationFamily:
    """Base class of the duration families (see the module docstring).

    Subclasses implement the methods below and register themselves as pytrees with
    :func:`jax.tree_util.register_pytree_node_class`.
    """

    #: names of the duration parameters; the model declares the site ``f"{name}_duration_{p}"`` for each
    param_names: Tuple[str, ...] = ()
    #: the parameters are sites the family declares (:meth:`sample_sites`) and a kernel draws
    #: (:meth:`sample_posterior`); ``False``: they are the user's own sites, which the kernels' inner
    #: kernel updates through the model's log density (:class:`~numpyro_hdphmm.durations.Custom`)
    owns_parameters: bool = True
    #: :meth:`sample_posterior` is an exact draw from ``p(theta | complete durations)``
    conjugate: bool = False
    #: names of the hyperparameter leaves (for ``__repr__`` and the pytree)
    _hyper_names: Tuple[str, ...] = ()
    #: hyperparameter leaves that are not per state (e.g. a prior's probabilities over a finite support)
    _shared_names: Tuple[str, ...] = ()

    # ------------------------------------------------------------------ NumPyro sites
    def sample_sites(self, name: str, num_states: int) -> Params:
        """Declare the parameters as sites ``f"{name}_duration_{p}"`` (shape ``(num_states, ...)``,
        tagged with the duration role) inside a NumPyro model; returns ``{p: value}``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ prior and law
    def sample_parameters(self, rng_key, sample_shape: Tuple[int, ...] = ()) -> Params:
        """Prior draws ``theta ~ p(theta | lambda)`` with leading shape ``sample_shape`` (e.g. ``(K,)``)."""
        raise NotImplementedError

    def log_pmf(self, params: Params, durations) -> jax.Array:
        """``log p(D = d | theta_k)`` of the untruncated law: ``durations`` integers of any shape
        ``S``, ``params`` with leading axis ``K``; returns ``S + (K,)``, ``-inf`` where ``d < 1``."""
        raise NotImplementedError

    def mean(self, params: Params) -> jax.Array:
        """``E[D | theta_k]`` of the untruncated law: ``(K,)``."""
        raise NotImplementedError

    def log_survival(self, params: Params, durations) -> jax.Array:
        """``log P(D >= d | theta_k)`` of the untruncated law in closed form: ``durations`` integers of
        any shape ``S``, returns ``S + (K,)``.  Families without a closed form raise
        ``NotImplementedError`` (the default); :meth:`log_survival_table` then sums the pmf."""
        raise NotImplementedError(f"{type(self).__name__}: no closed-form survival function")

    def log_survival_table(self, params: Params, max_duration: int) -> jax.Array:
        """``log P(D >= d | theta_k)`` for ``d = 1..max_duration`` (static): ``(max_duration, K)``, by
        :func:`cumulative_log_survival` from the pmf, with :meth:`log_survival` where the family has it."""
        grid = jnp.arange(1, max_duration + 1)
        try:
            closed = self.log_survival(params, grid)
        except NotImplementedError:
            closed = None
        return cumulative_log_survival(self.log_pmf(params, grid), closed)

    def log_mass_from_one(self, params: Params):
        """``log P(D >= 1 | theta_k)``: ``0`` for a law on ``{1, 2, ...}`` (every built-in family);
        :class:`~numpyro_hdphmm.durations.Custom` overrides it for a distribution that also puts mass on
        ``d = 0``, which the untruncated model (``max_duration=None``) conditions away."""
        return jnp.zeros(())

    def log_residual_tables(self, params: Params, max_duration: int) -> Tuple[jax.Array, jax.Array]:
        r"""The residual-life law of the untruncated law conditioned on ``d >= 1``: the duration of a
        left-censored first segment when the process ran in equilibrium before the first step,
        ``p_R(d) = P(D >= d) / E[D]`` (the renewal theorem's backward recurrence time; Johnson &
        Willsky 2013, Sec. 3.2), and its survival ``P(R >= d) = sum_{d' >= d} p_R(d')``:
        ``(log p_R, log P(R >= .))``, each ``(max_duration, K)`` for ``d = 1..max_duration``.
        ``E[D | D >= 1]`` is :meth:`mean` divided by ``P(D >= 1)``.  Both survival functions are the pmf
        summed by :func:`cumulative_log_survival` (the complement, exact to rounding while above
        ``10^3 eps``, then the tail), without the closed forms: the samplers evaluate these tables at
        every duration update, where the incomplete beta function of the negative binomial would cost
        ~10x more, and the model and the samplers then use the same numbers."""
        mass = self.log_mass_from_one(params)
        log_surv = cumulative_log_survival(self.log_pmf(params, jnp.arange(1, max_duration + 1)) - mass)
        log_mean = jnp.log(self.mean(params)) - mass
        log_residual = log_surv - log_mean
        return log_residual, cumulative_log_survival(log_residual)

    def phase_embedding(self, params: Params):
        """The law as a chain of phases, :class:`numpyro_hdphmm._core.phases.PhaseTables`, or ``None``
        when it is not phase-type with a static number of phases (the default)."""
        return None

    # ------------------------------------------------------------------ posterior
    def sample_posterior(self, rng_key, params: Params, durations, states, weights, num_states: int) -> Params:
        """A draw of ``theta_k`` for every state given complete durations (module docstring):
        exact for conjugate parts, an exact MCMC move (leaving the conditional invariant, started
        at ``params``) for the others; states without a duration get prior draws.  Leading axis
        ``num_states``."""
        raise NotImplementedError

    @classmethod
    def weakly_informative(cls, mean_duration, **overrides) -> "DurationFamily":
        """A weakly informative prior whose prior mean duration is ``mean_duration``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ pytree and repr
    def _static(self):
        return ()

    def tree_flatten(self):
        return tuple(getattr(self, k) for k in self._hyper_names), self._static()

    def __repr__(self) -> str:
        leaves = ", ".join(
            f"{k}={getattr(self, k).shape if hasattr(getattr(self, k), 'shape') else getattr(self, k)}"
            for k in self._hyper_names
        )
        return f"{type(self).__name__}({leaves})"

    def _per_state(self, value, num_states: int):
        """A hyperparameter broadcast to ``(num_states,)``."""
        return jnp.broadcast_to(value, (num_states,))

    def check_num_states(self, num_states: int) -> None:
        """Raise ``ValueError`` naming a per-state hyperparameter (shape ``(K',)``) whose size is not the
        model's ``num_states``; scalars fit any ``num_states``."""
        for name in self._hyper_names:
            if name in self._shared_names:
                continue
            shape = jnp.shape(getattr(self, name))
            if shape not in ((), (num_states,)):
                raise ValueError(
                    f"`{name}` has shape {shape}: a per-state hyperparameter must have shape (num_states,) = "
                    f"({num_states},) (or be a scalar)."
                )

