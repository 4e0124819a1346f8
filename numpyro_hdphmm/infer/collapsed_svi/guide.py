r"""Collapsed SVI through NumPyro's own loop: ``SVI(model, CollapsedGuide(model), optim, CollapsedELBO())``.

:class:`CollapsedGuide` wraps a :class:`~numpyro_hdphmm.infer.CollapsedSVI` fitter: its variational
statistics are one NumPyro ``mutable`` site (:data:`STATE_SITE`, a :class:`CollapsedCarry`) that
:class:`CollapsedELBO` replaces at each update, so that ``svi.init``, ``svi.update``,
``svi.stable_update`` and ``svi.run`` make the fitter's closed-form updates, bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax import lax
from numpyro import handlers
from numpyro.infer.elbo import ELBO
from numpyro.infer.svi import SVIRunResult

from numpyro_hdphmm.infer.collapsed_svi.core import CollapsedSVIState, length_strata
from numpyro_hdphmm.infer.collapsed_svi.downstream import sample_posterior_sites
from numpyro_hdphmm.infer.collapsed_svi.fitter import CollapsedSVI, Convergence
from numpyro_hdphmm.infer.plumbing.discovery import SequenceData, model_view
from numpyro_hdphmm.results.diagnostics.heldout import PredictiveLogLikelihood

__all__ = ["CollapsedGuide", "CollapsedELBO", "CollapsedCarry", "STATE_SITE"]


#: name of the ``mutable`` site of :class:`CollapsedGuide` that holds its :class:`CollapsedCarry`
STATE_SITE = "collapsed_svi_state"


class CollapsedCarry(NamedTuple):
    """The mutable state of :class:`CollapsedGuide` (``svi_state.mutable_state[STATE_SITE]``):
    ``state`` (:class:`CollapsedSVIState`) and ``perms`` (per length stratum, the permutation of
    the sequences in the current pass, as carried by :meth:`CollapsedSVI.run`)."""

    state: CollapsedSVIState
    perms: tuple


def _under_substitute() -> bool:
    """Whether a ``substitute`` handler is active (``Predictive(..., params=...)``): there a
    guide whose state was not substituted was given the wrong ``params``."""
    stack = getattr(numpyro.primitives, "_PYRO_STACK", ())
    return any(isinstance(h, handlers.substitute) for h in stack)


class CollapsedGuide:
    r"""Stochastic collapsed VI (Wang & Blunsom 2014) as a guide for :class:`numpyro.infer.SVI`.

    ``SVI(model, CollapsedGuide(model, ...), optim, CollapsedELBO())`` runs exactly the updates of
    :class:`CollapsedSVI` (the same arguments, the same state, the same losses, bit for bit)
    through NumPyro's own loop: ``svi.init``, ``svi.update``, ``svi.stable_update``, ``svi.run``
    (progress bar or ``lax.scan``), ``init_state=`` continuations.  The updates are closed-form
    (eqs. 9-16, Robbins-Monro averages), not gradient steps: the guide has no ``param`` sites, its
    variational statistics are one ``mutable`` site, :data:`STATE_SITE`, that
    :class:`CollapsedELBO` replaces at each update, and ``optim`` is not used (any NumPyro
    optimizer, e.g. ``numpyro.optim.Adam(1e-3)``).

    The arguments are those of :class:`CollapsedSVI` (``num_states``, ``batch_size``,
    ``step_size``, ``hdp``, ``collapsed``, ``transition_prior``, ``hdp_batch_size``,
    ``num_sequences``, ``max_strata``, ``mesh``, ``sequence_axes``).  Given the whole data set
    (the ``N`` sequences the guide was initialized on), one update takes a length-stratified
    minibatch of about ``batch_size`` sequences from it, in a fresh random order each pass (one
    step of :meth:`CollapsedSVI.run`); given fewer sequences (streaming, ``num_sequences=N``), the
    update is on those sequences as one minibatch (:meth:`CollapsedSVI.update`).

    Downstream: :meth:`get_params` (``svi.get_params`` holds no variational parameter, they are
    mutable state), then :meth:`viterbi`, :meth:`state_marginals`,
    :meth:`predictive_log_likelihood`, :meth:`sample_posterior`, :meth:`to_inference_data`, or
    ``Predictive(model, guide=guide, params=guide.get_params(svi_result.state), num_samples=S)``:
    the guide then draws every latent site of the model from ``q`` (:attr:`CollapsedSVI.guide`).
    """

    def __init__(self, model, num_states: Optional[int] = None, batch_size: Optional[int] = None, step_size=None,
                 **options):
        self.fitter = CollapsedSVI(model, num_states, batch_size, step_size, **options)
        self.model = model
        self._plan = None
        self._num_sequences = None

    # ------------------------------------------------------------------ the state
    def init_state(self, rng_key, *args, **kwargs) -> CollapsedCarry:
        """:meth:`CollapsedSVI.init` on the data ``args``/``kwargs``, the length strata of
        :meth:`CollapsedSVI.run` and the first pass's order (what ``svi.init`` stores)."""
        fitter = self.fitter
        state = fitter.init(rng_key, *args, **kwargs)
        data = fitter._view(args, kwargs).data
        N = int(np.asarray(state.num_sequences))
        self._num_sequences = N
        self._plan = None
        perms = ()
        if int(data.lengths.shape[0]) == N:
            self._plan = length_strata(np.asarray(data.lengths), fitter._batch_size or N, data.valid.shape[1],
                                       fitter._max_strata)
            perms = fitter._run_fn(self._plan, None)[0](state)
        return CollapsedCarry(state, tuple(perms))

    def step(self, carry: CollapsedCarry, *args, **kwargs):
        """One update: ``(carry, loss)``.  On the ``N`` sequences of :meth:`init_state`, one step of
        :meth:`CollapsedSVI.run` (the stratified minibatch of this step); on fewer, one
        :meth:`CollapsedSVI.update` with those sequences as the minibatch.  A step whose loss or
        statistics are not finite leaves ``carry`` unchanged and returns a NaN loss (so
        ``svi.stable_update`` skips it, and ``svi.update`` reports it)."""
        fitter = self.fitter
        fitter._require_init()
        shape = fitter._states_shape(args, kwargs)
        count = shape[0] if fitter.spec.batched else 1
        if self._plan is not None and count == self._num_sequences:
            spec = fitter.spec
            values = {spec.sites.states: jnp.zeros(shape, jnp.int32)}
            data = model_view(fitter.model, spec, args, kwargs, values).data
            strata = tuple(SequenceData(None, jax.tree_util.tree_map(lambda a: a[s.indices, :s.width], data.x),
                                        data.valid[s.indices, :s.width], data.lengths[s.indices]) for s in self._plan)
            body = fitter._run_fn(self._plan, None)[1]
            (state, perms), loss = body((carry.state, carry.perms), strata, fitter.emission)
            new = CollapsedCarry(state, tuple(perms))
        else:
            state, loss = fitter.update(carry.state, *args, **kwargs)
            new = CollapsedCarry(state, carry.perms)
        leaves = [a for a in jax.tree_util.tree_leaves((new.state.transition_counts, new.state.emission_stats,
                                                         new.state.hdp)) if jnp.issubdtype(a.dtype, jnp.floating)]
        finite = jnp.isfinite(loss)
        for a in leaves:
            finite = finite & jnp.all(jnp.isfinite(a))
        new = lax.cond(finite, lambda: new, lambda: carry)
        return new, jnp.where(finite, loss, jnp.nan)

    # ------------------------------------------------------------------ the guide
    def __call__(self, *args, **kwargs):
        carry = numpyro.primitives.mutable(STATE_SITE)
        if carry is None:
            if _under_substitute():
                raise ValueError(
                    f"CollapsedGuide: `params` lacks '{STATE_SITE}', the fitted variational state. SVIRunResult.params "
                    "is empty for this guide (its statistics are mutable state, not param sites): pass "
                    "params=guide.get_params(svi_result.state). (SVI.init's init_params does not apply either; "
                    "continue a run with init_state=.)")
            rng_key = numpyro.prng_key()
            if rng_key is None:
                raise ValueError("CollapsedGuide: run it under numpyro.handlers.seed (SVI.init does).")
            with handlers.block():
                carry = self.init_state(rng_key, *args, **kwargs)
            numpyro.primitives.mutable(STATE_SITE, carry)
            return None
        fitter = self.fitter
        sample_posterior_sites(fitter.model, fitter.spec, fitter.config, fitter.emission,
                               fitter.get_params(carry.state), args, kwargs)
        return None

    # ------------------------------------------------------------------ downstream
    def get_params(self, svi_state) -> dict:
        """The variational parameters of ``svi_state`` (an ``SVIState`` of ``SVI`` with this
        guide, or its ``mutable_state``): :meth:`CollapsedSVI.get_params`, and the whole state
        under :data:`STATE_SITE` (what ``Predictive(model, guide=guide, params=...)`` needs)."""
        mutable = getattr(svi_state, "mutable_state", svi_state)
        if not isinstance(mutable, dict) or STATE_SITE not in mutable:
            raise ValueError("`svi_state` must be the SVIState of SVI(model, CollapsedGuide(...), optim, CollapsedELBO()) "
                             f"(svi_result.state), whose mutable_state holds '{STATE_SITE}'.")
        carry = mutable[STATE_SITE]
        return {**self.fitter.get_params(carry.state), STATE_SITE: carry}

    def _fitter_params(self, params):
        return {k: v for k, v in params.items() if k != STATE_SITE}

    def state_marginals(self, params, y, lengths=None):
        """:meth:`CollapsedSVI.state_marginals` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.state_marginals(self._fitter_params(params), y, lengths)

    def viterbi(self, params, y, lengths=None):
        """:meth:`CollapsedSVI.viterbi` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.viterbi(self._fitter_params(params), y, lengths)

    def predictive_log_likelihood(self, params, y_heldout, lengths=None) -> PredictiveLogLikelihood:
        """:meth:`CollapsedSVI.predictive_log_likelihood` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.predictive_log_likelihood(self._fitter_params(params), y_heldout, lengths)

    def sample_posterior(self, rng_key, params, *args, num_samples: int = 1, **kwargs) -> dict:
        """:meth:`CollapsedSVI.sample_posterior` with ``params = guide.get_params(svi_result.state)``."""
        return self.fitter.sample_posterior(rng_key, self._fitter_params(params), *args, num_samples=num_samples,
                                            **kwargs)

    def convergence(self, svi_result: SVIRunResult, window: Optional[int] = None, rtol: float = 1e-3) -> Convergence:
        """:meth:`CollapsedSVI.convergence` of the ``SVIRunResult`` of ``svi.run``."""
        state = self.get_params(svi_result.state)[STATE_SITE].state
        return self.fitter.convergence(SVIRunResult(None, state, svi_result.losses), window, rtol)

    def to_inference_data(self, svi_result: SVIRunResult, *args, num_samples: int = 500, rng_key=None, **kwargs):
        """:meth:`CollapsedSVI.to_inference_data` of the ``SVIRunResult`` of ``svi.run``."""
        params = self._fitter_params(self.get_params(svi_result.state))
        result = SVIRunResult(params, svi_result.state, svi_result.losses)
        return self.fitter.to_inference_data(result, *args, num_samples=num_samples, rng_key=rng_key, **kwargs)


class CollapsedELBO(ELBO):
    r"""The loss of :class:`CollapsedGuide` for :class:`numpyro.infer.SVI`: each call makes one
    collapsed update (:meth:`CollapsedGuide.step`) and returns the new state as mutable state,
    ``{"loss": -ELBO estimate, "mutable_state": {STATE_SITE: carry}}`` (the loss is that of
    :func:`scvi_update`: ``-(N/M) sum_B log Z_n + KL(q(pi_tilde) q(alpha) q(gamma) || p)``).  It
    has no gradient: the update is the closed-form Robbins-Monro average, so ``SVI``'s optimizer
    is left idle."""

    can_infer_discrete = True

    def __init__(self):
        super().__init__(num_particles=1)

    def _guide(self, guide):
        if not isinstance(guide, CollapsedGuide):
            raise ValueError(f"CollapsedELBO needs a numpyro_hdphmm.infer.CollapsedGuide as the guide, got "
                             f"{type(guide).__name__}.")
        return guide

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        self._guide(guide)
        raise ValueError(
            "CollapsedELBO: the collapsed objective needs the guide's mutable state, which SVI.evaluate does not "
            "pass; read the losses returned by svi.update / svi.run.")

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        guide = self._guide(guide)
        carry = param_map.get(STATE_SITE)
        if carry is None:
            raise ValueError(f"CollapsedELBO: no '{STATE_SITE}' in the SVI state; call svi.init first.")
        if model is not guide.model:
            raise ValueError("CollapsedELBO: SVI's model must be the model the CollapsedGuide was built with.")
        new, loss = guide.step(carry, *args, **kwargs)
        return {"loss": loss, "mutable_state": {STATE_SITE: new}}
