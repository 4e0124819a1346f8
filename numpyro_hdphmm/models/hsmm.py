r"""The explicit-duration HDP-HSMM: the model class ``"hsmm"`` (Johnson & Willsky, "Bayesian
Nonparametric Hidden Semi-Markov Models", JMLR 14, 2013, Sec. 3).

A state sequence is a run of segments: the first state from the start row, each next state from
its predecessor's row with the self-transition removed and the row renormalized (eq. 9: consecutive
segments never share a state), each segment's duration from its state's duration law on
``{1, ..., max_duration}``, and every step of a segment emits from its state:

.. math::

    \beta \sim \mathrm{GEM}(\gamma), \quad \pi_j \sim \mathrm{DP}(\alpha, \beta), \quad
    \bar\pi_{jk} = \frac{\pi_{jk}}{1 - \pi_{jj}} (k \ne j), \quad
    \theta_j \sim H, \quad \vartheta_j \sim G,

    z_{s+1} \sim \bar\pi_{z_s}, \quad d_s \sim p(d \mid \vartheta_{z_s}) \text{ on } \{1..D\}, \quad
    y_t \sim F(\theta_{z_s}) \text{ for the steps } t \text{ of segment } s.

``max_duration`` (``D``) is part of the model: each state's duration law is its family's law
restricted to ``{1, ..., D}`` and renormalized (choose ``D`` well above the longest segment you
expect; :meth:`HDPHSMM.site_roles`).  ``max_duration=None`` keeps the family's untruncated law on
``{1, 2, ...}``: a segment is then bounded only by its sequence, the messages run over durations
up to the sequence length (``O(T^2 K)`` per sequence), and a family whose law is phase-type (the
negative binomial with its finite prior on ``r``, the geometric) lets the sampler draw the
segmentations through a chain of phases in ``O(T K (R + K))`` (:mod:`numpyro_hdphmm._core.phases`).
The last segment of a sequence is right-censored by default
(it is only known to last at least until the end: its term is the survival ``P(d_s >= d)``); with
``left_censoring=True`` the first segment is also left-censored (the process ran before the first
step, in equilibrium: the first duration has the residual-life law ``P(D >= d) / E[D]``).
"""

from __future__ import annotations

from functools import partial
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.distributions import constraints
from numpyro.distributions.distribution import Distribution
from numpyro.distributions.util import validate_sample

from numpyro_hdphmm._core import crp, hsmm
from numpyro_hdphmm._core.validation import as_parameter, check_positive, host_warning, host_warnings_enabled, is_concrete
from numpyro_hdphmm.distributions import GEM, HDPTransitions, check_capacity, safe_log, warn_escape
from numpyro_hdphmm.durations.base import DurationFamily
from numpyro_hdphmm.emissions.base import EmissionFamily
from numpyro_hdphmm.models.base import ModelClass, SiteRole
from numpyro_hdphmm.models.declare import declare_sites

__all__ = ["HDPHSMM", "SemiMarkovChain"]


def _check_untruncated(duration, max_duration):
    """Raise for what the untruncated model (``max_duration=None``) does not support."""
    if max_duration is None and hasattr(duration, "lowest_duration"):
        duration.lowest_duration()  # a Custom law: raises unless its support starts at 0 or above


def _check_duration(duration, max_states):
    if isinstance(duration, DurationFamily):
        return duration
    if callable(duration) and not isinstance(duration, Distribution):
        from numpyro_hdphmm.durations import Custom

        return Custom(duration, max_states)
    raise ValueError(
        "`duration` must be a duration family from numpyro_hdphmm.durations (e.g. nh.durations.Poisson(2.0, 0.1)) "
        f"or a callable k -> numpyro discrete Distribution of the duration (vectorized over states), got "
        f"{type(duration).__name__}."
    )


class SemiMarkovChain(Distribution):
    r"""The state sequence of an explicit-duration HSMM, ``z_{1:T}`` as a run of segments (module
    docstring of :mod:`numpyro_hdphmm.models.hsmm`).

    ``initial_probs (K,)`` or ``(K+1,)`` (the start row), ``transition_matrix (K, K)`` or ``(K,
    K+1)`` (the rows; their self-transitions are removed and each row divided by the rest of its
    mass: :func:`numpyro_hdphmm._core.hsmm.without_self_transitions`), ``duration`` (a
    :class:`~numpyro_hdphmm.durations.base.DurationFamily`) with ``duration_params`` (leading axis
    ``K``), ``max_duration`` ``D`` (``None``: the untruncated law), ``num_steps`` ``T``, ``lengths``
    (several sequences).  ``log_prob`` is the segment process's log probability
    (:func:`~numpyro_hdphmm._core.hsmm.hsmm_log_prob`): the first state, the transitions between
    segments and each segment's duration (truncated to ``{1..D}`` and renormalized, or untruncated;
    the last one's survival when ``right_censored``; the first one's residual life when
    ``left_censored``).  As with :class:`~numpyro_hdphmm.MarkovChain`, a last
    column beyond ``K`` is the mass of states not represented: ``sample`` redraws such draws among
    the represented states and warns.  Not enumerable: the package's kernels sample it.
    """

    arg_constraints = {
        "initial_probs": constraints.simplex,
        "transition_matrix": constraints.independent(constraints.simplex, 1),
    }
    pytree_data_fields = ("initial_probs", "transition_matrix", "duration", "duration_params", "lengths")
    pytree_aux_fields = ("max_duration", "num_steps", "right_censored", "left_censored")
    has_enumerate_support = False
    is_discrete = True

    def __init__(self, initial_probs, transition_matrix, duration, duration_params, max_duration: int,
                 num_steps: int, lengths=None, *, right_censored: bool = True, left_censored: bool = False,
                 validate_args=None):
        self.num_steps = check_capacity("num_steps", num_steps, 1)
        self.max_duration = None if max_duration is None else check_capacity("max_duration", max_duration, 1)
        _check_untruncated(duration, self.max_duration)
        self.duration = duration
        self.duration_params = duration_params
        self.right_censored = bool(right_censored)
        self.left_censored = bool(left_censored)
        dtype = jnp.result_type(initial_probs, transition_matrix, float)
        self.initial_probs = jnp.asarray(initial_probs, dtype)
        self.transition_matrix = jnp.asarray(transition_matrix, dtype)
        if lengths is not None:
            if is_concrete(lengths):
                ln = np.asarray(lengths)
                if not np.issubdtype(ln.dtype, np.integer) or np.any(ln < 1) or np.any(ln > self.num_steps):
                    raise ValueError(f"`lengths` must be integers in [1, num_steps={self.num_steps}], got {ln}.")
            lengths = jnp.asarray(lengths, jnp.int32)
        self.lengths = lengths
        batch_shape = () if lengths is None else jnp.shape(lengths)
        super().__init__(batch_shape=batch_shape, event_shape=(self.num_steps,), validate_args=validate_args)

    @property
    def num_states(self) -> int:
        return self.transition_matrix.shape[-2]

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return constraints.independent(constraints.integer_interval(0, self.num_states - 1), 1)

    def restricted(self, initial_probs, transition_matrix) -> "SemiMarkovChain":
        """The same segment process with other start and transition probabilities (e.g. restricted
        to the represented states)."""
        return SemiMarkovChain(initial_probs, transition_matrix, self.duration, self.duration_params, self.max_duration,
                               self.num_steps, self.lengths, right_censored=self.right_censored,
                               left_censored=self.left_censored)

    @property
    def untruncated(self) -> bool:
        """``True`` with ``max_duration=None``: the duration laws are not truncated."""
        return self.max_duration is None

    def tables(self):
        """``(log_init (K,), log_trans (K, K), (log_dur, log_surv) (K, D) each, first)``: the inputs of
        :mod:`numpyro_hdphmm._core.hsmm` (``first``: the left-censored first segment's tables or
        ``None``).  Untruncated: ``D = num_steps`` (no segment of a sequence is longer), ``log_dur``
        the law itself (not renormalized on ``1..D``) and ``log_surv`` its survival function, both
        conditioned on ``d >= 1`` (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.log_mass_from_one`);
        ``first`` the untruncated residual-life law and its survival
        (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.log_residual_tables`)."""
        k = self.num_states
        log_init = safe_log(self.initial_probs[:k])
        log_trans = hsmm.without_self_transitions(self.transition_matrix)
        if self.untruncated:
            first = self._residual_tables(self.num_steps) if self.left_censored else None
            return log_init, log_trans, self._untruncated_tables(self.num_steps), first
        log_pmf = self.duration.log_pmf(self.duration_params, jnp.arange(1, self.max_duration + 1))  # (D, K)
        durations = hsmm.duration_tables(log_pmf.T)
        first = hsmm.left_censored_tables(durations[1]) if self.left_censored else None
        return log_init, log_trans, durations, first

    def _untruncated_tables(self, num_d: int):
        """``(log_dur, log_surv) (K, num_d)`` of the untruncated law conditioned on ``d >= 1``."""
        params = self.duration_params
        mass = self.duration.log_mass_from_one(params)
        log_dur = self.duration.log_pmf(params, jnp.arange(1, num_d + 1)) - mass
        log_surv = self.duration.log_survival_table(params, num_d) - mass
        return log_dur.T, log_surv.T

    def _residual_tables(self, num_d: int):
        """``(log p_R, log P(R >= d)) (K, num_d)``: the untruncated residual-life law of a left-censored
        first segment (:meth:`~numpyro_hdphmm.durations.base.DurationFamily.log_residual_tables`)."""
        log_res, log_res_surv = self.duration.log_residual_tables(self.duration_params, num_d)
        return log_res.T, log_res_surv.T

    def duration_logits(self):
        """``(log_dur (K, C), first)`` for drawing segments (:func:`~numpyro_hdphmm._core.hsmm.sample_segments`):
        the truncated law on ``1..D`` (``C = D``), or the untruncated law on ``1..T`` with a last column
        ``log P(D > T)`` (``C = T + 1``; such a segment is cut at the end of the sequence)."""
        if not self.untruncated:
            _, _, (log_dur, _), first = self.tables()
            return log_dur, first
        log_dur, log_surv = self._untruncated_tables(self.num_steps + 1)
        first = None
        if self.left_censored:
            log_res, log_res_surv = self._residual_tables(self.num_steps + 1)
            first = (jnp.concatenate([log_res[:, :-1], log_res_surv[:, -1:]], -1),)
        return jnp.concatenate([log_dur[:, :-1], log_surv[:, -1:]], -1), first

    def _untruncated_duration_terms(self, z, n):
        """The duration terms of one sequence ``z (T,)`` of length ``n`` under the untruncated law:
        ``log p(d)`` at each segment's end (``log P(D >= d)`` for the right-censored last one), both
        conditioned on ``d >= 1``, and with left-censoring the first segment's residual-life term
        (:meth:`_residual_tables`; its survival when it is also the right-censored last one).  The pmf
        is evaluated at the segments' durations and the survival at the last one only (closed form
        where the family has one), not over a table of every duration: ``O(T K)``."""
        params = self.duration_params
        ends, durations = hsmm.segments(z, n)
        t = jnp.arange(z.shape[-1])
        mass = jnp.broadcast_to(self.duration.log_mass_from_one(params), (self.num_states,))
        pmf = jnp.take_along_axis(self.duration.log_pmf(params, jnp.maximum(durations, 1)), z[:, None], 1)[:, 0]
        last = jnp.clip(n - 1, 0, z.shape[-1] - 1)
        try:
            surv = self.duration.log_survival(params, durations[last])[z[last]]
        except NotImplementedError:
            table = self.duration.log_survival_table(params, z.shape[-1])
            surv = table[jnp.clip(durations[last] - 1, 0, z.shape[-1] - 1), z[last]]
        censored = self.right_censored & (t == last)
        terms = jnp.where(censored, surv, pmf) - mass[z]
        if self.left_censored:
            log_res, log_res_surv = self._residual_tables(z.shape[-1])
            first_end = jnp.argmax(ends)
            d0 = jnp.clip(durations[first_end] - 1, 0, z.shape[-1] - 1)
            table = jnp.where(self.right_censored & (first_end == last), log_res_surv, log_res)
            terms = jnp.where(t == first_end, table[z[first_end], d0], terms)
        return jnp.sum(jnp.where(ends, terms, 0.0))

    def _untruncated_log_prob(self, z, n, log_init, log_trans):
        """``log p(z)`` under the untruncated law: the first state and the transitions
        (:func:`~numpyro_hdphmm._core.hsmm.hsmm_log_prob` with zero duration terms) plus
        :meth:`_untruncated_duration_terms`."""
        zero = jnp.zeros((self.num_states, z.shape[-1]), log_init.dtype)  # a column for every duration up to T
        head = hsmm.hsmm_log_prob(z, log_init, log_trans, zero, zero, n, right_censored=self.right_censored)
        return head + self._untruncated_duration_terms(z, n)

    def duration_log_prob(self, value):
        """The duration terms of ``log_prob`` alone, summed over the sequences of ``value (..., T)``."""
        if self.untruncated:
            return jnp.sum(self._per_sequence(value, self._untruncated_duration_terms))
        _, _, (log_dur, log_surv), first = self.tables()
        k = self.num_states
        zeros = jnp.zeros((k,), log_dur.dtype)
        return jnp.sum(self._per_sequence(value, lambda z, n: hsmm.hsmm_log_prob(
            z, zeros, jnp.zeros((k, k), log_dur.dtype), log_dur, log_surv, n, right_censored=self.right_censored,
            first=first)))

    def collapsed_log_prob(self, value, concentration):
        """``log p(value)`` with the rows ``Dir(concentration)`` (``(K+1, K+1)``, start row last)
        integrated out: the Dirichlet-multinomial of the segment transitions (each row's
        off-diagonal part is ``Dir`` of its off-diagonal concentrations by aggregation, and the
        self-transitions are removed) and of the first states, plus the duration terms."""
        k = self.num_states
        value = jnp.asarray(value).astype(jnp.int32)
        n, first = crp.transition_counts(value, k, self.lengths)
        n = n * (1 - jnp.eye(k, dtype=n.dtype))
        conc = concentration.at[jnp.arange(k), jnp.arange(k)].set(0.0)
        rows = crp.log_dirichlet_multinomial(conc, crp.row_counts(n, first, conc.dtype))
        return rows + self.duration_log_prob(value)

    def _per_sequence(self, value, fn):
        value = jnp.asarray(value).astype(jnp.int32)
        lead = value.shape[:-1]
        lengths = jnp.full(lead, self.num_steps, jnp.int32) if self.lengths is None else jnp.broadcast_to(
            self.lengths, lead)
        return jax.vmap(fn)(value.reshape((-1, self.num_steps)), lengths.reshape(-1)).reshape(lead)

    @validate_sample
    def log_prob(self, value):
        if self.untruncated:
            k = self.num_states
            log_init = safe_log(self.initial_probs[:k])
            log_trans = hsmm.without_self_transitions(self.transition_matrix)
            return self._per_sequence(value, lambda z, n: self._untruncated_log_prob(z, n, log_init, log_trans))
        log_init, log_trans, (log_dur, log_surv), first = self.tables()
        return self._per_sequence(value, lambda z, n: hsmm.hsmm_log_prob(
            z, log_init, log_trans, log_dur, log_surv, n, right_censored=self.right_censored, first=first))

    def sample_with_intermediates(self, key, sample_shape=()):
        return _draw_semi_markov(self, key, tuple(sample_shape), host_warnings_enabled())

    def sample(self, key, sample_shape=()):
        return self.sample_with_intermediates(key, sample_shape)[0]


@partial(jax.jit, static_argnums=(2, 3))
def _draw_semi_markov(chain: SemiMarkovChain, key, sample_shape, warn=True):
    """Jitted body of :meth:`SemiMarkovChain.sample_with_intermediates`."""
    shape = sample_shape + chain.batch_shape
    n = int(np.prod(shape)) if shape else 1
    log_dur, first = chain.duration_logits()
    states, escapes = jax.vmap(lambda k: hsmm.sample_segments(
        k, safe_log(chain.initial_probs), safe_log(chain.transition_matrix), log_dur, chain.num_steps,
        first=first))(random.split(key, n))
    if warn:
        host_warning(warn_escape, escapes, "SemiMarkovChain.sample")
    return states.reshape(shape + (chain.num_steps,)), [escapes.reshape(shape)]


class HDPHSMM(ModelClass, Distribution):
    r"""The explicit-duration HDP-HSMM of Johnson & Willsky (2013) as a generative distribution over
    sequences (module docstring).

    Arguments: ``gamma`` (top-level concentration), ``alpha`` (transition concentration),
    ``duration`` (a duration family of :mod:`numpyro_hdphmm.durations`, e.g.
    ``nh.durations.Poisson(2.0, 0.1)``, or a callable ``k -> Distribution`` of the duration of state
    ``k`` over the user's own sites, wrapped in :class:`~numpyro_hdphmm.durations.Custom`),
    ``emission`` (an emission family or a callable ``k -> Distribution``, as for
    :class:`~numpyro_hdphmm.StickyHDPHMM`), ``max_states`` (the capacity ``K``), ``max_duration``
    (``D``: durations are truncated to ``{1..D}`` and renormalized; the sampler's cost grows as
    ``T K D``; ``None``: the untruncated laws, module docstring), ``num_steps`` (the length of a
    generated sequence), ``right_censoring`` (default True: the last segment may continue past the
    end) and ``left_censoring`` (default False: the first segment starts at the first step).

    Declare it with :func:`numpyro_hdphmm.sample`: the sites are those of the sticky HDP-HMM (with
    ``kappa = 0``: the duration laws replace the self-transition bias) plus the duration
    parameters ``{name}_duration_{p}`` (one per parameter of the family, leading axis ``K``), and the
    states site's law is a :class:`SemiMarkovChain`.  :class:`~numpyro_hdphmm.infer.WeakLimitGibbs`
    samples it (Johnson & Willsky's weak-limit blocked Gibbs sampler).
    """

    arg_constraints = {"gamma": constraints.positive, "alpha": constraints.positive}
    support = constraints.real
    pytree_data_fields = ("gamma", "alpha", "duration", "emission")
    pytree_aux_fields = ("max_states", "max_duration", "num_steps", "right_censoring", "left_censoring")
    kind = "hsmm"
    draw_arguments = ("gamma", "alpha")

    def __init__(self, gamma, alpha, duration, emission, max_states: int, max_duration: Optional[int], num_steps=None,
                 *, right_censoring: bool = True, left_censoring: bool = False, validate_args=None):
        gamma, alpha = (as_parameter(n, v) for n, v in (("gamma", gamma), ("alpha", alpha)))
        self.max_states = check_capacity("max_states", max_states, 2)
        self.max_duration = None if max_duration is None else check_capacity("max_duration", max_duration, 1)
        self.num_steps = None if num_steps is None else check_capacity("num_steps", num_steps, 1)
        if not isinstance(emission, EmissionFamily):
            if not callable(emission) or isinstance(emission, Distribution):
                raise ValueError(
                    "`emission` must be an emission family from numpyro_hdphmm.emissions or a callable "
                    f"k -> numpyro Distribution (vectorized over states), got {type(emission).__name__}."
                )
            from numpyro_hdphmm.emissions.custom import CustomEmission

            emission = CustomEmission(emission, self.max_states)
        if emission.batch_shape != ():
            raise ValueError(f"`emission` must be a prior (batch shape ()), got batch shape {emission.batch_shape}.")
        for flag, value in (("right_censoring", right_censoring), ("left_censoring", left_censoring)):
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"`{flag}` must be True or False, got {value!r}.")
        self.duration = _check_duration(duration, self.max_states)
        _check_untruncated(self.duration, self.max_duration)
        self.right_censoring = bool(right_censoring)
        self.left_censoring = bool(left_censoring)
        check_positive("gamma", gamma)
        check_positive("alpha", alpha)
        dtype = jnp.result_type(gamma, alpha, float)
        self.gamma = jnp.asarray(gamma, dtype)
        self.alpha = jnp.asarray(alpha, dtype)
        self.emission = emission
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(self.gamma), jnp.shape(self.alpha))
        event_shape = (self.num_steps or 1,) + tuple(emission.event_shape)
        super().__init__(batch_shape=batch_shape, event_shape=event_shape, validate_args=validate_args)

    @property
    def kappa(self):
        """The self-transition bias of the rows' prior: 0 (the duration laws model persistence)."""
        return jnp.zeros((), self.alpha.dtype)

    def site_roles(self) -> Tuple[SiteRole, ...]:
        """The sites :func:`numpyro_hdphmm.sample` declares that the kernel updates: those of the
        HDP-HMM (``kappa = 0``) and the duration parameters it draws itself (role ``"duration"``, one
        row per parameter, :attr:`owned_duration_parameters`; none for
        :class:`~numpyro_hdphmm.durations.Custom`, whose parameters are the user's own sites)."""
        params = self.emission.param_names
        return (
            SiteRole("beta", "beta", description="global weights GEM(gamma, K)"),
            SiteRole("trans", "trans", description="transition rows HDPTransitions(beta, alpha, 0), start row last; "
                                                   "the self-transitions are removed in the segment process"),
            *(SiteRole("emission", p, p, "emission parameter, the family's prior expanded over the K states")
              for p in params),
            *(SiteRole("duration", f"duration_{p}", p, "duration parameter, the family's prior expanded over the "
                                                       "K states") for p in self.owned_duration_parameters),
            SiteRole("states", "states", description="state sequence SemiMarkovChain(trans[K], trans[:K], durations, "
                                                     "T): segments with explicit durations"),
            SiteRole("obs", "", description="observations, the emission likelihood indexed by the states"),
        )

    @property
    def owned_duration_parameters(self) -> Tuple[str, ...]:
        """The duration parameters the kernel draws itself: those of a family with an exact
        conditional draw given complete durations (``conjugate``).  The others (e.g.
        :meth:`~numpyro_hdphmm.durations.NegativeBinomial.gamma_r`'s real ``r``) are sites the inner
        kernel (NUTS) updates through the segment process's density with the rows integrated out,
        like the user's own sites of a :class:`~numpyro_hdphmm.durations.Custom` family."""
        family = self.duration
        return tuple(family.param_names) if family.owns_parameters and family.conjugate else ()

    def semi_markov_chain(self, trans, duration_params, num_steps, lengths=None) -> SemiMarkovChain:
        """The law of the states given the rows ``trans (K+1, K+1)`` and the duration parameters."""
        k = self.max_states
        return SemiMarkovChain(trans[k], trans[:k], self.duration, duration_params, self.max_duration, num_steps,
                               lengths, right_censored=self.right_censoring, left_censored=self.left_censoring)

    def declare(self, name: str, obs=None, lengths=None):
        """Declare the HDP-HSMM's sites (:meth:`site_roles`) in the running model; called by
        :func:`numpyro_hdphmm.sample`."""
        return declare_sites(self, name, obs, lengths, kappa=self.kappa,
                             own_sites=lambda name, k: self.duration.sample_sites(name, k),
                             chain=lambda trans, own, num_steps, lengths: self.semi_markov_chain(
                                 trans, own, num_steps, lengths))

    def _draw_one(self, key, gamma, alpha):
        k_beta, k_trans, k_par, k_dur, k_z, k_y = random.split(key, 6)
        num_states = self.max_states
        beta = GEM(gamma, num_states).sample(k_beta)
        trans = HDPTransitions(beta, alpha, 0.0).sample(k_trans)
        params = self.emission.sample_parameters(k_par, (num_states,))
        duration_params = self.duration.sample_parameters(k_dur, (num_states,))
        chain = self.semi_markov_chain(trans, duration_params, self.num_steps)
        log_dur, first = chain.duration_logits()
        states, overflow = hsmm.sample_segments(k_z, safe_log(trans[num_states]), safe_log(trans[:num_states]),
                                                log_dur, self.num_steps, first=first)
        y = self.emission.sample_observations(k_y, params, states)
        return y, dict(beta=beta, trans=trans, states=states, overflow=overflow, **params,
                       **{f"duration_{p}": v for p, v in duration_params.items()})

    def log_prob(self, value):
        raise NotImplementedError(
            f"{type(self).__name__}.log_prob: the marginal density of an HDP-HSMM has no closed form. Declare the "
            "model with numpyro_hdphmm.sample(name, hsmm, obs=y), which exposes beta, the rows, the emission and "
            "duration parameters and the states as sample sites for nh.infer.WeakLimitGibbs."
        )
