"""What the side-by-side workers share: the JSON-lines loop and the version record.

A worker is a standalone script run under another environment's Python (its directory is its
``sys.path[0]``, so ``import _protocol`` works in every environment); this module imports nothing
but the standard library.  ``serve({"cmd": handler, ...})`` reads one JSON request a line from
stdin and writes one JSON reply a line to stdout until ``{"cmd": "quit"}``; an exception in a
handler becomes the reply ``{"error", "traceback"}`` (the driver reports it).
"""
import json
import sys
import traceback
from importlib.metadata import version


def versions(names, **extra) -> dict:
    """``{name: installed version}`` of the distributions ``names`` that are installed, then ``extra``."""
    out = dict(extra)
    for name in names:
        try:
            out[name] = version(name)
        except Exception:  # noqa: BLE001 - not installed: left out
            pass
    return out


def serve(handlers: dict) -> None:
    """The request loop: ``handlers[cmd](request) -> reply`` (a JSON-serializable dict)."""
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg["cmd"]
        if cmd == "quit":
            break
        try:
            out = handlers[cmd](msg)
        except Exception as err:  # noqa: BLE001 - the driver reports it
            out = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
