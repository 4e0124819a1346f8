"""Sequences sharded over devices (numpyro_hdphmm.infer.plumbing.sharding): the sharded kernels make the
unsharded kernels' draws for the same key, on 4 simulated CPU devices (also with vectorized chains
split over a second mesh axis) and across 2 processes (jax.distributed with gloo CPU collectives);
CollapsedSVI's sharded updates are the unsharded ones.  Each run is a subprocess (tests/infer/sharding_worker.py),
because the device count and the distributed runtime must be set before JAX starts."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import numpyro_hdphmm as nh
from numpyro_hdphmm.infer import PGAS, BeamSampler, CollapsedSVI, WeakLimitGibbs, sequence_mesh

WORKER = Path(__file__).with_name("sharding_worker.py")
SITES = ("y_states", "y_beta", "y_trans", "y_probs", "gamma", "alpha", "kappa")


def run_worker(out, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                    os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, str(WORKER), str(out), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(np.load(out))


def assert_same_draws(draws, run, reference="unsharded"):
    """The same states, ``beta`` and rows (integer counts: exact), the same emission parameters and
    hyperparameters up to the order of floating-point sums."""
    for site in SITES:
        a, b = draws[f"{reference}/{site}"], draws[f"{run}/{site}"]
        if site == "y_states":
            np.testing.assert_array_equal(a, b, err_msg=f"{run}: {site}")
        else:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12, err_msg=f"{run}: {site}")


@pytest.fixture(scope="module")
def four_devices(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharding") / "four.npz"
    return run_worker(out, "--devices", "4", "--runs", "unsharded,mesh", "--check-padding")


@pytest.fixture(scope="module")
def four_devices_more(tmp_path_factory):
    """The slow set's 4-device run: vectorized chains x sequences, and CollapsedSVI."""
    out = tmp_path_factory.mktemp("sharding") / "four_more.npz"
    return run_worker(out, "--devices", "4", "--runs", "unsharded@2,chains2x2@2", "--check-svi")


@pytest.mark.slow  # a subprocess on 4 simulated devices: 59 s of a loaded worker (the default set keeps the argument checks)
def test_four_devices_make_the_unsharded_draws(four_devices):
    """64 sequences of 6-12 steps, WeakLimitGibbs with exact hyperparameter updates: the sweep on
    4 devices (16 sequences each) draws what the unsharded sweep draws for the same key."""
    assert int(four_devices["num_devices"]) == 4
    assert four_devices["unsharded/y_states"].shape == (4, 64, 12)
    assert len(np.unique(four_devices["unsharded/y_states"][-1])) > 1  # the states moved
    assert_same_draws(four_devices, "mesh")


@pytest.mark.slow
def test_padding_rows_are_dropped(four_devices):
    """map_sequences of 5 rows on 1-4 devices (padded to 6 and 8 on 3 and 4) gives the unsharded
    values, with the padded rows gone."""
    a = np.arange(5.0) * 3.0 + np.arange(10).reshape(5, 2).sum(-1)
    b = np.arange(10).reshape(5, 2)[:, ::-1]
    for count in range(1, 5):
        np.testing.assert_array_equal(four_devices[f"padding{count}/a"], a)
        np.testing.assert_array_equal(four_devices[f"padding{count}/b"], b)


@pytest.mark.slow
def test_chains_and_sequences_on_one_mesh(four_devices_more):
    """2 vectorized chains on a (2, 2) mesh ("chains", "sequences"), WeakLimitGibbs(mesh=...,
    chain_axis="chains"): each device runs one chain's block of 32 sequences, and the draws are those
    of the unsharded vectorized run for the same key, and the chains' states are laid out over the
    chain axis (without ``spmd_axis_name`` they are replicated over it: P(None, 'sequences'))."""
    assert four_devices_more["unsharded@2/y_states"].shape == (2 * 4, 64, 12)  # chains x samples, flattened
    beta = four_devices_more["unsharded@2/y_beta"]
    assert not np.allclose(beta[:4], beta[4:])  # two different chains
    assert_same_draws(four_devices_more, "chains2x2@2", reference="unsharded@2")
    assert str(four_devices_more["chains2x2@2/states_spec"]) == "P('chains', 'sequences')"


@pytest.mark.slow
def test_collapsed_svi_sharded_updates(four_devices_more):
    """CollapsedSVI on 4 devices (mesh=sequence_mesh()): 4 run() updates with minibatches of 10
    sequences (not a multiple of 4: padded inside the sharded step; two of them HDP updates), then
    update() on all 64: the parameters and the ELBO estimates are the unsharded fitter's up to the
    order of floating-point sums.  The default mesh="auto" takes the 4 devices."""
    prefix = "svi/unsharded/"
    keys = [k[len(prefix):] for k in four_devices_more if k.startswith(prefix) and not k.endswith("num_shards")]
    assert "losses" in keys and "update/['transition_counts']" in keys and "counts" in keys
    assert int(four_devices_more[prefix + "num_shards"]) == 1
    assert np.all(np.isfinite(four_devices_more[prefix + "losses"]))
    assert int(four_devices_more["svi/auto/num_shards"]) == 4
    for run in ("mesh",):
        assert int(four_devices_more[f"svi/{run}/num_shards"]) == 4
        for k in keys:
            np.testing.assert_allclose(four_devices_more[f"svi/{run}/{k}"], four_devices_more[prefix + k], rtol=1e-10,
                                       atol=1e-10, err_msg=f"{run}: {k}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two more processes (JAX start, discovery and the sharded program each); as the 4-device tests
def test_two_processes_make_the_one_process_draws(four_devices, tmp_path):
    """jax.distributed on a loopback coordinator, 2 processes with one CPU device each and gloo
    collectives: the mesh spans both processes, and the draws are the one-process draws."""
    out = tmp_path / "two.npz"
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                    os.environ.get("PYTHONPATH")]))}
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(out), "--runs", "mesh", "--num-processes", "2",
                               "--process-id", str(i), "--port", port], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    errors = []
    for proc in procs:
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if proc.returncode != 0:
            errors.append(err[-3000:])
    assert not errors, "\n".join(errors)
    draws = dict(np.load(out))
    assert int(draws["num_devices"]) == 2
    assert_same_draws({**draws, **{k: v for k, v in four_devices.items() if k.startswith("unsharded/")}}, "mesh")


@pytest.mark.slow
def test_padding_and_beam_sampler_sharded(tmp_path):
    """64 sequences on 3 of 4 devices (padded to 66) with WeakLimitGibbs, and BeamSampler on 4 and
    3 devices: the unsharded draws."""
    draws = run_worker(tmp_path / "wl3.npz", "--devices", "4", "--runs", "unsharded,mesh3")
    assert_same_draws(draws, "mesh3")
    draws = run_worker(tmp_path / "beam.npz", "--devices", "4", "--kernel", "beam", "--runs", "unsharded,mesh,mesh3")
    assert_same_draws(draws, "mesh")
    assert_same_draws(draws, "mesh3")


def model(y):
    nh.sample("y", nh.StickyHDPHMM(2.0, 2.0, 5.0, nh.emissions.Categorical(2, 1.0), max_states=3), obs=y)


def test_mesh_arguments_are_validated():
    mesh = sequence_mesh()
    assert WeakLimitGibbs(model, mesh=mesh).algorithm.sharding.num_shards == len(jax.devices())
    assert BeamSampler(model, mesh=mesh, sequence_axes="sequences").algorithm.sharding.axes == ("sequences",)
    with pytest.raises(ValueError, match="`mesh` must be a jax.sharding.Mesh"):
        WeakLimitGibbs(model, mesh=jax.devices())
    with pytest.raises(ValueError, match="`sequence_axes` must name axes of the mesh"):
        WeakLimitGibbs(model, mesh=mesh, sequence_axes="chains")
    with pytest.raises(ValueError, match="`sequence_axes` needs a `mesh`"):
        BeamSampler(model, sequence_axes="sequences")
    with pytest.raises(NotImplementedError, match="not data-parallel"):
        PGAS(model, mesh=mesh)
    with pytest.raises(ValueError, match="`chain_axis` must name an axis of the mesh"):
        WeakLimitGibbs(model, mesh=mesh, chain_axis="chains")
    with pytest.raises(ValueError, match="`chain_axis` needs a `mesh`"):
        WeakLimitGibbs(model, chain_axis="chains")
    grid = jax.sharding.Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("chains", "sequences"))
    sharding = BeamSampler(model, mesh=grid, chain_axis="chains").algorithm.sharding
    assert (sharding.axes, sharding.chain_axis, sharding.num_chain_shards) == (("sequences",), "chains", 1)
    with pytest.raises(ValueError, match="must not be one of the `sequence_axes`"):
        WeakLimitGibbs(model, mesh=grid, sequence_axes=("chains", "sequences"), chain_axis="chains")
    assert CollapsedSVI(model, mesh=mesh).sharding.num_shards == len(jax.devices())
    assert CollapsedSVI(model, mesh=None).sharding.mesh is None
    with pytest.raises(ValueError, match="`mesh` must be a jax.sharding.Mesh"):
        CollapsedSVI(model, mesh="all")
    with pytest.raises(ValueError, match="`sequence_axes` needs an explicit `mesh`"):
        CollapsedSVI(model, sequence_axes="sequences")
    with pytest.raises(TypeError, match="shard"):  # the alias of mesh= is gone (unreleased 0.1.0)
        CollapsedSVI(model, shard=False)
