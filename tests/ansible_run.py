"""The one way the suite runs `ansible`, `ansible-playbook` and the other Ansible CLIs, the way a user does.

Every run gets the checkout's ansible.cfg (collections/ makes this repository soperator.slurm) and JSON output
unless asked otherwise; results come back parsed, with stdout and stderr in every assertion message. module() runs
this collection's modules without the `ansible` CLI (direct()), as Ansible's executor does on localhost, and returns
what `ansible localhost -m` prints; some tests of each suite keep going through the CLI (cli=True), and
SOPERATOR_MODULE_CLI=1 sends them all through it.
tests/conftest.py puts tests/ on sys.path, so any test imports it as `import ansible_run`.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from ansible import constants, release
from ansible.module_utils.json_utils import _filter_non_json_lines

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
        """The failed tasks' messages, then the ends of stdout and stderr, for assertion messages (a CI log may keep
        only the message's first lines: the JSON output's tail is seldom the task that failed)."""
        return "rc %s of %s\n%s--- stdout\n%s\n--- stderr\n%s" % (
            self.rc, " ".join(self.argv[:3]), self.failures(), self.stdout[-limit:], self.stderr[-limit:])

    def failures(self, limit=2000):
        """'--- failed: <task>' and the start of its result's msg (and stderr) for each failed or unreachable host
        result in the JSON output; '' when there is none or the output is no JSON."""
        try:
            plays = json.loads(self.stdout)["plays"]
        except (ValueError, KeyError, TypeError):
            return ""
        lines = []
        for play in plays:
            for task in play.get("tasks", []):
                for host, result in task.get("hosts", {}).items():
                    if not (result.get("failed") or result.get("unreachable")):
                        continue
                    text = "\n".join(str(result[key]) for key in ("msg", "stderr") if result.get(key))
                    lines.append("--- failed: %s (%s)\n%s\n" % (task["task"]["name"], host, text[:limit]))
        return "".join(lines)

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


def module(name, args, check=False, diff=False, expect_failed=False, cli=None, **kw):
    """Run module `name` (a name without a dot is one of this collection's modules) with `args`; returns its result
    as `ansible localhost -m <name> -a <args as JSON>` prints it. expect_failed: asserted with the exit status that goes
    with it; None asserts neither. kw: those of run().

    cli=None runs this collection's modules without the `ansible` CLI (direct(): the module's own process, as
    Ansible's AnsiballZ wrapper runs it: about 1 CPU s less a call, the CLI's start-up); any other module, cli=True,
    or SOPERATOR_MODULE_CLI=1 in the environment (all of them, the way a user runs them) go through the CLI."""
    if "." not in name:
        name = "%s.%s" % (COLLECTION, name)
    if cli is None:
        # A module with an action plugin runs partly in the controller: only the CLI runs it whole (none has one today).
        action = os.path.join(ROOT, "plugins", "action", name.rsplit(".", 1)[-1] + ".py")
        cli = (not name.startswith(COLLECTION + ".") or os.path.exists(action)
               or os.environ.get("SOPERATOR_MODULE_CLI") == "1")
    if not cli:
        return direct(name, args, check=check, diff=diff, expect_failed=expect_failed, **kw)
    argv = ["ansible", HOST, "-m", name, "-a", json.dumps(args)]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    done = run(argv, **kw)
    result = done.result()
    if expect_failed is not None:
        assert bool(result.get("failed")) == expect_failed, json.dumps(result, indent=1)[-6000:]
        assert done.rc == (2 if expect_failed else 0), done.output()
    return result


def _internal_args(name, check, diff, tmpdir):
    """The `_ansible_*` arguments ActionBase._update_module_args gives every module of an ad-hoc run on localhost,
    with the checkout's ansible.cfg (which sets none of them)."""
    return dict(_ansible_check_mode=check, _ansible_no_log=False, _ansible_debug=False, _ansible_diff=diff,
                _ansible_verbosity=0, _ansible_version=release.__version__, _ansible_module_name=name,
                _ansible_syslog_facility="LOG_USER", _ansible_selinux_special_fs=constants.DEFAULT_SELINUX_SPECIAL_FS,
                _ansible_socket=None, _ansible_shell_executable="/bin/sh", _ansible_keep_remote_files=False,
                _ansible_tmpdir=tmpdir, _ansible_remote_tmp="~/.ansible/tmp", _ansible_ignore_unknown_opts=False,
                _ansible_target_log_info=None, _ansible_tracebacks_for=[])


def _as_ansible_returns(name, data):
    """What the controller makes of a module's JSON before the json callback prints it (ActionBase._execute_module,
    remove_internal_keys, TaskExecutor._execute, TaskResult.as_callback_task_result; the json callback adds
    `action`). tests/unit/test_ansible_run.py compares both ways."""
    for key in [k for k in data if k.startswith("_ansible_")]:
        del data[key]
    # the module writes warnings and deprecations as typed objects (WarningSummary, DeprecationSummary); the
    # controller prints a warning's message and a deprecation's fields
    if data.get("warnings"):
        data["warnings"] = [w["event"]["msg"] if isinstance(w, dict) and "event" in w else w for w in data["warnings"]]
    if data.get("deprecations"):
        data["deprecations"] = [_deprecation(d) for d in data["deprecations"]]
    for key in ("warnings", "deprecations"):
        if key in data and not data[key]:
            del data[key]
    for key in ("stdout", "stderr"):
        if key in data and key + "_lines" not in data:
            data[key + "_lines"] = (data[key] or "").splitlines()
    failed = data.pop("failed") if "failed" in data else "rc" in data and data["rc"] not in (0, "0")
    skipped = data.pop("skipped", False)
    data.setdefault("changed", False)
    # the callback's result drops `failed` and `skipped`; the json callback puts them back when true
    if failed:
        data.update(failed=True)
        data.setdefault("exception", "(traceback unavailable)")
    if skipped:
        data.update(skipped=True)
    data.update(_ansible_no_log=False, action=name)
    return data


def _deprecation(summary):
    """A DeprecationSummary as the json callback prints it."""
    if not (isinstance(summary, dict) and "event" in summary):
        return summary
    native = {k: v for k, v in summary.items() if k not in ("event", "__ansible_type")}
    deprecator = {k: v for k, v in (native.get("deprecator") or {}).items() if k != "__ansible_type"}
    native.update(msg=summary["event"]["msg"], deprecator=deprecator or None,
                  collection_name=deprecator.get("resolved_name"))
    return native


def direct(name, args, check=False, diff=False, expect_failed=False, env=None, cwd=ROOT, timeout=600):
    """Run the collection module `name` (a FQCN) the way Ansible runs it on localhost, without the `ansible` CLI: the
    module imported as __main__ by the Python running the tests (Ansible's interpreter for the implicit localhost),
    its arguments and the `_ansible_*` ones in a JSON file given as argv[1] (how ansible.module_utils.basic reads
    them outside AnsiballZ), the collection importable from collections/ (as the checkout's ansible.cfg finds it).
    The module's own exit status is asserted: 1 for a failed result (fail_json), 0 otherwise."""
    env = dict(ansible_env() if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([COLLECTIONS] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with tempfile.TemporaryDirectory(prefix="ansible-direct-") as tmpdir:
        params = os.path.join(tmpdir, "args.json")
        with open(params, "w", encoding="utf-8") as out:
            json.dump({"ANSIBLE_MODULE_ARGS": dict(args, **_internal_args(name, check, diff, tmpdir))}, out)
        # -P: the working directory (the checkout's root) is not put on sys.path, as AnsiballZ strips it.
        argv = [sys.executable, "-P", "-m", "ansible_collections.%s.plugins.modules.%s" % tuple(name.rsplit(".", 1)),
                params]
        proc = subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
    done = AnsibleRun(argv[2:], proc)
    try:
        data = json.loads(_filter_non_json_lines(proc.stdout, objects_only=True)[0])
    except ValueError:
        raise AssertionError("no module result:\n" + done.output())
    result = _as_ansible_returns(name, data)
    if expect_failed is not None:
        assert bool(result.get("failed")) == expect_failed, json.dumps(result, indent=1)[-6000:]
        assert done.rc == (1 if expect_failed else 0), done.output()
    return result
