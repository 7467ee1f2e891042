"""slurm_cluster with spec.identity through `ansible localhost -m` (target=local, check mode: nothing starts): the
local Secrets come from identity_secrets (no_log), a missing one or an unreachable directory is refused with its field
path, and the bind password shows nowhere in Ansible's output (its invocation is masked: no_log)."""
import json
import os

import pytest
import yaml

from ansible_run import COLLECTION, HOST, run

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PASSWORD = "pw-that-must-not-leak"


def _docs(uri):
    with open(os.path.join(ROOT, "examples", "small-cpu.yml")) as f:
        docs = list(yaml.safe_load_all(f))
    docs[0]["spec"]["identity"] = {"ldap": {"uri": uri, "searchBase": "dc=x", "bindDN": "cn=sssd,dc=x",
                                            "bindPasswordSecret": {"name": "ldap-bind"}}}
    return docs


@pytest.mark.parametrize("secrets, fragment", [
    ({"other": {"password": PASSWORD}},
     "spec.identity.ldap.bindPasswordSecret: Secret 'ldap-bind' with key 'password' was not given"),
    ({"ldap-bind": {"password": PASSWORD}}, "spec.identity.ldap.uri: cannot reach ldap://127.0.0.1:1 from this host"),
])
def test_local_identity_refusals_name_the_field_and_hide_the_password(tmp_path, secrets, fragment):
    args = dict(state="present", target="local", definition=_docs("ldap://127.0.0.1:1"),
                state_dir=str(tmp_path / "state"), identity_secrets=secrets)
    done = run(["ansible", HOST, "-m", "%s.slurm_cluster" % COLLECTION, "-a", json.dumps(args), "--check"])
    result = done.result()
    assert done.rc == 2 and result.get("failed"), done.output()
    assert fragment in result["msg"]
    assert PASSWORD not in done.stdout + done.stderr
    assert not os.path.exists(str(tmp_path / "state"))
