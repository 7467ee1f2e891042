# -*- coding: utf-8 -*-
# Copyright (c) soperator.slurm contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An NCCL all-reduce across the GPUs of one node, and the versions of the GPU stack: what the ncclAllReduce active
check runs where nccl-tests' all_reduce_perf is not installed (Debian packages no nccl-tests, and its source is on no
registry these images are built from), and what the GPU images print about themselves.

    nccl-probe [--versions] [--bytes N] [--iterations N] [--gpus N]

Ours, not nccl-tests: it needs no compiler and no CUDA toolkit. It loads libcudart.so.12 and libnccl.so.2 (the GPU
worker and jail images carry Debian's libcudart12 and libnccl2) with ctypes; the driver (libcuda.so.1) and the device
files come from the node, through the NVIDIA container toolkit. Python 3 standard library only.

Prints "key: value" lines:

    nccl: 2.22.3
    cuda-runtime: 12.4
    cuda-driver: 12.8            (or "none": no driver in the container)
    gpus: 8                      (--versions stops before this line)
    all-reduce: bytes 268435456 gpus 8 time-ms 3.120 algbw-GBs 86.04 busbw-GBs 150.57 wrong 0

busbw is nccl-tests' bus bandwidth (algbw x 2(n-1)/n): with one GPU it is 0 by definition, and the all-reduce then only
proves that NCCL and CUDA work. Exit status: 0 all good; 1 the all-reduce ran and returned wrong values; 2 a library
or a CUDA/NCCL call failed; 3 no GPU (no driver, or no device): the documented "no GPU" answer, with a line
"no-gpu: <CUDA's reason>".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import array
import ctypes
import sys
import time

CUDART = "libcudart.so.12"
NCCL = "libnccl.so.2"
NCCL_FLOAT32 = 7                  # ncclDataType_t ncclFloat32
NCCL_SUM = 0                      # ncclRedOp_t ncclSum
MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST = 1, 2
# cudaGetDeviceCount's answers that mean "this node has no usable GPU", not a broken stack.
NO_GPU_ERRORS = {35: "cudaErrorInsufficientDriver", 100: "cudaErrorNoDevice", 34: "cudaErrorStubLibrary"}
OK, WRONG, FAILED, NO_GPU = 0, 1, 2, 3


class ProbeError(Exception):
    """A library that cannot load, or a CUDA or NCCL call that failed."""


def version_text(code, nccl=False):
    """CUDA's 1000*major + 10*minor, or NCCL's 10000*major + 100*minor + patch (1000*major + 100*minor + patch before
    2.9) -> "12.4" / "2.22.3"."""
    if nccl:
        if code >= 10000:
            return "%d.%d.%d" % (code // 10000, code % 10000 // 100, code % 100)
        return "%d.%d.%d" % (code // 1000, code % 1000 // 100, code % 100)
    return "%d.%d" % (code // 1000, code % 1000 // 10) if code else "none"


def bus_bandwidth(algbw, gpus):
    """nccl-tests' all-reduce bus bandwidth: what each link carries, comparable across GPU counts."""
    return algbw * 2.0 * (gpus - 1) / gpus if gpus > 0 else 0.0


def parse(text):
    """This program's output -> {"nccl", "cuda-runtime", "cuda-driver", "gpus", "no-gpu", "all-reduce": {...}}."""
    result = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "all-reduce":
            words = value.split()
            pairs = dict(zip(words[0::2], words[1::2]))
            try:
                result[key] = {"bytes": int(pairs["bytes"]), "gpus": int(pairs["gpus"]),
                               "time_ms": float(pairs["time-ms"]), "algbw": float(pairs["algbw-GBs"]),
                               "busbw": float(pairs["busbw-GBs"]), "wrong": int(pairs["wrong"])}
            except (KeyError, ValueError):
                continue
        elif key == "gpus" and value.isdigit():
            result[key] = int(value)
        elif key in ("nccl", "cuda-runtime", "cuda-driver", "no-gpu"):
            result[key] = value
    return result


class Stack(object):
    """libcudart and libnccl through ctypes; each call's error becomes a ProbeError naming the call."""

    def __init__(self, cudart=CUDART, nccl=NCCL):
        try:
            self.cuda = ctypes.CDLL(cudart)
            self.nccl = ctypes.CDLL(nccl)
        except OSError as e:
            raise ProbeError("cannot load the GPU libraries: %s" % e)
        self.cuda.cudaGetErrorString.restype = ctypes.c_char_p
        self.nccl.ncclGetErrorString.restype = ctypes.c_char_p

    def cuda_call(self, name, *args):
        rc = getattr(self.cuda, name)(*args)
        if rc != 0:
            raise ProbeError("%s failed: %s (%d)" % (name, self.cuda.cudaGetErrorString(rc).decode(), rc))

    def nccl_call(self, name, *args):
        rc = getattr(self.nccl, name)(*args)
        if rc != 0:
            raise ProbeError("%s failed: %s (%d)" % (name, self.nccl.ncclGetErrorString(rc).decode(), rc))

    def versions(self):
        nccl, runtime, driver = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        self.nccl_call("ncclGetVersion", ctypes.byref(nccl))
        self.cuda_call("cudaRuntimeGetVersion", ctypes.byref(runtime))
        self.cuda_call("cudaDriverGetVersion", ctypes.byref(driver))     # 0 when there is no driver
        return [("nccl", version_text(nccl.value, nccl=True)), ("cuda-runtime", version_text(runtime.value)),
                ("cuda-driver", version_text(driver.value))]

    def device_count(self):
        """(count, None), or (0, why) when the node has no usable GPU."""
        count = ctypes.c_int(0)
        rc = self.cuda.cudaGetDeviceCount(ctypes.byref(count))
        if rc in NO_GPU_ERRORS:
            return 0, "%s: %s" % (NO_GPU_ERRORS[rc], self.cuda.cudaGetErrorString(rc).decode())
        if rc != 0:
            raise ProbeError("cudaGetDeviceCount failed: %s (%d)" % (self.cuda.cudaGetErrorString(rc).decode(), rc))
        return count.value, (None if count.value else "no CUDA device")

    def all_reduce(self, gpus, nbytes, iterations):
        """Sums a buffer of (rank + 1) floats over `gpus` GPUs `iterations` times -> (seconds per all-reduce, number
        of wrong elements after the last one)."""
        count = nbytes // 4
        comms = (ctypes.c_void_p * gpus)()
        streams = [ctypes.c_void_p() for _i in range(gpus)]
        buffers = [ctypes.c_void_p() for _i in range(gpus)]
        self.nccl_call("ncclCommInitAll", comms, gpus, (ctypes.c_int * gpus)(*range(gpus)))
        try:
            for rank in range(gpus):
                self.cuda_call("cudaSetDevice", rank)
                self.cuda_call("cudaStreamCreate", ctypes.byref(streams[rank]))
                self.cuda_call("cudaMalloc", ctypes.byref(buffers[rank]), ctypes.c_size_t(count * 4))
                host = array.array("f", [float(rank + 1)]) * count
                self.cuda_call("cudaMemcpy", buffers[rank], ctypes.c_void_p(host.buffer_info()[0]),
                               ctypes.c_size_t(count * 4), MEMCPY_HOST_TO_DEVICE)
            # The first round's sum is checked (in place: the buffers hold it after); later rounds are timed.
            self._round(comms, streams, buffers, count)
            back = array.array("f", [0.0]) * count
            self.cuda_call("cudaSetDevice", 0)
            self.cuda_call("cudaMemcpy", ctypes.c_void_p(back.buffer_info()[0]), buffers[0],
                           ctypes.c_size_t(count * 4), MEMCPY_DEVICE_TO_HOST)
            wrong = count - back.count(float(gpus * (gpus + 1) // 2))
            started = time.monotonic()
            for _i in range(iterations):
                self._round(comms, streams, buffers, count)
            return (time.monotonic() - started) / max(1, iterations), wrong
        finally:
            for rank in range(gpus):
                if buffers[rank].value:
                    self.cuda.cudaFree(buffers[rank])
                if streams[rank].value:
                    self.cuda.cudaStreamDestroy(streams[rank])
                if comms[rank]:
                    self.nccl.ncclCommDestroy(ctypes.c_void_p(comms[rank]))

    def _round(self, comms, streams, buffers, count):
        self.nccl_call("ncclGroupStart")
        for rank, comm in enumerate(comms):
            self.nccl_call("ncclAllReduce", buffers[rank], buffers[rank], ctypes.c_size_t(count), NCCL_FLOAT32,
                           NCCL_SUM, ctypes.c_void_p(comm), streams[rank])
        self.nccl_call("ncclGroupEnd")
        for rank, stream in enumerate(streams):
            self.cuda_call("cudaSetDevice", rank)
            self.cuda_call("cudaStreamSynchronize", stream)


def main(argv=None, stack_factory=Stack, out=None):
    out = out or sys.stdout
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--versions", action="store_true", help="print the versions only")
    parser.add_argument("--bytes", type=int, default=256 << 20, help="all-reduce size (default 256 MiB)")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs to use (default: every visible one)")
    args = parser.parse_args(argv)
    try:
        stack = stack_factory()
        for key, value in stack.versions():
            out.write("%s: %s\n" % (key, value))
        if args.versions:
            return OK
        visible, why = stack.device_count()
        out.write("gpus: %d\n" % visible)
        if not visible:
            out.write("no-gpu: %s\n" % why)
            return NO_GPU
        gpus = min(args.gpus, visible) if args.gpus > 0 else visible
        seconds, wrong = stack.all_reduce(gpus, max(4, args.bytes), max(1, args.iterations))
    except ProbeError as e:
        out.write("error: %s\n" % e)
        return FAILED
    algbw = args.bytes / seconds / 1e9 if seconds > 0 else 0.0
    out.write("all-reduce: bytes %d gpus %d time-ms %.3f algbw-GBs %.2f busbw-GBs %.2f wrong %d\n"
              % (args.bytes, gpus, seconds * 1e3, algbw, bus_bandwidth(algbw, gpus), wrong))
    return WRONG if wrong else OK


if __name__ == "__main__":
    raise SystemExit(main())
