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

``--write`` replaces the table between the ``scaling-table`` markers of ``docs/scaling.md``.
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


def measure(devices: int, sequences: int, steps: int, states: int, sweeps: int, repeats: int) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", WORKER, str(sequences), str(steps), str(states), str(sweeps),
                          str(repeats)], capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


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


def write_table(text: str) -> str:
    """Replace the table between the ``scaling-table`` markers of ``docs/scaling.md``."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "scaling.md")
    body = open(path).read()
    block = f"<!-- scaling-table -->\n{text}\n<!-- /scaling-table -->"
    body = re.sub(r"<!-- scaling-table -->.*?<!-- /scaling-table -->", lambda _: block, body, flags=re.S)
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
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
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
