"""Paper reproductions: the papers' experiments rerun with the package's kernels.

- ``fox``: Fox et al. (2011), experiments A and B, sticky against non-sticky, the direct-assignment
  sweep on *Alice*;
- ``set-a``, ``set-b``: the PGAS paper's synthetic sets A and B;
- ``alice-characters``: the PGAS paper's iHMM on the characters of *Alice*;
- ``rcd-sequence1``, ``rcd-table2``: the RCD paper's Fig. 5 (Sequence 1) and Table 2 (*Alice* words);
- ``collapsed-svi``: stochastic collapsed VI, the paper's grid and MCMC at equal time.

Run ``python -m benchmarks.reproductions EXPERIMENT [--quick] [options]``; results go to
``benchmarks/results/reproductions.json`` (``--quick`` records nothing).
"""

EXPERIMENTS = {"fox": "fox", "set-a": "set_a", "set-b": "set_b", "alice-characters": "alice_characters",
               "rcd-sequence1": "rcd_sequence1", "rcd-table2": "rcd_table2", "collapsed-svi": "collapsed_svi"}
