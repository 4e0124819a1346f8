r"""A sequence drawn with its segmentation (:func:`plot_segmentation`) and the posterior duration laws
of the states (:func:`plot_duration_posterior`); matplotlib, imported on call."""

from __future__ import annotations

from typing import Optional

import numpy as np

from numpyro_hdphmm.results.diagnostics.labellings import as_labels, relabel

__all__ = ["plot_duration_posterior", "plot_segmentation"]


def _state_colors(labels: np.ndarray, palette: np.ndarray, cmap) -> np.ndarray:
    """``(T,)`` labels -> ``(1, T, 4)`` RGBA image (transparent where the label is negative).

    The colour of a label is its rank in ``palette`` (the sorted labels shown in the figure),
    modulo the colormap size, so distinct labels get distinct colours whenever there are at
    most ``cmap.N`` of them.
    """
    rank = np.searchsorted(palette, np.maximum(labels, 0))
    rgba = np.asarray(cmap(np.mod(rank, cmap.N)), dtype=float)
    rgba[labels < 0] = 0.0
    return rgba[None]


def plot_segmentation(observations, states, true_states=None, ax=None, cmap: str = "tab10",
                      alpha: float = 0.35, match_colors: bool = True, title: Optional[str] = None,
                      agreement=None):
    r"""Plot a sequence with its segmentation: the observations as lines over a background
    coloured by the inferred state, and, when ``true_states`` is given, a second row showing
    the true states in the same colours; with ``agreement``, a last row showing the per-step
    posterior probability of the segmentation.

    For a posterior summary pass the Bayes point estimate
    (``numpyro_hdphmm.point_segmentation(draws).labels``) as ``states`` and
    ``numpyro_hdphmm.labels.step_agreement(draws, labels)`` as ``agreement``, not one draw.

    Args:
        observations: ``(T,)`` or ``(T, D)`` (each column a line; NaN rows leave gaps).
        states: ``(T,)`` inferred labels (negative: no colour).
        true_states: optional ``(T,)`` true labels.
        ax: ``None`` (a new figure), one ``Axes`` (the true states then go in a strip inset
            below it) or a sequence of two ``Axes``.
        cmap: a qualitative matplotlib colormap name; the labels shown are coloured in order
            (distinct colours for up to ``cmap.N`` labels, then the colours repeat).
        alpha: opacity of the state colours behind the observations.
        match_colors: relabel ``states`` to ``true_states`` with :func:`relabel` first, so
            matched states share a colour.
        title: optional title of the top panel.
        agreement: optional ``(T,)`` values in ``[0, 1]`` (NaN: none), e.g. the fraction of
            posterior draws that put each step in the state ``states`` gives it.

    Returns:
        the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    obs = np.asarray(observations, dtype=float)
    if obs.ndim == 1:
        obs = obs[:, None]
    if obs.ndim != 2:
        raise ValueError(f"`observations` must have shape (T,) or (T, D), got {np.shape(observations)}.")
    T = obs.shape[0]
    states = as_labels("states", states)
    if states.shape != (T,):
        raise ValueError(f"`states` must have shape ({T},), got {states.shape}.")
    if true_states is not None:
        true_states = as_labels("true_states", true_states)
        if true_states.shape != (T,):
            raise ValueError(f"`true_states` must have shape ({T},), got {true_states.shape}.")
        if match_colors and np.any(states >= 0):
            states, _ = relabel(states, true_states)
    colormap = colormaps[cmap]
    shown = [states] if true_states is None else [states, true_states]
    palette = np.unique(np.concatenate([x[x >= 0] for x in shown] + [np.zeros(1, np.int64)]))

    if agreement is not None:
        agreement = np.asarray(agreement, dtype=float)
        if agreement.shape != (T,):
            raise ValueError(f"`agreement` must have shape ({T},), got {agreement.shape}.")
    strips = (["true"] if true_states is not None else []) + (["agreement"] if agreement is not None else [])
    rows = 1 + len(strips)
    if ax is None:
        fig, axes = plt.subplots(
            rows, 1, sharex=True, figsize=(10, 3 + 0.6 * (rows - 1)),
            gridspec_kw={"height_ratios": [5] + [1] * (rows - 1)}, squeeze=False,
        )
        axes = list(axes[:, 0])
    elif isinstance(ax, (list, tuple, np.ndarray)):
        axes = list(np.ravel(ax))
        if len(axes) < rows:
            raise ValueError(f"`ax` must hold {rows} Axes, got {len(axes)}.")
        fig = axes[0].figure
    else:
        axes = [ax]
        fig = ax.figure
        for i in range(rows - 1):
            axes.append(ax.inset_axes([0.0, -0.22 - 0.16 * i, 1.0, 0.12], sharex=ax))

    top = axes[0]
    finite = obs[np.isfinite(obs)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    pad = 0.05 * (hi - lo) if hi > lo else 1.0
    lo, hi = lo - pad, hi + pad
    top.imshow(_state_colors(states, palette, colormap), aspect="auto", interpolation="nearest",
               extent=(-0.5, T - 0.5, lo, hi), alpha=alpha, zorder=0)
    top.plot(np.arange(T), obs, color="k", lw=0.8, zorder=1)
    top.set_xlim(-0.5, T - 0.5)
    top.set_ylim(lo, hi)
    top.set_ylabel("observation")
    if title:
        top.set_title(title)
    for strip, what in zip(axes[1:], strips):
        if what == "true":
            strip.imshow(_state_colors(true_states, palette, colormap), aspect="auto", interpolation="nearest",
                         extent=(-0.5, T - 0.5, 0, 1))
            strip.set_yticks([])
            strip.set_ylabel("true", rotation=0, ha="right", va="center")
        else:
            strip.fill_between(np.arange(T), agreement, color="0.4", step="mid", lw=0)
            strip.set_ylim(0, 1)
            strip.set_yticks([0, 1])
            strip.set_ylabel("P(state)", rotation=0, ha="right", va="center")
        strip.set_xlim(-0.5, T - 0.5)
    axes[rows - 1].set_xlabel("time step")
    return fig


def plot_duration_posterior(posterior, states=None, ax=None, cmap: str = "tab10", alpha: float = 0.25,
                            title: Optional[str] = None):
    r"""Plot the posterior duration law of each state: the posterior mean pmf over ``d = 1..D`` as a
    line with its pointwise credible band, one colour per state.

    Args:
        posterior: the :class:`~numpyro_hdphmm.results.segments.DurationPosterior` of
            :func:`numpyro_hdphmm.duration_posterior`.
        states: the states to show (default all; pass the kept states of a relabelled posterior,
            :func:`numpyro_hdphmm.results.labels.kept_states`, to leave out empty slots).
        ax: ``None`` (a new figure) or an ``Axes``.
        cmap: a qualitative matplotlib colormap name.
        alpha: opacity of the bands.
        title: optional title.

    Returns:
        the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    mean = np.asarray(posterior.mean, dtype=float)
    if mean.ndim != 2:
        raise ValueError(f"`posterior.mean` must have shape (K, D), got {mean.shape}.")
    k = mean.shape[0]
    shown = np.arange(k) if states is None else np.asarray(states)
    if shown.ndim != 1 or not np.issubdtype(shown.dtype, np.integer) or np.any(shown < 0) or np.any(shown >= k):
        raise ValueError(f"`states` must be a sequence of state indices in [0, {k}), got {states!r}.")
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.5))
    else:
        fig = ax.figure
    colormap = colormaps[cmap]
    d = np.asarray(posterior.durations)
    for i, state in enumerate(shown):
        color = colormap(i % colormap.N)
        ax.fill_between(d, posterior.lower[state], posterior.upper[state], color=color, alpha=alpha, step="mid")
        ax.plot(d, mean[state], color=color, drawstyle="steps-mid",
                label=f"state {state} (mean {float(posterior.mean_duration[state]):.1f})")
    ax.set_xlabel("duration d")
    ax.set_ylabel("p(d)")
    ax.set_xlim(d[0] - 0.5, d[-1] + 0.5)
    ax.legend(fontsize="small")
    if title:
        ax.set_title(title)
    return fig
