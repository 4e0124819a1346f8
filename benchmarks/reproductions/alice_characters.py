"""PGAS against the beam sampler on the Alice characters: held-out predictive log-likelihood.

Tripuraneni, Gu, Ge & Ghahramani (2015), "A linear-time particle Gibbs sampler for infinite hidden
Markov models", experiments, "Alice in Wonderland data": an iHMM with categorical emissions is
trained on the first 1000 characters of chapter 1 and tested on the next 4000.  The paper reports
the predictive log-likelihood of the test characters "averaged over 2500 different realizations":
PGAS (``N = 10``) ``-5918.4 +- 123.8``, beam sampler ``-6099.0 +- 106.0``.  It gives no alphabet,
no emission prior, no hyperparameters and no number of sweeps, and does not say what the ``+-`` is
or how the states of the test data are handled, so only the ordering (PGAS above beam) is
checkable.

What this script does (every choice below is ours where the paper is silent):

* data: :func:`numpyro_hdphmm.datasets.load_alice_characters` (chapter 1, ``a``-``z`` and space, 27
  symbols), ``y_train = tokens[:1000]``, ``y_test = tokens[1000:5000]``;
* model: the non-sticky iHMM (``beta ~ GEM(gamma)``), ``gamma ~ Gamma(3, 6)``, ``alpha ~ Gamma(4, 1)``
  (the beam toolbox's defaults, as in ``examples/papers/plot_pgas.py``; both resampled every sweep by
  the kernels' default collapsed updates), categorical emissions with a symmetric Dirichlet prior of
  concentration ``--concentration`` (0.5), capacity ``--capacity`` (40) slots;
* kernels: ``nh.infer.PGAS(model, num_particles=10, proposal="prior" | "posterior")`` and
  ``nh.infer.BeamSampler(model)``; each chain starts from ``--init-states`` (10) states with uniformly
  random labels (as the paper's synthetic experiments; the kernels' default start,
  ``init_strategy="data"``, puts these data in ONE state: ``--init-states 1`` reproduces it);
  ``--chains`` vectorized chains per seed, ``--seeds`` seeds; ``--warmup`` sweeps discarded,
  then ``--samples`` sweeps of which every ``--thin``-th is kept; seconds per sweep from the
  compiled blocks of sweeps (compilation excluded), the kernels interleaved seed by seed;
* predictive log-likelihood of one kept draw ``s`` (transitions ``pi^(s)``, emission probabilities
  ``theta^(s)``): the forward filter run over ``y_train`` followed by ``y_test`` and its one-step
  terms summed over the test steps (:func:`numpyro_hdphmm.marginal_log_likelihood`),

  ``l_s = log p(y_test | y_train, pi^(s), theta^(s)) = sum_{t=1001}^{5000} log p(y_t | y_{<t}, pi^(s), theta^(s))``,

  the states summed out, the mass of unrepresented states dropped (a lower bound; the draws put
  ~1e-3 on them per step, renormalizing changed ``l_s`` by < 2 nats in a trial).  A chain's estimate of
  ``log p(y_test | y_train)`` is the log-mean-exp of its ``l_s``; reported: the mean +- sd of the
  chains' estimates (all seeds), and the mean +- sd of ``l_s`` over every kept draw (the closest
  reading of the paper's "averaged over realizations").  ``--last-state`` also computes the variant
  started from each draw's last training state, ``log p(y_test | z_1000^(s), pi^(s), theta^(s))``;
* baselines: the unigram and bigram character models with the same Dirichlet(0.5) smoothing fitted
  to ``y_train`` (plug-in posterior means), to place the absolute values.

Usage::

    python -m benchmarks.reproductions alice-characters [--quick] [--warmup W] [--samples S] [--thin H] [--chains C]
        [--seeds 0,1,2] [--kernels pgas-prior,pgas-post,beam] [--last-state] [--write]

``--write`` (the default; ``--no-save`` prints only) replaces the "PGAS vs beam: Alice characters" section of ``benchmarks/results/reproductions.json`` (with
``--init-states K`` other than 10: the "Alice characters from K states: PGAS vs beam" section).
"""

from __future__ import annotations

import argparse
import sys
import os
import time
import warnings

import numpy as np

from ..harness import models, results

QUESTION = "reproductions"


def _save(section, command, text):
    """Save ``text`` as ``section`` of ``benchmarks/results/reproductions.json``; returns the path."""
    return results.save(QUESTION, section.lstrip("# "), text, command)


SECTION = "## PGAS vs beam: Alice characters"
NUM_TRAIN, NUM_TEST = 1000, 4000
PAPER = {"PGAS (N = 10)": (-5918.4, 123.8), "beam sampler": (-6099.0, 106.0)}
LABELS = {"pgas-prior": "PGAS, N = 10, prior proposal", "pgas-post": "PGAS, N = 10, posterior proposal",
          "beam": "BeamSampler"}


def make_kernel(name, model, num_particles):
    import numpyro_hdphmm as nh

    if name == "pgas-prior":
        return nh.infer.PGAS(model, num_particles=num_particles, proposal="prior")
    if name == "pgas-post":
        return nh.infer.PGAS(model, num_particles=num_particles, proposal="posterior")
    if name == "beam":
        return nh.infer.BeamSampler(model)
    raise SystemExit(f"unknown kernel {name!r}; choose from {list(LABELS)}")


def compile_block(kernel, state, y, length):
    """A compiled ``lax.scan`` of ``length`` sweeps: ``state -> (state, (num_states, data_loglik))``
    per sweep (``(length, chains)`` each)."""
    import jax

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        return s, (s.num_states, s.data_loglik)

    return jax.jit(lambda s: jax.lax.scan(body, s, None, length=length)).lower(state).compile()


def run_chains(kernel, block, y, chains, seed, init_states, warmup, samples, thin):
    """Warm-up then sampling in compiled blocks of ``thin`` sweeps; the draw after every sampling block
    is kept.  Returns the kept ``y_trans (chains, S, K+1, K+1)``, ``y_probs (chains, S, K, 27)``, last
    training states ``(chains, S)``, per-sweep states in use and data log-likelihood ``(sweeps, chains)``
    and the seconds of all the sweeps (compilation excluded)."""
    import jax
    import jax.numpy as jnp

    labels = np.random.default_rng(seed).integers(0, init_states, size=(chains, len(y)))
    state = kernel.init(jax.random.split(jax.random.key(seed), chains), 0,
                        {"y_states": jnp.asarray(labels, jnp.int32)}, (y,), {})
    trans, probs, last, num_states, loglik = [], [], [], [], []
    seconds = 0.0
    for b in range((warmup + samples) // thin):
        start = time.perf_counter()
        state, (ns, ll) = jax.block_until_ready(block(state))
        seconds += time.perf_counter() - start
        num_states.append(np.asarray(ns))
        loglik.append(np.asarray(ll))
        if (b + 1) * thin > warmup:
            trans.append(np.asarray(state.z["y_trans"]))
            probs.append(np.asarray(state.z["y_probs"]))
            last.append(np.asarray(state.z["y_states"])[:, -1])
    stack = lambda xs: np.stack(xs, axis=1)  # noqa: E731  (chains, S, ...)
    return (stack(trans), stack(probs), stack(last), np.concatenate(num_states), np.concatenate(loglik),
            seconds)


def predictive(emission, trans, probs, last, y_train, y_test, last_state):
    """``l (chains, S)``: ``log p(y_test | y_train, pi^(s), theta^(s))`` of every kept draw (forward
    filter over train + test, test terms summed); with ``last_state`` also the variant started from
    the draw's last training state (``None`` otherwise)."""
    import numpyro_hdphmm as nh

    samples = {"y_trans": trans, "y_probs": probs}
    y = np.concatenate([y_train, y_test])
    filt = nh.marginal_log_likelihood(emission, samples, y, batch_size=8)
    l_filtered = np.asarray(filt.pointwise)[..., len(y_train):].sum(-1)
    l_last = None
    if last_state:
        K = trans.shape[-1] - 1
        start_rows = np.take_along_axis(trans, last[..., None, None].astype(np.int64), axis=-2)[..., 0, :]
        shifted = trans.copy()
        shifted[..., K, :] = start_rows  # the start row (the last row) := the last training state's row
        res = nh.marginal_log_likelihood(emission, {"y_trans": shifted, "y_probs": probs}, y_test, batch_size=8)
        l_last = np.asarray(res.total)
    return l_filtered, l_last


def log_mean_exp(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(m, axis) + np.log(np.mean(np.exp(x - m), axis=axis))


def baselines(y_train, y_test, concentration, num_symbols=27):
    """Unigram and bigram log-likelihoods of ``y_test`` with Dirichlet-smoothed estimates from
    ``y_train`` (the bigram's first test character conditioned on the last training character)."""
    uni = np.bincount(y_train, minlength=num_symbols) + concentration
    uni_ll = float(np.sum(np.log(uni[y_test] / uni.sum())))
    big = np.full((num_symbols, num_symbols), concentration)
    np.add.at(big, (y_train[:-1], y_train[1:]), 1.0)
    big /= big.sum(1, keepdims=True)
    prev = np.concatenate([y_train[-1:], y_test[:-1]])
    return uni_ll, float(np.sum(np.log(big[prev, y_test])))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--thin", type=int, default=10)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--kernels", default="pgas-prior,pgas-post,beam")
    parser.add_argument("--num-particles", type=int, default=10)
    parser.add_argument("--init-states", type=int, default=10)
    parser.add_argument("--concentration", type=float, default=0.5)
    parser.add_argument("--capacity", type=int, default=40)
    parser.add_argument("--last-state", action="store_true",
                        help="also the variant started from the last training state")
    parser.add_argument("--quick", action="store_true", help="50 + 50 sweeps, thin 5, 2 chains, one seed")
    parser.add_argument("--no-save", action="store_true", help="print only (default: save the results)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    args.write = not (args.no_save or args.quick)  # a --quick run checks the script, it records nothing
    if args.quick:
        args.warmup, args.samples, args.thin, args.chains, args.seeds = 50, 50, 5, 2, "0"
    if args.warmup % args.thin or args.samples % args.thin or args.samples < args.thin:
        raise SystemExit("--warmup and --samples must be multiples of --thin, and --samples >= --thin")
    seeds = [int(s) for s in args.seeds.split(",")]
    names = args.kernels.split(",")

    import jax

    import numpyro_hdphmm as nh

    warnings.filterwarnings("ignore", message=".*beyond the capacity")  # random starts
    data = nh.datasets.load_alice_characters()
    y_train = data.tokens[:NUM_TRAIN]
    y_test = data.tokens[NUM_TRAIN:NUM_TRAIN + NUM_TEST]
    model, emission = models.alice_characters_model(args.concentration, args.capacity)
    load_start = os.getloadavg()
    kernels, blocks, compile_s = {}, {}, {}
    results = {n: dict(l=[], l_last=[], k=[], ll=[], seconds=0.0, sweeps=0) for n in names}
    for seed in seeds:
        for name in names:
            if name not in kernels:
                kernels[name] = make_kernel(name, model, args.num_particles)
                state0 = kernels[name].init(jax.random.split(jax.random.key(0), args.chains), 0,
                                            {"y_states": jax.numpy.zeros((args.chains, NUM_TRAIN), jax.numpy.int32)},
                                            (y_train,), {})
                start = time.perf_counter()
                blocks[name] = compile_block(kernels[name], state0, y_train, args.thin)
                compile_s[name] = time.perf_counter() - start
            trans, probs, last, ns, ll, secs = run_chains(kernels[name], blocks[name], y_train, args.chains, seed,
                                                          args.init_states, args.warmup, args.samples, args.thin)
            l, l_last = predictive(emission, trans, probs, last, y_train, y_test, args.last_state)
            r = results[name]
            kept = slice(args.warmup, None)
            r["l"].append(l)
            r["l_last"].append(l_last)
            r["k"].append(ns[kept].mean(0))
            r["ll"].append(ll[kept].mean(0))
            r["seconds"] += secs
            r["sweeps"] += args.warmup + args.samples
            print(f"seed {seed} {name}: {secs / (args.warmup + args.samples) * 1000:.1f} ms/sweep, "
                  f"K {np.round(ns[-1]).astype(int).tolist()}, chains' log p(y_test | y_train) "
                  f"{np.round(log_mean_exp(l, 1)).astype(int).tolist()}", flush=True)
    load_end = os.getloadavg()

    lines = []

    def say(line=""):
        print(line, flush=True)
        lines.append(line)

    num_kept = args.samples // args.thin
    header = (f"Alice chapter 1, `a`-`z` and space, train {NUM_TRAIN} / test {NUM_TEST} characters; iHMM, "
              f"`gamma ~ Gamma(3, 6)`, `alpha ~ Gamma(4, 1)`, `Categorical(27, {args.concentration})`, capacity "
              f"{args.capacity}; seeds {args.seeds} x {args.chains} vectorized chains per kernel, each from "
              f"{args.init_states} random states, {args.warmup} warm-up + {args.samples} sweeps, every "
              f"{args.thin}th kept ({num_kept} draws per chain, {num_kept * args.chains * len(seeds)} per kernel); "
              f"{jax.devices()[0].platform}, load average {load_start[0]:.1f} at the start, {load_end[0]:.1f} "
              "at the end (2 shared cores)")
    say("Predictive log-likelihood of the 4000 test characters (nats; higher is better): per chain "
        "`log (1/S) sum_s p(y_test | y_train, pi^(s), theta^(s))` over its kept draws, mean +- sd over the "
        "chains of all seeds; per draw `l_s = log p(y_test | y_train, pi^(s), theta^(s))`, mean +- sd over "
        "every kept draw; states in use and the training `log p(y_train | z, theta)` averaged over the kept "
        "sweeps (mean +- sd over chains); milliseconds per sweep of all the chains of one seed together "
        "(compilation excluded, seconds of compilation in brackets).")
    say()
    extra = " | per draw, from the last training state" if args.last_state else ""
    say(f"| sampler | chains: mean +- sd | per draw: mean +- sd | nats / char | states | train log p(y \\| z, theta) "
        f"| ms / sweep{extra} |")
    say("|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if args.last_state else ""))
    summary = {}
    for name in names:
        r = results[name]
        l = np.concatenate(r["l"])  # (chains, S)
        chains = log_mean_exp(l, 1)
        k, ll = np.concatenate(r["k"]), np.concatenate(r["ll"])
        ms = 1000 * r["seconds"] / r["sweeps"]
        summary[name] = chains
        row = (f"| {LABELS[name]} | {chains.mean():.1f} +- {chains.std(ddof=1):.1f} | {l.mean():.1f} +- "
               f"{l.std(ddof=1):.1f} | {l.mean() / NUM_TEST:.3f} | {k.mean():.1f} +- {k.std(ddof=1):.1f} | "
               f"{ll.mean():.0f} +- {ll.std(ddof=1):.0f} | {ms:.1f} ({compile_s[name]:.0f}) |")
        if args.last_state:
            ls = np.concatenate(r["l_last"])
            row += f" {ls.mean():.1f} +- {ls.std(ddof=1):.1f} |"
        say(row)
    uni, big = baselines(y_train, y_test, args.concentration)
    blank = " |" if args.last_state else ""
    say(f"| unigram, Dirichlet({args.concentration}) smoothing | {uni:.1f} | | {uni / NUM_TEST:.3f} | 1 | | |{blank}")
    say(f"| bigram, Dirichlet({args.concentration}) smoothing | {big:.1f} | | {big / NUM_TEST:.3f} | 27 | | |{blank}")
    for name, (m, s) in PAPER.items():
        states = "~10" if name.startswith("PGAS") else ""
        say(f"| paper: {name} | | {m:.1f} +- {s:.1f} | {m / NUM_TEST:.3f} | {states} | | |{blank}")
    say()
    pg = [n for n in names if n.startswith("pgas")]
    if "beam" in names and pg:
        say("Differences of the chains' estimates, PGAS minus beam (mean, its standard error from the two sets "
            "of chains, z):")
        say()
        b = summary["beam"]
        for name in pg:
            a = summary[name]
            diff = a.mean() - b.mean()
            se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b))
            say(f"- {LABELS[name]}: {diff:+.1f} nats (se {se:.1f}, z {diff / se:+.2f}); the paper: "
                f"{PAPER['PGAS (N = 10)'][0] - PAPER['beam sampler'][0]:+.1f}")
    if args.write:
        cmd = ("python -m benchmarks.reproductions alice-characters --quick" if args.quick else
               "python -m benchmarks.reproductions alice-characters " + " ".join(
                   f"--{k} {v}" for k, v in (("warmup", args.warmup), ("samples", args.samples), ("thin", args.thin),
                                             ("chains", args.chains), ("seeds", args.seeds),
                                             ("kernels", args.kernels))))
        defaults = {"init_states": 10, "capacity": 40, "concentration": 0.5, "num_particles": 10}
        for key, default in defaults.items():
            if getattr(args, key) != default:
                cmd += f" --{key.replace('_', '-')} {getattr(args, key)}"
        cmd += (" --last-state" if args.last_state else "") + " --write"
        plural = "s" if args.init_states != 1 else ""
        section = (SECTION if args.init_states == 10
                   else f"## Alice characters from {args.init_states} state{plural}: PGAS vs beam")
        text = header + ".\n\n" + "\n".join(lines)
        print(f"wrote {_save(section, cmd, text)}")


if __name__ == "__main__":
    main()
