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


class KubeClient(object):
    """Raw API calls through kubernetes.client.ApiClient (real HTTP, real client serialisation and errors)."""

    def __init__(self, kubeconfig):
        import kubernetes
        cfg = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.configuration = cfg
        self.api = kubernetes.client.ApiClient(cfg)

    def request(self, method, path, body=None, query=None, content_type=None, timeout=None):
        """-> ApiResponse (status_code, data, headers); raises kubernetes.client.exceptions.ApiException."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        elif body is not None:
            headers["Content-Type"] = "application/json"
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        m, url, h, b, _ = self.api.param_serialize(method, path, query_params=params, header_params=headers,
                                                   body=body, auth_settings=["BearerToken"])
        resp = self.api.call_api(m, url, h, b, _request_timeout=timeout)
        resp.read()
        return self.api.response_deserialize(resp, {"2XX": "object"})

    def call(self, method, path, body=None, query=None, content_type=None, timeout=None):
        return self.request(method, path, body, query, content_type, timeout).data

    def apply(self, path, body, manager="test", force=False, dry_run=False, **query):
        q = dict(query, fieldManager=manager)
        if force:
            q["force"] = "true"
        if dry_run:
            q["dryRun"] = "All"
        return self.call("PATCH", path, body, q, "application/apply-patch+yaml")

    def close(self):
        self.api.close()


@pytest.fixture
def kube(kubeconfig):
    client = KubeClient(kubeconfig)
    try:
        yield client
    finally:
        client.close()
