"""Where a run's CPU went, by command: BSD process accounting (acct(2), the kernel's CONFIG_BSD_PROCESS_ACCT) writes
one record per ended process with its user and system time, daemons and short-lived children included, which
bash's `times` in .ci/run misses (a daemon reparented to init is nobody's waited-for child).

    python3 tools/acct_summary.py on FILE     # start accounting into FILE (machine-wide: one file at a time)
    python3 tools/acct_summary.py off         # stop it
    python3 tools/acct_summary.py FILE [N]    # the N commands (default 25) that used the most CPU

.ci/run does this when SOPERATOR_CI_ACCT names a file (it is off by default: accounting is one switch for the
whole machine, and another run on it may own it). Records are acct_v3 (linux/acct.h): 64 bytes, times as comp_t
(13-bit mantissa, 3-bit base-8 exponent) in AHZ = 100 ticks a second.
"""
import collections
import ctypes
import os
import struct
import sys

RECORD = struct.Struct("<BBHIIIIIIf8H16s")   # flag version tty exitcode uid gid pid ppid btime etime, 8 comp_t, comm
AHZ = 100
ACCT_V3 = 3


def comp_t(value):
    return (value & 0x1FFF) << (3 * (value >> 13))


def records(path):
    """(command, cpu seconds, elapsed seconds, pid, ppid) of each acct_v3 record in the file."""
    with open(path, "rb") as f:
        data = f.read()
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        if fields[1] & 0x0F != ACCT_V3:
            raise ValueError("%s: record at %d is not acct_v3 (version %d)" % (path, offset, fields[1]))
        pid, ppid, etime = fields[6], fields[7], fields[9]
        utime, stime = comp_t(fields[10]), comp_t(fields[11])
        command = fields[18].split(b"\0", 1)[0].decode("utf-8", "replace")
        yield command, (utime + stime) / AHZ, etime / AHZ, pid, ppid


def by_command(path):
    """{command: [cpu seconds, processes]}"""
    totals = collections.defaultdict(lambda: [0.0, 0])
    for command, cpu, _elapsed, _pid, _ppid in records(path):
        totals[command][0] += cpu
        totals[command][1] += 1
    return totals


def switch(path):
    """acct(2): accounting into path (created if missing), or off with None."""
    if path is not None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(None if path is None else os.fsencode(path)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, "acct(%s): %s" % (path, os.strerror(errno)))


def main(argv):
    if argv[:1] == ["on"] and len(argv) == 2:
        switch(argv[1])
        return 0
    if argv == ["off"]:
        switch(None)
        return 0
    if len(argv) not in (1, 2):
        sys.stderr.write(__doc__)
        return 2
    totals = by_command(argv[0])
    everything = sum(cpu for cpu, _count in totals.values())
    print("=== CPU by command (process accounting: %.1f CPU minutes in %d processes)"
          % (everything / 60, sum(count for _cpu, count in totals.values())))
    for command, (cpu, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:int(argv[1]) if len(argv) > 1 else 25]:
        print("  %7.1f min  %5.1f%%  %7d  %s" % (cpu / 60, 100 * cpu / everything if everything else 0, count, command))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
