"""The one way the suite runs `ansible`, `ansible-playbook` and the other Ansible CLIs, the way a user does.

Every run gets the checkout's ansible.cfg (collections/ makes this repository soperator.slurm) and JSON output
unless asked otherwise; results come back parsed, with stdout and stderr in every assertion message.
tests/conftest.py puts tests/ on sys.path, so any test imports it as `import ansible_run`.
"""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKOUT_CONFIG = os.path.join(ROOT, "ansible.cfg")
COLLECTIONS = os.path.join(ROOT, "collections")   # holds the ansible_collections/soperator/slurm link to the repository
COLLECTION = "soperator.slurm"
HOST = "localhost"


def ansible_env(config=CHECKOUT_CONFIG, json_output=True, drop=(), **extra):
    """os.environ plus what every run needs. config=None: no ANSIBLE_CONFIG at all (Ansible's own defaults);
    json_output: the json stdout callback, for ad-hoc runs too; drop: variables to remove; extra: to set."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_CONFIG", None)
    if config is not None:
        env["ANSIBLE_CONFIG"] = config
    if json_output:
        env.update(ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1")
    for name in drop:
        env.pop(name, None)
    env.update(extra)
    return env


def tool(name):
    """The Ansible CLI `name`: on PATH, or beside the Python running the tests (a virtualenv not on PATH)."""
    return shutil.which(name) or os.path.join(os.path.dirname(sys.executable), name)


class AnsibleRun:
    """One finished run: rc, stdout, stderr; its JSON output and the results of HOST, read on demand."""

    def __init__(self, argv, proc):
        self.argv, self.rc, self.stdout, self.stderr = argv, proc.returncode, proc.stdout, proc.stderr

    def output(self, limit=4000):
        """The ends of stdout and stderr, for assertion messages."""
        return "rc %s of %s\n--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, " ".join(self.argv[:3]), self.stdout[-limit:], self.stderr[-limit:])

    def json(self):
        try:
            return json.loads(self.stdout)
        except ValueError:
            raise AssertionError("no JSON output:\n" + self.output())

    def tasks(self, play=None):
        """{task name: HOST's result} of every play, or of the play with index `play`."""
        plays = self.json()["plays"]
        tasks = {}
        for one in plays if play is None else [plays[play]]:
            for task in one["tasks"]:
                tasks[task["task"]["name"]] = task["hosts"].get(HOST, {})
        return tasks

    def result(self):
        """HOST's result of the first task of the first play (an ad-hoc run has just that one)."""
        try:
            return self.json()["plays"][0]["tasks"][0]["hosts"][HOST]
        except (KeyError, IndexError, TypeError):
            raise AssertionError("no result:\n" + self.output())

    def stats(self):
        return self.json()["stats"][HOST]


def run(argv, env=None, cwd=ROOT, timeout=600, expect_rc=None):
    """Run an Ansible CLI (argv[0] found by tool()); expect_rc: assert the exit status."""
    argv = [tool(argv[0])] + list(argv[1:])
    proc = subprocess.run(argv, cwd=str(cwd), env=ansible_env() if env is None else env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    done = AnsibleRun(argv, proc)
    if expect_rc is not None:
        assert done.rc == expect_rc, done.output()
    return done


def playbook(path, *args, expect_rc=0, **kw):
    """ansible-playbook `path` (a name is one of the repository's playbooks/) with `args`; the rc is asserted unless
    expect_rc is None. kw: those of run()."""
    if not os.path.isabs(str(path)):
        path = os.path.join(ROOT, "playbooks", str(path))
    return run(["ansible-playbook", str(path)] + list(args), expect_rc=expect_rc, **kw)


def module(name, args, check=False, diff=False, expect_failed=False, **kw):
    """`ansible localhost -m <name> -a <args as JSON>` (a name without a dot is one of this collection's modules);
    returns the module's result. expect_failed: asserted with the exit status that goes with it (2 failed, 0 not);
    None asserts neither. kw: those of run()."""
    if "." not in name:
        name = "%s.%s" % (COLLECTION, name)
    argv = ["ansible", HOST, "-m", name, "-a", json.dumps(args)]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    done = run(argv, **kw)
    result = done.result()
    if expect_failed is not None:
        assert bool(result.get("failed")) == expect_failed, json.dumps(result, indent=1)[-6000:]
        assert done.rc == (2 if expect_failed else 0), done.output()
    return result
