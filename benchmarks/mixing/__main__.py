from ..harness.cli import dispatch
from . import EXPERIMENTS, __doc__

dispatch("benchmarks.mixing", EXPERIMENTS, __doc__)
