"""Offline stand-in for the get-pip.py bootstrap script that ansible-test downloads from a host this network cannot
reach. ansible-test runs it inside each sanity virtualenv with pip-install arguments; we bootstrap pip from the
interpreter's own ensurepip and then let that pip install what was asked for (from PyPI, which is reachable).

`make sanity` copies it to ~/.ansible/test/cache/get_pip_<version>.py, where ansible-test looks before downloading.
"""
import runpy
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
sys.argv = [sys.argv[0], "install"] + [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
