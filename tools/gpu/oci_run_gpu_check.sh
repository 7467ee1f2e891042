#!/usr/bin/env bash
# A GPU check for node/oci_run.py (issue 29), for a machine with an NVIDIA GPU and python3 with torch (the device
# machine): carry a folder build/gpucheck holding this script, Debian's runc and its libseccomp.so.2 (cp /usr/sbin/runc
# /lib/x86_64-linux-gnu/libseccomp.so.2 build/gpucheck/), run `bash build/gpucheck/run.sh` there; it writes
# $OUT/gpu_runc.txt. What it runs: a rootless runc container (container uid 0 = host uid 1000) on a GPU node, started through
# node/oci_run.py as oci.conf's RunTimeRun starts it: without --gpus, then with --gpus (SLURM_STEP_GPUS=0)
set -u
exec > "$OUT/gpu_runc.txt" 2>&1
rm -rf /tmp/gpucheck; cp -r "$PWD/build/gpucheck" /tmp/gpucheck; chmod -R a+rX /tmp/gpucheck
here=/tmp/gpucheck
export LD_LIBRARY_PATH_HOST="${LD_LIBRARY_PATH:-}"
export RUNC="$here/runc"
export LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
$RUNC --version | head -1
PY=$(command -v python3); echo "python3: $PY"
B=/tmp/bundle; rm -rf $B /tmp/runc-state; mkdir -p $B/rootfs /home/u/run && chown -R 1000:1000 /home/u
python3 - "$B" "$PY" <<'PY'
import json, os, sys
bundle, python = sys.argv[1], sys.argv[2]
rootfs = os.path.join(bundle, "rootfs")
mounts = [{"destination": "/proc", "type": "proc", "source": "proc"},
          {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
          {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
          {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]},
          {"destination": "/home", "type": "bind", "source": "/home", "options": ["rbind"]},
          {"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]}]
for top in ("bin", "sbin", "lib", "lib64", "usr", "opt", "etc"):
    host = "/" + top
    if not os.path.exists(host):
        continue
    if os.path.islink(host):
        os.symlink(os.readlink(host), os.path.join(rootfs, top))
    else:
        os.makedirs(os.path.join(rootfs, top))
        mounts.append({"destination": host, "type": "bind", "source": host, "options": ["rbind", "ro"]})
for d in ("proc", "dev", "sys", "tmp", "home"):
    os.makedirs(os.path.join(rootfs, d), exist_ok=True)
probe = ("import os;print('uid in container', os.getuid(), open('/proc/self/uid_map').read().split());"
         "print('cwd', os.getcwd());print('dev', sorted(n for n in os.listdir('/dev') if n.startswith('nvidia')));"
         "import ctypes,glob;lib=ctypes.CDLL('libcuda.so.1');print('cuInit', lib.cuInit(0));"
         "[print('open', d, (lambda f: (os.close(f), 'ok')[1])(os.open(d, os.O_RDWR)) if os.path.exists(d) else 'absent') for d in ('/dev/nvidia0', '/dev/nvidiactl')];"
         "import torch;ok=torch.cuda.is_available();print('cuda available', ok);"
         "ok and print('sum on GPU', float(torch.ones(4096, device='cuda').sum()), torch.cuda.get_device_name(0))")
env = ["PATH=" + os.environ.get("PATH", "/usr/bin:/bin"), "HOME=/home/u", "PWD=/home/u/run", "SLURM_STEP_GPUS=0"]
if os.environ.get("LD_LIBRARY_PATH_HOST"):
    env.append("LD_LIBRARY_PATH=" + os.environ["LD_LIBRARY_PATH_HOST"])
config = {"ociVersion": "1.0.2", "root": {"path": "rootfs", "readonly": True},
          "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": [python, "-c", probe], "env": env,
                      "cwd": "/", "noNewPrivileges": True,
                      "capabilities": {k: ["CAP_KILL"] for k in ("bounding", "effective", "permitted")}},
          "hostname": "c", "mounts": mounts,
          "linux": {"uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
                    "gidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
                    "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user")],
                    "maskedPaths": [], "readonlyPaths": []}}
json.dump(config, open(os.path.join(bundle, "config.json"), "w"), indent=1)
PY
cp $B/config.json /tmp/config.orig.json
echo "== host, uid 1000, no container"; env | grep -E '^(LD_LIBRARY_PATH|NVIDIA|CUDA)'; ls -la /dev/nvidia-caps; ldconfig -p | grep -E 'libcuda.so' | head -3
python3 -c "import ctypes; print('cuInit as root', ctypes.CDLL('libcuda.so.1').cuInit(0))"
setpriv --reuid=1000 --regid=1000 --clear-groups python3 -c "import ctypes; print('cuInit as 1000', ctypes.CDLL('libcuda.so.1').cuInit(0))"
unshare --user --map-user=1000 --map-group=1000 true 2>/dev/null; echo "== host, uid 0 in a userns of host uid 1000? (unshare as 1000)"
setpriv --reuid=1000 --regid=1000 --clear-groups unshare --user --map-root-user python3 -c "import ctypes; print('cuInit as 1000 mapped to 0', ctypes.CDLL('libcuda.so.1').cuInit(0))"
for mode in plain gpus; do
  cp /tmp/config.orig.json $B/config.json
  flag=""; [ $mode = gpus ] && flag=--gpus
  echo "== oci_run.py --bundle $B --workdir /home/u/run $flag -- runc run"
  # as slurmstepd runs it: the job's user (uid 1000), so runc is rootless for real (no cgroup of its own)
  chown -R 1000:1000 $B; mkdir -p /tmp/runc-1000 /tmp/xdg-1000; chown 1000:1000 /tmp/runc-1000 /tmp/xdg-1000
  cp plugins/module_utils/node/oci_run.py /tmp/oci_run.py; chmod 755 /tmp/oci_run.py
  timeout 180 setpriv --reuid=1000 --regid=1000 --clear-groups env HOME=/home/u XDG_RUNTIME_DIR=/tmp/xdg-1000 \
      LD_LIBRARY_PATH="$LD_LIBRARY_PATH" python3 /tmp/oci_run.py --bundle $B --workdir /home/u/run $flag -- \
      $RUNC --rootless=true --root=/tmp/runc-1000 run c-$mode -b $B
  echo "rc=$?"
  python3 -c "import json; c=json.load(open('$B/config.json')); print('cwd in config', c['process']['cwd'], 'dev binds', [m['destination'] for m in c['mounts'] if m['destination'].startswith('/dev/nvidia')])"
done
