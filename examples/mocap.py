"""Segment six CMU motion-capture exercise sequences with the sticky HDP-AR-HMM (weak-limit Gibbs).

Data: ``nh.datasets.load_mocap6()``: 6 sequences (2058 frames at 10 frames/s), 12 joint-angle
channels, NaN-padded to ``(6, 446, 12)`` with ``lengths``; every frame is annotated with one of
12 exercises (jumping jacks, jogging, squats, ...), ``-1`` on padding.  All six sequences are
fitted jointly (``nh.sample(..., lengths=lengths)``), so the states are shared across them.

Model: the sticky HDP-HMM with first-order vector-autoregressive emissions
``y_t = A_{z_t} [y_{t-1}; 1] + e_t``, ``e_t ~ N(0, Sigma_{z_t})``, with a matrix-normal-inverse-
Wishart prior (``nh.emissions.AutoRegressive.weakly_informative(y, order=1, ...)`` with the
overrides below), sampled by ``WeakLimitGibbs`` (Fox et al., Alg. 2) with ``L = 30`` states.

Choices (following Fox, Sudderth, Jordan & Willsky's BP-AR-HMM mocap experiments, 2009/2014):

* every channel is standardized (divided by its standard deviation over all valid frames after
  subtracting its mean): the channels' scales differ by a factor 17 (root height vs. arm
  angles), and one prior scale matrix then fits all of them;
* ``Sigma ~ IW(D + 2, 0.75 * cov(first differences))``: the prior mean of the noise covariance
  is 0.75 times the covariance of ``y_t - y_{t-1}`` (Fox et al.'s ``S_0``), i.e. a state is
  expected to predict the next frame better than "no change" does.  (The package's default,
  the residual covariance of one pooled VAR fit, is about as large as the whole signal's
  spread between exercises and lets 2-4 broad states explain everything: Hamming 0.60-0.68);
* ``A | Sigma ~ MN(0, Sigma, (10 I)^{-1})``: ``col_precision = 10 I`` (Fox et al.'s ``K``),
  centred on zero dynamics (a random-walk centre, ``loc = [I, 0]``, gave 20 short-lived
  states and a worse Hamming distance, 0.49-0.53);
* ``gamma ~ Gamma(1, 0.01)``, ``alpha ~ Gamma(1, 1)``, ``kappa ~ Gamma(50, 1)``: kappa large
  relative to alpha, a prior self-transition probability ``rho = kappa / (alpha + kappa)``
  around 0.98, i.e. exercise segments of about 50 frames (5 s), the annotated ones last
  17-108 frames; the three get exact updates (slice sampling of their collapsed conditionals).  (``kappa ~ Gamma(100, 1)``
  merged exercises into 2-4 states: Hamming about 0.7.)

Initialization: the kernel's default data-driven start (``init_strategy="data"``): windows of
1, 3 and 10 frames clustered on the channels' values, lag-one products and increments (the
dynamics the AR likelihood sees, ``AutoRegressive.clustering_features``), and of the three
labellings the one with the highest collapsed log joint under this AR(1) prior
(``nh.infer.initialization.labelling_score``; 9-12 states at Hamming distance 0.38-0.42 before
the first sweep), the parameters then drawn given those states.  ``--start chunks`` starts from ``initial_parameters`` instead (each
chain cuts the sequences into 50-frame chunks with random labels and starts every state at its
posterior mean given its chunks, ``beta`` uniform, the rows at their prior means), ``--start
prior`` from prior draws (a draw of ``beta`` with small ``gamma``/``alpha`` then shuts most
states out in the first sweep: 2-13 states per chain).

The chains mix slowly between segmentations (the weak-limit Gibbs sampler moves one state
sequence at a time), so different chains end in different local modes; several are run and
reported separately.

Measured (4 vectorized chains, seed 0; ``docs/benchmarks.md``, "Motion capture" and
"Initialization"): with the defaults (400 + 100 sweeps, the default start) 9-12 states per chain
and median Hamming distances over the last 100 draws 0.401, 0.323, 0.326, 0.431 (median over
the chains 0.364; last draws 0.399, 0.319, 0.323, 0.429; 2026-11-29, the docs page's build, 42 s
for the sampling with compilation); from the start before, which clustered the values alone,
7-11 states and 0.371, 0.419, 0.378, 0.414 (median 0.396); from the 50-frame chunks (the example's start before) 22-23 states per chain and
last draws 0.46, 0.60, 0.47, 0.52; from prior draws 0.42, 0.54, 0.63, 0.72 with 2-13 states.
Other priors tried (2 chains x 400 sweeps, prior start): ``weakly_informative`` defaults
0.60-0.68 (2-4 states); ``loc = [I, 0]`` 0.49-0.53 (20 states); ``kappa ~ Gamma(100, 1)``
0.70-0.72 (2-4 states); noise fraction 0.5 0.63-0.71; constants ``gamma = 10, alpha = 1, kappa =
50`` 0.50-0.65; ``gamma ~ Gamma(10, 1)`` (4 chains) 0.43-0.70; IW ``df = 30`` 0.53-0.72.

Output: per chain, the number of states of the last draw and the normalized Hamming distance
(``nh.diagnostics.hamming_distance``, optimal one-to-one matching of states to exercises over
the valid frames of all six sequences concatenated) of the last draw and its median over the
last 100 draws; a segmentation plot of one sequence (``mocap_segmentation.png``).
Run:  python examples/mocap.py
"""

import argparse
import time

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_hdphmm as nh


def standardize(observations, lengths):
    """Per-channel standardization over the valid frames; NaN padding stays NaN.

    ``observations (N, T, D)``, ``lengths (N,)`` -> ``(standardized (N, T, D) float32, mean (D,),
    sd (D,))``.
    """
    valid = np.arange(observations.shape[1])[None, :] < np.asarray(lengths)[:, None]
    frames = observations[valid]
    mean, sd = frames.mean(axis=0), frames.std(axis=0)
    return ((observations - mean) / sd).astype(np.float32), mean, sd


def emission_prior(y, lengths, noise_fraction=0.75, col_precision=10.0, df=None):
    """The MNIW prior described in the module docstring for standardized ``y (N, T, D)``.

    ``df`` (default ``D + 2``): the inverse-Wishart degrees of freedom; the scale is set so that
    ``E[Sigma] = scale / (df - D - 1) = noise_fraction * cov(first differences)`` for any ``df``.
    """
    D = y.shape[-1]
    df = D + 2.0 if df is None else float(df)
    diffs = np.concatenate([np.diff(y[n, :length], axis=0) for n, length in enumerate(lengths)])
    scale = noise_fraction * (df - D - 1.0) * np.cov(diffs, rowvar=False)
    return nh.emissions.AutoRegressive.weakly_informative(
        y,
        order=1,
        loc=np.zeros((D, D + 1), np.float32),
        col_precision=col_precision * np.eye(D + 1, dtype=np.float32),
        df=df,
        scale=scale.astype(np.float32),
    )


def initial_parameters(emission, y, lengths, max_states, num_chains, seed, chunk=50, gamma=10.0, alpha=1.0, kappa=50.0):
    """Initial values of chains ``C``: ``y_A (C, L, D, D+1)``, ``y_cov (C, L, D, D)``, ``y_beta
    (C, L+1)``, ``y_trans (C, L+1, L+1)``, ``gamma``, ``alpha``, ``kappa`` ``(C,)``.

    For each chain the sequences are cut into chunks of ``chunk`` frames (2 s), each chunk gets
    a uniformly random label in ``{0, ..., L-1}``, and every state starts at its conjugate
    posterior mean given those frames (``A = M_n``, ``Sigma = Psi_n / (nu_n - D - 1)``).  The
    first sweep then starts from many specific states and merges them, instead of from prior
    draws of the parameters, where one state with a large covariance draw takes all frames and
    the chain stays with 2-5 states.  ``beta`` starts uniform over the ``L`` states, the rows at
    their prior means ``(alpha beta + kappa e_j) / (alpha + kappa)`` and the hyperparameters at
    ``gamma``, ``alpha``, ``kappa``: prior draws of ``beta`` with a small ``gamma`` or ``alpha``
    give most states a transition probability of ~0, and the first sweep then keeps only 2 of
    them, whatever their parameters (the weak-limit sampler rarely re-enters such states).
    """
    rng = np.random.default_rng(seed)
    N, T, D = y.shape
    x, valid = jax.vmap(emission.prepare)(jnp.asarray(y))
    valid = np.asarray(valid) & (np.arange(T)[None, :] < np.asarray(lengths)[:, None])
    flat_x = jax.tree_util.tree_map(lambda a: a.reshape((N * T,) + a.shape[2:]), x)
    A, cov = [], []
    for _ in range(num_chains):
        labels = rng.integers(max_states, size=(N, T // chunk + 1))[:, np.arange(T) // chunk]
        weights = np.eye(max_states, dtype=np.float32)[labels] * valid[..., None]
        post = emission.posterior(emission.sufficient_statistics(flat_x, jnp.asarray(weights.reshape(N * T, -1))))
        A.append(post.loc)
        cov.append(post.scale / (post.df - D - 1.0)[:, None, None])
    L = max_states
    dtype = np.float32
    beta = np.append(np.full(L, 1.0 / L), 0.0).astype(dtype)  # weak limit: the rest has mass 0
    trans = np.zeros((L + 1, L + 1), dtype)
    trans[:L, :L] = (alpha * beta[:L] + kappa * np.eye(L)) / (alpha + kappa)  # prior mean rows
    trans[L, :L] = beta[:L]  # start row
    tile = lambda a: jnp.asarray(np.broadcast_to(a, (num_chains,) + np.shape(a)).copy())
    return {
        "y_A": jnp.stack(A),
        "y_cov": jnp.stack(cov),
        "y_beta": tile(beta),
        "y_trans": tile(trans),
        "gamma": tile(np.asarray(gamma, dtype)),
        "alpha": tile(np.asarray(alpha, dtype)),
        "kappa": tile(np.asarray(kappa, dtype)),
    }


def make_model(emission, max_states):
    def model(y, lengths):
        gamma = numpyro.sample("gamma", dist.Gamma(1.0, 0.01))
        alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0))
        kappa = numpyro.sample("kappa", dist.Gamma(50.0, 1.0))
        hmm = nh.StickyHDPHMM(gamma=gamma, alpha=alpha, kappa=kappa, emission=emission, max_states=max_states)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    return model


def valid_frames(x, lengths):
    """``x (..., N, T)`` -> ``(..., sum(lengths))``: the valid steps of the sequences, concatenated."""
    return np.concatenate([x[..., n, :length] for n, length in enumerate(lengths)], axis=-1)


def main(num_warmup=400, num_samples=100, num_chains=4, max_states=30, seed=0, sequence=3, prefix="mocap", prior_df=None,
         start="data"):
    data = nh.datasets.load_mocap6()
    lengths = np.asarray(data.lengths)
    y, _, _ = standardize(data.observations, lengths)
    truth = valid_frames(data.states, lengths)
    emission = emission_prior(y, lengths, df=prior_df)
    model = make_model(emission, max_states)
    init = initial_parameters(emission, y, lengths, max_states, num_chains, seed) if start == "chunks" else None

    mcmc = MCMC(
        nh.infer.WeakLimitGibbs(model, init_strategy="prior" if start == "prior" else "data"),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    start = time.perf_counter()
    mcmc.run(jax.random.key(seed), y, jnp.asarray(lengths, jnp.int32), init_params=init)
    elapsed = time.perf_counter() - start
    print(f"{num_chains} chains x {num_warmup + num_samples} sweeps, {len(lengths)} sequences, "
          f"{lengths.sum()} frames, L = {max_states}: {elapsed:.1f} s (compilation included)")

    samples = mcmc.get_samples(group_by_chain=True)
    states = valid_frames(np.asarray(samples["y_states"]), lengths)  # (chains, draws, frames)
    last = min(100, num_samples)
    finals = []
    for c in range(num_chains):
        hamming = nh.diagnostics.hamming_distance(states[c, -last:], truth)
        k = int(nh.diagnostics.num_states(states[c, -1]))
        finals.append(hamming[-1])
        print(f"chain {c}: {k:2d} states in the last draw, normalized Hamming distance to the 12 exercises: "
              f"last draw {hamming[-1]:.3f}, median over the last {last} draws {np.median(hamming):.3f} "
              f"(gamma {float(samples['gamma'][c, -1]):.2f}, alpha {float(samples['alpha'][c, -1]):.2f}, "
              f"kappa {float(samples['kappa'][c, -1]):.1f})")
    print(f"last-draw Hamming distance over chains: min {min(finals):.3f}, median {np.median(finals):.3f}, "
          f"max {max(finals):.3f}")

    # segmentation of one sequence, last draw of chain 0, states matched to the exercises over
    # all six sequences (so colours agree with the annotation strip)
    relabelled, _ = nh.diagnostics.relabel(np.asarray(samples["y_states"])[0, -1].reshape(-1),
                                           np.asarray(data.states).reshape(-1))
    relabelled = relabelled.reshape(data.states.shape)
    n = sequence
    fig = nh.diagnostics.plot_segmentation(
        y[n, : lengths[n]], relabelled[n, : lengths[n]], true_states=data.states[n, : lengths[n]],
        match_colors=False, title=f"mocap sequence {n}: sticky HDP-AR-HMM, chain 0, last draw",
    )
    fig.savefig(f"{prefix}_segmentation.png", dpi=90)
    print(f"wrote {prefix}_segmentation.png")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-warmup", type=int, default=400)
    parser.add_argument("--num-samples", type=int, default=100)
    parser.add_argument("--num-chains", type=int, default=4)
    parser.add_argument("--max-states", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sequence", type=int, default=3, help="sequence to plot (0-5)")
    parser.add_argument("--prior-df", type=float, default=None, help="inverse-Wishart df (default D + 2)")
    parser.add_argument("--start", choices=("data", "chunks", "prior"), default="data",
                        help="the kernel's data-driven start (default), 50-frame chunk posteriors, or prior draws")
    args = parser.parse_args()
    main(args.num_warmup, args.num_samples, args.num_chains, args.max_states, args.seed, args.sequence,
         prior_df=args.prior_df, start=args.start)
