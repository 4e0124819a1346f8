"""Benchmark forward-filtering backward-sampling (FFBS), float32, on the default JAX device.

Compares ``numpyro_hdphmm._core.hmm.hmm_posterior_sample`` (sequential and parallel-in-time)
with dynamax's ``hmm_posterior_sample`` (if installed) and a plain NumPy implementation, all in
this process.  Reports the minimum over repeats after a warm-up, in ms per FFBS, and the
achieved GFLOP/s of the forward pass (2 T K^2 flops).

``--samplers`` instead times the FFBS the samplers run (``hmm_posterior_sample_fast``: at 9-16
states the two-way pass, filtering from both ends at once) for one sequence and for 4 sequences with
their own transition matrices under ``jax.vmap`` (as vectorized chains run it); it prints a
table and writes nothing (run it at two commits to compare them).

Usage:  python benchmarks/bench_ffbs.py [--quick] [--write] [--repeats N] [--samplers]
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_hdphmm._core.hmm import hmm_posterior_sample, hmm_posterior_sample_fast

from _docs import write_section  # benchmarks/_docs.py (scripts run from this folder)

SECTION = "## Forward filtering / backward sampling"


def numpy_ffbs(rng, log_init, log_a, ll):
    """Plain NumPy FFBS in rescaled probability space (reference implementation)."""
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


def min_time_ms(fn, repeats, budget_s):
    """Milliseconds of ``fn()``: one warm-up (compiling) call, then the minimum over ``repeats``
    calls (fewer once ``budget_s`` seconds have passed)."""
    fn()  # warm-up / compile
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return min(times) * 1e3


def samplers_table(repeats, Ts=(1000, 10000, 100000), Ks=(8, 15, 50), chains=4, per_call=5):
    """Markdown rows ``| T | K | one sequence (ms) | 4 vmapped (ms) |`` of ``hmm_posterior_sample_fast``
    on sticky random transition matrices: ms per FFBS, the minimum over ``repeats`` calls (after a
    compiling one) of a compiled loop of ``per_call`` FFBS, divided by ``per_call``."""
    rng = np.random.default_rng(0)
    rows = ["| T | K | one sequence (ms) | %d sequences under vmap (ms) |" % chains, "|---:|---:|---:|---:|"]
    for T in Ts:
        for K in Ks:
            A = 0.9 * np.eye(K) + 0.1 * rng.dirichlet(np.ones(K), size=(chains, K))
            la = jnp.asarray(np.log(A), jnp.float32)
            li = jnp.asarray(np.log(rng.dirichlet(np.ones(K), size=chains)), jnp.float32)
            ll = jnp.asarray(rng.normal(size=(chains, T, K)) * 2, jnp.float32)
            keys = jax.random.split(jax.random.key(0), chains)

            def looped(k, a, b, c):  # `per_call` draws in one compiled loop, as a sampler runs them
                def body(i, acc):  # the likelihoods change with `i`: nothing can be hoisted out of the loop
                    ci = c + 1e-3 * i.astype(c.dtype)
                    return acc + hmm_posterior_sample_fast(jax.random.fold_in(k, i), a, b, ci)[0]
                return lax.fori_loop(0, per_call, body, jnp.zeros(c.shape[:-1], jnp.int32))

            one, many = jax.jit(looped), jax.jit(jax.vmap(looped))
            t1 = min_time_ms(lambda: jax.block_until_ready(one(keys[0], li[0], la[0], ll[0])), repeats, 30)
            t4 = min_time_ms(lambda: jax.block_until_ready(many(keys, li, la, ll)), repeats, 30)
            rows.append(f"| {T} | {K} | {t1 / per_call:.3f} | {t4 / per_call:.3f} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T in {1e3, 1e4} only")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--samplers", action="store_true", help="time hmm_posterior_sample_fast (prints only)")
    args = parser.parse_args()
    if args.samplers:
        print(f"jax {jax.__version__}, {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f}")
        print(samplers_table(max(args.repeats, 20), Ts=(1000, 10000) if args.quick else (1000, 10000, 100000)))
        return

    try:
        from dynamax.hidden_markov_model import hmm_posterior_sample as dx_sample
    except Exception:  # pragma: no cover - optional dependency
        dx_sample = None

    Ts = [1000, 10000] if args.quick else [1000, 10000, 100000]
    Ks = [15, 50, 200]
    rng = np.random.default_rng(0)
    rows = []
    notes = []
    for T in Ts:
        for K in Ks:
            li = np.log(rng.dirichlet(np.ones(K))).astype(np.float32)
            la = np.log(rng.dirichlet(np.ones(K), size=K)).astype(np.float32)
            ll = rng.normal(size=(T, K)).astype(np.float32)
            jli, jla, jll = map(jnp.asarray, (li, la, ll))
            key = jax.random.key(0)
            flops = 2.0 * T * K * K
            res = {}
            for method in ["sequential", "parallel"]:
                # parallel: O(T K^3) work; skip combos that would take far too long on CPU
                if method == "parallel" and jax.default_backend() == "cpu" and T * K**3 > 2e10:
                    res[method] = None
                    continue
                f = jax.jit(lambda k, a, b, c, m=method: hmm_posterior_sample(k, a, b, c, method=m))
                res[method] = min_time_ms(lambda: jax.block_until_ready(f(key, jli, jla, jll)), args.repeats, 30)
            if dx_sample is not None:
                pi, A = jnp.exp(jli), jnp.exp(jla)
                g = jax.jit(lambda k, p, a, l: dx_sample(k, p, a, l))
                res["dynamax"] = min_time_ms(lambda: jax.block_until_ready(g(key, pi, A, jll)), args.repeats, 30)
            else:
                res["dynamax"] = None
            if T * K <= 2e6:
                r = np.random.default_rng(1)
                res["numpy"] = min_time_ms(lambda: numpy_ffbs(r, li, la, ll), max(1, args.repeats // 3), 30)
            else:
                res["numpy"] = None
            rows.append((T, K, res, flops))
            fmt = lambda v: "skipped" if v is None else f"{v:.2f}"
            gf = lambda v: "" if v is None else f" ({flops / v / 1e6:.1f} GF/s)"
            print(f"T={T:>6} K={K:>3}  seq {fmt(res['sequential'])}{gf(res['sequential'])}  "
                  f"par {fmt(res['parallel'])}  dynamax {fmt(res['dynamax'])}  numpy {fmt(res['numpy'])}",
                  flush=True)
    if dx_sample is None:
        notes.append("dynamax not installed: its column is empty (`pip install dynamax`).")
    notes.append("parallel-in-time skipped on CPU where T*K^3 > 2e10 (O(T K^3) work).")
    notes.append("NumPy skipped where T*K > 2e6 (pure-Python loop).")

    def cell(v, flops=None):
        if v is None:
            return "-"
        return f"{v:.2f}" + (f" ({flops / v / 1e6:.1f})" if flops else "")

    table = [
        f"Device: `{jax.devices()[0].device_kind}` ({jax.default_backend()}), float32, "
        f"{os.cpu_count()} CPU cores, jax {jax.__version__}. Milliseconds per FFBS (min over "
        f"repeats after warm-up); in parentheses GFLOP/s of the forward pass (2 T K^2 flops).",
        "",
        "| T | K | ours, sequential | ours, parallel | dynamax | NumPy |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for T, K, res, flops in rows:
        table.append(f"| {T} | {K} | {cell(res['sequential'], flops)} | {cell(res['parallel'], flops)} "
                     f"| {cell(res['dynamax'])} | {cell(res['numpy'])} |")
    table += [""] + [f"- {n}" for n in notes]
    text = "\n".join(table)
    print()
    print(text)
    if args.write:
        print(f"wrote {write_section(SECTION, 'python benchmarks/bench_ffbs.py --write', text)}")


if __name__ == "__main__":
    main()
