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
   number ``k`` of instantiated states (compiled for a few sizes, :func:`ffbs_sizes`), not in
   the capacity;
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
   (slots, rest) (Fox et al. eq. 37).

Steps 1-3 are Gibbs updates of the slice-augmented model (``u`` and the extra sticks are
auxiliary); step 4 is a change of representation (it marginalizes the unused atoms); steps 5-6
draw ``(theta, tables, hyperparameters, beta)`` and then the rows from their conditionals
given the states.  Then the base class's inner kernel (NUTS) updates every other latent site.

The FFBS is written here rather than taken from :mod:`numpyro_hdphmm._core.hmm`: with 0/1
transitions the rescaled pass of :func:`~numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast`
exponentiates the emissions before it knows which states are reachable and underflows (and
then refuses the draw) whenever the best reachable state is ~44 nats (float32) worse than the
best instantiated one, which is common away from the posterior mode; the pass here runs the same
rescaled recursion and, only when it underflows, redoes it in log space (filtered values carried
as logs, exact for any spread of the likelihoods and of the filtered probabilities), builds
``1[pi > u_t]`` inside the scan (no ``(T, K, K)`` tensor) and is tested against the core routines.
"""

from __future__ import annotations

import functools
import operator
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from numpyro_hdphmm._core import crp
from numpyro_hdphmm._core.hmm import _padded_size
from numpyro_hdphmm.distributions import GEM
from numpyro_hdphmm.emissions.base import state_weights
from numpyro_hdphmm.infer.base import HDPKernel, HDPState, ModelView, canonical_order, flatten_time, row_concentrations

__all__ = ["BeamSampler", "BeamInfo", "beam_sweep", "slice_ffbs", "ffbs_sizes", "compact_states"]


class BeamInfo(NamedTuple):
    """Per-sweep statistics of the beam sampler (kept in ``HDPState.aux``):
    ``num_instantiated`` states the FFBS ran over (after the stick extension) and ``ffbs_ok``
    (False when some sequence's forward pass found no admissible path and kept its states)."""

    num_instantiated: jax.Array
    ffbs_ok: jax.Array


def log_gamma_variates(rng_key, shape_param):
    r"""``log G`` with ``G ~ Gamma(a, 1)`` elementwise, ``a > 0`` of any shape.

    Marsaglia & Tsang (2000), "A simple method for generating gamma variables", ACM TOMS 26(3):
    with ``d = a - 1/3``, ``c = 1/sqrt(9 d)``, ``x ~ N(0, 1)``, ``v = (1 + c x)^3``, accept ``d v``
    when ``v > 0`` and ``log U < x^2/2 + d - d v + d log v``; for ``a < 1`` the boost
    ``G = G' U^{1/a}``, ``G' ~ Gamma(a + 1)`` (their Sec. 6), applied in log space so that tiny
    ``a`` (``1e-30``) gives finite logs.  Exact.  The rejection rounds run over the whole array
    at once (each round redraws every still-rejected entry; acceptance >= 95% per entry), which
    on CPU is several times faster than :func:`jax.random.loggamma`'s per-element loops (the
    sweep draws ``(K+1)^2`` variates for the rows alone).
    """
    a = jnp.asarray(shape_param)
    dtype = a.dtype
    tiny = jnp.finfo(dtype).tiny
    k_boost, k_loop = random.split(rng_key)
    boost = a < 1.0
    a1 = jnp.where(boost, a + 1.0, a)
    d = a1 - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)

    def cond(carry):
        return ~jnp.all(carry[1])

    def body(carry):
        value, done, i = carry
        k_n, k_u = random.split(random.fold_in(k_loop, i))
        x = random.normal(k_n, a.shape, dtype)
        log_u = jnp.log(random.uniform(k_u, a.shape, dtype, minval=tiny))
        v = (1.0 + c * x) ** 3
        log_v = jnp.log(jnp.where(v > 0, v, 1.0))
        accept = (v > 0) & (log_u < 0.5 * x * x + d - d * v + d * log_v)
        value = jnp.where(done, value, jnp.log(d) + log_v)
        return value, done | accept, i + 1

    value, _, _ = lax.while_loop(cond, body, (jnp.zeros(a.shape, dtype), jnp.zeros(a.shape, bool), 0))
    log_u = jnp.log(random.uniform(k_boost, a.shape, dtype, minval=tiny))
    return jnp.where(boost, value + log_u / jnp.where(boost, a, 1.0), value)


def _dirichlet(rng_key, concentration):
    """Dirichlet draws along the last axis (zero concentration: a point mass at 0), from
    :func:`log_gamma_variates`; same contract as :func:`numpyro_hdphmm.distributions.sample_dirichlet`."""
    positive = concentration > 0
    log_g = jnp.where(positive, log_gamma_variates(rng_key, jnp.where(positive, concentration, 1.0)), -jnp.inf)
    return jnp.exp(log_g - jax.nn.logsumexp(log_g, -1, keepdims=True))


# ------------------------------------------------------------------------------------ slices
def draw_slices(rng_key, states, trans, lengths):
    """``log u_t``, ``u_t ~ U(0, pi_{z_{t-1} z_t})`` (start row for ``t = 0``): ``(N, T)``.

    Drawn as ``log pi + log U`` with ``U`` uniform on ``[tiny, 1)``, so that ``u_t < pi`` holds
    strictly (the current path stays admissible) and nothing underflows.  Padded steps get
    ``+inf`` (they constrain nothing)."""
    num_states = trans.shape[0] - 1
    num_seq, num_steps = states.shape
    dtype = trans.dtype
    prev = jnp.concatenate([jnp.full((num_seq, 1), num_states, states.dtype), states[:, :-1]], 1)
    log_path = jnp.log(trans[prev, states])
    log_unif = jnp.log(random.uniform(rng_key, (num_seq, num_steps), dtype, minval=jnp.finfo(dtype).tiny))
    valid = jnp.arange(num_steps) < lengths[:, None]
    return jnp.where(valid, log_path + log_unif, jnp.inf)


# ------------------------------------------------------------------------- stick extension
class _Extension(NamedTuple):
    inst: jax.Array
    beta: jax.Array
    trans: jax.Array
    params: dict
    count: jax.Array


def extend_sticks(rng_key, inst, beta, trans, params, prior_params, log_u, gamma, alpha, kappa):
    r"""Instantiate states until no remainder can pass a slice (step 2 of the module docstring).

    ``inst (K,)`` instantiated slots, ``beta (K+1,)``, ``trans (K+1, K+1)`` (start row last,
    remainder column last), ``params`` (leading axis ``K``), ``prior_params`` fresh draws from
    ``H`` for every slot, ``log_u (N, T)`` from :func:`draw_slices`.  A new state goes to the
    first free slot.  Returns ``(inst, beta, trans, params, overflow)``; ``overflow`` is True
    when the capacity ran out while a remainder still exceeded a slice.
    """
    num_states = beta.shape[0] - 1
    dtype = beta.dtype
    slot = jnp.arange(num_states)
    log_u_start = jnp.min(log_u[:, 0])
    log_u_trans = jnp.min(log_u[:, 1:]) if log_u.shape[1] > 1 else jnp.asarray(jnp.inf, dtype)

    def needed(ext: _Extension):
        log_rem = jnp.log(ext.trans[:, num_states])
        rows = jnp.any(ext.inst & (log_rem[:num_states] > log_u_trans))
        return rows | (log_rem[num_states] > log_u_start)

    def cond(ext: _Extension):
        return needed(ext) & jnp.any(~ext.inst)

    def body(ext: _Extension):
        key = random.fold_in(rng_key, ext.count)
        k_b, k_g = random.split(key)
        k = jnp.argmax(~ext.inst)  # first free slot
        rem = ext.beta[num_states]
        # b ~ Beta(1, gamma): 1 - b = U^{1/gamma}
        log_1mb = jnp.log(random.uniform(k_b, (), dtype, minval=jnp.finfo(dtype).tiny)) / gamma
        beta_k = rem * -jnp.expm1(log_1mb)
        rem_new = rem * jnp.exp(log_1mb)
        beta = ext.beta.at[k].set(beta_k).at[num_states].set(rem_new)
        inst = ext.inst.at[k].set(True)
        rows = jnp.concatenate([ext.inst, jnp.ones((1,), bool)])  # instantiated rows and the start row
        # one batch of Gamma variates: v_j ~ Beta(alpha beta_k, alpha beta_rem_new) for the row splits
        # (no kappa: j != k) and the new row ~ Dir(alpha beta + kappa e_k) over (slots, rest)
        row_conc = alpha * jnp.where(jnp.concatenate([inst, jnp.ones((1,), bool)]), beta, 0.0)
        row_conc = row_conc + kappa * (jnp.arange(num_states + 1) == k).astype(dtype)
        conc = jnp.stack([jnp.broadcast_to(alpha * beta_k, row_conc.shape),
                          jnp.broadcast_to(alpha * rem_new, row_conc.shape), row_conc])
        positive = conc > 0
        log_g = jnp.where(positive, log_gamma_variates(k_g, jnp.where(positive, conc, 1.0)), -jnp.inf)
        log_vsum = jnp.logaddexp(log_g[0], log_g[1])
        rem_col = ext.trans[:, num_states]
        trans = ext.trans.at[:, k].set(jnp.where(rows, rem_col * jnp.exp(log_g[0] - log_vsum), ext.trans[:, k]))
        trans = trans.at[:, num_states].set(jnp.where(rows, rem_col * jnp.exp(log_g[1] - log_vsum), rem_col))
        trans = trans.at[k].set(jnp.exp(log_g[2] - jax.nn.logsumexp(log_g[2])))
        params = jax.tree_util.tree_map(lambda p, q: jnp.where((slot == k).reshape((-1,) + (1,) * (p.ndim - 1)), q, p),
                                        ext.params, prior_params)
        return _Extension(inst, beta, trans, params, ext.count + 1)

    ext = lax.while_loop(cond, body, _Extension(inst, beta, trans, params, jnp.zeros((), jnp.int32)))
    return ext.inst, ext.beta, ext.trans, ext.params, needed(ext)


# ------------------------------------------------------------------------------------ FFBS
# XLA:CPU inside a loop (measured, jax 0.10): a reduction over more than 32 entries is not fused
# with the ops producing its input (they are materialized first), and under vmap one with
# >= 4096 entries becomes a library call; both cost 3-5x.  The helpers below keep every
# reduction at <= 32 entries (and 8 rows at a time) by summing blocks of 8 elementwise.
def _block_sum(x):
    """Sum over the last axis (length ``<= 16`` or a multiple of 8); every reduction <= 8 wide
    except the last (<= 16 or <= 32 for up to 256 entries)."""
    n = x.shape[-1]
    if n <= 16:
        return jnp.sum(x, -1)
    return jnp.sum(functools.reduce(operator.add, [x[..., i:i + 8] for i in range(0, n, 8)]), -1)


def _block_max(x):
    n = x.shape[-1]
    if n <= 16:
        return jnp.max(x, -1)
    return jnp.max(functools.reduce(jnp.maximum, [x[..., i:i + 8] for i in range(0, n, 8)]), -1)


def _inverse_cdf(weights, u):
    """Index drawn with probabilities proportional to ``weights >= 0`` (``u`` uniform on
    ``(0, 1]``), ``#{k : cs_k < u cs_last}`` with ``cs`` the cumulative sums; zero-weight
    entries are never chosen (their cumulative sum equals the previous one bitwise).  For more
    than 16 weights (a multiple of 8) the cumulative sums are two-level: within blocks of 8,
    plus the sum of the earlier blocks' totals, each sum taken in index order."""
    n = weights.shape[-1]
    if n <= 16:
        cs = jnp.cumsum(weights)
    else:
        blocks = weights.reshape(n // 8, 8)
        within = jnp.sum(jnp.where(_upper(8, True)[None], blocks[:, :, None], 0.0), 1)  # (n/8, 8)
        before = jnp.sum(jnp.where(_upper(n // 8, False), within[:, -1][:, None], 0.0), 0)  # (n/8,)
        cs = (before[:, None] + within).reshape(n)
    return jnp.minimum(_block_sum((cs < u * cs[-1]).astype(jnp.int32)), n - 1).astype(jnp.int32)


def _upper(n, inclusive):
    """``(n, n)`` constant ``1[i <= j]`` (``inclusive``) or ``1[i < j]``."""
    return np.triu(np.ones((n, n), bool), 0 if inclusive else 1)


def _reachable_mass(log_pi_kk, log_u_t, a_prev):
    """``sum_i a_prev(i) 1[log pi_ij > log u_t]`` for every ``j``: the forward step's mass that
    can reach ``j`` (Van Gael et al. Sec. 3), over blocks of 8 rows (see above)."""
    num = log_pi_kk.shape[0]
    if num <= 16:
        return jnp.sum(jnp.where(log_pi_kk > log_u_t, a_prev[:, None], 0.0), 0)
    parts = [jnp.sum(jnp.where(log_pi_kk[i:i + 8] > log_u_t, a_prev[i:i + 8, None], 0.0), 0)
             for i in range(0, num, 8)]
    return functools.reduce(operator.add, parts)


def _slice_ffbs_single(size, key, log_pi, log_u, inst, log_lik, obs, length):
    """One sequence of :func:`slice_ffbs` over the slots ``0..size-1`` (static ``size``: every
    instantiated slot is below it; beyond the capacity, zero-mass padding states that are never
    reachable nor drawn)."""
    num_steps, num_states = log_lik.shape
    dtype = log_lik.dtype
    steps = jnp.arange(num_steps)
    valid = steps < length
    last = length - 1
    k8 = size
    used = min(size, num_states)
    pad = k8 - used
    # masked emissions: dropped or padded steps emit nothing, free and padding slots have
    # log-likelihood -inf.  The fast pass exponentiates them in one (T, K) array; the exact
    # pass (rarely run) masks each step's row itself rather than keeping a second (T, K) array
    ll = log_lik[:, :used]
    emits = obs & valid
    free = ~inst[:used]

    def masked_row(emit_t, ll_t):
        return jnp.pad(jnp.where(free, -jnp.inf, jnp.where(emit_t, ll_t, 0.0)), (0, pad), constant_values=-jnp.inf)

    trans_kk = jnp.pad(log_pi[:used, :used], ((0, pad), (0, pad)), constant_values=-jnp.inf)
    start = jnp.pad(log_pi[num_states, :used], (0, pad), constant_values=-jnp.inf)
    # padded steps allow every transition: their filtered values are never read
    lu = jnp.where(valid, log_u, -jnp.inf)
    reach0 = (start > lu[0]).astype(dtype)

    # Fast pass: alpha_t(j) ∝ e_t(j) sum_i alpha_{t-1}(i) 1[pi_ij > u_t] (Van Gael et al. Sec. 3)
    # with the emissions exponentiated once, relative to the best instantiated state at t
    # (Rabiner (1989) Sec. V.A scaling).  Exact unless a step's normalizer falls below
    # sqrt(tiny), i.e. every reachable state fits ~44 nats (float32) worse than the best one.
    top = jnp.max(jnp.where(free, -jnp.inf, ll), -1)
    top = jnp.where(emits & jnp.isfinite(top), top, 0.0)
    em = jnp.where(free, 0.0, jnp.where(emits[:, None], jnp.exp(ll - top[:, None]), 1.0))
    em = jnp.pad(em, ((0, 0), (0, pad)))

    # every step in one scan (step 0 reaches through the start row): no (T, K) concatenation
    def forward_fast(a_prev, inp):
        t, lu_t, em_t = inp
        b = jnp.where(t == 0, reach0, _reachable_mass(trans_kk, lu_t, a_prev)) * em_t
        c = _block_sum(b)
        a = b / c
        return a, (a, c)

    _, (filtered, cs) = lax.scan(forward_fast, jnp.zeros((k8,), dtype), (steps, lu, em))
    log_c = jnp.log(cs) + top
    redo = jnp.any(valid & ~(cs >= jnp.sqrt(jnp.finfo(dtype).tiny)))

    def forward_exact(carry):
        # the same recursion in LOG space (the filtered values are carried as logs): no
        # normalizer can underflow, however much better an unreachable state fits, and a
        # predecessor whose filtered probability is far below float32's range (e^-100 of the
        # best) keeps its mass, which a later step may need (an outlier that only its successor
        # fits: the probability-space recursion flushes it to zero and loses the good path).
        # Reading the loop-variant flag (into the (T,) slices, not a (T, K) copy) keeps XLA
        # from hoisting this pass out of the (at most one-trip) loop below.
        lu_x = jnp.where(carry[2], lu, jnp.inf)
        log_reach0 = jnp.where(start > lu_x[0], 0.0, -jnp.inf).astype(dtype)

        def step(log_a_prev, inp):
            t, lu_t, emit_t, ll_t = inp
            # log sum_i a_{t-1}(i) 1[pi_ij > u_t], each column shifted by its own maximum
            scores = jnp.where(trans_t > lu_t, log_a_prev[None, :], -jnp.inf)  # (j, i)
            top_j = _block_max(scores)
            shift = jnp.where(jnp.isfinite(top_j), top_j, 0.0)
            log_reach = jnp.log(_block_sum(jnp.exp(scores - shift[:, None]))) + shift
            log_b = jnp.where(t == 0, log_reach0, log_reach) + masked_row(emit_t, ll_t)
            m = _block_max(log_b)
            m = jnp.where(jnp.isfinite(m), m, 0.0)
            log_c = jnp.log(_block_sum(jnp.exp(log_b - m))) + m
            log_a = log_b - jnp.where(jnp.isfinite(log_c), log_c, 0.0)
            return log_a, (log_a, log_c)

        _, (log_filtered, log_cs) = lax.scan(step, jnp.full((k8,), -jnp.inf, dtype), (steps, lu_x, emits, ll))
        return log_filtered, log_cs, jnp.zeros((), bool)

    trans_t = trans_kk.T
    # a while loop rather than lax.cond: under vmap (vectorized chains) a cond becomes a select
    # that always runs both passes, a loop runs the exact pass only when some chain needs it.
    # After it, ``filtered`` holds probabilities (fast pass) or log-probabilities (exact pass).
    filtered, log_c, _ = lax.while_loop(lambda carry: carry[2], forward_exact, (filtered, log_c, redo))
    log_norm = jnp.where(valid, log_c, 0.0)

    # backward sampling: p(z_t = i | z_{t+1} = j, ...) ∝ alpha_t(i) 1[pi_ij > u_{t+1}]; the carry
    # passes u_{t+1} down (no shifted (T,) copy) and checks that every drawn state had positive
    # weight (filtered mass, which includes the admissibility of its own slice, and an
    # admissible transition into the next state)
    unif = 1.0 - random.uniform(key, (num_steps,), dtype)  # (0, 1]

    def backward_step(weights, lu_b):
        def backward(carry, inp):
            z_next, lu_next, good = carry
            t, f_t, lu_t, u = inp
            w = weights(f_t, (t < last) & (trans_t[z_next] <= lu_next))
            z = _inverse_cdf(w, u)
            return (z, lu_t, good & ((w[z] > 0) | (t > last))), z

        init = (jnp.zeros((), jnp.int32), jnp.asarray(-jnp.inf, dtype), jnp.ones((), bool))
        (_, _, good), zs = lax.scan(backward, init, (steps, filtered, lu_b, unif), reverse=True)
        return zs, good

    def log_weights(log_f_t, blocked):
        # log filtered values: exponentiated relative to the best admissible predecessor
        masked = jnp.where(blocked, -jnp.inf, log_f_t)
        top = _block_max(masked)
        return jnp.exp(masked - jnp.where(jnp.isfinite(top), top, 0.0))

    zs, good = backward_step(lambda f_t, blocked: jnp.where(blocked, 0.0, f_t), lu)
    # after the exact pass: the same draw from the log values (a one-trip loop as above; the
    # slices read through the loop-variant flag keep XLA from hoisting it out of the loop)
    zs, good, _ = lax.while_loop(
        lambda c: c[2], lambda c: (*backward_step(log_weights, jnp.where(c[2], lu, jnp.inf)), jnp.zeros((), bool)),
        (zs, good, redo))
    ok = jnp.all(jnp.isfinite(log_norm)) & good
    states = jnp.where(valid, zs, zs[jnp.maximum(last, 0)])
    return states, jnp.sum(log_norm), ok


def slice_ffbs(rng_key, log_pi, log_u, inst, log_lik, obs, lengths):
    r"""Forward filtering, backward sampling under the slice constraints (Van Gael et al. Sec. 3).

    ``log_pi (K+1, K+1)`` log transition matrix (start row last, remainder column ignored),
    ``log_u (N, T)`` log slices, ``inst (K,)`` instantiated states, ``log_lik (N, T, K)``,
    ``obs (N, T)`` (False: emission dropped), ``lengths (N,)`` (steps ``t >= length`` are
    padding: no transition, no emission; their states copy the last valid one).

    The transition into step ``t`` is ``1[log pi_ij > log u_t]``, built inside the scan.  The
    forward pass keeps ``alpha_t`` normalized in probability space (Rabiner (1989) Sec. V.A
    scaling); each step sums the reachable mass and multiplies by the emissions, exponentiated
    once outside the loop relative to the best instantiated state of the step.  When some
    step's normalizer falls below ``sqrt(tiny)`` (every reachable state fits ~44 nats worse, in
    float32, than an unreachable one, or the only good successor comes from a state whose
    filtered probability has underflowed) the pass is redone in log space: the filtered values
    are carried as logs and each column of reachable mass is a log-sum-exp shifted by its own
    maximum, so log-likelihood spreads of any size (tested to 1e10 nats in float32 against a
    float64 reference) and filtered probabilities far below the float range are exact; backward
    sampling then reads the log values.  When the rescaled pass is kept, what it flushes is below
    ``sqrt(tiny)`` of each step's total.  The recursion runs over the
    smallest of :func:`ffbs_sizes` that holds every instantiated slot, so its cost is
    ``O(T k^2)`` in the number ``k`` of instantiated states whatever the capacity.
    Returns ``(states (N, T) int32, log_mass (N,), ok (N,))``: ``log_mass`` is the log of
    ``sum_z 1[u_0 < pi_{0 z_0}] prod_t 1[u_t < pi_{z_{t-1} z_t}] prod_t f(y_t | z_t)``; ``ok`` is
    False when a sequence has no admissible path left (its ``states`` are then meaningless).
    """
    sizes = ffbs_sizes(inst.shape[0])
    keys = random.split(rng_key, log_lik.shape[0])
    args = (keys, log_pi, log_u, inst, log_lik, obs, lengths)
    if len(sizes) == 1:
        return _slice_ffbs_sized(sizes[0], *args)
    top = jnp.max(jnp.where(inst, jnp.arange(1, inst.shape[0] + 1), 0))  # highest instantiated slot + 1
    bucket = jnp.minimum(jnp.searchsorted(jnp.asarray(sizes), top), len(sizes) - 1)
    return _bucketed_ffbs(sizes)(bucket, *args)


def ffbs_sizes(num_states: int):
    """The state dimensions the slice FFBS is compiled for at capacity ``num_states``: the padded
    capacity (:func:`~numpyro_hdphmm._core.hmm._padded_size`) and, above 16, also ``16, 32, 64, ...``
    below it.  A sweep runs the smallest one that holds every instantiated slot, so the dynamic
    programming costs ``O(T k^2)`` in the number ``k`` of instantiated states (within a factor
    4 of ``k^2``), not in the capacity."""
    full = _padded_size(num_states)
    sizes, size = [], 16
    while size < full:
        sizes.append(size)
        size *= 2
    return tuple(sizes) + (full,)


def _slice_ffbs_sized(size, keys, log_pi, log_u, inst, log_lik, obs, lengths):
    return jax.vmap(functools.partial(_slice_ffbs_single, size), in_axes=(0, None, 0, None, 0, 0, 0))(
        keys, log_pi, log_u, inst, log_lik, obs, lengths
    )


def _switch_ffbs(sizes, bucket, args):
    return lax.switch(bucket, [functools.partial(_slice_ffbs_sized, size) for size in sizes], *args)


@functools.lru_cache(maxsize=None)
def _bucketed_ffbs(sizes):
    """``(bucket, *args) -> _slice_ffbs_sized(sizes[bucket], *args)`` through a ``lax.switch``
    that stays a real branch under ``jax.vmap`` (vectorized chains): a vmapped ``switch`` on a
    batched index would run every size and select.  The batching rule runs every chain at the
    largest bucket any chain needs, which is exact for all of them (the extra slots are free:
    never reachable, never drawn).  Under nested ``vmap``s only the innermost gets the rule;
    the outer ones fall back to the select (still exact)."""

    @jax.custom_batching.custom_vmap
    def run(bucket, *args):
        return _switch_ffbs(sizes, bucket, args)

    @run.def_vmap
    def rule(axis_size, in_batched, bucket, *args):
        in_axes = [0 if batched else None for batched in in_batched[1:]]
        if in_batched[0]:
            bucket = jnp.max(bucket)
            out = jax.vmap(lambda *a: run(bucket, *a), in_axes=in_axes, axis_size=axis_size)(*args)
        else:
            out = jax.vmap(lambda *a: _switch_ffbs(sizes, bucket, a), in_axes=in_axes, axis_size=axis_size)(*args)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run


# ------------------------------------------------------------------------------ compaction
def compact_states(states, lengths, num_states: int):
    """Relabel the used states ``0..k-1`` by first appearance (sequence by sequence, in time).

    Returns ``(states, new_to_old (K,), num_used)``: ``new_to_old[i]`` is the old label of new
    label ``i`` (used states first, then the unused slots in their old order)."""
    valid = jnp.arange(states.shape[1]) < lengths[:, None]
    old_to_new, new_to_old = canonical_order(states.reshape(-1), valid.reshape(-1), num_states)
    num_used = jnp.sum(used_slots(states, lengths, num_states)).astype(jnp.int32)
    return old_to_new[states], new_to_old, num_used


def used_slots(states, lengths, num_states: int):
    """``(K,)``: which slots the states ``(N, T)`` use at a valid step (``t < length``)."""
    valid = jnp.arange(states.shape[1]) < lengths[:, None]
    return jnp.zeros((num_states,), bool).at[states.reshape(-1)].max(valid.reshape(-1))


def _drop_unused(states, weights, params, view: ModelView):
    """Step 4: the unused states are dropped (``weights (K,)`` set to 0 there).

    Families whose parameters the kernel owns are relabelled by first appearance
    (:func:`compact_states`), parameters and weights permuted along.  A
    :class:`~numpyro_hdphmm.emissions.CustomEmission` reads the user's own sample sites, which the
    kernel cannot permute: its states keep their slots (every step is label-equivariant, so the
    chain is the same up to labels; a free slot's parameters are the user's current values, which
    the inner kernel keeps distributed as the prior given that no step uses them).
    Returns ``(states, weights, params, num_used)``."""
    num_states = weights.shape[0]
    if view.emission.param_names:
        states, new_to_old, num_used = compact_states(states, view.lengths, num_states)
        keep = jnp.arange(num_states) < num_used
        weights = jnp.where(keep, weights[new_to_old], 0.0)
        params = jax.tree_util.tree_map(lambda p: p[new_to_old], params)
        return states, weights, params, num_used
    keep = used_slots(states, view.lengths, num_states)
    return states, jnp.where(keep, weights, 0.0), params, jnp.sum(keep).astype(jnp.int32)


def given_states(rng_key, states, beta, params, view: ModelView, hyper_update, concentration=None):
    """Steps 4-6 of the module docstring: compaction, emission parameters, tables,
    hyperparameters, ``beta`` and the rows given the states ``(N, T)``.  ``hyper_update(key,
    tables, n, first, mbar_dishes) -> (gamma, alpha, kappa, site_values)``; ``concentration``:
    ``(site, (shape, rate))`` of a recognized Gamma-prior site of the emission's own concentration
    (DP-mixture emissions), updated with the emission parameters, or ``None``.  Returns
    ``(states, beta, trans, params, site_values)``."""
    num_states = beta.shape[0] - 1
    dtype = beta.dtype
    k_theta, k_tables, k_hyper, k_beta, k_pi = random.split(rng_key, 5)
    # 4. compaction: unused states' mass joins the remainder
    states, head, params, _ = _drop_unused(states, beta[:num_states], params, view)
    beta = jnp.concatenate([head, jnp.maximum(1.0 - jnp.sum(head), 0.0)[None]])
    # 5. emission parameters (free slots: no data, a draw from the prior)
    weights = state_weights(states, view.valid, num_states, dtype=dtype)
    conc_prior = None if concentration is None else concentration[1]
    params, sigma = view.emission.update_parameters(
        k_theta, flatten_time(view.x), weights.reshape(-1, num_states), params, conc_prior
    )
    # 6. tables (rows integrated out), hyperparameters, beta, rows
    n, first = crp.transition_counts(states, num_states, view.lengths)
    tables = crp.sample_table_counts(k_tables, n, first, beta, view.alpha, view.kappa, states.size)
    mbar_dishes = jnp.sum(tables.mbar, 0)
    gamma, alpha, kappa, site_values = hyper_update(k_hyper, tables, n, first, mbar_dishes)
    if concentration is not None:
        site_values = {**site_values, concentration[0]: sigma}
    # (beta_1..K, beta_rem) | mbar ~ Dir(mbar_.1, ..., mbar_.K, gamma): free slots get exactly 0
    beta = _dirichlet(k_beta, jnp.concatenate([mbar_dishes.astype(dtype), jnp.asarray(gamma, dtype)[None]]))
    trans = _dirichlet(k_pi, row_concentrations(beta, alpha, kappa, n, first))
    return states, beta, trans, params, site_values


@functools.partial(jax.jit, static_argnums=4)
def _initial_values(rng_key, states, params, view, num_states: int):
    """A valid starting point given initial states ``(N, T)``: the states compacted, ``beta``
    the mean of ``Dir(1, ..., 1, gamma)`` over (used states, rest), the rows the means of their
    conditionals ``Dir(alpha beta + kappa e_j + n_j.)`` (so every transition of the initial
    path has positive probability) and the emission parameters drawn from their conditionals.
    Cheap on purpose (it is compiled once per model at ``init``)."""
    dtype = jnp.result_type(view.alpha, float)
    states, _, params, num_used = _drop_unused(states, jnp.ones((num_states,), dtype), params, view)
    weights = state_weights(states, view.valid, num_states, dtype=dtype)
    params, _ = view.emission.update_parameters(rng_key, flatten_time(view.x), weights.reshape(-1, num_states), params)
    total = num_used + view.gamma
    head = jnp.where(used_slots(states, view.lengths, num_states), 1.0 / total, 0.0)
    beta = jnp.concatenate([head, (view.gamma / total)[None]]).astype(dtype)
    n, first = crp.transition_counts(states, num_states, view.lengths)
    conc = row_concentrations(beta, view.alpha, view.kappa, n, first)
    trans = conc / jnp.sum(conc, -1, keepdims=True)
    return states, beta, trans, params, num_used


def beam_sweep(rng_key, states, beta, trans, params, view: ModelView, hyper_update, concentration=None):
    """One beam-sampler sweep (steps 1-6 of the module docstring); pure and jittable.

    ``states (N, T)``, ``beta (K+1,)``, ``trans (K+1, K+1)``, ``params`` (leading axis ``K``),
    ``view`` the model at the current values, ``hyper_update`` as in :func:`given_states`.
    Returns ``(states, beta, trans, params, site_values, overflow, BeamInfo)``.
    """
    num_states = beta.shape[0] - 1
    k_u, k_ext, k_prior, k_z, k_rest = random.split(rng_key, 5)
    inst = used_slots(states, view.lengths, num_states) | (beta[:num_states] > 0)
    # 1. slices
    log_u = draw_slices(k_u, states, trans, view.lengths)
    # 2. stick extension up to the capacity
    prior_params = view.emission.sample_parameters(k_prior, (num_states,))
    prior_params = {p: prior_params[p] for p in params}
    inst, beta, trans, params, overflow = extend_sticks(
        k_ext, inst, beta, trans, params, prior_params, log_u, view.gamma, view.alpha, view.kappa
    )
    # 3. FFBS over the instantiated states with 0/1 transitions 1[pi > u_t]
    log_lik = jax.vmap(view.emission.log_likelihoods, in_axes=(0, None))(view.x, params)
    new_states, _, ok = slice_ffbs(k_z, jnp.log(trans), log_u, inst, log_lik, view.valid, view.lengths)
    states = jnp.where(ok[:, None], new_states, states)
    # 4-6
    states, beta, trans, params, site_values = given_states(
        k_rest, states, beta, params, view, hyper_update, concentration
    )
    info = BeamInfo(num_instantiated=jnp.sum(inst).astype(jnp.int32), ffbs_ok=jnp.all(ok))
    return states, beta, trans, params, site_values, overflow, info


class BeamSampler(HDPKernel):
    r"""Beam sampler of the infinite (sticky) HDP-HMM (Van Gael et al. 2008, with Fox et al.'s
    sticky prior).

    Samples the model as written (``{name}_beta ~ GEM(gamma)``): ``max_states`` is a capacity,
    the sweep instantiates as many states as the slice variables require (see the module
    docstring) and reports ``num_states`` (states in use) and ``overflow`` (the capacity was
    reached while more states were needed; the sweep then continued truncated, so increase
    ``max_states``).  Every emission family and several sequences (``obs (N, T, ...)`` with
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
    parameters drawn from the prior.  The
    initial values are the compacted initial states (the model's prior draw or
    ``init_params``), ``beta`` and rows at conditional means given them and emission parameters
    drawn from their conditionals.

    :param model: a NumPyro model declaring one HDP-HMM with :func:`numpyro_hdphmm.sample`.
    :param inner_kernel: kernel for the remaining latent sites (default ``NUTS``).
    :param exact_hyperparameters: use the exact auxiliary-variable updates where they apply.
    """

    def _check_supported(self, model_trace) -> None:
        fn = model_trace[self._sites.beta]["fn"]
        if not isinstance(fn, GEM):
            raise NotImplementedError(
                f"BeamSampler samples the infinite model (`{self._sites.beta} ~ GEM`), got {type(fn).__name__}; "
                "use WeakLimitGibbs for the weak-limit approximation."
            )

    def _current(self, z):
        sites = self._sites
        states = z[sites.states] if sites.batched else z[sites.states][None]
        params = {p: z[s] for p, s in zip(sites.param_names, sites.emission)}
        return states, params

    #: the sweep gives a DP-mixture emission's concentration site its exact update (base class)
    updates_emission_concentration = True

    def _owned(self, states, beta, trans, params):
        sites = self._sites
        return {
            sites.beta: beta,
            sites.trans: trans,
            sites.states: states if sites.batched else states[0],
            **{s: params[p] for p, s in zip(sites.param_names, sites.emission)},
        }

    def _init_owned(self, rng_key, z, view: ModelView, init_params):
        states, params = self._current(z)
        states = jnp.asarray(states, jnp.int32)
        if not (isinstance(states, jax.core.Tracer)) and (jnp.any(states < 0) | jnp.any(states >= self._sites.num_states)):
            raise ValueError(
                f"`init_params['{self._sites.states}']` must hold states in [0, max_states={self._sites.num_states})."
            )
        states, beta, trans, params, num_used = _initial_values(rng_key, states, params, view._replace(priors={}), self._sites.num_states)
        info = BeamInfo(num_instantiated=num_used.astype(jnp.int32), ffbs_ok=jnp.ones((), bool))
        return self._owned(states, beta, trans, params), info

    def _sweep(self, rng_key, state: HDPState, view: ModelView):
        states, params = self._current(state.z)
        z = state.z

        def hyper_update(key, tables, n, first, mbar_dishes):
            num_dishes = jnp.sum(mbar_dishes > 0)
            total = jnp.sum(mbar_dishes)

            def gamma_update(k, gamma, shape, rate):
                return crp.resample_gamma(k, gamma, num_dishes, total, shape, rate)

            return self._exact_hyper_updates(key, view, tables, n, first, gamma_update)

        site = self._hyper.emission_concentration
        concentration = None if site is None else (site, self._prior_params(view, site))
        states, beta, trans, params, site_values, overflow, info = beam_sweep(
            rng_key, states, z[self._sites.beta], z[self._sites.trans], params, view, hyper_update, concentration
        )
        return self._owned(states, beta, trans, params), site_values, info, overflow
