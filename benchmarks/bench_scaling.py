"""Speed-up of ``WeakLimitGibbs`` with the sequences sharded over D (simulated) devices.

For each ``D`` a subprocess starts JAX with ``XLA_FLAGS=--xla_force_host_platform_device_count=D``
and, on ``N`` sequences of ``T`` steps (1-D Gaussian emissions, ``L`` states, Gamma priors on
gamma/alpha/kappa), times

* the compilation of one sweep (``jax.jit(kernel.sample).lower(...).compile()``),
* seconds per sweep: the median over ``--repeats`` of the wall time of ``--sweeps`` sweeps of the
  compiled sweep, after one warm-up call,

unsharded (``mesh=None``) and with ``mesh=nh.infer.sequence_mesh()`` (all D devices), the two
compiled programs timed alternately (repeat by repeat) so that the machine's load affects both.

Simulated CPU devices share the machine's cores (``D`` devices on 2 cores run at most 2 blocks at
once), so on CPU this measures the *overhead* of sharding (the shard_map, the padding, the
reductions), never the speed-up real devices give.  Usage:

    python benchmarks/bench_scaling.py [--devices 1 2 4] [--sequences 64] [--steps 200] [--write]
    python benchmarks/bench_scaling.py --chains 1 10 100 200 [--write]

``--write`` replaces the table between the ``scaling-table`` markers of ``docs/scaling.md``.

``--chains C ...``: memory per chain of ``MCMC(..., num_chains=C, chain_method="vectorized")`` for
the README's model (Fox et al.'s experiment A, T = 1000, L = 20, GaussianNIW, Gamma priors on
gamma/alpha/kappa): XLA's memory analysis of the compiled vectorized sweep (arguments: the carried
state of every chain and the data; temporaries: the sweep's working memory) for each ``C``, and
the per-chain cost as the slope between the smallest and the largest ``C``; ``--write`` puts the
table between the ``chains-table`` markers.  One sweep at the largest ``C`` is also timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys

WORKER = r"""
import json, os, sys, time
import jax, numpy as np, numpyro, numpyro.distributions as dist
import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import WeakLimitGibbs, sequence_mesh

N, T, L, SWEEPS, REPEATS = (int(a) for a in sys.argv[1:6])

def model(y):
    gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
    kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
    emission = nh.emissions.GaussianNIW(np.zeros(1), 0.1, 3.0, np.eye(1))
    nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=L), obs=y)

rng = np.random.default_rng(0)
labels = np.repeat(rng.integers(0, 4, (N, T // 20)), 20, axis=1)
y = (np.array([-4.0, -1.0, 1.0, 4.0])[labels] + rng.normal(size=labels.shape)).astype(np.float32)[..., None]
rows = {"devices": len(jax.devices()), "device_kind": jax.devices()[0].device_kind}
programs = {}
for name, mesh in (("unsharded", None), ("sharded", sequence_mesh())):
    kernel = WeakLimitGibbs(model, mesh=mesh)
    state = kernel.init(jax.random.key(0), 0, None, (y,), {})
    sweep = lambda s, kernel=kernel: kernel.sample(s, (y,), {})
    start = time.perf_counter()
    compiled = jax.jit(sweep).lower(state).compile()
    rows[name] = {"compile_s": time.perf_counter() - start}
    programs[name] = [compiled, jax.block_until_ready(compiled(state)), []]
# the two programs alternate, so that the machine's load affects both alike
for _ in range(REPEATS):
    for name, (compiled, state, times) in programs.items():
        start = time.perf_counter()
        for _ in range(SWEEPS):
            state = compiled(state)
        jax.block_until_ready(state)
        times.append((time.perf_counter() - start) / SWEEPS)
        programs[name][1] = state
for name, (_, _, times) in programs.items():
    rows[name]["sweep_s"] = float(np.median(times))
print("RESULT " + json.dumps(rows))
"""


CHAINS_WORKER = r"""
import json, sys, time
import jax, numpy as np
import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import WeakLimitGibbs

sys.path.insert(0, sys.argv[1])
from bench_split_merge import readme_model

y = nh.datasets.fox_experiment_a(num_steps=1000).observations
model = readme_model()
rows = {"device_kind": jax.devices()[0].device_kind, "dtype": str(jax.numpy.result_type(float))}
for C in (int(a) for a in sys.argv[2:]):
    kernel = WeakLimitGibbs(model)
    keys = jax.random.split(jax.random.key(0), C)
    state = kernel.init(keys, 0, None, (y,), {})
    start = time.perf_counter()
    compiled = jax.jit(lambda s: kernel.sample(s, (y,), {})).lower(state).compile()
    compile_s = time.perf_counter() - start
    mem = compiled.memory_analysis()
    state = jax.block_until_ready(compiled(state))
    start = time.perf_counter()
    state = jax.block_until_ready(compiled(state))
    rows[C] = {"argument": mem.argument_size_in_bytes, "output": mem.output_size_in_bytes,
               "temp": mem.temp_size_in_bytes, "compile_s": compile_s, "sweep_s": time.perf_counter() - start}
    print(json.dumps({C: rows[C]}), file=sys.stderr, flush=True)
print("RESULT " + json.dumps(rows))
"""


def run_worker(script: str, *argv, xla_flags: str = "") -> dict:
    """Run a worker script in a fresh Python (this checkout on its path, ``XLA_FLAGS`` set before JAX
    starts) and return the JSON of its ``RESULT`` line."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), os.environ.get("PYTHONPATH")]))}
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    out = subprocess.run([sys.executable, "-c", script, *map(str, argv)], capture_output=True, text=True, env=env,
                         timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def measure_chains(chains) -> dict:
    return run_worker(CHAINS_WORKER, os.path.dirname(os.path.abspath(__file__)), *chains)


def chains_table(results, chains) -> str:
    mib = lambda b: f"{b / 2 ** 20:.2f} MiB"
    lo, hi = str(min(chains)), str(max(chains))
    per = {k: (results[hi][k] - results[lo][k]) / (int(hi) - int(lo)) for k in ("argument", "temp")}
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"README model (Fox A, T = 1000, L = 20, GaussianNIW), `WeakLimitGibbs`, `chain_method=\"vectorized\"`, "
        f"{results['dtype']}, {results['device_kind']} ({os.cpu_count()} cores, load average {load:.1f}); XLA's "
        f"memory analysis of the compiled sweep of C chains: arguments (every chain's carried state and the data) "
        f"and temporaries (the sweep's working memory).  Per chain: the slope between C = {lo} and C = {hi}: "
        f"**{mib(per['argument'])} state + {mib(per['temp'])} temporaries**.",
        "",
        "| chains C | arguments | temporaries | total per chain | one sweep | compile s |",
        "|---|---|---|---|---|---|",
    ]
    for c in chains:
        r = results[str(c)]
        lines.append(f"| {c} | {mib(r['argument'])} | {mib(r['temp'])} | {mib((r['argument'] + r['temp']) / c)} | "
                     f"{r['sweep_s'] * 1e3:.0f} ms | {r['compile_s']:.1f} |")
    return "\n".join(lines)


def measure(devices: int, sequences: int, steps: int, states: int, sweeps: int, repeats: int) -> dict:
    return run_worker(WORKER, sequences, steps, states, sweeps, repeats,
                      xla_flags=f"--xla_force_host_platform_device_count={devices}")


def table(results, args) -> str:
    base_u, base_s = results[0]["unsharded"]["sweep_s"], results[0]["sharded"]["sweep_s"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"`WeakLimitGibbs`, N = {args.sequences} sequences of T = {args.steps} steps, L = {args.states}, 1-D "
        f"Gaussian emissions, float32; {results[0]['device_kind']} devices simulated with "
        f"`--xla_force_host_platform_device_count` on a machine with {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}; load average {load:.1f} at the end of the run); "
        f"median of {args.repeats} x {args.sweeps} sweeps.  Speed-up: seconds per sweep on "
        f"{results[0]['devices']} device over seconds per sweep on D devices, same program.",
        "",
        "| devices D | unsharded s/sweep | sharded s/sweep | speed-up, unsharded | speed-up, sharded | "
        "compile s (unsharded / sharded) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        u, s = r["unsharded"], r["sharded"]
        lines.append(f"| {r['devices']} | {u['sweep_s'] * 1e3:.1f} ms | {s['sweep_s'] * 1e3:.1f} ms | "
                     f"{base_u / u['sweep_s']:.2f}x | {base_s / s['sweep_s']:.2f}x | "
                     f"{u['compile_s']:.1f} / {s['compile_s']:.1f} |")
    return "\n".join(lines)


def write_table(text: str, marker: str = "scaling-table") -> str:
    """Replace the table between the ``marker`` markers of ``docs/scaling.md``."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "scaling.md")
    body = open(path).read()
    block = f"<!-- {marker} -->\n{text}\n<!-- /{marker} -->"
    body = re.sub(rf"<!-- {marker} -->.*?<!-- /{marker} -->", lambda _: block, body, flags=re.S)
    with open(path, "w") as fh:
        fh.write(body)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--states", type=int, default=10)
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chains", type=int, nargs="+", help="memory per vectorized chain instead (README model)")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.chains:
        text = chains_table(measure_chains(args.chains), sorted(args.chains))
        print(text)
        if args.write:
            print(f"wrote {write_table(text, 'chains-table')}")
        return
    results = []
    for d in args.devices:
        results.append(measure(d, args.sequences, args.steps, args.states, args.sweeps, args.repeats))
        print(json.dumps(results[-1]), flush=True)
    text = table(results, args)
    print(text)
    if args.write:
        print(f"wrote {write_table(text)}")

if __name__ == "__main__":
    main()
