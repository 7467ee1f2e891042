# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filling a jail directory from a root filesystem: a directory, a tarball or an OCI image layout.

Standard library only: the same file is the populate image's program (images/populate_jail), with its
companions jail_source.py (what a source is, its size), tree_reader.py and safe_tree.py beside it, run by the
populate Job as

    python3 jail.py populate --source /jail-rootfs.tar --jail /mnt/jail --overwrite never

which prints one JSON line {"action": ..., "changed": ..., "sentinel": {...}} that the Kubernetes side reads from
the pod's log.

One populate of a jail at a time: each holds the lock file LOCK at the jail's root (flock, opened without following
a link) from before it removes an earlier run's leftovers until its sentinel is written, and decides again under it,
right before the swap - a populate that waited finds what the other one did (overwrite=never: the sentinel, so
it reports unchanged and writes nothing). The whole populate has a time bound (--timeout, jail_populate's timeout).

The sentinel (SENTINEL at the jail's root) records what populated the jail and when. It is written last: the new
root filesystem is unpacked into a staging directory inside the jail (same filesystem), the old entries are moved
aside, the new ones renamed in, and only then the sentinel is written. A populate cut short leaves a jail without
a sentinel, which is never taken for a populated one.

Overwrite modes:
- never: a jail with a sentinel is left alone; an empty jail is populated; a jail that is not empty and has no
  sentinel (filled by someone else, or a populate cut short) is refused - it is not ours to overwrite.
- if_empty: populate only an empty jail (nothing but lost+found and our own leftovers); anything else is left alone.
- always: replace the jail's contents on every run (lost+found stays).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import errno
import fcntl
import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

try:
    from ansible_collections.soperator.slurm.plugins.module_utils.node import jail_source, safe_tree, tree_reader
except ImportError:  # run as a program from an image: jail_source.py, safe_tree.py and tree_reader.py lie beside it
    sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
    import jail_source
    import safe_tree
    import tree_reader

SENTINEL = ".soperator-jail.json"
SENTINEL_TMP = SENTINEL + ".tmp"
LOCK = ".soperator-populate.lock"
DEFAULT_TIMEOUT = 3600      # seconds: a root filesystem of many GiB on a slow volume fits in it
SENTINEL_MAX = 1 << 20
SENTINEL_FORMAT = 1
STAGING_PREFIX = ".soperator-populate-"
TRASH_PREFIX = ".soperator-old-"
KEPT = frozenset(["lost+found"])    # a filesystem's own entry, never moved or replaced
OVERWRITE_MODES = ("never", "if_empty", "always")
PROGRAM = "soperator.slurm jail.py"

POPULATED = "populated"
REPLACED = "replaced"
UNCHANGED = "unchanged"
REFUSED = "refused"


JailError = safe_tree.JailError     # one error for the program and its writer


# --- the jail as it is -----------------------------------------------------------------------------------------

def read_sentinel(jail):
    """The sentinel's record, or None when the jail has none. Anything in the jail may have been put there by its
    users: the sentinel is opened without following a symlink or waiting on a fifo, and read only if a regular file."""
    path = os.path.join(jail, SENTINEL)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JailError("the jail's sentinel %s cannot be read (%s); remove it and populate with overwrite=always"
                        % (path, "it is a symlink" if e.errno == errno.ELOOP else e))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise JailError("the jail's sentinel %s is not a regular file; remove it and populate with overwrite=always"
                        % path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(SENTINEL_MAX + 1)
    try:
        if len(data) > SENTINEL_MAX:
            raise ValueError("larger than %d bytes" % SENTINEL_MAX)
        record = json.loads(data.decode("utf-8"))
    except ValueError as e:     # UnicodeDecodeError is one
        raise JailError("the jail's sentinel %s cannot be read (%s); remove it and populate with overwrite=always"
                        % (path, e))
    if not isinstance(record, dict):
        raise JailError("the jail's sentinel %s is not a JSON object" % path)
    return record


def _leftover(name):
    return name == SENTINEL_TMP or name.startswith(STAGING_PREFIX) or name.startswith(TRASH_PREFIX)


def _ours(name):
    return name in (SENTINEL, LOCK) or _leftover(name)


def _contents(names):
    return sorted(n for n in names if n not in KEPT and not _ours(n))


def settled(jail):
    """Whether pods may start on the jail now -> (bool, why). Yes once populated (its sentinel) or when it holds a
    root filesystem that is not ours (entries, none of them a populate's leftovers; overwrite=if_empty leaves such a
    jail as it is); not while it is empty, and not while a populate is under way or was cut short (its staging or
    old-contents directory, or the sentinel's temporary file, with no sentinel).

    The login and worker pods wait for this in an init container (`jail.py wait`) before their containers start:
    the login container's mounts below the jail (etc/slurm, run/munge, the extrausers subPath etc) create those
    directories in the volume, and in an empty jail that made the populate Job refuse it (not empty, no sentinel,
    overwrite=never) when the pods started before the Job had completed (slurm_cluster wait=false)."""
    if not os.path.isdir(jail):
        return False, "%s is not a directory" % jail
    names = os.listdir(jail)
    if SENTINEL in names:
        return True, "the jail is populated"
    busy = sorted(n for n in names if _leftover(n))
    if busy:
        return False, "a populate is under way or was cut short (%s)" % ", ".join(busy[:3])
    if _contents(names):
        return True, "the jail holds a root filesystem that was not populated by us"
    return False, "the jail is empty"


def wait_settled(jail, timeout=0.0, interval=2.0, say=None, sleep=time.sleep, clock=time.monotonic):
    """Poll settled() until it says yes (-> True) or `timeout` seconds passed (-> False; 0: never gives up).
    `say(text)` hears each new reason to wait, once."""
    deadline = clock() + timeout
    last = None
    while True:
        ok, why = settled(jail)
        if ok or why != last:
            if say is not None:
                say(why)
            last = why
        if ok:
            return True
        if timeout and clock() >= deadline:
            return False
        sleep(interval)


def jail_entries(jail):
    """Names at the jail's root that are its contents: not lost+found, the sentinel, or our leftovers."""
    if not os.path.isdir(jail):
        return []
    return _contents(os.listdir(jail))


# --- deciding --------------------------------------------------------------------------------------------------

def plan(jail, overwrite, previous):
    """(action, message) for a jail as it is now."""
    if overwrite not in OVERWRITE_MODES:
        raise JailError("overwrite must be one of %s, got %r" % (", ".join(OVERWRITE_MODES), overwrite))
    entries = jail_entries(jail)
    if overwrite == "always":
        return (REPLACED if previous is not None or entries else POPULATED), "overwrite=always"
    if previous is not None:
        return UNCHANGED, "the jail was populated at %s from %s" % (
            previous.get("populated_at"), previous.get("source"))
    if not entries:
        return POPULATED, "the jail is empty"
    if overwrite == "if_empty":
        return UNCHANGED, "the jail is not empty (%s%s); overwrite=if_empty leaves it" % (
            ", ".join(entries[:5]), ", ..." if len(entries) > 5 else "")
    return REFUSED, ("the jail %s is not empty (%s%s) and has no %s, so it was not populated by us (or a populate "
                     "was cut short); overwrite=never does not touch it. Use overwrite=if_empty to keep it as it is, "
                     "or overwrite=always to replace it" % (jail, ", ".join(entries[:5]),
                                                            ", ..." if len(entries) > 5 else "", SENTINEL))


def in_use_refusal(users, stop):
    """overwrite=always while something uses the jail - login and worker pods on Kubernetes, a local cluster's slurmds
    and login sshd - is refused unless force=true: one rule for both targets. `users`: what uses the jail, `stop`:
    how to stop it. -> the message."""
    return ("refusing overwrite=always while %s: replacing the root filesystem under them breaks running jobs and "
            "logins. %s, or set force=true" % (users, stop))


def _run_subprocess(argv, timeout=None):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise safe_tree.TimedOut("%s did not finish within the populate's timeout" % " ".join(argv))
    return proc.returncode, proc.stdout, proc.stderr


def _from_oci(source, dest, run, deadline):
    """umoci unpacks the image (layers, whiteouts, owners) into `dest`, which must not exist yet."""
    umoci = shutil.which("umoci")
    if umoci is None:
        raise JailError("umoci is needed to unpack an OCI image layout: install it (Debian package umoci)")
    argv = [umoci, "raw", "unpack", "--image", "%s:%s" % (source.path, source.tag), dest]
    if os.geteuid() != 0:
        argv.insert(3, "--rootless")
    rc, out, err = run(argv, deadline.left())
    if rc != 0:
        raise JailError("%s failed (rc=%d): %s" % (" ".join(argv), rc, (err or out).strip()[-2000:]))


def fill(jail, jail_fd, staging, source, run=_run_subprocess, limit=None, deadline=safe_tree.NO_DEADLINE):
    """Write the root filesystem of `source` into the directory `staging` at the jail's root; -> (the path of the
    directory holding it, relative to the jail, skipped entries)."""
    if source.kind == "oci":
        _from_oci(source, os.path.join(jail, staging, "rootfs"), run, deadline)
        return staging + "/rootfs", []
    root_fd = safe_tree.open_dirs(jail_fd, [staging])
    try:
        writer = safe_tree.Writer(root_fd, preserve_owner=os.geteuid() == 0, deadline=deadline)
        tree_reader.read_into(writer, source.kind, source.path, limit)
        writer.close()
    finally:
        os.close(root_fd)
    return staging, writer.skipped


# --- populating ------------------------------------------------------------------------------------------------

def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _user():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def new_sentinel(source, overwrite, populated_at=None):
    record = {"format": SENTINEL_FORMAT, "source": source.label, "source_type": source.kind,
              "digest": source.digest, "overwrite": overwrite, "populated_at": populated_at,
              "populated_by": "%s@%s" % (_user(), socket.gethostname()), "program": PROGRAM}
    if source.tag:
        record["tag"] = source.tag
    return record


def _discard(jail, jail_fd, name, ignore_errors=False):
    """Remove the entry `name` at the jail's root: a symlink or file is unlinked, a directory removed with
    shutil.rmtree, which on Linux enters directories by descriptor and never follows a symlink below (populate checks
    rmtree.avoids_symlink_attacks) and, unlike safe_tree._remove_at, is bounded by no depth - the jail's users made these."""
    try:
        st = os.stat(name, dir_fd=jail_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(os.path.join(jail, name), ignore_errors=ignore_errors)
        else:
            os.unlink(name, dir_fd=jail_fd)
    except FileNotFoundError:
        pass
    except (OSError, RecursionError) as e:
        if not ignore_errors:
            raise JailError("cannot remove %s: %s" % (os.path.join(jail, name), e))


def _write_sentinel(jail_fd, record):
    try:
        os.unlink(SENTINEL_TMP, dir_fd=jail_fd)
    except FileNotFoundError:
        pass
    # O_EXCL|O_NOFOLLOW: a name that reappeared is never written through
    fd = os.open(SENTINEL_TMP, safe_tree.NEW_FILE_FLAGS, 0o644, dir_fd=jail_fd)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fchmod(fd, 0o644)
        os.fsync(fd)
    os.replace(SENTINEL_TMP, SENTINEL, src_dir_fd=jail_fd, dst_dir_fd=jail_fd)


def _remove_leftovers(jail, jail_fd):
    """Staging and old-content directories (and a sentinel's temporary file) of an earlier run that was cut short."""
    for name in os.listdir(jail_fd):
        if _leftover(name):
            _discard(jail, jail_fd, name, ignore_errors=True)


def _swap(jail, jail_fd, rootfs):
    """Move the jail's entries aside and the new ones in (renames on one filesystem, which never follow a symlink),
    then drop the old ones."""
    _discard(jail, jail_fd, SENTINEL)   # from here on the jail does not count as populated
    trash = os.path.basename(tempfile.mkdtemp(prefix=TRASH_PREFIX, dir=jail))
    trash_fd = safe_tree.open_dirs(jail_fd, [trash])
    try:
        rootfs_fd = safe_tree.open_dirs(jail_fd, rootfs.split("/"))
        try:
            for name in _contents(os.listdir(jail_fd)):
                os.rename(name, name, src_dir_fd=jail_fd, dst_dir_fd=trash_fd)
            for name in sorted(os.listdir(rootfs_fd)):
                if name in KEPT or _ours(name):
                    continue    # a root filesystem taken from another jail may hold a sentinel: ours is written below
                os.rename(name, name, src_dir_fd=rootfs_fd, dst_dir_fd=jail_fd)
        finally:
            os.close(rootfs_fd)
    finally:
        os.close(trash_fd)
    _discard(jail, jail_fd, trash)


def _own_root(jail_fd):
    """The jail is its users' `/`: root's and 0755, as sshd's ChrootDirectory demands ("bad ownership or modes").
    Volume provisioners often hand out a world-writable directory (local-path, many NFS ones: 0777)."""
    if os.geteuid() == 0:
        os.fchown(jail_fd, 0, 0)
    os.fchmod(jail_fd, 0o755)


def _lock(jail, jail_fd, deadline, sleep=time.sleep):
    """Hold the jail's lock (LOCK at its root, ours: flock, never through a link, never on what is not a regular
    file) until _unlock(); waits for another populate of the jail within the deadline. The holder removes the file
    before it lets go (the jail's root is its users' `/`): a waiter that then holds a removed file tries again."""
    path = os.path.join(jail, LOCK)
    while True:
        try:
            # O_NONBLOCK: a fifo planted under the lock's name does not wait for a writer
            fd = os.open(LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600,
                         dir_fd=jail_fd)
        except OSError as e:
            raise JailError("the jail's lock %s cannot be opened (%s); remove it" % (
                path, "it is a symlink" if e.errno == errno.ELOOP else e))
        try:
            held = os.fstat(fd)
            if not stat.S_ISREG(held.st_mode):
                raise JailError("the jail's lock %s is not a regular file; remove it" % path)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                try:
                    deadline.check()
                except safe_tree.TimedOut as e:
                    raise safe_tree.TimedOut("%s, waiting for another populate of jail %s (it holds %s)"
                                             % (e, jail, path))
                sleep(0.1)
            try:
                now = os.stat(LOCK, dir_fd=jail_fd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
        except BaseException:
            os.close(fd)
            raise
        if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)        # removed by the populate that held it: lock the next one


def _unlock(jail_fd, fd):
    try:
        os.unlink(LOCK, dir_fd=jail_fd)
    finally:
        os.close(fd)


def _decide(jail, overwrite, guard):
    """The plan for the jail as it is now -> the result a run reports; `guard(action)` may refuse an
    overwrite=always that would write (-> its message; the jail is in use)."""
    previous = read_sentinel(jail) if os.path.isdir(jail) else None
    action, message = plan(jail, overwrite, previous)
    if guard is not None and overwrite == "always" and action in (POPULATED, REPLACED):
        refusal = guard(action)
        if refusal is not None:
            action, message = REFUSED, refusal
    return {"action": action, "changed": action in (POPULATED, REPLACED), "message": message,
            "previous": previous, "sentinel": previous, "skipped_entries": [], "jail": jail}


def _busy(jail):
    """Whether the jail holds a populate's staging or old-contents directory: one under way, or cut short."""
    return os.path.isdir(jail) and any(_leftover(n) for n in os.listdir(jail))


def populate(jail, source_path, overwrite="never", check_mode=False, run=_run_subprocess, label=None,
             oci_tag=None, timeout=DEFAULT_TIMEOUT, guard=None, option="jail_dir"):
    """Populate `jail` from `source_path` under the overwrite rule, within `timeout` seconds (None or 0: no bound).
    -> dict(action, changed, message, sentinel, previous, skipped_entries). Refusing is an action, not an
    exception; bad input, I/O failures and the timeout raise JailError. A tarball or directory source is scanned in
    full first (every member checked, sizes against free space), so what it refuses, check mode refuses too, and
    nothing is written. `guard`: see _decide. `option`: what the caller calls the jail (a symlink is refused
    naming it)."""
    deadline = safe_tree.Deadline(timeout)
    jail = os.path.abspath(jail)
    refusal = safe_tree.link_refusal(option, jail)
    if refusal is not None:
        raise JailError(refusal)
    if os.path.lexists(jail) and not os.path.isdir(jail):
        raise JailError("jail %s exists and is not a directory" % jail)
    result = _decide(jail, overwrite, guard)
    if result["action"] in (UNCHANGED, REFUSED) and (check_mode or not _busy(jail)):
        return result       # with a populate under way (its leftovers), decided again once it is done
    try:
        return _populate(jail, source_path, overwrite, check_mode, run, label, oci_tag, deadline, guard, result)
    except safe_tree.TimedOut as e:
        raise safe_tree.TimedOut("jail %s: %s (timeout); its contents were left as they were" % (jail, e))


def _populate(jail, source_path, overwrite, check_mode, run, label, oci_tag, deadline, guard, result):
    source = jail_source.inspect_source(source_path, oci_tag, label, deadline)
    limit = jail_source.free_bytes(jail)
    summary = jail_source.scan(source, limit, deadline)
    skipped = summary.skipped if summary is not None else []
    result["skipped_entries"] = skipped
    if check_mode:
        if summary is not None:
            jail_source.check_space(jail, summary)
        result["sentinel"] = new_sentinel(source, overwrite)
        return result
    if not shutil.rmtree.avoids_symlink_attacks:
        raise JailError("this Python's shutil.rmtree may follow symlinks; a jail is populated only on Linux")
    if not os.path.isdir(jail):
        if summary is not None:
            jail_source.check_space(jail, summary)      # no jail is made for a root filesystem that cannot fit
        os.makedirs(jail, 0o755, exist_ok=True)     # another populate may make it at the same time
    try:
        # O_NOFOLLOW: a jail replaced by a symlink since it was checked is not entered (nor its target chowned)
        jail_fd = os.open(jail, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise JailError("jail %s cannot be opened as a directory (%s)" % (jail, e))
    try:
        lock_fd = _lock(jail, jail_fd, deadline)
        try:
            result = _decide(jail, overwrite, guard)        # what another populate did while this one waited
            if result["action"] in (UNCHANGED, REFUSED):
                return result
            _remove_leftovers(jail, jail_fd)
            if summary is not None:
                jail_source.check_space(jail, summary)
            staging = os.path.basename(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=jail))
            try:
                rootfs, skipped = fill(jail, jail_fd, staging, source, run, limit, deadline)
                deadline.check()
                # right before the swap: the jail may have changed under the fill (someone wrote into an empty one)
                now = _decide(jail, overwrite, guard)
                if now["action"] in (UNCHANGED, REFUSED):
                    return now
                result = now
                _swap(jail, jail_fd, rootfs)
                _own_root(jail_fd)
                record = new_sentinel(source, overwrite, utc_now())
                _write_sentinel(jail_fd, record)
            finally:
                _discard(jail, jail_fd, staging, ignore_errors=True)
        finally:
            _unlock(jail_fd, lock_fd)
    finally:
        os.close(jail_fd)
    result["skipped_entries"] = skipped
    result["sentinel"] = record
    return result


# --- the populate image's program --------------------------------------------------------------------------------

def _log_text(text):
    """One log line whatever the archive's member names hold: the Kubernetes side reads the pod's log for the last
    JSON line, and a name with a line break could otherwise print one of its own."""
    return json.dumps(str(text))[1:-1]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="jail.py", description="Populate a Slurm jail from a root filesystem.")
    sub = parser.add_subparsers(dest="command", required=True)
    pop = sub.add_parser("populate", help="fill the jail (prints one JSON line: action and sentinel)")
    pop.add_argument("--source", required=True, help="root filesystem: a directory, a tarball or an OCI layout")
    pop.add_argument("--jail", required=True, help="the jail directory")
    pop.add_argument("--overwrite", choices=OVERWRITE_MODES, default="never")
    pop.add_argument("--label", help="what to record as the source in the sentinel (e.g. the image)")
    pop.add_argument("--oci-tag", help="the image of an OCI layout to unpack")
    pop.add_argument("--check", action="store_true", help="say what would be done, change nothing")
    pop.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                     help="give up after this many seconds, leaving the jail as it was (0: no bound; default "
                          "%(default)g)")
    show = sub.add_parser("show", help="print the jail's sentinel as JSON")
    show.add_argument("--jail", required=True)
    wait = sub.add_parser("wait", help="wait until pods may use the jail: populated, or holding a root filesystem "
                                       "that is not ours (the login and worker pods' init container)")
    wait.add_argument("--jail", required=True)
    wait.add_argument("--timeout", type=float, default=0.0, help="give up after this many seconds (0: never)")
    wait.add_argument("--interval", type=float, default=2.0, help="seconds between looks")
    args = parser.parse_args(argv)
    try:
        if args.command == "show":
            sys.stdout.write(json.dumps({"sentinel": read_sentinel(args.jail)}, sort_keys=True) + "\n")
            return 0
        if args.command == "wait":
            def say(text):
                sys.stderr.write("jail %s: %s\n" % (_log_text(args.jail), text))
                sys.stderr.flush()
            if wait_settled(args.jail, args.timeout, args.interval, say):
                return 0
            say("still not ready after %gs" % args.timeout)
            return 1
        if args.timeout < 0:
            raise JailError("--timeout must be >= 0, got %g" % args.timeout)
        result = populate(args.jail, args.source, args.overwrite, check_mode=args.check, label=args.label,
                          oci_tag=args.oci_tag, timeout=args.timeout, option="--jail")
    except (JailError, OSError, tarfile.TarError) as e:
        sys.stderr.write("jail populate failed: %s\n" % _log_text(e))
        return 1
    for entry in result["skipped_entries"]:
        sys.stderr.write("skipped %s\n" % _log_text(entry))
    sys.stderr.write("%s: %s\n" % (result["action"], _log_text(result["message"])))
    sys.stdout.write(json.dumps(dict((k, result[k]) for k in ("action", "changed", "sentinel")),
                                sort_keys=True) + "\n")
    return 2 if result["action"] == REFUSED else 0


if __name__ == "__main__":
    raise SystemExit(main())
