"""spec.rest (spec/rest.py): its schema and defaults, the authentication keys it owns in spec.slurmConfig, and the
AuthAlt lines and slurmrestd command line rendered from it (render/rest.py)."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils import constants as c
from ansible_collections.soperator.slurm.plugins.module_utils.local.configs import local_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.render.rest import openapi_plugins, slurmrestd_argv
from ansible_collections.soperator.slurm.plugins.module_utils.render.slurm_conf import render_slurm_configs
from ansible_collections.soperator.slurm.plugins.module_utils.spec.schema import SpecError
from ansible_collections.soperator.slurm.plugins.module_utils.spec.validate import build_model

from specs import documents


def lines(text, key):
    return [line.split("=", 1)[1] for line in text.splitlines() if line.startswith(key + "=")]


def issues(**cluster):
    with pytest.raises(SpecError) as e:
        build_model(documents(("cpu", {}), **cluster))
    return dict((i.path, i.message) for i in e.value.issues)


def test_off_by_default_and_nothing_rendered():
    model = build_model(documents(("cpu", {}), accounting={"enabled": True}))
    assert model.rest_api is None and model.rest.enabled is False
    configs = render_slurm_configs(model)
    for name in ("slurm.conf", c.SLURMDBD_CONF):
        assert "AuthAlt" not in configs[name]


def test_enabled_with_defaults():
    model = build_model(documents(("cpu", {}), rest={"enabled": True}))
    assert model.rest_api is model.rest
    assert (model.rest.replicas, model.rest.port, model.rest.max_token_lifespan) == (1, 6820, 3600)


def test_slurmctld_and_slurmdbd_take_tokens_signed_with_one_key():
    model = build_model(documents(("cpu", {}), accounting={"enabled": True},
                                  rest={"enabled": True, "maxTokenLifespan": 900}))
    configs = render_slurm_configs(model)
    for name in ("slurm.conf", c.SLURMDBD_CONF):
        assert lines(configs[name], "AuthAltTypes") == ["auth/jwt"], name
        assert lines(configs[name], "AuthAltParameters") == ["jwt_key=%s,max_token_lifespan=900" % c.JWT_KEY], name
        assert lines(configs[name], "AuthType") == ["auth/munge"], name     # munge stays the daemons' own


def test_a_local_cluster_points_at_its_own_key(tmp_path):
    model = build_model(documents(("cpu", {}), rest={"enabled": True}))
    conf = local_slurm_configs(model, str(tmp_path), 20000, user="root", have_pmix=False)["slurm.conf"]
    assert lines(conf, "AuthAltParameters") == ["jwt_key=%s/secrets/jwt_hs256.key,max_token_lifespan=3600"
                                                % tmp_path]


@pytest.mark.parametrize("key", ["AuthAltTypes", "authaltparameters"])
@pytest.mark.parametrize("rest", [{"enabled": True}, {"enabled": False}])
def test_slurm_config_never_sets_the_keys_rest_sets(key, rest):
    found = issues(rest=rest, slurmConfig={key: "auth/jwt"})
    assert "spec.rest" in found["SlurmCluster/c spec.slurmConfig.%s" % key], found


@pytest.mark.parametrize("field, value", [("port", 0), ("port", 65536), ("replicas", 0), ("maxTokenLifespan", 0),
                                          ("enabled", "yes")])
def test_bounds(field, value):
    found = issues(rest={"enabled": True, field: value})
    assert any(path.endswith("spec.rest.%s" % field) for path in found), found


@pytest.mark.parametrize("version, accounting, plugins", [
    ((22, 5), False, ["openapi/v0.0.38"]),
    ((22, 5), True, ["openapi/v0.0.38", "openapi/dbv0.0.38"]),
    ((23, 2), True, ["openapi/v0.0.39", "openapi/dbv0.0.39"]),
    ((26, 5), True, ["openapi/slurmctld", "openapi/slurmdbd"]),
    ((26, 5), False, ["openapi/slurmctld"]),
])
def test_openapi_plugins_of_each_release(version, accounting, plugins):
    assert openapi_plugins(version, accounting) == plugins


def test_slurmrestd_argv_drops_privileges_and_takes_tokens_only():
    argv = slurmrestd_argv("/usr/sbin/slurmrestd", "0.0.0.0:6820", ["openapi/slurmctld"])
    assert argv == ["/usr/sbin/slurmrestd", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld", "-u", "nobody",
                    "0.0.0.0:6820"]
    assert "-u" not in slurmrestd_argv("slurmrestd", "x:1", ["openapi/slurmctld"], user=None)
