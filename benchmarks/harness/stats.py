"""Small analysis helpers shared by several scripts."""

from __future__ import annotations

import numpy as np


def majority(draws):
    """The per-step majority label of ``draws (S, T)``, each draw relabelled to the last one first
    (:func:`numpyro_hdphmm.results.diagnostics.relabel`), so that a label switch cannot split a state."""
    import numpyro_hdphmm as nh

    aligned = np.asarray(nh.diagnostics.relabel(draws, draws[-1])[0])
    votes = np.zeros((draws.shape[-1], int(aligned.max()) + 1), np.int32)
    np.add.at(votes, (np.broadcast_to(np.arange(draws.shape[-1]), aligned.shape), aligned), 1)
    return votes.argmax(-1)
