"""The end of a CI run (.ci/run): each stage's start and time, the slowest test files, the test files that used the
most CPU (tests/cpu_use.py's junit property), and one closing line with the totals of every pytest stage (its
--junitxml under the log folder).

    python3 tools/ci_summary.py build/ci
"""
import collections
import os
import sys
import xml.etree.ElementTree as ET


def _bash_seconds(text):
    """'1m2.500s' (bash's `times`) -> 62.5"""
    minutes, seconds = text.rstrip("s").split("m")
    return int(minutes) * 60 + float(seconds)


def stages(folder):
    """(name, start, seconds, exit status, CPU seconds or None) of each stage, by start."""
    rows = []
    with open(os.path.join(folder, "times")) as f:
        for line in f:
            name, started, seconds, rc, *used = line.split()
            cpu = sum(_bash_seconds(t) for t in used) if len(used) == 2 else None
            rows.append((name, int(started), int(seconds), int(rc), cpu))
    return sorted(rows, key=lambda r: r[1])


def machine_busy(folder):
    """(busy CPU seconds, all CPU seconds) of the whole machine between cpu-start and cpu-end (/proc/stat's first
    line: user nice system idle iowait irq softirq steal ..., in USER_HZ), or None without both."""
    try:
        with open(os.path.join(folder, "cpu-start")) as f:
            start = [int(v) for v in f.read().split()[1:9]]
        with open(os.path.join(folder, "cpu-end")) as f:
            end = [int(v) for v in f.read().split()[1:9]]
    except (OSError, ValueError):
        return None
    used = [b - a for a, b in zip(start, end)]
    hertz = os.sysconf("SC_CLK_TCK")
    return (sum(used) - used[3] - used[4]) / hertz, sum(used) / hertz


def cpu_reference(folder):
    """The line tools/cpu_ref.py wrote at the run's start (the CPU's speed then), or None."""
    try:
        with open(os.path.join(folder, "cpu-ref")) as f:
            line = f.read().strip()
    except OSError:
        return None
    return line if line.startswith("cpu-ref ") else None


def test_cases(folder):
    """(file, seconds, outcome, CPU seconds or None) of every test case of every stage's junit XML."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".xml"):
            continue
        for case in ET.parse(os.path.join(folder, name)).getroot().iter("testcase"):
            module = [p for p in case.get("classname", "").split(".") if p]
            tests = [i for i, p in enumerate(module) if p.startswith("test_")]
            where = "/".join(module[:tests[0] + 1]) + ".py" if tests else case.get("classname", "?")
            kinds = {child.tag for child in case}
            outcome = ("failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed")
            cpu = [p.get("value") for p in case.iter("property") if p.get("name") == "cpu_seconds"]
            yield where, float(case.get("time") or 0), outcome, float(cpu[0]) if cpu else None


def main(folder):
    print("=== stages (start and length, minutes:seconds from the start of .ci/run; CPU: minutes of user and system "
          "time of what the stage waited for)")
    for name, started, seconds, rc, cpu in stages(folder):
        failed = "" if rc == 0 else "  FAILED (exit %d)" % rc
        used = "" if cpu is None else "  CPU %5.1f min" % (cpu / 60)
        print("  %-22s start %3d:%02d  took %3d:%02d%s%s"
              % (name, started // 60, started % 60, seconds // 60, seconds % 60, used, failed))
    busy = machine_busy(folder)
    if busy:
        print("  the machine: %.1f of %.1f CPU minutes busy (%.0f%%; every process, daemons included)"
              % (busy[0] / 60, busy[1] / 60, 100 * busy[0] / busy[1] if busy[1] else 0))
    reference = cpu_reference(folder)
    if reference:
        print("  the CPU's speed at the start: %s (tools/cpu_ref.py, one core; lower is faster)" % reference)
    per_file, cpu_per_file, counts = collections.Counter(), collections.Counter(), collections.Counter()
    for where, seconds, outcome, cpu in test_cases(folder):
        per_file[where] += seconds
        if cpu is not None:
            cpu_per_file[where] += cpu
        counts[outcome] += 1
    print("=== the slowest test files (seconds of their tests, summed; the workers run files side by side)")
    for where, seconds in per_file.most_common(25):
        print("  %7.0f  %s" % (seconds, where))
    if cpu_per_file:
        print("=== the test files that used the most CPU (seconds of pytest's own and its waited-for children's user "
              "and system time; %.1f CPU minutes in all)" % (sum(cpu_per_file.values()) / 60))
        for where, seconds in cpu_per_file.most_common(25):
            print("  %7.0f  %s" % (seconds, where))
    print("tests: %d passed, %d failed, %d skipped" % (counts["passed"], counts["failed"], counts["skipped"]))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
