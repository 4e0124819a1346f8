"""PGAS synthetic set A (Tripuraneni et al. 2015, "as in Van Gael et al. 2008").

``nh.datasets.pgas_set_a``: T = 4000, 4 states, self-transition 0.75, means -2, -0.5, 1, 4, s.d.
0.5; the non-sticky iHMM with the beam toolbox's hyperpriors ``alpha ~ Gamma(4, 1)``, ``gamma ~
Gamma(3, 6)`` and a nearly known variance (:func:`benchmarks.harness.models.set_a_model`);
capacity / L = 40.  Vectorized chains in one compiled ``lax.scan``:

* default: 4 chains started from 10 states (uniform random labels, as the toolbox does), 1000
  sweeps: sweeps until a chain first uses exactly 4 states (and 4 states holding >= 1% of the
  steps), the normalized Hamming distance after the last sweep, ESS per second of ``num_states``
  over the last half (section "PGAS synthetic set A");
* ``--default-start``: 8 chains from each kernel's default ``init_strategy``: 4 large states
  within 300 sweeps, Hamming after 1000, the point estimate of the last ``--mode-draws`` draws and
  the level the true parameters allow (exact FFBS draws, marginal mode, Viterbi) (section "PGAS
  synthetic set A from the default initialization").

Usage::

    python -m benchmarks.reproductions set-a [--default-start] [--sweeps 1000] [--chains C] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import os
import time

import numpy as np

from ..harness import models, results
from ..harness.models import set_a_model
from ..harness.stats import majority

QUESTION = "reproductions"
SET_A_HEADING = "PGAS synthetic set A"
SET_A_DEFAULT_HEADING = "PGAS synthetic set A from the default initialization"
KERNELS = ("BeamSampler", "WeakLimitGibbs", "DirectAssignmentGibbs")


def _block(x):
    import jax

    return jax.block_until_ready(x)


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
    """The table of :func:`set_a_run` results from the kernels' default initialization (the
    set A target: 4 large states in every chain within 300 sweeps, Hamming < 0.05 after 1000)."""
    checkpoint = next(iter(set_a.values()))["checkpoint"]
    mode_draws = next(iter(set_a.values())).get("mode_draws", 0)
    mode_head = f" point estimate, last {mode_draws} draws |" if mode_draws else ""
    lines = [
        f"The set-up above (T = 4000, 4 true states, capacity / L = 40), {num_chains} vectorized chains from each "
        f"kernel's default `init_strategy` (no `init_params`), {sweeps} sweeps.  The target: 4 large "
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 sweeps of 2 chains, WeakLimitGibbs only")
    parser.add_argument("--sweeps", type=int, default=1000)
    parser.add_argument("--default-start", action="store_true",
                        help="from each kernel's default init_strategy instead of 10 random labels")
    parser.add_argument("--chains", type=int, default=None, help="chains (4; 8 with --default-start)")
    parser.add_argument("--mode-draws", type=int, default=200,
                        help="--default-start: the last draws whose per-step majority is each chain's point estimate")
    parser.add_argument("--kernels", nargs="+", default=None, help="kernels (default: beam, weak limit, direct "
                        "assignment; with --default-start also PGAS and RCDSampler)")
    parser.add_argument("--no-save", action="store_true")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    if args.quick:  # a smoke run checks the script; it records nothing
        args.no_save = True

    import jax

    def say(msg=""):
        print(msg, flush=True)

    kernels = args.kernels or (["BeamSampler", "WeakLimitGibbs", "DirectAssignmentGibbs"]
                               + (["PGAS", "RCDSampler"] if args.default_start else []))
    chains = args.chains or (8 if args.default_start else 4)
    sweeps, mode_draws = args.sweeps, args.mode_draws
    if args.quick:
        kernels, chains, sweeps, mode_draws = ["WeakLimitGibbs"], 2, 4, 2
    device = (f"Device: `{jax.devices()[0].device_kind}` ({jax.default_backend()}), float32, {os.cpu_count()} CPU "
              f"cores, jax {jax.__version__}; load average {os.getloadavg()[0]:.1f} at the start (shared machine: "
              "timings vary between runs, read the ratios as rough).")
    command = results.command_line("reproductions set-a", argv)
    results_by_kernel = {}
    for name in kernels:
        cls = type(models.kernel(name, models.set_a_model(40)))
        if args.default_start:
            r = set_a_run(cls, 40, sweeps, num_chains=chains, start="default", mode_draws=mode_draws,
                          checkpoint=min(300, sweeps))
            say(f"set A (default start) {name}: reach 4 large states at {r['reach_large']}, large at "
                f"{r['checkpoint']}: {r['large_mid']}, final Hamming {np.round(r['hamming'], 3).tolist()}, "
                f"{r['seconds']:.0f} s")
        else:
            r = set_a_run(cls, 40, sweeps, num_chains=chains, checkpoint=min(300, sweeps))
            say(f"set A {name}: reach 4 states at sweeps {r['reach']} (large: {r['reach_large']}), Hamming "
                f"{np.round(r['hamming'], 3).tolist()}, ESS(num_states) {r['ess']:.1f}, {r['seconds']:.1f} s")
        results_by_kernel[name] = r
    if args.default_start:
        reference = None if args.quick else set_a_exact_reference()
        text = f"{device}\n\n{set_a_default_text(results_by_kernel, sweeps, chains, reference)}"
        title = SET_A_DEFAULT_HEADING
    else:
        text = f"{device}\n\n{set_a_text(results_by_kernel, sweeps)}"
        title = SET_A_HEADING
    say(text)
    if not args.no_save:
        say(f"saved {results.save(QUESTION, title, text, command)}")


if __name__ == "__main__":
    main()
