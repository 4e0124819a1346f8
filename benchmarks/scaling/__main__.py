import sys

from ..harness.cli import dispatch
from . import EXPERIMENTS, __doc__

# ``chains`` and ``devices`` share one module: the experiment's name selects the part
argv = sys.argv[1:]
if argv and argv[0] == "chains" and "--_worker" not in argv:
    argv = argv + ["--what", "chains"]
dispatch("benchmarks.scaling", EXPERIMENTS, __doc__, argv)
