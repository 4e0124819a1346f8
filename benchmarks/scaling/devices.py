"""``WeakLimitGibbs`` against the number of devices and of vectorized chains.

``devices``: for each D a fresh process starts JAX with
``XLA_FLAGS=--xla_force_host_platform_device_count=D`` and, on N sequences of T steps (1-D
Gaussian emissions, L states, Gamma priors on gamma/alpha/kappa), compiles one sweep unsharded
(``mesh=None``) and one with ``mesh=nh.infer.sequence_mesh()`` (all D devices) and times them
alternately (harness timer).  Simulated CPU devices share the machine's cores, so on CPU this
measures the overhead of sharding (shard_map, padding, reductions), never the speed-up real
devices give.

``chains``: memory per chain of ``chain_method="vectorized"`` on the README's model (T = 1000,
L = 20): XLA's memory analysis of the compiled vectorized sweep (arguments: the carried state of
every chain and the data; temporaries: the sweep's working memory) for each C, one sweep timed.

Usage::

    python -m benchmarks.scaling devices [--devices 1 2 4] [--sequences 64] [--steps 200] [--quick]
    python -m benchmarks.scaling chains [--chains 1 10 100 200] [--quick]

Results: sections "Sharding over simulated devices" and "Memory per vectorized chain" of
``benchmarks/results/scaling.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from ..harness import models, results, timing

QUESTION = "scaling"


def devices_model(L):
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
        kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
        emission = nh.emissions.GaussianNIW(np.zeros(1), 0.1, 3.0, np.eye(1))
        nh.sample("y", nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=L), obs=y)

    return model


def worker_devices(N, T, L, sweeps, blocks):
    import jax

    from numpyro_hdphmm.infer import sequence_mesh

    rng = np.random.default_rng(0)
    labels = np.repeat(rng.integers(0, 4, (N, max(T // 20, 1))), 20, axis=1)[:, :T]
    y = (np.array([-4.0, -1.0, 1.0, 4.0])[labels] + rng.normal(size=labels.shape)).astype(np.float32)[..., None]
    contenders = {name: timing.kernel_contender(models.kernel("WeakLimitGibbs", devices_model(L), mesh=mesh), (y,),
                                                sweeps_per_call=sweeps)
                  for name, mesh in (("unsharded", None), ("sharded", sequence_mesh()))}
    t = timing.alternate(contenders, blocks, 1, warmup_calls=1, sweeps_per_call=sweeps)
    out = {"devices": len(jax.devices()), "device_kind": jax.devices()[0].device_kind}
    out.update({k: {"compile_s": v.compile_s, "sweep_s": v.median} for k, v in t.items()})
    print("RESULT " + json.dumps(out))


def worker_chains(chains):
    import jax

    p = models.readme_problem(1000)
    out = {"device_kind": jax.devices()[0].device_kind}
    for C in chains:
        c = timing.kernel_contender(models.kernel("WeakLimitGibbs", p.model), p.args, num_chains=C)
        mem = c.call.memory_analysis()
        state = timing.block(c.call(c.state))
        t0 = time.perf_counter()
        timing.block(c.call(state))
        out[C] = {"argument": mem.argument_size_in_bytes, "output": mem.output_size_in_bytes,
                  "temp": mem.temp_size_in_bytes, "compile_s": c.compile_s, "sweep_s": time.perf_counter() - t0}
    print("RESULT " + json.dumps(out))


def spawn(what, *argv, xla_flags=""):
    env = dict(os.environ)
    if xla_flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + xla_flags).strip()
    out = subprocess.run([sys.executable, "-m", "benchmarks.scaling", what, "--_worker", what, *map(str, argv)],
                         cwd=models.REPO, capture_output=True, text=True, env=env, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=None, help="chains: C values (1 10 100 200)")
    parser.add_argument("--devices", type=int, nargs="+", default=None, help="devices: D values (1 2 4)")
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--states", type=int, default=10)
    parser.add_argument("--sweeps", type=int, default=5, help="sweeps per timed call")
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--_worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--what", choices=["devices", "chains"], default="devices", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True
    what = "chains" if args.chains or args.what == "chains" else "devices"
    if args._worker:
        kind, *values = args._worker
        (worker_chains if kind == "chains" else lambda v: worker_devices(*v))([int(v) for v in values])
        return
    command = results.command_line("scaling " + what, argv)
    if what == "chains":
        chains = args.chains or ([1, 2] if args.quick else [1, 10, 100, 200])
        r = spawn("chains", *chains)
        rows = []
        for C in sorted(chains):
            e = r[str(C)]
            rows.append([C, f"{e['argument'] / 2**20:.2f}", f"{e['temp'] / 2**20:.2f}",
                         f"{(e['argument'] + e['temp']) / C / 2**20:.3f}", f"{e['sweep_s'] * 1e3:.1f}",
                         f"{e['compile_s']:.1f}"])
        print(rows)
        if not args.no_save:
            print("saved", results.save(QUESTION, "Memory per vectorized chain", [results.text(
                "`WeakLimitGibbs` on the README's model (T = 1000, L = 20), C chains vmapped as "
                "`chain_method=\"vectorized\"`; XLA's memory analysis of the compiled sweep."), results.table(
                ["chains C", "arguments (MiB)", "temporaries (MiB)", "MiB per chain", "ms per sweep", "compile (s)"],
                rows, ["r"] * 6)], command, data=r))
        return
    devices = args.devices or ([1, 2] if args.quick else [1, 2, 4])
    if args.quick:
        args.sequences, args.steps, args.sweeps, args.blocks = 4, 40, 1, 1
    rows = []
    for d in devices:
        rows.append(spawn("devices", args.sequences, args.steps, args.states, args.sweeps, args.blocks,
                          xla_flags=f"--xla_force_host_platform_device_count={d}"))
        print(json.dumps(rows[-1]), flush=True)
    base_u, base_s = rows[0]["unsharded"]["sweep_s"], rows[0]["sharded"]["sweep_s"]
    tab = results.table(["devices D", "unsharded ms/sweep", "sharded ms/sweep", "speed-up, unsharded",
                         "speed-up, sharded", "compile s (unsharded / sharded)"],
                        [[r["devices"], f"{r['unsharded']['sweep_s'] * 1e3:.1f}", f"{r['sharded']['sweep_s'] * 1e3:.1f}",
                          f"{base_u / r['unsharded']['sweep_s']:.2f}x", f"{base_s / r['sharded']['sweep_s']:.2f}x",
                          f"{r['unsharded']['compile_s']:.1f} / {r['sharded']['compile_s']:.1f}"] for r in rows],
                        ["r"] * 6)
    if not args.no_save:
        print("saved", results.save(QUESTION, "Sharding over simulated devices", [results.text(
            f"`WeakLimitGibbs`, N = {args.sequences} sequences of T = {args.steps} steps, L = {args.states}, 1-D "
            "Gaussian, float32; devices simulated with `--xla_force_host_platform_device_count` (they share the "
            "machine's cores: this measures the overhead of sharding).  Speed-up: s per sweep on the first D over "
            "s per sweep on D, same program."), tab], command, data=rows))


if __name__ == "__main__":
    main()
