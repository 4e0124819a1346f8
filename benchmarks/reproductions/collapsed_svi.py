"""The paper-reproduction grid of stochastic collapsed VI (Wang & Blunsom 2014).

Held-out per-token log-likelihood against passes and against wall-clock seconds for the three
variants of :class:`numpyro_hdphmm.infer.CollapsedSVI`:

* ``SVI``: uncollapsed stochastic VI of the finite HMM (``hdp=False, collapsed=False``; the
  paper's baseline, Foti et al. 2014 on whole sequences);
* ``SCVI``: the zeroth-order collapsed update of the finite HMM (``hdp=False``);
* ``SCVI-HDP``: the same with the variational HDP top level (the default);

for batch sizes ``M`` in {10, 100, 1000} x forgetting rates ``kappa`` in {0.5, 0.7, 0.9}
(``rho_n = (1 + n)^-kappa``), on

* (a) a synthetic sentence-like corpus: a finite HMM with ``K_true = 10`` states, rows
  ``Dir(0.5)``, sparse emissions ``Dir(0.05)`` over ``V = 200`` words, sentences of 10-40 words
  (the corpus of ``examples/papers/plot_collapsed_svi.py``), 10,000 training and 1,000 held-out
  sentences;
* (b) the Alice sentences (:func:`numpyro_hdphmm.datasets.load_alice` cut at every ``EOS``, the
  ``EOS`` kept as the sentence's last word: 1,423 sentences, 28,103 tokens, ``V = 1,487``), a
  random 90% / 10% split by sentence (the paper's WSJ split).

The paper's priors throughout: ``Dir(0.1)`` emissions and finite-HMM rows, ``alpha, gamma ~
Gamma(1, 0.1)``, ``G[alpha pi] = 0.1`` before the first HDP update; ``K = 20`` fitted states
(twice the synthetic truth).  Held-out metric: the forward algorithm under the plug-in HMM
(:meth:`~numpyro_hdphmm.infer.CollapsedSVI.predictive_log_likelihood`, the same definition for
every variant).

How it runs.  One ``CollapsedSVI`` per corpus and ``M`` gives the model's configuration and the
initial state (:meth:`~numpyro_hdphmm.infer.CollapsedSVI.init`; the same initial state for the
three variants and the three ``kappa``).  The updates use the package's pure core
(:func:`~numpyro_hdphmm.infer.collapsed_svi.scvi_update` on length strata from
:func:`~numpyro_hdphmm.infer.collapsed_svi.length_strata`, each stratum weighted ``N_b / M_b`` as
in ``CollapsedSVI.run``), one ``lax.scan`` over a chunk of updates with ``kappa`` a traced
argument, so that the three forgetting rates share one compiled program per variant and ``M``
(``CollapsedSVI.run`` compiles once per step-size schedule); the minibatch order is a fresh
host-side permutation per pass.  Compilation is done ahead of time and excluded from the clock.
The three variants of a setting run interleaved, chunk by chunk, each with its own clock, so
that load changes of the shared machine hit them alike.

The paper's ranking is checked in every setting: SCVI-HDP >= SCVI >= SVI in held-out per-token
log-likelihood (i) after the last pass and (ii) at equal wall-clock time (each curve linearly
interpolated at the shortest of the three runs' total time; the curves start at the initial
state at 0 s).  Differences within ``--tie`` nats per token (default 0.002) count as ties
(agreeing).

Throughput (``CollapsedSVI.run`` itself, the user path): seconds per pass over the Alice training
sentences after compilation, per variant and ``M``, against the target of one second per pass.
Memory: in a fresh subprocess per corpus size (synthetic corpora of two sizes), the peak
resident set size (``resource.getrusage``) after compilation and after several passes, the bytes
of the state (``CollapsedSVIState``) and of the live JAX buffers.

MCMC at equal time (part ``mcmc``): at the grid's best setting on both corpora (``M = 10``,
``kappa = 0.5``), the three variants and the MCMC kernels (``--kernels``, default
``WeakLimitGibbs``, ``BeamSampler``, ``DirectAssignmentGibbs``; ``--chains 2`` vectorized chains,
default ``init_strategy``) on the same model and data, raced for ``--mcmc-seconds`` (60 s on the
synthetic corpus, 40 s on Alice) per method in one process: the method with the least seconds so
far advances by one chunk of updates or one sweep.  Compilation excluded for every method,
initialization included, scoring excluded.  A kernel's value at ``t`` seconds: of the ``n``
sweeps done by ``t``, the draws of the last ``ceil(n / 2)`` sweeps of every chain; per held-out
sentence the log of the mean over these draws of ``p(sentence | draw)`` (the forward algorithm,
:func:`numpyro_hdphmm.results.diagnostics.predictive_log_likelihood`'s ``per_sequence``), summed, per token.

Longer runs (part ``long``): the settings where SVI led in the grid (``kappa = 0.9`` for ``M`` in
{10, 100}, ``M = 100, kappa = 0.7``, ``M = 1000`` for every ``kappa``) with ``--long-factor``
(10) times the grid's passes.  ``K = 45`` (part ``k45``): the paper's WSJ truncation on the Alice
sentences, ``M`` in {10, 100} x ``kappa`` in {0.5, 0.7}, the grid's passes.

Usage: ``python -m benchmarks.reproductions collapsed-svi [--quick] [--write] [--tie 0.002] [--skip PARTS]``
(``--quick``: ``M = 100``, ``kappa`` in {0.5, 0.9}, 2,000 synthetic training sentences, fewer
passes; ``--skip``: a comma list of ``grid``, ``throughput``, ``memory``, ``mcmc``, ``long``,
``k45``; ``--write`` updates the sections "Stochastic collapsed VI: the paper's grid" (only when
the grid, throughput and memory all ran), "...: MCMC at equal time", "...: longer runs" and
"...: K = 45" of ``benchmarks/results/reproductions.json``, each for the parts that ran).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
import warnings

import numpy as np

from ..harness import results

QUESTION = "reproductions"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/reproductions.json``; returns the path."""
    return results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## Stochastic collapsed VI: the paper's grid"
MCMC_SECTION = "## Stochastic collapsed VI: MCMC at equal time"
LONG_SECTION = "## Stochastic collapsed VI: longer runs"
K45_SECTION = "## Stochastic collapsed VI: K = 45"
VARIANTS = {"SVI": dict(hdp=False, collapsed=False), "SCVI": dict(hdp=False, collapsed=True),
            "SCVI-HDP": dict(hdp=True, collapsed=True, merge=False)}  # the paper's algorithm: no merge move
K_FIT = 20


# ------------------------------------------------------------------------------ corpora
def synthetic_corpus(n_train, n_test, k_true=10, vocabulary=200, seed=0):
    """The sentence-like corpus of the paper page: ``(y_train, len_train, y_test, len_test, V,
    truth)`` with ``y (N, 40) int32`` padded, lengths uniform on 10..40 and ``truth`` the true
    ``(start (K,), rows (K, K), emissions (K, V))``.  Vectorized over sentences (one step of all
    sentences at a time)."""
    rng = np.random.default_rng(seed)
    start = rng.dirichlet(np.full(k_true, 1.0))
    trans = rng.dirichlet(np.full(k_true, 0.5), size=k_true)
    probs = rng.dirichlet(np.full(vocabulary, 0.05), size=k_true)

    def draw(cdf, rows):  # one categorical draw per row of ``cdf[rows]``
        u = rng.random(len(rows))
        return np.minimum((cdf[rows] < u[:, None]).sum(1), cdf.shape[1] - 1)

    def simulate(n):
        lengths = rng.integers(10, 41, size=n).astype(np.int32)
        y = np.zeros((n, 40), np.int32)
        z = draw(np.cumsum(start)[None], np.zeros(n, int))
        t_cdf, e_cdf = np.cumsum(trans, 1), np.cumsum(probs, 1)
        for t in range(40):
            y[:, t] = np.where(t < lengths, draw(e_cdf, z), 0)
            z = draw(t_cdf, z)
        return y, lengths

    y_train, len_train = simulate(n_train)
    y_test, len_test = simulate(n_test)
    return y_train, len_train, y_test, len_test, vocabulary, (start, trans, probs)


def alice_corpus(test_fraction=0.1, seed=0):
    """The Alice sentences (:func:`numpyro_hdphmm.datasets.load_alice` cut after every ``EOS``),
    a random split by sentence: ``(y_train, len_train, y_test, len_test, V)``, ``y`` padded to the
    longest sentence."""
    import numpyro_hdphmm as nh

    alice = nh.datasets.load_alice()
    tokens = alice.tokens
    ends = np.flatnonzero(tokens == alice.vocabulary.index(alice.info["eos"]))
    starts = np.concatenate([[0], ends[:-1] + 1])
    lengths = (ends - starts + 1).astype(np.int32)
    y = np.zeros((len(lengths), lengths.max()), np.int32)
    for i, (s, n) in enumerate(zip(starts, lengths)):
        y[i, :n] = tokens[s:s + n]
    perm = np.random.default_rng(seed).permutation(len(lengths))
    n_test = int(round(test_fraction * len(lengths)))
    test, train = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    width = lambda idx: int(lengths[idx].max())
    return (y[train, :width(train)], lengths[train], y[test, :width(test)], lengths[test], len(alice.vocabulary))


def make_model(vocabulary, num_states=K_FIT):
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    emission = nh.emissions.Categorical(vocabulary, 0.1)

    def model(y, lengths=None):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=num_states), obs=y, lengths=lengths)

    return model, emission


def true_per_step(truth, emission, y, lengths):
    import numpyro_hdphmm as nh

    start, trans, probs = truth
    K = len(start)
    rows = np.zeros((1, K + 1, K + 1))
    rows[0, :K, :K], rows[0, K, :K] = trans, start
    ll = nh.diagnostics.predictive_log_likelihood({"y_trans": rows, "y_probs": probs[None]}, emission, y, lengths=lengths)
    return float(ll.log_likelihood) / float(np.sum(lengths))


# ------------------------------------------------------------------------------ the grid
def load_corpus(corpus, quick):
    """``(y, lengths, y_test, len_test, V, truth, passes, evaluations_per_pass)`` of one corpus as
    the grid runs it (``truth`` ``None`` for Alice)."""
    if corpus == "synthetic":
        n_train, n_test = (2000, 300) if quick else (10000, 1000)
        return synthetic_corpus(n_train, n_test) + ((2, 2) if quick else (4, 2))
    return alice_corpus() + (None,) + ((3, 1) if quick else (10, 1))


def make_scorer(model, y_test, len_test, num_states=K_FIT):
    """``score(state) -> float``: held-out nats per token under the plug-in HMM (the same for every
    variant), one compiled program per corpus and ``num_states``."""
    import jax

    import numpyro_hdphmm as nh

    svi = nh.infer.CollapsedSVI(model, num_states=num_states)
    svi.init(jax.random.key(0), y_test, len_test)
    score_jit = jax.jit(lambda p: svi.predictive_log_likelihood(p, y_test, len_test).per_step)
    return lambda state: float(score_jit(svi.get_params(state)))


class Runner:
    """The three variants at one ``M`` on one corpus: a compiled chunk of ``chunk`` updates per
    variant (``kappa`` traced), the shared initial state, the held-out scorer."""

    def __init__(self, model, y, lengths, batch_size, chunk, score, seed=0, num_states=K_FIT):
        import jax
        import jax.numpy as jnp
        from jax import lax

        import numpyro_hdphmm as nh
        from numpyro_hdphmm.infer.collapsed_svi import Minibatch, length_strata, scvi_update
        from numpyro_hdphmm.infer.plumbing.discovery import SequenceData

        self.jax, self.N, self.M, self.chunk, self.score = jax, len(lengths), batch_size, chunk, score
        svi = nh.infer.CollapsedSVI(model, num_states=num_states, batch_size=batch_size, merge=False)
        self.state0 = jax.block_until_ready(svi.init(jax.random.key(seed), y, lengths))
        t0 = time.perf_counter()  # the initialization again, compiled: its cost in the race by seconds
        jax.block_until_ready(svi.init(jax.random.key(seed), y, lengths))
        self.init_seconds = time.perf_counter() - t0
        base, emission = svi.config, svi.emission
        self.plan = length_strata(lengths, batch_size, y.shape[1], 3)
        x, valid = jax.vmap(emission.prepare)(jnp.asarray(y))
        valid = valid & (jnp.arange(y.shape[1]) < jnp.asarray(lengths)[:, None])
        self.strata = tuple(SequenceData(None, x[s.indices, :s.width], valid[s.indices, :s.width],
                                         jnp.asarray(lengths)[s.indices]) for s in self.plan)
        self.rng = np.random.default_rng(seed + 1)
        self.fns = {}
        for name, options in VARIANTS.items():
            config = base._replace(**options)

            def chunk_fn(state, strata, idx, kappa, config=config):
                cfg = config._replace(step_size=nh.infer.RobbinsMonro(1.0, kappa))

                def body(state, picks):
                    groups = tuple(Minibatch(SequenceData(None, d.x[p], d.valid[p], d.lengths[p]),
                                             jnp.asarray(s.num_sequences / s.batch_size, state.transition_counts.dtype))
                                   for s, d, p in zip(self.plan, strata, picks))
                    return scvi_update(state, groups, emission, cfg)

                return lax.scan(body, state, idx)

            idx = self.order(chunk)
            self.fns[name] = jax.jit(chunk_fn).lower(self.state0, self.strata, idx, 0.5).compile()

    def order(self, updates):
        """``(updates, M_b)`` sequence indices per stratum: consecutive blocks of fresh permutations."""
        out = []
        for s in self.plan:
            need = updates * s.batch_size
            perm = np.concatenate([self.rng.permutation(s.num_sequences) for _ in range(-(-need // s.num_sequences))])
            out.append(perm[:need].reshape(updates, s.batch_size).astype(np.int32))
        return tuple(out)

    def advance(self, name, state, idx, kappa):
        """One compiled chunk of ``name``'s updates on the minibatches ``idx``: ``(state, seconds)``."""
        t0 = time.perf_counter()
        state, _ = self.fns[name](state, self.strata, idx, kappa)
        self.jax.block_until_ready(state)
        return state, time.perf_counter() - t0

    def passes(self, chunks):
        return chunks * self.chunk * self.M / self.N

    def run(self, kappa, chunks):
        """Interleaved runs of the variants: ``{name: (chunks+1, 3) [passes, seconds, per-token LL]}``."""
        states = {n: self.state0 for n in VARIANTS}
        start_ll = self.score(self.state0)
        curves = {n: [(0.0, 0.0, start_ll)] for n in VARIANTS}
        for c in range(chunks):
            idx = self.order(self.chunk)
            for name in self.fns:
                states[name], elapsed = self.advance(name, states[name], idx, kappa)
                curves[name].append((self.passes(c + 1), curves[name][-1][1] + elapsed, self.score(states[name])))
        return {n: np.array(v) for n, v in curves.items()}


def ranking(curves, tie):
    """``(end, equal_time, t_equal)``: the ordered values of (SCVI-HDP, SCVI, SVI) and whether
    SCVI-HDP >= SCVI >= SVI up to ``tie``."""
    names = ("SCVI-HDP", "SCVI", "SVI")
    end = [float(curves[n][-1, 2]) for n in names]
    t_eq = float(min(curves[n][-1, 1] for n in names))
    at = [float(np.interp(t_eq, curves[n][:, 1], curves[n][:, 2])) for n in names]
    ok = lambda v: bool(v[0] >= v[1] - tie and v[1] >= v[2] - tie)
    return (end, ok(end)), (at, ok(at)), t_eq


def run_settings(corpus, data, settings, passes, args, log, num_states=K_FIT, part="grid"):
    """The three variants in each setting ``(M, kappas)`` for ``passes`` passes (interleaved,
    :meth:`Runner.run`): one row per ``(M, kappa)`` with the values at the end, at equal time and,
    for longer runs than the grid's, after the grid's number of passes."""
    y, lengths, y_test, len_test, V, truth, grid_passes, per_pass = data
    model, emission = make_model(V, num_states)
    ceiling = None if truth is None else true_per_step(truth, emission, y_test, len_test)
    log(f"\n### {part}, {corpus}: {len(lengths)} training sentences ({int(lengths.sum())} tokens), {len(len_test)} "
        f"held out ({int(len_test.sum())} tokens), V = {V}, K = {num_states}, {passes} passes"
        + (f"; true parameters {ceiling:.4f} nats/token" if ceiling is not None else ""))
    score = make_scorer(model, y_test, len_test, num_states)
    rows = []
    for M, kappas in settings:
        M_eff = min(M, len(lengths))
        updates = max(len(lengths) // M_eff, 1)
        chunk = max(updates // per_pass, 1)
        chunks = max(passes * updates // chunk, 1)
        t0 = time.perf_counter()
        runner = Runner(model, y, lengths, M_eff, chunk, score, num_states=num_states)
        log(f"M = {M_eff}: {updates} updates per pass, {len(runner.plan)} length strata, "
            f"init + 3 compilations {time.perf_counter() - t0:.1f} s")
        for kappa in kappas:
            curves = runner.run(kappa, chunks)
            (end, ok_end), (at, ok_at), t_eq = ranking(curves, args.tie)
            secs = {n: float(curves[n][-1, 1] / curves[n][-1, 0]) for n in VARIANTS}
            grid_chunks = min(max(grid_passes * updates // chunk, 1), chunks)  # the grid's run of this setting
            at_grid = [float(curves[n][grid_chunks, 2]) for n in ("SCVI-HDP", "SCVI", "SVI")]
            rows.append(dict(corpus=corpus, M=M_eff, kappa=kappa, K=num_states, end=end, ok_end=ok_end, at=at,
                             ok_at=ok_at, t_eq=t_eq, secs_per_pass=secs, passes=float(curves["SVI"][-1, 0]),
                             updates=chunks * chunk, grid_passes=grid_passes, at_grid=at_grid,
                             curves={n: c.tolist() for n, c in curves.items()}))
            log(f"  M={M_eff:5d} kappa={kappa}: end HDP {end[0]:.4f} SCVI {end[1]:.4f} SVI {end[2]:.4f} "
                f"[{'agrees' if ok_end else 'DISAGREES'}]; at {t_eq:.2f} s HDP {at[0]:.4f} SCVI {at[1]:.4f} "
                f"SVI {at[2]:.4f} [{'agrees' if ok_at else 'DISAGREES'}]; s/pass "
                + " ".join(f"{n} {v:.3f}" for n, v in secs.items()))
    return rows, ceiling


def run_grid(corpus, args, log):
    data = load_corpus(corpus, args.quick)
    settings = [(M, (0.5, 0.9) if args.quick else (0.5, 0.7, 0.9)) for M in ((100,) if args.quick else (10, 100, 1000))]
    return run_settings(corpus, data, settings, data[6], args, log)


# ------------------------------------------------------------------------------ longer runs, K = 45
def long_runs(corpus, args, log):
    """The settings where SVI led in the grid (``M = 1000``; ``kappa = 0.9``; and ``M = 100, kappa
    = 0.7``, where it led on Alice) with ``--long-factor`` times the grid's passes."""
    data = load_corpus(corpus, args.quick)
    settings = ([(100, (0.7, 0.9))] if args.quick
                else [(10, (0.9,)), (100, (0.7, 0.9)), (1000, (0.5, 0.7, 0.9))])
    return run_settings(corpus, data, settings, args.long_factor * data[6], args, log, part="longer runs")


def k45(args, log):
    """``K = 45`` (the paper's WSJ truncation) on the Alice sentences, the grid's passes."""
    data = load_corpus("alice", args.quick)
    settings = [(100, (0.5,))] if args.quick else [(10, (0.5, 0.7)), (100, (0.5, 0.7))]
    return run_settings("alice", data, settings, data[6], args, log, num_states=45, part="K = 45")[0]


# ------------------------------------------------------------------------------ MCMC at equal time
class VariantRun:
    """One variant of a :class:`Runner` in a race by seconds.  Its ``c``-th chunk uses the race's
    ``c``-th minibatch order (``orders``, shared by the variants, drawn on first use); the clock
    starts at the (compiled) initialization's seconds."""

    def __init__(self, runner, name, kappa, orders):
        self.runner, self.name, self.kappa, self.orders = runner, name, kappa, orders
        self.state, self.clock = runner.state0, runner.init_seconds
        self.points = [(0.0, self.clock, runner.score(runner.state0))]  # (passes, seconds, per-token LL)

    def advance(self):
        r, c = self.runner, len(self.points) - 1
        while len(self.orders) <= c:
            self.orders.append(r.order(r.chunk))
        self.state, elapsed = r.advance(self.name, self.state, self.orders[c], self.kappa)
        self.clock += elapsed
        self.points.append((r.passes(c + 1), self.clock, r.score(self.state)))

    def at(self, seconds):
        """``(per-token LL, passes)`` of the last evaluation at or before ``seconds``."""
        done = [p for p in self.points if p[1] <= seconds]
        return (done[-1][2], done[-1][0]) if done else (None, 0)


class ChainsRun:
    """An MCMC kernel's vectorized chains in a race by seconds.  ``kernel.init`` and one sweep are
    run once to compile (the sweep's result discarded); the clock starts at the seconds of a second
    (compiled) ``init`` and adds each timed sweep.  After each sweep, outside the clock,
    ``score_draws(z) -> (chains, N_test)`` scores every chain's draw per held-out sequence."""

    def __init__(self, kernel, model_args, num_chains, seed, score_draws, tokens):
        import jax

        self.jax, self.kernel, self.args, self.score_draws, self.tokens = jax, kernel, model_args, score_draws, tokens
        keys = jax.random.split(jax.random.key(seed), num_chains)
        t0 = time.perf_counter()
        state = jax.block_until_ready(kernel.init(keys, 0, None, model_args, {}))
        jax.block_until_ready(kernel.sample(state, model_args, {}))  # compiles the sweep
        self.compile_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.state = jax.block_until_ready(kernel.init(keys, 0, None, model_args, {}))
        self.init_seconds = self.clock = time.perf_counter() - t0
        self.points, self.per_sequence = [], []  # (sweeps, seconds); (chains, N_test) per sweep

    def advance(self):
        t0 = time.perf_counter()
        self.state = self.jax.block_until_ready(self.kernel.sample(self.state, self.args, {}))
        self.clock += time.perf_counter() - t0
        self.points.append((len(self.points) + 1, self.clock))
        self.per_sequence.append(self.score_draws(self.state.z))

    def at(self, seconds):
        """``(per-token LL, sweeps)`` at ``seconds``: of the ``n`` sweeps done by then, the draws of
        the last ``ceil(n / 2)`` (the first half discarded as burn-in) of every chain; per held-out
        sequence the log of the mean predictive probability over these draws, summed, per token."""
        from scipy.special import logsumexp

        n = sum(p[1] <= seconds for p in self.points)
        if n == 0:
            return None, 0
        kept = np.concatenate(self.per_sequence[n // 2:n])  # (draws, N_test)
        return float(np.sum(logsumexp(kept, axis=0) - np.log(len(kept))) / self.tokens), n

    def last_draws(self):
        """The last sweep's draws scored alone, per chain (nats per token)."""
        return self.per_sequence[-1].sum(-1) / self.tokens


def race(runs, seconds):
    """Advance the run with the least clock, one chunk or sweep at a time, until every clock has
    reached ``seconds`` and every run has at least two evaluations (load changes of the shared
    machine hit every method alike)."""
    while True:
        behind = [r for r in runs if r.clock < seconds or len(r.points) < 2]
        if not behind:
            return
        min(behind, key=lambda r: r.clock).advance()


def mcmc_equal_time(corpus, args, log):
    """The variational fits ``--mcmc-variants`` (default SVI, SCVI and SCVI-HDP) at ``M = --mcmc-batch``, ``kappa = --mcmc-kappa`` (the grid's best
    setting on both corpora) against the MCMC kernels ``--kernels`` (``--chains`` vectorized chains)
    on the same model and data, raced for ``--mcmc-seconds`` seconds per method."""
    import numpyro_hdphmm as nh

    data = load_corpus(corpus, args.quick)
    y, lengths, y_test, len_test, V, truth, grid_passes, per_pass = data
    model, emission = make_model(V)
    seconds = args.mcmc_seconds[0 if corpus == "synthetic" else 1]
    log(f"\n### MCMC at equal time, {corpus}: {len(lengths)} training sentences, M = {args.mcmc_batch}, "
        f"kappa = {args.mcmc_kappa}, kernels {', '.join(args.kernels)} ({args.chains} chains), {seconds:.0f} s each")
    M = min(args.mcmc_batch, len(lengths))
    updates = max(len(lengths) // M, 1)
    runner = Runner(model, y, lengths, M, max(updates // per_pass, 1), make_scorer(model, y_test, len_test))
    orders = []
    runs = {name: VariantRun(runner, name, args.mcmc_kappa, orders) for name in args.mcmc_variants}

    def score_draws(z):
        draws = {k: z[k] for k in ("y_trans", "y_probs")}
        return np.asarray(nh.diagnostics.predictive_log_likelihood(draws, emission, y_test, lengths=len_test,
                                                                     renormalize=True).per_sequence)

    for name in args.kernels:
        runs[name] = ChainsRun(getattr(nh.infer, name)(model), (y, lengths), args.chains, 1, score_draws,
                               int(np.sum(len_test)))
        log(f"  {name}: compilation + first init and sweep {runs[name].compile_seconds:.1f} s, init "
            f"{runs[name].init_seconds:.2f} s")
    t0 = time.perf_counter()
    race(list(runs.values()), seconds)
    log(f"  race: {time.perf_counter() - t0:.0f} s of wall time (scoring included)")
    # the grid's run time of this setting: the shortest of the variants' times for the grid's passes
    grid_chunks = max(grid_passes * updates // runner.chunk, 1)
    t_grid = min(runs[n].points[min(grid_chunks, len(runs[n].points) - 1)][1] for n in args.mcmc_variants)
    times = sorted({t_grid, seconds / 4, seconds / 2, seconds})
    table = {name: [run.at(t) for t in times] for name, run in runs.items()}
    for name, vals in table.items():
        log(f"  {name:22s} " + "  ".join(f"{t:6.1f}s: " + ("    -    " if v is None else f"{v:.4f}") + f" ({n:g})"
                                         for t, (v, n) in zip(times, vals)))
    last = {name: runs[name].last_draws().tolist() for name in args.kernels}
    ceiling = None if truth is None else true_per_step(truth, emission, y_test, len_test)
    return dict(corpus=corpus, M=M, kappa=args.mcmc_kappa, seconds=seconds, t_grid=t_grid, grid_passes=grid_passes,
                times=times, table=table, last_draws=last, ceiling=ceiling, chains=args.chains,
                init={n: r.init_seconds if n in args.kernels else runner.init_seconds for n, r in runs.items()},
                sweeps={n: len(runs[n].points) for n in args.kernels},
                curves={n: (r.points if n in VARIANTS else [(p[0], p[1], r.at(p[1])[0]) for p in r.points])
                        for n, r in runs.items()})

# ------------------------------------------------------------------------------ throughput / memory
def throughput(args, log):
    """Seconds per pass of ``CollapsedSVI.run`` over the Alice training sentences, after compilation
    (a first ``run`` of one pass compiles; the next passes are timed, interleaved over the variants)."""
    import jax

    import numpyro_hdphmm as nh

    y, lengths, _, _, V = alice_corpus()
    model, _ = make_model(V)
    out = {}
    repeats = 2 if args.quick else 3
    for M in ((100,) if args.quick else (10, 100, 1000)):
        fits = {}
        for name, options in VARIANTS.items():
            svi = nh.infer.CollapsedSVI(model, num_states=K_FIT, batch_size=M,
                                        step_size=nh.infer.RobbinsMonro(1.0, 0.7), **options)
            updates = max(len(lengths) // M, 1)
            result = svi.run(jax.random.key(0), updates, y, lengths, progress_bar=False)
            jax.block_until_ready(result.state)
            fits[name] = (svi, updates, result.state, [])
        for _ in range(repeats):
            for name, (svi, updates, state, times) in fits.items():
                t0 = time.perf_counter()
                result = svi.run(jax.random.key(0), updates, y, lengths, progress_bar=False, init_state=state)
                jax.block_until_ready(result.state)
                times.append(time.perf_counter() - t0)
                fits[name] = (svi, updates, result.state, times)
        for name, (_, updates, _, times) in fits.items():
            out[(M, name)] = (min(times), float(np.median(times)), updates)
            log(f"  Alice, {name:8s} M={M:5d} ({updates} updates): {min(times):.3f} s per pass (min of {repeats}), "
                f"median {np.median(times):.3f} s")
    return out


def _memory_worker(n_train, passes):
    """One corpus size in this (fresh) process: peak RSS and state / live-buffer bytes (JSON on stdout)."""
    import jax

    import numpyro_hdphmm as nh

    warnings.filterwarnings("ignore")
    y, lengths, _, _, V, _ = synthetic_corpus(n_train, 10)
    model, _ = make_model(V)
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # MiB (Linux: KiB)
    svi = nh.infer.CollapsedSVI(model, num_states=K_FIT, batch_size=100, step_size=nh.infer.RobbinsMonro(1.0, 0.7))
    updates = n_train // 100
    result = svi.run(jax.random.key(0), updates, y, lengths, progress_bar=False)
    jax.block_until_ready(result.state)
    after_compile = peak()
    state = result.state
    for _ in range(passes):
        state = svi.run(jax.random.key(0), updates, y, lengths, progress_bar=False, init_state=state).state
        jax.block_until_ready(state)
    nbytes = lambda tree: int(sum(np.asarray(a).nbytes for a in jax.tree_util.tree_leaves(tree)
                                  if hasattr(a, "dtype") and not jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)))
    live = int(sum(a.nbytes for a in jax.live_arrays()))
    print(json.dumps(dict(n_train=n_train, tokens=int(lengths.sum()), data_mib=(y.nbytes + lengths.nbytes) / 2**20,
                          after_compile_mib=after_compile, after_passes_mib=peak(), state_bytes=nbytes(state),
                          live_mib=live / 2**20)))


def memory(args, log):
    sizes = (2000, 8000) if args.quick else (10000, 40000)
    passes = 2 if args.quick else 3
    out = []
    for n in sizes:
        cmd = [sys.executable, "-m", "benchmarks.reproductions", "collapsed-svi", "--memory-worker", str(n), "--memory-passes", str(passes)]
        res = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
        if res.returncode or not line:
            log(f"  memory worker N={n} failed: {res.stderr[-2000:]}")
            continue
        rec = json.loads(line[-1])
        out.append(rec)
        log(f"  N = {n} ({rec['tokens']} tokens, data {rec['data_mib']:.1f} MiB): peak RSS {rec['after_compile_mib']:.0f} MiB "
            f"after compilation, {rec['after_passes_mib']:.0f} MiB after {passes} more passes; state "
            f"{rec['state_bytes']} bytes; live JAX buffers {rec['live_mib']:.1f} MiB")
    return out


# ------------------------------------------------------------------------------ report
TITLES = {"synthetic": "Synthetic corpus (10 true states, V = 200, sentences of 10-40 words)",
          "alice": "Alice sentences (90% / 10% split by sentence, V = 1,487)"}
MACHINE = "float32, CPU, a shared 2-core machine under load from other jobs, so the seconds are noisy"


def ranking_tables(rows, ceilings, args):
    """Per corpus: the three variants' values at the end and at equal time per setting, and the
    counts of settings in the paper's order.  Rows of runs longer than the grid's also show the
    values after the grid's number of passes."""
    lines = []
    for corpus in ("synthetic", "alice"):
        sub = [r for r in rows if r["corpus"] == corpus]
        if not sub:
            continue
        longer = sub[0]["passes"] > sub[0]["grid_passes"]
        lines.append(f"\n**{TITLES[corpus]}**, K = {sub[0]['K']}, {sub[0]['passes']:.0f} passes"
                     + (f"; true parameters {ceilings[corpus]:.4f}" if ceilings.get(corpus) is not None else "") + ":\n")
        head, rule = "| M | kappa |", "|---|---|"
        if longer:
            head += f" updates | after {sub[0]['grid_passes']} passes: SCVI-HDP | SCVI | SVI | end: SCVI-HDP |"
            rule += "---|---|---|---|---|"
        else:
            head += " end: SCVI-HDP |"
            rule += "---|"
        lines.append(head + " SCVI | SVI | ranking | equal time (s) | SCVI-HDP | SCVI | SVI | ranking | "
                     "s/pass SVI / SCVI / SCVI-HDP |")
        lines.append(rule + "---|---|---|---|---|---|---|---|---|")
        for r in sub:
            s = r["secs_per_pass"]
            cells = [str(r["M"]), str(r["kappa"])]
            if longer:
                cells += [str(r["updates"])] + [f"{v:.4f}" for v in r["at_grid"]]
            cells += [f"{v:.4f}" for v in r["end"]] + ["agrees" if r["ok_end"] else "**no**", f"{r['t_eq']:.2f}"]
            cells += [f"{v:.4f}" for v in r["at"]] + ["agrees" if r["ok_at"] else "**no**",
                                                       f"{s['SVI']:.3f} / {s['SCVI']:.3f} / {s['SCVI-HDP']:.3f}"]
            lines.append("| " + " | ".join(cells) + " |")
        n_end, n_at = sum(r["ok_end"] for r in sub), sum(r["ok_at"] for r in sub)
        pair = lambda key, i, j: sum(r[key][i] >= r[key][j] - args.tie for r in sub)
        lines.append(f"\nFull ranking at the end: {n_end} of {len(sub)} settings; at equal time: {n_at} of {len(sub)}. "
                     f"SCVI >= SVI: {pair('end', 1, 2)} / {len(sub)} at the end, {pair('at', 1, 2)} / {len(sub)} at equal "
                     f"time; SCVI-HDP >= SCVI: {pair('end', 0, 1)} / {len(sub)} at the end, {pair('at', 0, 1)} / {len(sub)} "
                     "at equal time.")
    return lines


def markdown(rows, ceilings, thr, mem, args, total):
    lines = []
    grid = "M = 100, kappa in {0.5, 0.9} (quick)" if args.quick else "M in {10, 100, 1000} x kappa in {0.5, 0.7, 0.9}"
    lines.append(f"Stochastic collapsed VI (`CollapsedSVI`, {grid}, K = {K_FIT}, the paper's priors; "
                 f"{MACHINE}: the "
                 "three variants of a setting run interleaved). Held-out per-token log-likelihood (nats; higher "
                 f"is better); the paper's ranking SCVI-HDP >= SCVI >= SVI counted as agreeing up to {args.tie} "
                 "nats per token; \"equal time\": each curve interpolated at the shortest run's total seconds "
                 f"(compilation excluded). Whole run: {total / 60:.1f} min.")
    lines += ranking_tables(rows, ceilings, args)
    if thr:
        lines.append("\n**Throughput** (`CollapsedSVI.run`, one pass over the Alice training sentences after "
                     "compilation; target: under 1 s on 2 cores):\n")
        lines.append("| M | updates per pass | SVI (s) | SCVI (s) | SCVI-HDP (s) |")
        lines.append("|---|---|---|---|---|")
        for M in sorted({m for m, _ in thr}):
            lines.append(f"| {M} | {thr[(M, 'SVI')][2]} | " + " | ".join(
                f"{thr[(M, n)][0]:.3f} (median {thr[(M, n)][1]:.3f})" for n in VARIANTS) + " |")
        worst = max(v[1] for v in thr.values())
        lines.append(f"\nSlowest median: {worst:.3f} s per pass: the target is "
                     f"{'met' if worst < 1.0 else '**not met**'} in every cell.")
    if mem:
        lines.append("\n**Memory** (synthetic corpus, M = 100, a fresh process per size; peak resident set size "
                     "by `resource.getrusage`):\n")
        lines.append("| training sentences | tokens | data (MiB) | peak RSS after compilation (MiB) | after more passes (MiB) | state (bytes) | live JAX buffers (MiB) |")
        lines.append("|---|---|---|---|---|---|---|")
        for r in mem:
            lines.append(f"| {r['n_train']} | {r['tokens']} | {r['data_mib']:.1f} | {r['after_compile_mib']:.0f} | "
                         f"{r['after_passes_mib']:.0f} | {r['state_bytes']} | {r['live_mib']:.1f} |")
    return "\n".join(lines)


def mcmc_markdown(results, args):
    lines = [f"The variational fits (`CollapsedSVI`) and the MCMC kernels ({args.chains} vectorized chains, "
             "default `init_strategy`, exact hyperparameter updates) on the grid's model and data ("
             f"`HDPHMM`, `max_states = {K_FIT}`, the paper's priors; {MACHINE}). The methods run in one process as a "
             "race: the one with the least seconds so far advances by one chunk of updates (half a pass of the "
             "synthetic corpus, one pass of Alice) or one sweep of all chains. Clock: compilation excluded for "
             "every method (each program compiled and run once beforehand), initialization included (column "
             "\"init\"), held-out scoring excluded. Value at `t` seconds, in nats per held-out token: for a "
             "variational fit, the plug-in HMM's (`CollapsedSVI.predictive_log_likelihood`) at its last "
             "evaluation by `t` (passes in brackets); for a kernel, of the `n` sweeps done by `t` (in brackets), "
             "the draws of the last `ceil(n / 2)` sweeps of every chain (the first half dropped as burn-in), "
             "per held-out sentence the log of the mean over these draws of `p(sentence | draw)` (forward "
             "algorithm, states summed out: `nh.diagnostics.predictive_log_likelihood(..., renormalize=True)"
             ".per_sequence`), summed over sentences, per token; \"-\": no sweep done yet. The first column is "
             "the grid's run time of this setting (the fastest variant's seconds for the grid's passes); the last "
             "is each method's last evaluation (a kernel runs at least two sweeps, past the budget if need be).\n"]
    for r in results:
        lines.append(f"**{TITLES[r['corpus']]}**, M = {r['M']}, kappa = {r['kappa']}, {r['seconds']:.0f} s per method"
                     + (f"; true parameters {r['ceiling']:.4f}" if r["ceiling"] is not None else "") + ":\n")
        lines.append("| method | init (s) | " + " | ".join(
            f"{t:.1f} s" + (f" (grid's {r['grid_passes']} passes)" if t == r["t_grid"] else "")
            for t in r["times"]) + " | last evaluation |")
        lines.append("|---|---|" + "---|" * (len(r["times"]) + 1))
        for name, vals in r["table"].items():
            units = ("pass", "passes") if name in VARIANTS else ("sweep", "sweeps")
            count = lambda n: (f"{n:.3g}" if n < 100 else f"{n:.0f}") + " " + units[n != 1]  # noqa: E731
            cells = ["-" if v is None else f"{v:.4f} ({count(n)})" for v, n in vals]
            n, t, v = r["curves"][name][-1]
            cells.append(f"{v:.4f} ({count(n)}, {t:.0f} s)")
            lines.append(f"| {name} | {r['init'][name]:.2f} | " + " | ".join(cells) + " |")
        lines.append("\nThe last sweep's draws alone, per chain: " + "; ".join(
            f"{name} " + ", ".join(f"{v:.4f}" for v in vals) for name, vals in r["last_draws"].items()) + ".\n")
    return "\n".join(lines).rstrip()


def runs_markdown(rows, ceilings, args, what):
    return "\n".join([f"{what} (`CollapsedSVI`, the paper's priors; {MACHINE}: the three variants of a setting run "
                      "interleaved). Held-out per-token log-likelihood (nats); ranking and \"equal time\" as in "
                      "\"Stochastic collapsed VI: the paper's grid\"."] + ranking_tables(rows, ceilings, args))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    parser.add_argument("--tie", type=float, default=0.002)
    parser.add_argument("--corpora", default="synthetic,alice")
    parser.add_argument("--skip", default="",
                        help="comma list of parts to skip: grid, throughput, memory, mcmc, long, k45")
    parser.add_argument("--kernels", default="WeakLimitGibbs,BeamSampler,DirectAssignmentGibbs",
                        help="MCMC kernels of the equal-time part (comma list)")
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--mcmc-seconds", default="60,40", help="seconds per method: synthetic,alice")
    parser.add_argument("--mcmc-batch", type=int, default=10)
    parser.add_argument("--mcmc-kappa", type=float, default=0.5)
    parser.add_argument("--mcmc-variants", default=",".join(VARIANTS), help="variational fits of the race")
    parser.add_argument("--mcmc-heading", default=MCMC_SECTION, help="the section --write writes the race to")
    parser.add_argument("--long-factor", type=int, default=10, help="passes of the longer runs / the grid's")
    parser.add_argument("--json", default=None, help="also dump the curves to this JSON file")
    parser.add_argument("--memory-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-passes", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)  # a --quick run checks the script, it records nothing
    args.kernels = args.kernels.split(",")
    args.mcmc_variants = args.mcmc_variants.split(",")
    args.mcmc_seconds = [float(s) for s in args.mcmc_seconds.split(",")]
    warnings.filterwarnings("ignore", message=".*went to a state beyond the capacity")
    if args.memory_worker is not None:
        _memory_worker(args.memory_worker, args.memory_passes)
        return
    log = lambda s: print(s, flush=True)
    skip = set(filter(None, args.skip.split(",")))
    corpora = args.corpora.split(",")
    start = time.perf_counter()
    rows, ceilings = [], {}
    if "grid" not in skip:
        for corpus in corpora:
            r, ceiling = run_grid(corpus, args, log)
            rows += r
            ceilings[corpus] = ceiling
    thr = mem = None
    if "throughput" not in skip:
        log("\n### throughput")
        thr = throughput(args, log)
    if "memory" not in skip:
        log("\n### memory")
        mem = memory(args, log)
    sections, partial = {}, set()
    if {"grid", "throughput", "memory"} - skip:
        sections[SECTION] = markdown(rows, ceilings, thr, mem, args, time.perf_counter() - start)
        if skip & {"grid", "throughput", "memory"}:  # the grid's section holds all three: not written
            partial.add(SECTION)
    results = {}
    if "mcmc" not in skip:
        results["mcmc"] = [mcmc_equal_time(corpus, args, log) for corpus in corpora]
        sections[args.mcmc_heading] = mcmc_markdown(results["mcmc"], args)
    if "long" not in skip:
        results["long"] = []
        for corpus in corpora:
            r, ceilings[corpus] = long_runs(corpus, args, log)
            results["long"] += r
        sections[LONG_SECTION] = runs_markdown(
            results["long"], ceilings, args,
            f"The settings where SVI led in the grid, run for {args.long_factor} times the grid's passes")
    if "k45" not in skip:
        results["k45"] = k45(args, log)
        sections[K45_SECTION] = runs_markdown(results["k45"], ceilings, args,
                                              "K = 45 (the paper's WSJ truncation) on the Alice sentences")
    log(f"\nwhole run: {(time.perf_counter() - start) / 60:.1f} min")
    argv, i = [], 1
    while i < len(sys.argv):  # the command for the record, without --write / --json FILE
        if sys.argv[i] == "--json":
            i += 1
        elif sys.argv[i] != "--write" and not sys.argv[i].startswith("--json="):
            argv.append(sys.argv[i])
        i += 1
    cmd = shlex.join(["python", "-m", "benchmarks.reproductions", "collapsed-svi"] + argv)
    for section, text in sections.items():
        print(f"\n{section}\n\n{text}")
        if args.write and section not in partial:

            print("wrote", _save(section, cmd, text))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(rows=rows, ceilings=ceilings, **results), fh)


if __name__ == "__main__":
    main()
