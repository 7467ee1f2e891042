"""The spec texts that several tests and benches share, one <name>.yml each in this folder (tests/conftest.py puts
tests/ on sys.path: `from specs import spec_text`; a bench adds tests/ itself). A test that needs its own variant keeps
it inline. bad/ holds the hostile corpus: one defect a file, named *.spec (hostile YAML is no spec to load as is).

- minimal.yml: the smallest valid cluster, one NodeSet; the SlurmCluster's `spec:` is its document's last block, so a
  test may append fields to it as text.
- loopback-nodes.yml: room for `${nodes}` workers of a local cluster (tiny ones: a thousand fit one machine),
  `${replicas}` of them running, no login node; `${slurm_config}` its slurmConfig (a YAML flow mapping).
- health-faults.yml: `${workers}` workers whose passive health check (every `${interval}` s) fails on a node while
  the file `${faults}/fault-<node>` exists; the cluster's healthChecks is the last block of its spec.
Both take the cluster's name as `${cluster}`.
"""
import os
import re
import string

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "bad")


def spec_text(name, **values):
    """tests/specs/<name>.yml with each `${key}` replaced by values[key]; any other `$` word (a shell variable in a
    check's command) stays. A placeholder without a value is an error, not a spec that fails later."""
    with open(os.path.join(HERE, name + ".yml")) as f:
        text = string.Template(f.read()).safe_substitute(values)
    missing = sorted(set(re.findall(r"\$\{(\w+)\}", text)))
    if missing:
        raise KeyError("tests/specs/%s.yml needs a value for %s" % (name, ", ".join(missing)))
    return text


def cluster_and_rest(name, **values):
    """(the SlurmCluster document's text, the rest from its `---` on) of spec_text(name): a test writes fields into the
    cluster's spec (its document's last block) between the two."""
    cluster, separator, rest = spec_text(name, **values).partition("---\n")
    return cluster, separator + rest


API = "slurm.soperator.dev/v1alpha1"


def documents(*node_sets, **cluster_spec):
    """A SlurmCluster `c` (namespace slurm, a 1Ti jail, plus `cluster_spec`'s fields) and one NodeSet per
    (name, extra spec fields) of `node_sets` (2 CPUs, 1Gi each): for tests that vary a few fields in Python."""
    cluster = {"apiVersion": API, "kind": "SlurmCluster", "metadata": {"name": "c", "namespace": "slurm"},
               "spec": dict({"jail": {"volume": {"size": "1Ti"}}}, **cluster_spec)}
    return [cluster] + [{"apiVersion": API, "kind": "NodeSet", "metadata": {"name": name, "namespace": "slurm"},
                         "spec": dict({"clusterName": "c", "resources": {"cpu": "2", "memory": "1Gi"}}, **extra)}
                        for name, extra in node_sets]
