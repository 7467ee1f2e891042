"""spec.rest's Kubernetes objects (render/rest_kube.py): the JWT key Secret (generated once, kept), its mount in the
slurmctld and slurmdbd pods only, and slurmrestd's ServiceAccount, Service and Deployment (non-root, no key, no
munge, no API token)."""
import base64

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.render import secrets as s
from ansible_collections.soperator.slurm.plugins.module_utils.render.kube_objects import render_manifests
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents


def model_of(rest, accounting=True):
    return build_model(documents(("cpu", {}), rest=rest, accounting={"enabled": accounting}))


def render(model, existing=None):
    material, generated = s.ensure_secret_material(model, existing or {})
    objects = render_manifests(model, render_slurm_configs(model), material)
    return dict(((o["kind"], o["metadata"]["name"]), o) for o in objects), material, generated


def containers(obj):
    return dict((co["name"], co) for co in obj["spec"]["template"]["spec"]["containers"])


def volumes(obj):
    return dict((v["name"], v) for v in obj["spec"]["template"]["spec"].get("volumes", []))


def test_nothing_of_rest_while_it_is_off():
    objects, material, _generated = render(model_of({"enabled": False}))
    assert "c-jwt-key" not in material
    assert not [k for k in objects if k[1] == "c-rest"]
    for key in (("StatefulSet", "c-controller"), ("StatefulSet", "c-accounting")):
        assert "jwt-key" not in volumes(objects[key])


def test_the_key_secret_is_generated_once_and_kept():
    model = model_of({"enabled": True})
    objects, material, generated = render(model)
    key = material["c-jwt-key"][s.JWT_KEY_FILE]
    assert len(key) == 32 and "c-jwt-key" in generated
    secret = objects[("Secret", "c-jwt-key")]
    assert base64.b64decode(secret["data"][s.JWT_KEY_FILE]) == key
    assert secret["metadata"]["labels"][c.LABEL_COMPONENT] == "rest"
    again, material2, generated2 = render(model, existing={"c-jwt-key": {s.JWT_KEY_FILE: key}})
    assert material2["c-jwt-key"][s.JWT_KEY_FILE] == key and "c-jwt-key" not in generated2
    # turned off, the kept key is still rendered (not pruned): tokens handed out before work when it is back on
    off, material3, _g = render(model_of({"enabled": False}), existing={"c-jwt-key": {s.JWT_KEY_FILE: key}})
    assert material3["c-jwt-key"][s.JWT_KEY_FILE] == key and ("Secret", "c-jwt-key") in off


def test_slurmctld_and_slurmdbd_get_the_key_and_nothing_else_does():
    objects, _material, _generated = render(model_of({"enabled": True}))
    for sts, name in ((("StatefulSet", "c-controller"), "slurmctld"), (("StatefulSet", "c-accounting"), "slurmdbd")):
        volume = volumes(objects[sts])["jwt-key"]
        assert volume["secret"] == {"secretName": "c-jwt-key", "defaultMode": 0o400,
                                    "items": [{"key": s.JWT_KEY_FILE, "path": s.JWT_KEY_FILE}]}
        container = containers(objects[sts])[name]
        assert {"name": "jwt-key", "mountPath": "/etc/slurm-jwt-secret", "readOnly": True} in container["volumeMounts"]
        assert {"name": "JWT_KEY_SOURCE", "value": "/etc/slurm-jwt-secret/" + s.JWT_KEY_FILE} in container["env"]
    holders = sorted(k for k, o in objects.items() if o["kind"] in ("StatefulSet", "Deployment", "Job", "CronJob")
                     and "c-jwt-key" in str(o))
    assert holders == [("StatefulSet", "c-accounting"), ("StatefulSet", "c-controller")], holders
    conf = render_slurm_configs(model_of({"enabled": True}))["slurm.conf"]
    assert "AuthAltParameters=jwt_key=%s,max_token_lifespan=3600" % c.JWT_KEY in conf


def test_slurmrestd_deployment_and_service():
    objects, _material, _generated = render(model_of({"enabled": True, "replicas": 3, "port": 8080}))
    service = objects[("Service", "c-rest")]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    deployment = objects[("Deployment", "c-rest")]
    assert deployment["spec"]["replicas"] == 3
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "c-rest" and pod["automountServiceAccountToken"] is False
    assert ("ServiceAccount", "c-rest") in objects
    rest = containers(deployment)["slurmrestd"]
    assert rest["command"] == ["/usr/sbin/slurmrestd"]
    assert rest["args"] == ["-a", "rest_auth/jwt", "-s", "openapi/slurmctld,openapi/slurmdbd", "0.0.0.0:8080"]
    # unshare(2) is refused under containerd's RuntimeDefault seccomp profile: slurmrestd skips its own unshares
    assert rest["env"] == [{"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_sysv,disable_unshare_files"},
                           {"name": "SLURM_JWT", "value": "daemon"}]
    assert rest["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = rest["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 65534 and security["runAsGroup"] == 65534
    assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
    assert rest["volumeMounts"] == [{"name": "slurm-configs", "mountPath": c.SLURM_CONF_DIR, "readOnly": True}]
    assert set(volumes(deployment)) == {"slurm-configs"}        # no key, no munge key
    assert rest["readinessProbe"]["tcpSocket"]["port"] == "http"


def test_slurmrestd_without_accounting_serves_slurmctld_only():
    objects, _material, _generated = render(model_of({"enabled": True}, accounting=False))
    assert containers(objects[("Deployment", "c-rest")])["slurmrestd"]["args"][3] == "openapi/slurmctld"
    assert "jwt-key" in volumes(objects[("StatefulSet", "c-controller")])


def test_the_remediation_pass_may_write_slurmrestds_deployment_only_with_rest_on():
    """The remediation CronJob reconciles the cluster: with spec.rest it applies the rest Deployment (a real node's
    pass failed with 403 before its Role allowed that); without, it only lists Deployments."""
    def deployment_verbs(model):
        objects, _material, _generated = render(model)
        rules = [r for r in objects[("Role", "c-remediation")]["rules"] if "deployments" in r["resources"]]
        return rules[0]["verbs"]
    assert deployment_verbs(model_of({"enabled": True})) == ["list", "create", "patch", "delete"]
    assert deployment_verbs(model_of({"enabled": False})) == ["list"]
