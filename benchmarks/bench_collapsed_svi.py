"""The paper-reproduction grid of stochastic collapsed VI (Wang & Blunsom 2014; issue 15).

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

Usage: ``python benchmarks/bench_collapsed_svi.py [--quick] [--write] [--tie 0.002]``
(``--quick``: ``M = 100``, ``kappa`` in {0.5, 0.9}, 2,000 synthetic training sentences, fewer
passes; ``--write`` updates the "Stochastic collapsed VI: the paper's grid" section of
``docs/benchmarks.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np

SECTION = "## Stochastic collapsed VI: the paper's grid"
VARIANTS = {"SVI": dict(hdp=False, collapsed=False), "SCVI": dict(hdp=False, collapsed=True),
            "SCVI-HDP": dict(hdp=True, collapsed=True)}
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


def make_model(vocabulary):
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    emission = nh.emissions.Categorical(vocabulary, 0.1)

    def model(y, lengths=None):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.1))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 0.1))
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=K_FIT), obs=y, lengths=lengths)

    return model, emission


def true_per_token(truth, emission, y, lengths):
    import numpyro_hdphmm as nh

    start, trans, probs = truth
    K = len(start)
    rows = np.zeros((1, K + 1, K + 1))
    rows[0, :K, :K], rows[0, K, :K] = trans, start
    ll = nh.diagnostics.predictive_log_likelihood({"y_trans": rows, "y_probs": probs[None]}, emission, y, lengths=lengths)
    return float(ll.log_likelihood) / float(np.sum(lengths))


# ------------------------------------------------------------------------------ the grid
class Runner:
    """The three variants at one ``M`` on one corpus: a compiled chunk of ``chunk`` updates per
    variant (``kappa`` traced), the shared initial state, the held-out scorer."""

    def __init__(self, model, y, lengths, batch_size, chunk, score, seed=0):
        import jax
        import jax.numpy as jnp
        from jax import lax

        import numpyro_hdphmm as nh
        from numpyro_hdphmm.infer.collapsed_svi import Minibatch, length_strata, scvi_update
        from numpyro_hdphmm.infer.discovery import SequenceData

        self.jax, self.N, self.M, self.chunk, self.score = jax, len(lengths), batch_size, chunk, score
        svi = nh.infer.CollapsedSVI(model, num_states=K_FIT, batch_size=batch_size)
        self.state0 = svi.init(jax.random.key(seed), y, lengths)
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

    def run(self, kappa, chunks):
        """Interleaved runs of the variants: ``{name: (chunks+1, 3) [passes, seconds, per-token LL]}``."""
        jax = self.jax
        states = {n: self.state0 for n in VARIANTS}
        start_ll = self.score(self.state0)
        curves = {n: [(0.0, 0.0, start_ll)] for n in VARIANTS}
        for c in range(chunks):
            idx = self.order(self.chunk)
            for name, fn in self.fns.items():
                t0 = time.perf_counter()
                state, _ = fn(states[name], self.strata, idx, kappa)
                jax.block_until_ready(state)
                elapsed = time.perf_counter() - t0
                states[name] = state
                passes = (c + 1) * self.chunk * self.M / self.N
                curves[name].append((passes, curves[name][-1][1] + elapsed, self.score(state)))
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


def run_grid(corpus, args, log):
    import jax

    import numpyro_hdphmm as nh

    if corpus == "synthetic":
        n_train, n_test = (2000, 300) if args.quick else (10000, 1000)
        y, lengths, y_test, len_test, V, truth = synthetic_corpus(n_train, n_test)
        passes, per_pass = (2, 2) if args.quick else (4, 2)
    else:
        y, lengths, y_test, len_test, V = alice_corpus()
        truth = None
        passes, per_pass = (3, 1) if args.quick else (10, 1)
    model, emission = make_model(V)
    ceiling = None if truth is None else true_per_token(truth, emission, y_test, len_test)
    log(f"\n### {corpus}: {len(lengths)} training sentences ({int(lengths.sum())} tokens), {len(len_test)} held out "
        f"({int(len_test.sum())} tokens), V = {V}, K = {K_FIT}, {passes} passes"
        + (f"; true parameters {ceiling:.4f} nats/token" if ceiling is not None else ""))

    # the held-out scorer: the plug-in HMM (the same for every variant), one compiled program per corpus
    scorer_svi = nh.infer.CollapsedSVI(model, num_states=K_FIT)
    scorer_svi.init(jax.random.key(0), y_test, len_test)
    score_jit = jax.jit(lambda p: scorer_svi.predictive_log_likelihood(p, y_test, len_test).per_token)
    score = lambda state: float(score_jit(scorer_svi.get_params(state)))

    rows = []
    batch_sizes = (100,) if args.quick else (10, 100, 1000)
    kappas = (0.5, 0.9) if args.quick else (0.5, 0.7, 0.9)
    for M in batch_sizes:
        M_eff = min(M, len(lengths))
        updates = max(len(lengths) // M_eff, 1)
        chunk = max(updates // per_pass, 1)
        chunks = max(passes * updates // chunk, 1)
        t0 = time.perf_counter()
        runner = Runner(model, y, lengths, M_eff, chunk, score)
        log(f"M = {M_eff}: {updates} updates per pass, {len(runner.plan)} length strata, "
            f"init + 3 compilations {time.perf_counter() - t0:.1f} s")
        for kappa in kappas:
            curves = runner.run(kappa, chunks)
            (end, ok_end), (at, ok_at), t_eq = ranking(curves, args.tie)
            secs = {n: float(curves[n][-1, 1] / curves[n][-1, 0]) for n in VARIANTS}
            rows.append(dict(corpus=corpus, M=M_eff, kappa=kappa, end=end, ok_end=ok_end, at=at, ok_at=ok_at,
                             t_eq=t_eq, secs_per_pass=secs, passes=float(curves["SVI"][-1, 0]),
                             curves={n: c.tolist() for n, c in curves.items()}))
            log(f"  M={M_eff:5d} kappa={kappa}: end HDP {end[0]:.4f} SCVI {end[1]:.4f} SVI {end[2]:.4f} "
                f"[{'agrees' if ok_end else 'DISAGREES'}]; at {t_eq:.2f} s HDP {at[0]:.4f} SCVI {at[1]:.4f} "
                f"SVI {at[2]:.4f} [{'agrees' if ok_at else 'DISAGREES'}]; s/pass "
                + " ".join(f"{n} {v:.3f}" for n, v in secs.items()))
    return rows, ceiling


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
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-worker", str(n), "--memory-passes", str(passes)]
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
def markdown(rows, ceilings, thr, mem, args, total):
    lines = []
    grid = "M = 100, kappa in {0.5, 0.9} (quick)" if args.quick else "M in {10, 100, 1000} x kappa in {0.5, 0.7, 0.9}"
    lines.append(f"Stochastic collapsed VI (`CollapsedSVI`, {grid}, K = {K_FIT}, the paper's priors; "
                 "float32, CPU, a shared 2-core machine under load from other jobs, so the seconds are noisy: the "
                 "three variants of a setting run interleaved). Held-out per-token log-likelihood (nats; higher "
                 f"is better); the paper's ranking SCVI-HDP >= SCVI >= SVI counted as agreeing up to {args.tie} "
                 "nats per token; \"equal time\": each curve interpolated at the shortest run's total seconds "
                 f"(compilation excluded). Whole run: {total / 60:.1f} min.")
    for corpus in ("synthetic", "alice"):
        sub = [r for r in rows if r["corpus"] == corpus]
        if not sub:
            continue
        title = ("Synthetic corpus (10 true states, V = 200, sentences of 10-40 words)" if corpus == "synthetic"
                 else "Alice sentences (90% / 10% split by sentence, V = 1,487)")
        lines.append(f"\n**{title}**, {sub[0]['passes']:.0f} passes"
                     + (f"; true parameters {ceilings[corpus]:.4f}" if ceilings.get(corpus) is not None else "") + ":\n")
        lines.append("| M | kappa | end: SCVI-HDP | SCVI | SVI | ranking | equal time (s) | SCVI-HDP | SCVI | SVI | ranking | s/pass SVI / SCVI / SCVI-HDP |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sub:
            s = r["secs_per_pass"]
            lines.append(f"| {r['M']} | {r['kappa']} | {r['end'][0]:.4f} | {r['end'][1]:.4f} | {r['end'][2]:.4f} | "
                         f"{'agrees' if r['ok_end'] else '**no**'} | {r['t_eq']:.2f} | {r['at'][0]:.4f} | {r['at'][1]:.4f} | "
                         f"{r['at'][2]:.4f} | {'agrees' if r['ok_at'] else '**no**'} | "
                         f"{s['SVI']:.3f} / {s['SCVI']:.3f} / {s['SCVI-HDP']:.3f} |")
        n_end, n_at = sum(r["ok_end"] for r in sub), sum(r["ok_at"] for r in sub)
        pair = lambda key, i, j: sum(r[key][i] >= r[key][j] - args.tie for r in sub)
        lines.append(f"\nFull ranking at the end: {n_end} of {len(sub)} settings; at equal time: {n_at} of {len(sub)}. "
                     f"SCVI >= SVI: {pair('end', 1, 2)} / {len(sub)} at the end, {pair('at', 1, 2)} / {len(sub)} at equal "
                     f"time; SCVI-HDP >= SCVI: {pair('end', 0, 1)} / {len(sub)} at the end, {pair('at', 0, 1)} / {len(sub)} "
                     "at equal time.")
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--tie", type=float, default=0.002)
    parser.add_argument("--corpora", default="synthetic,alice")
    parser.add_argument("--skip", default="", help="comma list of parts to skip: grid, throughput, memory")
    parser.add_argument("--json", default=None, help="also dump the curves to this JSON file")
    parser.add_argument("--memory-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--memory-passes", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")))
    warnings.filterwarnings("ignore", message=".*went to a state beyond the capacity")
    if args.memory_worker is not None:
        _memory_worker(args.memory_worker, args.memory_passes)
        return
    log = lambda s: print(s, flush=True)
    skip = set(filter(None, args.skip.split(",")))
    start = time.perf_counter()
    rows, ceilings = [], {}
    if "grid" not in skip:
        for corpus in args.corpora.split(","):
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
    total = time.perf_counter() - start
    text = markdown(rows, ceilings, thr, mem, args, total)
    print("\n" + text)
    if args.write:
        from _docs import write_section

        cmd = "python benchmarks/bench_collapsed_svi.py" + (" --quick" if args.quick else "")
        print("wrote", write_section(SECTION, cmd, text))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(rows=rows, ceilings=ceilings), fh)


if __name__ == "__main__":
    main()
