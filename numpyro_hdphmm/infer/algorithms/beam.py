r"""Beam sampling of the infinite (sticky) HDP-HMM: Van Gael, Saatci, Teh & Ghahramani (2008).

The beam sampler samples the model AS WRITTEN, ``beta ~ GEM(gamma)``: ``K = max_states`` is only
a capacity.  The sampler represents ``k <= K`` instantiated states (slots) and the remaining
mass of all the others: ``beta = (beta_1, ..., beta_K, beta_rem)`` with ``beta_k = 0`` in free
slots, and rows ``pi_j = (pi_j1, ..., pi_jK, pi_j,rem)`` (the model's ``{name}_trans``, start
row last).  Free slots hold draws from the prior (their rows ``Dir(alpha beta + kappa e_j)``,
their emission parameters from ``H``), which the sweep never reads.  One sweep (Van Gael et al.
Sec. 3, with Fox et al.'s sticky prior):

1. slices ``u_t ~ U(0, pi_{z_{t-1} z_t})`` for every valid step of every sequence (the first
   step uses the start row), drawn in log space (Van Gael et al. Sec. 3, the auxiliary variable step);
2. while an instantiated row (or the start row) gives its remainder more mass than the
   smallest slice it must respect, break the stick (Van Gael et al. Sec. 3; the stick-breaking
   construction, Teh et al. 2006 eq. 9 / Fox et al. eq. 2): ``b ~ Beta(1, gamma)``,
   ``beta_new = b beta_rem``, ``beta_rem <- (1 - b) beta_rem``; every instantiated row and the
   start row split their remainder ``pi_{j,new} = v_j pi_{j,rem}``,
   ``pi_{j,rem} <- (1 - v_j) pi_{j,rem}`` with ``v_j ~ Beta(alpha beta_new, alpha beta_rem)``
   (the Dirichlet aggregation property of ``pi_j ~ Dir(alpha beta + kappa e_j + n_j)``: for
   ``j != new`` no ``kappa`` and no count falls on the new column); the new state's row is drawn
   from its prior ``Dir(alpha beta + kappa e_new)`` over the instantiated states and the rest
   (Fox et al. eq. 26) and its emission parameters from ``H``.  A bounded ``lax.while_loop``:
   when the capacity is exhausted while still needed, the sweep continues truncated and the
   ``overflow`` flag is raised (the base class collects it);
3. states by forward filtering, backward sampling over the instantiated states with the
   time-varying 0/1 transitions ``1[pi_jk > u_t]`` (Van Gael et al. Sec. 3, the forward recursion
   ``p(z_t | y_{1:t}, u_{1:t}) ∝ p(y_t | z_t) sum_{z_{t-1}} 1[u_t < pi_{z_{t-1} z_t}]
   p(z_{t-1} | y_{1:t-1}, u_{1:t-1})``), see :func:`slice_ffbs`; it costs ``O(T k^2)`` in the
   number ``k`` of instantiated states (compiled for a few sizes,
   :func:`~numpyro_hdphmm._core.slices.ffbs_sizes`), not in the capacity;
4. compaction: unused states are dropped (their ``beta`` mass joins ``beta_rem``) and the used
   ones relabelled by first appearance (sequence by sequence, in time order), except for
   custom emissions, whose parameters are the user's sites: their states keep their slots;
5. emission parameters from their conjugate posteriors
   (:meth:`~numpyro_hdphmm.emissions.base.EmissionFamily.update_parameters`); free slots get
   prior draws;
6. tables ``m, w, mbar`` with the rows integrated out (Fox et al. Alg. 1 step 3), the exact
   auxiliary-variable updates of the recognized hyperparameter sites with the infinite-model
   ``gamma`` update (Fox et al. eq. 56 / Escobar & West: ``Kbar`` dishes with informative
   tables, ``mbar..`` informative tables), ``(beta_1..beta_K, beta_rem) | mbar ~
   Dir(mbar_.1, ..., mbar_.K, gamma)`` (Teh et al. 2006 eq. 37; Fox et al. eq. 36) and the rows
   ``pi_j ~ Dir(alpha beta + kappa e_j + n_j.)``, start row ``Dir(alpha beta + n_0.)`` over
   (slots, rest) (Fox et al. eq. 37): the global step shared by every explicit-``beta`` sampler,
   :func:`numpyro_hdphmm._core.crp.sample_global`.

Steps 1-3 are Gibbs updates of the slice-augmented model (``u`` and the extra sticks are
auxiliary); step 4 is a change of representation (it marginalizes the unused atoms); steps 5-6
draw ``(theta, tables, hyperparameters, beta)`` and then the rows from their conditionals
given the states.  Then the base class's inner kernel (NUTS) updates every other latent site.

The slice pieces (steps 1-3) live in :mod:`numpyro_hdphmm._core.slices`: the FFBS there runs a
rescaled pass and, only when it underflows, redoes it in log space, so it is exact for any spread
of the log-likelihoods (with 0/1 transitions the rescaled pass of
:func:`~numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast` underflows whenever the best reachable
state is ~44 nats (float32) worse than the best instantiated one, common away from the mode).
The algorithm's state is :class:`~numpyro_hdphmm.infer.contract.Explicit`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.slices import draw_slices, extend_sticks, slice_ffbs
from numpyro_hdphmm._core.slots import compact_states, used_slots
from numpyro_hdphmm.emissions.base import OneHot
from numpyro_hdphmm.infer.contract import Algorithm, Explicit, flatten_time
from numpyro_hdphmm.infer.moves.global_step import explicit_given_states
from numpyro_hdphmm.infer.plumbing.adapter import HDPKernel
from numpyro_hdphmm.infer.plumbing.discovery import ModelSpec, ModelView
from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences, sequence_keys
from numpyro_hdphmm.infer.moves.slds import slds_sweep
from numpyro_hdphmm.infer.moves.split_merge import check_split_merge, split_merge_explicit

__all__ = ["compacted_start", "BeamSampler", "Beam", "BeamInfo", "drop_unused"]


class BeamInfo(NamedTuple):
    """Per-sweep diagnostics of the beam sampler: ``overflow`` (the capacity ran out while the
    slices needed more states; the sweep continued truncated), ``num_instantiated`` (states the
    FFBS ran over, after the stick extension), ``ffbs_ok`` (False when some sequence's forward
    pass found no admissible path and kept its states), ``split_merge_accept`` (the fraction
    of the sweep's split-merge moves accepted; NaN without them) and ``fresh_used`` (the FFBS put
    some step in the state that this sweep's stick extension instantiated last, the one with the
    smallest stick: with ``overflow``, the sign that the states left out at the capacity were
    plausibly needed; see :attr:`BeamSampler.overflow_by_rate`)."""

    overflow: jax.Array
    num_instantiated: jax.Array
    ffbs_ok: jax.Array
    split_merge_accept: jax.Array
    fresh_used: jax.Array


def drop_unused(states, weights, params, emission, lengths):
    """Step 4: the unused states are dropped (``weights (K,)`` set to 0 there).

    Families whose parameters the kernel owns are relabelled by first appearance
    (:func:`~numpyro_hdphmm._core.slots.compact_states`), parameters and weights permuted along.
    Emissions whose parameters are the user's sites (custom emissions) cannot be permuted: their
    states keep their slots (every step is label-equivariant, so the chain is the same up to
    labels; a free slot's parameters are the user's current values, which the inner kernel keeps
    distributed as the prior given that no step uses them).
    Returns ``(states, weights, params, num_used)``."""
    capacity = weights.shape[0]
    if emission.owns_parameters:
        states, old_of_new, num_used = compact_states(states, lengths, capacity)
        keep = jnp.arange(capacity) < num_used
        weights = jnp.where(keep, weights[old_of_new], 0.0)
        params = jax.tree_util.tree_map(lambda p: p[old_of_new], params)
        return states, weights, params, num_used
    keep = used_slots(states, lengths, capacity)
    return states, jnp.where(keep, weights, 0.0), params, jnp.sum(keep).astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=4)
def _initial_values(rng_key, states, params, view: ModelView, capacity: int):
    """A valid starting point given initial states ``(N, T)``: the states compacted, ``beta``
    the mean of ``Dir(1, ..., 1, gamma)`` over (used states, rest), the rows the means of their
    conditionals ``Dir(alpha beta + kappa e_j + n_j.)`` (so every transition of the initial
    path has positive probability) and the emission parameters drawn from their conditionals.
    Cheap on purpose (it is compiled once per model at ``init``)."""
    gamma, alpha, kappa = view.hyper
    data = view.data
    dtype = jnp.result_type(alpha, float)
    states, _, params, num_used = drop_unused(states, jnp.ones((capacity,), dtype), params, view.emission, data.lengths)
    params, _ = view.emission.update_parameters(rng_key, flatten_time(data.x), OneHot.of_states(states, data.valid, capacity),
                                                params)
    total = num_used + gamma
    head = jnp.where(used_slots(states, data.lengths, capacity), 1.0 / total, 0.0)
    beta = jnp.concatenate([head, (gamma / total)[None]]).astype(dtype)
    n, first = crp.transition_counts(states, capacity, data.lengths)
    conc = crp.row_concentrations(beta, alpha, kappa, n, first)
    trans = conc / jnp.sum(conc, -1, keepdims=True)
    return states, beta, trans, params


def _slice_ffbs_rows(emission):
    """The per-sequence half of step 3 for :func:`~numpyro_hdphmm.infer.plumbing.sharding.map_sequences`:
    ``((keys (n,), x (n, T, ...), log_u (n, T), valid (n, T), lengths (n,)), (log_pi (K+1, K+1),
    inst (K,), params)) -> (states (n, T), ok (n,))``, each sequence's ``(T, K)`` log-likelihoods
    and :func:`~numpyro_hdphmm._core.slices.slice_ffbs` with its own key, so the draws do not
    depend on how the sequences are split over devices."""

    def ffbs(rows, shared):
        keys, x, log_u, valid, lengths = rows
        log_pi, inst, params = shared
        log_lik = jax.vmap(emission.log_likelihoods, in_axes=(0, None))(x, params)

        def one(key, ll, lu, m, n):
            states, _, ok = slice_ffbs(key, log_pi, lu[None], inst, ll[None], m[None], n[None])
            return states[0], ok[0]

        return jax.vmap(one)(keys, log_lik, log_u, valid, lengths)

    return ffbs


def compacted_start(rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> Explicit:
    """The starting point of the kernels that keep only the used states instantiated (beam, PGAS): the
    compacted starting states, ``beta`` and rows at conditional means given them and the emission
    parameters drawn from their conditionals (:func:`_initial_values`)."""
    prior_free = view._replace(priors=crp.HyperPriors(), dp_concentration_prior=None)
    states, beta, trans, params = _initial_values(rng_key, start.states, start.params, prior_free, spec.capacity)
    return start._replace(states=states, beta=beta, trans=trans, params=params)


class Beam(Algorithm):
    """Van Gael et al.'s beam sampler with Fox et al.'s sticky prior on the contract of
    :mod:`numpyro_hdphmm.infer.plumbing.adapter` (module docstring).

    ``sharding`` (:class:`~numpyro_hdphmm.infer.plumbing.sharding.SequenceSharding`): where step 3 runs
    (default unsharded)."""

    def __init__(self, split_merge: int = 0, sharding: Optional[SequenceSharding] = None):
        self.split_merge = check_split_merge(split_merge)
        self.sharding = SequenceSharding() if sharding is None else sharding

    name = "BeamSampler"
    model_classes = ("hmm", "slds")
    owns_column_precision = True
    Info = BeamInfo
    describe = {
        "beta": "stick extension, then Dirichlet over (instantiated, rest) given the informative tables (Teh et al. eq. 37)",
        "trans": "stick extension, then Dirichlet rows given the counts (Fox et al. eq. 37)",
        "states": "slice sampling and FFBS over the instantiated states (Van Gael et al. 2008, Sec. 3)",
        "params": "conjugate posterior given the states; new states from the prior",
        "slds:states": "slice sampling and FFBS over the instantiated modes given the latent path (the HDP-AR-HMM of x)",
        "slds:params": "MNIW conditional of the dynamics given the modes and the latent path; new modes from the prior",
        "slds:latent": "Kalman filter and backward sampler given the modes and the parameters (moves.slds)",
        "slds:observation": "conjugate update of C, R given the latent path (missing values imputed; moves.slds)",
    }

    def init(self, rng_key, spec: ModelSpec, view: ModelView, start: Explicit) -> Explicit:
        """:func:`compacted_start`."""
        return compacted_start(rng_key, spec, view, start)

    def step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """One beam-sampler sweep (steps 1-6 of the module docstring; for an HDP-SLDS on the latent
        path, then the latent path and the observation parameters, :mod:`numpyro_hdphmm.infer.moves.slds`):
        ``(Explicit, BeamInfo)``."""
        if spec.sites.kind == "slds":
            return slds_sweep(self._hmm_step, rng_key, state, spec, view)
        return self._hmm_step(rng_key, state, spec, view)

    def _hmm_step(self, rng_key, state: Explicit, spec: ModelSpec, view: ModelView):
        """Steps 0-6 of the module docstring on ``view.data`` (for an HDP-SLDS: the latent path)."""
        capacity = spec.capacity
        data = view.data
        gamma, alpha, kappa = view.hyper
        k_u, k_ext, k_prior, k_z, k_theta, k_global = random.split(rng_key, 6)
        # 0. split-merge moves on the collapsed seating, then the rows given the moved states
        state, split_merge_accept, split_overflow = split_merge_explicit(rng_key, state, view, self.split_merge,
                                                                         self.name, weak_limit=False)
        inst = used_slots(state.states, data.lengths, capacity) | (state.beta[:capacity] > 0)
        # 1. slices
        log_u = draw_slices(k_u, state.states, state.trans, data.lengths)
        # 2. stick extension up to the capacity
        prior_params = view.emission.sample_parameters(k_prior, (capacity,))
        prior_params = {p: prior_params[p] for p in state.params}
        inst_before = inst
        inst, beta, trans, params, overflow = extend_sticks(
            k_ext, inst, state.beta, state.trans, state.params, prior_params, log_u, gamma, alpha, kappa)
        # 3. FFBS over the instantiated states with 0/1 transitions 1[pi > u_t]
        # (each sequence with its own key, split over the devices of ``self.sharding``)
        rows = (sequence_keys(k_z, data.lengths.shape[0]), data.x, log_u, data.valid, data.lengths)
        new_states, ok = map_sequences(_slice_ffbs_rows(view.emission), rows, (jnp.log(trans), inst, params),
                                       self.sharding)
        states = jnp.where(ok[:, None], new_states, state.states)
        # the state the stick extension instantiated last (the smallest stick, next to those it left out at
        # the capacity) holds some step
        fresh = inst & ~inst_before
        last = jnp.argmax(jnp.where(fresh, jnp.arange(capacity), -1))
        fresh_used = jnp.any(fresh) & used_slots(states, data.lengths, capacity)[last]
        # 4. compaction: unused states' mass joins the remainder
        states, head, params, _ = drop_unused(states, beta[:capacity], params, view.emission, data.lengths)
        beta = jnp.concatenate([head, jnp.maximum(1.0 - jnp.sum(head), 0.0)[None]])
        # 5-6. emission parameters (free slots: no data, a draw from the prior); tables, hyperparameters, beta, rows
        explicit = explicit_given_states(k_theta, k_global, spec, view, states, beta, params, weak_limit=False)
        info = BeamInfo(overflow=overflow | split_overflow, num_instantiated=jnp.sum(inst).astype(jnp.int32),
                        ffbs_ok=jnp.all(ok), split_merge_accept=split_merge_accept, fresh_used=fresh_used)
        return explicit, info


class BeamSampler(HDPKernel):
    r"""Beam sampler of the infinite (sticky) HDP-HMM (Van Gael et al. 2008, with Fox et al.'s
    sticky prior).

    Samples the model as written (``{name}_beta ~ GEM(gamma)``): ``max_states`` is a capacity,
    the sweep instantiates as many states as the slice variables require (see the module
    docstring) and reports ``num_states`` (states in use) and ``overflow`` (the capacity was
    reached while more states were needed; the sweep then continued truncated, so increase
    ``max_states``).  The capacity must hold the instantiated states, not only the used ones:
    a slice under a small transition probability reaches deep into the stick, so a sweep can
    instantiate several times the states in use (``gamma, alpha, kappa = 3, 2, 1.5`` on a
    5-step sequence overflows capacity 8 in most sweeps, a bias a 4000-chain test sees;
    docs/rcd.md).  Every emission family and several sequences (``obs (N, T, ...)`` with
    ``lengths``) are supported.  Hyperparameter sites with the priors of
    :mod:`numpyro_hdphmm._core.crp` get exact updates; every other latent site is updated by
    ``inner_kernel`` (NUTS by default).

    Emissions given as a callable over the user's own sample sites
    (:class:`~numpyro_hdphmm.emissions.CustomEmission`) are supported without relabelling: the
    states keep their slots, the FFBS uses the ``(T, K)`` log-likelihood matrix of the user's
    current parameters, a new state takes the current parameter values of its (free) slot, which
    are a draw from the prior at stationarity, and the inner kernel (NUTS) updates the user's
    parameter sites given the states after every sweep (the uncollapsed emission step; Fox et al.
    eq. 42 without conjugacy).

    Owned values between sweeps: used states are ``0..k-1`` in order of first appearance
    (custom emissions: the slots they occupy); free slots have ``beta = 0``, rows and emission
    parameters drawn from the prior.  The initial values are the compacted initial states (the
    model's prior draw or ``init_params``), ``beta`` and rows at conditional means given them and
    emission parameters drawn from their conditionals.  Collected diagnostics: :class:`BeamInfo`.

    ``split_merge=n`` adds ``n`` split-merge moves at the start of every sweep (the collapsed
    moves of :mod:`numpyro_hdphmm.infer.moves.split_merge`, shared with ``RCDSampler`` and
    ``DirectAssignmentGibbs``: tables drawn given ``beta``, the moves with the rows and the
    emission parameters integrated out, ``beta`` given the tables, then the emission parameters
    and the rows given the moved states), so that duplicate states can merge in one move; their
    acceptance rate is ``BeamInfo.split_merge_accept``.  It needs a family with collapsed
    statistics (every conjugate family).

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param mesh: a :class:`jax.sharding.Mesh` to split the sequences over (``None``, the default:
        unsharded): each device computes the log-likelihoods and the slice FFBS of its block of
        sequences, the rest of the sweep is global (:mod:`numpyro_hdphmm.infer.plumbing.sharding`,
        ``docs/scaling.md``); the draws are those of the unsharded kernel for the same key.
    :param sequence_axes: the mesh axes the sequences are split over (default: all of them but
        ``chain_axis``).
    :param chain_axis: a mesh axis to split vectorized chains over (``MCMC(..., num_chains=C,
        chain_method="vectorized")``, ``C`` a multiple of its size): chains x sequences on one mesh
        (``docs/scaling.md``).  Default: none (each device runs its sequences of every chain).
    :param split_merge: split-merge moves per sweep (0: none).
    """

    algorithm = Beam()

    def __init__(self, model, split_merge: int = 0, *, mesh=None, sequence_axes=None, chain_axis=None, **options):
        sharding = SequenceSharding.from_arguments(mesh, sequence_axes, chain_axis)
        super().__init__(model, Beam(split_merge, sharding), **options)

    #: Warn of overflows only when the states left out at the capacity were plausibly needed.
    #:
    #: An overflow means the stick extension stopped at ``max_states`` while some remainder
    #: ``pi_{j,rem}`` still exceeded a slice: the exact sweep would have instantiated more states
    #: (fresh prior draws of ``theta``, with ever smaller sticks) and offered them to the FFBS as
    #: well.  The truncated sweep's draw differs from the exact one only when the FFBS would have
    #: put some step in one of them.  The state the extension instantiated last is the closest
    #: to them: a prior draw of ``theta`` like them, with the smallest stick instantiated.  When
    #: the FFBS leaves it empty, the left-out states (a priori exchangeable with it, with smaller
    #: sticks still) would most likely have stayed empty as well, and the draw is the exact
    #: sweep's.  When it uses it (``BeamInfo.fresh_used``), or every slot is in use, the
    #: truncation plausibly changed the draw; the kernel warns once such sweeps reach
    #: :data:`~numpyro_hdphmm.infer.plumbing.reporting.OVERFLOW_RATE` (1%) of the sweeps after warmup, the bias
    #: then being of that order.  Every overflow stays recorded in the ``overflow`` field
    #: (docs/warnings.md).
    overflow_by_rate = True
