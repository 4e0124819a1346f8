"""The layout of the observations every model class shares: one sequence ``(T, *event)`` or several
``(N, T, *event)`` with ``lengths (N,)``, checked on concrete data before anything is compiled
(every message names the argument, ``docs/errors.md``)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from numpyro_hdphmm._core.validation import as_data_array, is_concrete
from numpyro_hdphmm.models.base import DEFAULT_NUM_STEPS

__all__ = ["check_lengths", "sequence_layout", "layout_from_draws", "check_states_shape"]


def _shape_text(event) -> str:
    return "".join(f", {d}" for d in event)


def check_lengths(lengths, num_steps, num_sequences):
    """``lengths`` (list, NumPy, pandas, JAX) as an ``int32`` array of shape ``(N,)`` with
    entries in ``[1, num_steps]`` (values checked when concrete)."""
    lengths = as_data_array("lengths", lengths)
    if jnp.ndim(lengths) != 1 or (num_sequences is not None and jnp.shape(lengths) != (num_sequences,)):
        expect = "(N,)" if num_sequences is None else f"(N,) = ({num_sequences},)"
        raise ValueError(f"`lengths` must have shape {expect}, one length per sequence, got {jnp.shape(lengths)}.")
    if is_concrete(lengths):
        ln = np.asarray(lengths)
        if not (np.issubdtype(ln.dtype, np.integer) or ln.dtype == bool) or np.any(ln < 1) or (
            num_steps is not None and np.any(ln > num_steps)
        ):
            bound = "" if num_steps is None else f", T={num_steps}"
            raise ValueError(f"`lengths` must be integers in [1{bound}], got {ln}.")
    return jnp.asarray(lengths, jnp.int32)


def _check_layout_values(emission, obs, lengths, batched: bool, num_steps: int):
    """Checks on concrete ``obs``: the family's own (support, range), sequences long enough for
    the family, and no sequence without an observed step."""
    emission.check_observations(obs, "obs")
    minimum = emission.min_sequence_length
    seq_lengths = np.full(np.shape(obs)[0] if batched else 1, num_steps) if lengths is None else np.asarray(lengths)
    if minimum > 1 and np.any(seq_lengths < minimum):
        n = int(np.argmin(seq_lengths))
        where = f"sequence {n} has" if batched else "the sequence has"
        raise ValueError(
            f"`obs`: {where} {int(seq_lengths[n])} step(s); the {type(emission).__name__} emission needs sequences "
            f"of at least {minimum} steps (an order-{minimum - 1} autoregression needs observed lags). Drop or join "
            "the short sequences, or lower the order."
        )
    arr = np.asarray(obs)
    if arr.dtype.kind != "f":
        return
    event_axes = tuple(range(arr.ndim - len(emission.event_shape), arr.ndim))
    missing = np.any(np.isnan(arr), axis=event_axes) if event_axes else np.isnan(arr)
    missing = missing.reshape(-1, num_steps)
    inside = np.arange(num_steps)[None, :] < seq_lengths[:, None]
    observed = np.sum(~missing & inside, axis=1)
    if np.any(observed == 0):
        n = int(np.argmin(observed))
        where = f"sequence {n} (length {int(seq_lengths[n])})" if batched else "the sequence"
        raise ValueError(
            f"`obs`: {where} has no observed step (every value is NaN). Drop it: an all-missing sequence carries "
            "no information and usually means misaligned padding or `lengths`."
        )


def sequence_layout(hmm, obs, lengths):
    """Return ``(obs as an array or None, num_sequences or None, num_steps, lengths)``; every
    check on the user's data and ``lengths`` happens here, before any compilation, and names the
    argument.  Shapes: ``(T, *event)`` is one sequence, ``(N, T, *event)`` several."""
    emission = hmm.emission
    event = tuple(emission.event_shape)
    event_ndim = len(event)
    if obs is None:
        num_steps = hmm.num_steps
        if lengths is None:
            return None, None, num_steps or DEFAULT_NUM_STEPS, None
        raw = lengths  # NumPy / list lengths stay concrete under Predictive's vmap (their int32 copy does not)
        lengths = check_lengths(lengths, num_steps, None)
        if num_steps is None:
            num_steps = int(np.max(np.asarray(raw))) if is_concrete(raw) else DEFAULT_NUM_STEPS
        return None, lengths.shape[0], num_steps, lengths
    obs = as_data_array("obs", obs)
    shape = tuple(jnp.shape(obs))
    ndim = len(shape)
    one = f"(T{_shape_text(event)})"
    several = f"(N, T{_shape_text(event)})"
    if event_ndim and (ndim < event_ndim or shape[ndim - event_ndim:] != event):
        hint = ""
        if event == (1,) and ndim in (1, 2):
            hint = (" For one-dimensional observations pass y[:, None] (shape (T, 1)), e.g. df[['col']].to_numpy()"
                    " rather than df['col'].")
        elif ndim == 2 and shape[0] == event[-1]:
            hint = f" Did you pass the transpose? One sequence is (T, {event[-1]}): use y.T."
        raise ValueError(
            f"`obs` must have shape {one} for one sequence or {several} for several, with event shape {event} "
            f"from the {type(emission).__name__} emission; got {shape}.{hint}"
        )
    if ndim not in (event_ndim + 1, event_ndim + 2):
        raise ValueError(
            f"`obs` must have shape {one} for one sequence or {several} for several (event shape {event} from the "
            f"{type(emission).__name__} emission); got {shape}."
        )
    batched = ndim == event_ndim + 2
    num_steps = shape[1 if batched else 0]
    if num_steps == 0 or (batched and shape[0] == 0):
        raise ValueError(f"`obs` has no observations (shape {shape}).")
    if batched and num_steps == 1:
        raise ValueError(
            f"`obs` of shape {shape} would be read as {shape[0]} sequence(s) of length 1: the "
            f"{type(emission).__name__} emission's observations have event shape {event}, so {one} is one sequence "
            f"and {several} is several. For one sequence pass shape {one} (e.g. y[:, 0] or df['col'].to_numpy() "
            f"instead of df[['col']].values); for several sequences pad them with NaN to a common length T, stack "
            f"them as {several} and pass `lengths=`."
        )
    if batched and not event_ndim and lengths is None and num_steps < shape[0]:
        raise ValueError(
            f"`obs` of shape {shape} would be read as {shape[0]} sequences of {num_steps} steps each (the "
            f"{type(emission).__name__} emission's observations are scalars, event shape ()): more sequences than steps, "
            f"which usually means a (T, D) matrix of D channels of one sequence. For D channels use a family with "
            f"event shape (D,) (e.g. Poisson(event_shape={num_steps}), or one HDP-HMM per channel); if these really "
            f"are {shape[0]} sequences, confirm it with `lengths=` (e.g. np.full({shape[0]}, {num_steps}))."
        )
    if lengths is not None:
        if not batched:
            raise ValueError(f"`lengths` is only meaningful for several sequences: `obs` of shape {several}.")
        lengths = check_lengths(lengths, num_steps, shape[0])
    if is_concrete(obs) and (lengths is None or is_concrete(lengths)):
        _check_layout_values(emission, obs, lengths, batched, num_steps)
    return obs, (shape[0] if batched else None), num_steps, lengths


def layout_from_draws(name: str, hmm, states, lengths):
    """``(num_sequences or None, num_steps)`` of the sequences to draw without ``obs``, read from the
    ``{name}_states`` value (under ``Predictive`` the posterior draws: ``(T,)`` one sequence,
    ``(N, T)`` several); a ``ValueError`` names the argument when the draws and the arguments
    disagree."""
    shape = tuple(jnp.shape(states))
    if len(shape) not in (1, 2):
        raise ValueError(f"'{name}_states' must have shape (T,) or (N, T) (one or several sequences), got {shape}.")
    draws_steps = shape[-1]
    if hmm.num_steps is not None and hmm.num_steps != draws_steps:
        raise ValueError(
            f"`num_steps`={hmm.num_steps} of the {type(hmm).__name__} disagrees with the posterior draws of "
            f"'{name}_states' ({draws_steps} steps, shape {shape}): pass num_steps={draws_steps} (or None) for "
            "replicates of the observed sequences; nh.forecast continues them past their end.")
    if lengths is not None:
        if len(shape) != 2 or shape[0] != np.shape(lengths)[0]:
            raise ValueError(
                f"`lengths` holds {np.shape(lengths)[0]} sequence length(s) but the draws of '{name}_states' have shape "
                f"{shape} ({'one sequence' if len(shape) == 1 else f'{shape[0]} sequences'}): pass the `lengths` of "
                "the observed sequences the draws belong to (or lengths=None).")
        if is_concrete(lengths) and np.max(np.asarray(lengths)) > draws_steps:
            raise ValueError(
                f"`lengths` (max {int(np.max(np.asarray(lengths)))}) exceeds the {draws_steps} steps of the draws of "
                f"'{name}_states': pass the `lengths` of the observed sequences the draws belong to.")
    return (shape[0] if len(shape) == 2 else None), draws_steps


def check_states_shape(name: str, states, expected) -> None:
    """A value given for the states site (substituted, conditioned, resumed) has one state per step."""
    if tuple(jnp.shape(states)) != tuple(expected):
        raise ValueError(
            f"`{name}_states` has shape {tuple(jnp.shape(states))} but the data give {tuple(expected)} (one state per "
            f"step): a value given for the states must match the data. A `post_warmup_state` or `last_state` resumes "
            f"only on data of the shapes it was made on (for other data run a new MCMC, with its own warmup); "
            f"`init_to_value`/`init_params`, `handlers.substitute` and `handlers.condition` need shape {tuple(expected)}."
        )
