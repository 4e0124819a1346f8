from ..harness.cli import dispatch
from . import EXPERIMENTS, __doc__

dispatch("benchmarks.sweeps", EXPERIMENTS, __doc__)
