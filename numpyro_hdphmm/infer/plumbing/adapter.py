r"""How an HDP-HMM kernel is built: a pure algorithm core on a typed contract, and one thin NumPyro
adapter around it.

**The algorithm** (one module per algorithm, BlackJAX-style): an :class:`Algorithm` subclass
whose pure, jittable functions are

* ``init(rng_key, spec, view, start) -> State``: the algorithm's carried state from explicit
  starting values ``start`` (:class:`Explicit`: the states, ``beta``, the rows, the emission
  parameters, the values of the sites with exact updates);
* ``step(rng_key, state, spec, view) -> (State, Info)``: one sweep;
* ``explicit(rng_key, state, spec, view) -> Explicit``: the explicit values of the model's sites
  for the record.  An algorithm may keep its latent structure collapsed (e.g. table counts instead
  of ``beta`` and rows) and draw the explicit sites from their conditionals here; the default
  returns the state, for algorithms whose state *is* :class:`Explicit`;
* ``resume(rng_key, state, spec, view) -> State``: after the inner kernel moved the other sites
  (which it sees with the rows integrated out, :meth:`Algorithm.inner_model`), redraw what it saw
  integrated out (default: the rows, Fox et al. eq. 37/41);
* ``inner_kwargs(state) -> dict``: extra keyword arguments the inner kernel's model needs from the
  algorithm's state (default: none; e.g. the table counts of a collapsed seating), popped by
  ``inner_model``'s wrapper.

``State`` and ``Info`` are NamedTuples; ``Info`` holds per-sweep diagnostics only (``overflow``,
acceptance rates of MH-corrected moves, particle ESS, ...): its fields reach
``MCMC.get_extra_fields`` and ArviZ's ``sample_stats`` under their own names.  ``spec`` is the
immutable :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelSpec` found once before compilation,
``view`` the :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelView` of the model at the current values.

**The adapter** (:class:`HDPKernel`) implements NumPyro's ``MCMCKernel`` around an algorithm: it
runs :func:`~numpyro_hdphmm.infer.plumbing.discovery.discover` once, keeps the sample field ``z`` (every
latent site of the model, so ArviZ and ``Predictive`` work), runs ``step``, records ``explicit``,
updates the remaining latent sites with an inner kernel (NUTS by default) on the model with the
rows integrated out, implements the block protocol of :class:`numpyro.infer.Gibbs` (``model``,
``refresh``, ``wrap_model``, ``get_constrain_fn``) and vectorizes over chains.  Its compiled
``init`` and sweep are cached on the kernel (:meth:`HDPKernel._program`), keyed by the spec,
``num_warmup``, vectorized chains and the model arguments' structure, shapes, dtypes and
non-array values, with the data passed as arguments: a second ``MCMC.run`` with a new key or new
data of the same shape, ``jit_model_args=True`` and a ``post_warmup_state`` continuation compile
neither again.  (NumPyro's own sampling loop is recompiled by NumPyro on every ``run`` with
``progress_bar=False``, for every kernel, NUTS included; with the progress bar and
``jit_model_args=True`` it is reused too.)
``docs/kernels.md`` walks through the weak-limit kernel as the worked example.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, ClassVar, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import random
from jax.scipy.special import gammaln
from numpyro.distributions import constraints
from numpyro.infer import NUTS
from numpyro.infer.gibbs import conditioned, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import log_density
from numpyro.primitives import Messenger
from numpyro.util import is_prng_key

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.compile import one_off_applies, one_off_jit
from numpyro_hdphmm._core.slots import count_used, occupied
from numpyro_hdphmm._core.validation import host_warning, is_concrete
from numpyro_hdphmm.infer.plumbing.discovery import (
    ModelSpec,
    ModelView,
    UpdatePlan,
    discover,
    latent_sites,
    model_view,
    prior_trace,
    unwrap,
)
from numpyro_hdphmm.distributions import WeakLimitBeta
from numpyro_hdphmm.infer.plumbing import initialization
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding
from numpyro_hdphmm.primitives import HDP_ROLE

__all__ = ["Explicit", "Algorithm", "HDPState", "HDPKernel", "flatten_time", "collapse_rows", "LARGE_CAPACITY"]


class Explicit(NamedTuple):
    """Explicit values of the HDP-HMM's sites: ``states (N, T)``, ``beta (K+1,)``, ``trans (K+1,
    K+1)`` (start row last), ``params`` (emission parameters, leading axis ``K``; empty for custom
    emissions) and ``hyper`` (``{site: value}`` of the sites with exact updates)."""

    states: jax.Array
    beta: jax.Array
    trans: jax.Array
    params: Dict[str, jax.Array]
    hyper: Dict[str, jax.Array]


def flatten_time(x):
    """Merge the sequence and time axes ``(N, T, ...) -> (N * T, ...)`` of every leaf (the
    prepared observations of all sequences as one time axis)."""
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), x)


def hyper_site_values(spec: ModelSpec, hyper: crp.Concentrations, sigma=None) -> Dict[str, jax.Array]:
    """``{site: value}`` of the sites with exact updates given the new concentrations (and the
    DP-mixture concentration ``sigma``)."""
    sites = spec.hyper
    gamma, alpha, kappa = hyper
    values = {}
    for site, value in ((sites.gamma, gamma), (sites.alpha, alpha), (sites.kappa, kappa), (sites.c, alpha + kappa),
                        (sites.rho, kappa / (alpha + kappa)), (sites.dp_concentration, sigma)):
        if site is not None:
            values[site] = jnp.asarray(value, jnp.result_type(float))
    return values


class _CollapsedChain(dist.Distribution):
    """The states site of the inner kernel's model: the log-probability of the observed states
    with the transition rows integrated out (:func:`~numpyro_hdphmm._core.crp.log_dirichlet_multinomial`
    of their counts), put on the first element of the batch (it does not factor over sequences)."""

    support = constraints.nonnegative_integer

    def __init__(self, concentration, lengths, batch_shape, event_shape):
        self.concentration, self.lengths = concentration, lengths
        super().__init__(batch_shape=batch_shape, event_shape=event_shape)

    def sample(self, key, sample_shape=()):
        raise NotImplementedError("the collapsed states site is observed (conditioned) in the inner model")

    def log_prob(self, value):
        capacity = self.concentration.shape[-1] - 1
        n, first = crp.transition_counts(value, capacity, self.lengths)
        total = crp.log_dirichlet_multinomial(self.concentration, crp.row_counts(n, first, self.concentration.dtype))
        if not self.batch_shape:
            return total
        return jnp.zeros(self.batch_shape, total.dtype).at[(0,) * len(self.batch_shape)].set(total)


class _CollapseRows(Messenger):
    """The model as the inner kernel sees it: the transition rows integrated out.

    The ``{name}_trans`` site contributes nothing and the ``{name}_states`` site the probability of
    the states given ``alpha``, ``beta``, ``kappa`` with the rows integrated out (Dirichlet-
    multinomial, Fox et al. eq. 37's normalizers).  The inner kernel then updates every site that
    shapes the rows (hyperpriors without an exact update, however the model computes ``alpha`` and
    ``kappa``) from its conditional with the rows integrated out, and the algorithm redraws the rows
    from ``Dir(alpha beta + kappa e_j + n_j.)`` afterwards (a partially collapsed Gibbs block,
    :meth:`Algorithm.resume`).  Evaluating the rows' Dirichlet density instead is inexact in
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
            msg["fn"] = _CollapsedChain(self._concentration, unwrap(chain).lengths, tuple(chain.batch_shape),
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


class _StatesInUse(Messenger):
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
        elif role == "beta" and isinstance(unwrap(fn), WeakLimitBeta):
            msg["fn"] = _AggregatedWeights(unwrap(fn).concentration, self.used.shape[0], self.used)


def collapse_rows(model):
    """``model`` with the transition rows integrated out (:class:`_CollapseRows`): the inner
    kernel's model for every algorithm that keeps ``beta`` explicit."""
    return _CollapseRows(model)


class Algorithm:
    """Base class of an algorithm core (see the module docstring for the contract).

    Class attributes: ``name`` (the kernel's name in messages), ``beta_prior`` (``"gem"``: the
    infinite model; ``"weak_limit"``: the algorithm samples ``Dir(gamma/L)``), ``owns_dp_concentration``
    (the algorithm updates a DP-mixture emission's concentration site exactly), ``Info`` (the
    NamedTuple of its per-sweep diagnostics) and ``describe`` (what it does with each site role,
    for the update plan).
    """

    name: ClassVar[str] = "HDP-HMM algorithm"
    beta_prior: ClassVar[str] = "gem"
    owns_dp_concentration: ClassVar[bool] = True
    Info: ClassVar[type] = NamedTuple
    describe: ClassVar[Dict[str, str]] = {}
    #: where the sweep's sequences and vectorized chains run (:mod:`numpyro_hdphmm.infer.plumbing.sharding`);
    #: the kernels vmap over chains with ``spmd_axis_name=sharding.spmd_axis_name``
    sharding: SequenceSharding = SequenceSharding()

    def transform_model(self, model):
        """The model as the algorithm samples it (the weak limit replaces the ``GEM`` prior)."""
        return model

    def check(self, spec: ModelSpec) -> None:
        """Raise ``NotImplementedError`` for models the algorithm cannot sample."""

    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit):
        """The carried state from explicit starting values (default: ``start`` itself)."""
        return start

    def step(self, rng_key, state, spec: ModelSpec, view: ModelView):
        """One sweep: ``(State, Info)``."""
        raise NotImplementedError

    def explicit(self, rng_key, state, spec: ModelSpec, view: ModelView) -> Explicit:
        """The explicit values of the model's sites (default: the state, an :class:`Explicit`)."""
        return state

    def resume(self, rng_key, state, spec: ModelSpec, view: ModelView):
        """After the inner kernel: the rows redrawn from ``Dir(alpha beta + kappa e_j + n_j.)``
        (start row ``Dir(alpha beta + n_0.)``) at the new values (Fox et al. eqs. 37, 41)."""
        n, first = crp.transition_counts(state.states, spec.capacity, view.data.lengths)
        dtype = state.beta.dtype
        alpha, kappa = (jnp.asarray(v, dtype) for v in view.hyper[1:])
        trans = crp.sample_rows(rng_key, state.beta, alpha, kappa, n, first)
        return state._replace(trans=trans.astype(state.trans.dtype))

    def inner_model(self, model):
        """The model as the inner kernel sees it (default: the rows integrated out)."""
        return collapse_rows(model)

    def inner_kwargs(self, state) -> Dict[str, Any]:
        """Extra keyword arguments of the inner kernel's model, computed from the algorithm's
        state (default: none).  The adapter adds them to the model's keyword arguments whenever
        it initializes or runs the inner kernel; :meth:`inner_model` must pop them before calling
        the user's model (e.g. the table counts the density of a collapsed seating needs)."""
        return {}


class _HDPStateFields(NamedTuple):
    z: Dict[str, jax.Array]
    algorithm: Any
    info: Any
    num_states: jax.Array
    lp: jax.Array
    data_loglik: jax.Array
    nonfinite: jax.Array
    accept_prob: jax.Array
    diverging: jax.Array
    inner_state: Any
    rng_key: jax.Array
    sweep: jax.Array


class HDPState(_HDPStateFields):
    """State of every HDP-HMM kernel.

    ``z``: every latent site's value (the sample field); ``algorithm``: the algorithm's carried
    state; ``info``: its diagnostics of the last sweep (each field also readable as an attribute of
    the state, e.g. ``state.overflow``, so that ``extra_fields=("overflow",)`` works);
    ``num_states``: states in use; ``lp``: the log joint of what the model uses (rows integrated
    out, unused slots left out, :meth:`HDPKernel._log_joint`); ``data_loglik``: ``log p(y |
    states, theta)``; ``nonfinite``: some recorded site or ``lp`` was NaN or infinite (a warning
    names the sites);
    ``accept_prob``/``diverging``: statistics of the inner kernel (1.0/False without one);
    ``inner_state``: the inner kernel's state (or ``None``); ``rng_key``; ``sweep``: the sweeps
    done since ``init`` (warmup included).
    """

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        info = tuple.__getitem__(self, 2)
        try:
            return getattr(info, name)
        except AttributeError:
            raise AttributeError(f"'HDPState' has no field or diagnostic '{name}'") from None


def _warn_overflow(overflow, capacity, kernel):
    if np.any(np.asarray(overflow)):
        what = (
            "so the weak-limit approximation had no free state left (it is accurate only when L is well above "
            "the number of states in use)"
            if kernel == "WeakLimitGibbs"
            else "so no new state could be instantiated there (the draw is from the model truncated at max_states)"
        )
        warnings.warn(
            f"{kernel}: all max_states={capacity} state slots were occupied in a sweep, {what}; "
            f"increase max_states (e.g. to {2 * capacity}). The `overflow` field (extra_fields=('overflow',)) "
            "marks those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


#: the share of post-warmup sweeps (per chain) in which a BeamSampler overflow plausibly changed
#: the draw, above which the kernel warns (docs/errors.md, "Runtime warnings")
OVERFLOW_RATE = 0.01
#: ... and at least this many of them (one early event is not a rate)
OVERFLOW_EVENTS = 5
_overflow_events = {}


def _warn_overflow_rate(value, capacity, kernel, num_chains, key):
    """Host side of the BeamSampler's overflow warning: ``value = (chains, chains * sweep)`` summed
    over the chains with an event in this sweep; warns once the events reach
    :data:`OVERFLOW_RATE` of the post-warmup sweeps of every chain, and :data:`OVERFLOW_EVENTS` in number."""
    value = np.asarray(value).reshape(-1, 2).sum(0)
    chains, sweep = int(value[0]), int(value[1]) // max(int(value[0]), 1)
    total, last, warned = _overflow_events.get(key, (0, -1, False))
    if sweep < last:  # a new run starts the count again
        total, warned = 0, False
    total += chains
    due = not warned and total >= max(OVERFLOW_EVENTS, OVERFLOW_RATE * sweep * num_chains)
    _overflow_events[key] = (total, sweep, warned or due)
    if due:  # once per run
        warnings.warn(
            f"{kernel}: in {total} of {sweep * num_chains} sweeps after warmup (over all chains) the slice variables "
            f"asked for more than max_states={capacity} states and the sweep used a state it had just instantiated (or "
            "every slot), so "
            "the states left out at the capacity were plausibly needed too and those draws come from the model "
            f"truncated at max_states; increase max_states (e.g. to {2 * capacity}). The `overflow` and `fresh_used` "
            "fields (extra_fields=('overflow', 'fresh_used')) mark those sweeps.",
            RuntimeWarning,
            stacklevel=2,
        )


def _warn_divergence(count, kernel):
    n = int(np.sum(np.asarray(count)))
    if n > 0:
        warnings.warn(
            f"{kernel}: the inner kernel (NUTS by default), which updates the sites without an exact update (a "
            "custom emission's parameters, hyperparameters without a recognized prior), diverged after warmup, so "
            "its draws of those sites may be biased. Reparameterize those sites or give them tighter priors, or "
            "pass inner_kernel=NUTS(model, target_accept_prob=0.95). The `diverging` field (in sample_stats) marks "
            "those sweeps and nh.labels.print_summary(mcmc) counts them.",
            RuntimeWarning,
            stacklevel=2,
        )


def _nonfinite_sites(z, lp):
    """``(num float sites + 1,)`` bool: which recorded floating-point site (in ``z``'s order), and
    last ``lp``, holds a NaN or infinite value anywhere (over every chain of a batched state)."""
    flags = [~jnp.all(jnp.isfinite(v)) for v in z.values() if jnp.issubdtype(jnp.result_type(v), jnp.inexact)]
    return jnp.stack(flags + [~jnp.all(jnp.isfinite(lp))])


def _warn_nonfinite(bad, names, kernel):
    bad = np.asarray(bad)
    if np.any(bad):
        sites = ", ".join(n for n, b in zip(names, bad.reshape(-1)) if b)
        warnings.warn(
            f"{kernel}: a sweep produced NaN or infinite values at {sites} (recorded as they are; the `nonfinite` "
            "field marks those sweeps). Check the data's scale (rescale, or enable float64 with "
            "jax.config.update('jax_enable_x64', True)) and the priors of these sites.",
            RuntimeWarning,
            stacklevel=2,
        )


#: capacities above this warn at initialization (see :func:`_check_capacity`)
LARGE_CAPACITY = 1024


def _check_capacity(capacity: int, kernel: str) -> None:
    """Warn when ``max_states`` exceeds :data:`LARGE_CAPACITY`: the explicit sites hold a
    ``(K+1, K+1)`` transition matrix, so compile time, memory and every stored draw grow with
    ``K^2`` (measured on 2 CPU cores, T = 100: 17 s at K = 1000, 55 s and 1.7 GB at K = 2000,
    6-15 minutes and 6-8 GB at K = 5000)."""
    if capacity > LARGE_CAPACITY:
        warnings.warn(
            f"{kernel}: max_states={capacity} is above {LARGE_CAPACITY}. Compile time and memory grow with "
            f"max_states^2 (the {capacity + 1} x {capacity + 1} transition matrix is a site of the model and of every "
            "stored draw): about a minute to compile at 2000, many minutes and several GB at 5000. The infinite-model "
            "kernels instantiate states only as the data need them and the weak limit needs L of the order of a few "
            "times the expected number of states: a capacity of 2-5 times the number of states you expect is enough.",
            RuntimeWarning,
            stacklevel=3,
        )


#: data size (elements) above which the initial log joint is compiled rather than run eagerly
_COMPILE_LOG_JOINT_SIZE = 1_000_000

#: :func:`~numpyro_hdphmm._core.slots.count_used` as one program: NumPyro applies the kernel's
#: ``postprocess_fn`` to the collected draws eagerly, where each operation would compile on its own
_count_used_jit = jax.jit(count_used, static_argnums=1)

#: data size (elements of the model's array arguments, times the vectorized chains) up to which the
#: clustering of the data-driven start is its own one-off program (no backend optimization; CPU,
#: outside any trace): it compiles in 0.7 s instead of 3 s, and runs 5 times slower (Fox A: 0.1 s
#: more at T = 1000, 1 s at 10^4, 10 s at 10^5; docs/benchmarks.md, "Compile time").  Above it, and
#: elsewhere, the init program clusters, as before
_ONE_OFF_CLUSTER_SIZE = 5_000

#: tracing a model with its array arguments abstract fails with these when the model needs their
#: values (``int(y.max())``); the kernel then compiles with the arguments as constants, uncached
_CONCRETE_ARGUMENT_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                             jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError)


class _Arguments(NamedTuple):
    """The model's arguments split for compilation: ``arrays`` (every array leaf, passed to the
    compiled function as an argument, so that new data of the same shape reuses the program) and
    ``key`` (hashable: the pytree structure, the arrays' shapes and dtypes and every other leaf's
    value, which the program is specialized on); ``None`` when a leaf is unhashable."""

    arrays: list
    key: Any
    treedef: Any
    is_array: tuple
    others: tuple

    @staticmethod
    def split(model_args, model_kwargs) -> "_Arguments":
        leaves, treedef = jax.tree_util.tree_flatten((model_args, model_kwargs))
        is_array = tuple(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves)
        arrays = [leaf for leaf, a in zip(leaves, is_array) if a]
        others = tuple(leaf for leaf, a in zip(leaves, is_array) if not a)
        key = (treedef, is_array, tuple((np.shape(x), np.dtype(x.dtype).str) for x in arrays), others)
        try:
            hash(key)
        except TypeError:
            key = None
        return _Arguments(arrays, key, treedef, is_array, others)

    def join(self, arrays):
        """``(model_args, model_kwargs)`` with ``arrays`` in place of the array leaves."""
        it, other = iter(arrays), iter(self.others)
        leaves = [next(it) if a else next(other) for a in self.is_array]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


class HDPKernel(MCMCKernel):
    """The NumPyro ``MCMCKernel`` around an :class:`Algorithm` (see the module docstring).

    :param model: the NumPyro model; it must declare one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param inner_kernel: kernel for the latent sites the algorithm does not own and cannot
        update exactly; ``None`` builds ``NUTS`` on the model.  It is re-bound to the model
        conditioned on every other site (``kernel.wrap_model``).
    :param exact_hyperparameters: use the exact updates where they apply (``False`` sends every
        hyperparameter site to the inner kernel).
    :param hyperparameters: how the recognized concentrations are updated: ``"collapsed"``
        (default) slice-samples ``(log(alpha + kappa), logit(kappa / (alpha + kappa)))`` given the
        states and ``beta`` with the rows integrated out, and ``log gamma`` given the tables with
        ``beta`` integrated out (:func:`numpyro_hdphmm._core.crp.sample_global`); ``"auxiliary"``
        uses Fox et al.'s auxiliary-variable updates given the tables.  Both are exact; on the
        README's example the collapsed updates give bulk ESS 350-620 of 600 draws for ``gamma``,
        ``alpha`` and ``kappa`` where the auxiliary ones give 4-290, at a similar cost per sweep
        (``docs/benchmarks.md``, "Hyperparameter mixing").  :class:`~numpyro_hdphmm.infer.RCDSampler`,
        which keeps no ``beta``, draws ``beta`` given its tables first and re-seats the franchise
        afterwards (:func:`numpyro_hdphmm.infer.algorithms.rcd.reseat_with_concentrations`).
    :param verbose: print the update plan (:meth:`update_plan`) at initialization.
    :param init_strategy: where the chains start (:mod:`numpyro_hdphmm.infer.plumbing.initialization`):
        ``"data"`` (default: the states from clustering windows of the observations, refined with
        the family's likelihood, the emission parameters, ``beta`` and the rows drawn given them;
        :func:`~numpyro_hdphmm.infer.plumbing.initialization.init_to_data` for its options), ``"prior"``
        (every site a draw from the prior), or a NumPyro init strategy
        (``numpyro.infer.init_to_value(values={...})``, ``init_to_median``, ...) for the sites
        that are not the HDP-HMM's own, the HDP-HMM's sites that ``init_to_value`` names taken
        as given (e.g. ``values={"y_states": z0}``) and the rest drawn given the states.
        ``MCMC.run(init_params=...)`` overrides any of them.

    Subclasses set :attr:`algorithm` (an :class:`Algorithm` instance, built from the kernel's
    options in ``__init__``).
    """

    sample_field = "z"
    algorithm: Algorithm = Algorithm()

    def __init__(self, model, *, inner_kernel: Optional[MCMCKernel] = None, exact_hyperparameters: bool = True,
                 hyperparameters: str = "collapsed", verbose: bool = False, init_strategy="data"):
        if not callable(model):
            raise ValueError("`model` must be a NumPyro model (a callable).")
        if inner_kernel is not None and not isinstance(inner_kernel, MCMCKernel):
            raise ValueError(f"`inner_kernel` must be a numpyro MCMCKernel (e.g. NUTS(model)), got {type(inner_kernel).__name__}.")
        if hyperparameters not in crp.HYPERPARAMETER_UPDATES:
            raise ValueError(f"`hyperparameters` must be one of {crp.HYPERPARAMETER_UPDATES}, got {hyperparameters!r}.")
        self._hyperparameters = hyperparameters
        self._init_strategy = initialization.resolve_init_strategy(init_strategy)
        self._model = model
        self._inner_proto = inner_kernel
        self._exact_hyper = bool(exact_hyperparameters)
        self._verbose = bool(verbose)
        self._spec: Optional[ModelSpec] = None
        self._spec_key = None
        self._model_cache = None
        self._reset_programs()

    def _reset_programs(self):
        """Forget the inner kernel and the compiled programs (:meth:`_program`)."""
        self._inner = None
        self._inner_spec = None
        self._programs = {}
        self._config = None
        self._constant_args = None
        self._sample_fn = None

    # ------------------------------------------------------------------ protocol
    @property
    def model(self):
        """The model the kernel samples (what ArviZ re-runs and :class:`numpyro.infer.Gibbs`
        compares across blocks): the user's model, or its approximation for approximate kernels."""
        if self._model_cache is None or self._model_cache[0] is not self._model:
            self._model_cache = (self._model, self.algorithm.transform_model(self._model))
        return self._model_cache[1]

    @property
    def default_fields(self):
        return ("z", "num_states", "lp", "data_loglik", "nonfinite", "accept_prob", "diverging") + tuple(
            self.algorithm.Info._fields)

    @property
    def spec(self) -> Optional[ModelSpec]:
        """The :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelSpec` found at the last ``init``."""
        return self._spec

    def update_plan(self, *model_args, **model_kwargs) -> UpdatePlan:
        """How every latent site of the model is updated, and why (discovery on the given data)."""
        return self._discover(model_args, model_kwargs).plan

    def get_diagnostics_str(self, state):
        return f"{int(state.num_states)} states, lp {float(state.lp):.4g}"

    def refresh(self, state, model_args, model_kwargs):
        """Recompute the log joint after sibling blocks of a :class:`numpyro.infer.Gibbs` moved."""
        lp, data = self._log_joint(state.z, model_args, model_kwargs or {})
        return state._replace(lp=lp, data_loglik=data)

    def wrap_model(self, wrapper):
        new = copy.copy(self)
        new._model = wrapper(self._model)
        new._spec = None
        new._spec_key = None
        new._model_cache = None
        new._reset_programs()
        return new

    def get_constrain_fn(self, model_args, model_kwargs):
        return lambda z: z

    def postprocess_fn(self, model_args, model_kwargs):
        spec = self._spec

        def add_num_states(z):
            if spec is None or spec.sites.states not in z:
                return z
            return {**z, f"{spec.sites.name}_num_states": _count_used_jit(z[spec.sites.states], spec.capacity)}

        return add_num_states

    def __getstate__(self):
        state = self.__dict__.copy()
        state.update(_model_cache=None, _inner=None, _inner_spec=None, _programs={}, _config=None, _constant_args=None,
                     _sample_fn=None)
        return state

    # ------------------------------------------------------------------ discovery
    def _discover(self, model_args, model_kwargs) -> ModelSpec:
        """The spec of the model at these arguments (cached on their structure and shapes)."""
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        leaves, treedef = jax.tree_util.tree_flatten((model_args, model_kwargs))
        key = (treedef, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) if hasattr(x, "shape") else x
                              for x in leaves))
        try:
            hash(key)
        except TypeError:
            key = None
        if key is not None and self._spec is not None and key == self._spec_key:
            return self._spec
        name = type(self).__name__
        spec = discover(conditioned(self.model), model_args, model_kwargs, kernel=name,
                        exact_hyperparameters=self._exact_hyper, own_dp_concentration=self.algorithm.owns_dp_concentration,
                        describe=self.algorithm.describe, hyperparameters=self._hyperparameters)
        self.algorithm.check(spec)
        _check_capacity(spec.capacity, name)
        self._spec, self._spec_key = spec, key
        return spec

    # ------------------------------------------------------------------ helpers
    def _view(self, model_args, model_kwargs, z) -> ModelView:
        return model_view(conditioned(self.model), self._spec, model_args, model_kwargs, z)

    def _with_explicit(self, z, values: Explicit):
        sites = self._spec.sites
        states = values.states if self._spec.batched else values.states[0]
        new = {**z, sites.beta: values.beta, sites.trans: values.trans, sites.states: states, **values.hyper,
               **{site: values.params[p] for p, site in sites.params}}
        return {k: jnp.asarray(v, z[k].dtype) for k, v in new.items()}

    def _explicit_of(self, z) -> Explicit:
        spec = self._spec
        sites = spec.sites
        states = jnp.asarray(z[sites.states], jnp.int32)
        return Explicit(
            states=states if spec.batched else states[None],
            beta=z[sites.beta],
            trans=z[sites.trans],
            params={p: z[site] for p, site in sites.params},
            hyper={s: z[s] for s in spec.hyper.sites},
        )

    def _log_joint(self, z, model_args, model_kwargs):
        """``(lp, data log-likelihood)`` at ``z``.

        ``lp`` is the log joint of what the model uses: the transition rows integrated out
        (Dirichlet-multinomial, :class:`_CollapseRows`), the emission parameters of unused slots
        left out and a weak-limit ``beta`` aggregated over the unused slots
        (:class:`_StatesInUse`); the rows of unused states and their prior-drawn parameters
        would otherwise swing it by thousands of nats from sweep to sweep while the fit does not
        change.  The data log-likelihood ``log p(y | states, theta)`` is the observed site's term.
        Outside any trace and for large data (the kernel's initialization) it is compiled, so
        that XLA fuses the ``(T, K)`` temporaries an eager evaluation would hold at once."""
        spec = self._spec
        obs = spec.sites.obs

        def evaluate(z, args, kwargs):
            model = collapse_rows(_StatesInUse(self.model, occupied(z[spec.sites.states], spec.capacity)))
            lp, trace = log_density(model, args, kwargs, z)
            site = trace[obs]
            data = jnp.sum(site["fn"].log_prob(site["value"]))
            return lp, data

        leaves, treedef = jax.tree_util.tree_flatten((model_args, model_kwargs))
        is_array = [isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves]
        size = sum(int(np.size(leaf)) for leaf, a in zip(leaves, is_array) if a)
        concrete = not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(z))
        if size < _COMPILE_LOG_JOINT_SIZE or not concrete:
            return evaluate(z, model_args, model_kwargs)

        def compiled(z, arrays):
            it = iter(arrays)
            full = [next(it) if a else leaf for leaf, a in zip(leaves, is_array)]
            args, kwargs = jax.tree_util.tree_unflatten(treedef, full)
            return evaluate(z, args, kwargs)

        return jax.jit(compiled)(z, [leaf for leaf, a in zip(leaves, is_array) if a])

    def _make_inner(self):
        inner_model = conditioned(self.algorithm.inner_model(self.model))
        if self._inner_proto is None:
            strategy = self._init_strategy
            return NUTS(inner_model, init_strategy=strategy) if callable(strategy) else NUTS(inner_model)
        return self._inner_proto.wrap_model(lambda m: inner_model)

    def _inner_update(self, rng_key, z, inner_state, model_args, model_kwargs, algorithm_state):
        """The inner kernel's update of its sites given every other site."""
        spec = self._spec
        cond = {k: v for k, v in z.items() if k not in spec.inner_sites}
        kwargs_c = {**with_conditioning(model_kwargs, cond), **self.algorithm.inner_kwargs(algorithm_state)}
        inner_state = self._inner.refresh(inner_state, model_args, kwargs_c)
        inner_state = self._inner.sample(inner_state, model_args, kwargs_c)
        inner_z = self._inner.get_constrain_fn(model_args, kwargs_c)(inner_state.z)
        return {**z, **{k: inner_z[k] for k in spec.inner_sites}}, inner_state

    # ------------------------------------------------------------------ init / sample
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        spec = self._discover(model_args, model_kwargs)
        if self._verbose:
            print(f"{type(self).__name__} update plan:\n{spec.plan}")
        if self._inner_spec != spec:  # the compiled programs call the inner kernel they were traced with
            self._inner = self._make_inner() if spec.inner_sites else None
            self._inner_spec = spec
            self._programs = {}
        vectorized = not is_prng_key(rng_key)  # vectorized chains: a batch of keys
        if vectorized:
            self.algorithm.sharding.check_chains(int(np.shape(rng_key)[0]))
        self._config = (spec, int(num_warmup), vectorized)
        self._sample_fn = self._sweep
        args = _Arguments.split(model_args, model_kwargs)
        if args.key is not None and self._constant_args != args.key:
            try:
                states = None  # else the init program clusters
                num_chains = int(np.shape(rng_key)[0]) if vectorized else 1
                one_off = (one_off_applies(rng_key, init_params, args.arrays)
                           and num_chains * sum(int(np.size(a)) for a in args.arrays) <= _ONE_OFF_CLUSTER_SIZE)
                if one_off and self._clusters(init_params):
                    states = self._program("cluster", args)(rng_key, init_params, args.arrays)
                return self._program("init", args, one_off)(rng_key, init_params, args.arrays, states)
            except _CONCRETE_ARGUMENT_ERRORS:  # the model needs the values of its arguments:
                self._constant_args = args.key  # compile them in (uncached), here and in the sweeps
        init_one = lambda key, params: self._init_one(key, num_warmup, params, model_args, model_kwargs)
        # one program, also for vectorized chains: run eagerly, every (batched) operation would be
        # compiled on its own (hundreds of small compilations)
        return jax.jit(self._vmap_chains(init_one) if vectorized else init_one)(rng_key, init_params)

    def _vmap_chains(self, fn, in_axes=0):
        """``jax.vmap`` over vectorized chains; with a chain axis on the kernel's mesh the chains are
        split over it (``spmd_axis_name``, :mod:`numpyro_hdphmm.infer.plumbing.sharding`)."""
        return jax.vmap(fn, in_axes=in_axes, spmd_axis_name=self.algorithm.sharding.spmd_axis_name)

    def _program(self, which: str, args: _Arguments, one_off: bool = False):
        """The compiled ``cluster`` (``(rng_key, init_params, arrays) -> states (N, T) or None``,
        :meth:`_cluster_one`), ``init`` (``(rng_key, init_params, arrays, states) -> HDPState``)
        or ``sample`` (``(state, arrays) -> HDPState``) program for the current configuration
        (spec, ``num_warmup``, vectorized chains: a leading chain axis on every input and output
        but ``arrays``) and the arguments' structure, shapes, dtypes and non-array values
        (:class:`_Arguments`), cached on the kernel: a second ``MCMC.run`` (new key, new data of
        the same shape, ``jit_model_args``, ``post_warmup_state``) reuses them.  The data enter as
        arguments, never as constants of the program.

        ``cluster`` runs once per ``MCMC.run`` and returns integer labels: :meth:`init` runs it
        before ``init`` (which then takes its ``states``) on small data on the CPU
        (:data:`_ONE_OFF_CLUSTER_SIZE`), compiled without backend optimization
        (:func:`~numpyro_hdphmm._core.compile.one_off_jit`: 0.7 s instead of 3 s on the README's
        model, where it then runs in 0.1 s instead of 0.03 s); otherwise ``init`` clusters
        (``states=None``), one program as before.  ``one_off=True`` (the same small-data case)
        compiles ``init`` that way too (2 s instead of 6 s; its floats may differ from the
        default compilation's in the last bits).  ``sample``, which runs thousands of times, is
        always compiled with XLA's defaults."""
        key = (which, self._config, args.key, one_off)
        program = self._programs.get(key)
        if program is None:
            num_warmup, vectorized = self._config[1:]
            if which == "cluster":
                def program(rng_key, init_params, arrays):
                    model_args, model_kwargs = args.join(arrays)
                    return self._cluster_one(rng_key, init_params, model_args, model_kwargs)
                in_axes = (0, 0, None)
            elif which == "init":
                def program(rng_key, init_params, arrays, states):
                    model_args, model_kwargs = args.join(arrays)
                    return self._init_one(rng_key, num_warmup, init_params, model_args, model_kwargs, states)
                in_axes = (0, 0, None, 0)
            else:
                def program(state, arrays):
                    model_args, model_kwargs = args.join(arrays)
                    return self._sample_one(state, model_args, model_kwargs)
                in_axes = (0, None)
            program.__name__ = f"{which}_program"  # the name in JAX's compile log (jax_log_compiles)
            if vectorized:
                program = self._vmap_chains(program, in_axes=in_axes)
            one_off_program = which == "cluster" or (which == "init" and one_off)
            program = self._programs[key] = one_off_jit(program) if one_off_program else jax.jit(program)
        return program

    def _sweep(self, state, model_args, model_kwargs):
        """One sweep of every chain (compiled once per configuration, :meth:`_program`)."""
        args = _Arguments.split(model_args, model_kwargs)
        if args.key is None or args.key == self._constant_args:  # arguments compiled in as constants
            sweep = self._vmap_chains(self._sample_one, in_axes=(0, None, None)) if self._config[2] else self._sample_one
            return sweep(state, model_args, model_kwargs)
        return self._program("sample", args)(state, args.arrays)

    def sample(self, state, model_args, model_kwargs):
        if self._sample_fn is None:
            raise RuntimeError(f"{type(self).__name__}.sample: call init first.")
        state = self._sample_fn(state, model_args, {} if model_kwargs is None else model_kwargs)
        name = type(self).__name__
        late = state.sweep > self._config[1]  # after warmup
        flags = self._overflow_warning(state)
        if flags is not None:
            host_warning(_warn_overflow, flags, self._spec.capacity, name)
        else:  # the rate of overflows that plausibly biased a sweep, after warmup (BeamSampler)
            needed = state.info.fresh_used | (state.num_states >= self._spec.capacity)
            event = (state.info.overflow & needed & late).astype(jnp.int32)
            host_warning(_warn_overflow_rate, jnp.stack([event, event * (state.sweep - self._config[1])], -1),
                         self._spec.capacity, name, int(np.size(state.num_states)), id(self))
        if self._inner is not None:  # divergences of the inner kernel after warmup
            host_warning(_warn_divergence, state.diverging & late, name)
        names = tuple(k for k, v in state.z.items() if jnp.issubdtype(jnp.result_type(v), jnp.inexact)) + ("lp",)
        host_warning(_warn_nonfinite, _nonfinite_sites(state.z, state.lp), names, name)
        return state

    def _overflow_warning(self, state):
        """The overflow flags that warn (default: every overflow; ``state.info.overflow`` records them
        all), or ``None`` to warn by the rate of plausibly biased overflows instead (BeamSampler)."""
        return state.info.overflow

    def _clusters(self, init_params) -> bool:
        """Whether the start clusters the data: the data-driven start (or a NumPyro strategy) and
        the states neither in ``init_params`` nor named by ``init_to_value``."""
        strategy, states = self._init_strategy, self._spec.sites.states
        given = set(init_params or {}) | (set(initialization.given_values(strategy)) if callable(strategy) else set())
        return strategy != initialization.PRIOR and states not in given

    def _cluster_one(self, rng_key, init_params, model_args, model_kwargs):
        """The data-driven starting states ``(N, T)`` int32 of one chain (what :meth:`_init_one`
        with the same key computes), or ``None`` where the start clusters nothing (``"prior"``,
        the states given)."""
        return self._prior_start(random.split(rng_key, 4)[0], init_params, model_args, model_kwargs)[3]

    def _init_one(self, rng_key, num_warmup, init_params, model_args, model_kwargs, states=None):
        """The :class:`HDPState` of one chain; ``states``: the clustered starting states
        (:meth:`_cluster_one` of the same key), computed here when ``None``."""
        spec = self._spec
        key_trace, key_algorithm, key_inner, key_state = random.split(rng_key, 4)
        z, view, start = self._start(key_trace, init_params, model_args, model_kwargs, states)
        algorithm_state = self.algorithm.init(key_algorithm, spec, view, start)
        z = self._with_explicit(z, self.algorithm.explicit(key_algorithm, algorithm_state, spec, view))
        inner_state = None
        if self._inner is not None:
            cond = {k: v for k, v in z.items() if k not in spec.inner_sites}
            kwargs_c = {**with_conditioning(model_kwargs, cond), **self.algorithm.inner_kwargs(algorithm_state)}
            inner_state = self._inner.init(key_inner, num_warmup, None, model_args, kwargs_c)
            inner_z = self._inner.get_constrain_fn(model_args, kwargs_c)(inner_state.z)
            z.update({k: inner_z[k] for k in spec.inner_sites})
        info = jax.tree_util.tree_map(jnp.zeros_like, jax.eval_shape(
            lambda s, k: self.algorithm.step(k, s, spec, view)[1], algorithm_state, key_algorithm))
        return self._state(z, model_args, model_kwargs, algorithm_state, info, jnp.ones((), jnp.result_type(float)),
                           jnp.zeros((), bool), inner_state, key_state)

    def _prior_start(self, rng_key, init_params, model_args, model_kwargs, cluster: bool = True):
        """``(z, view, start, states, given, k_given)`` before the data-driven start: every latent
        site's prior draw (the strategy's and the given values substituted), the model's view
        there, the :class:`Explicit` values of ``z``, the clustered states ``(N, T)`` (``None``
        where the start clusters nothing, or with ``cluster=False``), the given values
        ``{site: value}`` and the key of the draws given the states."""
        spec = self._spec
        sites = spec.sites
        strategy = self._init_strategy
        k_strategy, k_cluster, k_given = random.split(random.fold_in(rng_key, 1), 3)
        model = conditioned(self.model)
        trace = prior_trace(model, rng_key, model_args, model_kwargs)
        z = {s: trace[s]["value"] for s in latent_sites(trace)}
        given = {}
        if callable(strategy):
            z.update(initialization.strategy_values(model, k_strategy, strategy, set(sites.owned), model_args,
                                                    model_kwargs))
            given.update({k: v for k, v in initialization.given_values(strategy).items() if k in z})
        given.update({k: v for k, v in (init_params or {}).items() if k in z})
        z.update({k: jnp.asarray(v, jnp.result_type(z[k])) for k, v in given.items()})
        given_states = given.get(sites.states)
        given_states = {**(initialization.given_values(strategy) if callable(strategy) else {}), **(init_params or {})}.get(
            sites.states, given_states)  # as given (before the cast above, which would truncate 0.5 to 0)
        if given_states is not None and is_concrete(given_states):  # checked on the host: inside the
            host = np.asarray(given_states)  # compiled init, jnp on a constant is traced too
            if (host.dtype.kind not in "biuf" or np.any(~np.isfinite(host)) or np.any(host != np.round(host))
                    or np.any(host < 0) or np.any(host >= spec.capacity)):
                raise ValueError(f"`init_params['{sites.states}']` must hold integer states in [0, max_states={spec.capacity}).")
        view = self._view(model_args, model_kwargs, z)
        start = self._explicit_of(z)
        states = None
        if cluster and strategy != initialization.PRIOR and sites.states not in given:
            options = strategy if isinstance(strategy, initialization.DataInit) else initialization.DataInit()
            states = initialization.cluster_states(k_cluster, view, start.params, spec.capacity, options)
        return z, view, start, states, given, k_given

    def _start(self, rng_key, init_params, model_args, model_kwargs, states=None):
        """``(z, view, start)``: every latent site's starting value, the model's view there and the
        :class:`Explicit` starting values of the HDP-HMM's sites, by the kernel's ``init_strategy``
        (:mod:`numpyro_hdphmm.infer.plumbing.initialization`; ``init_params`` override it).  ``states``:
        the clustered starting states when computed beforehand (:meth:`_cluster_one`)."""
        sites = self._spec.sites
        z, view, start, clustered, given, k_given = self._prior_start(rng_key, init_params, model_args, model_kwargs,
                                                                      cluster=states is None)
        if self._init_strategy == initialization.PRIOR:
            return z, view, start
        states = clustered if states is None else states
        if states is not None:
            start = start._replace(states=states)
        start = initialization.states_given(k_given, self._spec, view, start,
                                            given_params=all(s in given for s in sites.param_sites),
                                            given_beta=sites.beta in given, given_trans=sites.trans in given,
                                            given_base=self._spec.hyper.emission_base in given)
        return self._with_explicit(z, start), view, start

    def _state(self, z, model_args, model_kwargs, algorithm_state, info, accept_prob, diverging, inner_state, rng_key,
               sweep=None):
        """Assemble an :class:`HDPState`: ``lp``, the data log-likelihood, ``num_states`` and the
        non-finite flag from ``z``."""
        lp, data = self._log_joint(z, model_args, model_kwargs)
        return HDPState(
            z=z,
            algorithm=algorithm_state,
            info=info,
            num_states=count_used(z[self._spec.sites.states], self._spec.capacity),
            lp=lp,
            data_loglik=data,
            nonfinite=jnp.any(_nonfinite_sites(z, lp)),
            accept_prob=accept_prob,
            diverging=diverging,
            inner_state=inner_state,
            rng_key=rng_key,
            sweep=jnp.zeros((), jnp.int32) if sweep is None else sweep,
        )

    def _sample_one(self, state: HDPState, model_args, model_kwargs) -> HDPState:
        spec = self._spec
        alg = self.algorithm
        k_step, k_explicit, k_inner, k_resume, k_next = random.split(state.rng_key, 5)
        view = self._view(model_args, model_kwargs, state.z)
        algorithm_state, info = alg.step(k_step, state.algorithm, spec, view)
        z = self._with_explicit(state.z, alg.explicit(k_explicit, algorithm_state, spec, view))
        inner_state, accept_prob, diverging = state.inner_state, state.accept_prob, state.diverging
        if self._inner is not None:
            z, inner_state = self._inner_update(k_inner, z, inner_state, model_args, model_kwargs, algorithm_state)
            accept_prob = jnp.asarray(getattr(inner_state, "accept_prob", accept_prob), accept_prob.dtype)
            diverging = jnp.asarray(getattr(inner_state, "diverging", diverging), bool)
            view = self._view(model_args, model_kwargs, z)
            algorithm_state = alg.resume(k_resume, algorithm_state, spec, view)
            z = self._with_explicit(z, alg.explicit(random.fold_in(k_explicit, 1), algorithm_state, spec, view))
        return self._state(z, model_args, model_kwargs, algorithm_state, info, accept_prob, diverging, inner_state, k_next,
                           state.sweep + 1)
