r"""The NumPyro adapter around an algorithm (:mod:`numpyro_hdphmm.infer.contract`).

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
``jit_model_args=True`` it is reused too.  The sweep holds no host callback, the run's warnings
being counters in the state, :mod:`~numpyro_hdphmm.infer.plumbing.reporting`, so with JAX's
persistent compilation cache on, a recompiled loop is loaded from the cache.)
``docs/kernels.md`` walks through the weak-limit kernel as the worked example.

**One constructor pattern.**  A kernel is ``HDPKernel`` subclass whose ``__init__`` takes the model
and its algorithm's own options, builds its :class:`~numpyro_hdphmm.infer.contract.Algorithm` and
passes it with every other keyword argument to ``HDPKernel.__init__``; the options every kernel
shares (:data:`KERNEL_OPTIONS`) are written once here and shown by ``help()`` in every kernel's
signature and docstring (:meth:`HDPKernel.__init_subclass__`).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Dict, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import NUTS
from numpyro.infer.gibbs import conditioned, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import log_density
from numpyro.util import is_prng_key

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.compile import one_off_applies, one_off_jit
from numpyro_hdphmm._core.slots import count_used, occupied
from numpyro_hdphmm._core.validation import is_concrete, no_host_warnings
from numpyro_hdphmm.infer.contract import Algorithm, Explicit
from numpyro_hdphmm.infer.moves.tempering import Tempered
from numpyro_hdphmm.infer.plumbing import initialization, programs, reporting
from numpyro_hdphmm.infer.plumbing.collapse import StatesInUse, collapse_rows
from numpyro_hdphmm.infer.plumbing.discovery import (
    ModelSpec,
    ModelView,
    UpdatePlan,
    discover,
    latent_sites,
    model_view,
    prior_trace,
)
from numpyro_hdphmm.infer.plumbing.programs import Arguments

__all__ = ["HDPState", "HDPKernel", "KERNEL_OPTIONS"]


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
    events: reporting.Events


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
    done since ``init`` (warmup included); ``events``: the run's counters of what must be reported
    (:class:`~numpyro_hdphmm.infer.plumbing.reporting.Events`: checked on the host when the run
    returns, no host callback in the sweep).
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


#: the options every kernel shares, by keyword (``HDPKernel.__init__``), with the description
#: ``help()`` shows on every kernel (:meth:`HDPKernel.__init_subclass__`)
KERNEL_OPTIONS = {
    "inner_kernel": (
        "kernel for the latent sites the algorithm does not own and cannot update exactly; ``None`` (the\n"
        "        default) builds ``NUTS`` on the model.  It is re-bound to the model conditioned on every other\n"
        "        site (``kernel.wrap_model``), with the transition rows integrated out."),
    "exact_hyperparameters": (
        "use the exact updates of the concentrations where they apply (``False`` sends every\n"
        "        hyperparameter site to the inner kernel)."),
    "hyperparameters": (
        "how the recognized concentrations are updated: ``\"collapsed\"`` (default) slice-samples\n"
        "        ``(log(alpha + kappa), logit(kappa / (alpha + kappa)))`` given the states and ``beta`` with the rows\n"
        "        integrated out, and ``log gamma`` given the tables with ``beta`` integrated out\n"
        "        (:func:`numpyro_hdphmm._core.crp.sample_global`); ``\"auxiliary\"`` uses Fox et al.'s\n"
        "        auxiliary-variable updates given the tables.  Both are exact; the collapsed updates mix the\n"
        "        concentrations faster per sweep at a similar cost (``docs/benchmarks.md``, \"Hyperparameter mixing\")."),
    "verbose": "print the update plan (``kernel.update_plan(...)``) at initialization.",
    "init_strategy": (
        "where the chains start (:mod:`numpyro_hdphmm.infer.plumbing.initialization`): ``\"data\"``\n"
        "        (default: the states from clustering windows of the observations, refined with the family's\n"
        "        likelihood, the emission parameters, ``beta`` and the rows drawn given them;\n"
        "        :func:`~numpyro_hdphmm.infer.plumbing.initialization.init_to_data` for its options), ``\"prior\"``\n"
        "        (every site a draw from the prior), or a NumPyro init strategy\n"
        "        (``numpyro.infer.init_to_value(values={...})``, ``init_to_median``, ...) for the sites that are not\n"
        "        the model's own, the model's sites that ``init_to_value`` names taken as given (e.g.\n"
        "        ``values={\"y_states\": z0}``) and the rest drawn given the states.  ``MCMC.run(init_params=...)``\n"
        "        overrides any of them."),
    "tempering": (
        "replica exchange (parallel tempering): ``None`` (default) runs the algorithm alone; an int ``R >= 2``\n"
        "        runs ``R`` copies of it at inverse temperatures from 0 (the prior) to 1 (the posterior), the emission\n"
        "        likelihood raised to each, with non-reversible swaps between neighbours and the ladder adapted in\n"
        "        warmup (:mod:`numpyro_hdphmm.infer.moves.tempering`, ``docs/tempering.md``); a sequence gives the starting\n"
        "        ladder itself.  The draws are the untempered copy's; the swap rates, the ladder and each copy's\n"
        "        log-likelihood are collected (``swap_accept``, ``inverse_temperatures``, ``replica_log_likelihood``) and\n"
        "        give the evidence (:func:`numpyro_hdphmm.results.log_evidence`).  Costs ``R`` sweeps per sweep,\n"
        "        vectorized."),
}


class HDPKernel(MCMCKernel):
    """The NumPyro ``MCMCKernel`` around an :class:`~numpyro_hdphmm.infer.contract.Algorithm` (see the
    module docstring).

    :param model: the NumPyro model; it must declare one model (an HDP-HMM) with :func:`numpyro_hdphmm.sample`.
    :param algorithm: the algorithm core (a subclass builds it from its own options; default: the
        class attribute :attr:`algorithm`).
    :param inner_kernel: {inner_kernel}
    :param exact_hyperparameters: {exact_hyperparameters}
    :param hyperparameters: {hyperparameters}
    :param verbose: {verbose}
    :param init_strategy: {init_strategy}
    :param tempering: {tempering}
    """

    sample_field = "z"
    algorithm: Algorithm = Algorithm()
    #: warn of overflows by their rate after warmup (:data:`~numpyro_hdphmm.infer.plumbing.reporting.OVERFLOW_RATE`)
    #: rather than at the first one (BeamSampler, whose truncation overflows harmlessly)
    overflow_by_rate: bool = False

    def __init__(self, model, algorithm: Optional[Algorithm] = None, *, inner_kernel: Optional[MCMCKernel] = None,
                 exact_hyperparameters: bool = True, hyperparameters: str = "collapsed", verbose: bool = False,
                 init_strategy="data", tempering=None):
        if not callable(model):
            raise ValueError("`model` must be a NumPyro model (a callable).")
        if algorithm is not None and not isinstance(algorithm, Algorithm):
            raise ValueError(f"`algorithm` must be an Algorithm (numpyro_hdphmm.infer.contract), got {type(algorithm).__name__}.")
        if inner_kernel is not None and not isinstance(inner_kernel, MCMCKernel):
            raise ValueError(f"`inner_kernel` must be a numpyro MCMCKernel (e.g. NUTS(model)), got {type(inner_kernel).__name__}.")
        if hyperparameters not in crp.HYPERPARAMETER_UPDATES:
            raise ValueError(f"`hyperparameters` must be one of {crp.HYPERPARAMETER_UPDATES}, got {hyperparameters!r}.")
        if algorithm is not None:
            self.algorithm = algorithm
        if tempering is not None:
            self.algorithm = Tempered(self.algorithm, tempering)
        self._hyperparameters = hyperparameters
        self._init_strategy = initialization.resolve_init_strategy(init_strategy)
        self._model = model
        self._inner_proto = inner_kernel
        self._exact_hyper = bool(exact_hyperparameters)
        self._verbose = bool(verbose)
        self._spec: Optional[ModelSpec] = None
        self._spec_key = None
        self._model_cache = None
        self._token = reporting.new_token()  # the registry of the warnings given in a run
        self._reset_programs()

    def __init_subclass__(cls, **kwargs):
        """One constructor pattern, documented once: a kernel's ``__init__(self, model, <its
        algorithm's options>, **options)`` builds its algorithm and forwards ``options`` to
        :class:`HDPKernel`; here its signature gains the shared keyword options (so ``help()`` and
        ``inspect.signature`` show every option) and its docstring the descriptions of
        :data:`KERNEL_OPTIONS` it does not give itself."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None:
            own = inspect.signature(init)
            params = [p for p in own.parameters.values() if p.kind != inspect.Parameter.VAR_KEYWORD]
            if len(params) < len(own.parameters):
                names = {p.name for p in params}
                shared = [p for p in inspect.signature(HDPKernel.__init__).parameters.values()
                          if p.kind == inspect.Parameter.KEYWORD_ONLY and p.name not in names]
                init.__signature__ = own.replace(parameters=params + shared)
        doc = cls.__dict__.get("__doc__")
        if doc:
            missing = [n for n in KERNEL_OPTIONS if f":param {n}:" not in doc]
            if missing:
                cls.__doc__ = doc.rstrip() + "\n\n" + "\n".join(f"    :param {n}: {KERNEL_OPTIONS[n]}" for n in missing) + "\n    "

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
            return {**z, f"{spec.sites.name}_num_states": programs.count_used_jit(z[spec.sites.states], spec.capacity)}

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
        key = Arguments.split(model_args, model_kwargs).key
        if key is not None and self._spec is not None and key == self._spec_key:
            return self._spec
        name = type(self).__name__
        spec = discover(conditioned(self.model), model_args, model_kwargs, kernel=name,
                        exact_hyperparameters=self._exact_hyper, own_dp_concentration=self.algorithm.owns_dp_concentration,
                        describe=self.algorithm.describe, hyperparameters=self._hyperparameters,
                        own_column_precision=self.algorithm.owns_column_precision)
        self.algorithm.check(spec)
        reporting.check_capacity(spec.capacity, name)
        self._spec, self._spec_key = spec, key
        return spec

    # ------------------------------------------------------------------ helpers
    def _view(self, model_args, model_kwargs, z) -> ModelView:
        return model_view(conditioned(self.model), self._spec, model_args, model_kwargs, z)

    def _with_explicit(self, z, values: Explicit):
        """``z`` with the algorithm's explicit values at the model's sites (the roles of
        :class:`~numpyro_hdphmm.infer.plumbing.discovery.LatentSites`)."""
        sites = self._spec.sites
        states = values.states if self._spec.batched else values.states[0]
        new = {**z, sites.beta: values.beta, sites.trans: values.trans, sites.states: states, **values.hyper,
               **{site: values.params[p] for p, site in sites.params},
               **{site: values.extra[role] for role, site in sites.extra if role in values.extra}}
        return {k: jnp.asarray(v, z[k].dtype) for k, v in new.items()}

    def _explicit_of(self, z) -> Explicit:
        """The :class:`~numpyro_hdphmm.infer.contract.Explicit` values of the model's sites in ``z``."""
        spec = self._spec
        sites = spec.sites
        states = jnp.asarray(z[sites.states], jnp.int32)
        return Explicit(
            states=states if spec.batched else states[None],
            beta=z[sites.beta],
            trans=z[sites.trans],
            params={p: z[site] for p, site in sites.params},
            hyper={s: z[s] for s in spec.hyper.sites},
            extra={role: z[site] for role, site in sites.extra},
        )

    def _log_joint(self, z, model_args, model_kwargs):
        """``(lp, data log-likelihood)`` at ``z``.

        ``lp`` is the log joint of what the model uses: the transition rows integrated out
        (Dirichlet-multinomial, :class:`_CollapseRows`), the emission parameters of unused slots
        left out and a weak-limit ``beta`` aggregated over the unused slots
        (:class:`~numpyro_hdphmm.infer.plumbing.collapse.StatesInUse`); the rows of unused states and their prior-drawn parameters
        would otherwise swing it by thousands of nats from sweep to sweep while the fit does not
        change.  The data log-likelihood ``log p(y | states, theta)`` is the observed site's term.
        Outside any trace and for large data (the kernel's initialization) it is compiled, so
        that XLA fuses the ``(T, K)`` temporaries an eager evaluation would hold at once."""
        spec = self._spec
        obs = spec.sites.obs

        def evaluate(z, args, kwargs):
            model = collapse_rows(StatesInUse(self.model, occupied(z[spec.sites.states], spec.capacity)))
            lp, trace = log_density(model, args, kwargs, z)
            site = trace[obs]
            data = jnp.sum(site["fn"].log_prob(site["value"]))
            return lp, data

        args = Arguments.split(model_args, model_kwargs)
        size = sum(int(np.size(a)) for a in args.arrays)
        concrete = not any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(z))
        if size < programs.COMPILE_LOG_JOINT_SIZE or not concrete or args.key is None:
            return evaluate(z, model_args, model_kwargs)
        return args.compile(evaluate)(z, args.arrays)

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
        reporting.start_run(self._token)
        with no_host_warnings():  # prior draws of the start: no warning of theirs concerns the user
            return self._init(rng_key, num_warmup, init_params, model_args, model_kwargs)

    def _init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
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
        args = Arguments.split(model_args, model_kwargs)
        if args.key is not None and self._constant_args != args.key:
            try:
                states = None  # else the init program clusters
                num_chains = int(np.shape(rng_key)[0]) if vectorized else 1
                one_off = (one_off_applies(rng_key, init_params, args.arrays)
                           and num_chains * sum(int(np.size(a)) for a in args.arrays) <= programs.ONE_OFF_CLUSTER_SIZE)
                if one_off and self._clusters(init_params):
                    states = self._program("cluster", args)(rng_key, init_params, args.arrays)
                return self._program("init", args, one_off)(rng_key, init_params, args.arrays, states)
            except programs.CONCRETE_ARGUMENT_ERRORS:  # the model needs the values of its arguments:
                self._constant_args = args.key  # compile them in (uncached), here and in the sweeps
        init_one = lambda key, params: self._init_one(key, num_warmup, params, model_args, model_kwargs)
        # one program, also for vectorized chains: run eagerly, every (batched) operation would be
        # compiled on its own (hundreds of small compilations)
        return jax.jit(self._vmap_chains(init_one) if vectorized else init_one)(rng_key, init_params)

    def _vmap_chains(self, fn, in_axes=0):
        """``jax.vmap`` over vectorized chains; with a chain axis on the kernel's mesh the chains are
        split over it (``spmd_axis_name``, :mod:`numpyro_hdphmm.infer.plumbing.sharding`)."""
        return jax.vmap(fn, in_axes=in_axes, spmd_axis_name=self.algorithm.sharding.spmd_axis_name)

    def _program(self, which: str, args: Arguments, one_off: bool = False):
        """The compiled ``cluster`` (``(rng_key, init_params, arrays) -> states (N, T) or None``,
        :meth:`_cluster_one`), ``init`` (``(rng_key, init_params, arrays, states) -> HDPState``)
        or ``sample`` (``(state, arrays) -> HDPState``) program for the current configuration
        (spec, ``num_warmup``, vectorized chains: a leading chain axis on every input and output
        but ``arrays``) and the arguments' structure, shapes, dtypes and non-array values
        (:class:`Arguments`), cached on the kernel: a second ``MCMC.run`` (new key, new data of
        the same shape, ``jit_model_args``, ``post_warmup_state``) reuses them.  The data enter as
        arguments, never as constants of the program.

        ``cluster`` runs once per ``MCMC.run`` and returns integer labels: :meth:`init` runs it
        before ``init`` (which then takes its ``states``) on small data on the CPU
        (:data:`~numpyro_hdphmm.infer.plumbing.programs.ONE_OFF_CLUSTER_SIZE`), compiled without backend optimization
        (:func:`~numpyro_hdphmm._core.compile.one_off_jit`; ``docs/benchmarks.md``, "Compile
        time"); otherwise ``init`` clusters (``states=None``), one program.  ``one_off=True`` (the
        same small-data case) compiles ``init`` that way too (its floats may differ from the
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
        args = Arguments.split(model_args, model_kwargs)
        if args.key is None or args.key == self._constant_args:  # arguments compiled in as constants
            sweep = self._vmap_chains(self._sample_one, in_axes=(0, None, None)) if self._config[2] else self._sample_one
            return sweep(state, model_args, model_kwargs)
        return self._program("sample", args)(state, args.arrays)

    def sample(self, state, model_args, model_kwargs):
        if self._sample_fn is None:
            raise RuntimeError(f"{type(self).__name__}.sample: call init first.")
        with no_host_warnings():  # the run's warnings travel in state.events (reporting)
            return self._sample_fn(state, model_args, {} if model_kwargs is None else model_kwargs)

    def _sweep_events(self, state: HDPState, events: reporting.Events, nonfinite) -> reporting.Events:
        """``events`` plus what the sweep that made ``state`` (one chain) must report
        (:class:`~numpyro_hdphmm.infer.plumbing.reporting.Events`); ``nonfinite``: its
        :func:`~numpyro_hdphmm.infer.plumbing.reporting.nonfinite_sites`."""
        late = state.sweep > self._config[1]  # after warmup
        info = state.info
        overflow = jnp.any(info.overflow)
        biased = jnp.zeros((), bool)
        if self.overflow_by_rate:  # the rate of overflows that plausibly biased a sweep, after warmup (BeamSampler)
            biased = jnp.any(info.overflow & (info.fresh_used | (state.num_states >= self._spec.capacity))) & late
        at_max = jnp.any(info.at_max_duration) & late if hasattr(info, "at_max_duration") else False
        divergent = jnp.any(state.diverging) & late if self._inner is not None else False
        swap_attempts = swap_milli = 0
        if hasattr(info, "swap_accept"):  # tempering: NaN marks the pairs not attempted in this sweep
            attempted = ~jnp.isnan(info.swap_accept) & late
            swap_attempts = attempted
            swap_milli = jnp.where(attempted, jnp.round(1000.0 * jnp.nan_to_num(info.swap_accept)), 0.0)
        return events.add(overflow, biased, late, at_max, divergent, nonfinite, swap_attempts, swap_milli)

    def _report(self, z) -> reporting.Report:
        """The static part of the run's :class:`~numpyro_hdphmm.infer.plumbing.reporting.Events`."""
        names = tuple(k for k, v in z.items() if jnp.issubdtype(jnp.result_type(v), jnp.inexact)) + ("lp",)
        pairs = getattr(self.algorithm, "num_replicas", 1) - 1  # tempering: the neighbouring pairs of rungs
        return reporting.Report(type(self).__name__, self._spec.capacity, names, self.overflow_by_rate, self._token,
                                pairs)

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
        algorithm_state = self.algorithm.with_warmup(self.algorithm.init(key_algorithm, spec, view, start), num_warmup)
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
                           jnp.zeros((), bool), inner_state, key_state, reporting.Events.zeros(self._report(z)))

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
        if sites.kind == "slds" and strategy != initialization.PRIOR and sites.layer_site not in given:
            latent = initialization.initial_latent(spec, self._view(model_args, model_kwargs, z))
            z[sites.layer_site] = latent.astype(jnp.result_type(z[sites.layer_site]))
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
                                            given_base=self._spec.hyper.emission_base in given,
                                            given_observation=all(site in given for role, site in sites.extra
                                                                  if role.startswith("observation_")))
        return self._with_explicit(z, start), view, start

    def _state(self, z, model_args, model_kwargs, algorithm_state, info, accept_prob, diverging, inner_state, rng_key,
               events, sweep=None):
        """Assemble an :class:`HDPState`: ``lp``, the data log-likelihood, ``num_states`` and the
        non-finite flag from ``z``; ``events``: the zero counters of ``init``, or (``sweep`` given)
        the counters before this sweep, to which its own are added (:meth:`_sweep_events`)."""
        lp, data = self._log_joint(z, model_args, model_kwargs)
        nonfinite = reporting.nonfinite_sites(z, lp)
        state = HDPState(
            z=z,
            algorithm=algorithm_state,
            info=info,
            num_states=count_used(z[self._spec.sites.states], self._spec.capacity),
            lp=lp,
            data_loglik=data,
            nonfinite=jnp.any(nonfinite),
            accept_prob=accept_prob,
            diverging=diverging,
            inner_state=inner_state,
            rng_key=rng_key,
            sweep=jnp.zeros((), jnp.int32) if sweep is None else sweep,
            events=events,
        )
        return state if sweep is None else state._replace(events=self._sweep_events(state, events, nonfinite))

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
                           state.events, state.sweep + 1)


HDPKernel.__doc__ = HDPKernel.__doc__.format(**KERNEL_OPTIONS)
