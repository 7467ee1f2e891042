"""An emulated Kubernetes 1.32 API server for tests, over real HTTP (see README.md beside this file).

    from emulator import KubeEmulator
    with KubeEmulator() as emu:
        emu.write_kubeconfig(path)     # bearer-token kubeconfig for emu.url
        ...                            # any Kubernetes client; emu.requests / emu.counts() record what it did

Modules: server (HTTP, KubeEmulator), store (the write pipeline), ssa + fieldpath (server-side apply), patch,
schema (typed views of built-in and CRD schemas), defaults, validation, crd (+ cel), selectors, controllers,
quantity, errors.
"""
from .server import KubeEmulator, RequestRecord

__all__ = ["KubeEmulator", "RequestRecord"]
