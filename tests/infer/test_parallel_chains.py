"""chain_method="parallel" over several (simulated) CPU devices, in a subprocess so that the
device count can be set before JAX starts; the same key gives the same draws."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import numpyro
    numpyro.set_host_device_count(2)
    import jax, numpy as np
    import numpyro_hdphmm as nh
    from numpyro.infer import MCMC

    def model(y):
        emission = nh.emissions.GaussianNIW(np.zeros(1), 0.1, 3.0, np.eye(1))
        nh.sample("y", nh.StickyHDPHMM(2.0, 2.0, 5.0, emission, max_states=4), obs=y)

    assert jax.local_device_count() == 2
    y = np.concatenate([np.full(20, -3.0), np.full(20, 3.0)])[:, None]
    mcmc = MCMC(nh.infer.WeakLimitGibbs(model), num_warmup=5, num_samples=5, num_chains=2,
                chain_method="parallel", progress_bar=False)
    mcmc.run(jax.random.key(0), y)
    first = mcmc.get_samples(group_by_chain=True)
    assert first["y_states"].shape == (2, 5, 40)
    mcmc.run(jax.random.key(0), y)  # the same key: the same draws (issue 18)
    again = mcmc.get_samples(group_by_chain=True)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    print("OK")
    """
)


@pytest.mark.slow
def test_parallel_chain_method():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-2000:]
