"""Peers run in their own environments: a worker script under another Python, JSON lines.

A peer (pyhsmm, dynamax, jax-moseq, ...) often cannot share our environment (pyhsmm needs an old
Cython build and float64 BLAS; dynamax pins its own JAX).  Its worker is a standalone script in
``benchmarks/workers/`` that imports nothing from this repository; :class:`Worker` starts it under
the peer's Python and talks to it in JSON lines (one request, one reply).  (A worker is named
``<peer>_worker.py``: a script named like the package it imports would import itself.)  The workers:

- ``workers/pyhsmm_worker.py``: ``setup`` (data ``.npz``, ``L``, ``seed``, ``warmup``), ``run`` (``n``
  sweeps, per-sweep seconds), ``chain`` (a chain's final states).
- ``workers/dynamax_worker.py``: ``ffbs`` (``T``, ``K``, ``repeats``: ms per ``hmm_posterior_sample``).
- ``workers/jax_moseq_slds_worker.py``, ``workers/jax_moseq_arhmm_worker.py`` and our sides
  ``workers/hdphmm_slds_worker.py``, ``workers/hdphmm_arhmm_worker.py``: ``setup``, ``run``, ``state``
  (``profile`` on ours), driven by :mod:`benchmarks.harness.side_by_side`; they share the loop of
  ``workers/_protocol.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

WORKERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workers")


class Worker:
    """``python workers/<name>_worker.py`` in a subprocess; ``call(**request) -> reply``.

    ``python``: the peer environment's interpreter (default: this one); ``path``: prepended to its
    ``PYTHONPATH`` (an in-place build of the peer); ``env``: extra environment variables.
    """

    def __init__(self, name: str, python: str | None = None, path: str | None = None, env: dict | None = None):
        script = os.path.join(WORKERS, f"{name}_worker.py")
        if not os.path.exists(script):
            raise ValueError(f"no worker {script!r} for peer {name!r}.")
        environ = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(env or {})}
        environ.pop("PYTHONPATH", None)
        if path:
            environ["PYTHONPATH"] = path
        self.name = name
        self.proc = subprocess.Popen([python or sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=environ)

    def call(self, **request) -> dict:
        self.send(**request)
        return self.receive()

    def send(self, **request):
        """Send ``request`` without waiting for the reply (:meth:`receive` reads it), e.g. to let
        the peer warm up while this process compiles."""
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:  # the worker is gone: receive() says why
            pass

    def receive(self) -> dict:
        """The reply to the request sent last."""
        try:
            line = self.proc.stdout.readline()
        except OSError:  # the worker is gone (e.g. the peer does not import)
            line = ""
        if not line:
            err = self.proc.stderr.read().strip().splitlines()
            raise RuntimeError(f"the {self.name} worker exited: {err[-1] if err else 'no message'} "
                               f"(is {self.name} importable under the Python given?)")
        return json.loads(line)

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=60)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
