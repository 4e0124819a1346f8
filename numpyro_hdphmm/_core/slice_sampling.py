r"""Univariate slice sampling (Neal 2003), for the collapsed hyperparameter updates.

``slice_sample(key, x0, log_density)`` is one update of a scalar ``x`` whose (unnormalized) log
density is ``log_density(x)``, on the real line (the callers work in log or logit space):

1. the level ``log y = log f(x0) - E``, ``E ~ Exponential(1)`` (``y ~ U(0, f(x0))``);
2. stepping out (Neal 2003, Fig. 3): an interval of ``width`` placed at random around ``x0``,
   extended by ``width`` to the left at most ``J = floor(m V)`` times and to the right at most
   ``m - 1 - J`` times (``V ~ U(0, 1)``, ``m = max_steps_out``) while its end is inside the slice;
3. shrinkage (Neal 2003, Fig. 5): ``x1 ~ U(L, R)``; accepted if ``log f(x1) > log y``, else the
   interval shrinks to the side of ``x1`` that holds ``x0``.  After ``max_shrink`` rejected
   proposals the update returns ``x0``.

Each piece leaves ``f`` invariant (Neal 2003, Sec. 4.3, 4.2); so does the capped shrinkage:
the interval sequence that takes ``x0`` to ``x1`` in ``r`` rejections takes ``x1`` to ``x0`` in
the same ``r`` rejections, so capping ``r`` removes the same transitions in both directions
(their mass stays at ``x0``).  ``NaN`` densities count as ``-inf`` (outside the slice).  Pure,
jittable, vmappable (the ``lax.while_loop``s of a batch run until the last member is done).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax, random

__all__ = ["slice_sample", "coordinate_slice_sample"]


def _finite(value):
    return jnp.where(jnp.isnan(value), -jnp.inf, value)


def slice_sample(rng_key, x0, log_density, *, width=1.0, max_steps_out: int = 8, max_shrink: int = 40):
    """One slice-sampling update of the scalar ``x0`` (module docstring): returns ``x1``.

    ``log_density``: jittable scalar function (unnormalized, ``-inf`` outside the support);
    ``width``: the initial interval's width (of the order of the density's scale);
    ``max_steps_out``: ``m`` of the stepping-out procedure; ``max_shrink``: cap on the
    shrinkage proposals.

    One ``lax.while_loop`` evaluates the density once per iteration, at ``x0`` (the level), then
    at the left end while stepping out to the left, at the right end while stepping out to the
    right, and at the shrinkage proposals: the same points, in the same order and from the same
    uniforms as the three loops of Neal's figures, with the density's code compiled once instead
    of five times (the collapsed hyperparameter densities dominate the sweep's compile time)."""
    x0 = jnp.asarray(x0)
    dtype = x0.dtype if jnp.issubdtype(x0.dtype, jnp.floating) else jnp.result_type(float)
    x0 = x0.astype(dtype)
    width = jnp.asarray(width, dtype)
    k_level, k_place, k_split, k_shrink = random.split(rng_key, 4)
    drop = random.exponential(k_level, (), dtype)
    left = x0 - width * random.uniform(k_place, (), dtype)
    j = jnp.floor(max_steps_out * random.uniform(k_split, (), dtype)).astype(jnp.int32)

    def propose(lo, hi, i):
        return lo + (hi - lo) * random.uniform(random.fold_in(k_shrink, i), (), dtype)

    # phase 0: the level at x0; 1: stepping out to the left; 2: to the right; 3: shrinkage
    def body(c):
        phase, point, level, left, right, steps, i, _ = c
        value = _finite(log_density(point))
        level = jnp.where(phase == 0, value - drop, level)
        # stepping out: go on while the end is inside the slice and steps remain
        go_on = (phase > 0) & (phase < 3) & (steps > 0) & (value > level)
        left = jnp.where(phase == 1, point, left)  # the last left end evaluated
        right = jnp.where(phase == 2, point, right)
        inside = (phase == 3) & (value > level)
        # shrinkage: a rejected proposal shrinks the interval towards x0
        shrinking = (phase == 3) & ~inside
        left = jnp.where(shrinking & (point < x0), point, left)
        right = jnp.where(shrinking & (point >= x0), point, right)
        i = i + (phase == 3)
        # the next phase and point
        nxt = jnp.where(go_on | (phase == 3), phase, phase + 1).astype(jnp.int32)
        steps = jnp.where(phase == 1, jnp.where(go_on, steps - 1, max_steps_out - 1 - j), steps - go_on)
        point = jnp.where(
            inside, point,  # accepted: kept
            jnp.where(go_on, jnp.where(phase == 1, point - width, point + width),
                      jnp.where(nxt == 1, left, jnp.where(nxt == 2, right, propose(left, right, i)))),
        )
        done = inside | ((phase == 3) & (i >= max_shrink))
        status = jnp.where(inside, 1, jnp.where(done, 2, 0)).astype(jnp.int32)
        return nxt, point, level, left, right, steps.astype(jnp.int32), i.astype(jnp.int32), status

    zero = jnp.zeros((), dtype)
    init = (jnp.zeros((), jnp.int32), x0, zero, left, left + width, j, jnp.zeros((), jnp.int32),
            jnp.zeros((), jnp.int32))
    out = lax.while_loop(lambda c: c[-1] == 0, body, init)
    return jnp.where(out[-1] == 1, out[1], x0)


def coordinate_slice_sample(rng_key, x0, log_density, widths, num_cycles: int = 1):
    """``num_cycles`` sweeps of :func:`slice_sample` over the coordinates of ``x0 (D,)`` in turn
    (each coordinate given the others), for ``log_density`` of the vector; ``widths (D,)``.  One
    loop over the ``num_cycles * D`` updates (the density's code compiled once)."""
    x0 = jnp.asarray(x0)
    dims = x0.shape[0]
    widths = jnp.broadcast_to(jnp.asarray(widths, x0.dtype), (dims,))

    def update(n, x):
        d = n % dims
        key = random.fold_in(rng_key, n)
        return x.at[d].set(slice_sample(key, x[d], lambda v: log_density(x.at[d].set(v)), width=widths[d]))

    return lax.fori_loop(0, num_cycles * dims, update, x0)
