r"""The fitter: :class:`CollapsedSVI` drives the pure core on a model's data, like :class:`numpyro.infer.SVI`.

It discovers the model (:func:`~numpyro_hdphmm.infer.plumbing.discovery.discover`), builds the
static :class:`~numpyro_hdphmm.infer.collapsed_svi.core.SCVIConfig` and the initial state
(:func:`~numpyro_hdphmm.infer.collapsed_svi.core.scvi_init`), runs compiled updates
(:func:`~numpyro_hdphmm.infer.collapsed_svi.core.scvi_update`) over length-stratified minibatches,
reports convergence (:class:`Convergence`), and hands the fitted parameters to the downstream
tools of :mod:`numpyro_hdphmm.infer.collapsed_svi.downstream`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax import lax, random
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.svi import SVIRunResult

from numpyro_hdphmm._core import cvi
from numpyro_hdphmm.infer.plumbing.programs import Arguments
from numpyro_hdphmm.infer.collapsed_svi.core import (
    CollapsedSVIState,
    ConstantStepSize,
    Minibatch,
    RobbinsMonro,
    SCVIConfig,
    length_strata,
    scvi_init,
    scvi_update,
)
from numpyro_hdphmm.infer.collapsed_svi.downstream import (
    plug_in_predictive_log_likelihood,
    plug_in_state_marginals,
    plug_in_viterbi,
    sample_posterior_sites,
    variational_inference_data,
)
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, SequenceData, discover, model_view
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, sequence_mesh
from numpyro_hdphmm.results.diagnostics.heldout import PredictiveLogLikelihood

__all__ = ["CollapsedSVI", "Convergence"]


# ================================================================================ results of a run
class Convergence(NamedTuple):
    """Result of :meth:`CollapsedSVI.convergence`.

    converged : bool  ``relative_change < rtol``
    relative_change : float  ``|mean(last window) - mean(window before)| / |mean(window before)|``
        of the losses (NaN with fewer than two windows)
    window : int  updates per window (default: one pass over the data)
    num_steps : int  updates made
    states_used : int or None  states holding at least 1% of the expected steps (``E[C]``'s columns)
    rtol : float
    merges : int or None  states merged into others by the merge move so far
    """

    converged: bool
    relative_change: float
    window: int
    num_steps: int
    states_used: Optional[int]
    rtol: float
    merges: Optional[int] = None

    def __str__(self):
        used = "" if self.states_used is None else f", {self.states_used} states hold >= 1% of the steps"
        used += "" if not self.merges else f", {self.merges} merged into others"
        verdict = "converged" if self.converged else "NOT converged (run more steps, or pass init_state= to continue)"
        return (f"{verdict}: the mean loss of the last {self.window} updates changed by {self.relative_change:.2e} "
                f"(relative; rtol {self.rtol:g}) after {self.num_steps} updates{used}")


# ================================================================================ the fitter
class CollapsedSVI:
    r"""Stochastic collapsed variational inference (Wang & Blunsom 2014) for an HDP-HMM model.

    Mirrors :class:`numpyro.infer.SVI`: :meth:`init`, :meth:`update` (``(state, loss)``),
    :meth:`run` (``SVIRunResult(params, state, losses)`` with a progress bar), :meth:`get_params`,
    and the attributes :attr:`model` and :attr:`guide`.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param num_states: the truncation ``K`` (``q(z) = 0`` on states ``>= K``, the "direct assignment
        truncation"); at most the model's ``max_states`` (default: it).  Draws of the model's sites
        have the model's shapes, with no mass on slots ``>= K``.
    :param batch_size: sequences per minibatch ``M`` in :meth:`run` (default: all, batch VI).
    :param step_size: ``RobbinsMonro(tau, kappa)`` (default ``RobbinsMonro(1.0, 0.5)``), a constant
        ``rho`` in ``(0, 1]``, or a callable ``n -> rho_n``.
    :param hdp: ``True`` (SCVI-HDP): the variational top level ``q(pi_tilde)``, ``q(alpha)``,
        ``q(gamma)``; ``False`` (SCVI for the finite HMM, the paper's baseline): the rows' prior is
        ``Dir(transition_prior, ..., transition_prior)`` and the top-level sites keep their priors.
    :param collapsed: ``False``: uncollapsed stochastic VI (the paper's SVI baseline; ``hdp=False``).
    :param transition_prior: the finite HMM's Dirichlet pseudo-count, and the ``G[alpha pi_k]`` of
        the HDP-HMM before its first HDP update (the paper: 0.1 for both).
    :param hdp_batch_size: sequences per HDP update (the paper's "large batch", 10,000 on WSJ); the
        default ``min(10000, N)`` is rounded down to a multiple of the minibatch size.
    :param num_sequences: ``N`` when :meth:`init` sees only part of the data (streaming with
        :meth:`update`); default: the number of sequences given to :meth:`init`.
    :param max_strata: at most this many length strata in :meth:`run` (:func:`length_strata`; 1: every
        minibatch padded to the longest sequence).
    :param mesh: a :class:`jax.sharding.Mesh` to split each minibatch's sequences over (the
        forward-backward of each sequence on its device, the expected statistics summed over the
        devices, one global update; :mod:`numpyro_hdphmm.infer.plumbing.sharding`, ``docs/scaling.md``);
        ``None``: unsharded; ``"auto"`` (default): every local device when there are several
        (``sequence_mesh(jax.local_devices())``), unsharded otherwise.  ``M`` need not be a multiple
        of the number of devices (the minibatch is padded inside the sharded step and the padding
        dropped).  The updates are those of the unsharded fitter up to the order of floating-point
        sums.
    :param sequence_axes: the mesh axes the sequences are split over (default: all of them).
    :param merge: the merge move after each HDP update (default ``True`` with ``hdp=True``; the
        finite HMM has none): pairs of states are merged while the collapsed joint of the
        minibatch's most probable labels gains
        (:func:`~numpyro_hdphmm.infer.collapsed_svi.core.merge_states`).  ``False`` runs the paper's
        algorithm as printed.
    """

    def __init__(self, model, num_states: Optional[int] = None, batch_size: Optional[int] = None,
                 step_size=None, *, hdp: bool = True, collapsed: bool = True, transition_prior: float = 0.1,
                 hdp_batch_size: Optional[int] = None, num_sequences: Optional[int] = None, max_strata: int = 3,
                 mesh: Any = "auto", sequence_axes=None, merge: Optional[bool] = None):
        if not callable(model):
            raise ValueError("`model` must be a NumPyro model (a callable).")
        self.model = model
        self._num_states = self._check_int("num_states", num_states)
        self._batch_size = self._check_int("batch_size", batch_size)
        self._hdp_batch_size = self._check_int("hdp_batch_size", hdp_batch_size)
        self._num_sequences = self._check_int("num_sequences", num_sequences)
        self._max_strata = self._check_int("max_strata", max_strata)
        self._step_size = self._check_step_size(step_size)
        self._hdp, self._collapsed = bool(hdp), bool(collapsed)
        if isinstance(mesh, str) and mesh == "auto":
            if sequence_axes is not None:
                raise ValueError("`sequence_axes` needs an explicit `mesh` (not mesh='auto').")
            local = jax.local_devices()
            mesh = sequence_mesh(local) if len(local) > 1 else None
        self.sharding = SequenceSharding.from_arguments(mesh, sequence_axes)
        if not self._collapsed and self._hdp:
            raise ValueError("`collapsed=False` (the uncollapsed SVI baseline) is for the finite HMM: pass hdp=False.")
        if not (isinstance(transition_prior, (int, float)) and math.isfinite(transition_prior) and transition_prior > 0):
            raise ValueError(f"`transition_prior` must be a positive number, got {transition_prior!r}.")
        self._transition_prior = float(transition_prior)
        if merge is not None and not isinstance(merge, (bool, np.bool_)):
            raise ValueError(f"`merge` must be True or False, got {merge!r}.")
        if merge and not self._hdp:
            raise ValueError("`merge=True` merges states of the HDP-HMM, whose number of states is inferred; the finite "
                             "HMM (hdp=False) has none: drop merge= or pass hdp=True.")
        self._merge = self._hdp if merge is None else bool(merge)
        self._spec: Optional[ModelSpec] = None
        self._config: Optional[SCVIConfig] = None
        self._emission = None
        self._cache = {}

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check_int(name, value):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
        return int(value)

    @staticmethod
    def _check_step_size(step_size):
        if step_size is None:
            return RobbinsMonro(1.0, 0.5)
        if isinstance(step_size, RobbinsMonro):
            tau, kappa = float(step_size.tau), float(step_size.kappa)
            if not (0.0 <= kappa <= 1.0):
                raise ValueError(f"`step_size`: the forgetting rate kappa must be in [0, 1], got {kappa}.")
            if not (tau >= 1.0 or (kappa == 0.0 and tau > 0)):
                raise ValueError(f"`step_size`: tau must be >= 1 so that rho_0 = tau^-kappa <= 1, got {tau}.")
            return RobbinsMonro(tau, kappa)
        if isinstance(step_size, (int, float)) and not isinstance(step_size, bool):
            if not (0.0 < step_size <= 1.0):
                raise ValueError(f"`step_size` must be in (0, 1] when constant, got {step_size}.")
            return ConstantStepSize(float(step_size))
        if callable(step_size):
            return step_size
        raise ValueError(f"`step_size` must be RobbinsMonro(tau, kappa), a number in (0, 1] or a callable, got {step_size!r}.")

    # ------------------------------------------------------------------ discovery
    @property
    def spec(self) -> Optional[ModelSpec]:
        """The model's :class:`~numpyro_hdphmm.infer.plumbing.discovery.ModelSpec` (after :meth:`init`)."""
        return self._spec

    @property
    def config(self) -> Optional[SCVIConfig]:
        """The :class:`SCVIConfig` of the pure core (after :meth:`init`)."""
        return self._config

    @property
    def emission(self):
        """The emission family found by :meth:`init`, with the model's hyperparameters (the family
        whose statistics the state holds; the ``emission`` argument of :func:`scvi_update`)."""
        return self._emission

    def _check_spec(self, spec: ModelSpec, emission) -> None:
        name = "CollapsedSVI"
        if not emission.conjugate:
            what = ("custom emissions: their parameters are sites of your model, which CollapsedSVI cannot integrate "
                    "out (use an MCMC kernel)" if not spec.owns_parameters else
                    "it has no closed-form posterior given expected statistics (DP-mixture emissions are not supported "
                    "by CollapsedSVI; use an MCMC kernel, or a conjugate family)")
            raise NotImplementedError(f"{name}: the emission family {spec.family} is not conjugate: {what}.")
        hyper = spec.hyper
        for role in ("kappa", "c", "rho"):
            site = getattr(hyper, role)
            if site is not None:
                raise NotImplementedError(
                    f"{name}: site '{site}' ({'kappa' if role == 'kappa' else 'alpha + kappa' if role == 'c' else 'kappa / (alpha + kappa)'}) "
                    "is random; CollapsedSVI supports a constant kappa only (gamma and alpha may be Gamma-prior sites).")
        if hyper.dp_concentration is not None:
            raise NotImplementedError(f"{name}: DP-mixture emissions are not supported.")
        if hyper.emission_base is not None:
            raise NotImplementedError(
                f"{name}: site '{hyper.emission_base}' is a shared emission base (a Dirichlet site the categorical "
                "emission's concentration is proportional to), which has no variational update here; fix it to a "
                "constant (e.g. its posterior mean from an MCMC kernel, which all update it exactly).")
        if spec.inner_sites:
            reasons = {u.site: u.reason for u in spec.plan if u.update == "inner"}
            listed = "; ".join(f"'{s}' ({reasons.get(s, '')})" for s in spec.inner_sites)
            raise NotImplementedError(
                f"{name}: these latent sites have no variational update: {listed}. CollapsedSVI updates the HDP-HMM's "
                "sites and gamma / alpha sites with Gamma priors; fix the others to constants.")

    def _discover(self, args, kwargs):
        key = Arguments.split(args, kwargs).key
        cached = self._cache.get(("spec", key)) if key is not None else None
        if cached is not None:
            return cached
        spec = discover(self.model, args, kwargs, kernel="CollapsedSVI", own_dp_concentration=False, hyperparameters="auxiliary",
                        describe={"beta": "variational Beta sticks q(pi_tilde) (Wang & Blunsom eqs. 13-14)",
                                  "trans": "integrated out: expected transition counts (eqs. 9, 11)",
                                  "states": "q(z^n) by forward-backward under the surrogate HMM (eqs. 9-10)",
                                  "params": "integrated out: expected sufficient statistics (eqs. 10, 12)"})
        if key is not None:
            self._cache[("spec", key)] = spec
        return spec

    def _states_shape(self, args, kwargs):
        """Shape of the states site at these arguments (abstract evaluation, cached)."""
        split = Arguments.split(args, kwargs)
        arrays, rebuild, key = split.arrays, split.join, split.key
        if key is not None and ("states", key) in self._cache:
            return self._cache[("states", key)]
        site = self._spec.sites.states

        def states(arrs):
            a, kw = rebuild(arrs)
            tr = handlers.trace(handlers.seed(self.model, 0)).get_trace(*a, **kw)
            return tr[site]["value"]

        shape = jax.eval_shape(states, arrays).shape
        if key is not None:
            self._cache[("states", key)] = shape
        return shape

    def _view(self, args, kwargs):
        """The model's view (concentrations, emission, data) at these arguments, compiled (the
        compiled function is cached on the arguments' structure and shapes)."""
        split = Arguments.split(args, kwargs)
        arrays, rebuild, key = split.arrays, split.join, split.key
        fn = self._cache.get(("view", key)) if key is not None else None
        if fn is None:
            values = {self._spec.sites.states: jnp.zeros(self._states_shape(args, kwargs), jnp.int32)}
            spec = self._spec

            def view(arrs):
                a, kw = rebuild(arrs)
                return model_view(self.model, spec, a, kw, values)

            fn = jax.jit(view) if arrays else view
            if key is not None:
                self._cache[("view", key)] = fn
        return fn(arrays)

    # ------------------------------------------------------------------ init / update / run
    def init(self, rng_key, *args, **kwargs) -> CollapsedSVIState:
        """Discover the model on ``args``/``kwargs`` (the data set, or its first minibatch with
        ``num_sequences=``), then the initial state (:func:`scvi_init`) from a random minibatch."""
        spec = self._discover(args, kwargs)
        self._spec = spec
        capacity = spec.capacity
        K = capacity if self._num_states is None else self._num_states
        if K > capacity:
            raise ValueError(f"`num_states` must be at most the model's max_states={capacity}, got {K}.")
        view = self._view(args, kwargs)
        emission = view.emission
        self._check_spec(spec, emission)
        available = int(view.data.lengths.shape[0])
        N = self._num_sequences or available
        M = self._batch_size or N
        if M > N:
            raise ValueError(f"`batch_size` must be at most the number of sequences N={N}, got {M}.")
        L = self._hdp_batch_size or max(M, (min(10000, N) // M) * M)
        if L < M or L % M:
            raise ValueError(f"`hdp_batch_size` must be a multiple of batch_size={M}, got {L}.")
        hyper, priors = view.hyper, view.priors
        constant = lambda v: float(np.asarray(v))
        try:
            kappa = constant(hyper.kappa)
            alpha = None if spec.hyper.alpha is not None else constant(hyper.alpha)
            gamma = None if spec.hyper.gamma is not None else constant(hyper.gamma)
        except (TypeError, jax.errors.ConcretizationTypeError) as err:
            raise NotImplementedError("CollapsedSVI: gamma, alpha and kappa must be constants or Gamma-prior sites.") from err
        to_float = lambda p: None if p is None else (constant(p[0]), constant(p[1]))
        config = SCVIConfig(
            num_states=K, hdp=self._hdp, collapsed=self._collapsed, kappa=kappa,
            transition_prior=self._transition_prior, step_size=self._step_size, hdp_every=L // M,
            alpha=alpha, gamma=gamma, priors=cvi.HDPPriors(alpha=to_float(priors.alpha), gamma=to_float(priors.gamma)),
            merge=self._merge)
        self._config, self._emission = config, emission
        k_pick, k_init = random.split(rng_key)
        take = min(M, available)
        idx = random.choice(k_pick, available, (take,), replace=False) if take < available else jnp.arange(available)
        batch = self._gather(view.data, idx)
        return jax.jit(scvi_init, static_argnums=(3,))(k_init, batch, emission, config, N)

    @staticmethod
    def _gather(data: SequenceData, idx) -> SequenceData:
        return SequenceData(y=None, x=jax.tree_util.tree_map(lambda a: a[idx], data.x), valid=data.valid[idx],
                            lengths=data.lengths[idx])

    def _require_init(self):
        if self._config is None:
            raise RuntimeError("CollapsedSVI: call init(...) (or run(...)) first.")

    def update(self, state: CollapsedSVIState, *args, **kwargs):
        """One update on the minibatch given as the model's arguments (``obs`` of shape ``(M, T, ...)``,
        the sequences of one minibatch, each standing for ``N / M`` sequences): ``(state, loss)``
        (:func:`scvi_update`).  The emission prior is the one found by :meth:`init` (statistics belong
        to the family that computed them)."""
        self._require_init()
        split = Arguments.split(args, kwargs)
        arrays, rebuild, key = split.arrays, split.join, split.key
        fn = self._cache.get(("update", key, self._config)) if key is not None else None
        if fn is None:
            values = {self._spec.sites.states: jnp.zeros(self._states_shape(args, kwargs), jnp.int32)}
            spec, config = self._spec, self._config

            def step(state, emission, arrs):
                a, kw = rebuild(arrs)
                data = model_view(self.model, spec, a, kw, values).data
                data = SequenceData(None, data.x, data.valid, data.lengths)
                return scvi_update(state, Minibatch(data, state.num_sequences / data.lengths.shape[0]), emission, config,
                                   self.sharding)

            fn = jax.jit(step)
            if key is not None:
                self._cache[("update", key, self._config)] = fn
        return fn(state, self._emission, arrays)

    def _run_fn(self, plan, scan_length: Optional[int]):
        """The compiled body of :meth:`run` for a stratification ``plan`` (:func:`length_strata`):
        in stratum ``b``, minibatch ``n`` takes block ``n mod B_b`` of the permutation of its epoch
        ``n // B_b`` (``B_b = N_b // M_b``; the last ``N_b mod M_b`` sequences of each permutation
        wait for the next epoch), all on device."""
        config = self._config
        key = ("run", tuple((s.num_sequences, s.batch_size, s.width) for s in plan), scan_length, config)
        if key in self._cache:
            return self._cache[key]

        def order(state, b, epoch, size):
            return random.permutation(random.fold_in(random.fold_in(state.rng_key, b), epoch), size)

        def body(carry, strata, emission):
            state, perms = carry
            groups, new_perms = [], []
            for b, (stratum, data) in enumerate(zip(plan, strata)):
                n_b, m_b = stratum.num_sequences, stratum.batch_size
                perm = perms[b]
                if m_b < n_b:
                    epoch, block = jnp.divmod(state.step, n_b // m_b)
                    perm = lax.cond(block == 0, lambda: order(state, b, epoch, n_b), lambda: perm)
                    data = self._gather(data, lax.dynamic_slice_in_dim(perm, block * m_b, m_b))
                new_perms.append(perm)
                groups.append(Minibatch(data, jnp.asarray(n_b / m_b, state.transition_counts.dtype)))
            state, loss = scvi_update(state, tuple(groups), emission, config, self.sharding)
            return (state, tuple(new_perms)), loss

        def first(state):
            return tuple(order(state, b, state.step // max(s.num_sequences // s.batch_size, 1), s.num_sequences)
                         for b, s in enumerate(plan))

        if scan_length is None:
            fn = (jax.jit(first), jax.jit(body))
        else:
            fn = (jax.jit(first), jax.jit(lambda carry, strata, emission: lax.scan(
                lambda c, _: body(c, strata, emission), carry, None, length=scan_length)))
        self._cache[key] = fn
        return fn

    def run(self, rng_key, num_steps: int, *args, progress_bar: bool = True, init_state: Optional[CollapsedSVIState] = None,
            tol: Optional[float] = None, **kwargs) -> SVIRunResult:
        """``num_steps`` updates over minibatches of about ``batch_size`` sequences of the data ``args``
        / ``kwargs`` (every sequence once per pass of about ``N / M`` updates, in a fresh random order
        each pass): ``SVIRunResult(params, state, losses)`` like :meth:`numpyro.infer.SVI.run`,
        ``losses`` the negative ELBO estimates of :func:`scvi_update`.

        Minibatches are stratified by length (:func:`length_strata`, ``length_strata=`` of the
        constructor): each stratum of similar lengths, padded to its own width, contributes
        ``M_b ~ M N_b / N`` sequences weighted by ``N_b / M_b``, so that sentences of 20 words are not
        padded to the longest one.  With ``progress_bar`` a compiled update per step (``tqdm``, as
        ``SVI.run``), otherwise one ``lax.scan``.  ``init_state`` continues a previous run (the
        order of the minibatches continues too).

        ``tol`` (stopping rule): run pass by pass (``ceil(N / M)`` updates, one compiled chunk each)
        and stop, before ``num_steps``, after the first pass whose mean loss changed by less than
        ``tol`` relative to the previous pass's (:meth:`convergence`); the result holds the updates
        made.  The chunks continue one another exactly (the same updates as one run)."""
        if isinstance(num_steps, bool) or not isinstance(num_steps, (int, np.integer)) or num_steps < 1:
            raise ValueError(f"`num_steps` must be a positive integer, got {num_steps!r}.")
        if tol is not None:
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not (tol > 0 and math.isfinite(tol)):
                raise ValueError(f"`tol` must be a positive number (a relative change of the loss per pass), got {tol!r}.")
            return self._run_until(rng_key, int(num_steps), args, kwargs, progress_bar, init_state, float(tol))
        if init_state is None or self._config is None:
            fresh = self.init(rng_key, *args, **kwargs)
            state = fresh if init_state is None else init_state
        else:
            state = init_state
        view = self._view(args, kwargs)
        data = view.data
        N = int(data.lengths.shape[0])
        if int(np.asarray(state.num_sequences)) != N:
            raise ValueError(f"run: the data hold {N} sequences but the state was built for "
                             f"num_sequences={int(np.asarray(state.num_sequences))}; use update() for streaming.")
        plan = length_strata(np.asarray(data.lengths), self._batch_size or N, data.valid.shape[1],
                             self._max_strata)
        strata = tuple(SequenceData(None, jax.tree_util.tree_map(lambda a: a[s.indices, :s.width], data.x),
                                    data.valid[s.indices, :s.width], data.lengths[s.indices]) for s in plan)
        if progress_bar:
            import tqdm.auto as tqdm

            first, body = self._run_fn(plan, None)
            carry = (state, first(state))
            losses = []
            with tqdm.trange(1, num_steps + 1) as bar:
                every = max(num_steps // 20, 1)
                for i in bar:
                    carry, loss = body(carry, strata, self._emission)
                    losses.append(loss)
                    if i % every == 0:
                        losses[i - every:] = jax.device_get(losses[i - every:])
                        avg = sum(losses[i - every:]) / every
                        bar.set_postfix_str(f"init loss: {float(losses[0]):.4f}, avg. loss [{i - every + 1}-{i}]: {avg:.4f}",
                                            refresh=False)
            losses = jnp.stack([jnp.asarray(v) for v in losses])
        else:
            first, scan = self._run_fn(plan, int(num_steps))
            carry, losses = scan((state, first(state)), strata, self._emission)
        state = carry[0]
        return SVIRunResult(self.get_params(state), state, losses)

    def _pass_length(self, state: CollapsedSVIState) -> int:
        N = int(np.asarray(state.num_sequences))
        return max(-(-N // (self._batch_size or N)), 1)

    def _run_until(self, rng_key, num_steps, args, kwargs, progress_bar, init_state, tol):
        """:meth:`run` with the stopping rule ``tol``: one pass per chunk."""
        state, losses, done = init_state, [], 0
        window = None
        while done < num_steps:
            if state is None:
                state = self.init(rng_key, *args, **kwargs)
            window = window or self._pass_length(state)
            chunk = min(window, num_steps - done)
            result = self.run(rng_key, chunk, *args, progress_bar=progress_bar, init_state=state, **kwargs)
            state, done = result.state, done + chunk
            losses.append(np.asarray(result.losses))
            if self.convergence(np.concatenate(losses), window=window, rtol=tol).converged:
                break
        return SVIRunResult(self.get_params(state), state, jnp.asarray(np.concatenate(losses)))

    def convergence(self, result, window: Optional[int] = None, rtol: float = 1e-3) -> "Convergence":
        """Convergence report of a run (:class:`Convergence`): the mean loss (negative ELBO
        estimate) of the last ``window`` updates (default: one pass, ``ceil(N / M)`` updates)
        against the ``window`` before, converged when the relative change is below ``rtol``; and
        the states in use, those whose expected share of the steps (the columns of ``E[C]``) is
        at least 1%.  ``result``: the ``SVIRunResult`` of :meth:`run`, or an array of losses (no
        state count then)."""
        losses = np.asarray(getattr(result, "losses", result), float)
        state = getattr(result, "state", None)
        if window is None:
            window = self._pass_length(state) if isinstance(state, CollapsedSVIState) else max(losses.size // 10, 1)
        window = max(int(window), 1)
        change = float("nan")
        if losses.size >= 2 * window:
            last, before = losses[-window:].mean(), losses[-2 * window:-window].mean()
            change = abs(last - before) / max(abs(before), np.finfo(float).tiny)
        used = merges = None
        if isinstance(state, CollapsedSVIState):
            share = np.asarray(state.transition_counts).sum(0)
            share = share / max(share.sum(), np.finfo(float).tiny)
            used, merges = int(np.sum(share >= 0.01)), int(state.merges)
        return Convergence(bool(change < rtol), change, window, int(losses.size), used, float(rtol), merges)

    # ------------------------------------------------------------------ parameters
    def get_params(self, state: CollapsedSVIState) -> dict:
        """The variational parameters: ``transition_counts (K+1, K)`` ``E[C]``, ``emission_stats``
        ``E[t]`` (pytree), ``pseudo_counts (K,)`` (``G[alpha pi_k]``, or the finite HMM's prior),
        ``sticks_u``, ``sticks_v`` ``(K,)`` (``q(pi_tilde_k) = Beta(u_k, v_k)``), ``alpha_shape``,
        ``alpha_rate``, ``gamma_shape``, ``gamma_rate`` (``q(alpha)``, ``q(gamma)``; for a constant
        of the model: the constant and 1)."""
        h = state.hdp
        return {"transition_counts": state.transition_counts, "emission_stats": state.emission_stats,
                "pseudo_counts": h.pseudo_counts, "sticks_u": h.u, "sticks_v": h.v, "alpha_shape": h.alpha_shape,
                "alpha_rate": h.alpha_rate, "gamma_shape": h.gamma_shape, "gamma_rate": h.gamma_rate}

    # ------------------------------------------------------------------ downstream: plug-in HMM
    def state_marginals(self, params, y, lengths=None):
        """``q(z_t = k)`` of any sequence(s) under the fitted surrogate HMM (:func:`~numpyro_hdphmm.infer.collapsed_svi.core.plug_in_hmm`; for
        the collapsed variants exactly the local update of eqs. 9-10): ``y (T, ...)`` -> ``(T, K)``,
        ``y (N, T, ...)`` -> ``(N, T, K)`` (padded steps 0)."""
        self._require_init()
        return plug_in_state_marginals(self._emission, self._config, params, y, lengths)

    def viterbi(self, params, y, lengths=None):
        """The most probable state path under the surrogate HMM (Rabiner eqs. 32-35): ``(T,)`` or
        ``(N, T)``, padded steps copy the last state."""
        self._require_init()
        return plug_in_viterbi(self._emission, self._config, params, y, lengths)

    def predictive_log_likelihood(self, params, y_heldout, lengths=None) -> PredictiveLogLikelihood:
        """Held-out predictive log-likelihood under the plug-in HMM (:func:`~numpyro_hdphmm.infer.collapsed_svi.core.plug_in_hmm`: posterior-mean
        transitions, posterior-predictive emissions), by the forward algorithm (Rabiner eq. 103):
        a :class:`~numpyro_hdphmm.results.diagnostics.PredictiveLogLikelihood` of one parameter
        value (``S = 1``), whose ``per_step`` is the paper's per-token metric (Sec. 3).  JAX arrays:
        the method can be traced by ``jax.jit``."""
        self._require_init()
        return plug_in_predictive_log_likelihood(self._emission, self._config, params, y_heldout, lengths)

    # ------------------------------------------------------------------ downstream: draws from q
    @property
    def guide(self):
        """A NumPyro guide drawing every latent site from the variational posterior
        (:func:`~numpyro_hdphmm.infer.collapsed_svi.downstream.draw_globals`; the states by
        forward-filtering backward-sampling given the drawn parameters on the observed data).  Its
        sites are ``Delta`` at the draws: it is for ``numpyro.infer.Predictive(model,
        guide=svi.guide, params=result.params)``, not for NumPyro's ELBOs."""
        self._require_init()
        names = ("transition_counts", "emission_stats", "pseudo_counts", "sticks_u", "sticks_v", "alpha_shape",
                 "alpha_rate", "gamma_shape", "gamma_rate")

        def guide(*args, **kwargs):
            params = {n: numpyro.param(n) for n in names}
            if any(v is None for v in params.values()):
                raise ValueError("CollapsedSVI.guide needs the variational parameters: Predictive(model, guide=svi.guide, "
                                 "params=result.params, ...).")
            sample_posterior_sites(self.model, self._spec, self._config, self._emission, params, args, kwargs)

        return guide

    def sample_posterior(self, rng_key, params, *args, num_samples: int = 1, **kwargs) -> dict:
        """``num_samples`` draws of every latent site from the variational posterior on the data
        ``args``/``kwargs`` (:attr:`guide`): a dict like ``mcmc.get_samples()``, so that
        ``Predictive(model, posterior_samples=...)``, :func:`numpyro_hdphmm.viterbi`,
        :func:`~numpyro_hdphmm.results.diagnostics.predictive_log_likelihood` work as after MCMC."""
        self._require_init()
        draws = Predictive(self.guide, params=params, num_samples=num_samples)(rng_key, *args, **kwargs)
        return {k: v for k, v in draws.items() if k not in params}

    # ------------------------------------------------------------------ ArviZ
    def to_inference_data(self, result: SVIRunResult, *args, num_samples: int = 500, rng_key=None, **kwargs):
        """ArviZ data: ``posterior`` (one chain of ``num_samples`` draws from ``q``,
        :meth:`sample_posterior`) and a group ``variational`` with the variational parameters
        (:meth:`get_params`, the emission statistics one variable per leaf) and ``elbo`` (the ELBO
        estimates of the run, dimension ``step``)
        (:func:`~numpyro_hdphmm.infer.collapsed_svi.downstream.variational_inference_data`).  ArviZ
        0.x: an ``InferenceData``; ArviZ 1.x (``arviz_base``): an ``xarray.DataTree``."""
        rng_key = random.key(0) if rng_key is None else rng_key
        draws = self.sample_posterior(rng_key, result.params, *args, num_samples=num_samples, **kwargs)
        return variational_inference_data(draws, result.params, result.losses)
