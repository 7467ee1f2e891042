"""How fast this machine's CPU is right now: the best of 3 runs of a fixed workload, one core, in seconds (lower is
faster). .ci/run takes it at its start, before any stage runs, so that two runs' times can be compared: two cold
runs of the same work two hours apart took 17.6 and 24.0 CPU minutes to build k8s, with 1-2% steal time.

    python3 tools/cpu_ref.py     ->  "cpu-ref 0.328 s (python 0.221, zlib 0.108)"   (here, a quiet machine)
"""
import time
import zlib

DATA = bytes(range(256)) * 4096        # 1 MiB, compressible: zlib's level 6 does real work on it


def python_loop(n=1_500_000):
    """The interpreter: what the suites' Python spends its time on."""
    total = 0
    for i in range(n):
        total += (i * 7) % 13
    return total


def compress(rounds=12):
    """Compiled code over memory: what the Go builds and the image tar/gzip steps are closer to."""
    for _round in range(rounds):
        zlib.compress(DATA, 6)


def best_of(work, runs=3):
    best = None
    for _run in range(runs):
        started = time.perf_counter()
        work()
        took = time.perf_counter() - started
        best = took if best is None else min(best, took)
    return best


def main():
    python, packed = best_of(python_loop), best_of(compress)
    print("cpu-ref %.3f s (python %.3f, zlib %.3f)" % (python + packed, python, packed))


if __name__ == "__main__":
    main()
