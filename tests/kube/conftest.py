"""Fixtures for tests against the emulated Kubernetes API server (tests/kube/emulator).

`emulator`: a started KubeEmulator (controllers simulated), stopped after the test; the test fails if the emulator
hit an internal error (a bug of the emulator, reported to the client as a 500). `kubeconfig`: a kubeconfig file
for it in tmp_path. `kube`: a small client over the real `kubernetes` package (see KubeClient).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from emulator import KubeEmulator  # noqa: E402
from emu_helpers import KubeClient  # noqa: E402


@pytest.fixture
def emulator():
    emu = KubeEmulator(simulate_controllers=True)
    emu.start()
    try:
        yield emu
    finally:
        emu.stop()
    assert emu.internal_errors == []


@pytest.fixture
def kubeconfig(emulator, tmp_path):
    return emulator.write_kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def kube(kubeconfig):
    client = KubeClient(kubeconfig)
    try:
        yield client
    finally:
        client.close()
