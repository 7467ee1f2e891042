"""The end of a CI run (.ci/run): each stage's start and time, the slowest test files, and one closing line with the
totals of every pytest stage (its --junitxml under the log folder).

    python3 tools/ci_summary.py build/ci
"""
import collections
import os
import sys
import xml.etree.ElementTree as ET


def stages(folder):
    rows = []
    with open(os.path.join(folder, "times")) as f:
        for line in f:
            name, started, seconds, rc = line.split()
            rows.append((name, int(started), int(seconds), int(rc)))
    return sorted(rows, key=lambda r: r[1])


def test_cases(folder):
    """(file, seconds, outcome) of every test case of every stage's junit XML."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".xml"):
            continue
        for case in ET.parse(os.path.join(folder, name)).getroot().iter("testcase"):
            module = [p for p in case.get("classname", "").split(".") if p]
            tests = [i for i, p in enumerate(module) if p.startswith("test_")]
            where = "/".join(module[:tests[0] + 1]) + ".py" if tests else case.get("classname", "?")
            kinds = {child.tag for child in case}
            outcome = ("failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed")
            yield where, float(case.get("time") or 0), outcome


def main(folder):
    print("=== stages (start and length, minutes:seconds from the start of .ci/run)")
    for name, started, seconds, rc in stages(folder):
        failed = "" if rc == 0 else "  FAILED (exit %d)" % rc
        print("  %-22s start %3d:%02d  took %3d:%02d%s"
              % (name, started // 60, started % 60, seconds // 60, seconds % 60, failed))
    per_file, counts = collections.Counter(), collections.Counter()
    for where, seconds, outcome in test_cases(folder):
        per_file[where] += seconds
        counts[outcome] += 1
    print("=== the slowest test files (seconds of their tests, summed; the workers run files side by side)")
    for where, seconds in per_file.most_common(25):
        print("  %7.0f  %s" % (seconds, where))
    print("tests: %d passed, %d failed, %d skipped" % (counts["passed"], counts["failed"], counts["skipped"]))
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
