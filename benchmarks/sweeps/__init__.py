"""Sweep speed and FFBS: milliseconds per sweep of every kernel and per FFBS pass (``speed``:
parts ``ffbs``, ``kernels``, ``pair``; ``--compare PATH`` against another checkout), the beam
sampler's cost against the weak limit, instantiated states and discovery (``beam``), and
``RCDSampler`` on *Alice* against the RCD paper's C++ (``rcd``), and the HDP-HSMM sweep side by
side with pyhsmm's ``WeakLimitHDPHSMM`` (``hsmm``; ``--pyhsmm PYTHON``), and with
negative-binomial durations through the phase embedding against the explicit messages and
pyhsmm's ``WeakLimitHDPHSMMIntNegBin`` (``hsmm-negbin``), and pyhsmm's own HDP-HSMM example, its
data and settings on both sides (``hsmm-example``).

Run ``python -m benchmarks.sweeps EXPERIMENT [--quick] [options]``; results go to
``benchmarks/results/sweeps.json``.
"""

EXPERIMENTS = {"speed": "speed", "beam": "beam", "rcd": "rcd_speed", "hsmm": "hsmm", "hsmm-negbin": "hsmm_negbin",
               "hsmm-example": "hsmm_example"}
