"""Worker of tests/infer/test_sharding.py: runs a kernel on 64 short sequences, sharded or not, and
saves the draws.  Run as a script in a fresh process (``XLA_FLAGS`` and ``jax.distributed`` must be
set up before JAX starts):

    python sharding_worker.py OUT.npz --kernel weak_limit --devices 4 --shard
    python sharding_worker.py OUT.npz --shard --process-id 0 --num-processes 2 --port 12345

``--devices D`` simulates ``D`` CPU devices; ``--shard`` passes ``mesh=sequence_mesh()`` (every
device of every process); ``--num-processes`` starts ``jax.distributed`` on a loopback
coordinator with gloo CPU collectives.
"""

import argparse
import os
import sys

NUM_SEQUENCES, NUM_STEPS = 64, 12


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kernel", default="weak_limit", choices=["weak_limit", "beam", "pgas"])
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--shard", action="store_true")
    parser.add_argument("--num-sequences", type=int, default=NUM_SEQUENCES)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)

    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
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
        emission = nh.emissions.GaussianNIW(np.zeros(1), 0.1, 3.0, np.eye(1))
        hmm = nh.StickyHDPHMM(gamma, alpha, kappa, emission, max_states=5)
        nh.sample("y", hmm, obs=y, lengths=lengths)

    rng = np.random.default_rng(0)
    n = args.num_sequences
    means = np.array([-3.0, 0.0, 3.0])
    labels = np.repeat(rng.integers(0, 3, (n, NUM_STEPS // 4)), 4, axis=1)
    y = (means[labels] + rng.normal(size=labels.shape))[..., None]
    lengths = rng.integers(NUM_STEPS // 2, NUM_STEPS + 1, n).astype(np.int32)

    kwargs = {}
    if args.shard:
        from numpyro_hdphmm.infer import sequence_mesh

        kwargs = {"mesh": sequence_mesh()}
    kernel = {"weak_limit": WeakLimitGibbs, "beam": BeamSampler, "pgas": PGAS}[args.kernel](model, **kwargs)
    mcmc = MCMC(kernel, num_warmup=2, num_samples=args.samples, progress_bar=False)
    mcmc.run(jax.random.key(3), y, lengths)
    draws = {k: np.asarray(v) for k, v in mcmc.get_samples().items()}
    if args.process_id == 0:
        np.savez(args.out, num_devices=len(jax.devices()), **draws)
    if args.num_processes > 1:
        jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
