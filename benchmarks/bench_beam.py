"""Benchmark the beam sampler (``BeamSampler``, Van Gael et al. 2008) against ``WeakLimitGibbs``.

Measures, on the default JAX device in float32:

* seconds per sweep (median of a jitted ``kernel.sample`` after compilation and warm-up sweeps,
  the two kernels timed alternately in one process, fastest of three compiled copies) of ``BeamSampler`` with capacity ``K`` and
  ``WeakLimitGibbs`` with ``L = K`` (the same number of state slots: both sweeps cost
  ``O(T K^2)``) for ``T`` in {1e3, 1e4, 1e5} x ``K`` in {10, 30}, 2-D Gaussian emissions
  (``GaussianNIW.weakly_informative``), constant hyperparameters, data of 10 well-separated
  segments, both chains started from the true segmentation (see below); the ratio beam / weak
  limit (target <= 1.5);
* scaling with the number of instantiated states: ``T = 1e4``, capacity 40, data with 2, 10
  and 20 true segments, started from the true segmentation;
* state discovery from the model's prior draw (``T = 1e3``, 10 segments, ``K = 30``): states in
  use after some sweeps, for the benchmark's prior (``mean_precision = 0.01``: prior means ~50
  data standard deviations wide) and for ``mean_precision = 1`` (prior means as wide as the
  data).  The prior draw of the sticky model uses one state; new states get their emission
  parameters from the prior and must be admitted by every slice of a segment, so the beam
  sampler discovers the segments far more slowly than the weak limit (whose L slots are all
  offered at every step);
* PGAS synthetic set A (Tripuraneni et al. 2015, experiments, "as in Van Gael et al. 2008";
  ``nh.datasets.pgas_set_a``: ``T = 4000``, 4 states, self-transition 0.75, means
  -2, -0.5, 1, 4, s.d. 0.5): the non-sticky iHMM with the beam toolbox's hyperpriors
  ``alpha ~ Gamma(4, 1)``, ``gamma ~ Gamma(3, 6)`` and a nearly known variance
  (``DiagonalGaussian(0, 1/16, 1000, 250)``: precision 4 +- 3%, mean ``N(0, 2^2)``); 4
  vectorized chains started from 10 states (uniform random labels, as the toolbox does),
  1000 sweeps (one compiled ``lax.scan``): sweeps until the chain first uses exactly 4
  states, the normalized Hamming distance after the last sweep, and the ESS per second of
  ``num_states`` over the last half of the sweeps (``arviz.ess`` over the chains, divided by
  the wall time of that half); ``BeamSampler`` (capacity 40), ``WeakLimitGibbs`` (``L = 40``)
  and ``DirectAssignmentGibbs`` (capacity 40).

Usage::

    python benchmarks/bench_beam.py [--quick] [--write] [--repeats N] [--set-a-only] [--set-a-sweeps S]

``--quick``: ``T`` in {1e3, 1e4}, 300 sweeps on set A; ``--write`` replaces the "Beam sampler"
section of ``docs/benchmarks.md`` (with ``--set-a-only``: only its set A subsection).

``--set-a-default [--set-a-chains 8] [--set-a-kernels ...] [--set-a-sweeps 1000]``: only set A, from
each kernel's default ``init_strategy`` instead of 10 random labels (issue 16's target: 4 large
states in every chain within 300 sweeps, Hamming < 0.05 after 1000); ``--write`` replaces the
subsection "PGAS synthetic set A from the default initialization".
"""

from __future__ import annotations

import argparse
import os
import re
import time

import numpy as np

from _docs import write_section  # benchmarks/_docs.py (scripts run from this folder)

SECTION = "## Beam sampler"
SET_A_HEADING = "### PGAS synthetic set A"
SET_A_DEFAULT_HEADING = "### PGAS synthetic set A from the default initialization"
KERNELS = ("BeamSampler", "WeakLimitGibbs", "DirectAssignmentGibbs")


def fixed_model(K, mean_precision=None):
    import numpyro_hdphmm as nh

    def model(y):
        extra = {} if mean_precision is None else {"mean_precision": mean_precision}
        emission = nh.emissions.GaussianNIW.weakly_informative(y, **extra)
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 10.0, emission, max_states=K), obs=y)

    return model


def segments(T, num_segments=10):
    """The true segmentation of :func:`synthetic_data`: ``num_segments`` equal blocks."""
    return np.minimum(np.arange(T) * num_segments // T, num_segments - 1)


def synthetic_data(T, D, num_segments=10, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=5.0, size=(num_segments, D))
    return (means[segments(T, num_segments)] + rng.normal(size=(T, D))).astype(np.float32)


def set_a_model(K):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh

    def model(y):
        gamma = numpyro.sample("gamma", dist.Gamma(3.0, 6.0))
        alpha = numpyro.sample("alpha", dist.Gamma(4.0, 1.0))
        emission = nh.emissions.DiagonalGaussian(jnp.zeros(1), 1.0 / 16.0, 1000.0, 250.0)
        nh.sample("y", nh.HDPHMM(gamma, alpha, emission, max_states=K), obs=y)

    return model


def _block(x):
    import jax

    return jax.block_until_ready(x)


def time_pair(K, y, init_states, repeats=10, warmup=10, budget_s=120.0, seed=0, copies=3):
    """Beam (capacity ``K``) and weak limit (``L = K``) on the same data, both started from
    ``init_states``, ``warmup`` sweeps, then ``repeats`` sweeps of each, alternately, for
    ``copies`` separately compiled copies of each kernel's step.  Returns ``{name: (median s per
    sweep of the fastest copy, compile s, mean instantiated (beam), states used at the end)}``.

    Also returns, per kernel, the temporary arena of one compiled sweep in bytes (XLA:CPU
    allocates it per call; glibc serves requests above 32 MiB with fresh ``mmap``s whose pages
    fault in on every call).  Why copies: separately compiled copies of the same program
    sometimes settle at different speeds on the 2-core benchmark machine (each stable over its
    repeats), so the fastest copy is taken as the program's speed."""
    import jax
    import jax.numpy as jnp

    from numpyro_hdphmm.infer import BeamSampler, WeakLimitGibbs

    runs, arena = [], {}
    for cls in (BeamSampler, WeakLimitGibbs):
        kernel = cls(fixed_model(K))
        state = kernel.init(jax.random.key(seed), 0, {"y_states": jnp.asarray(init_states, jnp.int32)}, (y,), {})
        for copy in range(copies):
            step = jax.jit(lambda s, kernel=kernel, copy=copy: kernel.sample(s, (y,), {}))
            t0 = time.perf_counter()
            compiled = step.lower(state).compile()
            compile_s = time.perf_counter() - t0
            arena.setdefault(cls.__name__, compiled.memory_analysis().temp_size_in_bytes)
            s = _block(step(state))
            for _ in range(warmup):
                s = step(s)
            runs.append([cls.__name__, step, _block(s), compile_s, [], []])
    start = time.perf_counter()
    for i in range(repeats):
        for run in runs:
            t0 = time.perf_counter()
            run[2] = _block(run[1](run[2]))
            run[4].append(time.perf_counter() - t0)
            if hasattr(run[2].info, "num_instantiated"):
                run[5].append(int(run[2].info.num_instantiated))
        if i >= 2 and time.perf_counter() - start > budget_s:
            break
    out = {}
    for name, _, state, compile_s, times, inst in runs:
        entry = (float(np.median(times)), compile_s, float(np.mean(inst)) if inst else float("nan"),
                 int(state.num_states), arena[name])
        if name not in out:
            out[name] = entry
        elif entry[0] < out[name][0]:
            out[name] = (entry[0], out[name][1]) + entry[2:]
    return out


def discovery(T, K, sweeps, checkpoints, mean_precision=None, seed=0):
    """States in use at ``checkpoints`` (sweep numbers) from the model's prior draw, per kernel."""
    import jax

    from numpyro_hdphmm.infer import BeamSampler, WeakLimitGibbs

    y = synthetic_data(T, 2)
    out = {}
    for cls in (BeamSampler, WeakLimitGibbs):
        kernel = cls(fixed_model(K, mean_precision))
        state = kernel.init(jax.random.key(seed), 0, None, (y,), {})

        def body(s, _, kernel=kernel):
            s = kernel.sample(s, (y,), {})
            return s, s.num_states

        _, used = _block(jax.jit(lambda s, body=body: jax.lax.scan(body, s, None, length=sweeps))(state))
        used = np.asarray(used)
        out[cls.__name__] = [int(state.num_states)] + [int(used[c - 1]) for c in checkpoints]
    return out


def set_a_run(cls, K, sweeps, num_chains=4, seed=0, start="random10", checkpoint=300, mode_draws=0):
    """Set A from 10 states (``start="random10"``: uniform random labels, the owned sites made
    consistent with them) or from the kernel's default ``init_strategy`` (``start="default"``):
    first sweep with exactly 4 states per chain, final Hamming per chain, the Hamming distance and
    the number of large states at sweep ``checkpoint``, ESS of num_states over the last half and
    ESS/s (wall time of that half), seconds, overflow count, final states, mean states in use over
    the last half.  ``mode_draws > 0``: also the Hamming distance of each chain's point estimate,
    the per-step majority label over its last ``mode_draws`` draws (each draw relabelled to the
    chain's last draw first, so that a label switch inside the window cannot split a state)."""
    import arviz as az
    import jax
    import jax.numpy as jnp

    import numpyro_hdphmm as nh

    data = nh.datasets.pgas_set_a(num_steps=4000, seed=seed)
    y = data.observations.astype(np.float32)
    T = y.shape[0]
    kernel = cls(set_a_model(K))
    keys = jax.random.split(jax.random.key(seed), num_chains)
    init = None
    if start == "random10":
        rng = np.random.default_rng(seed)
        init_states = jnp.asarray(rng.integers(0, 10, size=(num_chains, T)), jnp.int32)
        init = {"y_states": init_states}
        if cls.__name__ == "WeakLimitGibbs":
            init.update(weak_limit_init(init_states, y, K))
        elif cls.__name__ == "DirectAssignmentGibbs":
            init["y_beta"] = infinite_beta(num_chains, K)
    elif start != "default":
        raise ValueError(f"`start` must be 'random10' or 'default', got {start!r}.")
    state = kernel.init(keys, 0, init, (y,), {})

    min_steps = int(np.ceil(0.01 * T))

    def body(s, _):
        s = kernel.sample(s, (y,), {})
        counts = jax.vmap(lambda z: jnp.zeros(K, jnp.int32).at[z].add(1))(s.z["y_states"])
        return s, (s.num_states, jnp.sum(counts >= min_steps, -1), s.overflow)

    def body_with_states(s, _):
        s, out = body(s, _)
        return s, (*out, s.z["y_states"])

    checkpoint = min(checkpoint, sweeps)
    mode_draws = min(mode_draws, sweeps - checkpoint)
    run_to = lambda n, f=body: jax.jit(lambda s: jax.lax.scan(f, s, None, length=n)).lower(state).compile()
    first_part = run_to(checkpoint)
    second_part = run_to(sweeps - checkpoint - mode_draws) if sweeps - checkpoint > mode_draws else None
    last_part = run_to(mode_draws, body_with_states) if mode_draws else None
    t0 = time.perf_counter()
    state, (num_states, num_large, overflow) = _block(first_part(state))
    mid = np.asarray(state.z["y_states"])
    for part in (second_part, last_part):
        if part is not None:
            state, rest = _block(part(state))
            num_states, num_large, overflow = (jnp.concatenate([a, b]) for a, b in zip((num_states, num_large, overflow), rest))
    seconds = time.perf_counter() - t0
    hamming_mode = []
    if last_part is not None:
        draws = np.asarray(rest[3])  # (mode_draws, chains, T)
        from bench_initialization import majority

        hamming_mode = [float(nh.diagnostics.hamming_distance(majority(draws[:, c]), data.states))
                        for c in range(num_chains)]
    num_states = np.asarray(num_states).T  # (chains, sweeps)
    num_large = np.asarray(num_large).T
    first = lambda hits: int(np.argmax(hits)) + 1 if np.any(hits) else None
    reach = [first(ns == 4) for ns in num_states]
    reach_large = [first(nl == 4) for nl in num_large]
    final = np.asarray(state.z["y_states"])
    hamming = [float(nh.diagnostics.hamming_distance(final[c], data.states)) for c in range(num_chains)]
    hamming_mid = [float(nh.diagnostics.hamming_distance(mid[c], data.states)) for c in range(num_chains)]
    tail = num_states[:, sweeps // 2:].astype(float)
    ess = float(az.ess(tail)) if np.ptp(tail) > 0 else float("nan")
    tail_s = seconds * (sweeps - sweeps // 2) / sweeps
    occupancy = []
    for c in range(num_chains):
        labels, counts = np.unique(final[c], return_counts=True)
        mu = np.asarray(state.z["y_mu"])[c, labels, 0]
        occupancy.append(sorted(zip(np.round(mu.astype(float), 2).tolist(), counts.tolist())))
    hyper = {k: np.round(np.asarray(state.z[k], float), 2).tolist() for k in ("gamma", "alpha")}
    return {"reach": reach, "reach_large": reach_large, "final_large": [int(n) for n in num_large[:, -1]],
            "hamming": hamming, "hamming_mid": hamming_mid, "checkpoint": checkpoint, "hamming_mode": hamming_mode,
            "mode_draws": mode_draws,
            "large_mid": [int(n) for n in num_large[:, checkpoint - 1]], "ess": ess, "ess_per_s": ess / tail_s, "seconds": seconds,
            "occupancy": occupancy, "hyper": hyper,
            "overflow": int(np.sum(np.asarray(overflow))), "final_states": [int(n) for n in num_states[:, -1]],
            "tail_mean": float(tail.mean()), "trace": num_states}


def infinite_beta(chains, K, num_labels=10):
    """``beta`` (slots, rest) for the ``num_labels``-label start of the infinite-model kernels: the
    mean of ``Dir(1, ..., 1, gamma)`` over (labels, rest) at the prior mean ``gamma = 0.5``."""
    import jax.numpy as jnp

    beta = np.zeros(K + 1)
    beta[:num_labels] = 1.0 / (num_labels + 0.5)
    beta[K] = 0.5 / (num_labels + 0.5)
    return jnp.asarray(np.tile(beta, (chains, 1)), jnp.float32)


def weak_limit_init(init_states, y, L, num_labels=10):
    """Owned sites of WeakLimitGibbs consistent with a start of ``num_labels`` random labels (its
    own init draws them from the prior, and its first FFBS would discard the labels): beta uniform
    over the used labels (tiny elsewhere), rows at the smoothed empirical transition frequencies,
    emission means at the per-label sample means (the other slots: draws from the prior
    ``N(0, 2^2)``), precisions 4."""
    import jax.numpy as jnp

    chains, T = init_states.shape
    z = np.asarray(init_states)
    rng = np.random.default_rng(1)
    beta = np.full(L + 1, 1e-3)
    beta[:num_labels] = 1.0
    beta[L] = 0.0
    beta /= beta.sum()
    trans, mus = [], []
    for c in range(chains):
        n = np.full((L + 1, L + 1), 1e-2)
        np.add.at(n, (z[c, :-1], z[c, 1:]), 1.0)
        n[L, z[c, 0]] += 1.0
        n[:, L] = 0.0
        trans.append(n / n.sum(-1, keepdims=True))
        mu = rng.normal(scale=2.0, size=(L, 1))
        for k in range(num_labels):
            mu[k, 0] = y[z[c] == k, 0].mean()
        mus.append(mu)
    f32 = lambda a: jnp.asarray(np.asarray(a), jnp.float32)
    return {"y_beta": f32(np.tile(beta, (chains, 1))), "y_trans": f32(trans), "y_mu": f32(mus),
            "y_precision": f32(np.full((chains, L, 1), 4.0))}


def set_a_text(set_a, sweeps):
    lines = [
        f"Non-sticky iHMM, alpha ~ Gamma(4, 1), gamma ~ Gamma(3, 6) (the beam toolbox's hyperpriors), precision "
        f"nearly fixed at 4, mean ~ N(0, 2^2); T = 4000, 4 true states; 4 vectorized chains started from 10 states "
        f"(uniform random labels), {sweeps} sweeps, capacity / L = 40. Sweeps to reach 4 states: first sweep with "
        f"exactly 4 states in use (- : never); \"large\": the same counting only states that hold >= 1% of the "
        f"steps (40). ESS of `num_states` over the last {sweeps - sweeps // 2} sweeps; "
        "ESS/s divides it by the wall time of those sweeps (4 chains).",
        "",
        "| kernel | sweeps to reach 4 states (per chain) | to 4 large states | Hamming after the last sweep "
        "| final states (large) | mean states (last half) | ESS | ESS/s | s |",
        "|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for name, r in set_a.items():
        reach = ", ".join("-" if v is None else str(v) for v in r["reach"])
        ham = ", ".join(f"{h:.3f}" for h in r["hamming"])
        reach_large = ", ".join("-" if v is None else str(v) for v in r["reach_large"])
        fin = ", ".join(f"{v} ({w})" for v, w in zip(r["final_states"], r["final_large"]))
        lines.append(f"| {name} | {reach} | {reach_large} | {ham} | {fin} | {r['tail_mean']:.2f} | {r['ess']:.1f} "
                     f"| {r['ess_per_s']:.3f} | {r['seconds']:.1f} |")
    over = {name: r["overflow"] for name, r in set_a.items() if r["overflow"]}
    if over:
        lines.append("\nOverflow (capacity reached) in " + ", ".join(f"{n}: {v}" for n, v in over.items())
                     + " chain-sweeps.")
    return "\n".join(lines)


def set_a_exact_reference(num_draws=8, seed=0):
    """Set A's states under the TRUE parameters (``info``'s transition matrix, initial
    probabilities, means and variance): the Hamming distances of ``num_draws`` exact posterior
    draws (FFBS), of the per-step marginal mode (forward-backward) and of the Viterbi path; the
    level a sampler's draws and point estimates can reach."""
    import jax
    import jax.numpy as jnp
    from jax.scipy.stats import norm

    import numpyro_hdphmm as nh
    from numpyro_hdphmm._core.hmm import hmm_posterior_sample, hmm_smoother, hmm_viterbi

    data = nh.datasets.pgas_set_a(num_steps=4000, seed=seed)
    info = data.info
    ll = norm.logpdf(jnp.asarray(data.observations, jnp.float64 if jax.config.x64_enabled else jnp.float32),
                     jnp.asarray(info["means"]), jnp.sqrt(info["variances"]))  # (T, 4)
    log_init, log_trans = jnp.log(jnp.asarray(info["initial_probs"])), jnp.log(jnp.asarray(info["transition_matrix"]))
    keys = jax.random.split(jax.random.key(seed + 100), num_draws)
    draws = jax.vmap(lambda k: hmm_posterior_sample(k, log_init, log_trans, ll)[0])(keys)
    ham = lambda z: float(nh.diagnostics.hamming_distance(np.asarray(z), data.states))
    return {"draws": [ham(z) for z in draws],
            "marginal_mode": ham(jnp.argmax(hmm_smoother(log_init, log_trans, ll).log_smoothed, -1)),
            "viterbi": ham(hmm_viterbi(log_init, log_trans, ll))}


def set_a_default_text(set_a, sweeps, num_chains, reference=None):
    """The table of :func:`set_a_run` results from the kernels' default initialization (issue 16's
    set A target: 4 large states in every chain within 300 sweeps, Hamming < 0.05 after 1000)."""
    checkpoint = next(iter(set_a.values()))["checkpoint"]
    mode_draws = next(iter(set_a.values())).get("mode_draws", 0)
    mode_head = f" point estimate, last {mode_draws} draws |" if mode_draws else ""
    lines = [
        f"The set-up above (T = 4000, 4 true states, capacity / L = 40), {num_chains} vectorized chains from each "
        f"kernel's default `init_strategy` (no `init_params`), {sweeps} sweeps.  Issue 16's target: 4 large "
        f"states (each >= 1% of the steps) in every chain within {checkpoint} sweeps, Hamming < 0.05 after 1000.",
        "Hamming distances per chain" + (f"; the point estimate is each step's majority label over the chain's "
                                         f"last {mode_draws} draws (relabelled to its last draw)" if mode_draws else "")
        + ".",
        "",
        f"| kernel | sweeps to 4 large states (per chain) | large states at sweep {checkpoint} | Hamming at sweep "
        f"{checkpoint} | Hamming after sweep {sweeps} |{mode_head} final states (large) | s |",
        "|---|---|---|---|---|" + ("---|" if mode_draws else "") + "---|---:|",
    ]
    fmt = lambda hs: ", ".join(f"{h:.3f}" for h in hs)
    for name, r in set_a.items():
        reach_large = ", ".join("-" if v is None else str(v) for v in r["reach_large"])
        fin = ", ".join(f"{v} ({w})" for v, w in zip(r["final_states"], r["final_large"]))
        mode_cell = f" {fmt(r['hamming_mode'])} |" if mode_draws else ""
        lines.append(f"| {name} | {reach_large} | {', '.join(map(str, r['large_mid']))} | "
                     f"{fmt(r['hamming_mid'])} | {fmt(r['hamming'])} |{mode_cell} {fin} | {r['seconds']:.0f} |")
    if reference is not None:
        lines += ["", f"The same data under the true parameters (the level the posterior itself allows): "
                      f"{len(reference['draws'])} exact posterior draws of the states (FFBS) have Hamming "
                      f"{fmt(sorted(reference['draws']))}; the per-step marginal mode (forward-backward) "
                      f"{reference['marginal_mode']:.3f}, the Viterbi path {reference['viterbi']:.3f}."]
    return "\n".join(lines)


def write_set_a_subsection(command, text, heading=SET_A_HEADING):
    """Replace only the set A subsection ``heading`` of the "Beam sampler" section of docs/benchmarks.md
    (appended after the first set A subsection if it is not there yet)."""
    path = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "benchmarks.md"))
    body = open(path).read()
    block = f"{heading}\n\nGenerated by `{command}`.\n\n{text}\n"
    pattern = re.compile(re.escape(heading) + r"\n.*?(?=\n### |\n## |\Z)", re.S)
    if not pattern.search(body):
        first = re.compile(re.escape(SET_A_HEADING) + r"\n.*?(?=\n### |\n## |\Z)", re.S)
        if not first.search(body):
            raise SystemExit(f"no '{SET_A_HEADING}' subsection in {path}: run the full benchmark with --write first")
        body = first.sub(lambda m: m.group(0).rstrip("\n") + "\n\n" + block, body, count=1)
    else:
        body = pattern.sub(lambda _: block, body, count=1)
    with open(path, "w") as fh:
        fh.write(body)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller grid, 300 sweeps on set A")
    parser.add_argument("--write", action="store_true", help="write the results into docs/benchmarks.md")
    parser.add_argument("--repeats", type=int, default=10, help="timed sweeps per configuration (median)")
    parser.add_argument("--set-a-only", action="store_true", help="only the set A study")
    parser.add_argument("--set-a-sweeps", type=int, default=None, help="sweeps on set A (default 1000, quick 300)")
    parser.add_argument("--set-a-default", action="store_true",
                        help="only set A from each kernel's default init_strategy (its own subsection of the set A study)")
    parser.add_argument("--set-a-chains", type=int, default=8, help="chains of --set-a-default")
    parser.add_argument("--set-a-mode-draws", type=int, default=200,
                        help="--set-a-default: the last draws whose per-step majority is each chain's point estimate")
    parser.add_argument("--set-a-kernels", nargs="+", default=["BeamSampler", "WeakLimitGibbs", "DirectAssignmentGibbs",
                                                              "PGAS", "RCDSampler"], help="kernels of --set-a-default")
    args = parser.parse_args()

    import jax

    from numpyro_hdphmm import infer
    from numpyro_hdphmm.infer import BeamSampler, DirectAssignmentGibbs, WeakLimitGibbs

    def say(msg=""):
        print(msg, flush=True)

    sweeps = args.set_a_sweeps or (300 if args.quick else 1000)
    device = (f"Device: `{jax.devices()[0].device_kind}` ({jax.default_backend()}), float32, {os.cpu_count()} CPU "
              f"cores, jax {jax.__version__}; load average {os.getloadavg()[0]:.1f} at the start (shared machine: "
              "timings vary between runs, read the ratios as rough).")
    if args.set_a_default:
        results = {}
        for name in args.set_a_kernels:
            results[name] = r = set_a_run(getattr(infer, name), 40, sweeps, num_chains=args.set_a_chains,
                                          start="default", mode_draws=args.set_a_mode_draws)
            say(f"set A (default start) {name}: reach 4 large states at {r['reach_large']}, large at "
                f"{r['checkpoint']}: {r['large_mid']}, Hamming there {np.round(r['hamming_mid'], 3).tolist()}, "
                f"final {np.round(r['hamming'], 3).tolist()}, final states {r['final_states']}, {r['seconds']:.0f} s")
        reference = set_a_exact_reference()
        text = f"{device}\n\n{set_a_default_text(results, sweeps, args.set_a_chains, reference)}"
        say(text)
        if args.write:
            cmd = (f"python benchmarks/bench_beam.py --set-a-default --set-a-sweeps {sweeps} --set-a-chains "
                   f"{args.set_a_chains} --set-a-mode-draws {args.set_a_mode_draws} --set-a-kernels "
                   f"{' '.join(args.set_a_kernels)} --write")
            say(f"wrote {write_set_a_subsection(cmd, text, SET_A_DEFAULT_HEADING)}")
        return
    lines = [device, ""]
    if not args.set_a_only:
        Ts = [1000, 10000] if args.quick else [1000, 10000, 100000]
        grid = {}
        for T in Ts:
            y = synthetic_data(T, 2)
            for K in (10, 30):
                grid[(T, K)] = r = time_pair(K, y, segments(T), repeats=args.repeats)
                beam, weak = r["BeamSampler"], r["WeakLimitGibbs"]
                say(f"T={T:>6} K={K:>3}: beam {beam[0] * 1e3:8.2f} ms ({beam[2]:.1f} instantiated, {beam[3]} used, "
                    f"compile {beam[1]:.0f} s), weak limit {weak[0] * 1e3:8.2f} ms ({weak[3]} used), "
                    f"ratio {beam[0] / weak[0]:.2f}")
        scaling = {}
        for num_seg in (2, 10, 20):
            y = synthetic_data(10000, 2, num_segments=num_seg)
            scaling[num_seg] = r = time_pair(40, y, segments(10000, num_seg), repeats=args.repeats)
            say(f"T=10000 capacity 40, {num_seg:>2} segments: beam {r['BeamSampler'][0] * 1e3:.2f} ms "
                f"({r['BeamSampler'][2]:.1f} instantiated, {r['BeamSampler'][3]} used), weak limit "
                f"{r['WeakLimitGibbs'][0] * 1e3:.2f} ms")
        disc_sweeps = 200 if args.quick else 1000
        checkpoints = [c for c in (10, 50, 200, 1000) if c <= disc_sweeps]
        disc = {}
        for mp in (None, 1.0):
            disc[mp] = d = discovery(1000, 30, disc_sweeps, checkpoints, mean_precision=mp)
            say(f"discovery (mean_precision {0.01 if mp is None else mp}): {d}")

        ms = lambda v: f"{v * 1e3:.2f}"
        lines += [
            "Milliseconds per sweep: median over repeats of a jitted `kernel.sample` after compilation and 10 "
            "warm-up sweeps, the two kernels timed alternately in one process, the fastest of three separately "
            "compiled copies of each (separately compiled copies of one program sometimes settle at different "
            "speeds on this machine). `BeamSampler` with capacity K "
            "against `WeakLimitGibbs` with L = K (both cost O(T K^2) over the slots); 2-D Gaussian emissions "
            "(`GaussianNIW.weakly_informative`), constant gamma = 1, alpha = 1, kappa = 10, 10 well-separated "
            "segments; both chains start from the true segmentation (from the model's prior draw the beam "
            "sampler needs hundreds of sweeps to find the segments, see the discovery table below).",
            "",
            "| T | K | beam (ms) | instantiated | used | weak limit (ms) | ratio (target <= 1.5) | arena MiB (beam / WL) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for (T, K), r in sorted(grid.items()):
            beam, weak = r["BeamSampler"], r["WeakLimitGibbs"]
            lines.append(f"| {T} | {K} | {ms(beam[0])} | {beam[2]:.1f} | {beam[3]} | {ms(weak[0])} "
                         f"| {beam[0] / weak[0]:.2f} | {beam[4] / 2**20:.1f} / {weak[4] / 2**20:.1f} |")
        lines += [
            "",
            "Arena: the temporary buffer XLA:CPU allocates for each call of the compiled sweep. glibc serves "
            "requests above 32 MiB with a fresh `mmap` whose pages fault in on every call, about 1 ms per 4 MB "
            "touched on this machine, so a sweep whose arena crosses 32 MiB slows down abruptly (at T = 1e5, "
            "K = 30 both kernels pay it). At T = 1e5, K = 10 the beam's arena sits just above it and the weak "
            "limit's below; with glibc told not to map (`MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=4294967296`) "
            "the beam ran 18.6-19.2 ms per sweep there against the weak limit's 17.5-18.0 (ratio 1.05; a variant "
            "whose arena was 31.96 MiB ran 18.9 ms against 18.0 without the variables). For long sequences on "
            "Linux these two variables (or another allocator) remove the cliff for every kernel.",
        ]
        lines += [
            "",
            "Scaling with the number of instantiated states (T = 10000, capacity 40, started from the true "
            "segmentation). The slice FFBS runs over the smallest compiled size (16, 32 or 40 here) that holds "
            "every instantiated state, so the beam's cost follows the instantiated states, the weak limit's "
            "the capacity:",
            "",
            "| true segments | beam (ms) | instantiated (mean) | used at the end | weak limit (ms) |",
            "|---:|---:|---:|---:|---:|",
        ]
        for num_seg, r in sorted(scaling.items()):
            med, _, inst, used, _ = r["BeamSampler"]
            lines.append(f"| {num_seg} | {ms(med)} | {inst:.1f} | {used} | {ms(r['WeakLimitGibbs'][0])} |")
        lines += [
            "",
            f"State discovery from the model's prior draw (T = 1000, 10 true segments, K = L = 30): states in use "
            f"at the start and after {', '.join(map(str, checkpoints))} sweeps. The prior draw of this sticky model "
            "uses 1 state; a new beam state gets its emission parameters from the prior and must be admitted by "
            "the slice of every step of a segment, so discovery is slow, more so with the benchmark's broad prior "
            "on the means (`mean_precision = 0.01`: ~50 data standard deviations). Started from the true "
            "segmentation the beam sampler keeps the 10 states.",
            "",
            "| prior mean_precision | kernel | " + " | ".join(["start"] + [f"{c} sweeps" for c in checkpoints]) + " |",
            "|---:|---|" + "---:|" * (len(checkpoints) + 1),
        ]
        for mp, d in disc.items():
            for name, used in d.items():
                lines.append(f"| {0.01 if mp is None else mp} | {name} | " + " | ".join(map(str, used)) + " |")
        lines.append("")

    set_a = {}
    for cls in (BeamSampler, WeakLimitGibbs, DirectAssignmentGibbs):
        set_a[cls.__name__] = r = set_a_run(cls, 40, sweeps)
        say(f"set A {cls.__name__}: reach 4 states at sweeps {r['reach']} (large: {r['reach_large']}), Hamming {np.round(r['hamming'], 3).tolist()}, "
            f"final states {r['final_states']}, mean states (last half) {r['tail_mean']:.2f}, ESS(num_states) "
            f"{r['ess']:.1f}, {r['ess_per_s']:.3f}/s, {r['seconds']:.1f} s, overflow sweeps {r['overflow']}")
        say(f"   final gamma, alpha: {r['hyper']}")
        for c, occ in enumerate(r["occupancy"]):
            say(f"   chain {c} final (mean, steps) per state: {occ}")
        every = max(1, sweeps // 10)
        say("   num_states every %d sweeps: %s" % (every, r["trace"][:, every - 1::every].tolist()))
    set_a_block = set_a_text(set_a, sweeps)
    say()
    cmd = "python benchmarks/bench_beam.py" + (" --quick" if args.quick else "")
    if args.set_a_only:
        cmd += " --set-a-only" + (f" --set-a-sweeps {args.set_a_sweeps}" if args.set_a_sweeps else "") + " --write"
        text = f"{device}\n\n{set_a_block}"
        say(text)
        if args.write:
            say(f"wrote {write_set_a_subsection(cmd, text)}")
        return
    text = "\n".join(lines + [f"{SET_A_HEADING}", "", set_a_block])
    say(text)
    if args.write:
        say(f"wrote {write_section(SECTION, cmd + ' --write', text)}")


if __name__ == "__main__":
    main()
