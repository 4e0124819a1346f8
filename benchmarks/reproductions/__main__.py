from ..harness.cli import dispatch
from . import EXPERIMENTS, __doc__

dispatch("benchmarks.reproductions", EXPERIMENTS, __doc__)
