"""The loki.process regex of examples/logging/soperator-logs.alloy against the lines it is written for: a real
munged in the foreground (as images/entrypoint.sh runs it beside every Slurm daemon) and the entrypoint's own
message. A line it names gets that daemon's label; any other line keeps the container's name."""
import os
import signal
import subprocess

from logging_example import daemon_regex
from repo_root import ROOT
from requires import skip_without


def test_munged_lines_in_the_foreground_are_named_munged(tmp_path):
    skip_without(("munged",))
    from ansible_collections.soperator.slurm.plugins.module_utils.local.processes import find_binary
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    proc = subprocess.Popen(
        [find_binary("munged"), "-F", "--key-file=%s" % key, "--socket=%s" % (tmp_path / "munge.socket"),
         "--pid-file=%s" % (tmp_path / "munged.pid"), "--seed-file=%s" % (tmp_path / "munged.seed"),
         "--log-file=%s" % (tmp_path / "munged.log")],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        first = proc.stderr.readline()     # munged writes its start line at once; a failed start closes stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert first.startswith("munged: "), first
    match = daemon_regex().match(first)
    assert match and match.group("daemon") == "munged", first


def test_the_entrypoints_own_lines_are_named_and_a_daemons_are_not():
    done = subprocess.run(["bash", os.path.join(ROOT, "images", "entrypoint.sh")], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 2, done       # no command given
    match = daemon_regex().match(done.stderr)
    assert match and match.group("daemon") == "soperator-entrypoint", done.stderr
    # Slurm's daemons write their own lines without a name (as the controller image's slurmctld -D printed
    # "[2026-11-27T06:32:01.073] error: s_p_parse_file: ..."): the container's name stays the label.
    assert daemon_regex().match("[2026-11-27T06:32:01.073] error: s_p_parse_file: cannot stat file") is None
