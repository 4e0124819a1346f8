"""Where the CPU seconds of the first ``MCMC.run`` in a fresh process go (``docs/benchmarks.md``,
"Compile time").

Runs ``MCMC(kernel, num_warmup=5, num_samples=5, num_chains=C, chain_method="vectorized").run`` on
the README's model (Fox et al.'s experiment A, T = 1000; :func:`bench_split_merge.readme_model`)
and attributes the process's CPU seconds (``time.process_time``, all threads) to JAX's tracing,
lowering and XLA compilation of each function, as JAX's compile log names them
(``jax_log_compiles``): ``jax._src.dispatch.log_elapsed_time``, the context manager that times
them, is replaced by one that also reads the CPU clock (nested tracing is left out of the sums).
Prints the 25 largest items, the totals per stage, and a ``RESULT`` JSON line with the run's CPU
and wall-clock seconds and a SHA-256 of every sample (same key, same hash: the draws are
bit-identical; compare two checkouts with ``PYTHONPATH=...``).

Usage:  python benchmarks/bench_compile_breakdown.py [KERNEL [NUM_CHAINS]]
"""
import json, os, sys, time, collections
c_start = time.process_time()
import jax
from jax._src import dispatch

records = []
stack = []


class Timed:
    def __init__(self, fmt, fun_name, event=None):
        self.fmt, self.fun_name, self.event = fmt, fun_name, event

    def __enter__(self):
        self.t0, self.c0 = time.time(), time.process_time()
        stack.append(self)

    def __exit__(self, *exc):
        stack.pop()
        records.append(dict(event=(self.event or self.fmt[:30]).split("/")[-1], fun=self.fun_name,
                            wall=time.time() - self.t0, cpu=time.process_time() - self.c0, depth=len(stack)))


dispatch.log_elapsed_time = Timed
from numpyro.infer import MCMC
import numpyro_hdphmm as nh
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_split_merge import readme_model

kernel_name = sys.argv[1] if len(sys.argv) > 1 else "WeakLimitGibbs"
chains = int(sys.argv[2]) if len(sys.argv) > 2 else 1
c_import = time.process_time()
y = nh.datasets.fox_experiment_a(num_steps=1000).observations
kernel = getattr(nh.infer, kernel_name)(readme_model())
mcmc = MCMC(kernel, num_warmup=5, num_samples=5, num_chains=chains, progress_bar=False,
            chain_method="vectorized")
c0, t0 = time.process_time(), time.time()
mcmc.run(jax.random.key(0), y)
jax.block_until_ready(mcmc.get_samples())
cpu, wall = time.process_time() - c0, time.time() - t0
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in records:
    if r["depth"] == 0 or r["event"] != "jaxpr_trace_duration":
        a = agg[(r["event"], r["fun"])]
        a[0] += 1; a[1] += r["cpu"]; a[2] += r["wall"]
rows = sorted(((k, v) for k, v in agg.items()), key=lambda kv: -kv[1][1])
print(f"first run: cpu {cpu:.2f} wall {wall:.2f}; import cpu {c_import - c_start:.2f}; load {os.getloadavg()}")
for (ev, fun), (n, c, w) in rows[:25]:
    print(f"  {ev:40s} {fun[:50]:50s} n={n:3d} cpu={c:6.2f} wall={w:6.2f}")
tot = collections.defaultdict(float)
for (ev, fun), (n, c, w) in rows:
    tot[ev] += c
print("  totals:", {k: round(v, 2) for k, v in tot.items()}, "n compiles", sum(v[0] for (ev, _), v in agg.items() if "backend" in ev))
s = mcmc.get_samples()
import hashlib, numpy as np
h = hashlib.sha256()
for k in sorted(s):
    h.update(k.encode()); h.update(np.asarray(s[k]).tobytes())
print("RESULT " + json.dumps(dict(kernel=kernel_name, cpu=cpu, wall=wall, hash=h.hexdigest())))
