"""Mixing: ESS per second of every kernel and data set (``ess``), the hyperparameter updates
(``hyperparameters``), the data-driven start (``starts``), the split-merge moves (``split-merge``) and replica exchange (``tempering``).

Run ``python -m benchmarks.mixing EXPERIMENT [--quick] [options]``; results go to
``benchmarks/results/mixing.json``.
"""

EXPERIMENTS = {"ess": "ess", "hyperparameters": "hyperparameters", "starts": "starts", "split-merge": "split_merge",
               "tempering": "tempering"}
