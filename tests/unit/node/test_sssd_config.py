"""node/sssd_config.py (sssd.conf = template + bind password, 0600) and node/authorized_keys.py (the login's key
command with identity). The password never shows in a message."""
import os
import stat
import sys

import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.node import authorized_keys as ak
from ansible_collections.soperator.slurm.plugins.module_utils.node import sssd_config as sc

TEMPLATE = "[sssd]\ndomains = directory\n\n[domain/directory]\nid_provider = ldap\n"


def test_password_appended_to_the_domain_section(tmp_path):
    text = sc.with_bind_password(TEMPLATE, b"s3cr=t #x\n")
    assert text.endswith("id_provider = ldap\nldap_default_authtok = s3cr=t #x\n")
    out = tmp_path / "sssd.conf"
    sc.write_config(str(out), text)
    assert stat.S_IMODE(os.stat(str(out)).st_mode) == 0o600 and out.read_text() == text


@pytest.mark.parametrize("password", [b"a\nb", b" lead", b"trail ", b"", b"\n", b"a\x00b", b"\xff\xfe"])
def test_passwords_sssd_would_not_read_back_are_refused_without_showing_them(password):
    with pytest.raises(sc.SssdConfigError) as e:
        sc.with_bind_password(TEMPLATE, password, "the bind password in /x")
    assert "/x" in str(e.value)
    if password.strip():
        assert password.decode("utf-8", "replace").strip() not in str(e.value)


def test_template_must_end_with_the_domain():
    with pytest.raises(sc.SssdConfigError):
        sc.with_bind_password("[domain/d]\na = b\n[nss]\n", b"pw")
    with pytest.raises(sc.SssdConfigError):
        sc.with_bind_password(TEMPLATE + "ldap_default_authtok = old\n", b"pw")


def test_program_writes_the_file(tmp_path):
    (tmp_path / "t").write_text(TEMPLATE)
    (tmp_path / "p").write_bytes(b"hunter2\n")
    out = tmp_path / "sssd.conf"
    os.symlink(str(tmp_path / "elsewhere"), str(out))            # a link there is replaced, never followed
    assert sc.main(["write", "--template", str(tmp_path / "t"), "--password-file", str(tmp_path / "p"),
                    "--out", str(out)]) == 0
    assert not os.path.islink(str(out)) and not (tmp_path / "elsewhere").exists()
    assert out.read_text().endswith("ldap_default_authtok = hunter2\n")


def test_program_fails_on_a_bad_password_without_printing_it(tmp_path, capsys):
    (tmp_path / "t").write_text(TEMPLATE)
    (tmp_path / "p").write_bytes(b"two\nlines-secret")
    assert sc.main(["write", "--template", str(tmp_path / "t"), "--password-file", str(tmp_path / "p"),
                    "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "lines-secret" not in err and str(tmp_path / "p") in err and not (tmp_path / "o").exists()


def test_key_command_prints_cluster_then_directory_keys(tmp_path):
    (tmp_path / "root").write_bytes(b"ssh-ed25519 AAAA root@x")
    fake = tmp_path / "sss"
    fake.write_text("#!%s\nimport sys\nprint('ssh-ed25519 BBBB ' + sys.argv[1])\n" % sys.executable)
    fake.chmod(0o755)
    assert ak.cluster_keys(str(tmp_path), "root") == b"ssh-ed25519 AAAA root@x"
    assert ak.cluster_keys(str(tmp_path), "../etc/passwd") == b""
    assert ak.directory_keys("alice", str(fake)) == b"ssh-ed25519 BBBB alice\n"
    assert ak.directory_keys("root", str(fake)) == b""            # root: the cluster's keys only
    assert ak.directory_keys("-rf", str(fake)) == b""
    assert ak.directory_keys("alice", str(tmp_path / "missing")) == b""     # no SSSD: no directory key
