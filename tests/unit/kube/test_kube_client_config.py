"""kube/client.api_client_from_params: the one place the backend's client and the Slurm exec transport get their
kubernetes ApiClient (kubernetes.core's public get_api_client), and how a bad configuration is reported by each."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import args as slurm_args
from ansible_collections.soperator.slurm.plugins.module_utils.kube.client import KubeError, api_client_from_params
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmCommandError

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "http://127.0.0.1:1"}
users:
- name: u
  user: {token: secret-token}
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
"""


def test_missing_kubeconfig_is_a_kube_error(tmp_path):
    with pytest.raises(KubeError, match="cannot configure the Kubernetes client"):
        api_client_from_params({"kubeconfig": str(tmp_path / "missing")})


def test_exec_transport_reports_the_same_failure_as_a_slurm_error(tmp_path):
    factory = slurm_args._core_v1_factory({"kubeconfig": str(tmp_path / "missing")})
    with pytest.raises(SlurmCommandError, match="cannot configure the Kubernetes client"):
        factory()


def test_unreachable_api_is_a_kube_error_not_a_traceback(tmp_path):
    # kubernetes.core's client discovers the API groups when it is made: an API server that does not answer fails
    # here, as a KubeError the modules report
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    with pytest.raises(KubeError, match="cannot configure the Kubernetes client"):
        api_client_from_params({"kubeconfig": str(kubeconfig)})
