"""The benchmark suite's shared harness: models and data (:mod:`.models`), one timer
(:mod:`.timing`), JSON results (:mod:`.results`) and peers run in their own environments
(:mod:`.peers`)."""

from . import models, peers, results, timing
from .models import KERNELS, PROBLEMS, Problem, kernel, problem
from .results import environment, save
from .timing import Contender, Timing, alternate, block, compile_step, kernel_contender

__all__ = ["models", "peers", "results", "timing", "KERNELS", "PROBLEMS", "Problem", "kernel", "problem",
           "environment", "save", "Contender", "Timing", "alternate", "block", "compile_step", "kernel_contender"]
