"""tools/acct_summary.py: the CPU of every ended process by command, from BSD process accounting (acct_v3)."""
import struct

import pytest
from repo_root import load_script


@pytest.fixture(name="acct")
def fixture_acct():
    return load_script("acct_summary", "tools", "acct_summary.py")


def _record(comm, utime, stime, version=3):
    # flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime, utime stime mem io rw minflt majflt swaps
    return struct.pack("<BBHIIIIIIf8H16s", 0, version, 0, 0, 0, 0, 42, 1, 0, 250.0,
                       utime, stime, 0, 0, 0, 0, 0, 0, comm.encode())


def test_comp_t_is_a_mantissa_with_a_base_8_exponent(acct):
    assert acct.comp_t(100) == 100
    assert acct.comp_t((2 << 13) | 5) == 5 * 64
    assert acct.comp_t(0x1FFF) == 8191


def test_cpu_is_summed_by_command_in_seconds(acct, tmp_path):
    path = tmp_path / "acct"
    path.write_bytes(_record("go", 150, 50) + _record("kube-apiserver", (1 << 13) | 1000, 0) + _record("go", 100, 0))
    assert dict(acct.by_command(str(path))) == {"go": [3.0, 2], "kube-apiserver": [80.0, 1]}
    assert [r[2] for r in acct.records(str(path))] == [2.5, 2.5, 2.5]


def test_a_file_of_another_format_is_refused(acct, tmp_path):
    path = tmp_path / "acct"
    path.write_bytes(_record("go", 1, 1, version=2))
    with pytest.raises(ValueError, match="not acct_v3"):
        list(acct.records(str(path)))
