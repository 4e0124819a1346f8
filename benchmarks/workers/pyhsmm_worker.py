"""Peer worker for pyhsmm, run by :mod:`benchmarks.harness.peers` under the Python of a venv where
pyhsmm is built (a standalone script: it imports nothing from this repository).

JSON-lines protocol on stdin / the original stdout (library prints go to stderr):
  {"cmd": "setup", "data": npz, "L": L, "seed": s, "warmup": 10} -> {"ok": true, ...}
  {"cmd": "run", "n": 20}        -> {"times": [seconds per sweep, ...], "used": #states used}
                                    (with "states": true also "states": the state sequence after the run)
  {"cmd": "chain", "data": npz, "L": L, "seed": s, "sweeps": 300} -> {"states": [...], "seconds": s}
  setup and chain also take {"hsmm": {"gamma": g, "alpha": a, "dur_concentration": c, "dur_rate": r,
  "max_duration": D}}: pyhsmm's WeakLimitHDPHSMM (explicit-duration HDP-HSMM, Johnson & Willsky's
  weak-limit sampler, C++ messages HSMMStatesEigen) with PoissonDuration(alpha_0=c, beta_0=r) (d - 1 ~
  Poisson(lambda), lambda ~ Gamma(c, rate r): numpyro-hdphmm's durations.Poisson(c, r)) and
  add_data(trunc=D) (durations at most D); the NIW prior is the same as for the HMM.
  With "duration": "negbin" (and "r_max": R, "p_concentration1": a, "p_concentration0": b, no
  "max_duration"): WeakLimitHDPHSMMIntNegBin (the phase embedding of integer-r negative-binomial
  durations) with NegativeBinomialIntegerR2Duration (d - 1 ~ NB(r, p), r uniform on 1..R, p ~
  Beta(a, b): numpyro-hdphmm's durations.NegativeBinomial(a, b, r_values=1..R)), untruncated.
  Optional in "hsmm": "niw": {"mu_0": [...], "sigma_0": [[...]], "kappa_0": k, "nu_0": n} (the NIW prior
  itself instead of the data-scaled one) and "init_state_concentration" (else alpha).
  "run" with "loglik": true also returns "loglik": log p(y | parameters), the states and durations
  summed out by pyhsmm's own messages on a fresh copy of the data (the same trunc), untimed.
"""
import os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see README: multithreaded OpenBLAS is ~20x slower here
os.environ.setdefault("OMP_NUM_THREADS", "1")
import json, sys, time
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1); sys.stdout = sys.stderr

import numpy as np
import pyhsmm
from pyhsmm.internals import hmm_messages_interface as _hmi  # fail loudly if the C++ module is missing
del _hmi
from pybasicbayes.distributions import Gaussian


def build(y, L, seed, hsmm=None):
    np.random.seed(seed)
    D = y.shape[1]
    # data-scaled NIW prior, the same as numpyro-hdphmm's GaussianNIW.weakly_informative(y):
    # mu_0 = data mean, kappa_0 = 0.01, nu_0 = D + 2, sigma_0 = data covariance + 1e-6 I
    niw = (hsmm or {}).get("niw")
    if niw is not None:
        prior = dict(mu_0=np.asarray(niw["mu_0"], float), sigma_0=np.asarray(niw["sigma_0"], float),
                     kappa_0=float(niw["kappa_0"]), nu_0=float(niw["nu_0"]))
    else:
        prior = dict(mu_0=y.mean(0), sigma_0=np.cov(y.T, bias=True).reshape(D, D) + 1e-6 * np.eye(D), kappa_0=0.01,
                     nu_0=D + 2.0)
    obs = [Gaussian(**prior) for _ in range(L)]
    init_conc = (hsmm or {}).get("init_state_concentration", (hsmm or {}).get("alpha"))
    if hsmm is not None and hsmm.get("duration") == "negbin":
        from pyhsmm.basic.distributions import NegativeBinomialIntegerR2Duration
        R = int(hsmm["r_max"])
        dur = [NegativeBinomialIntegerR2Duration(alpha_0=hsmm["p_concentration1"], beta_0=hsmm["p_concentration0"],
                                                 r_support=np.arange(1, R + 1), r_probs=np.full(R, 1.0 / R))
               for _ in range(L)]
        m = pyhsmm.models.WeakLimitHDPHSMMIntNegBin(alpha=hsmm["alpha"], gamma=hsmm["gamma"],
                                                    init_state_concentration=init_conc, obs_distns=obs,
                                                    dur_distns=dur)
        m.add_data(y)
        return m
    if hsmm is not None:
        from pyhsmm.basic.distributions import PoissonDuration
        dur = [PoissonDuration(alpha_0=hsmm["dur_concentration"], beta_0=hsmm["dur_rate"]) for _ in range(L)]
        m = pyhsmm.models.WeakLimitHDPHSMM(alpha=hsmm["alpha"], gamma=hsmm["gamma"],
                                           init_state_concentration=init_conc, obs_distns=obs, dur_distns=dur)
        m.add_data(y, trunc=int(hsmm["max_duration"]))
        assert type(m.states_list[0]).__name__ == "HSMMStatesEigen"
        return m
    m = pyhsmm.models.WeakLimitStickyHDPHMM(alpha=1.0, gamma=1.0, kappa=10.0, init_state_concentration=1.0, obs_distns=obs)
    m.add_data(y)
    assert type(m.states_list[0]).__name__ == "HMMStatesEigen"
    return m


model = trunc = None
for line in sys.stdin:
    msg = json.loads(line)
    cmd = msg["cmd"]
    if cmd == "quit":
        break
    if cmd == "setup":
        y = np.load(msg["data"])["y"].astype(np.float64)
        t0 = time.perf_counter()
        model = build(y, msg["L"], msg["seed"], msg.get("hsmm"))
        trunc = (msg.get("hsmm") or {}).get("max_duration")
        for _ in range(msg.get("warmup", 10)):
            model.resample_model()
        out = {"ok": True, "setup_s": time.perf_counter() - t0, "dtype": "float64",
               "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS")}
    elif cmd == "run":
        times = []
        for _ in range(msg["n"]):
            t0 = time.perf_counter()
            model.resample_model()
            times.append(time.perf_counter() - t0)
        out = {"times": times, "used": int(len(np.unique(model.states_list[0].stateseq)))}
        if msg.get("states"):
            out["states"] = model.states_list[0].stateseq.astype(int).tolist()
        if msg.get("loglik"):
            kw = {} if trunc is None else {"trunc": int(trunc)}
            out["loglik"] = float(model.log_likelihood(y, **kw))
    elif cmd == "chain":
        y = np.load(msg["data"])["y"].astype(np.float64)
        m = build(y, msg["L"], msg["seed"], msg.get("hsmm"))
        t0 = time.perf_counter()
        for _ in range(msg["sweeps"]):
            m.resample_model()
        out = {"states": m.states_list[0].stateseq.astype(int).tolist(), "seconds": time.perf_counter() - t0}
    proto.write(json.dumps(out) + "\n")
