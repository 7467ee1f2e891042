"""A reader of Slurm config files of our own that follows Slurm's s_p_parse_file (comments, line continuations,
key=value words), so tests check what slurmctld would read rather than what our renderer meant to write."""
import re

_KEYVALUE = re.compile(r'[ \t\n\v\f\r]*([A-Za-z0-9_.]+)[ \t\n\v\f\r]*([-*+/]?)=[ \t\n\v\f\r]*'
                       r'(?:"([^"]*)"|([^ \t\n\v\f\r]+))(?=[ \t\n\v\f\r]|$)')


def slurm_lines(text):
    """Logical lines as s_p_parse_file sees them: comments cut at an unescaped '#', trailing-backslash lines joined,
    backslashes dropped; empty lines skipped."""
    out, pending = [], ""
    for raw in text.split("\n"):
        line, backslashes = [], 0
        for ch in raw:
            if ch == "#" and backslashes % 2 == 0:
                break
            backslashes = backslashes + 1 if ch == "\\" else 0
            line.append(ch)
        line = "".join(line)
        stripped = line.rstrip(" \t\r\v\f")
        tail = len(stripped) - len(stripped.rstrip("\\"))
        if tail % 2 == 1:
            pending += stripped[:-1]
            continue
        line = re.sub(r"\\(.)", r"\1", pending + line, flags=re.S)
        pending = ""
        if line.strip():
            out.append(line)
    return out


def parse_slurm_line(line):
    """[(key, value)] of one logical line, as _keyvalue_regex reads it word after word; raises on leftovers."""
    pairs, pos = [], 0
    while True:
        match = _KEYVALUE.match(line, pos)
        if not match:
            break
        assert match.group(2) == "", "an operator (+=, -=, ...) was written: %r" % line
        pairs.append((match.group(1), match.group(3) if match.group(3) is not None else match.group(4)))
        pos = match.end()
    assert line[pos:].strip() == "", "left over after parsing: %r in %r" % (line[pos:], line)
    return pairs


def parse_slurm_file(text):
    return [parse_slurm_line(line) for line in slurm_lines(text)]
