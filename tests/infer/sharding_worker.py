"""Worker of tests/infer/test_sharding.py: runs a kernel on 64 short sequences, sharded or not, and
saves the draws.  Run as a script in a fresh process (``XLA_FLAGS`` and ``jax.distributed`` must be
set up before JAX starts):

    python sharding_worker.py OUT.npz --kernel weak_limit --devices 4 --runs unsharded,mesh,mesh3
    python sharding_worker.py OUT.npz --runs mesh --process-id 0 --num-processes 2 --port 12345

``--devices D`` simulates ``D`` CPU devices; each run of ``--runs`` samples the model with the
same key, unsharded or with ``mesh=sequence_mesh(first D devices)`` (``mesh``: every device of
every process; ``chainsCxD``: a ``(C, D)`` mesh ``("chains", "sequences")`` with
``chain_axis="chains"``), one chain or, with a suffix ``@C``, ``C`` vectorized chains, and the
draws are saved as ``{run}/{site}``; ``--num-processes`` starts ``jax.distributed`` on a loopback
coordinator with gloo CPU collectives.  ``--check-svi`` also fits CollapsedSVI on the same data
unsharded and on every device (minibatches of 10 and 64 sequences) and saves the parameters and
losses as ``svi/{run}/...``.
"""

import argparse
import os
import sys
import time

NUM_SEQUENCES, NUM_STEPS = 64, 12


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kernel", default="weak_limit", choices=["weak_limit", "beam", "pgas"])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--runs", default="unsharded", help="comma-separated: unsharded, mesh (all devices), meshD")
    parser.add_argument("--num-sequences", type=int, default=NUM_SEQUENCES)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--check-svi", action="store_true",
                        help="also save CollapsedSVI fits unsharded, on every device, and with the default mesh")
    parser.add_argument("--check-padding", action="store_true",
                        help="also save map_sequences of a row-wise function of 5 rows on 1..D devices")
    args = parser.parse_args(argv)

    # the device count added to the flags the worker was given (the tests' compile settings, conftest)
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""),
                                        f"--xla_force_host_platform_device_count={args.devices}"]).strip()
    import jax

    jax.config.update("jax_enable_x64", True)
    if args.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=args.num_processes,
                                   process_id=args.process_id, initialization_timeout=120)

    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    import numpyro_hdphmm as nh
    from numpyro_hdphmm.infer import BeamSampler, PGAS, WeakLimitGibbs

    def model(y, lengths):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
        kappa = numpyro.sample("kappa", dist.Gamma(2.0, 1.0))
        emission = nh.emissions.Categorical(3, 1.0)
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=4)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    rng = np.random.default_rng(0)
    n = args.num_sequences
    labels = np.repeat(rng.integers(0, 3, (n, NUM_STEPS // 4)), 4, axis=1)
    noise = rng.integers(0, 3, labels.shape)
    y = np.where(rng.random(labels.shape) < 0.8, labels, noise)
    lengths = rng.integers(NUM_STEPS // 2, NUM_STEPS + 1, n).astype(np.int32)

    results = {"num_devices": len(jax.devices())}
    if args.check_padding:
        from numpyro_hdphmm.infer import sequence_mesh
        from numpyro_hdphmm.infer.plumbing.sharding import SequenceSharding, map_sequences

        rows = (np.arange(5.0), np.arange(10).reshape(5, 2))
        row_fn = lambda r, shared: (r[0] * shared + r[1].sum(-1), r[1][:, ::-1])
        for count in range(1, len(jax.devices()) + 1):
            sharding = SequenceSharding(sequence_mesh(jax.devices()[:count]), ("sequences",))
            out = jax.jit(lambda r, c: map_sequences(row_fn, r, c, sharding))(rows, 3.0)
            results[f"padding{count}/a"], results[f"padding{count}/b"] = (np.asarray(o) for o in out)
    if args.check_svi:
        cpu = time.process_time()
        results.update(fit_svi(y, lengths))
        results["svi/cpu_seconds"] = time.process_time() - cpu
    for run in filter(None, args.runs.split(",")):
        kwargs = {}
        name, _, chains = run.partition("@")
        if name.startswith("chains"):  # "chainsCxD": chains over C devices x sequences over D devices
            c, d = (int(v) for v in name[6:].split("x"))
            mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:c * d]).reshape(c, d), ("chains", "sequences"))
            kwargs = {"mesh": mesh, "chain_axis": "chains"}
        elif name != "unsharded":  # "meshD": the first D devices (every device: "mesh")
            from numpyro_hdphmm.infer import sequence_mesh

            count = int(name[4:]) if name[4:] else len(jax.devices())
            kwargs = {"mesh": sequence_mesh(jax.devices()[:count])}
        if args.kernel != "pgas":  # the exact auxiliary-variable updates the tests were written for
            # (under the collapsed default this small data set often sits at one state after 4 sweeps)
            kwargs["hyperparameters"] = "auxiliary"
        kernel = {"weak_limit": WeakLimitGibbs, "beam": BeamSampler, "pgas": PGAS}[args.kernel](model, **kwargs)
        mcmc = MCMC(kernel, num_warmup=1, num_samples=args.samples, progress_bar=False, num_chains=int(chains or 1),
                    chain_method="vectorized")
        start, cpu = time.perf_counter(), time.process_time()
        mcmc.run(jax.random.key(3), y, lengths)
        samples = mcmc.get_samples()
        if args.num_processes > 1:  # global arrays: the per-sequence sites stay sharded over the processes
            from jax.experimental import multihost_utils

            samples = multihost_utils.process_allgather(samples, tiled=True)
        results.update({f"{run}/{k}": np.asarray(v) for k, v in samples.items()})
        results[f"{run}/seconds"] = time.perf_counter() - start
        results[f"{run}/cpu_seconds"] = time.process_time() - cpu
        if "chain_axis" in kwargs:  # how the last state's states (C, N, T) are laid out over the mesh
            results[f"{run}/states_spec"] = str(mcmc.last_state.z["y_states"].sharding.spec)
    if args.process_id == 0:
        np.savez(args.out, **results)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


def fit_svi(y, lengths):
    """CollapsedSVI (SCVI-HDP, Gamma-prior alpha and gamma) on the worker's data with the same key,
    unsharded (``mesh=None``) and on every device (``mesh=sequence_mesh()``): ``run`` (4 updates,
    minibatches of 10 sequences, one length stratum: not a multiple of 4) and ``update`` on all 64
    sequences; ``auto/num_shards``: the shards of the default ``mesh="auto"``."""
    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist

    import numpyro_hdphmm as nh
    from numpyro_hdphmm.infer import CollapsedSVI, sequence_mesh

    def svi_model(y, lengths):
        gamma = numpyro.sample("gamma", dist.Gamma(2.0, 1.0))
        alpha = numpyro.sample("alpha", dist.Gamma(3.0, 1.0))
        hmm = nh.StickyHDPHMM(gamma, alpha, 2.0, nh.emissions.Categorical(3, 1.0), max_states=4)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    out = {"svi/auto/num_shards": CollapsedSVI(svi_model).sharding.num_shards}
    for run, mesh in (("unsharded", None), ("mesh", sequence_mesh())):
        # merge=False: the merge move decides on argmax labels and a threshold, which a sum in another
        # order can flip; the sharded update itself is what is compared
        svi = CollapsedSVI(svi_model, batch_size=10, hdp_batch_size=20, mesh=mesh, merge=False)
        fit = svi.run(jax.random.key(5), 4, y, lengths, progress_bar=False)
        state, loss = svi.update(fit.state, y, lengths)
        params = {**{k: v for k, v in fit.params.items() if k != "emission_stats"}, **fit.params["emission_stats"]}
        params.update({f"update/{jax.tree_util.keystr(k)}": v for k, v in jax.tree_util.tree_leaves_with_path(svi.get_params(state))})
        out.update({f"svi/{run}/{k}": np.asarray(v) for k, v in params.items()})
        out[f"svi/{run}/losses"] = np.asarray(fit.losses)
        out[f"svi/{run}/update_loss"] = np.asarray(loss)
        out[f"svi/{run}/num_shards"] = svi.sharding.num_shards
    return out


if __name__ == "__main__":
    sys.exit(main())
