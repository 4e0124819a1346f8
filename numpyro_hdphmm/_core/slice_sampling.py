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
    shrinkage proposals."""
    x0 = jnp.asarray(x0)
    dtype = x0.dtype if jnp.issubdtype(x0.dtype, jnp.floating) else jnp.result_type(float)
    x0 = x0.astype(dtype)
    width = jnp.asarray(width, dtype)
    f = lambda x: _finite(log_density(x))
    k_level, k_place, k_split, k_shrink = random.split(rng_key, 4)
    level = f(x0) - random.exponential(k_level, (), dtype)
    left = x0 - width * random.uniform(k_place, (), dtype)
    right = left + width
    j = jnp.floor(max_steps_out * random.uniform(k_split, (), dtype)).astype(jnp.int32)
    k = max_steps_out - 1 - j

    def out_cond(carry):
        _, steps, value = carry
        return (steps > 0) & (value > level)

    def out_left(carry):
        end, steps, _ = carry
        end = end - width
        return end, steps - 1, f(end)

    def out_right(carry):
        end, steps, _ = carry
        end = end + width
        return end, steps - 1, f(end)

    left, _, _ = lax.while_loop(out_cond, out_left, (left, j, f(left)))
    right, _, _ = lax.while_loop(out_cond, out_right, (right, k, f(right)))

    def shrink_cond(carry):
        _, _, _, done, i = carry
        return ~done & (i < max_shrink)

    def shrink(carry):
        lo, hi, _, _, i = carry
        x1 = lo + (hi - lo) * random.uniform(random.fold_in(k_shrink, i), (), dtype)
        inside = f(x1) > level
        lo = jnp.where(~inside & (x1 < x0), x1, lo)
        hi = jnp.where(~inside & (x1 >= x0), x1, hi)
        return lo, hi, x1, inside, i + 1

    _, _, x1, done, _ = lax.while_loop(shrink_cond, shrink, (left, right, x0, jnp.zeros((), bool), 0))
    return jnp.where(done, x1, x0)


def coordinate_slice_sample(rng_key, x0, log_density, widths, num_cycles: int = 1):
    """``num_cycles`` sweeps of :func:`slice_sample` over the coordinates of ``x0 (D,)`` in turn
    (each coordinate given the others), for ``log_density`` of the vector; ``widths (D,)``."""
    x0 = jnp.asarray(x0)
    dims = x0.shape[0]
    widths = jnp.broadcast_to(jnp.asarray(widths, x0.dtype), (dims,))

    def cycle(c, x):
        for d in range(dims):
            key = random.fold_in(rng_key, c * dims + d)
            x = x.at[d].set(slice_sample(key, x[d], lambda v: log_density(x.at[d].set(v)), width=widths[d]))
        return x

    return lax.fori_loop(0, num_cycles, cycle, x0)
