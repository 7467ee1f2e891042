"""A real container registry (Debian's docker-registry: the CNCF distribution registry) on loopback for the
image-pull tests: plain HTTP, a temporary storage folder, optional htpasswd users; stopped by the process it
started. Images go in with skopeo, as anyone pushes them."""
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import warnings

import yaml

with warnings.catch_warnings():     # deprecated since 3.11; bcrypt hashes for htpasswd ($2b$) without a dependency
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt     # pylint: disable=deprecated-module

from prometheus_server import free_ports, stop_daemon

REGISTRY = shutil.which("docker-registry")
SKOPEO = shutil.which("skopeo")


class Registry(object):
    """The registry on 127.0.0.1:<free port>, its storage and config under `workdir`; `users`: {name: password}
    for basic authentication (none: anyone may pull and push)."""

    def __init__(self, workdir, users=None):
        self.port = free_ports(1)[0]
        self.host = "127.0.0.1:%d" % self.port
        config = {"version": 0.1, "log": {"level": "warn"},
                  "storage": {"filesystem": {"rootdirectory": os.path.join(workdir, "storage")}},
                  "http": {"addr": self.host}}
        if users:
            # cost 4 (rounds=16), the least: the registry checks the hash on every request
            lines = ["%s:%s\n" % (u, crypt.crypt(p, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))
                     for u, p in sorted(users.items())]
            with open(os.path.join(workdir, "htpasswd"), "w") as f:
                f.writelines(lines)
            config["auth"] = {"htpasswd": {"realm": "test", "path": os.path.join(workdir, "htpasswd")}}
        path = os.path.join(workdir, "registry.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.log = open(os.path.join(workdir, "registry.log"), "wb")
        self.proc = subprocess.Popen([REGISTRY, "serve", path], stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self._wait()

    def _wait(self, seconds=60):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError("the registry exited (%s): %s" % (self.proc.returncode, self.logged()))
            try:
                with urllib.request.urlopen("http://%s/v2/" % self.host, timeout=2):
                    return
            except urllib.error.HTTPError as e:
                if e.code == 401:       # up, asking for credentials
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError("the registry did not answer within %ds: %s" % (seconds, self.logged()))

    def logged(self):
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().decode("utf-8", "replace")[-2000:]

    def push(self, layout, tag_in_layout, name, auth_file=None):
        """The image `tag_in_layout` of an OCI layout into this registry as `name` (NAME:TAG), unchanged."""
        argv = [SKOPEO, "copy", "--quiet", "--dest-tls-verify=false"]
        argv += ["--dest-authfile", auth_file] if auth_file else []
        subprocess.run(argv + ["oci:%s:%s" % (layout, tag_in_layout), "docker://%s/%s" % (self.host, name)],
                       check=True, timeout=120, capture_output=True)

    def stop(self):
        stop_daemon(self.proc, self.log)
