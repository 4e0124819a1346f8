"""The security posture of ``docs/security.md``: the data loaders read only the shipped files,
with ``np.load(..., allow_pickle=False)``; loading data and building and tracing a model open no
network connection and write no file."""

import builtins
import socket

import numpy as np
from numpyro import handlers

import numpyro_hdphmm as nh
from numpyro_hdphmm import datasets


def test_mocap_loader_refuses_pickles(monkeypatch):
    calls = []
    real = np.load

    def recording_load(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "load", recording_load)
    datasets.load_mocap6()
    assert calls and all(kw.get("allow_pickle") is False for kw in calls)


def test_no_network_and_no_file_written(monkeypatch, tmp_path):
    def no_network(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    real_open = builtins.open
    opened = []

    def read_only_open(file, mode="r", *args, **kwargs):
        opened.append((str(file), mode))
        if any(c in mode for c in "wax+"):
            raise AssertionError(f"file written: {file} ({mode})")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", read_only_open)
    monkeypatch.chdir(tmp_path)
    mocap = datasets.load_mocap6()
    text = datasets.load_alice()
    data = datasets.fox_experiment_a(num_steps=50, seed=0)
    emission = nh.emissions.GaussianNIW.weakly_informative(data.observations)

    def model(y):
        nh.sample("y", nh.StickyHDPHMM(1.0, 1.0, 1.0, emission, max_states=4), obs=y)

    handlers.trace(handlers.seed(model, 0)).get_trace(data.observations)
    assert mocap.observations.shape[0] == 6 and len(text.tokens) > 0
    assert list(tmp_path.iterdir()) == []
    # every file opened is one of the package's own
    assert all("numpyro_hdphmm" in f for f, _ in opened if not f.startswith("/proc")), opened
