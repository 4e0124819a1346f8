"""Sweep speed and FFBS: milliseconds per sweep of every kernel and per FFBS pass.

Parts (``--parts``, default all):

- ``ffbs``: forward-filtering backward-sampling, float32, T x K grid: ours sequential and
  parallel-in-time (``hmm_posterior_sample``), the samplers' two-way pass
  (``hmm_posterior_sample_fast``, one sequence and 4 under ``vmap``), dynamax's
  ``hmm_posterior_sample`` when importable here (``python -m benchmarks.peers --dynamax PYTHON`` runs it
  in its own environment) and a plain NumPy FFBS; the minimum over repeats after a compiling call.
- ``kernels``: every kernel on standard configurations (Fox et al.'s experiment A, 2-D Gaussian
  segments, the first words of *Alice*), the kernels of one configuration alternated in blocks
  (harness timer); ``--compare PATH`` times every configuration for this tree and for the package
  of another checkout (e.g. ``git worktree add /tmp/prev HEAD~1``), in fresh processes,
  alternating ``--rounds`` times: the ratio this tree / the other.  ``--configs collapsed``: the
  collapsed kernels (``DirectAssignmentGibbs``, ``RCDSampler``) on motion capture (AR(1)
  emissions) and on experiment A (Gaussian emissions) instead of the standard set.
- ``pair``: ``BeamSampler`` with capacity K against ``WeakLimitGibbs`` with L = K on 10
  well-separated 2-D segments, both started from the true segmentation, alternated; and 4
  vectorized chains against one (the README's model).

Results: ``benchmarks/results/sweeps.json`` (sections "Forward filtering / backward sampling",
"Kernel sweeps", "Beam sampler against the weak limit"), rendered by ``python -m benchmarks.render``.

Usage::

    python -m benchmarks.sweeps speed [--quick] [--parts ffbs kernels pair] [--configs standard|collapsed]
                                      [--compare PATH] [--no-save]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from ..harness import models, results, timing

QUESTION = "sweeps"
SUITE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------ FFBS
def numpy_ffbs(rng, log_init, log_a, ll):
    """Plain NumPy FFBS in rescaled probability space (a reference implementation)."""
    T, K = ll.shape
    A = np.exp(log_a)
    m = ll.max(axis=1, keepdims=True)
    E = np.exp(ll - m)
    alpha = np.empty((T, K), ll.dtype)
    a = np.exp(log_init) * E[0]
    c = a.sum()
    alpha[0] = a / c
    loglik = np.log(c) + m[0, 0]
    for t in range(1, T):
        a = (alpha[t - 1] @ A) * E[t]
        c = a.sum()
        alpha[t] = a / c
        loglik += np.log(c) + m[t, 0]
    z = np.empty(T, np.int64)
    u = rng.uniform(size=T)
    cs = np.cumsum(alpha[-1])
    z[-1] = np.searchsorted(cs, u[-1] * cs[-1], side="right")
    for t in range(T - 2, -1, -1):
        cs = np.cumsum(alpha[t] * A[:, z[t + 1]])
        z[t] = min(np.searchsorted(cs, u[t] * cs[-1], side="right"), K - 1)
    return z, loglik


def min_ms(fn, repeats, budget_s=30.0):
    """Milliseconds of ``fn()``: the minimum over ``repeats`` calls after a compiling one."""
    return 1e3 * min(timing.time_calls(fn, repeats, budget_s))


def ffbs(Ts, Ks, repeats, say=print):
    """Rows ``(T, K, {contender: ms or None})`` of the FFBS comparison (see the module doc)."""
    import jax
    import jax.numpy as jnp

    from numpyro_hdphmm._core.hmm import hmm_posterior_sample, hmm_posterior_sample_fast

    try:
        from dynamax.hidden_markov_model import hmm_posterior_sample as dx_sample
    except ImportError:
        dx_sample = None
    rng = np.random.default_rng(0)
    rows = []
    for T in Ts:
        for K in Ks:
            li = np.log(rng.dirichlet(np.ones(K))).astype(np.float32)
            A = 0.9 * np.eye(K) + 0.1 * rng.dirichlet(np.ones(K), size=K)
            la = np.log(A).astype(np.float32)
            ll = rng.normal(size=(T, K)).astype(np.float32)
            jli, jla, jll = map(jnp.asarray, (li, la, ll))
            key = jax.random.key(0)
            res = {}
            for method in ("sequential", "parallel"):
                if method == "parallel" and jax.default_backend() == "cpu" and T * K**3 > 2e10:
                    res[method] = None  # O(T K^3) work: far too long on CPU
                    continue
                f = jax.jit(lambda k, a, b, c, m=method: hmm_posterior_sample(k, a, b, c, method=m))
                res[method] = min_ms(lambda: f(key, jli, jla, jll), repeats)
            fast = jax.jit(hmm_posterior_sample_fast)
            res["two-way"] = min_ms(lambda: fast(key, jli, jla, jll), repeats)
            keys = jax.random.split(key, 4)
            many = jax.jit(jax.vmap(hmm_posterior_sample_fast, in_axes=(0, None, None, None)))
            res["two-way, 4 under vmap"] = min_ms(lambda: many(keys, jli, jla, jll), repeats)
            if dx_sample is not None:
                g = jax.jit(dx_sample)
                pi, At = jnp.exp(jli), jnp.exp(jla)
                res["dynamax"] = min_ms(lambda: g(key, pi, At, jll), repeats)
            else:
                res["dynamax"] = None
            if T * K <= 2e6:
                r = np.random.default_rng(1)
                res["numpy"] = min_ms(lambda: numpy_ffbs(r, li, la, ll), max(1, repeats // 3))
            else:
                res["numpy"] = None
            say(f"FFBS T={T} K={K}: " + ", ".join(f"{k} {'-' if v is None else f'{v:.3f}'}" for k, v in res.items()))
            rows.append((T, K, res))
    return rows, dx_sample is not None


def save_ffbs(rows, have_dynamax, command):
    names = ("sequential", "parallel", "two-way", "two-way, 4 under vmap", "dynamax", "numpy")
    cell = lambda v: "-" if v is None else f"{v:.2f}"
    tab = results.table(["T", "K", "ours, sequential", "ours, parallel", "ours, two-way (samplers)",
                         "two-way, 4 under vmap", "dynamax", "NumPy"],
                        [[T, K, *(cell(res[n]) for n in names)] for T, K, res in rows], ["r"] * 8)
    notes = ["Milliseconds per FFBS, float32, sticky random transition matrices: the minimum over repeats after "
             "a compiling call.  parallel-in-time skipped on CPU where T K^3 > 2e10; NumPy where T K > 2e6."]
    if not have_dynamax:
        notes.append("dynamax was not importable in this environment: its column is empty.")
    comps = [{"kernel": "FFBS (every kernel's state update)", "peer": "dynamax", "config": f"T = {T}, K = {K}",
              "ours_ms": round(res["sequential"], 3), "peer_ms": round(res["dynamax"], 3),
              "ratio": round(res["dynamax"] / res["sequential"], 2), "statistic": "minimum"}
             for T, K, res in rows if res["dynamax"] is not None]
    return results.save(QUESTION, "Forward filtering / backward sampling", [results.text(notes[0]), tab,
                        *map(results.text, notes[1:])], command, comparisons=comps,
                        data=[{"T": T, "K": K, **res} for T, K, res in rows])


# ------------------------------------------------------------------------------ kernels
#: (kernel, problem, sizes)
CONFIGS = [
    ("WeakLimitGibbs", "fox_a", {"T": 1000, "capacity": 15}),
    ("DirectAssignmentGibbs", "fox_a", {"T": 1000, "capacity": 15}),
    ("BeamSampler", "fox_a", {"T": 1000, "capacity": 15}),
    ("RCDSampler", "fox_a", {"T": 1000, "capacity": 15}),
    ("PGAS", "fox_a", {"T": 1000, "capacity": 15}),
    ("WeakLimitGibbs", "fox_a", {"T": 10000, "capacity": 15}),
    ("DirectAssignmentGibbs", "fox_a", {"T": 10000, "capacity": 15}),
    ("WeakLimitGibbs", "segments", {"T": 10000, "capacity": 30}),
    ("BeamSampler", "segments", {"T": 10000, "capacity": 30}),
    ("RCDSampler", "alice", {"num_words": 5000, "capacity": 60}),
]
#: the collapsed kernels on the families whose predictive they keep factorized (``--configs collapsed``)
COLLAPSED_CONFIGS = [
    ("DirectAssignmentGibbs", "mocap", {"capacity": 30}),
    ("RCDSampler", "mocap", {"capacity": 30}),
    ("DirectAssignmentGibbs", "fox_a", {"T": 1000, "capacity": 15}),
    ("RCDSampler", "fox_a", {"T": 1000, "capacity": 15}),
]
CONFIG_SETS = {"standard": CONFIGS, "collapsed": COLLAPSED_CONFIGS}
QUICK_CONFIGS = [("WeakLimitGibbs", "fox_a", {"T": 200, "capacity": 8}),
                 ("BeamSampler", "fox_a", {"T": 200, "capacity": 8})]


def _group(configs):
    """Configurations grouped by problem, so that the kernels of one data set are alternated."""
    out = {}
    for name, prob, sizes in configs:
        out.setdefault((prob, json.dumps(sizes, sort_keys=True)), []).append(name)
    return out


def time_kernels(configs, blocks, calls, sweeps_per_call, say=print):
    """``[{kernel, problem, sizes, ms_min, ms_median, compile_s}]``: per problem, its kernels alternated."""
    rows = []
    for (prob, sizes), names in _group(configs).items():
        p = models.problem(prob, **json.loads(sizes))
        contenders = {n: timing.kernel_contender(models.kernel(n, p.model), p.args, sweeps_per_call=sweeps_per_call)
                      for n in names}
        for n, t in timing.alternate(contenders, blocks, calls, sweeps_per_call=sweeps_per_call).items():
            rows.append({"kernel": n, "problem": prob, "sizes": json.loads(sizes), "ms_min": 1e3 * t.min,
                         "ms_median": 1e3 * t.median, "compile_s": t.compile_s})
            say(f"{n} on {prob} {sizes}: {1e3 * t.median:.2f} ms per sweep (min {1e3 * t.min:.2f}), "
                f"compile {t.compile_s:.1f} s")
    return rows


def _worker(config_json):
    """In a fresh process: time one configuration; print one JSON line."""
    name, prob, sizes, blocks, calls, per_call = json.loads(config_json)
    row = time_kernels([(name, prob, sizes)], blocks, calls, per_call, say=lambda *_: None)[0]
    print(json.dumps(row))


def _time_tree(tree, config, blocks, calls, per_call):
    """One configuration timed with the package of checkout ``tree`` (a fresh process whose
    ``numpyro_hdphmm`` is the tree's and whose ``benchmarks`` and ``examples`` are this suite's)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(SUITE, os.path.join(tmp, "benchmarks"))
        # the problems' models (e.g. motion capture's) are this suite's: its examples, whatever the tree
        os.symlink(os.path.join(os.path.dirname(SUITE), "examples"), os.path.join(tmp, "examples"))
        env = {**os.environ, "PYTHONPATH": tree, "JAX_ENABLE_X64": "0"}
        out = subprocess.run([sys.executable, "-m", "benchmarks.sweeps", "speed", "--worker",
                              json.dumps(list(config) + [blocks, calls, per_call])],
                             cwd=tmp, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"worker for {tree} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_trees(configs, other, rounds, blocks, calls, per_call, say=print):
    trees = {"this tree": models.REPO, "other": os.path.abspath(other)}
    rows = []
    for config in configs:
        best = {k: float("inf") for k in trees}
        for _ in range(rounds):
            for k, tree in trees.items():
                best[k] = min(best[k], _time_tree(tree, config, blocks, calls, per_call)["ms_median"])
        rows.append({"kernel": config[0], "problem": config[1], "sizes": config[2], "ms_this": best["this tree"],
                     "ms_other": best["other"], "ratio": best["this tree"] / best["other"]})
        say(f"{config[0]} on {config[1]} {config[2]}: {best['this tree']:.2f} vs {best['other']:.2f} ms "
            f"(ratio {best['this tree'] / best['other']:.3f})")
    return rows


def _sizes(s):
    return ", ".join(f"{k} = {v}" for k, v in s.items())


# ------------------------------------------------------------------------------ pair
def beam_against_weak_limit(grid, blocks, calls, say=print):
    """Rows ``(T, K, beam ms, weak-limit ms, compile s of each)`` from the true segmentation."""
    import jax.numpy as jnp

    rows = []
    for T, K in grid:
        y = models.segmented_gaussian(T, 2)
        init = {"y_states": jnp.asarray(models.segments(T), jnp.int32)}
        contenders = {n: timing.kernel_contender(models.kernel(n, models.fixed_model(K)), (y,), init_params=init)
                      for n in ("BeamSampler", "WeakLimitGibbs")}
        t = timing.alternate(contenders, blocks, calls)
        rows.append((T, K, t["BeamSampler"], t["WeakLimitGibbs"]))
        say(f"T={T} K={K}: beam {1e3 * t['BeamSampler'].median:.2f} ms, weak limit "
            f"{1e3 * t['WeakLimitGibbs'].median:.2f} ms")
    return rows


def chains_ratio(T, L, num_chains, blocks, calls):
    """ms per sweep of ``num_chains`` vectorized chains and of one (README's model), alternated."""
    p = models.readme_problem(T, L)
    contenders = {"1 chain": timing.kernel_contender(models.kernel("WeakLimitGibbs", p.model), p.args),
                  f"{num_chains} chains": timing.kernel_contender(models.kernel("WeakLimitGibbs", p.model), p.args,
                                                                   num_chains=num_chains)}
    return timing.alternate(contenders, blocks, calls)


# ------------------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["ffbs", "kernels", "pair"], choices=["ffbs", "kernels", "pair"])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the script runs")
    parser.add_argument("--repeats", type=int, default=7, help="FFBS repeats")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks per configuration")
    parser.add_argument("--calls", type=int, default=2, help="calls per contender per block")
    parser.add_argument("--sweeps-per-call", type=int, default=5, help="sweeps per compiled call (kernels part)")
    parser.add_argument("--compare", default=None, help="another checkout: time its package against this tree's")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--configs", default="standard", choices=sorted(CONFIG_SETS),
                        help="kernels part: the standard configurations, or the collapsed kernels (DA, RCD) on the "
                             "Gaussian and autoregressive families")
    parser.add_argument("--no-save", action="store_true", help="print only")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if args.worker:
        _worker(args.worker)
        return
    command = results.command_line("sweeps speed", argv)
    save = (lambda *a, **k: None) if args.no_save else results.save
    if "ffbs" in args.parts:
        Ts, Ks = ([200, 1000], [8, 15]) if args.quick else ([1000, 10000, 100000], [15, 50, 200])
        rows, have = ffbs(Ts, Ks, 2 if args.quick else args.repeats)
        if not args.no_save:
            save_ffbs(rows, have, command)
    if "kernels" in args.parts:
        configs = QUICK_CONFIGS if args.quick else CONFIG_SETS[args.configs]
        suffix = "" if args.configs == "standard" else f" ({args.configs} kernels)"
        blocks, calls = (2, 1) if args.quick else (args.blocks, args.calls)
        per_call = 1 if args.quick else args.sweeps_per_call
        if args.compare:
            rows = compare_trees(configs, args.compare, 1 if args.quick else args.rounds, blocks, calls, per_call)
            tab = results.table(["kernel", "data", "sizes", "ms per sweep, this tree", "other", "ratio"],
                                [[r["kernel"], r["problem"], _sizes(r["sizes"]), f"{r['ms_this']:.2f}",
                                  f"{r['ms_other']:.2f}", f"{r['ratio']:.3f}"] for r in rows],
                                ["l", "l", "l", "r", "r", "r"])
            save(QUESTION, "Kernel sweeps against another checkout" + suffix, [results.text(
                f"Median ms per sweep, each configuration in fresh processes for this tree and for `{args.compare}`, "
                f"alternating, the best of {args.rounds} rounds; ratio = this tree / other."), tab], command,
                data=rows)
        else:
            rows = time_kernels(configs, blocks, calls, per_call)
            tab = results.table(["kernel", "data", "sizes", "ms per sweep (median)", "minimum", "compile (s)"],
                                [[f"`{r['kernel']}`", r["problem"], _sizes(r["sizes"]), f"{r['ms_median']:.2f}",
                                  f"{r['ms_min']:.2f}", f"{r['compile_s']:.1f}"] for r in rows],
                                ["l", "l", "l", "r", "r", "r"])
            save(QUESTION, "Kernel sweeps" + suffix, [results.text(
                f"Every kernel with its default options, one chain, float32; {per_call} sweeps per compiled call "
                f"(as `MCMC.run` runs them), the kernels of one data set alternated in {blocks} blocks of {calls} "
                "calls after compilation (timed apart) and warm-up; ms per sweep = a call's time over the sweeps "
                "in it."), tab], command, data=rows)
    if "pair" in args.parts:
        grid = [(200, 10)] if args.quick else [(1000, 10), (1000, 30), (10000, 10), (10000, 30), (100000, 10),
                                                (100000, 30)]
        blocks, calls = (2, 1) if args.quick else (args.blocks, args.calls)
        rows = beam_against_weak_limit(grid, blocks, calls)
        # --quick: 2 chains at T = 200 (each contender is one more compilation)
        chains = chains_ratio(200, 8, 2, blocks, calls) if args.quick else chains_ratio(10000, 15, 4, blocks, calls)
        one, four = chains["1 chain"].median, [t for k, t in chains.items() if k != "1 chain"][0].median
        tab = results.table(["T", "K", "beam (ms)", "weak limit (ms)", "ratio", "compile beam / WL (s)"],
                            [[T, K, f"{1e3 * b.median:.2f}", f"{1e3 * w.median:.2f}", f"{b.median / w.median:.2f}",
                              f"{b.compile_s:.1f} / {w.compile_s:.1f}"] for T, K, b, w in rows], ["r"] * 6)
        save(QUESTION, "Beam sampler against the weak limit", [results.text(
            "`BeamSampler` with capacity K against `WeakLimitGibbs` with L = K (both O(T K^2) over the slots), "
            "2-D Gaussian segments (10 well-separated), constant gamma = 1, alpha = 1, kappa = 10, both started "
            "from the true segmentation, alternated in blocks; median ms per sweep."), tab, results.text(
            f"{len(chains) and list(chains)[1]} vectorized against one (`WeakLimitGibbs`, the README's model): {1e3 * four:.2f} "
            f"against {1e3 * one:.2f} ms per sweep, ratio **{four / one:.2f}**.")], command,
            data={"pair": [{"T": T, "K": K, "beam": b.as_dict(), "weak_limit": w.as_dict()} for T, K, b, w in rows],
                  "chains": {k: v.as_dict() for k, v in chains.items()}})
    if not args.no_save:
        print(f"saved {results.path(QUESTION)}; render with `python -m benchmarks.render`")


if __name__ == "__main__":
    main()
