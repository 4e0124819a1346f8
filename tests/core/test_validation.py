"""``host_warning``: the host is called only when there is something to warn about, once per call
site under ``vmap``, with the value summed over the batch."""

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_hdphmm._core.validation import host_warning

CALLS = []


def _record(value, where):
    CALLS.append((where, np.asarray(value).copy()))


def _warn_if(flags):
    host_warning(_record, flags, "site")
    return jnp.sum(flags)


_compiled = jax.jit(_warn_if)


def test_no_host_call_when_every_entry_is_zero():
    CALLS.clear()
    jax.block_until_ready(_compiled(jnp.zeros(3, jnp.int32)))
    jax.effects_barrier()
    assert CALLS == []


def test_one_host_call_with_the_value_when_some_entry_is_nonzero():
    CALLS.clear()
    jax.block_until_ready(_compiled(jnp.array([0, 2, 0], jnp.int32)))
    jax.effects_barrier()
    assert len(CALLS) == 1 and CALLS[0][0] == "site"
    np.testing.assert_array_equal(CALLS[0][1], [0, 2, 0])


def test_vmapped_calls_the_host_once_with_the_summed_value():
    CALLS.clear()
    batch = jnp.array([[0, 1, 0], [0, 1, 1], [0, 0, 0]], jnp.int32)
    jax.block_until_ready(jax.jit(jax.vmap(_warn_if))(batch))
    jax.effects_barrier()
    assert len(CALLS) == 1
    np.testing.assert_array_equal(CALLS[0][1], [0, 2, 1])
    CALLS.clear()
    jax.block_until_ready(jax.jit(jax.vmap(_warn_if))(jnp.zeros((4, 3), jnp.int32)))
    jax.effects_barrier()
    assert CALLS == []
