"""Results as JSON: ``benchmarks/results/<question>.json``, one file per question.

A file holds ``{"question": name, "sections": [section, ...]}``; a section is

- ``title``: the heading of its section of ``docs/benchmarks.md`` (kept stable: docs and
  docstrings cite sections by title);
- ``provenance``: ``date`` (UTC), ``machine``, ``load`` (load average at the start), ``versions``,
  ``commit`` and ``command`` (what produced it); ``carried`` when the numbers were measured before
  this suite existed and carried over from the text of the old page (its provenance is then what
  that text recorded, and the date of the commit that last wrote it); ``line`` (with ``carried``)
  when the section was recorded before its results file was kept in the repository: the page's own
  provenance line, printed verbatim (``date`` beside it for the summary table);
- ``blocks``: what the renderer prints, in order: ``{"text": markdown}`` or ``{"table": {"columns":
  [...], "align": [...], "rows": [[...], ...]}}``;
- ``comparisons`` (optional): rows ``{"kernel", "peer", "config", "ours_ms", "peer_ms", "ratio",
  "statistic"}`` measured side by side in one run, the input of the summary table;
- ``data`` (optional): the raw numbers (per-call times and the like).

:func:`save` replaces the section of the same title (or appends it).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from importlib import metadata

from .models import REPO

RESULTS = os.path.join(REPO, "benchmarks", "results")


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    """Date, machine, load average, versions and commit of this run."""
    versions = {}
    for name in ("numpyro-hdphmm", "jax", "jaxlib", "numpyro", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    versions["python"] = platform.python_version()
    try:
        import jax

        device = f"{jax.default_backend()} ({jax.devices()[0].device_kind}, {jax.device_count()} device(s))"
    except Exception as err:  # noqa: BLE001 - the record says why
        device = f"unknown ({err})"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        commit += "+changes" if dirty else ""
    except OSError:
        commit = "unknown"
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_name()}, {os.cpu_count()} CPU cores, {platform.system()} {platform.machine()}",
        "device": device,
        "load": round(os.getloadavg()[0], 1),
        "versions": versions,
        "commit": commit,
    }


def text(markdown: str) -> dict:
    return {"text": markdown.strip()}


def table(columns, rows, align=None) -> dict:
    """A table block; ``align`` per column ``"l"`` or ``"r"`` (default: left for the first column,
    right for the others)."""
    columns = [str(c) for c in columns]
    align = list(align) if align is not None else ["l"] + ["r"] * (len(columns) - 1)
    if len(align) != len(columns) or any(len(r) != len(columns) for r in rows):
        raise ValueError("`rows` and `align` must have one entry per column.")
    return {"table": {"columns": columns, "align": align, "rows": [[str(x) for x in r] for r in rows]}}


_ROW = re.compile(r"^\|.*\|\s*$")


def _cells(line: str) -> list:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def blocks_from_markdown(markdown: str) -> list:
    """Split markdown into text and table blocks (pipe tables become structured tables)."""
    out, buf, lines, i = [], [], markdown.strip("\n").splitlines(), 0
    while i < len(lines):
        if (_ROW.match(lines[i]) and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|\s*$", lines[i + 1])):
            if "".join(buf).strip():
                out.append(text("\n".join(buf)))
            buf = []
            columns = _cells(lines[i])
            align = ["r" if c.strip().endswith(":") else "l" for c in _cells(lines[i + 1])]
            rows, i = [], i + 2
            while i < len(lines) and _ROW.match(lines[i]):
                rows.append(_cells(lines[i]))
                i += 1
            out.append(table(columns, rows, align))
        else:
            buf.append(lines[i])
            i += 1
    if "".join(buf).strip():
        out.append(text("\n".join(buf)))
    return out


def path(question: str) -> str:
    return os.path.join(RESULTS, f"{question}.json")


def load(question: str) -> dict:
    p = path(question)
    if not os.path.exists(p):
        return {"question": question, "sections": []}
    with open(p) as fh:
        return json.load(fh)


def save(question: str, title: str, blocks: list, command: str, comparisons=None, data=None,
         provenance: dict | None = None, level: int = 2) -> str:
    """Write (or replace) section ``title`` of ``results/<question>.json``; returns the path.
    ``blocks``: a list of blocks or a markdown string (split by :func:`blocks_from_markdown`)."""
    if isinstance(blocks, str):
        blocks = blocks_from_markdown(blocks)
    record = load(question)
    section = {"title": title, "level": level,
               "provenance": {**environment(), "command": command, **(provenance or {})}, "blocks": blocks}
    if comparisons:
        section["comparisons"] = comparisons
    if data is not None:
        section["data"] = data
    sections = [s for s in record["sections"] if s["title"] != title]
    index = next((i for i, s in enumerate(record["sections"]) if s["title"] == title), len(sections))
    sections.insert(index, section)
    record["sections"] = sections
    os.makedirs(RESULTS, exist_ok=True)
    with open(path(question), "w") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")
    return path(question)


def command_line(module: str, argv) -> str:
    """``python -m benchmarks.<module> <argv>`` as run."""
    import shlex

    return " ".join(["python -m", f"benchmarks.{module}", *map(shlex.quote, argv)]).strip()
