r"""Benchmark data sets of the HDP-HMM literature: synthetic generators and shipped real data.

Every generator is plain NumPy, deterministic given ``seed`` (``numpy.random.default_rng``), and
returns a small ``NamedTuple``.  Docstrings give the paper, the section and every parameter; where
a paper leaves something unspecified (sequence length, initial-state distribution) the choice
made here is stated as such.

=============================  ==================================================================
function                       source
=============================  ==================================================================
:func:`fox_experiment_a`       Fox, Sudderth, Jordan & Willsky (2007), Sec. VII, experiment A
:func:`fox_experiment_b`       Fox et al. (2007), Sec. VII, experiment B (mixture emissions)
:func:`pgas_set_a`             Tripuraneni, Gu, Ge & Ghahramani (2015), experiments, 4-state set
:func:`pgas_set_b`             Tripuraneni et al. (2015), experiments, 10-state set
:func:`rcd_sequence1`          "Restricted collapsed draw" (arXiv:1106.0474, 2011), Sequence 1
:func:`load_mocap6`            CMU motion capture, 6 exercise sequences (bnpy ``mocap6``)
:func:`load_alice`             *Alice's Adventures in Wonderland* as words (RCD paper, 2011)
:func:`load_alice_characters`  *Alice's Adventures in Wonderland* as characters (Tripuraneni et
                               al. 2015, experiments, "Alice in Wonderland data")
=============================  ==================================================================

Synthetic Gaussian observations have shape ``(T, 1)`` (the Gaussian emission families take
``(T, D)``); symbol sequences have shape ``(T,)`` of integer categories.
"""

from __future__ import annotations

import collections
import importlib.resources
import io
import re
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "Dataset",
    "MocapDataset",
    "TextDataset",
    "fox_experiment_a",
    "fox_experiment_b",
    "pgas_set_a",
    "pgas_set_b",
    "rcd_sequence1",
    "load_mocap6",
    "load_alice",
    "load_alice_characters",
    "ALICE_ALPHABET",
]


# --------------------------------------------------------------------------------- containers
class Dataset(NamedTuple):
    """A synthetic sequence with its ground truth.

    - observations : ``(T, D)`` float (Gaussian sets) or ``(T,)`` int (symbol sets)
    - states : ``(T,)`` int, the true hidden states in ``{0, ..., K-1}``
    - info : dict with the generating parameters (``transition_matrix (K, K)``,
      ``initial_probs (K,)``, emission parameters) and ``source`` (the citation)
    """

    observations: np.ndarray
    states: np.ndarray
    info: Dict


class MocapDataset(NamedTuple):
    """Several padded multivariate sequences with true labels (see :func:`load_mocap6`).

    - observations : ``(N, T_max, D)`` float, NaN after each sequence's end
    - lengths : ``(N,)`` int
    - states : ``(N, T_max)`` int, true labels in ``{0, ..., len(state_names)-1}``, ``-1`` padding
    - state_names : tuple of str, ``state_names[k]`` names label ``k``
    - channel_names : tuple of str, ``channel_names[d]`` names column ``d``
    - previous : ``(N, T_max, D)`` float, the observation one step before each row (the
      presample value for autoregressive models), NaN padding
    - info : dict (``source``, ``doc_range``)
    """

    observations: np.ndarray
    lengths: np.ndarray
    states: np.ndarray
    state_names: Tuple[str, ...]
    channel_names: Tuple[str, ...]
    previous: np.ndarray
    info: Dict


class TextDataset(NamedTuple):
    """A tokenized text (see :func:`load_alice`, :func:`load_alice_characters`).

    - tokens : ``(T,)`` int32 ids into ``vocabulary``
    - vocabulary : tuple of str (words: by decreasing count, ties alphabetical; characters: the
      fixed alphabet :data:`ALICE_ALPHABET`)
    - counts : ``(V,)`` int64, ``counts[v]`` = occurrences of ``vocabulary[v]`` in ``tokens``
    - info : dict (``source``, the paper's reported sizes and train/test split, e.g.
      ``num_test``; words: ``eos``, ``unk``)
    """

    tokens: np.ndarray
    vocabulary: Tuple[str, ...]
    counts: np.ndarray
    info: Dict


# ---------------------------------------------------------------------------------- helpers
def _check_num_steps(num_steps, minimum: int = 1) -> int:
    if isinstance(num_steps, (bool, np.bool_)) or not isinstance(num_steps, (int, np.integer)):
        raise ValueError(f"`num_steps` must be a Python integer >= {minimum}, got {num_steps!r}.")
    if num_steps < minimum:
        raise ValueError(f"`num_steps` must be >= {minimum}, got {num_steps}.")
    return int(num_steps)


def _uniform_off_diagonal(num_states: int, self_transition: float) -> np.ndarray:
    """``(K, K)`` matrix with ``self_transition`` on the diagonal and the rest spread evenly."""
    off = (1.0 - self_transition) / (num_states - 1)
    return np.full((num_states, num_states), off) + (self_transition - off) * np.eye(num_states)


def _simulate_chain(rng: np.random.Generator, initial_probs, transition_matrix, num_steps: int):
    """Draw ``z_0 ~ initial_probs``, ``z_t ~ transition_matrix[z_{t-1}]`` by inverse CDF.

    NumPy host code (a Python loop over time; ``T = 10^5`` takes well under a second).
    """
    u = rng.random(num_steps)
    cdf0 = np.cumsum(initial_probs)
    cdf = np.cumsum(transition_matrix, axis=1)
    K = len(initial_probs)
    states = np.empty(num_steps, dtype=np.int64)
    z = min(int(np.searchsorted(cdf0, u[0] * cdf0[-1], side="right")), K - 1)
    states[0] = z
    for t in range(1, num_steps):
        row = cdf[z]
        z = min(int(np.searchsorted(row, u[t] * row[-1], side="right")), K - 1)
        states[t] = z
    return states


def _gaussian_hmm(num_steps, seed, initial_probs, transition_matrix, means, variances, source):
    num_steps = _check_num_steps(num_steps)
    rng = np.random.default_rng(seed)
    states = _simulate_chain(rng, initial_probs, transition_matrix, num_steps)
    eps = rng.standard_normal(num_steps)
    obs = means[states] + np.sqrt(variances[states]) * eps
    info = {
        "transition_matrix": transition_matrix,
        "initial_probs": initial_probs,
        "means": means,
        "variances": variances,
        "source": source,
    }
    return Dataset(obs[:, None], states, info)


# ------------------------------------------------------------------------------ Fox et al.
def fox_experiment_a(num_steps: int = 1000, seed=0) -> Dataset:
    r"""Fox, Sudderth, Jordan & Willsky (2007), "Developing a tempered HDP-HMM for systems with
    state persistence" (the sticky HDP-HMM tech report), Sec. VII, experiment A (Figs. 5, 7, 9,
    10): a 3-state HMM with scalar Gaussian emissions.

    Parameters as printed: "three-state HMM with 0.97 probability of self-transition and equally
    likely transitions to the other two states" (so every off-diagonal entry is 0.015); "means
    50, 0, and -50 and variances 50, 10, and 50" (variances, not standard deviations).

    Not stated in the paper (choices made here): the sequence length (``num_steps``, default
    1000) and the initial-state distribution (uniform over the three states).

    Returns:
        :class:`Dataset` with ``observations (T, 1)`` float64, ``states (T,)`` in ``{0, 1, 2}``,
        ``info`` with ``transition_matrix``, ``initial_probs``, ``means``, ``variances``.
    """
    return _gaussian_hmm(
        num_steps,
        seed,
        initial_probs=np.full(3, 1.0 / 3.0),
        transition_matrix=_uniform_off_diagonal(3, 0.97),
        means=np.array([50.0, 0.0, -50.0]),
        variances=np.array([50.0, 10.0, 50.0]),
        source="Fox, Sudderth, Jordan & Willsky (2007), sticky HDP-HMM, Sec. VII, experiment A",
    )


def fox_experiment_b(num_steps: int = 2000, seed=0) -> Dataset:
    r"""Fox et al. (2007), Sec. VII, experiment B (Figs. 11, 12): a 2-state HMM whose
    emissions are two-component Gaussian mixtures.

    Parameters as printed: self-transition probability 0.98 (so switching 0.02); state 0 emits
    ``0.5 N(0, 10) + 0.5 N(10, 10)``, state 1 emits ``0.5 N(-7, 10) + 0.5 N(7, 10)``, where the
    second argument is the VARIANCE (10 for every component).  The component label
    ``c_t ~ Bernoulli(0.5)`` is drawn independently at every step.

    Not stated in the paper (choices made here): the sequence length (default 2000) and the
    initial-state distribution (uniform).

    Returns:
        :class:`Dataset` with ``observations (T, 1)``, ``states (T,)`` in ``{0, 1}``, ``info``
        with ``transition_matrix``, ``initial_probs``, ``component_means (2, 2)`` (state,
        component), ``component_weights (2, 2)``, ``variance`` and ``components (T,)`` (the
        mixture component of every step, in ``{0, 1}``).
    """
    num_steps = _check_num_steps(num_steps)
    rng = np.random.default_rng(seed)
    initial_probs = np.full(2, 0.5)
    trans = _uniform_off_diagonal(2, 0.98)
    component_means = np.array([[0.0, 10.0], [-7.0, 7.0]])
    component_weights = np.full((2, 2), 0.5)
    variance = 10.0
    states = _simulate_chain(rng, initial_probs, trans, num_steps)
    components = (rng.random(num_steps) >= component_weights[states, 0]).astype(np.int64)
    eps = rng.standard_normal(num_steps)
    obs = component_means[states, components] + np.sqrt(variance) * eps
    info = {
        "transition_matrix": trans,
        "initial_probs": initial_probs,
        "component_means": component_means,
        "component_weights": component_weights,
        "variance": variance,
        "components": components,
        "source": "Fox, Sudderth, Jordan & Willsky (2007), sticky HDP-HMM, Sec. VII, experiment B",
    }
    return Dataset(obs[:, None], states, info)


# ------------------------------------------------------------------------------- PGAS sets
def pgas_set_a(num_steps: int = 4000, seed=0) -> Dataset:
    r"""Tripuraneni, Gu, Ge & Ghahramani (2015), "A linear-time particle Gibbs sampler for
    infinite hidden Markov models" (arXiv version of "Particle Gibbs for infinite hidden Markov
    models"), experiments, first synthetic set ("as in Van Gael et al. (2008)", Figs. 2-3).

    Parameters as printed: ``T = 4000``, 4 states, self-transition 0.75 with the remaining 0.25
    spread uniformly (off-diagonal entries ``0.25 / 3``), Gaussian emissions with fixed standard
    deviation 0.5 and means ``-2.0, -0.5, 1.0, 4.0``.

    Not stated (choice made here): the initial-state distribution (uniform).

    Returns:
        :class:`Dataset` with ``observations (T, 1)``, ``states (T,)`` in ``{0, ..., 3}``,
        ``info`` with ``transition_matrix``, ``initial_probs``, ``means``, ``variances``
        (``0.25``) and ``sd`` (``0.5``).
    """
    data = _gaussian_hmm(
        num_steps,
        seed,
        initial_probs=np.full(4, 0.25),
        transition_matrix=_uniform_off_diagonal(4, 0.75),
        means=np.array([-2.0, -0.5, 1.0, 4.0]),
        variances=np.full(4, 0.25),
        source="Tripuraneni, Gu, Ge & Ghahramani (2015), PGAS for the iHMM, experiments (4-state set)",
    )
    data.info["sd"] = 0.5
    return data


def pgas_set_b(num_steps: int = 4000, seed=0, means: Optional[Sequence[float]] = None) -> Dataset:
    r"""Tripuraneni et al. (2015), experiments, second synthetic set (Figs. 4-5).

    Parameters as printed: ``T = 4000``, 10 states, self-transition 0.75 with the remaining 0.25
    spread uniformly (off-diagonal entries ``0.25 / 9``), Gaussian emissions with fixed standard
    deviation 0.5 and means "equally spaced 2.0 apart between -10 and 10".

    The printed means are contradictory (ten points 2 apart span 18, not 20).  Default here:
    ``-9, -7, ..., 9`` (spacing 2, symmetric, inside ``[-10, 10]``); pass ``means`` (10 values)
    for another reading, e.g. ``np.linspace(-10, 10, 10)``.  Initial state: uniform (not stated).

    Returns:
        :class:`Dataset` with ``observations (T, 1)``, ``states (T,)`` in ``{0, ..., 9}``,
        ``info`` as in :func:`pgas_set_a`.
    """
    if means is None:
        means = np.arange(-9.0, 10.0, 2.0)
    means = np.asarray(means, dtype=float)
    if means.shape != (10,) or not np.all(np.isfinite(means)):
        raise ValueError(f"`means` must be 10 finite values, got shape {means.shape}.")
    data = _gaussian_hmm(
        num_steps,
        seed,
        initial_probs=np.full(10, 0.1),
        transition_matrix=_uniform_off_diagonal(10, 0.75),
        means=means,
        variances=np.full(10, 0.25),
        source="Tripuraneni, Gu, Ge & Ghahramani (2015), PGAS for the iHMM, experiments (10-state set)",
    )
    data.info["sd"] = 0.5
    return data


# ---------------------------------------------------------------------------------- RCD
_RCD_PATTERN = np.array([0, 1, 2, 3, 1, 2, 3, 4])  # A B C D B C D E


def rcd_sequence1(num_steps: int = 500) -> Dataset:
    r""""Restricted collapsed draw: accurate sampling for hierarchical Chinese restaurant process
    hidden Markov models" (arXiv:1106.0474, 2011; "the RCD paper"), experiments, the artificial
    "Sequence 1".

    The deterministic repeating symbol sequence ``A B C D B C D E A B C D ...`` (period 8, five
    symbols), ``T = 500``, starting at ``A``.  Symbols are coded ``A, B, C, D, E = 0, ..., 4``.
    The paper gives no generating automaton; the natural ground truth, used here, is the phase
    ``h_t = t mod 8`` (an 8-state deterministic HMM that predicts the sequence perfectly; the
    paper notes that samplers get trapped in a 5-state local optimum, one state per symbol).
    No randomness is involved.

    Reference values (mutual information between ``h`` and an inferred labelling, nats, on
    ``T = 500``): 8-state solution ``log 8 = 2.0794``, 5-state solution ``1.5596``.

    Returns:
        :class:`Dataset` with ``observations (T,)`` int64 in ``{0, ..., 4}``, ``states (T,)`` in
        ``{0, ..., 7}``, ``info`` with ``symbols``, ``emission_matrix (8, 5)`` (0/1) and the
        deterministic ``transition_matrix (8, 8)``.
    """
    num_steps = _check_num_steps(num_steps)
    states = np.arange(num_steps, dtype=np.int64) % 8
    obs = _RCD_PATTERN[states].astype(np.int64)
    trans = np.roll(np.eye(8), 1, axis=1)
    emission = np.eye(5)[_RCD_PATTERN]
    info = {
        "symbols": ("A", "B", "C", "D", "E"),
        "transition_matrix": trans,
        "initial_probs": np.eye(8)[0],
        "emission_matrix": emission,
        "source": "Restricted collapsed draw (arXiv:1106.0474, 2011), Sequence 1",
    }
    return Dataset(obs, states, info)


# ------------------------------------------------------------------------------ shipped data
def _data_bytes(filename: str) -> bytes:
    """Bytes of ``numpyro_hdphmm/data/<filename>`` (works from an installed package / zip)."""
    return importlib.resources.files("numpyro_hdphmm").joinpath("data", filename).read_bytes()


def _as_str_tuple(arr) -> Tuple[str, ...]:
    return tuple(s.decode() if isinstance(s, bytes) else str(s) for s in np.asarray(arr).tolist())


def load_mocap6() -> MocapDataset:
    r"""Six CMU motion-capture exercise sequences (12 joint-angle channels at 10 frames/s).

    The six-sequence exercise data of the beta-process AR-HMM literature (Fox, Sudderth, Jordan
    & Willsky 2009, "Sharing features among dynamical systems with beta processes"; Hughes, Fox
    & Sudderth 2012) as redistributed by bnpy (``datasets/mocap6``): 6 sequences, 2058 frames in
    all, 12 exercise labels (jumping jacks, jogging, squats, ...) annotated by hand.

    The stored file holds ``X (2058, 12)``, ``Xprev (2058, 12)`` (the frame before each row),
    ``TrueZ (2058,)`` with labels ``1..12``, ``doc_range (7,)`` (sequence boundaries), column and
    state names.  Here the sequences are split at ``doc_range``, padded to the longest
    (``T_max = 446``) with NaN (observations) and ``-1`` (labels), and the labels are shifted to
    ``0..11`` so that ``state_names[k]`` names label ``k``.

    Returns:
        :class:`MocapDataset` (``observations (6, 446, 12)``, ``lengths (6,)``,
        ``states (6, 446)``, ``state_names`` (12), ``channel_names`` (12), ``previous``).
    """
    with np.load(io.BytesIO(_data_bytes("mocap6.npz")), allow_pickle=False) as f:
        X = np.asarray(f["X"], dtype=float)
        Xprev = np.asarray(f["Xprev"], dtype=float)
        true_z = np.asarray(f["TrueZ"], dtype=np.int64)
        doc_range = np.asarray(f["doc_range"], dtype=np.int64)
        channel_names = _as_str_tuple(f["column_names"])
        state_names = _as_str_tuple(f["true_state_names"])
    labels = true_z - 1  # stored 1-based
    lengths = np.diff(doc_range)
    N, T_max, D = len(lengths), int(lengths.max()), X.shape[1]
    obs = np.full((N, T_max, D), np.nan)
    prev = np.full((N, T_max, D), np.nan)
    states = np.full((N, T_max), -1, dtype=np.int64)
    for n, (a, b) in enumerate(zip(doc_range[:-1], doc_range[1:])):
        obs[n, : b - a] = X[a:b]
        prev[n, : b - a] = Xprev[a:b]
        states[n, : b - a] = labels[a:b]
    info = {
        "source": "CMU motion capture, 6 exercise sequences (Fox et al. 2009), via bnpy datasets/mocap6",
        "doc_range": doc_range,
        "frame_rate_hz": 10,
    }
    return MocapDataset(obs, lengths, states, state_names, channel_names, prev, info)


# --------------------------------------------------------------------------------- Alice
EOS = "EOS"
UNK = "UNK"

# a sentence ends at . ! or ? (plus closing quotes/brackets) followed by a capitalized word
# (possibly after an opening quote or bracket) or by the end of the text, and at every paragraph
# break (a blank line: headings, verse stanzas and paragraphs ending in a dash count as sentences)
_SENTENCE_END = re.compile(r"""[.!?]['")\]]*(?=\s+['"(\[]*[A-Z]|\s*$)|\n[ \t]*\n""")
_INNER_APOSTROPHE = re.compile(r"(?<=[a-z])'(?=[a-z])")
_TOKEN = re.compile(r"[a-z0-9]+|\x00")


def _tokenize_alice(text: str):
    """Words and end-of-sentence markers of the text (see :func:`load_alice`)."""
    text = text.split("\n", 1)[1] if text.startswith("[") else text  # drop the title line
    text = _SENTENCE_END.sub(" \x00 ", text)
    text = _INNER_APOSTROPHE.sub("", text.lower())
    out = []
    for tok in _TOKEN.findall(text):
        if tok == "\x00":
            if out and out[-1] != EOS:
                out.append(EOS)
        else:
            out.append(tok)
    if out and out[-1] != EOS:
        out.append(EOS)
    return out


def load_alice(min_count: int = 2) -> TextDataset:
    r"""*Alice's Adventures in Wonderland* (Carroll 1865) as a word sequence, prepared as in the
    RCD paper (arXiv:1106.0474, 2011), experiments: "lower-cased, punctuation removed, a
    special word EOS after every sentence"; words seen fewer than ``min_count`` times (the paper: "occurring only
    once", i.e. ``min_count = 2``) replaced by ``UNK``.  The paper tests on the last 1,000 words
    (``info["num_test"]``) and trains on the rest.

    Preparation (the paper gives no details; these choices are ours):

    * source: the shipped plain text (``numpyro_hdphmm/data/alice_in_wonderland.txt``, the
      whole book without any Project Gutenberg header or licence); its first line, the
      bracketed title, is dropped; chapter headings are kept;
    * a sentence ends at ``.``, ``!`` or ``?`` (with any closing quotes) followed by a
      capitalized word or the end of the text (so ``'Oh dear!' said the Rabbit`` is one
      sentence), and at every paragraph break (so chapter titles and verse stanzas are
      sentences too); repeated ends give one ``EOS``;
    * lower case; apostrophes inside words are deleted (``don't -> dont``, ``alice's ->
      alices``); every other non-alphanumeric character, hyphens and dashes included, separates
      words;
    * counts are taken over the whole text (train and test).

    Result with ``min_count = 2``: ``T = 28,103`` tokens (26,680 words + 1,423 ``EOS``) and a
    vocabulary of **1,487** types (1,485 words + ``EOS`` + ``UNK``), exactly the paper's
    ``|Sigma| = 1,487``; training length ``28,103 - 1,000 = 27,103`` versus the paper's 27,120
    (total 28,120): 17 tokens (0.06%) fewer, the difference being in sentence segmentation,
    which the paper does not describe (splitting at every ``.!?`` gives 28,319 tokens; splitting
    only before capitals, without paragraph breaks, 28,037).

    Args:
        min_count: words with fewer occurrences become ``UNK`` (``UNK`` is in the vocabulary
            only when some word was replaced).

    Returns:
        :class:`TextDataset` ``(tokens (T,) int32, vocabulary, counts (V,), info)``;
        ``vocabulary`` is sorted by decreasing count, ties alphabetical.
    """
    if isinstance(min_count, (bool, np.bool_)) or not isinstance(min_count, (int, np.integer)) or min_count < 1:
        raise ValueError(f"`min_count` must be an integer >= 1, got {min_count!r}.")
    words = _tokenize_alice(_data_bytes("alice_in_wonderland.txt").decode("utf-8"))
    raw_counts = collections.Counter(words)
    rare = {w for w, c in raw_counts.items() if c < min_count and w != EOS}
    words = [UNK if w in rare else w for w in words]
    counts = collections.Counter(words)
    vocabulary = tuple(sorted(counts, key=lambda w: (-counts[w], w)))
    index = {w: i for i, w in enumerate(vocabulary)}
    tokens = np.fromiter((index[w] for w in words), dtype=np.int32, count=len(words))
    info = {
        "source": "Carroll (1865); preparation of the RCD paper (arXiv:1106.0474, 2011)",
        "eos": EOS,
        "unk": UNK if rare else None,
        "num_test": 1000,
        "min_count": int(min_count),
        "paper_num_tokens": 28120,
        "paper_num_train": 27120,
        "paper_vocabulary_size": 1487,
    }
    return TextDataset(tokens, vocabulary, np.array([counts[w] for w in vocabulary], np.int64), info)


# ------------------------------------------------------------------------ Alice, characters
#: the 27 symbols of :func:`load_alice_characters`, in code order: ``a`` = 0, ..., ``z`` = 25, space = 26
ALICE_ALPHABET: Tuple[str, ...] = tuple("abcdefghijklmnopqrstuvwxyz ")

# a heading line "CHAPTER I. Down the Rabbit-Hole", or "CHAPTER XII" with the title on an indented
# line after a blank one
_CHAPTER_HEADING = re.compile(r"^[ \t]*CHAPTER [IVXLC]+\b[^\n]*(?:(?:\n[ \t]*)*\n[ \t]+\S[^\n]*)?", re.M)
_NOT_LETTER = re.compile(r"[^a-z]+")


def _alice_chapters(text: str):
    """The chapters' texts (headings removed), in order, of the shipped book."""
    text = text.split("\n", 1)[1] if text.startswith("[") else text  # drop the title line
    return _CHAPTER_HEADING.split(text)[1:]  # [0] is what precedes chapter I (blank)


def load_alice_characters(chapter: Optional[int] = 1) -> TextDataset:
    r"""*Alice's Adventures in Wonderland* (Carroll 1865) as a character sequence, for the
    character-prediction experiment of Tripuraneni, Gu, Ge & Ghahramani (2015), "A linear-time
    particle Gibbs sampler for infinite hidden Markov models", experiments, "Alice in Wonderland
    data": "trained an iHMM on the 1000 characters from the first chapter of the book, and tested
    on 4000 subsequent characters from the same chapter" (``info["num_train"] = 1000``,
    ``info["num_test"] = 4000``: ``tokens[:1000]`` and ``tokens[1000:5000]``).

    The paper gives no alphabet or preparation; the choices made here:

    * source: the shipped plain text (as :func:`load_alice`); the bracketed title line and the
      chapter headings (``CHAPTER I. Down the Rabbit-Hole``) are dropped;
    * lower case; apostrophes inside words are deleted (``don't -> dont``, as in
      :func:`load_alice`); every other run of characters that are not letters (spaces, line
      breaks, punctuation, digits) becomes ONE space; no leading or trailing space;
    * alphabet :data:`ALICE_ALPHABET`: ``a``-``z`` coded ``0``-``25`` and the space ``26``
      (27 symbols), for categorical emissions ``nh.emissions.Categorical(27, ...)``.

    Chapter 1 gives ``T = 10,755`` characters (it begins ``alice was beginning to get very tired
    of sitting by her sister on the bank and ...``); the whole book (``chapter=None``, chapters
    joined by one space) ``T = 133,921``.

    Args:
        chapter: ``1``-``12``, the chapter to return, or ``None`` for the whole book.

    Returns:
        :class:`TextDataset` ``(tokens (T,) int32 in {0, ..., 26}, vocabulary = ALICE_ALPHABET,
        counts (27,), info)``; ``"".join(vocabulary[c] for c in tokens)`` is the prepared text.
    """
    chapters = _alice_chapters(_data_bytes("alice_in_wonderland.txt").decode("utf-8"))
    if chapter is not None and (
        isinstance(chapter, (bool, np.bool_)) or not isinstance(chapter, (int, np.integer))
        or not 1 <= chapter <= len(chapters)
    ):
        raise ValueError(f"`chapter` must be an integer in [1, {len(chapters)}] or None, got {chapter!r}.")
    parts = chapters if chapter is None else [chapters[int(chapter) - 1]]
    text = " ".join(_NOT_LETTER.sub(" ", _INNER_APOSTROPHE.sub("", p.lower())).strip() for p in parts)
    index = {c: i for i, c in enumerate(ALICE_ALPHABET)}
    tokens = np.fromiter((index[c] for c in text), dtype=np.int32, count=len(text))
    info = {
        "source": "Carroll (1865); character experiment of Tripuraneni, Gu, Ge & Ghahramani (2015)",
        "chapter": None if chapter is None else int(chapter),
        "num_train": 1000,
        "num_test": 4000,
    }
    return TextDataset(tokens, ALICE_ALPHABET, np.bincount(tokens, minlength=len(ALICE_ALPHABET)).astype(np.int64),
                       info)
