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
from scipy.special import gammaln

try:
    import partition_oracle as partition
except ModuleNotFoundError:  # imported as ``infer._checks`` by the tests outside tests/infer
    from infer import partition_oracle as partition
from numpyro_hdphmm._core import random as draws


# ----------------------------------------------------------------------------- partitions
partition_key = partition.partition_labels


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
    """sum_j log[Gamma(sum conc_j)/Gamma(sum conc_j + n_j.) prod_k Gamma(conc_jk + n_jk)/Gamma(conc_jk)]
    (``counts (J, K)``; ``conc (..., J, K)``: one value per leading index of ``conc``)."""
    return np.sum(
        gammaln(conc.sum(-1)) - gammaln(conc.sum(-1) + counts.sum(-1))
        + np.sum(gammaln(conc + counts) - gammaln(conc), -1), -1
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


def exact_weak_limit_posterior(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc,
                               log_emission=None):
    """Exact posterior over the joint partition of ``sequences`` (lists of category indices)
    under the weak-limit sticky HDP-HMM with categorical emissions: rows integrated out
    (Dirichlet-multinomial), ``beta ~ Dir(gamma/L)`` integrated by quadrature, emission
    probabilities integrated out (Dirichlet-categorical; ``log_emission``: ``partition key ->
    log p(y | partition)`` instead)."""
    post = _weak_limit_log_joints(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc,
                                  log_emission)
    keys = list(post)
    logs = np.array([post[k] for k in keys])
    probs = np.exp(logs - np.logaddexp.reduce(logs))
    return dict(zip(keys, probs))


def exact_weak_limit_log_evidence(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc):
    """``log p(y)`` of the model of :func:`exact_weak_limit_posterior` (every labelling summed)."""
    post = _weak_limit_log_joints(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc)
    return float(np.logaddexp.reduce(np.array(list(post.values()))))


def _weak_limit_log_joints(sequences, num_states, gamma, alpha, kappa, num_categories, emission_conc,
                           log_emission=None):
    """``{partition key: log p(y, partition)}`` of :func:`exact_weak_limit_posterior`."""
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
        if log_emission is not None:
            log_py = log_emission(partition_key(flat_z))
        else:
            counts_y = np.zeros((L, num_categories))
            np.add.at(counts_y, (flat_z, flat_y), 1)
            log_py = _log_dirmult_rows(counts_y, np.full((L, num_categories), emission_conc))
        n, first = infinite_transition_counts(flat_z, lengths, L)
        # every quadrature node at once: the start row's and the L rows' concentrations (Q, 1|L, L)
        log_pz = (_log_dirmult_rows(first[None], alpha * nodes[:, None, :])
                  + _log_dirmult_rows(n, alpha * nodes[:, None, :] + kappa * sticky))
        integrand = np.exp(log_pz + log_prior_beta)
        log_joint = np.log(np.sum(weights * integrand)) + log_py
        key = partition_key(flat_z)
        post[key] = np.logaddexp(post.get(key, -np.inf), log_joint)
    return post


#: XLA's default code generation, for the enumeration tests' loops: the test suite compiles every
#: program without backend optimization (``tests/conftest.py``), which halves the compile time but
#: makes the code several times slower, and the loops of thousands of chains run long enough to
#: pay for an optimized compilation (the beam sampler's default enumeration, 1200 chains x 31
#: sweeps: 40.6 -> 23.5 s on a loaded 2-core machine; at 100 chains the optimized program costs
#: 6 s more)
OPTIMIZED = {"xla_backend_optimization_level": 2, "xla_cpu_use_fusion_emitters": True}

#: chains x sweeps above which :func:`final_states` compiles its loop with :data:`OPTIMIZED`
OPTIMIZE_ABOVE = 20_000


def final_state(kernel, model_args, num_chains, num_warmup, seed=0, optimize=None):
    """The kernel's state after ``num_warmup + 1`` sweeps of ``num_chains`` vectorized chains:
    what ``MCMC(kernel, num_warmup=num_warmup, num_samples=1, num_chains=num_chains,
    chain_method="vectorized").run(jax.random.key(seed), *model_args)`` leaves in ``last_state``,
    bit for bit (``test_conformance.py::test_final_states_are_mcmc_draws``), by the calls
    NumPyro's loop makes: ``kernel.init`` on the split keys, then the sweeps of ``kernel.sample``
    in one compiled ``fori_loop``, compiled with :data:`OPTIMIZED` when ``optimize`` (``None``:
    when the loop is long, more than :data:`OPTIMIZE_ABOVE` chain sweeps)."""
    keys = jax.random.split(jax.random.key(seed), num_chains)
    state = kernel.init(keys, num_warmup, None, model_args, {})
    if optimize is None:
        optimize = num_chains * (num_warmup + 1) > OPTIMIZE_ABOVE
    options = OPTIMIZED if optimize else None
    loop = jax.jit(lambda s: jax.lax.fori_loop(0, num_warmup + 1, lambda i, x: kernel.sample(x, model_args, {}), s),
                   compiler_options=options)
    return loop(state)


def final_states(kernel, model_args, num_chains, num_warmup, site="y_states", seed=0, optimize=None):
    """Independent draws: ``site`` at the last state of ``num_chains`` vectorized chains
    (:func:`final_state`), ``(num_chains, -1)``."""
    state = final_state(kernel, model_args, num_chains, num_warmup, seed, optimize)
    z = kernel.postprocess_fn(model_args, {})(getattr(state, kernel.sample_field))
    return np.asarray(z[site]).reshape(num_chains, -1)


def callbacks_in_sweep(kernel, *args):
    """The host callbacks in the lowered program of one sweep of ``kernel`` (what NumPyro's loop
    compiles around ``kernel.sample``) on the model arguments ``args``: none, so JAX's persistent
    cache may store it.  The start's shapes come from ``jax.eval_shape`` of ``kernel.init`` (its
    programs traced, not compiled)."""
    state = jax.eval_shape(lambda key: kernel.init(key, 2, None, args, {}), jax.random.PRNGKey(0))
    text = jax.jit(lambda s: kernel.sample(s, args, {})).lower(state).as_text()
    return text.count("callback")


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
# The exact partition prior is the test oracle tests/infer/partition_oracle.py (the restricted
# collapsed draw keeps the same table counts); the names below are the tests' shorthands.
restricted_growth_strings = partition.restricted_growth_strings
infinite_transition_counts = partition.transition_counts
log_infinite_prior_partition = partition.log_partition_prior


def _log_dirmult_partition(flat_z, flat_y, num_categories, emission_conc):
    """``log prod_k DirMult(y_{t: z_t = k} | emission_conc * ones(C))`` (ordered observations)."""
    flat_z = np.asarray(flat_z, int)
    counts = np.zeros((flat_z.max() + 1, num_categories))
    np.add.at(counts, (flat_z, np.asarray(flat_y, int)), 1)
    return _log_dirmult_rows(counts, np.full(counts.shape, float(emission_conc)))


def shared_base_emission(scale, base_prior, num_nodes=400, scale_prior=None):
    """The emission term of two symbols under a shared base (``phi ~ Beta(*base_prior)`` as
    ``(phi, 1 - phi)``, ``probs_k | phi ~ Dir(scale (phi, 1 - phi))``, both integrated out):
    ``counts (K, 2) -> (log p(y | partition), E[phi | y, partition], E[scale | y, partition])`` by
    Gauss-Legendre quadrature over ``phi`` and, with ``scale_prior = (a, b)`` (``scale ~ Gamma(a,
    b)``, ``scale`` then unused), a trapezoid rule over ``log scale``."""
    x, w = leggauss(num_nodes)
    u, wu = (x + 1) / 2, w / 2
    b0, b1 = base_prior
    log_prior = (b0 - 1) * np.log(u) + (b1 - 1) * np.log1p(-u) - (gammaln(b0) + gammaln(b1) - gammaln(b0 + b1))
    log_w = np.log(wu) + log_prior
    if scale_prior is None:
        scales, log_ws = np.array([float(scale)]), np.zeros(1)
    else:
        a, b = scale_prior
        log_s = np.linspace(-9.0, 6.0, 601)
        scales = np.exp(log_s)
        # Gamma(a, b) density in log s (Jacobian s), trapezoid weights
        log_ws = a * np.log(b) - gammaln(a) + a * log_s - b * scales + np.log(np.gradient(log_s))
    conc = scales[:, None, None] * np.stack([u, 1 - u], -1)[None]  # (S, nodes, 2)

    def evaluate(counts):
        counts = np.asarray(counts, float)
        ll = np.sum(gammaln(scales[:, None]) - gammaln(scales[:, None] + counts.sum(-1)[None]), -1)[:, None]  # (S, 1)
        ll = ll + np.sum(gammaln(conc[:, :, None, :] + counts) - gammaln(conc[:, :, None, :]), axis=(2, 3))
        log_f = ll + log_w[None] + log_ws[:, None]
        log_py = np.logaddexp.reduce(log_f.reshape(-1))
        post = np.exp(log_f - log_py)
        return log_py, float(np.sum(post * u[None])), float(np.sum(post * scales[:, None]))

    return evaluate


def exact_shared_base_posterior(sequences, gamma, alpha, kappa, scale, base_prior, num_states=None, scale_prior=None):
    """``(partition -> posterior probability, E[phi | y], E[scale | y])`` of the (sticky) HDP-HMM
    with two symbols under a shared emission base (:func:`shared_base_emission`): the infinite
    model (``num_states=None``, all Bell(T) partitions) or the weak limit over ``num_states``
    states."""
    evaluate = shared_base_emission(scale, base_prior, scale_prior=scale_prior)
    flat_y = np.concatenate([np.asarray(s, int) for s in sequences])
    cache = {}

    def emission(key):
        if key not in cache:
            z = np.asarray(key, int)
            counts = np.zeros((z.max() + 1, 2))
            np.add.at(counts, (z, flat_y), 1)
            cache[key] = evaluate(counts)
        return cache[key]

    log_emission = lambda key: emission(partition_key(key))[0]
    if num_states is None:
        exact = exact_infinite_posterior(sequences, gamma, alpha, kappa, 2, None, log_emission=log_emission)
    else:
        exact = exact_weak_limit_posterior(sequences, num_states, gamma, alpha, kappa, 2, None, log_emission=log_emission)
    return (exact, sum(p * emission(key)[1] for key, p in exact.items()),
            sum(p * emission(key)[2] for key, p in exact.items()))


def exact_infinite_posterior(sequences, gamma, alpha, kappa, num_categories, emission_conc, log_emission=None):
    """Exact posterior over the joint partition of ``sequences`` (lists of category indices)
    under the infinite sticky HDP-HMM with categorical emissions ``theta_k ~ Dir(emission_conc
    1_C)`` integrated out: ``p(partition | y) ∝ p(partition) prod_k DirMult(y_k)``, enumerated
    over all Bell(T) partitions of the ``T = sum(len)`` concatenated steps.  Keys are
    ``partition_key`` tuples.  ``log_emission``: ``partition key -> log p(y | partition)`` in place
    of the Dirichlet-multinomial."""
    if not sequences or any(len(s) < 1 for s in sequences):
        raise ValueError("`sequences` must be a non-empty list of non-empty sequences.")
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s, int) for s in sequences])
    if flat_y.min() < 0 or flat_y.max() >= num_categories:
        raise ValueError(f"`sequences` must hold categories in [0, {num_categories}).")
    keys = restricted_growth_strings(flat_y.size)
    logs = np.array([
        partition.log_partition_prior(z, lengths, gamma, alpha, kappa)
        + (log_emission(z) if log_emission else _log_dirmult_partition(z, flat_y, num_categories, emission_conc))
        for z in keys
    ])
    probs = np.exp(logs - np.logaddexp.reduce(logs))
    return dict(zip(keys, probs))


# ------------------------------------------------------------------- negative-control variants
def printed_gamma_update(rng_key, gamma, num_dishes, num_informative_tables, shape, rate):
    """Fox et al.'s printed Escobar-West update of ``gamma`` (eqs. 54-56 as printed): the odds
    ``(shape + Kbar - 1) / (mbar.. (rate - log eta))`` used as the mixing probability (clipped to
    1) instead of ``odds / (1 + odds)`` (notes erratum 3).  Monkeypatched over
    ``numpyro_hdphmm._core.crp.resample_gamma`` by the Geweke negative controls."""
    k_eta, k_mix, k_g = jax.random.split(rng_key, 3)
    dtype = jnp.result_type(gamma, float)
    mbar = jnp.maximum(num_informative_tables, 1).astype(dtype)
    eta = draws.beta(k_eta, jnp.asarray(gamma + 1.0, dtype), mbar)
    post_rate = rate - jnp.log(eta)
    pi = jnp.minimum((shape + num_dishes - 1.0) / (mbar * post_rate), 1.0)
    extra = (jax.random.uniform(k_mix, (), dtype) < pi).astype(dtype)
    g = draws.gamma(k_g, jnp.asarray(shape + num_dishes - 1.0 + extra, dtype), post_rate)
    return jnp.where(num_informative_tables > 0, g, draws.gamma(k_g, jnp.asarray(shape, dtype), rate))


def collapsed_jacobian_counted_twice(monkeypatch):
    """Negative control of the collapsed ``(alpha, kappa)`` update: its likelihood
    (``numpyro_hdphmm._core.crp.log_states_given_beta``) times an extra ``alpha kappa``, the
    Jacobian of the log transform counted twice (a plausible slip)."""
    from numpyro_hdphmm._core import crp

    real = crp.log_states_given_beta
    monkeypatch.setattr(crp, "log_states_given_beta",
                        lambda beta, a, k, n, first: real(beta, a, k, n, first) + jnp.log(a) + jnp.log(k))


# ------------------------------------------------------------ exact joint of states and tables
def _table_choices(n, first, kappa):
    """Every table configuration of a partition's counts: ``(m (K+1, K), w (K,))`` with ``m_jk``
    in ``[1, n_jk]`` where ``n_jk > 0`` (start row last) and ``w_k`` in ``[0, m_kk]`` (only
    with ``kappa > 0``)."""
    num_states = n.shape[0]
    counts = np.concatenate([n, first[None]], 0)
    cells = [(j, k) for j in range(num_states + 1) for k in range(num_states) if counts[j, k] > 0]
    for ms in itertools.product(*[range(1, counts[j, k] + 1) for j, k in cells]):
        m = np.zeros((num_states + 1, num_states), int)
        for (j, k), v in zip(cells, ms):
            m[j, k] = v
        diag = [m[k, k] if kappa > 0 else 0 for k in range(num_states)]
        for w in itertools.product(*[range(d + 1) for d in diag]):
            yield m, np.array(w, int)


def log_joint_tables(n, first, m, w, gamma, alpha, kappa):
    """``log p(partition, m, w)`` under the sticky HDP-HMM's franchise: the summand of
    :func:`partition_oracle.log_prior_counts` (``-inf`` when a state has no
    informative table)."""
    num_states = n.shape[0]
    counts = np.concatenate([n, first[None]], 0)
    mbar = m.sum(0) - w
    if np.any(mbar < 1):
        return -np.inf
    stirling = partition.stirling1_unsigned(int(counts.max()))
    c = alpha + kappa
    rows = n.sum(1)
    out = gammaln(alpha) - gammaln(alpha + first.sum()) + np.sum(gammaln(c) - gammaln(c + rows[rows > 0]))
    out += np.sum(np.log(stirling[counts[counts > 0], m[counts > 0]]))
    out += sum(np.log(math.comb(int(m[k, k]), int(w[k]))) for k in range(num_states))
    total = mbar.sum()
    out += total * np.log(alpha) + (w.sum() * np.log(kappa) if kappa > 0 else 0.0)
    out += num_states * np.log(gamma) + gammaln(gamma) - gammaln(gamma + total) + np.sum(gammaln(mbar))
    return out


def table_key(flat_states, m, w):
    """Canonical key of a joint state: the partition (labels by first appearance) and the tables
    ``m`` (restaurants: the states in that order, then the start row) and overrides ``w`` of the
    states in use, relabelled the same way."""
    flat_states = np.asarray(flat_states, int)
    labels = partition_key(flat_states)
    order = list(dict.fromkeys(flat_states.tolist()))  # old labels in order of first appearance
    rows = order + [np.asarray(m).shape[0] - 1]
    sub = np.asarray(m)[np.ix_(rows, order)]
    return labels, tuple(sub.reshape(-1).tolist()), tuple(np.asarray(w)[order].tolist())


def exact_table_posterior(sequences, gamma, alpha, kappa, num_categories, emission_conc):
    """Exact posterior over (partition, tables ``m``, overrides ``w``) of ``sequences`` under the
    infinite sticky HDP-HMM with categorical emissions ``Dir(emission_conc 1_C)`` integrated
    out (the joint the restricted collapsed draw samples).  Keys are :func:`table_key` tuples."""
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s, int) for s in sequences])
    logs = {}
    for z in restricted_growth_strings(flat_y.size):
        n, first = partition.transition_counts(z, lengths)
        log_y = _log_dirmult_partition(z, flat_y, num_categories, emission_conc)
        for m, w in _table_choices(n, first, kappa):
            lp = log_joint_tables(n, first, m, w, gamma, alpha, kappa)
            if np.isfinite(lp):
                logs[table_key(z, m, w)] = lp + log_y
    keys = list(logs)
    values = np.array([logs[k] for k in keys])
    probs = np.exp(values - np.logaddexp.reduce(values))
    return dict(zip(keys, probs))


def empirical_tv_keys(exact: dict, keys):
    """TV distance between ``exact`` and the empirical distribution of ``keys`` (any hashable)."""
    counts = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    n = len(keys)
    return 0.5 * sum(abs(exact.get(k, 0.0) - counts.get(k, 0) / n) for k in set(exact) | set(counts))


def chi_square_pvalue(exact: dict, keys, min_expected=5.0):
    """Pearson chi-square p-value of the draws ``keys`` (any hashable) against ``exact``: cells
    with an expected count ``n p >= min_expected`` each, the rest (and any key outside
    ``exact``) pooled into one cell; ``df = cells - 1``.  Sharper than the TV bound at catching
    a bias concentrated on a few cells."""
    from scipy.stats import chi2

    n = len(keys)
    counts = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    big = [k for k, p in exact.items() if n * p >= min_expected]
    observed = [counts.get(k, 0) for k in big]
    expected = [n * exact[k] for k in big]
    rest_expected = n - sum(expected)
    if rest_expected > 1e-9:
        observed.append(n - sum(observed))
        expected.append(rest_expected)
    observed, expected = np.asarray(observed, float), np.asarray(expected, float)
    stat = np.sum((observed - expected) ** 2 / expected)
    return float(chi2.sf(stat, len(expected) - 1))


# ------------------------------------------------ exact posteriors with alpha, kappa random
def _log_gamma_density(x, shape, rate):
    return shape * np.log(rate) - gammaln(shape) + (shape - 1.0) * np.log(x) - rate * x


def log_hyper_grid(alpha_prior, kappa_prior, num_points=80, lo=-7.0, hi=4.0):
    """A grid in ``(log alpha, log kappa)`` for the exact posteriors below: ``(u (A,), v (V,),
    log prior density of (u, v) (A, V))`` (Gamma priors, the Jacobian ``alpha kappa`` included)."""
    u = np.linspace(lo, hi, num_points)
    v = np.linspace(lo, hi, num_points)
    log_prior = (_log_gamma_density(np.exp(u), *alpha_prior) + u)[:, None] + (_log_gamma_density(np.exp(v), *kappa_prior) + v)[None, :]
    return u, v, log_prior


def _hyper_summary(log_joint_by_key, u, v):
    """``log_joint_by_key``: partition -> ``(A, V)`` log joint on the grid.  Returns the partition
    probabilities and the marginal log densities of ``log alpha`` and ``log kappa`` (trapezoid)."""
    keys = list(log_joint_by_key)
    logs = np.stack([log_joint_by_key[k] for k in keys])  # (P, A, V)
    top = logs.max()
    dens = np.exp(logs - top)
    du, dv = np.gradient(u), np.gradient(v)  # trapezoid-like weights on a uniform grid
    mass = np.einsum("pav,a,v->p", dens, du, dv)
    probs = dict(zip(keys, mass / mass.sum()))
    joint = dens.sum(0)
    return probs, np.log(joint @ dv + 1e-300), np.log(du @ joint + 1e-300)


def exact_weak_limit_hyper_posterior(sequences, num_states, gamma, alpha_prior, kappa_prior, num_categories,
                                     emission_conc, num_points=80):
    """Exact posterior of the weak-limit sticky HDP-HMM with categorical emissions when
    ``alpha ~ Gamma(alpha_prior)`` and ``kappa ~ Gamma(kappa_prior)`` (shape, rate) are random and
    ``gamma`` fixed: ``p(z, alpha, kappa | y) ∝ p(alpha) p(kappa) DirMult(y | z) int p(z | beta,
    alpha, kappa) Dir(beta; gamma/L) dbeta``, the rows integrated out (Dirichlet-multinomials:
    ``Gamma(c_j)/Gamma(c_j + n_j.) prod_k (c_jk)^(n_jk)`` with the rising factorial, a polynomial
    of degree ``T`` in ``beta``, so for ``gamma = L`` (a uniform prior on ``beta``) a Gauss-Legendre
    rule on the simplex integrates it exactly for ``T <= 6``),
    ``(log alpha, log kappa)`` on a grid (:func:`log_hyper_grid`).

    Returns ``(probs, u, log p(log alpha | y) on u, v, log p(log kappa | y) on v)``; ``probs``:
    partition -> probability."""
    L = num_states
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s) for s in sequences])
    nodes, weights = _simplex_rule(L, num_nodes=8)
    log_prior_beta = gammaln(gamma) - L * gammaln(gamma / L) + np.sum((gamma / L - 1) * np.log(nodes), -1)
    log_w_beta = np.log(weights) + log_prior_beta  # (B,)
    u, v, log_prior = log_hyper_grid(alpha_prior, kappa_prior, num_points)
    a = np.exp(u)[:, None, None]  # (A, 1, 1)
    k = np.exp(v)[None, :, None]  # (1, V, 1)
    post = {}
    # one labelling per partition (the canonical one), times the L!/(L-m)! labellings of its m
    # blocks: the symmetric Dir(gamma/L) and emission priors make them equally probable
    for key in restricted_growth_strings(flat_y.size):
        flat_z = np.array(key)
        num_blocks = int(flat_z.max()) + 1
        if num_blocks > L:
            continue
        log_labellings = gammaln(L + 1) - gammaln(L - num_blocks + 1)
        counts_y = np.zeros((L, num_categories))
        np.add.at(counts_y, (flat_z, flat_y), 1)
        log_py = _log_dirmult_rows(counts_y, np.full((L, num_categories), emission_conc))
        n, first = infinite_transition_counts(flat_z, lengths, L)
        # row totals (independent of beta): start row alpha, state rows alpha + kappa
        log_pz = (gammaln(a) - gammaln(a + first.sum()))[..., 0] + sum(
            (gammaln(a + k) - gammaln(a + k + n[j].sum()))[..., 0] for j in range(L))
        log_pz = log_pz[..., None] + np.zeros(len(nodes))  # (A, V, B)
        for j, row in [(L, first)] + [(j, n[j]) for j in range(L)]:
            for col in np.nonzero(row)[0]:
                conc = a * nodes[None, None, :, col] + (k if col == j else 0.0)
                log_pz = log_pz + gammaln(conc + row[col]) - gammaln(conc)
        post[key] = np.logaddexp.reduce(log_pz + log_w_beta, -1) + log_prior + log_py + log_labellings
    probs, log_pu, log_pv = _hyper_summary(post, u, v)
    return probs, u, log_pu, v, log_pv


def exact_infinite_hyper_posterior(sequences, gamma, alpha_prior, kappa_prior, num_categories, emission_conc,
                                   num_points=30):
    """The infinite model's exact posterior with ``alpha``, ``kappa`` random (Gamma priors) and
    ``gamma`` fixed: ``p(partition, alpha, kappa | y) ∝ p(alpha) p(kappa) p(partition | gamma,
    alpha, kappa) prod_k DirMult(y_k)`` (:func:`log_infinite_prior_partition`), enumerated over
    the Bell(T) partitions, ``(log alpha, log kappa)`` on a grid.  Returns the same as
    :func:`exact_weak_limit_hyper_posterior`."""
    lengths = [len(s) for s in sequences]
    flat_y = np.concatenate([np.asarray(s, int) for s in sequences])
    u, v, log_prior = log_hyper_grid(alpha_prior, kappa_prior, num_points)
    post = {}
    for z in restricted_growth_strings(flat_y.size):
        log_py = _log_dirmult_partition(z, flat_y, num_categories, emission_conc)
        prior = np.array([[partition.log_partition_prior(z, lengths, gamma, np.exp(a), np.exp(k)) for k in v] for a in u])
        post[z] = prior + log_prior + log_py
    probs, log_pu, log_pv = _hyper_summary(post, u, v)
    return probs, u, log_pu, v, log_pv


def ks_against_grid(draws, grid, log_density):
    """Kolmogorov-Smirnov p-value of ``draws`` against the density ``exp(log_density)`` tabulated
    on the sorted ``grid`` (trapezoid CDF, linear interpolation)."""
    from scipy import stats

    p = np.exp(log_density - np.max(log_density))
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (p[1:] + p[:-1]) * np.diff(grid))])
    cdf /= cdf[-1]
    return stats.kstest(np.asarray(draws), lambda x: np.interp(x, grid, cdf)).pvalue


# ------------------------------------------------------------ data for the family smoke tests
def three_regime_model(family: str):
    """``(model, y)``: 60 steps of a 3-regime sequence (segments 0, 1, 0, 2 of 15 steps) in the
    family's own data type and a sticky HDP-HMM over it (``max_states=12``, the family's
    ``weakly_informative`` prior; ``dp_mixture``: a Categorical mixture of 3 components)."""
    import numpyro_hdphmm as nh

    rng = np.random.default_rng(0)
    seg = np.repeat([0, 1, 0, 2], 15)
    if family in ("categorical", "dp_mixture"):
        y = (seg + rng.integers(0, 2, seg.size)) % 4
        emission = (nh.emissions.Categorical(4, 0.5) if family == "categorical"
                    else nh.emissions.DPMixture(nh.emissions.Categorical(4, 0.5), 1.0, 3))
    else:
        means = np.array([[3.0, 0.0], [-3.0, 1.0], [0.0, -3.0]])
        y = means[seg] + rng.normal(scale=0.5, size=(seg.size, 2))
        if family == "vmf":
            y = y / np.linalg.norm(y, axis=-1, keepdims=True)
        cls = {"gaussian": nh.emissions.GaussianNIW, "diagonal": nh.emissions.DiagonalGaussian,
               "autoregressive": nh.emissions.AutoRegressive, "vmf": nh.emissions.VonMisesFisher}[family]
        emission = cls.weakly_informative(y)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 2.0, 5.0, emission, max_states=12), obs=y)

    return model, y
