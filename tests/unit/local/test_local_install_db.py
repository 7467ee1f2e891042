"""local/accounting.py's mariadb-install-db: tried again once from an empty folder (its bootstrap server crashed once
in a loaded CI run); a failure that repeats names both attempts. A stand-in install-db script on PATH plays the
crash: what is under test is our retry, not MariaDB."""
import os

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.local.accounting import Accounting
from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout, LocalClusterError

# Fails (leaving a half-made file) while the count file says so, then makes DATADIR/mysql.
STAND_IN = """#!/bin/sh
count=$(cat "%(count)s" 2>/dev/null || echo 0)
echo $((count + 1)) > "%(count)s"
datadir=$(printf '%%s\\n' "$@" | sed -n 's/^--datadir=//p')
if [ "$count" -lt "%(failures)d" ]; then
    touch "$datadir/half-made"
    echo "Segmentation fault"
    exit 1
fi
mkdir "$datadir/mysql"
"""


def _accounting(tmp_path, monkeypatch, failures):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "mariadb-install-db"
    script.write_text(STAND_IN % {"count": tmp_path / "count", "failures": failures})
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s%s%s" % (bindir, os.pathsep, os.environ["PATH"]))
    state = tmp_path / "state"
    state.mkdir()
    return Accounting(Layout(str(state)), "root", 10, daemons=None, slurm=None)


def test_a_crashed_bootstrap_is_tried_once_more_from_an_empty_folder(tmp_path, monkeypatch):
    accounting = _accounting(tmp_path, monkeypatch, failures=1)
    accounting._install_db()
    assert sorted(os.listdir(accounting.layout.db)) == ["mysql"]          # the first attempt's leftovers were removed
    assert (tmp_path / "count").read_text().strip() == "2"


def test_a_failure_that_repeats_names_both_attempts(tmp_path, monkeypatch):
    accounting = _accounting(tmp_path, monkeypatch, failures=2)
    with pytest.raises(LocalClusterError, match="(?s)attempt 1 \\(exit 1\\): Segmentation fault.*attempt 2"):
        accounting._install_db()
    assert (tmp_path / "count").read_text().strip() == "2"
