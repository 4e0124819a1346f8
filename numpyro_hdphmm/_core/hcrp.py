r"""The Chinese restaurant franchise of the (sticky) HDP-HMM kept as table counts: the collapsed
state of the restricted collapsed draw (RCD) and of split-merge moves.

Everything is integrated out: the transition rows, the top-level weights ``beta`` (and, in the
modules that use this one, the emission parameters).  What remains is the seating of the
franchise (RCD paper Sec. 2.2, eqs. 6-8; Teh et al. 2006; with Fox et al.'s loyal customers,
Sec. V-A, eqs. 27-29).  Restaurant ``j`` is the state a transition leaves (``j < K``), or the
start restaurant ``j = K`` (the first step of each sequence, concentration ``alpha``, never
sticky).  Its customers are the transitions out of ``j``; a customer's dish is the state it
enters.  A customer joins a table of its restaurant with probability proportional to the
table's size or opens a new one with concentration ``c_j = alpha + kappa`` (``alpha`` for the
start restaurant).  A new table of state restaurant ``j`` is overridden to serve ``j`` with
probability ``kappa / (alpha + kappa)`` (an *override* table, no top-level customer); every
other table is *informative*: its dish comes from the top-level CRP(``gamma``) over the
informative tables.

**Count representation.**  Only counts are kept (:class:`Seating`): ``n_jk`` customers and
``m_jk`` tables of restaurant ``j`` serving dish ``k``, ``w_k`` override tables of restaurant
``k``, the informative tables per dish ``mbar_.k = sum_j m_jk - w_k`` (``root``) and their
total ``mbar..``.  Given the counts, the seating of the labelled customers within a cell
``(j, k)`` is distributed as ``prod_t Gamma(n_t)`` over the seatings with ``m_jk`` tables, and
which ``w_k`` of the diagonal tables are overridden is uniform.  A customer is therefore removed
exactly (:func:`remove_customer`) by letting its table close with probability
``|s(n-1, m-1)| / |s(n, m)|`` (the fraction of those seatings where it sits alone; ``s`` the
Stirling numbers of the first kind, :func:`stirling_log_ratios`) and, when a diagonal table
closes, letting it be an override table with probability ``w_k / m_kk``.  This imputes the
removed customer's table from its exact conditional given the counts, after which the paper's
removal is deterministic: the chain on ``(states, m, w)`` has the marginal of the chain on the
full seating.

**The predictive** (RCD paper eqs. 31-32 with the printed typo corrected, ``mbar.. + gamma``
not ``m_.k + gamma``, ``docs/errata.md`` "Restricted collapsed draw" item 1; with loyal customers)::

    p(x = k | restaurant j, s) = (n_jk + kappa [j = k < K] + alpha p_root(k)) / (n_j. + c_j)
    p_root(k) = mbar_.k / (mbar.. + gamma)   if mbar_.k > 0   (a served dish)
              = gamma   / (mbar.. + gamma)   otherwise        (a new dish; or an orphan label)

It is ``p(x, t | s) / p(t | x, s)`` for every table ``t`` the customer can take (eq. 28), so the
acceptance ratio of the RCD needs only these values (:func:`log_prob`, eqs. 29-30).

**The weak-limit top level** (``weak_limit=True``; Fox et al. eq. 39): with ``beta ~ Dir(gamma/L,
..., gamma/L)`` over the ``L = K`` labels integrated out, the dishes of the informative tables are
a Polya urn over the labels, ``p_root(k) = (mbar_.k + gamma/L) / (mbar.. + gamma)`` for every
label ``k``, used or not (the labels are states of the approximation, not an exchangeable
partition: the ``L - Kbar`` unused labels share the new-dish mass ``(L - Kbar) (gamma/L) /
(mbar.. + gamma)``).  Everything else (the tables within a restaurant, the overrides, the
removal by Stirling ratios) is the same, since the top level enters only through ``p_root``.

All functions are pure, jittable and vmappable; counts are int32, probabilities in log space.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, xlogy

from numpyro_hdphmm._core import ordering
from numpyro_hdphmm._core.crp import Concentrations, TableCounts

__all__ = [
    "StepLayout",
    "step_layout",
    "steps_in_range",
    "Seating",
    "PendingSeating",
    "pending",
    "commit_vectors",
    "commit",
    "ConcentrationStatistics",
    "stirling_log_ratios",
    "table_capacity",
    "seating_from_tables",
    "table_counts",
    "root_weights",
    "log_prob",
    "log_prob_row",
    "log_prob_column",
    "log_prob_matrix",
    "add_customer",
    "remove_customer",
    "concentration_statistics",
    "log_likelihood_concentrations",
]


class StepLayout(NamedTuple):
    """Where each flattened step ``i = n * T + t`` sits (``(N T,)`` bool each): inside its
    sequence (``in_range``), the first step of a sequence (``is_first``: its transition customer
    sits in the start restaurant), followed by a step of the same sequence (``has_next``: it has
    a transition out)."""

    in_range: jax.Array
    is_first: jax.Array
    has_next: jax.Array


def step_layout(num_sequences: int, num_steps: int, lengths) -> StepLayout:
    """The :class:`StepLayout` of ``num_sequences`` sequences padded to ``num_steps`` steps with
    ``lengths (N,)`` valid steps each, time flattened (``t < lengths``, ``t == 0``,
    ``t + 1 < lengths``)."""
    t = jnp.arange(num_steps)[None, :]
    lengths = jnp.asarray(lengths)[:, None]
    shape = (num_sequences, num_steps)
    in_range = jnp.broadcast_to(t < lengths, shape).reshape(-1)
    is_first = jnp.broadcast_to(t == 0, shape).reshape(-1)
    has_next = jnp.broadcast_to(t + 1 < lengths, shape).reshape(-1)
    return StepLayout(in_range, is_first, has_next)


def steps_in_range(in_range):
    """``(order (S,) int32, count)`` for the flattened steps ``in_range (S,)`` of
    :class:`StepLayout`: ``order[:count]`` are the steps inside their sequences, in order (the
    rest: the padding).  A step-wise sweep as ``lax.fori_loop(0, count, ... order[j] ...)`` (a
    traced bound) visits every sequence's steps in the same order as a loop over all ``S`` and
    skips the padding at no cost: many short sequences padded to the longest can be mostly
    padding (the *Alice* sentences: 25,378 words in 1,281 x 181 steps)."""
    in_range = jnp.asarray(in_range, bool)
    size = in_range.shape[0]
    position = jnp.where(in_range, jnp.cumsum(in_range) - 1, size)
    order = jnp.zeros((size,), jnp.int32).at[position].set(jnp.arange(size, dtype=jnp.int32), mode="drop")
    return order, jnp.sum(in_range).astype(jnp.int32)


class Seating(NamedTuple):
    """The franchise's seating as counts (module docstring).  ``K`` = capacity.

    ``n (K+1, K)``: customers of restaurant ``j`` (row ``K``: the start restaurant) eating dish
    ``k``; ``m (K+1, K)``: tables; ``w (K,)``: override tables of restaurant ``k`` (all serving
    ``k``); ``root (K,)``: informative tables per dish, ``mbar_.k``; ``out (K+1,)``: customers per
    restaurant, ``n_j.``; ``root_total ()``: ``mbar..``.  ``root``, ``out`` and ``root_total`` are
    caches of sums of the others, kept so that every customer costs ``O(1)``."""

    n: jax.Array
    m: jax.Array
    w: jax.Array
    root: jax.Array
    out: jax.Array
    root_total: jax.Array


@jax.tree_util.register_pytree_node_class
class PendingSeating:
    """A :class:`Seating` whose count matrices are not written while a move runs (:func:`pending`,
    :func:`commit`).

    Inside a jitted loop, XLA:CPU updates a large array in place only when nothing else reads a
    version of it that the update would overwrite; a move that reads the matrices between its
    updates (the predictive after a removal, the undo log) makes it copy both ``(K+1, K)``
    matrices several times per step, which costs more than the move itself.  Here ``n`` and
    ``m`` are the matrices as they were when the move began (only read), the changes since are
    a short list of cell increments (``cell_j``, ``cell_k``, ``dn``, ``dm``: ``(size,)`` each,
    the first ``used`` filled, ``used`` a static Python int), and the per-dish and
    per-restaurant vectors (``w``, ``root``, ``out``, ``root_total``) are kept up to date.  The
    customer functions of this module accept either form; :func:`commit` writes the increments
    with one scatter per matrix, or drops them (a rejected move needs no undo log)."""

    def __init__(self, n, m, cell_j, cell_k, dn, dm, w, root, out, root_total, used: int = 0):
        self.n, self.m, self.cell_j, self.cell_k, self.dn, self.dm = n, m, cell_j, cell_k, dn, dm
        self.w, self.root, self.out, self.root_total, self.used = w, root, out, root_total, used

    def tree_flatten(self):
        return ((self.n, self.m, self.cell_j, self.cell_k, self.dn, self.dm, self.w, self.root, self.out,
                 self.root_total), self.used)

    @classmethod
    def tree_unflatten(cls, used, children):
        return cls(*children, used=used)

    def _replace(self, **changes):
        fields = dict(n=self.n, m=self.m, cell_j=self.cell_j, cell_k=self.cell_k, dn=self.dn, dm=self.dm,
                      w=self.w, root=self.root, out=self.out, root_total=self.root_total, used=self.used)
        fields.update(changes)
        return PendingSeating(**fields)


def pending(seating: Seating, size: int) -> PendingSeating:
    """``seating`` with room for ``size`` cell changes (the customers a move adds or removes),
    none made yet (:class:`PendingSeating`)."""
    zeros = jnp.zeros(size, jnp.int32)
    return PendingSeating(seating.n, seating.m, zeros, zeros, zeros, zeros, seating.w, seating.root, seating.out,
                          seating.root_total)


def commit_vectors(seating: Seating, moved: PendingSeating, keep) -> Seating:
    """``seating`` with the per-dish and per-restaurant vectors of ``moved`` (a :func:`pending`
    of it) where ``keep`` (a traced bool); the count matrices as they were (:func:`commit`
    writes them)."""
    pick = lambda now, then: jnp.where(keep, now, then)
    return seating._replace(w=pick(moved.w, seating.w), root=pick(moved.root, seating.root),
                            out=pick(moved.out, seating.out), root_total=pick(moved.root_total, seating.root_total))


def commit(seating: Seating, moved: PendingSeating, keep) -> Seating:
    """``seating`` (the result of :func:`commit_vectors`, or the seating ``moved`` started from)
    with the cell changes of ``moved`` written where ``keep`` (a traced bool), else the count
    matrices exactly as they were: one scatter-add per matrix, ``m`` then ``n``, which XLA
    performs in place (:mod:`numpyro_hdphmm._core.ordering`)."""
    m = seating.m.at[moved.cell_j, moved.cell_k].add(jnp.where(keep, moved.dm, 0))
    keep = ordering.after(keep, ordering.any_element(m))
    n = seating.n.at[moved.cell_j, moved.cell_k].add(jnp.where(keep, moved.dn, 0))
    return seating._replace(n=n, m=m)


def _cell(seating, j, k):
    """``(n_jk, m_jk)`` of a :class:`Seating` or :class:`PendingSeating`."""
    if isinstance(seating, PendingSeating):
        hit = (seating.cell_j == j) & (seating.cell_k == k)
        return (seating.n[j, k] + jnp.sum(jnp.where(hit, seating.dn, 0)),
                seating.m[j, k] + jnp.sum(jnp.where(hit, seating.dm, 0)))
    return seating.n[j, k], seating.m[j, k]


def _customers_row(seating, j):
    """``n_j. (K,)``: the customers of restaurant ``j`` per dish."""
    if isinstance(seating, PendingSeating):
        capacity = seating.w.shape[0]
        changes = jnp.zeros(capacity, jnp.int32).at[seating.cell_k].add(jnp.where(seating.cell_j == j, seating.dn, 0))
        return seating.n[j] + changes
    return seating.n[j]


def _customers_column(seating, k):
    """``n_.k (K,)``: the customers eating dish ``k`` in each state restaurant (start excluded)."""
    capacity = seating.w.shape[0]
    if isinstance(seating, PendingSeating):
        rows = jnp.minimum(seating.cell_j, capacity - 1)
        hit = (seating.cell_k == k) & (seating.cell_j < capacity)
        changes = jnp.zeros(capacity, jnp.int32).at[rows].add(jnp.where(hit, seating.dn, 0))
        return seating.n[:capacity, k] + changes
    return seating.n[:capacity, k]


def _change_cell(seating, j, k, dn, dm, w, root, out, root_total):
    """``seating`` with ``n_jk += dn``, ``m_jk += dm`` and the vectors replaced."""
    if isinstance(seating, PendingSeating):
        slot = seating.used
        if slot >= seating.dn.shape[0]:
            raise ValueError(f"PendingSeating: more than {seating.dn.shape[0]} cell changes in one move.")
        as_int = lambda v: jnp.asarray(v).astype(jnp.int32)
        return seating._replace(cell_j=seating.cell_j.at[slot].set(as_int(j)), cell_k=seating.cell_k.at[slot].set(as_int(k)),
                                dn=seating.dn.at[slot].set(as_int(dn)), dm=seating.dm.at[slot].set(as_int(dm)), w=w, root=root,
                                out=out, root_total=root_total, used=slot + 1)
    return Seating(seating.n.at[j, k].add(dn), seating.m.at[j, k].add(dm), w, root, out, root_total)


# ------------------------------------------------------------------------ Stirling numbers
@functools.lru_cache(maxsize=8)
def _stirling_log_ratios_np(max_customers: int, max_tables: int) -> np.ndarray:
    log_s = np.full(max_tables + 1, -np.inf)  # log|s(n, m)|, m = 0..max_tables, for the current n
    log_s[0] = 0.0
    out = np.full((max_customers + 1, max_tables + 1), -np.inf)
    out[:, 0] = -np.inf
    for n in range(1, max_customers + 1):
        # |s(n, m)| = (n - 1) |s(n-1, m)| + |s(n-1, m-1)|
        prev = log_s
        shifted = np.concatenate([[-np.inf], prev[:-1]])
        with np.errstate(divide="ignore"):
            scaled = prev + np.log(n - 1) if n > 1 else np.full_like(prev, -np.inf)
        log_s = np.logaddexp(scaled, shifted)
        with np.errstate(invalid="ignore"):
            out[n, 1:] = shifted[1:] - log_s[1:]  # log|s(n-1, m-1)| - log|s(n, m)|
    out[~np.isfinite(out)] = -np.inf
    return out


def stirling_log_ratios(max_customers: int, max_tables: int, dtype=None):
    r"""``(max_customers + 1, max_tables + 1)`` table of ``log(|s(n-1, m-1)| / |s(n, m)|)`` for
    ``1 <= m <= n`` (``-inf`` elsewhere): the probability that a given customer of a CRP cell with
    ``n`` customers at ``m`` tables sits alone, whatever the concentration (the seatings of ``n``
    labelled customers at ``m`` tables are weighted ``prod_t (n_t - 1)!``, whose sum is
    ``|s(n, m)|``; those where the customer is alone number ``|s(n-1, m-1)|``).  Computed once
    in float64 with ``|s(n, m)| = (n-1) |s(n-1, m)| + |s(n-1, m-1)|`` in log space (the
    difference of two logs of magnitude ``log n!`` is taken in float64, then stored)."""
    if max_customers < 1 or max_tables < 1:
        raise ValueError(f"`max_customers` and `max_tables` must be >= 1, got {max_customers}, {max_tables}.")
    table = _stirling_log_ratios_np(int(max_customers), int(min(max_tables, max_customers)))
    if max_tables > max_customers:
        table = np.pad(table, ((0, 0), (0, max_tables - max_customers)), constant_values=-np.inf)
    return jnp.asarray(table, dtype or jnp.result_type(float))


#: entries of the Stirling ratio table (float32: 16 MiB) above which the number of tables per
#: cell it covers is reduced (:func:`table_capacity`)
STIRLING_TABLE_ENTRIES = 1 << 22


def table_capacity(max_customers: int) -> int:
    """Tables per cell covered by the Stirling ratio table of :func:`stirling_log_ratios`: all
    of them (``max_customers``) while the table has at most :data:`STIRLING_TABLE_ENTRIES`
    entries, else the most that fit (at least 64; a cell that would open more sets the
    samplers' ``overflow`` flag)."""
    max_customers = int(max_customers)
    if (max_customers + 1) ** 2 <= STIRLING_TABLE_ENTRIES:
        return max(max_customers, 1)
    return max(64, STIRLING_TABLE_ENTRIES // (max_customers + 1) - 1)


# ------------------------------------------------------------------------ construction
def seating_from_tables(n, first, tables: TableCounts) -> Seating:
    """The :class:`Seating` of transition counts ``n (K, K)``, start counts ``first (K,)`` and
    tables (:class:`~numpyro_hdphmm._core.crp.TableCounts`: ``m (K+1, K)`` start row last,
    ``w (K,)``)."""
    counts = jnp.concatenate([jnp.asarray(n, jnp.int32), jnp.asarray(first, jnp.int32)[None]], 0)
    m = jnp.asarray(tables.m, jnp.int32)
    w = jnp.asarray(tables.w, jnp.int32)
    root = jnp.sum(m, 0) - w
    return Seating(counts, m, w, root, jnp.sum(counts, 1), jnp.sum(root))


def table_counts(seating: Seating) -> TableCounts:
    """The tables as :class:`~numpyro_hdphmm._core.crp.TableCounts` (``mbar = m`` less the
    override tables on the diagonal), for the auxiliary-variable hyperparameter updates."""
    k = seating.w.shape[0]
    idx = jnp.arange(k)
    mbar = seating.m.at[idx, idx].add(-seating.w)
    return TableCounts(m=seating.m, w=seating.w, mbar=mbar)


# ------------------------------------------------------------------------ the predictive
def root_weights(seating: Seating, gamma, weak_limit: bool = False):
    r"""``p_root(k)`` for every dish ``(K,)``: ``mbar_.k / (mbar.. + gamma)`` for a served dish,
    ``gamma / (mbar.. + gamma)`` for a label without informative tables (a new dish).  RCD
    paper eqs. 14-15 and 31-32 with the corrected denominator ``mbar.. + gamma`` (the paper
    prints ``m_.k + gamma``, ``docs/errata.md`` "Restricted collapsed draw" item 1).  ``weak_limit`` (static): the top level
    ``Dir(gamma/K)`` over the ``K`` labels integrated out, ``(mbar_.k + gamma/K) / (mbar.. +
    gamma)`` for every label (module docstring)."""
    dtype = jnp.result_type(gamma, float)
    root = seating.root.astype(dtype)
    total = seating.root_total.astype(dtype) + gamma
    if weak_limit:
        return (root + gamma / root.shape[0]) / total
    return jnp.where(root > 0, root, gamma) / total


def _concentration(j, hyper: Concentrations, capacity: int):
    """``c_j = alpha + kappa`` for a state restaurant, ``alpha`` for the start restaurant."""
    return hyper.alpha + jnp.where(j < capacity, hyper.kappa, 0.0)


def log_prob(seating: Seating, j, k, hyper: Concentrations, weak_limit: bool = False):
    r"""``log p(x = k | restaurant j, s)`` (module docstring; RCD paper Alg. 2 ``getProb``);
    ``weak_limit``: the weak-limit top level (:func:`root_weights`)."""
    capacity = seating.w.shape[0]
    dtype = jnp.result_type(hyper.alpha, float)
    p_root = root_weights(seating, hyper.gamma, weak_limit)[k]
    sticky = jnp.where((j == k) & (j < capacity), hyper.kappa, 0.0)
    num = _cell(seating, j, k)[0].astype(dtype) + sticky + hyper.alpha * p_root
    den = seating.out[j].astype(dtype) + _concentration(j, hyper, capacity)
    return jnp.log(num) - jnp.log(den)


def log_prob_row(seating: Seating, j, hyper: Concentrations):
    """``log p(x = k | restaurant j, s)`` for every dish ``k``: ``(K,)``.  A label without
    informative tables (a free slot, or an orphan) gets the new-dish value."""
    capacity = seating.w.shape[0]
    dtype = jnp.result_type(hyper.alpha, float)
    sticky = jnp.where((jnp.arange(capacity) == j) & (j < capacity), hyper.kappa, 0.0)
    num = _customers_row(seating, j).astype(dtype) + sticky + hyper.alpha * root_weights(seating, hyper.gamma)
    den = seating.out[j].astype(dtype) + _concentration(j, hyper, capacity)
    return jnp.log(num) - jnp.log(den)


def log_prob_column(seating: Seating, k, hyper: Concentrations):
    """``log p(x = k | restaurant j, s)`` for every state restaurant ``j < K``: ``(K,)``.  A free
    slot is an empty restaurant: ``(kappa [j = k] + alpha p_root(k)) / (alpha + kappa)``."""
    capacity = seating.w.shape[0]
    dtype = jnp.result_type(hyper.alpha, float)
    sticky = jnp.where(jnp.arange(capacity) == k, hyper.kappa, 0.0)
    num = _customers_column(seating, k).astype(dtype) + sticky + hyper.alpha * root_weights(seating, hyper.gamma)[k]
    den = seating.out[:capacity].astype(dtype) + hyper.alpha + hyper.kappa
    return jnp.log(num) - jnp.log(den)


def log_prob_matrix(seating: Seating, hyper: Concentrations):
    """``log p(x = k | restaurant j, s)`` for every restaurant (start row last) and dish:
    ``(K+1, K)``, the predictive transition matrix ``pi-hat`` of the blocked samplers (RCD paper
    Sec. 4.2)."""
    capacity = seating.w.shape[0]
    dtype = jnp.result_type(hyper.alpha, float)
    eye = jnp.concatenate([jnp.eye(capacity, dtype=dtype), jnp.zeros((1, capacity), dtype)], 0)
    num = seating.n.astype(dtype) + hyper.kappa * eye + hyper.alpha * root_weights(seating, hyper.gamma)[None]
    conc = jnp.concatenate([jnp.full((capacity,), hyper.alpha + hyper.kappa, dtype), jnp.asarray(hyper.alpha, dtype)[None]])
    den = seating.out.astype(dtype) + conc
    return jnp.log(num) - jnp.log(den)[:, None]


# ------------------------------------------------------------------------ customers
def add_customer(seating: Seating, j, k, u, hyper: Concentrations, max_tables: int, weak_limit: bool = False,
                 when=True):
    r"""Seat one customer of restaurant ``j`` with dish ``k`` (RCD paper Alg. 3 ``addCustomer``,
    eq. 27, with loyal customers): join an existing table with weight ``n_jk``, open an override
    table with ``kappa [j = k < K]`` or an informative table with ``alpha p_root(k)``; ``u``
    uniform on ``(0, 1]``.

    Returns ``(seating, log_r, overflow)``: ``log_r = log p(x = k | j, s)`` before the customer
    sat (:func:`log_prob`; the factor of the RCD acceptance ratio, eq. 30) and ``overflow`` when
    the cell opened more tables than ``max_tables`` (the Stirling table's width).  ``weak_limit``:
    the weak-limit top level (:func:`root_weights`).  ``when`` (a traced bool): when False the
    seating is returned unchanged with ``log_r = 0`` and no overflow (a masked addition, cheaper
    inside a jitted loop than a ``lax.cond``, which copies the seating)."""
    capacity = seating.w.shape[0]
    dtype = jnp.result_type(hyper.alpha, float)
    one = jnp.asarray(when, jnp.int32)
    n_jk, m_jk = _cell(seating, j, k)
    join = n_jk.astype(dtype)
    override = jnp.where((j == k) & (j < capacity), hyper.kappa, 0.0)
    informative = hyper.alpha * root_weights(seating, hyper.gamma, weak_limit)[k]
    num = join + override + informative
    den = seating.out[j].astype(dtype) + _concentration(j, hyper, capacity)
    v = u * num
    new_table = ~(v <= join) & (one > 0)
    is_override = new_table & (v <= join + override)
    is_informative = new_table & ~is_override
    w = seating.w.at[k].add(is_override.astype(jnp.int32))
    root = seating.root.at[k].add(is_informative.astype(jnp.int32))
    out = seating.out.at[j].add(one)
    total = seating.root_total + is_informative.astype(jnp.int32)
    overflow = new_table & (m_jk >= max_tables)
    log_r = jnp.where(one > 0, jnp.log(num) - jnp.log(den), 0.0)
    return _change_cell(seating, j, k, one, new_table.astype(jnp.int32), w, root, out, total), log_r, overflow


def remove_customer(seating: Seating, j, k, u_table, u_override, log_ratios, hyper: Concentrations,
                    weak_limit: bool = False, when=True):
    r"""Remove one customer of restaurant ``j`` eating dish ``k`` (RCD paper Alg. 4
    ``removeCustomer`` in the count representation, module docstring): its table closes with
    probability ``|s(n-1, m-1)| / |s(n, m)|`` (``log_ratios`` from :func:`stirling_log_ratios`)
    and a closing diagonal table of a state restaurant is an override table with probability
    ``w_k / m_kk``; ``u_table``, ``u_override`` uniform on ``[0, 1)``.

    Returns ``(seating, log_r)`` with ``log_r = log p(x = k | j, s)`` after the removal (the
    factor ``r_old`` of the RCD acceptance ratio, Alg. 1; ``weak_limit``: the weak-limit top
    level, :func:`root_weights`).  ``when`` (a traced bool): when False the seating is returned
    unchanged with ``log_r = 0`` (a masked removal, :func:`add_customer`)."""
    capacity = seating.w.shape[0]
    dtype = log_ratios.dtype
    one = jnp.asarray(when, jnp.int32)
    n_jk, m_jk = _cell(seating, j, k)
    width = log_ratios.shape[1] - 1
    log_close = log_ratios[jnp.maximum(n_jk, 0), jnp.clip(m_jk, 0, width)]
    close = (jnp.log(u_table.astype(dtype)) < log_close) & (one > 0)
    diagonal = (j == k) & (j < capacity)
    is_override = close & diagonal & (u_override * m_jk.astype(u_override.dtype) < seating.w[k].astype(u_override.dtype))
    is_informative = close & ~is_override
    w = seating.w.at[k].add(-is_override.astype(jnp.int32))
    root = seating.root.at[k].add(-is_informative.astype(jnp.int32))
    out = seating.out.at[j].add(-one)
    total = seating.root_total - is_informative.astype(jnp.int32)
    new = _change_cell(seating, j, k, -one, -close.astype(jnp.int32), w, root, out, total)
    return new, jnp.where(one > 0, log_prob(new, j, k, hyper, weak_limit), 0.0)


# ------------------------------------------------------------------------ concentrations
class ConcentrationStatistics(NamedTuple):
    """What the probability of the seating depends on through ``gamma``, ``alpha``, ``kappa``:
    ``out (K+1,)`` customers per restaurant (start last), ``informative ()`` tables ``mbar..``,
    ``overrides ()`` tables ``w.``, ``dishes ()`` the number of dishes with informative tables."""

    out: jax.Array
    informative: jax.Array
    overrides: jax.Array
    dishes: jax.Array


def concentration_statistics(seating: Seating) -> ConcentrationStatistics:
    return ConcentrationStatistics(seating.out, seating.root_total, jnp.sum(seating.w), jnp.sum(seating.root > 0))


def log_likelihood_concentrations(stats: ConcentrationStatistics, gamma, alpha, kappa):
    r"""``log p(states, seating | gamma, alpha, kappa)`` up to a constant in the concentrations
    (RCD paper eqs. 18-20 with loyal customers, Fox et al. eqs. 28-29)::

        sum_{j < K: n_j. > 0} [log Gamma(alpha + kappa) - log Gamma(alpha + kappa + n_j.)]
          + log Gamma(alpha) - log Gamma(alpha + n_K.)
          + mbar.. log alpha + w. log kappa
          + Kbar log gamma + log Gamma(gamma) - log Gamma(gamma + mbar..)

    (the constants: ``prod_t Gamma(n_t)`` of the tables and ``prod_k Gamma(mbar_.k)`` of the
    top level).  The density the inner kernel sees when ``beta`` and the rows are integrated
    out and the seating is kept."""
    dtype = jnp.result_type(gamma, alpha, kappa, float)
    out = stats.out.astype(dtype)
    c = alpha + kappa
    states = out[:-1]
    restaurants = jnp.sum(jnp.where(states > 0, gammaln(c) - gammaln(c + states), 0.0))
    start = gammaln(alpha) - gammaln(alpha + out[-1])
    informative = stats.informative.astype(dtype)
    top = stats.dishes.astype(dtype) * jnp.log(gamma) + gammaln(gamma) - gammaln(gamma + informative)
    return restaurants + start + informative * jnp.log(alpha) + xlogy(stats.overrides.astype(dtype), kappa) + top
