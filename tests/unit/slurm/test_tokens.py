"""slurm/tokens.py: what `scontrol show config` says about tokens, the lifespan bound checked before a token is
asked for, and the token read from `scontrol token` (the real one: tests/slurm/test_local_rest.py)."""
import pytest

from ansible_collections.soperator.slurm.plugins.module_utils.slurm import tokens
from ansible_collections.soperator.slurm.plugins.module_utils.slurm.runner import SlurmRunner

TOKEN = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjEsInN1biI6ImFsaWNlIn0.c2lnbmF0dXJl"


class Transport:
    """Answers what 22.05 prints for these two commands."""

    def __init__(self, types="auth/jwt", parameters="jwt_key=/k,max_token_lifespan=600"):
        self.config = "ClusterName             = c\nAuthAltTypes            = %s\nAuthAltParameters       = %s\n" % (
            types, parameters)
        self.ran = []

    def describe(self):
        return {"transport": "local"}

    def exec(self, argv, timeout):
        self.ran.append(" ".join(argv))
        if argv[:3] == ["scontrol", "show", "config"]:
            return 0, self.config, ""
        if argv[:2] == ["scontrol", "token"]:
            return 0, "SLURM_JWT=%s\n" % TOKEN, ""
        raise AssertionError(argv)


def runner(transport):
    return SlurmRunner(transport, retries=0)


def test_a_token_within_the_bound():
    t = Transport()
    assert tokens.issue_token(runner(t), "alice", 600) == {"token": TOKEN, "max_lifespan": 600}
    assert t.ran == ["scontrol show config", "scontrol token username=alice lifespan=600"]


def test_a_lifespan_above_the_bound_asks_for_no_token():
    t = Transport()
    with pytest.raises(tokens.TokenError, match="above the cluster's max_token_lifespan 600"):
        tokens.issue_token(runner(t), "alice", 601)
    assert t.ran == ["scontrol show config"]


@pytest.mark.parametrize("types", ["(null)", "auth/none", ""])
def test_a_cluster_without_jwt_is_refused(types):
    t = Transport(types=types)
    with pytest.raises(tokens.TokenError, match="does not accept tokens"):
        tokens.issue_token(runner(t), "alice", 60)
    assert t.ran == ["scontrol show config"]


def test_no_bound_set():
    assert tokens.issue_token(runner(Transport(parameters="jwt_key=/k")), "alice", 99999)["max_lifespan"] is None


@pytest.mark.parametrize("user, lifespan", [("a b", 60), ("x=y", 60), ("", 60), ("-u", 60), ("alice", 0),
                                            ("alice", -5)])
def test_bad_requests_run_nothing(user, lifespan):
    t = Transport()
    with pytest.raises(tokens.TokenError):
        tokens.issue_token(runner(t), user, lifespan)
    assert t.ran == []


@pytest.mark.parametrize("text, bound", [("jwt_key=/k,max_token_lifespan=60", 60), ("MAX_TOKEN_LIFESPAN=5", 5),
                                         ("max_token_lifespan=0", None), ("max_token_lifespan=x", None), (None, None)])
def test_max_lifespan(text, bound):
    assert tokens.max_lifespan(text) == bound
