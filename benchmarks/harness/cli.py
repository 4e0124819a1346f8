"""The entry point of a question whose experiments live in modules of its own package:
``python -m benchmarks.<question> <experiment> [options]`` runs ``<experiment module>.main(options)``."""

from __future__ import annotations

import importlib
import sys


def dispatch(package: str, experiments: dict, doc: str, argv=None):
    """``experiments``: name on the command line -> module name inside ``package``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in experiments:
        lines = [doc.strip(), "", f"usage: python -m {package} EXPERIMENT [options]  (EXPERIMENT --help for its options)",
                 "", "experiments:"]
        lines += [f"  {name:<18} {package}.{module}" for name, module in experiments.items()]
        print("\n".join(lines))
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    module = importlib.import_module(f"{package}.{experiments[argv[0]]}")
    return module.main(argv[1:])
