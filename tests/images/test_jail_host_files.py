"""make jail's host overlay (images/build.py add_host_files): the local target's jail gets this host's name
resolution and regular users, merged into the jail's own accounts, and never a password."""
import io
import os
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "images"))

import build  # noqa: E402  (images/build.py)

JAIL_PASSWD = "root:x:0:0:root:/root:/bin/bash\nmunge:x:100:101::/nonexistent:/usr/sbin/nologin\n"
HOST_PASSWD = ("root:x:0:0:root:/root:/bin/bash\nmunge:x:998:998::/var/lib/munge:/usr/sbin/nologin\n"
               "alice:x:1000:1000:Alice:/home/alice:/bin/bash\nnobody:x:65534:65534::/nonexistent:/bin/false\n")


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def test_the_host_overlay_merges_users_and_adds_name_resolution(tmp_path):
    tar_path = str(tmp_path / "jail.tar")
    with tarfile.open(tar_path, "w") as tar:
        for name, text in (("./etc/passwd", JAIL_PASSWD), ("./etc/group", "root:x:0:\nmunge:x:101:\n"),
                           ("./etc/hosts", "127.0.0.1\tlocalhost\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
    host = tmp_path / "host"
    _write(str(host / "etc" / "passwd"), HOST_PASSWD)
    _write(str(host / "etc" / "group"), "root:x:0:\nmunge:x:998:\nalice:x:1000:\n")
    _write(str(host / "etc" / "shadow"), "alice:$6$secret:19000::::::\n")
    _write(str(host / "etc" / "hosts"), "127.0.0.1 localhost\n127.0.1.1 node7\n")
    _write(str(host / "etc" / "resolv.conf"), "nameserver 192.0.2.53\n")

    build.add_host_files(tar_path, host_root=str(host))

    with tarfile.open(tar_path) as tar:
        last = {}
        for member in tar.getmembers():                  # extraction keeps the last member of a name
            last[member.name] = tar.extractfile(member).read().decode()
    assert last["./etc/passwd"] == JAIL_PASSWD + "alice:x:1000:1000:Alice:/home/alice:/bin/bash\n"
    assert last["./etc/group"] == "root:x:0:\nmunge:x:101:\nalice:x:1000:\n"   # the jail's munge stays the jail's
    assert "node7" in last["./etc/hosts"] and last["./etc/resolv.conf"] == "nameserver 192.0.2.53\n"
    assert not any("shadow" in name for name in last) and "$6$" not in "".join(last.values())
