"""What the real-cluster tests share: the example specs (in a namespace of a test's own), slurm_cluster through
`ansible localhost -m` (tests/ansible_run.py), what a result says, and who the kubeconfig's user is."""
import os
import uuid

import yaml

import ansible_run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "examples", "small-cpu.yml")
GPU = os.path.join(ROOT, "examples", "gpu-accounting.yml")
CR = "slurm.soperator.dev/v1alpha1"
# The claims of examples/small-cpu.yml: the jail and the controller's spool (its StatefulSet's claim template).
SMALL_CLAIMS = ("small-jail", "spool-small-controller-0")


def spec_docs(path, namespace=None):
    """The documents of a spec file; with `namespace`, every one moved there."""
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    if namespace is not None:
        for d in docs:
            d["metadata"]["namespace"] = namespace
    return docs


def new_namespace():
    return "soperator-it-%s" % uuid.uuid4().hex[:8]


def module(module_name, check=False, diff=False, expect_failed=False, **args):
    """soperator.slurm.<module_name> with `args` through `ansible localhost -m`; its result."""
    return ansible_run.module(module_name, args, check=check, diff=diff, expect_failed=expect_failed)


def actions(result):
    return [(o["kind"], o["name"], o["action"]) for o in result.get("objects") or []]


def changed(result):
    return sorted((o["kind"], o["name"], o["action"]) for o in result["objects"] if o["action"] != "unchanged")


def api(kubeconfig):
    """A kubernetes ApiClient of the kubeconfig (close it)."""
    from kubernetes import config
    return config.new_client_from_config(config_file=kubeconfig)


def admin_user(kubeconfig):
    """The user the kubeconfig acts as (its client certificate's subject), as the audit log names it."""
    from kubernetes import client
    with api(kubeconfig) as a:
        review = client.AuthenticationV1Api(a).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        return review.status.user_info.username
