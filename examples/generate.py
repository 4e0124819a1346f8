"""Draw a sticky and a non-sticky HDP-HMM data set from the generative model and plot them.

Both models share the hyperparameters (gamma = 3, alpha = 3) and a 1-D Gaussian emission with a
Normal-inverse-Wishart prior; the sticky one adds a self-transition bias kappa = 50, which turns
the rapid switching of the HDP-HMM into the persistent regimes typical of real segmentations
(Fox et al., Sec. V).  Run:  python examples/generate.py  (writes generate.png).
"""

import argparse

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import numpyro_hdphmm as nh


def summarize(name, states):
    s = np.asarray(states)
    switches = np.flatnonzero(s[1:] != s[:-1])
    segments = np.diff(np.concatenate([[0], switches + 1, [len(s)]]))
    print(
        f"{name:>10}: {len(np.unique(s)):2d} states used, {len(segments):4d} segments, "
        f"mean segment length {segments.mean():6.1f} steps, self-transition rate {np.mean(s[1:] == s[:-1]):.3f}"
    )


def main(num_steps=1000, seed=0, out="generate.png"):
    emission = nh.emissions.GaussianNIW(loc=np.zeros(1), mean_precision=0.01, df=3.0, scale=np.eye(1))
    models = {
        "sticky": nh.StickyHDPHMM(gamma=3.0, alpha=3.0, kappa=50.0, emission=emission, max_states=30, num_steps=num_steps),
        "HDP-HMM": nh.HDPHMM(gamma=3.0, alpha=3.0, emission=emission, max_states=30, num_steps=num_steps),
    }
    fig, axes = plt.subplots(len(models), 1, figsize=(11, 5), sharex=True)
    for ax, (name, model) in zip(axes, models.items()):
        y, latent = model.sample_with_intermediates(jax.random.key(seed))
        states = np.asarray(latent["states"])
        summarize(name, states)
        ax.scatter(np.arange(num_steps), np.asarray(y)[:, 0], c=states, cmap="tab20", s=4)
        ax.set_ylabel("y")
        ax.set_title(f"{name}: {len(np.unique(states))} states (colour = state)")
    axes[-1].set_xlabel("time")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-steps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="generate.png")
    args = parser.parse_args()
    main(args.num_steps, args.seed, args.out)
