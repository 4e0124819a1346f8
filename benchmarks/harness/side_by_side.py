"""What the side-by-side runners against jax-moseq share (``slds_vs_jax_moseq``, ``arhmm_vs_jax_moseq``).

Each side runs in a worker process of its own (:class:`~benchmarks.harness.peers.Worker`), one per
side and precision for the whole run; :func:`alternate` times them in alternating blocks (one
call ``run`` of ``n`` sweeps per worker and block, the load average recorded before each),
:func:`summarize` turns a worker's ``setup`` reply and block times into the columns of the tables
(per-sweep minimum and median, init and compile seconds), and :func:`ar_log_joint` is the one
numpy (float64) log density of a switching autoregression that the driver computes from each
side's state.  :func:`comparisons`, :func:`ratio_line` and :func:`load_range` write the summary
rows and sentences.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np

from .peers import Worker

MOSEQ = "jax-moseq"


def uptime() -> str:
    """The ``uptime`` line (its load averages), or the load averages alone."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def checked(worker: Worker, **request) -> dict:
    """``worker.call(**request)``; a reply with ``error`` raises ``RuntimeError`` with its traceback."""
    reply = worker.call(**request)
    if "error" in reply:
        raise RuntimeError(f"{worker.name} worker, {request['cmd']}: {reply['error']}\n{reply.get('traceback', '')}")
    return reply


def precision(side: str) -> str:
    """The float type a contender ran in: jax-moseq always float64; ours and before by their suffix."""
    return "float64" if side == MOSEQ or side.endswith("f64") else "float32"


def contender_order(names) -> list:
    """The alternation: our first contender, then jax-moseq, then the others (``names`` includes jax-moseq)."""
    ours = [n for n in names if n != MOSEQ]
    return [ours[0], MOSEQ, *ours[1:]]


def alternate(workers: dict, order, blocks: int, sweeps: int, log, label: str):
    """``blocks`` rounds of one ``run`` call per contender in ``order``: ``(times, loads)``,
    ``times[name]`` the seconds per sweep of each block, ``loads`` the ``uptime`` before each call."""
    times = {name: [] for name in order}
    loads = []
    for b in range(blocks):
        for name in order:
            loads.append({"block": b, "side": name, "uptime": uptime()})
            times[name].append(checked(workers[name], cmd="run")["s"] / sweeps)
        log(f"{label}: block {b + 1}/{blocks}: " + ", ".join(f"{n} {1e3 * times[n][-1]:.1f} ms" for n in order)
            + f" ({uptime()})")
    return times, loads


def summarize(name: str, times, setup: dict, sweeps: int) -> dict:
    """The per-contender columns: ``s_per_sweep`` (the blocks), ``median_s``, ``min_s``, ``init_s`` and
    ``compile_s`` (ours: the ahead-of-time compilation plus any excess of the first compiled call
    over a steady block; jax-moseq: its first ``n`` sweeps (which compile) and the ``n - 1`` after,
    less ``n`` steady sweeps), ``setup`` (the worker's reply without its bulky fields)."""
    sec = float(np.median(times))
    if name == MOSEQ:
        compile_s = setup["first_s"] + setup["warm_s"] - sweeps * sec
    else:
        compile_s = setup["compile_s"] + max(setup["first_s"] - sweeps * sec, 0.0)
    return {"s_per_sweep": list(times), "median_s": sec, "min_s": float(np.min(times)), "init_s": setup["init_s"],
            "compile_s": compile_s, "setup": {k: v for k, v in setup.items() if k != "Cd"}}


def add_ratios(sides: dict) -> None:
    """``ratio`` (median over jax-moseq's median) and ``block_ratios`` of every contender, in place."""
    theirs = sides[MOSEQ]
    for side in sides.values():
        side["ratio"] = side["median_s"] / theirs["median_s"]
        side["block_ratios"] = [a / b for a, b in zip(side["s_per_sweep"], theirs["s_per_sweep"])]


def ar_log_joint(x, z, Ab, Q, pi, nlags: int) -> dict:
    """``dyn = sum_{t>=r} log N(x_t | A_{z_t} [x_{t-r}; ...; x_{t-1}] + b_{z_t}, Q_{z_t})`` and ``modes =
    sum_{t>r} log pi[z_{t-1}, z_t]``, numpy float64, summed over sequences: ``x (N, T, D)`` (or
    ``(T, D)``), ``z (N, T - r)`` the modes of the steps ``r, ..., T - 1``, ``Ab (K, D, D r + 1)`` with
    the lags oldest first (jax-moseq's order), ``Q (K, D, D)``, ``pi (K, K)``."""
    x, z = np.asarray(x, float), np.asarray(z, int)
    if x.ndim == 2:
        x, z = x[None], z[None]
    Ab, Q, pi = (np.asarray(a, float) for a in (Ab, Q, pi))
    D = x.shape[-1]
    dyn = modes = 0.0
    for xs, zs in zip(x, z):
        for k in np.unique(zs):
            t = np.nonzero(zs == k)[0] + nlags                  # zs[i] is the mode of step i + r
            lags = np.concatenate([xs[t - nlags + j] for j in range(nlags)], axis=1)  # oldest first
            e = xs[t] - lags @ Ab[k, :, :D * nlags].T - Ab[k, :, D * nlags]
            L = np.linalg.cholesky(Q[k])
            u = np.linalg.solve(L, e.T)
            dyn += -0.5 * np.sum(u * u) - len(t) * (np.sum(np.log(np.diag(L))) + 0.5 * D * np.log(2 * np.pi))
        modes += np.sum(np.log(np.maximum(pi[zs[:-1], zs[1:]], np.finfo(float).tiny)))
    return {"dyn": float(dyn), "modes": float(modes)}


def load_range(loads) -> str:
    """``"lo-hi"`` of the 1-minute load averages recorded before the blocks."""
    values = [float(ld["uptime"].split("load average:")[-1].split(",")[0]) for ld in loads]
    return f"{min(values):.1f}-{max(values):.1f}" if values else "not recorded"


def ratio_line(results, label) -> str:
    """One sentence per configuration (``label(result)``): each of our contenders' median time per
    sweep over jax-moseq's."""
    parts = []
    for res in results:
        ratios = ", ".join(f"{name} {side['ratio']:.2f}" for name, side in res["sides"].items() if name != MOSEQ)
        parts.append(f"{label(res)}: {ratios}")
    return "Ours / jax-moseq, median time per sweep (below 1: ours faster; 0.5: twice as fast): " + "; ".join(parts) + "."


def comparisons(results, kernel: str, config) -> list:
    """The summary table's rows: each of our contenders (``ours-*``) against jax-moseq, minimum and
    median ms per sweep; ``config(result, side_name)`` names the configuration."""
    out = []
    for res in results:
        theirs = res["sides"][MOSEQ]
        for name, side in res["sides"].items():
            if not name.startswith("ours"):
                continue
            for statistic, key in (("minimum", "min_s"), ("median", "median_s")):
                out.append({"kernel": kernel, "peer": MOSEQ, "config": config(res, name),
                            "ours_ms": round(1e3 * side[key], 1), "peer_ms": round(1e3 * theirs[key], 1),
                            "ratio": round(theirs[key] / side[key], 2), "statistic": statistic})
    return out
