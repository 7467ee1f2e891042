"""spec.rest on the local backend against the host's real Slurm 22.05: slurmrestd (Debian's) with JSON Web Tokens.

slurmctld signs and checks tokens with the key the backend generated (secrets/, 0600, kept); slurm_token (run the
way Ansible runs it) gets a user's token through `scontrol token`; with it a job is submitted over REST, runs as that
user and its state is read back over REST; a re-run keeps the key and slurmrestd. No token, a forged token and an expired token are refused and nothing
runs; a lifespan above spec.rest.maxTokenLifespan is refused before any token is made.
"""
import json
import os
import pwd
import stat
import time
import urllib.error
import urllib.request

import ansible_run
from local_helpers import wait_job
from requires import REST, skip_without

from ansible_collections.soperator.slurm.plugins.module_utils.local.layout import Layout

API = "/slurm/v0.0.38"       # 22.05's newest OpenAPI plugin (`slurmrestd -s list`: openapi/v0.0.38)
USER = "nobody"              # not SlurmUser: the token's user is who the job runs as
MAX_LIFESPAN = 600
SPEC = """
apiVersion: slurm.soperator.dev/v1alpha1
kind: SlurmCluster
metadata: {name: rest, namespace: slurm}
spec:
  jail: {volume: {size: 1Gi}}
  rest: {enabled: true, maxTokenLifespan: %d}
---
apiVersion: slurm.soperator.dev/v1alpha1
kind: NodeSet
metadata: {name: cpu, namespace: slurm}
spec:
  clusterName: rest
  replicas: 1
  resources: {cpu: "1", memory: 1Gi}
""" % MAX_LIFESPAN


def call(cluster, path, token=None, user=USER, body=None):
    """(HTTP status, parsed JSON or text) of a request to the cluster's slurmrestd."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers.update({"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token})
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(cluster.rest_url() + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def token_of(cluster, check=False, expect_failed=False, **args):
    env = ansible_run.ansible_env(SLURM_CONF=cluster.env()["SLURM_CONF"])
    return ansible_run.module("slurm_token", dict(dict(user=USER), **args), check=check, expect_failed=expect_failed,
                              env=env, timeout=300)


def submit(cluster, token, name):
    return call(cluster, API + "/job/submit", token, body={
        "script": "#!/bin/sh\nid -un\n",
        "job": {"name": name, "current_working_directory": "/tmp", "environment": {"PATH": "/usr/bin:/bin"},
                "standard_output": "/dev/null"}})


def job_ids(cluster):
    return set(cluster.run(["squeue", "-h", "-t", "all", "-o", "%i"], timeout=60).stdout.split())


def test_a_token_submits_a_job_over_rest_and_bad_tokens_run_nothing(local_cluster):
    skip_without(REST)
    cluster = local_cluster(SPEC, start=False)
    planned = cluster.plan_present(cluster.model, cluster.status())
    assert "would generate JWT key" in planned and "would start slurmrestd" in planned, planned
    cluster.ensure_started()
    lay = Layout(cluster.state_dir)
    info = os.stat(lay.jwt_key)
    assert stat.S_IMODE(info.st_mode) == 0o600 and info.st_uid == os.getuid() and info.st_size == 32
    with open(lay.jwt_key, "rb") as f:
        key = f.read()
    with open(lay.slurm_conf) as f:
        conf = f.read()
    assert "AuthAltTypes=auth/jwt\n" in conf
    assert "AuthAltParameters=jwt_key=%s,max_token_lifespan=%d\n" % (lay.jwt_key, MAX_LIFESPAN) in conf
    rest = cluster.status()["processes"]["slurmrestd"]
    assert rest["running"]
    # slurmrestd dropped to an unprivileged user (it refuses root and SlurmUser)
    with open("/proc/%d/status" % rest["pid"]) as f:
        uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
    assert set(uids) == {str(pwd.getpwnam("nobody").pw_uid)}, uids

    # check mode reads the cluster's bound and makes no token; a longer lifespan is refused before one is made
    checked = token_of(cluster, lifespan=60, check=True)
    assert checked["token"] is None and checked["max_lifespan"] == MAX_LIFESPAN, checked
    assert checked["queries"] == ["scontrol show config"], checked
    too_long = token_of(cluster, lifespan=MAX_LIFESPAN + 1, expect_failed=True)
    assert "max_token_lifespan %d" % MAX_LIFESPAN in too_long["msg"], too_long
    got = token_of(cluster, lifespan=300)
    token = got["token"]
    assert got["max_lifespan"] == MAX_LIFESPAN and got["queries"] == [
        "scontrol show config", "scontrol token username=%s lifespan=300" % USER], got

    status, diag = call(cluster, API + "/diag", token)
    assert status == 200 and "statistics" in diag, (status, diag)

    before = job_ids(cluster)
    head, payload, signature = token.split(".")
    forged = ".".join([head, payload, signature[:-4] + ("AAAA" if signature[-4:] != "AAAA" else "BBBB")])
    expired = token_of(cluster, lifespan=1)["token"]
    time.sleep(3)
    refused = {"none": submit(cluster, None, "none"), "forged": submit(cluster, forged, "forged"),
               "expired": submit(cluster, expired, "expired")}
    # no token: slurmrestd refuses (401); a forged or expired one: slurmctld refuses it and closes the connection,
    # which slurmrestd of 22.05 answers with 500 and the error (later releases: 401)
    assert refused["none"][0] == 401, refused["none"]
    for what in ("forged", "expired"):
        status, body = refused[what]
        assert status in (401, 500) and body["errors"], (what, status, body)
    with open(lay.log_file("slurmctld")) as f:
        ctld_log = f.read()
    assert "auth_p_verify: jwt_decode failure" in ctld_log and "auth_p_verify: token expired" in ctld_log
    assert job_ids(cluster) == before, "a refused request ran a job"

    status, answer = submit(cluster, token, "rest-job")
    assert status == 200 and not answer.get("errors"), (status, answer)
    job = str(answer["job_id"])
    assert wait_job(cluster, job) == "COMPLETED"
    status, jobs = call(cluster, API + "/job/%s" % job, token)
    assert status == 200, (status, jobs)
    record = jobs["jobs"][0]
    assert record["job_state"] == "COMPLETED" and record["user_name"] == USER and record["name"] == "rest-job", \
        record

    # a re-run changes nothing: the key is kept, slurmrestd not restarted
    assert cluster.plan_present(cluster.model, cluster.status()) == []
    assert cluster.ensure_started()["changed"] is False
    assert cluster.status()["processes"]["slurmrestd"]["pid"] == rest["pid"]
    with open(lay.jwt_key, "rb") as f:
        assert f.read() == key

    # the key never leaves secrets/: not in the configs, the logs or the module's output
    for folder in (lay.etc, lay.log):
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                assert key not in f.read(), name
    assert key.hex() not in json.dumps(got) and key not in json.dumps(got).encode()
