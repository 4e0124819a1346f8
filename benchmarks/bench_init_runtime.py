"""Runtime of ``WeakLimitGibbs.init`` on the README's model at large T: the first call (tracing,
compiling, running) and three more with new keys (the cached programs only run), CPU / wall-clock
seconds (``docs/benchmarks.md``, "Compile time": the one-off compilation of the clustering must
not slow the start on large data).

Usage:  python benchmarks/bench_init_runtime.py [T]   (default 100000)
"""
import sys, os, time
import jax
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpyro_hdphmm as nh
from bench_split_merge import readme_model
T = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
y = nh.datasets.fox_experiment_a(num_steps=T).observations
kernel = nh.infer.WeakLimitGibbs(readme_model())
c0 = time.process_time(); jax.block_until_ready(kernel.init(jax.random.key(0), 5, None, (y,), {}))
first = time.process_time() - c0
times = []
for i in range(3):
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(kernel.init(jax.random.key(i + 1), 5, None, (y,), {}))
    times.append((time.process_time() - c0, time.perf_counter() - t0))
print(f"T={T} first init cpu {first:.2f}; cached init cpu/wall: " + ", ".join(f"{c:.2f}/{w:.2f}" for c, w in times),
      "load", os.getloadavg()[0])
