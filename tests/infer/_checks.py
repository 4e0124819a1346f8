"""Shared correctness machinery for every kernel: exact enumeration of tiny posteriors, the
total-variation bound, and the Geweke joint-distribution test.  Written once, used by each
kernel's test module."""

from __future__ import annotations

import itertools
import math

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from numpy.polynomial.legendre import leggauss
from numpyro import handlers
from numpyro.infer import MCMC
from scipy.special import gammaln


# ----------------------------------------------------------------------------- partitions
def partition_key(z):
    """Canonical label of a state sequence's partition: relabel by first appearance."""
    seen, out = {}, []
    for s in np.asarray(z).reshape(-1):
        out.append(seen.setdefault(int(s), len(seen)))
    return tuple(out)


def tv_bound(probs, num_draws, delta=1e-4):
    """High-probability bound on the TV distance between ``probs`` and the empirical
    distribution of ``num_draws`` independent draws: ``0.5 sum_i sqrt(p_i (1-p_i) / n)``
    (the expectation bound) plus the McDiarmid deviation ``sqrt(log(1/delta) / (2 n))``."""
    p = np.asarray(list(probs))
    return 0.5 * np.sum(np.sqrt(p * (1 - p) / num_draws)) + np.sqrt(np.log(1 / delta) / (2 * num_draws))


def empirical_tv(exact: dict, draws):
    """TV distance between ``exact`` (partition -> probability) and the draws' partitions."""
    counts = {}
    for z in draws:
        key = partition_key(z)
        counts[key] = counts.get(key, 0) + 1
    n = len(draws)
    keys = set(exact) | set(counts)
    return 0.5 * sum(abs(exact.get(k, 0.0) - counts.get(k, 0) / n) for k in keys)


# ---------------------------------------------------------------- exact weak-limit posterior
def _log_dirmult_rows(counts, conc):
    """sum_j log[Gamma(sum conc_j)/Gamma(sum conc_j + n_j.) prod_k Gamma(conc_jk + n_jk)/Gamma(conc_jk)]"""
    return np.sum(
        gammaln(conc.sum(-1)) - gammaln(conc.sum(-1) + counts.sum(-1))
        + np.sum(gammaln(conc + counts) - gammaln(conc), -1)
    )


def _simplex_rule(num_states, num_nodes=60):
    """Quadrature nodes/weights on the (L-1)-simplex for L = 2, 3 (Gauss-Legendre)."""
    x, w = leggauss(num_nodes)
    u, wu = (x + 1) / 2, w / 2
    if num_states == 2:
        return np.stack([u, 1 - u], -1), wu
    if num_states == 3:
        a, b = np.meshgrid(u, u, indexing="ij")
        wa, wb = np.meshgrid(wu, wu, indexing="ij")
        pts = np.stack([a, (1 - a) * b, (1 - a) * (1 - b)], -1).reshape(-1, 3)
        return pts, (wa * wb * (1 - a)).reshape(-1)
    raise ValueError("quadrature implemented for 2 or 3 states")


def exact_weak_limit_posterior(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc):
    """Exact posterior over the joint partition of ``sequences`` (lists of category indices)
    under the weak-limit sticky HDP-HMM with categorical emissions: rows integrated out
    (Dirichlet-multinomial), ``beta ~ Dir(gamma/L)`` integrated by quadrature, emission
    probabilities integrated out (Dirichlet-categorical)."""
    L = num_states
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s) for s in sequences])
    nodes, weights = _simplex_rule(L)
    log_prior_beta = (
        gammaln(gamma) - L * gammaln(gamma / L) + np.sum((gamma / L - 1) * np.log(nodes), -1)
    )
    sticky = np.eye(L)
    post = {}
    for flat_z in itertools.product(range(L), repeat=len(flat_y)):
        flat_z = np.array(flat_z)
        # emission marginal
        counts_y = np.zeros((L, num_categories))
        np.add.at(counts_y, (flat_z, flat_y), 1)
        log_py = _log_dirmult_rows(counts_y, np.full((L, num_categories), emission_conc))
        n, first = infinite_transition_counts(flat_z, lengths, L)
        log_pz = np.array([
            _log_dirmult_rows(first[None], alpha * b[None])
            + _log_dirmult_rows(n, alpha * b[None] + kappa * sticky)
            for b in nodes
        ])
        integrand = np.exp(log_pz + log_prior_beta)
        log_joint = np.log(np.sum(weights * integrand)) + log_py
        key = partition_key(flat_z)
        post[key] = np.logaddexp(post.get(key, -np.inf), log_joint)
    keys = list(post)
    logs = np.array([post[k] for k in keys])
    probs = np.exp(logs - np.logaddexp.reduce(logs))
    return dict(zip(keys, probs))


def final_states(kernel, model_args, num_chains, num_warmup, site="y_states", seed=0):
    """Independent draws: the last state of ``num_chains`` vectorized chains."""
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=1, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(seed), *model_args)
    z = np.asarray(mcmc.get_samples()[site])
    return z.reshape(num_chains, -1)


# --------------------------------------------------------------------------- Geweke test
def geweke_z_scores(kernel, model, statistics, num_steps, num_iterations, num_prior, seed=0, y_site="y",
                    num_chains=1, chunk=100):
    """Geweke (2004) joint-distribution test.

    Successive-conditional simulator: ``theta <- K(theta | y)`` (one kernel sweep), then
    ``y ~ p(y | theta)`` (the model's forward draw with every latent substituted); its draws of
    ``g(theta)`` must have the prior's distribution, which the marginal-conditional simulator
    (independent prior draws) gives.  Returns ``{stat: z}``, with the successive chains'
    variance of the mean from ArviZ's effective sample size.  ``num_chains > 1`` runs that many
    successive-conditional chains vmapped (``num_iterations`` each, from the same start with
    independent keys); ``chunk`` iterations run in one compiled ``lax.scan``.
    """
    key = jax.random.key(seed)
    k_prior, k_init, k_y0, key = jax.random.split(key, 4)

    def forward(k, z):
        tr = handlers.trace(handlers.seed(handlers.substitute(model, data=z), k)).get_trace(None, num_steps)
        return tr[y_site]["value"]

    # marginal-conditional: prior draws
    prior_draws = jax.jit(jax.vmap(
        lambda k: {s: v["value"] for s, v in handlers.trace(handlers.seed(model, k)).get_trace(None, num_steps).items()
                   if v["type"] == "sample"}
    ))(jax.random.split(k_prior, num_prior))
    prior_stats = {name: np.asarray(jax.vmap(fn)(prior_draws)) for name, fn in statistics.items()}

    # successive-conditional
    init_tr = handlers.trace(handlers.seed(model, k_y0)).get_trace(None, num_steps)
    y = init_tr[y_site]["value"]
    state = kernel.init(k_init, 0, None, (y, num_steps), {})

    def one(state, y, k):
        state = kernel.sample(state, (y, num_steps), {})
        return state, forward(k, state.z), {name: fn(state.z) for name, fn in statistics.items()}

    step = one
    if num_chains > 1:
        def per_chain(leaf, k):
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                return jax.random.split(jax.random.fold_in(leaf, k), num_chains)
            return jnp.broadcast_to(leaf, (num_chains,) + leaf.shape)

        leaves, treedef = jax.tree_util.tree_flatten(state)
        state = jax.tree_util.tree_unflatten(treedef, [per_chain(jnp.asarray(x), i) for i, x in enumerate(leaves)])
        y = jnp.broadcast_to(y, (num_chains,) + y.shape)
        step = jax.vmap(one)

    @jax.jit
    def run(state, y, keys):
        def body(carry, k):
            state, y, stats = step(*carry, k)
            return (state, y), stats

        (state, y), stats = jax.lax.scan(body, (state, y), keys)
        return state, y, stats

    keys = jax.random.split(key, num_iterations * num_chains)
    keys = keys.reshape((num_iterations,) if num_chains == 1 else (num_iterations, num_chains))
    traces = {name: [] for name in statistics}
    for start in range(0, num_iterations, chunk):
        state, y, stats = run(state, y, keys[start:start + chunk])
        for name in statistics:
            traces[name].append(np.asarray(stats[name], float))
    out = {}
    for name in statistics:
        g = np.concatenate(traces[name]).reshape(num_iterations, num_chains).T  # (chains, iterations)
        p = prior_stats[name].astype(float)
        ess = float(az.ess(g))
        se = np.sqrt(g.var() / max(ess, 1.0) + p.var() / len(p))
        out[name] = (g.mean() - p.mean()) / se if se > 0 else 0.0
    return out


# --------------------------------------------------------------- exact infinite HDP-HMM prior
def restricted_growth_strings(length):
    """All canonical partition labels (``partition_key`` fixed points) of ``length`` items, in
    lexicographic order: ``z_0 = 0`` and ``z_t <= 1 + max(z_{<t})``; Bell(length) of them."""
    if length < 1:
        raise ValueError(f"`length` must be >= 1, got {length}.")
    out = [(0,)]
    for _ in range(length - 1):
        out = [z + (k,) for z in out for k in range(max(z) + 2)]
    return out


def _abs_stirling1_table(n_max):
    """Unsigned Stirling numbers of the first kind ``|s(n, m)|`` for ``0 <= n, m <= n_max``:
    ``|s(n+1, m)| = n |s(n, m)| + |s(n, m-1)|``, ``|s(0, 0)| = 1``, so that
    ``Gamma(a + n) / Gamma(a) = sum_m |s(n, m)| a^m`` (the number of seatings of ``n`` labelled
    customers at ``m`` tables)."""
    s = np.zeros((n_max + 1, n_max + 1))
    s[0, 0] = 1.0
    for n in range(n_max):
        s[n + 1, 1:] = n * s[n, 1:] + s[n, :-1]
    return s


def infinite_transition_counts(flat_z, lengths, num_states=None):
    """Transition counts of the state sequences ``flat_z`` (concatenated, labels ``0..K-1``)
    split into sequences of ``lengths``: ``(n (K, K), first (K,))`` with ``n[j, k] = #{t: z_{t-1}=j,
    z_t=k}`` within sequences and ``first[k]`` = number of sequences starting in ``k`` (the
    customers of the start restaurant); ``K = num_states`` (default: the largest label + 1)."""
    flat_z = np.asarray(flat_z, int).reshape(-1)
    lengths = [int(t) for t in lengths]
    if not lengths or any(t < 1 for t in lengths) or sum(lengths) != flat_z.size:
        raise ValueError(f"`lengths` must be positive and sum to len(flat_z)={flat_z.size}, got {lengths}.")
    if flat_z.min() < 0:
        raise ValueError("`flat_z` must hold non-negative state labels.")
    num_states = int(flat_z.max()) + 1 if num_states is None else int(num_states)
    n = np.zeros((num_states, num_states), int)
    first = np.zeros(num_states, int)
    start = 0
    for t_len in lengths:
        z = flat_z[start:start + t_len]
        first[z[0]] += 1
        np.add.at(n, (z[:-1], z[1:]), 1)
        start += t_len
    return n, first


def _poly_mul(a, b):
    return np.convolve(a, b)


def _log_infinite_prior_counts(n, first, gamma, alpha, kappa, *, start_concentration=None,
                               overrides_informative=False, stirling=None):
    r"""Log prior probability of a partition of the states, from its transition counts.

    Chinese restaurant franchise with loyal customers (Fox et al. 2007, Sec. V-A, eqs. 27-29;
    Teh et al. 2006 eqs. 18-20).  Integrating the row ``pi_j ~ DP(c, (alpha beta + kappa
    delta_j) / c)``, ``c = alpha + kappa``, out of the ``n_j.`` successors of state ``j`` gives
    ``Gamma(c)/Gamma(c + n_j.) prod_k Gamma(alpha beta_k + kappa d_jk + n_jk) / Gamma(alpha beta_k
    + kappa d_jk)`` (Fox et al. eq. 76); the start row ``DP(alpha, beta)`` gives the same with
    ``alpha`` and no ``kappa``.  Expanding each rising factorial with unsigned Stirling numbers,
    ``Gamma(a + n)/Gamma(a) = sum_m |s(n, m)| a^m`` (``m`` = tables serving ``k``), and the
    diagonal binomially, ``(alpha beta_j + kappa)^m = sum_w C(m, w) kappa^w (alpha beta_j)^{m-w}``
    (``w`` = overridden tables, Fox et al. eq. 28), turns ``p(z | beta)`` into a sum of monomials
    ``alpha^{mbar..} kappa^{w.} prod_k beta_k^{mbar_.k}`` over informative table counts
    ``mbar_jk = m_jk - d_jk w_j`` (Fox et al. eq. 35; start-row tables are all informative).
    Every used state has ``mbar_.k >= 1`` (its first visit comes from the start row or from
    another state, whose tables are informative), so summing ``E[prod_k beta_k^{mbar_.k}]`` over
    the distinct labels of the ``K`` blocks is the top-level CRP / Ewens EPPF
    ``gamma^K Gamma(gamma)/Gamma(gamma + mbar..) prod_k Gamma(mbar_.k)`` (Teh et al. eq. 20).
    Hence

        p(partition) = Gamma(alpha)/Gamma(alpha + n_0.) prod_{j: n_j.>0} Gamma(c)/Gamma(c + n_j.)
                       * sum_{m, w} prod_{jk} |s(n_jk, m_jk)| prod_j C(m_jj, w_j)
                         alpha^{mbar..} kappa^{w.} gamma^K Gamma(gamma)/Gamma(gamma + mbar..)
                         prod_k Gamma(mbar_.k)

    with ``m_jk in [1, n_jk]`` (0 iff ``n_jk = 0``) and ``w_j in [0, m_jj]``.  (Equivalently
    ``c^{m_j.} rho^{w_j} (1-rho)^{m_j. - w_j}`` per state restaurant with ``rho = kappa/c``.)
    The sum over ``(m, w)`` factorizes by column ``k`` except through ``mbar..``, so it is
    computed as a product of per-column polynomials in ``mbar_.k`` (coefficients
    ``alpha^a Gamma(a)`` times the seating weights) followed by one convolution over columns.

    The keyword arguments exist only for the negative controls of the tests (deliberately wrong
    formulas): ``start_concentration`` replaces ``alpha`` in the start restaurant,
    ``overrides_informative`` counts overridden tables in ``mbar`` and ``stirling`` replaces the
    ``|s(n, m)|`` table.
    """
    n = np.asarray(n, int)
    first = np.asarray(first, int)
    num_states = n.shape[0]
    used = (n.sum(0) + n.sum(1) + first) > 0
    if not used.all():
        raise ValueError("every state label 0..K-1 must be used")
    a0 = alpha if start_concentration is None else start_concentration
    c = alpha + kappa
    n_max = max(int(n.max(initial=0)), int(first.max()))
    s = _abs_stirling1_table(n_max) if stirling is None else stirling(n_max)
    log_norm = gammaln(a0) - gammaln(a0 + first.sum())
    rows = n.sum(1)
    log_norm += np.sum(gammaln(c) - gammaln(c + rows[rows > 0]))
    total = np.array([1.0])  # polynomial in mbar.. (index = mbar..)
    for k in range(num_states):
        col = np.array([1.0])  # polynomial in mbar_.k, without the alpha^a Gamma(a) factor
        # the start restaurant: m_0k tables, all informative, weight |s(n_0k, m)| (alpha -> a0)
        if first[k] > 0:
            m = np.arange(first[k] + 1)
            col = _poly_mul(col, s[first[k], m] * (a0 / alpha) ** m)
        for j in range(num_states):
            if n[j, k] == 0:
                continue
            if j != k:
                col = _poly_mul(col, s[n[j, k], :n[j, k] + 1])
                continue
            # diagonal: m tables of which w are overridden (weight C(m, w) kappa^w); mbar = m - w
            diag = np.zeros(n[k, k] + 1)
            for m_ in range(1, n[k, k] + 1):
                for w in range(m_ + 1):
                    weight = s[n[k, k], m_] * math.comb(m_, w) * float(kappa) ** w  # 0.0 ** 0 == 1
                    diag[m_ if overrides_informative else m_ - w] += weight
            col = _poly_mul(col, diag)
        if col[0] != 0.0:
            raise AssertionError("a used state without informative tables (impossible in the infinite model)")
        a = np.arange(col.size)
        with np.errstate(divide="ignore"):
            col = col * np.where(a > 0, alpha ** a * np.exp(gammaln(np.maximum(a, 1))), 0.0)
        total = _poly_mul(total, col)
    big = np.arange(total.size)
    pos = total > 0
    log_terms = np.log(total[pos]) + gammaln(gamma) - gammaln(gamma + big[pos])
    return log_norm + num_states * np.log(gamma) + np.logaddexp.reduce(log_terms)


def log_infinite_prior_partition(flat_z, lengths, gamma, alpha, kappa):
    """Log prior probability of the partition of ``flat_z`` (the states of sequences of
    ``lengths``, concatenated; any labels) under the infinite sticky HDP-HMM: ``beta ~
    GEM(gamma)``, start row ``DP(alpha, beta)``, rows ``DP(alpha + kappa, (alpha beta + kappa
    delta_j)/(alpha + kappa))``, all shared by the sequences.  See
    :func:`_log_infinite_prior_counts` for the derivation (Fox et al. 2007 eqs. 27-35, 76)."""
    if not (gamma > 0 and alpha > 0 and kappa >= 0):
        raise ValueError(f"need gamma > 0, alpha > 0, kappa >= 0; got {gamma}, {alpha}, {kappa}.")
    n, first = infinite_transition_counts(partition_key(flat_z), lengths)
    return float(_log_infinite_prior_counts(n, first, gamma, alpha, kappa))


def _log_dirmult_partition(flat_z, flat_y, num_categories, emission_conc):
    """``log prod_k DirMult(y_{t: z_t = k} | emission_conc * ones(C))`` (ordered observations)."""
    flat_z = np.asarray(flat_z, int)
    counts = np.zeros((flat_z.max() + 1, num_categories))
    np.add.at(counts, (flat_z, np.asarray(flat_y, int)), 1)
    return _log_dirmult_rows(counts, np.full(counts.shape, float(emission_conc)))


def exact_infinite_posterior(sequences, gamma, alpha, kappa, num_categories, emission_conc, *, _log_prior=None):
    """Exact posterior over the joint partition of ``sequences`` (lists of category indices)
    under the infinite sticky HDP-HMM with categorical emissions ``theta_k ~ Dir(emission_conc
    1_C)`` integrated out: ``p(partition | y) ∝ p(partition) prod_k DirMult(y_k)``, enumerated
    over all Bell(T) partitions of the ``T = sum(len)`` concatenated steps.  Keys are
    ``partition_key`` tuples.  ``_log_prior(flat_z, lengths, gamma, alpha, kappa)`` replaces
    :func:`log_infinite_prior_partition` (negative controls only)."""
    if not sequences or any(len(s) < 1 for s in sequences):
        raise ValueError("`sequences` must be a non-empty list of non-empty sequences.")
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s, int) for s in sequences])
    if flat_y.min() < 0 or flat_y.max() >= num_categories:
        raise ValueError(f"`sequences` must hold categories in [0, {num_categories}).")
    log_prior = log_infinite_prior_partition if _log_prior is None else _log_prior
    keys = restricted_growth_strings(flat_y.size)
    logs = np.array([
        log_prior(z, lengths, gamma, alpha, kappa) + _log_dirmult_partition(z, flat_y, num_categories, emission_conc)
        for z in keys
    ])
    probs = np.exp(logs - np.logaddexp.reduce(logs))
    return dict(zip(keys, probs))
