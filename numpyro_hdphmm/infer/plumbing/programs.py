"""The compiled programs of a kernel: the model's arguments split into the arrays that enter a
program as arguments and the hashable key it is specialized on (:class:`Arguments`), used by the
kernels' program cache (:meth:`numpyro_hdphmm.infer.plumbing.adapter.HDPKernel.program`) and the
collapsed fitter alike, and the sizes that decide how a program is compiled."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from numpyro_hdphmm._core.slots import count_used

__all__ = ["Arguments", "COMPILE_LOG_JOINT_SIZE", "ONE_OFF_CLUSTER_SIZE", "CONCRETE_ARGUMENT_ERRORS", "count_used_jit"]


#: data size (elements) above which the initial log joint is compiled rather than run eagerly
COMPILE_LOG_JOINT_SIZE = 1_000_000

#: :func:`~numpyro_hdphmm._core.slots.count_used` as one program: NumPyro applies the kernel's
#: ``postprocess_fn`` to the collected draws eagerly, where each operation would compile on its own
count_used_jit = jax.jit(count_used, static_argnums=1)

#: data size (elements of the model's array arguments, times the vectorized chains) up to which the
#: clustering of the data-driven start is its own one-off program (no backend optimization; CPU,
#: outside any trace): it compiles several times faster and runs several times slower, a gain on
#: small data only (docs/benchmarks.md, "Compile time").  Above it, and elsewhere, the init
#: program clusters
ONE_OFF_CLUSTER_SIZE = 5_000

#: tracing a model with its array arguments abstract fails with these when the model needs their
#: values (``int(y.max())``); the kernel then compiles with the arguments as constants, uncached
CONCRETE_ARGUMENT_ERRORS = (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError,
                             jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError)


class Arguments(NamedTuple):
    """The model's arguments split for compilation: ``arrays`` (every array leaf, passed to the
    compiled function as an argument, so that new data of the same shape reuses the program) and
    ``key`` (hashable: the pytree structure, the arrays' shapes and dtypes and every other leaf's
    value, which the program is specialized on); ``None`` when a leaf is unhashable."""

    arrays: list
    key: Any
    treedef: Any
    is_array: tuple
    others: tuple

    @staticmethod
    def split(model_args, model_kwargs) -> "Arguments":
        leaves, treedef = jax.tree_util.tree_flatten((model_args, model_kwargs))
        is_array = tuple(isinstance(leaf, (jax.Array, np.ndarray)) for leaf in leaves)
        arrays = [leaf for leaf, a in zip(leaves, is_array) if a]
        others = tuple(leaf for leaf, a in zip(leaves, is_array) if not a)
        key = (treedef, is_array, tuple((np.shape(x), np.dtype(x.dtype).str) for x in arrays), others)
        try:
            hash(key)
        except TypeError:
            key = None
        return Arguments(arrays, key, treedef, is_array, others)

    def join(self, arrays):
        """``(model_args, model_kwargs)`` with ``arrays`` in place of the array leaves."""
        it, other = iter(arrays), iter(self.others)
        leaves = [next(it) if a else next(other) for a in self.is_array]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def compile(self, fn):
        """``fn(*leading, model_args, model_kwargs)`` as a jitted function of ``(*leading, arrays)``:
        the array leaves enter as arguments, every other leaf is the value this split was made
        on.  Call the result with ``self.arrays`` (or new arrays of the same shapes)."""
        return jax.jit(lambda *a: fn(*a[:-1], *self.join(a[-1])))

