"""GPU figures: FFBS sequential vs parallel-in-time, a weak-limit sweep up to T = 10^7, many chains.

Runs on whatever JAX's default device is (meant for a GPU; nothing in the package needs one) and
measures, float32:

* ``ffbs``: milliseconds per FFBS (``numpyro_hdphmm._core.hmm.hmm_posterior_sample_fast``, what
  the samplers call) with ``method="sequential"`` and ``method="parallel"`` for T from 10^3 to
  10^7 and K in {15, 50, 200}; a configuration is skipped when the one before it on the same row
  took more than a tenth of ``--budget`` seconds (T grows tenfold along a row), and a run
  that exhausts device memory is marked "out of memory";
* ``sweep``: seconds per ``WeakLimitGibbs`` sweep of the README's model (Fox et al.'s experiment
  A, L = 20, GaussianNIW, Gamma priors on gamma/alpha/kappa) for T from 10^3 to 10^7 with the FFBS
  method the package picks (``method="auto"``).  (Forcing it sequential or parallel inside the
  sweep needs a public kernel option; the suite does not patch the package.)
* ``chains``: one vectorized sweep of C chains of the README model (T = 1000) for C up to 1000:
  compile seconds, milliseconds per sweep, and XLA's memory analysis per chain.

Every measurement is appended to the ``--json`` file as it completes, so a run cut short keeps
what it measured; the section "GPU" of ``benchmarks/results/gpu.json`` is saved from it after
every part (``--from-json FILE`` saves it from a finished file on any machine).  Usage::

    python -m benchmarks.gpu --parts ffbs chains --json gpu.json
    python -m benchmarks.gpu --parts sweep --json gpu.json
    python -m benchmarks.gpu --from-json gpu.json
    python -m benchmarks.gpu --quick          # a smoke run on any device (T <= 10^4, C <= 10)
"""

from __future__ import annotations

import argparse
import json
import os
import time

import sys

from .harness import models
from .harness import results as suite_results
from .harness.timing import time_calls

QUESTION = "gpu"
SECTION = "GPU"
FFBS_T = [1000, 10000, 100000, 1000000, 10000000]
FFBS_K = [15, 50, 200]
SWEEP_T = [1000, 10000, 100000, 1000000, 10000000]
CHAINS = [1, 10, 100, 1000]


def _load(path):
    if path and os.path.exists(path):
        with open(path) as fh:
            return json.load(fh)
    return {}


def _save(path, results):
    if path:
        with open(path, "w") as fh:
            json.dump(results, fh, indent=1)


def _seconds(fn, repeats, budget_s):
    """Seconds of ``fn()``: a warm-up call, then the minimum over ``repeats`` calls."""
    return min(time_calls(fn, repeats, budget_s))


def _pending(out, names, budget):
    """The names of one row of measurements (T growing tenfold along it) still to be measured:
    names already in ``out`` are passed over, and once one took more than a tenth of ``budget``
    seconds, ran out of memory or was skipped, the rest are marked ``None`` (skipped).  The caller
    stores each yielded name's result in ``out`` before asking for the next."""
    skip = False
    for name in names:
        if name not in out:
            if skip:
                out[name] = None
                continue
            yield name
        entry = out[name]
        skip = skip or entry is None or entry.get("oom", False) or 10 * entry.get("s", 0) > budget


def _oom(err) -> bool:
    text = str(err)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


def measure_ffbs(results, args):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from numpyro_hdphmm._core.hmm import hmm_posterior_sample_fast

    out = results.setdefault("ffbs", {})
    for K in FFBS_K:
        for method in ("sequential", "parallel"):
            for name in _pending(out, [f"{method}/{T}/{K}" for T in FFBS_T], args.budget):
                T = int(name.split("/")[1])
                rng = np.random.default_rng(0)
                li = jnp.asarray(np.log(rng.dirichlet(np.ones(K))), jnp.float32)
                la = jnp.asarray(np.log(rng.dirichlet(np.ones(K), size=K)), jnp.float32)
                ll = jax.random.normal(jax.random.key(1), (T, K), jnp.float32)
                f = jax.jit(lambda k, a, b, c, m=method: hmm_posterior_sample_fast(k, a, b, c, method=m))
                key = jax.random.key(0)
                try:
                    out[name] = {"s": _seconds(lambda: jax.block_until_ready(f(key, li, la, ll)), args.repeats,
                                               args.budget)}
                except Exception as err:  # noqa: BLE001 - out of memory is a result here
                    if not _oom(err):
                        raise
                    out[name] = {"oom": True}
                print(name, out[name], flush=True)
                _save(args.json, results)


def _readme_setup(T):
    p = models.readme_problem(T)
    return p.model, p.args[0]


def measure_sweep(results, args):
    import jax

    from numpyro_hdphmm.infer import WeakLimitGibbs

    out = results.setdefault("sweep", {})
    for method in ("auto",):
        for name in _pending(out, [f"{method}/{T}" for T in SWEEP_T], args.budget):
            T = int(name.split("/")[1])
            model, y = _readme_setup(T)
            try:
                kernel = WeakLimitGibbs(model)
                state = kernel.init(jax.random.key(0), 0, None, (y,), {})
                t0 = time.perf_counter()
                compiled = jax.jit(lambda s: kernel.sample(s, (y,), {})).lower(state).compile()
                compile_s = time.perf_counter() - t0
                box = [state]

                def sweep():
                    box[0] = jax.block_until_ready(compiled(box[0]))

                out[name] = {"s": _seconds(sweep, args.repeats, args.budget), "compile_s": compile_s}
            except Exception as err:  # noqa: BLE001
                if not _oom(err):
                    raise
                out[name] = {"oom": True}
            print(name, out[name], flush=True)
            _save(args.json, results)


def measure_chains(results, args):
    import jax

    from numpyro_hdphmm.infer import WeakLimitGibbs

    out = results.setdefault("chains", {})
    model, y = _readme_setup(1000)
    for C in CHAINS:
        if str(C) in out:
            continue
        kernel = WeakLimitGibbs(model)
        state = kernel.init(jax.random.split(jax.random.key(0), C), 0, None, (y,), {})
        t0 = time.perf_counter()
        compiled = jax.jit(lambda s: kernel.sample(s, (y,), {})).lower(state).compile()
        compile_s = time.perf_counter() - t0
        mem = compiled.memory_analysis()
        box = [state]

        def sweep():
            box[0] = jax.block_until_ready(compiled(box[0]))

        s = _seconds(sweep, args.repeats, args.budget)
        out[str(C)] = {"s": s, "compile_s": compile_s, "argument": mem.argument_size_in_bytes,
                       "temp": mem.temp_size_in_bytes}
        print(C, out[str(C)], flush=True)
        _save(args.json, results)


def _ms(entry):
    if entry is None:
        return "-"
    if entry.get("oom"):
        return "out of memory"
    return f"{entry['s'] * 1e3:.2f}" if entry["s"] < 1 else f"{entry['s'] * 1e3:.0f}"


def section(results) -> str:
    env = results["env"]
    lines = [
        f"Device: **{env['device_kind']}** ({env['backend']}), jax {env['jax']}, float32, "
        f"measured {env['date']}.  Every figure is the minimum over repeats after a first "
        "(compiling) call; \"-\" where the configuration before it on the row (ten times shorter) "
        f"took more than a tenth of the benchmark's budget ({env.get('budget', 30):g} s).",
        "",
        "#### FFBS, sequential vs parallel-in-time",
        "",
        "Milliseconds per FFBS draw (`hmm_posterior_sample_fast`, what the samplers call).",
        "",
        "| K | method | " + " | ".join(f"T = {T:.0e}".replace("+0", "") for T in FFBS_T) + " |",
        "|---:|---|" + "---:|" * len(FFBS_T),
    ]
    for K in FFBS_K:
        for method in ("sequential", "parallel"):
            cells = [_ms(results.get("ffbs", {}).get(f"{method}/{T}/{K}")) for T in FFBS_T]
            lines.append(f"| {K} | {method} | " + " | ".join(cells) + " |")
    sweep = results.get("sweep", {})
    if sweep:
        lines += [
            "",
            "#### Weak-limit sweep, T up to 10^7",
            "",
            "Milliseconds per `WeakLimitGibbs` sweep of the README's model (Fox et al.'s experiment "
            "A, L = 20), one sequence of T steps, with the FFBS method the package picks.",
            "",
            "| T | ms per sweep | compile s |",
            "|---:|---:|---:|",
        ]
        for T in SWEEP_T:
            e = sweep.get(f"auto/{T}")
            comp = f"{e['compile_s']:.1f}" if e and "compile_s" in e else "-"
            lines.append(f"| {T} | {_ms(e)} | {comp} |")
    chains = results.get("chains", {})
    if chains:
        mib = lambda b: f"{b / 2 ** 20:.2f}"
        lines += [
            "",
            "#### Many vectorized chains",
            "",
            "One sweep of C chains of the README's model (T = 1000, L = 20), `WeakLimitGibbs` "
            "vmapped over chains as `chain_method=\"vectorized\"` does; memory from XLA's memory "
            "analysis of the compiled sweep.",
            "",
            "| chains C | ms per sweep | ms per chain-sweep | state MiB per chain | temporaries MiB per chain | "
            "compile s |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for C in CHAINS:
            e = chains.get(str(C))
            if e is None:
                continue
            lines.append(f"| {C} | {e['s'] * 1e3:.2f} | {e['s'] * 1e3 / C:.3f} | {mib(e['argument'] / C)} | "
                         f"{mib(e['temp'] / C)} | {e['compile_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=["ffbs", "chains", "sweep"],
                        choices=["ffbs", "chains", "sweep"])
    parser.add_argument("--json", help="results file (read first: finished measurements are not repeated)")
    parser.add_argument("--from-json", help="only format the results in this file")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds per configuration")
    parser.add_argument("--max-steps", type=float, default=1e7, help="largest T measured")
    parser.add_argument("--max-chains", type=int, default=1000, help="largest C measured")
    parser.add_argument("--quick", action="store_true", help="T <= 10^4, C <= 10, 2 repeats: a smoke run")
    parser.add_argument("--no-save", action="store_true", help="do not save the section into results/gpu.json")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    if args.quick:
        args.max_steps, args.max_chains, args.repeats, args.budget = min(args.max_steps, 1e4), \
            min(args.max_chains, 10), 2, min(args.budget, 5.0)
    FFBS_T[:] = [T for T in FFBS_T if T <= args.max_steps]
    SWEEP_T[:] = [T for T in SWEEP_T if T <= args.max_steps]
    CHAINS[:] = [C for C in CHAINS if C <= args.max_chains]
    if args.from_json:
        results = _load(args.from_json)
    else:
        import datetime

        import jax

        results = _load(args.json)
        dev = jax.devices()[0]
        results["env"] = {"device_kind": dev.device_kind, "backend": jax.default_backend(),
                          "jax": jax.__version__, "budget": args.budget, "date": datetime.date.today().isoformat()}
        for part in args.parts:
            {"ffbs": measure_ffbs, "sweep": measure_sweep, "chains": measure_chains}[part](results, args)
            _save(args.json, results)
    text = section(results)
    print(text)
    if not args.no_save:
        env = results.get("env", {})
        provenance = {"device": f"{env.get('backend')} ({env.get('device_kind')})"} if env else {}
        print("saved", suite_results.save(QUESTION, SECTION, text, suite_results.command_line("gpu", argv),
                                          data=results, provenance=provenance))


if __name__ == "__main__":
    main()
