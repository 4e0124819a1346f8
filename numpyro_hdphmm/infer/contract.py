r"""The typed contract between an algorithm and the NumPyro adapter.

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
* ``with_warmup(state, num_warmup) -> State``: the state told the run's number of warmup sweeps
  (default: unchanged; an algorithm that adapts in warmup counts them down, e.g. the ladder of
  :class:`~numpyro_hdphmm.infer.moves.tempering.Tempered`);
* ``inner_kwargs(state) -> dict``: extra keyword arguments the inner kernel's model needs from the
  algorithm's state (default: none; e.g. the table counts of a collapsed seating), popped by
  ``inner_model``'s wrapper.

``State`` and ``Info`` are NamedTuples; ``Info`` holds per-sweep diagnostics only (``overflow``,
acceptance rates of MH-corrected moves, particle ESS, ...): its fields reach
``MCMC.get_extra_fields`` and ArviZ's ``sample_stats`` under their own names.  ``spec`` is the
immutable :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelSpec` found once before compilation,
``view`` the :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelView` of the model at the current values.

The contract is typed: ``Algorithm[State, Info]`` (``State`` any pytree, ``Info`` a NamedTuple of
per-sweep diagnostics), ``step`` returns ``Tuple[State, Info]``.  An algorithm also declares what it
samples: ``model_classes`` (the kinds of :data:`numpyro_hdphmm.models.MODEL_CLASSES` it supports;
:meth:`Algorithm.check` refuses the others with a ``NotImplementedError`` naming the kernels that
do) and ``beta_prior`` (``"gem"``: the infinite model, the weak-limit prior refused;
``"weak_limit"``: the algorithm samples ``Dir(gamma/L)``, :meth:`Algorithm.transform_model`).

The NumPyro adapter around an algorithm is :class:`~numpyro_hdphmm.infer.plumbing.adapter.HDPKernel`;
``docs/kernels.md`` walks through adding an algorithm (the weak-limit sampler as the example) and a
model class.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Generic, NamedTuple, Tuple, Type, TypeVar

import jax
import jax.numpy as jnp

from numpyro_hdphmm._core import crp
from numpyro_hdphmm.infer.plumbing.collapse import collapse_rows
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding

__all__ = ["Explicit", "Algorithm", "NoInfo", "flatten_time"]

State = TypeVar("State")
Info = TypeVar("Info", bound=tuple)


class Explicit(NamedTuple):
    """Explicit values of the model's sites: ``states (N, T)``, ``beta (K+1,)``, ``trans (K+1,
    K+1)`` (start row last), ``params`` (emission parameters, leading axis ``K``; empty for custom
    emissions), ``hyper`` (``{site: value}`` of the sites with exact updates) and ``extra``
    (``{role: value}`` of the model class's further latent sites,
    :attr:`~numpyro_hdphmm.infer.plumbing.discovery.LatentSites.extra`; empty for the HMM)."""

    states: jax.Array
    beta: jax.Array
    trans: jax.Array
    params: Dict[str, jax.Array]
    hyper: Dict[str, jax.Array]
    extra: Dict[str, jax.Array] = {}


class NoInfo(NamedTuple):
    """The diagnostics of an algorithm that reports none."""


def flatten_time(x):
    """Merge the sequence and time axes ``(N, T, ...) -> (N * T, ...)`` of every leaf (the
    prepared observations of all sequences as one time axis)."""
    return jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), x)


class Algorithm(Generic[State, Info]):
    """Base class of an algorithm core (see the module docstring for the contract).

    Class attributes: ``name`` (the kernel's name in messages), ``model_classes`` (the model
    classes it samples, by kind), ``beta_prior`` (``"gem"``: the infinite model; ``"weak_limit"``:
    the algorithm samples ``Dir(gamma/L)``), ``owns_dp_concentration``
    (the algorithm updates a DP-mixture emission's concentration site exactly),
    ``owns_column_precision`` (it keeps the emission parameters explicit and draws the ARD column
    precisions of an autoregressive emission exactly given them,
    :mod:`numpyro_hdphmm.infer.moves.column_precision`), ``temperable`` (it
    can run under replica exchange, ``tempering=``), ``Info`` (the
    NamedTuple of its per-sweep diagnostics) and ``describe`` (what it does with each site role,
    for the update plan).
    """

    name: ClassVar[str] = "HDP-HMM algorithm"
    model_classes: ClassVar[Tuple[str, ...]] = ("hmm",)
    beta_prior: ClassVar[str] = "gem"
    owns_dp_concentration: ClassVar[bool] = True
    owns_column_precision: ClassVar[bool] = False
    #: its sweep reaches the likelihood only through the emission family's ``log_likelihoods`` and
    #: weighted statistics, so that raising the likelihood to a power tempers it exactly
    #: (``tempering=``, :mod:`numpyro_hdphmm.infer.moves.tempering`)
    temperable: ClassVar[bool] = False
    Info: ClassVar[Type[tuple]] = NoInfo
    describe: ClassVar[Dict[str, str]] = {}
    #: where the sweep's sequences and vectorized chains run (:mod:`numpyro_hdphmm.infer.plumbing.sharding`);
    #: the kernels vmap over chains with ``spmd_axis_name=sharding.spmd_axis_name``
    sharding: SequenceSharding = SequenceSharding()

    def transform_model(self, model):
        """The model as the algorithm samples it (the weak limit replaces the ``GEM`` prior)."""
        return model

    def check(self, spec: ModelSpec) -> None:
        """Raise ``NotImplementedError`` for models the algorithm cannot sample: a model class not in
        :attr:`model_classes` (the message names the kernels that sample it) or, for an algorithm of
        the infinite model (``beta_prior = "gem"``), the weak-limit prior.  Subclasses that refuse
        more call ``super().check(spec)`` first."""
        kind = spec.sites.kind
        if kind not in self.model_classes:
            from numpyro_hdphmm.infer.algorithms import KERNELS  # the registry imports every algorithm

            others = [k.__name__ for k in KERNELS if kind in k.algorithm.model_classes]
            raise NotImplementedError(
                f"{self.name} does not sample the '{kind}' model class of '{spec.sites.name}' (it samples: "
                f"{', '.join(self.model_classes)}); " + (f"use {' or '.join(others)}." if others else
                                                         "no kernel of this version samples it yet."))
        if self.beta_prior == "gem" and spec.beta_prior != "gem":
            raise NotImplementedError(
                f"{self.name} samples the infinite model (`{spec.sites.beta} ~ GEM`), got the weak-limit prior; "
                "use WeakLimitGibbs for the weak-limit approximation."
            )

    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> State:
        """The carried state from explicit starting values (default: ``start`` itself)."""
        return start

    def with_warmup(self, state: State, num_warmup: int) -> State:
        """The state told that the run has ``num_warmup`` warmup sweeps (default: unchanged)."""
        return state

    def step(self, rng_key, state: State, spec: ModelSpec, view: ModelView) -> Tuple[State, Info]:
        """One sweep: ``(State, Info)``."""
        raise NotImplementedError

    def explicit(self, rng_key, state: State, spec: ModelSpec, view: ModelView) -> Explicit:
        """The explicit values of the model's sites (default: the state, an :class:`Explicit`)."""
        if not isinstance(state, Explicit):
            raise NotImplementedError(f"{self.name}: an algorithm whose state is not an Explicit implements `explicit`.")
        return state

    def resume(self, rng_key, state: State, spec: ModelSpec, view: ModelView) -> State:
        """After the inner kernel: the rows redrawn from ``Dir(alpha beta + kappa e_j + n_j.)``
        (start row ``Dir(alpha beta + n_0.)``) at the new values (Fox et al. eqs. 37, 41).  An
        algorithm whose state is not an :class:`Explicit` implements its own."""
        if not isinstance(state, Explicit):
            raise NotImplementedError(f"{self.name}: an algorithm whose state is not an Explicit implements `resume`.")
        n, first = crp.transition_counts(state.states, spec.capacity, view.data.lengths)
        dtype = state.beta.dtype
        alpha, kappa = (jnp.asarray(v, dtype) for v in view.hyper[1:])
        trans = crp.sample_rows(rng_key, state.beta, alpha, kappa, n, first)
        return state._replace(trans=trans.astype(state.trans.dtype))

    def inner_model(self, model):
        """The model as the inner kernel sees it (default: the rows integrated out)."""
        return collapse_rows(model)

    def inner_kwargs(self, state: State) -> Dict[str, Any]:
        """Extra keyword arguments of the inner kernel's model, computed from the algorithm's
        state (default: none).  The adapter adds them to the model's keyword arguments whenever
        it initializes or runs the inner kernel; :meth:`inner_model` must pop them before calling
        the user's model (e.g. the table counts the density of a collapsed seating needs)."""
        return {}
