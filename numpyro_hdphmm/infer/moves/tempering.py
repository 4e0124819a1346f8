r"""Replica exchange (parallel tempering) around an algorithm with explicit emission parameters.

**Target.**  ``R`` replicas of the algorithm's state run side by side, rung ``r`` at inverse
temperature ``b_r`` (``0 = b_0 < b_1 < ... < b_{R-1} = 1``; the draws come from rung ``R-1``, the
untempered posterior).  Rung ``r`` samples the tempered posterior

.. math:: \pi_b(x) \propto p(x)\, p(y \mid x)^{b},

``x`` every latent site (states, ``beta``, rows, emission parameters, concentrations) and
``p(y | x) = prod_t f(y_t | theta_{z_t})`` the emission likelihood: the prior is never tempered, so
``b = 0`` samples the prior exactly and ``b = 1`` the posterior.  The joint target of the ``R``
rungs is ``prod_r pi_{b_r}(x_r)``.

**Tempered sweep.**  For an exponential-family emission, ``f(y | theta)^b`` has the conjugate
form of ``f`` with every sufficient statistic scaled by ``b``: the tempered conditional of
``theta_k`` is the family's posterior given the weighted statistics with weights ``b`` instead of
1 (the families' ``sufficient_statistics(x, weights)`` are linear in ``weights``), and the
tempered forward filtering, backward sampling uses ``b log f(y_t | theta_k)``.  The conditionals of
the states' prior side (tables, ``beta``, rows, the concentrations) do not involve the likelihood
and are the untempered ones.  :class:`PoweredLikelihood` presents an emission family this way to
an unchanged sweep (:meth:`Tempered.step`), so every rung runs the algorithm's own sweep, which
leaves ``pi_{b_r}`` invariant.  Families that declare ``temperable = False`` (DP mixtures, whose
component indicators are sampled given unscaled likelihoods; custom emissions, whose parameters the
inner kernel moves) are refused, and so are split-merge moves (their sequential allocation uses
untempered predictive densities) and models with sites for the inner kernel (its target is not
tempered).

**Model classes** (:data:`TEMPERING`, one :class:`ModelTempering` each).  The HDP-HSMM tempers
its emission likelihood as the HMM does (the segment durations are on the prior side, as the
HMM's transitions).  The HDP-SLDS tempers its observation likelihood ``p(y | x, C, R) = prod_t
N(y_t | C x_t + d, R)``, ``x`` the latent path: the modes, the dynamics and the HDP layer see only
``x`` and are untempered; ``N(y | mu, R)^b`` is ``N(y | mu, R / b)`` up to a factor in ``R`` alone,
so the latent path is drawn by the Kalman sampler with the noise ``R / b`` (:class:`PoweredObservation`;
at ``b = 0`` no step is observed), and ``(C, R)`` from their tempered conditional
(:meth:`~numpyro_hdphmm.models.observation.LinearGaussianObservation.tempered_update`).  Each rung
sweeps its own latent path: the view's data is the rung's path, not the untempered rung's.

**Swaps** (Syed, Bouchard-Cote, Deligiannidis & Doucet 2022, "Non-reversible parallel tempering",
the deterministic even-odd scheme, DEO).  After every sweep the neighbouring rungs ``(r, r+1)``
with ``r`` of the sweep's parity (alternating even, odd, even, ...) propose to exchange their
states; the pairs are disjoint, so the proposals are independent, each accepted with

.. math:: \min\{1, \exp[(b_{r+1} - b_r)(\ell_r - \ell_{r+1})]\},\qquad \ell_r = \log p(y \mid x_r)

(the ratio ``pi_{b_r}(x_{r+1}) pi_{b_{r+1}}(x_r) / pi_{b_r}(x_r) pi_{b_{r+1}}(x_{r+1})``: the prior
cancels).  Each swap is a Metropolis-Hastings move on the joint target, so the composition leaves
it, and hence the marginal of the untempered rung, invariant.  Alternating the parities makes a
state that is swapped upwards keep travelling upwards (a non-reversible round trip in ``O(R)``
sweeps instead of ``O(R^2)``).

**Ladder adaptation** (Syed et al. 2022, Sec. 5.3 / Alg. 4): during warmup the sweeps are cut into
rounds of doubling length (8, 16, 32, ... sweeps).  At the end of a round the rejection rate
``r_i`` of each pair estimates the local communication barrier; the cumulative barrier
``Lambda(b_k) = sum_{i<k} r_i`` is interpolated linearly in ``b`` and the new ladder puts the rungs
at equal barrier spacing, ``Lambda(b_k') = k Lambda(1) / (R-1)``, so that every pair rejects at
the same rate.  The ladder is fixed after warmup (adapting it then would make the chain
inhomogeneous); ``b_0 = 0`` and ``b_{R-1} = 1`` never move.

**Evidence.**  The per-rung log-likelihoods ``ell_r`` of every sweep are recorded
(``replica_log_likelihood``), from which :func:`numpyro_hdphmm.results.evidence.log_evidence`
estimates ``log p(y)`` by stepping stones (``docs/tempering.md``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_hdphmm.emissions.base import OneHot, as_weights
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.moves.global_step import concentrations_of_sites
from numpyro_hdphmm.infer.moves.slds import observation_parameters

__all__ = ["Tempered", "TemperedState", "PoweredLikelihood", "PoweredObservation", "ModelTempering", "TEMPERING",
           "EMISSION_TEMPERING", "OBSERVATION_TEMPERING", "initial_ladder", "adapted_ladder", "swap_log_ratio",
           "emission_log_likelihood", "FIRST_ROUND"]

#: the length (sweeps) of the first adaptation round; each following round is twice as long
FIRST_ROUND = 8


class PoweredLikelihood:
    """An emission family whose likelihood is raised to the power ``b`` (module docstring): the
    log-likelihoods scaled by ``b`` and the weights of every statistic by ``b``; every other
    attribute is the family's own.

    :param family: the emission family (``temperable``: its statistics are linear in the weights).
    :param power: the inverse temperature ``b`` (a scalar, traced or not).
    """

    def __init__(self, family, power):
        self.family = family
        self.power = power

    def log_likelihoods(self, x, params):
        """``b log f(x_t | theta_k)``, shape ``(T, K)``."""
        return self.power * self.family.log_likelihoods(x, params)

    def sufficient_statistics(self, x, weights):
        """The family's statistics with weights ``b weights`` (hard labels, :class:`~numpyro_hdphmm.emissions.OneHot`,
        as their one-hot matrix: scaled weights are not one-hot)."""
        return self.family.sufficient_statistics(x, self.power * as_weights(weights))

    def statistics(self, x, weights):
        """:meth:`sufficient_statistics` of a weight matrix or of hard labels (both scaled by ``b``)."""
        return self.sufficient_statistics(x, weights)

    def label_statistics(self, x, labels, num_states):
        """The statistics of the hard labels' one-hot matrix scaled by ``b``."""
        return self.sufficient_statistics(x, OneHot(labels, num_states))

    def update_parameters(self, rng_key, x, weights, params, concentration_prior=None):
        """The family's conditional draw given the weights ``b weights`` (the tempered conditional;
        hard labels as their one-hot matrix)."""
        return self.family.update_parameters(rng_key, x, self.power * as_weights(weights), params, concentration_prior)

    def __getattr__(self, name):
        if name in ("family", "power"):  # not yet set (copy, pickle)
            raise AttributeError(name)
        return getattr(self.family, name)


class PoweredObservation:
    """The observation model of an HDP-SLDS whose likelihood ``p(y | x, C, R)`` is raised to the
    power ``b``: ``N(y | C x + d, R)^b`` is ``N(y | C x + d, R / b)`` up to a factor that involves
    ``R`` alone, so the latent path's conditional is the Kalman sampler's with the noise ``R / b``
    (at ``b = 0`` the observations are dropped instead: the tempered view of :data:`OBSERVATION_TEMPERING`
    masks them), and the
    conditional of ``(C, R)`` is the family's :meth:`~numpyro_hdphmm.models.observation.LinearGaussianObservation.tempered_update`;
    every other attribute is the family's own.

    :param family: the :class:`~numpyro_hdphmm.models.observation.LinearGaussianObservation`.
    :param power: the inverse temperature ``b`` (a scalar, traced or not).
    """

    def __init__(self, family, power):
        self.family = family
        self.power = power

    def kalman_noise(self, params):
        """``R / b`` as the Kalman samplers take it (``R`` itself at ``b = 0``, where no step is observed)."""
        b = jnp.asarray(self.power, params["R"].dtype)
        return self.family.kalman_noise(params) / jnp.where(b > 0, b, 1.0)

    def update(self, rng_key, params, x, y, valid):
        """The tempered conditional draw of the parameters (:meth:`LinearGaussianObservation.tempered_update`)."""
        return self.family.tempered_update(rng_key, params, x, y, valid, self.power)

    def __getattr__(self, name):
        if name in ("family", "power"):  # not yet set (copy, pickle)
            raise AttributeError(name)
        return getattr(self.family, name)


class TemperedState(NamedTuple):
    """The state of :class:`Tempered`: ``replicas`` (the algorithm's state with a leading rung
    axis ``R``; rung ``R-1`` is untempered), ``inverse_temperatures (R,)``, ``parity`` (which
    pairs propose a swap next: ``(r, r+1)`` with ``r % 2 == parity``), ``warmup_left`` (sweeps of warmup left: the ladder
    adapts while positive), ``round_left`` / ``round_length`` (the current adaptation round) and
    ``rejections`` / ``attempts`` ``(R-1,)`` (summed rejection probabilities and swap attempts of
    each pair in the current round)."""

    replicas: Any
    inverse_temperatures: jax.Array
    parity: jax.Array
    warmup_left: jax.Array
    round_left: jax.Array
    round_length: jax.Array
    rejections: jax.Array
    attempts: jax.Array


def initial_ladder(num_replicas: int, dtype=None) -> jax.Array:
    """The starting inverse temperatures ``b_r = (r / (R-1))^4`` (``R`` of them, from 0 to 1):
    closer together near 0, where the log-likelihood of prior draws varies most; warmup adapts
    them (:func:`adapted_ladder`)."""
    r = jnp.arange(num_replicas, dtype=dtype or jnp.result_type(float))
    return (r / (num_replicas - 1)) ** 4


def adapted_ladder(ladder: jax.Array, rejection_rates: jax.Array) -> jax.Array:
    """The ladder at equal spacing of the cumulative communication barrier (Syed et al. 2022,
    Sec. 5.3): ``Lambda(b_k) = sum_{i<k} r_i`` from the pairs' rejection rates ``(R-1,)``,
    interpolated linearly in ``b``, and ``b_k' = Lambda^{-1}(k Lambda(1) / (R-1))``.  The rates are
    floored at ``1e-3`` so that ``Lambda`` increases strictly; ``b_0`` and ``b_{R-1}`` stay."""
    rates = jnp.maximum(rejection_rates, 1e-3)
    barrier = jnp.concatenate([jnp.zeros((1,), ladder.dtype), jnp.cumsum(rates).astype(ladder.dtype)])
    targets = jnp.linspace(0.0, 1.0, ladder.shape[0], dtype=ladder.dtype) * barrier[-1]
    new = jnp.interp(targets, barrier, ladder)
    return new.at[0].set(ladder[0]).at[-1].set(ladder[-1])


def swap_log_ratio(ladder: jax.Array, log_likelihood: jax.Array) -> jax.Array:
    """``(R-1,)`` log acceptance ratios of exchanging the states of rungs ``r`` and ``r+1``:
    ``(b_{r+1} - b_r)(ell_r - ell_{r+1})`` (module docstring)."""
    return (ladder[1:] - ladder[:-1]) * (log_likelihood[:-1] - log_likelihood[1:])


def emission_log_likelihood(emission, data, states, params) -> jax.Array:
    """``log p(y | states, theta) = sum_{n,t valid} log f(x_nt | theta_{z_nt})``: the term the
    tempering raises to a power (``states (N, T)``, ``data`` the
    :class:`~numpyro_hdphmm.infer.plumbing.discovery.SequenceData`)."""
    ll = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(data.x, params)
    picked = jnp.take_along_axis(ll, states[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return jnp.sum(jnp.where(data.valid, picked, 0.0))


class ModelTempering(NamedTuple):
    """How replica exchange tempers one model class: ``check(view, kernel_name)`` refuses
    (``NotImplementedError``) a model it cannot temper exactly, ``view(view, spec, explicit, power)`` is the model as a rung
    at inverse temperature ``power`` sweeps it (``explicit``: the rung's own values), and
    ``log_likelihood(view, spec, explicit)`` is the term raised to the power, ``log p(y | x)``.
    One entry per model class in :data:`TEMPERING`."""

    check: Any
    view: Any
    log_likelihood: Any


def _check_emission(view, name) -> None:
    if not getattr(view.emission, "temperable", False):
        raise NotImplementedError(
            f"{name}(tempering=...): the {type(view.emission).__name__} emission family has no exact tempered update (its "
            "conditional draws do not take scaled statistics); use tempering=None.")


def _emission_view(view, spec, explicit, power):
    return view._replace(emission=PoweredLikelihood(view.emission, power))


def _emission_log_likelihood(view, spec, explicit):
    return emission_log_likelihood(view.emission, view.data, explicit.states, explicit.params)


#: the HDP-HMM and the HDP-HSMM: the emission likelihood ``prod_t f(y_t | theta_{z_t})`` tempered
#: (the HSMM's durations are on the prior side, as the HMM's transitions)
EMISSION_TEMPERING = ModelTempering(_check_emission, _emission_view, _emission_log_likelihood)


def _latent_of(spec, explicit):
    latent = explicit.extra["latent"]
    return latent if spec.batched else latent[None]


def _observation_view(view, spec, explicit, power):
    latent = _latent_of(spec, explicit)
    x, valid = jax.vmap(view.emission.prepare)(latent)
    observed = view.observed
    b = jnp.asarray(power, observed.y.dtype)
    return view._replace(
        data=view.data._replace(y=latent, x=x, valid=valid & observed.valid),  # the rung's own latent path
        observed=observed._replace(family=PoweredObservation(observed.family, power),
                                   y=jnp.where(b > 0, observed.y, jnp.nan)))  # b = 0: no step observed


def _observation_log_likelihood(view, spec, explicit):
    observed = view.observed
    obs_params = observation_parameters(explicit.extra)
    ll = jax.vmap(observed.family.pointwise_log_likelihood, in_axes=(0, None, 0))(
        observed.y, obs_params, _latent_of(spec, explicit).astype(observed.y.dtype))
    return jnp.sum(jnp.where(observed.valid, ll, 0.0))


#: the HDP-SLDS: the observation likelihood ``prod_t N(y_t | C x_t + d, R)`` tempered (the modes,
#: the latent path's dynamics and the HDP layer are on the prior side); each rung sweeps its own
#: latent path
OBSERVATION_TEMPERING = ModelTempering(lambda view, name: None, _observation_view, _observation_log_likelihood)

#: model class (``ModelClass.kind``) -> :class:`ModelTempering`; a model class without an entry
#: runs without replica exchange
TEMPERING = {"hmm": EMISSION_TEMPERING, "hsmm": EMISSION_TEMPERING, "slds": OBSERVATION_TEMPERING}


def tempered_info(base_info):
    """The diagnostics of a tempered algorithm: the base algorithm's fields (of the untempered
    rung's sweep) plus ``swap_accept (R-1,)`` (the acceptance probability of each pair that
    proposed a swap in the sweep; NaN for the pairs of the other parity), ``inverse_temperatures
    (R,)`` and ``replica_log_likelihood (R,)`` (``log p(y | x_r)`` of every rung after the swaps).

    One class per base class, named ``Tempered<base name>`` and found as an attribute of this
    module (module ``__getattr__``), so that states holding it pickle."""
    name = f"Tempered{base_info.__name__}"
    info = _INFO_CLASSES.get(name)
    if info is None:
        fields = tuple(base_info._fields) + ("swap_accept", "inverse_temperatures", "replica_log_likelihood")
        info = NamedTuple(name, [(f, jax.Array) for f in fields])
        info.__module__, info.__qualname__, info.__doc__ = __name__, name, tempered_info.__doc__
        _INFO_CLASSES[name] = info
    return info


_INFO_CLASSES = {}


def __getattr__(name):
    """``Tempered<base>Info`` of an algorithm of the registry (unpickling a state in a new process)."""
    if name.startswith("Tempered") and name.endswith("Info"):
        from numpyro_hdphmm.infer.algorithms import KERNELS  # the registry imports every algorithm

        for kernel in KERNELS:
            if f"Tempered{kernel.algorithm.Info.__name__}" == name:
                return tempered_info(kernel.algorithm.Info)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Tempered(Algorithm):
    """Replica exchange around ``base`` (module docstring): ``R = num_replicas`` rungs, the draws
    from the untempered one.

    :param base: an algorithm whose state is :class:`~numpyro_hdphmm.infer.contract.Explicit` and
        whose sweep reaches the likelihood only through what the model class's entry of
        :data:`TEMPERING` tempers (the emission family's ``log_likelihoods`` and weighted statistics;
        for the HDP-SLDS the observation model's Kalman noise and update): ``temperable = True``.
    :param tempering: the number of rungs ``R >= 2`` (starting ladder :func:`initial_ladder`) or the
        starting inverse temperatures themselves, increasing from 0 to 1.
    """

    def __init__(self, base: Algorithm, tempering: Union[int, Sequence[float]]):
        if not getattr(base, "temperable", False):
            from numpyro_hdphmm.infer.algorithms import KERNELS  # the registry imports every algorithm

            others = [k.__name__ for k in KERNELS if getattr(k.algorithm, "temperable", False)]
            raise NotImplementedError(
                f"{base.name}(tempering=...): replica exchange needs a sweep whose likelihood terms can be raised to a "
                f"power exactly; {base.name} integrates the emission parameters out or truncates the state space in a "
                f"way that has no exact tempered form here. Use {' or '.join(others)} with tempering=, or "
                f"tempering=None.")
        if getattr(base, "split_merge", 0):
            raise NotImplementedError(
                f"{base.name}(split_merge={base.split_merge}, tempering=...): the split-merge moves allocate steps with "
                "untempered predictive densities, so they are not exact on the tempered rungs; use split_merge=0 "
                "with tempering (the swaps do the moves between modes).")
        self.base = base
        self.ladder = _check_tempering(tempering)
        self.num_replicas = len(self.ladder)
        self.name = base.name
        self.model_classes = tuple(k for k in base.model_classes if k in TEMPERING)
        self.beta_prior = base.beta_prior
        self.owns_dp_concentration = base.owns_dp_concentration
        self.owns_column_precision = base.owns_column_precision
        self.sharding = base.sharding
        swaps = (f"; in each of {self.num_replicas} rungs at inverse temperatures from 0 to 1, with non-reversible "
                 "swaps between neighbours (replica exchange; the draws are the untempered rung's)")
        self.describe = {k: v + swaps if k.rpartition(":")[2] == "states" else v for k, v in base.describe.items()}
        self.Info = tempered_info(base.Info)

    #: the log acceptance ratios of the swaps (:func:`swap_log_ratio`)
    swap_log_ratio = staticmethod(swap_log_ratio)

    def transform_model(self, model):
        return self.base.transform_model(model)

    def check(self, spec: ModelSpec) -> None:
        """The base algorithm's refusals, then tempering's: a model class without an entry in
        :data:`TEMPERING`, sites
        for the inner kernel, custom emissions (``NotImplementedError``)."""
        self.base.check(spec)
        if spec.sites.kind not in TEMPERING:
            raise NotImplementedError(
                f"{self.name}(tempering=...): replica exchange is implemented for the model classes "
                f"{sorted(TEMPERING)}; the '{spec.sites.kind}' model of '{spec.sites.name}' runs without it "
                "(tempering=None).")
        if spec.hyper.column_precision is not None:
            raise NotImplementedError(
                f"{self.name}(tempering=...): site '{spec.hyper.column_precision}' holds ARD column precisions of the "
                "autoregressive emission; the rungs share one view of the emission family, so a rung's own precisions "
                "would not enter its sweep. Give them fixed values (numpyro.handlers.condition) or use tempering=None.")
        if spec.inner_sites:
            raise NotImplementedError(
                f"{self.name}(tempering=...): the sites {list(spec.inner_sites)} are updated by the inner kernel, whose "
                "target is not tempered, so the tempered rungs would not be exact. Give them fixed values "
                "(numpyro.handlers.condition) or a prior with an exact update, or use tempering=None.")
        if not spec.owns_parameters:
            raise NotImplementedError(
                f"{self.name}(tempering=...): custom emissions keep their parameters in the user's sites, which "
                "the inner kernel moves untempered; use tempering=None.")

    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> TemperedState:
        """Every rung starts from ``start`` (the base algorithm's ``init``), at the starting ladder."""
        TEMPERING[spec.sites.kind].check(view, self.name)
        if spec.hyper.emission_base is not None:
            raise NotImplementedError(
                f"{self.name}(tempering=...): the shared emission base is drawn from integer table counts, which "
                "a tempered rung does not have; use tempering=None.")
        base_state = self.base.init(rng_key, spec, view, start)
        dtype = jnp.result_type(float)
        R = self.num_replicas
        replicas = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (R,) + jnp.shape(a)), base_state)
        return TemperedState(replicas, jnp.asarray(self.ladder, dtype), jnp.zeros((), jnp.int32),
                             jnp.zeros((), jnp.int32), jnp.full((), FIRST_ROUND, jnp.int32),
                             jnp.full((), FIRST_ROUND, jnp.int32), jnp.zeros((R - 1,), dtype),
                             jnp.zeros((R - 1,), dtype))

    def with_warmup(self, state: TemperedState, num_warmup: int) -> TemperedState:
        """The ladder adapts during the run's ``num_warmup`` sweeps."""
        return state._replace(warmup_left=jnp.asarray(num_warmup, jnp.int32))

    def step(self, rng_key, state: TemperedState, spec: ModelSpec, view: ModelView):
        """One sweep of every rung at its inverse temperature, then the swaps of one parity and, in
        warmup at the end of a round, the new ladder: ``(TemperedState, Info)``."""
        R = self.num_replicas
        k_sweep, k_swap = random.split(rng_key)
        ladder = state.inverse_temperatures

        tempering = TEMPERING[spec.sites.kind]

        def sweep(key, replica, power):
            # each rung's own concentrations (the view holds the untempered rung's, read from the model's
            # sites) and, for a model class with a latent path, its own path
            own = self.base.explicit(random.fold_in(key, 2), replica, spec, view)
            tempered = tempering.view(view, spec, own, power)._replace(
                hyper=concentrations_of_sites(spec, own.hyper, view.hyper))
            replica, info = self.base.step(key, replica, spec, tempered)
            explicit = self.base.explicit(random.fold_in(key, 1), replica, spec, tempered)
            return replica, info, tempering.log_likelihood(view, spec, explicit)

        replicas, infos, ll = jax.vmap(sweep)(random.split(k_sweep, R), state.replicas, ladder)
        # DEO swaps: the pairs (r, r+1) with r % 2 == parity, disjoint, each accepted on its own
        pairs = jnp.arange(R - 1)
        attempt = pairs % 2 == state.parity
        accept_prob = jnp.exp(jnp.minimum(self.swap_log_ratio(ladder, ll), 0.0))
        accept_prob = jnp.where(jnp.isnan(accept_prob), 0.0, accept_prob)
        accepted = attempt & (random.uniform(k_swap, (R - 1,), ladder.dtype) < accept_prob)
        up = jnp.concatenate([accepted, jnp.zeros((1,), bool)])  # rung r takes rung r+1's state
        down = jnp.concatenate([jnp.zeros((1,), bool), accepted])  # rung r+1 takes rung r's state
        rungs = jnp.arange(R)
        perm = jnp.where(up, rungs + 1, jnp.where(down, rungs - 1, rungs))
        replicas = jax.tree_util.tree_map(lambda a: a[perm], replicas)
        ll = ll[perm]
        # ladder adaptation in warmup, at the end of each round
        rejections = state.rejections + jnp.where(attempt, 1.0 - accept_prob, 0.0)
        attempts = state.attempts + attempt
        round_left = state.round_left - 1
        adapt = (round_left <= 0) & (state.warmup_left > 0)
        new_ladder = jnp.where(adapt, adapted_ladder(ladder, rejections / jnp.maximum(attempts, 1.0)), ladder)
        round_length = jnp.where(adapt, 2 * state.round_length, state.round_length)
        new_state = TemperedState(
            replicas, new_ladder, 1 - state.parity, state.warmup_left - 1,
            jnp.where(round_left <= 0, round_length, round_left), round_length,
            jnp.where(round_left <= 0, 0.0, rejections), jnp.where(round_left <= 0, 0.0, attempts))
        cold = jax.tree_util.tree_map(lambda a: a[R - 1], infos)
        info = self.Info(*cold, jnp.where(attempt, accept_prob, jnp.nan), new_ladder, ll)
        return new_state, info

    def explicit(self, rng_key, state: TemperedState, spec: ModelSpec, view: ModelView) -> Explicit:
        """The untempered rung's explicit values."""
        cold = jax.tree_util.tree_map(lambda a: a[-1], state.replicas)
        return self.base.explicit(rng_key, cold, spec, view)


def _check_tempering(tempering) -> np.ndarray:
    """The starting ladder of ``tempering`` (an int ``R >= 2`` or increasing inverse temperatures
    from 0 to 1); ``ValueError`` otherwise."""
    if isinstance(tempering, (bool, np.bool_)):
        raise ValueError(f"`tempering` must be a number of rungs (an int >= 2) or a ladder of inverse temperatures, "
                         f"got {tempering!r}.")
    if isinstance(tempering, (int, np.integer)):
        if tempering < 2:
            raise ValueError(f"`tempering` must be at least 2 rungs (the untempered one and the prior), got {tempering}.")
        return np.asarray(initial_ladder(int(tempering), np.float64))
    try:
        ladder = np.asarray(tempering, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"`tempering` must be an int >= 2 or a sequence of inverse temperatures, got {tempering!r}.") from None
    if (ladder.ndim != 1 or ladder.size < 2 or not np.all(np.isfinite(ladder)) or ladder[0] != 0.0
            or ladder[-1] != 1.0 or np.any(np.diff(ladder) <= 0)):
        raise ValueError("`tempering` as a ladder must be strictly increasing inverse temperatures from 0.0 (the prior) "
                         f"to 1.0 (the posterior), got {tempering!r}.")
    return ladder

