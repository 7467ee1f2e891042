"""tools/k8s/node.py's weight for the real node's pods: that of the node's CPUs at the priority of the suite that
started it (.ci/run runs test-node at nice -5), never below what the kubelet sets (1024 a CPU)."""
import pytest
from repo_root import load_script

node = load_script("soperator_k8s_node", "tools", "k8s", "node.py")


@pytest.mark.parametrize("nice, cpus, shares", [(-5, 2, 6250), (-1, 2, 2560), (-5, 4, 12500), (-20, 1, 88818)])
def test_a_raised_priority_weighs_as_many_processes_at_it_as_the_node_has_cpus(nice, cpus, shares):
    assert node.pod_cpu_shares(nice, cpus) == shares


@pytest.mark.parametrize("nice", [0, 5, 19])
def test_at_nice_0_or_lower_priority_the_kubelets_value_stands(nice):
    assert node.pod_cpu_shares(nice, 2) is None


def test_the_kubelets_own_value_is_one_nice_0_process_a_cpu():
    # what the kubelet writes for a 2-CPU node (seen: 2048), and what nice -5 makes of it (kernel: 3121 a process)
    assert round(2 * 1024 * 1.25 ** 0) == 2048 and abs(node.pod_cpu_shares(-5, 2) / 2 - 3121) < 5


def test_it_writes_only_a_higher_value_and_refuses_a_link(tmp_path, monkeypatch):
    shares = tmp_path / "cpu.shares"
    shares.write_text("2048\n")
    monkeypatch.setattr(node, "KUBEPODS_CPU_SHARES", str(shares))
    monkeypatch.setattr(node.os, "nice", lambda inc: -5)
    monkeypatch.setattr(node.os, "cpu_count", lambda: 2)
    assert node.raise_pod_cpu_weight() == 6250 and shares.read_text() == "6250\n"
    assert node.raise_pod_cpu_weight() is None and shares.read_text() == "6250\n"   # already as high
    monkeypatch.setattr(node.os, "nice", lambda inc: 0)
    shares.write_text("2048\n")
    assert node.raise_pod_cpu_weight() is None and shares.read_text() == "2048\n"
    monkeypatch.setattr(node.os, "nice", lambda inc: -5)
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "cpu.shares").write_text("2048\n")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    monkeypatch.setattr(node, "KUBEPODS_CPU_SHARES", str(tmp_path / "via" / "cpu.shares"))
    with pytest.raises(node.NodeError):
        node.raise_pod_cpu_weight()
    assert (tmp_path / "real" / "cpu.shares").read_text() == "2048\n"
    monkeypatch.setattr(node, "KUBEPODS_CPU_SHARES", str(tmp_path / "none" / "cpu.shares"))
    assert node.raise_pod_cpu_weight() is None   # no cgroup v1 cpu controller there: nothing to do
