"""Write ``docs/benchmarks.md`` from ``benchmarks/results/*.json``.

Usage (from the repository root)::

    python -m benchmarks.render            # writes docs/benchmarks.md
    python -m benchmarks.render --check    # exit 1 when docs/benchmarks.md is not what it would write

The page opens with the summary table (each kernel against each peer, the ratios of one run each,
with date, machine and versions), then one section per question: its hand-written introduction
(:data:`QUESTIONS`, the only prose kept here) and the sections of its results file, each with its
provenance.  Nothing in the generated page is edited by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .harness.models import KERNELS, REPO
from .harness.results import RESULTS

DOC = os.path.join(REPO, "docs", "benchmarks.md")

#: (results file, heading, introduction); the page's order
QUESTIONS = (
    ("sweeps", "Sweep speed and FFBS", """
Milliseconds per sweep of each kernel and per forward-filtering backward-sampling pass (the state
update every kernel runs).  Script: `python -m benchmarks.sweeps speed` (parts `ffbs`, `kernels`,
`pair`; `--compare PATH` times another checkout's package against this one), `... sweeps beam` (the
beam sampler against the weak limit), `... sweeps rcd` (`RCDSampler` on *Alice*), `... sweeps hsmm`
(the HDP-HSMM sweep side by side with pyhsmm's `WeakLimitHDPHSMM`; `--pyhsmm PYTHON`).
Every speed figure comes from the harness's one timer: each contender's compilation is timed apart
(ahead-of-time `lower().compile()`), then the contenders run in alternating blocks in one process,
so that a change of load on the shared machine falls on all of them; read the ratios of one run,
not absolute times across runs.
"""),
    ("compile", "Compile time and latency", """
What a user waits for before the first sweep: tracing and compiling the kernel's programs, model
discovery and initialization, with and without JAX's persistent compilation cache.  Script:
`python -m benchmarks.compile` (parts `first`, `breakdown`, `init`, `second`; each measurement in a
fresh process; `--parts first --vs PATH` times another checkout's first runs alternately with this
one's).
"""),
    ("mixing", "Mixing: ESS per second, hyperparameters, starts, split-merge", """
Effective samples per second of `num_states`, the log joint and each hyperparameter (bulk ESS,
`arviz.ess`, over vectorized chains in one compiled `lax.scan`; compilation and initialization
timed apart), and how the hyperparameter updates, the data-driven start and the split-merge moves
change it.  Script: `python -m benchmarks.mixing EXPERIMENT` (`ess`, `hyperparameters`, `starts`,
`split-merge`).
"""),
    ("scaling", "Scaling", """
Cost against the number of states, the capacity, the number of chains and of devices.  Script:
`python -m benchmarks.scaling EXPERIMENT` (`states`, `chains`, `devices`).  Multi-device figures on
simulated CPU devices measure overhead, not speed-up: see {doc}`scaling`.
"""),
    ("stress", "Stress runs", """
Long series, hostile data scales and many sweeps: non-finite values, memory and the distance to the
truth.  Script: `python -m benchmarks.stress`.
"""),
    ("peers", "Side by side with other packages", """
Peers run in their own environments (a worker script per peer in `benchmarks/workers/`, started under
the peer's Python, JSON lines), alternating blocks of sweeps with ours so that both see the same
load.  Scripts: `python -m benchmarks.peers --pyhsmm VENV/bin/python` (pyhsmm built by the recipe in
the project's shared bench folder; `--dynamax PYTHON` for dynamax's FFBS) and
`python -m benchmarks.slds_vs_jax_moseq --moseq-python VENV/bin/python` (the HDP-SLDS sweep against
jax-moseq's; its set-up in the script's docstring) and `python -m benchmarks.arhmm_vs_jax_moseq
--moseq-python VENV/bin/python` (the HDP-AR-HMM sweep against jax-moseq's AR-HMM).
"""),
    ("reproductions", "Paper reproductions", """
The papers' experiments rerun with the package's kernels: Fox et al. (experiments A and B, motion
capture), the PGAS paper (synthetic sets A and B, Alice characters), the RCD paper (Sequence 1,
Table 2 on Alice) and stochastic collapsed VI (the paper's grid).  Script:
`python -m benchmarks.reproductions EXPERIMENT` (`fox`, `set-a`, `set-b`, `alice-characters`,
`rcd-sequence1`, `rcd-table2`, `collapsed-svi`); the set-ups and the papers' errata are on the
papers' pages ({doc}`pgas`, {doc}`rcd`, {doc}`collapsed_svi`).
"""),
    ("gpu", "GPU", """
FFBS sequential against parallel-in-time, the weak-limit sweep and many vectorized chains on a GPU.
Script: `python -m benchmarks.gpu` on the device (any machine renders its JSON).
"""),
)

PEERS = ("pyhsmm", "dynamax", "jax-moseq")
PEER_NOTES = {
    "pyhsmm": "its Cython/Eigen weak-limit sampler (`WeakLimitStickyHDPHMM`); it has no other HDP-HMM kernel",
    "dynamax": "`hmm_posterior_sample` (FFBS); dynamax has no HDP-HMM sampler",
    "jax-moseq": "its SLDS Gibbs sweep (`jax_moseq.models.slds.resample_model`) against `WeakLimitGibbs` on "
                 "`nh.HDPSLDS`, and its AR-HMM sweep (`jax_moseq.models.arhmm.resample_model`) against "
                 "`WeakLimitGibbs` on `nh.StickyHDPHMM` with `AutoRegressive` emissions, in its own environment",
}


def _fmt_range(values):
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if abs(hi - lo) < 5e-3 else f"{lo:.2f}-{hi:.2f}x"


def _provenance_line(p):
    if p.get("line"):  # recorded before its results file was kept in the repository: the page's own line
        return f"*{p['line']}*"
    parts = [f"{'recorded' if p.get('carried') else 'measured'} {p.get('date', '?')}",
             p.get("machine", "machine not recorded")]
    if p.get("device"):
        parts.append(p["device"])
    parts.append(f"load average {p.get('load', 'not recorded')}")
    versions = ", ".join(f"{k} {v}" for k, v in (p.get("versions") or {}).items())
    parts.append(versions or "versions not recorded")
    if p.get("commit"):
        parts.append(f"commit `{p['commit']}`")
    line = "; ".join(parts)
    if p.get("command"):
        line += f"; by `{p['command']}`"
    if p.get("carried"):
        line += (" (carried over from the page before the suite"
                 + (f"; now measured by `{p['script_now']}`" if p.get("script_now") else "") + ")")
    return f"*{line[0].upper() + line[1:]}.*"


def _table(t):
    cols, align, rows = t["columns"], t["align"], t["rows"]
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _blocks(blocks):
    return "\n\n".join(b["text"] if "text" in b else _table(b["table"]) for b in blocks)


def load_results(folder=RESULTS):
    out = {}
    if os.path.isdir(folder):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                with open(os.path.join(folder, name)) as fh:
                    out[name[:-5]] = json.load(fh)
    return out


def summary(results) -> str:
    """The summary table: rows the kernels (and the FFBS they share), columns the peers; a cell gives
    the speed-up (peer ms / our ms) over the configurations of one side-by-side run."""
    found = {}
    for rec in results.values():
        for s in rec["sections"]:
            for c in s.get("comparisons", ()):
                found.setdefault((c["kernel"], c["peer"]), (s, []))[1].append(c)
    rows_names = list(KERNELS) + sorted({k for k, _ in found} - set(KERNELS))
    lines = ["Speed-up of ours over each peer (peer's ms per sweep / ours), over the configurations of one "
             "side-by-side run; the minimum statistic first (the least disturbed block of each), medians in "
             "parentheses.  \"-\": not measured (the peer has no such sampler, or no run yet).", "",
             "| ours | " + " | ".join(PEERS) + " |", "|---|" + "---|" * len(PEERS)]
    prov = []
    for k in rows_names:
        cells = []
        for peer in PEERS:
            if (k, peer) not in found:
                cells.append("-")
                continue
            s, comps = found[(k, peer)]
            mins = [c["ratio"] for c in comps if c["statistic"] == "minimum"]
            meds = [c["ratio"] for c in comps if c["statistic"] == "median"]
            cell = f"**{_fmt_range(mins)}**" if mins else ""
            cell += f" ({_fmt_range(meds)})" if meds else ""
            n = len({c["config"] for c in comps})
            cells.append(f"{cell}, {n} configurations")
            p = s["provenance"]
            if p.get("line"):
                where = f"{p.get('date')} (machine, load and versions in the section)"
            else:
                versions = (", ".join(f"{a} {b}" for a, b in (p.get("versions") or {}).items())
                            or "versions not recorded")
                where = f"{p.get('date')}, {p.get('machine')}, load {p.get('load')}, {versions}"
            configs = "; ".join(f"{c['config']}: {c['ours_ms']:g} vs {c['peer_ms']:g} ms"
                                for c in comps if c["statistic"] == "minimum")
            prov.append(f"- `{k}` against {peer}: section \"{s['title']}\", {where}.  Minima, ours vs {peer}: "
                        f"{configs}.")
        lines.append(f"| `{k}` | " + " | ".join(cells) + " |")
    lines += ["", *prov, "", "Peers: " + "; ".join(f"{p}: {n}" for p, n in PEER_NOTES.items()) + "."]
    return "\n".join(lines)


def render(results) -> str:
    out = ["# Benchmarks", "",
           "<!-- Generated by `python -m benchmarks.render` from benchmarks/results/*.json: do not edit; "
           "the introductions live in benchmarks/render.py. -->", "",
           "Generated by `python -m benchmarks.render` from `benchmarks/results/*.json`, which the scripts of "
           "`benchmarks/` write (`python -m benchmarks.<question>`; each has `--quick`).  Every section states "
           "when, where and with which versions it was measured; sections marked *carried over* were measured "
           "before the suite existed, on the project's shared 2-core CPU machine, and keep the provenance their "
           "text recorded.", "",
           "## Summary", "", summary(results)]
    known = {q for q, _, _ in QUESTIONS}
    for q, heading, intro in QUESTIONS:
        rec = results.get(q)
        out += ["", f"## {heading}", "", intro.strip()]
        if not rec or not rec["sections"]:
            out += ["", "No results yet."]
            continue
        for s in rec["sections"]:
            out += ["", f"### {s['title']}", "", _provenance_line(s["provenance"]), "", _blocks(s["blocks"])]
    unknown = sorted(set(results) - known)
    if unknown:
        raise SystemExit(f"results files without a question in render.QUESTIONS: {unknown}")
    return "\n".join(out).rstrip() + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/benchmarks.md is stale")
    parser.add_argument("--output", default=DOC)
    args = parser.parse_args(argv)
    text = render(load_results())
    if args.check:
        current = open(args.output).read() if os.path.exists(args.output) else ""
        if current != text:
            print(f"{args.output} is stale: run `python -m benchmarks.render`", file=sys.stderr)
            sys.exit(1)
        return
    with open(args.output, "w") as fh:
        fh.write(text)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
