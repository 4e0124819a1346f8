"""Scaling: cost against the number of states and the capacity (``states``), the number of
vectorized chains (``chains``) and of devices (``devices``).

Run ``python -m benchmarks.scaling EXPERIMENT [--quick] [options]``; results go to
``benchmarks/results/scaling.json``.
"""

EXPERIMENTS = {"states": "states", "chains": "devices", "devices": "devices"}
