"""Slurm hostlist expand/compress: concrete cases, properties, and agreement with the real scontrol (Slurm 22.05)."""
import random
import re
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ansible_collections.soperator.slurm.plugins.module_utils.slurm_syntax.hostlist import (
    DEFAULT_MAX_HOSTS, HostlistError, compress, expand)

# ---------------------------------------------------------------------------------------------------
# expand: concrete cases

EXPAND_CASES = [
    ("gpu-0", ["gpu-0"]),
    ("gpu-[0-3]", ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]),
    ("gpu-[0-3,7,10-12]", ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-7", "gpu-10", "gpu-11", "gpu-12"]),
    ("node[001-003]", ["node001", "node002", "node003"]),
    ("node[001-010]", ["node%03d" % i for i in range(1, 11)]),
    ("n[08-11]", ["n08", "n09", "n10", "n11"]),
    ("n[98-101]", ["n98", "n99", "n100", "n101"]),
    ("n[099-100]", ["n099", "n100"]),
    ("n[1-010]", ["n%d" % i for i in range(1, 11)]),           # width comes from the low end, as in Slurm
    ("n[001-10]", ["n%03d" % i for i in range(1, 11)]),
    ("n[01-1]", ["n01"]),
    ("n[0]", ["n0"]),
    ("n[000]", ["n000"]),
    ("n[5-5]", ["n5"]),
    ("n[01-02],n[1-2]", ["n01", "n02", "n1", "n2"]),
    ("a,b", ["a", "b"]),
    ("a b\tc\nd", ["a", "b", "c", "d"]),
    ("a, b,,c,", ["a", "b", "c"]),
    ("login-0,gpu-[1-2],cpu-3", ["login-0", "gpu-1", "gpu-2", "cpu-3"]),
    ("[1-3]", ["1", "2", "3"]),
    ("[01-02]", ["01", "02"]),
    ("a1[1-2]", ["a11", "a12"]),
    ("a[1,1,2]", ["a1", "a1", "a2"]),                            # duplicates and order kept, as in Slurm
    ("a[3,1-2]", ["a3", "a1", "a2"]),
    ("n1,n1", ["n1", "n1"]),
    ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
    ("a[1-2][3-4]", ["a13", "a14", "a23", "a24"]),
    ("a[1-2]-x[3-4]", ["a1-x3", "a1-x4", "a2-x3", "a2-x4"]),
    ("x[1-2]y[01-02]", ["x1y01", "x1y02", "x2y01", "x2y02"]),
    ("a[1-2,4]x[7]", ["a1x7", "a2x7", "a4x7"]),
    # Slurm's order for three or more brackets: last fastest, then first, second, ...
    ("a[1-2]b[3-4]c[5-6]", ["a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"]),
    ("a[1-3]b[4-5]c[6-7]", ["a1b4c6", "a1b4c7", "a2b4c6", "a2b4c7", "a3b4c6", "a3b4c7",
                            "a1b5c6", "a1b5c7", "a2b5c6", "a2b5c7", "a3b5c6", "a3b5c7"]),
    ("a;b", ["a;b"]),
    ("n4294967295,n[4294967296-4294967297]", ["n4294967295", "n4294967296", "n4294967297"]),
    ("a1b", ["a1b"]),
]


@pytest.mark.parametrize("expr,names", EXPAND_CASES)
def test_expand(expr, names):
    assert expand(expr) == names


EXPAND_ERRORS = [
    ("", "empty hostlist"),
    ("   ", "empty hostlist"),
    (",", "empty hostlist"),
    ("a[1-2", "unclosed '['"),
    ("a[1-2],b[3", "unclosed '['"),
    ("a]", "unbalanced ']'"),
    ("a[1-2]]", "unbalanced ']'"),
    ("a[1-2]]b", "unbalanced ']'"),
    ("a[[1-2]]", "nested '['"),
    ("a[3-1]", "reversed range '3-1'"),
    ("a[1,10-09]", "reversed range '10-09'"),
    ("a[]", "empty brackets"),
    ("a[1,]", "empty range"),
    ("a[,1]", "empty range"),
    ("a[1-]", "invalid range '1-'"),
    ("a[-1]", "invalid range '-1'"),
    ("a[1-2-3]", "invalid range '1-2-3'"),
    ("a[x-y]", "invalid range 'x-y'"),
    ("a[+1]", "invalid range '+1'"),
    ("a[1 - 2]", "whitespace inside brackets"),
    ("a[ 1-2]", "whitespace inside brackets"),
    ("a\rb", "unexpected whitespace character '\\r'"),
    ("a\u00a0b", "unexpected whitespace character"),
    ("a[1-2]b", "text 'b' after the last ']'"),
    ("a[1-3]x,b", "text 'x' after the last ']'"),
    ("a-[1-2]-b", "text '-b' after the last ']'"),
    ("a[1-2]b[3]c", "text 'c' after the last ']'"),
]


@pytest.mark.parametrize("expr,message", EXPAND_ERRORS)
def test_expand_rejects(expr, message):
    with pytest.raises(HostlistError) as err:
        expand(expr)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("value", [None, 1, ["a[1-2]"], b"a[1-2]"])
def test_expand_rejects_non_strings(value):
    with pytest.raises(HostlistError, match="must be a string"):
        expand(value)


def test_max_hosts():
    assert DEFAULT_MAX_HOSTS == 1000000
    assert len(expand("n[1-5]", max_hosts=5)) == 5
    with pytest.raises(HostlistError, match="more than 4 hosts"):
        expand("n[1-5]", max_hosts=4)
    # the bound covers the whole list and the product of brackets, and is checked before anything is built
    with pytest.raises(HostlistError, match="more than 5 hosts"):
        expand("a[1-3],b[1-3]", max_hosts=5)
    with pytest.raises(HostlistError, match="more than 1000000 hosts"):
        expand("n[0-999]x[0-999]y[0-9]")
    with pytest.raises(HostlistError, match="more than 1000000 hosts"):
        expand("n[1-99999999999999999999999999]")
    assert len(expand("n[1-1000000]")) == 1000000
    assert len(expand("n[1-1000001]", max_hosts=None)) == 1000001
    for bad in (0, -1, True, "10", 1.5):
        with pytest.raises(HostlistError, match="max_hosts"):
            expand("n1", max_hosts=bad)


# ---------------------------------------------------------------------------------------------------
# compress: concrete cases

COMPRESS_CASES = [
    ([], ""),
    (["n1"], "n1"),
    (["n1", "n1"], "n1"),
    (["n1", "n2", "n3", "n5"], "n[1-3,5]"),
    (["n3", "n1", "n2"], "n[1-3]"),
    (["gpu-%d" % i for i in (12, 0, 1, 2, 3, 7, 10, 11)], "gpu-[0-3,7,10-12]"),
    (["node%03d" % i for i in range(1, 101)], "node[001-100]"),
    (["node%03d" % i for i in range(1, 11)], "node[001-010]"),
    (["n9", "n10"], "n[9-10]"),
    (["n09", "n10"], "n[09-10]"),
    (["n08", "n09", "n10", "n100"], "n[08-10,100]"),
    (["n99", "n100"], "n[99-100]"),
    (["n099", "n100"], "n[099-100]"),
    (["n01", "n02", "n1", "n2"], "n[1-2,01-02]"),           # widths kept apart
    (["n1", "n01", "n001"], "n[1,01,001]"),
    (["n0", "n00"], "n[0,00]"),
    (["n9", "n09", "n10"], "n[9,09-10]"),
    (["n007", "n08", "n9"], "n[9,08,007]"),
    (["n009", "n09", "n10", "n100"], "n[09-10,009,100]"),    # an unpadded number joins the widest group it fits
    (["a1", "b1", "a2"], "a[1-2],b1"),
    (["b", "a", "a"], "a,b"),
    (["a", "a1", "a2"], "a,a[1-2]"),
    (["a1b", "a1b2"], "a1b,a1b2"),
    (["x-1", "x-2", "x_3"], "x-[1-2],x_3"),
    (["rack10-n1", "rack2-n1", "rack2-n2"], "rack2-n[1-2],rack10-n1"),
    (["1", "2", "3"], "[1-3]"),
    (["01", "02"], "[01-02]"),
    (["7"], "7"),
    (["login-0", "worker01", "worker02", "worker03"], "login-0,worker[01-03]"),
    (["n12345678901234567890", "n12345678901234567891"], "n[12345678901234567890-12345678901234567891]"),
    (("n%d" % i for i in (2, 1)), "n[1-2]"),                 # any iterable
]


@pytest.mark.parametrize("names,text", COMPRESS_CASES)
def test_compress(names, text):
    assert compress(names) == text


@pytest.mark.parametrize("names,message", [
    (["n1", ""], "empty host name"),
    (["n[1-2]"], "contains '['"),
    (["a]"], "contains ']'"),
    (["a,b"], "contains ','"),
    (["a b"], "contains ' '"),
    (["a\tb"], "contains '\\t'"),
    (["a\rb"], "contains '\\r'"),
    (["n1", 2], "must be a string"),
    ([None], "must be a string"),
    ("n1,n2", "not the string"),
])
def test_compress_rejects(names, message):
    with pytest.raises(HostlistError) as err:
        compress(names)
    assert message in str(err.value)


CANONICAL = [
    "gpu-[0-3,7,10-12]", "node[001-100]", "n[1-2,01-02]", "a,a[1-2],b1", "login-0,worker[01-03]", "n[08-10,100]",
    "[1-3]", "n1", "rack2-n[1-2],rack10-n1", "n[9,09-10]", "x-[1-2],x_3", "n[0,00,000]", "a1b,a1b2",
]


@pytest.mark.parametrize("text", CANONICAL)
def test_canonical_inputs_round_trip(text):
    assert compress(expand(text)) == text


# ---------------------------------------------------------------------------------------------------
# properties

PREFIX = st.from_regex(r"\A(|[a-z][a-z_-]{0,3}([0-9]{1,2}[a-z-]{1,2})?)\Z")
NUMBER = st.one_of(st.integers(0, 30), st.integers(90, 130), st.integers(995, 1005), st.integers(0, 10 ** 6))


@st.composite
def host_names(draw, max_size=40):
    prefixes = draw(st.lists(PREFIX, min_size=1, max_size=3, unique=True))
    names = []
    for dummy in range(draw(st.integers(1, max_size))):
        prefix = draw(st.sampled_from(prefixes))
        if prefix and draw(st.integers(0, 9)) == 0:
            names.append(prefix)        # a name without a number
            continue
        start = draw(NUMBER)
        width = draw(st.integers(0, 4))
        for value in range(start, start + draw(st.integers(1, 4))):  # runs, so that ranges happen
            names.append(prefix + ("%0*d" % (width, value)))
    return names


def _natural_key(text):
    return [(int(p), p) if p.isdigit() else p for p in re.split(r"([0-9]+)", text)]


def reference_order(names):
    """The documented order of compress(), computed independently: sorted unique names."""
    unique = set(names)
    split = {}
    for name in unique:
        digits = re.search(r"[0-9]*$", name).group()
        split[name] = (name[:len(name) - len(digits)], digits)
    padded = {}
    for prefix, digits in split.values():
        if digits.startswith("0") and len(digits) > 1:
            padded.setdefault(prefix, set()).add(len(digits))

    def key(name):
        prefix, digits = split[name]
        if not digits:
            return (_natural_key(prefix), 0, 0, 0)
        if digits.startswith("0") and len(digits) > 1:
            group = len(digits)
        else:
            group = max([w for w in padded.get(prefix, ()) if w <= len(digits)] or [0])
        return (_natural_key(prefix), 1, group, int(digits))

    return sorted(unique, key=key)


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(host_names())
def test_expand_of_compress_is_the_sorted_unique_names(names):
    text = compress(names)
    expanded = expand(text)
    assert len(expanded) == len(set(expanded))
    assert set(expanded) == set(names)
    assert expanded == reference_order(names)


@PROPERTY
@given(host_names(), st.randoms(use_true_random=False))
def test_compress_ignores_order_and_duplicates(names, rnd):
    shuffled = names + names[: len(names) // 2]
    rnd.shuffle(shuffled)
    assert compress(shuffled) == compress(names)


@PROPERTY
@given(host_names())
def test_compress_of_expand_is_identity_on_canonical_text(names):
    text = compress(names)
    assert compress(expand(text)) == text


@PROPERTY
@given(host_names())
def test_single_width_runs_compress_to_one_bracket(names):
    # all names of one prefix and one width (no leading zeros) compress to sorted numeric ranges
    values = sorted(set(int(re.search(r"[0-9]*$", n).group() or 0) for n in names))
    text = compress(["h%d" % v for v in values])
    assert expand(text) == ["h%d" % v for v in values]
    if len(values) > 1:
        assert text.count("[") == 1


# ---------------------------------------------------------------------------------------------------
# the real scontrol (Slurm 22.05)

SCONTROL = shutil.which("scontrol")
needs_scontrol = pytest.mark.skipif(SCONTROL is None, reason="scontrol (slurm-client) is not installed")


@pytest.fixture(scope="session")
def scontrol(tmp_path_factory):
    """Run scontrol offline: 'show hostnames/hostlist' only need some readable slurm.conf."""
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    conf.write_text("ClusterName=test\nSlurmctldHost=localhost\n")
    env = {"SLURM_CONF": str(conf), "PATH": "/usr/bin:/bin"}

    def run(command, arg):
        assert not arg.startswith("-"), "scontrol would read %r as an option" % (arg,)
        proc = subprocess.run([SCONTROL, "show", command, arg], env=env, capture_output=True, timeout=30, check=False)
        proc.stdout, proc.stderr = proc.stdout.decode(), proc.stderr.decode()  # bytes: keep '\r' as it is
        # scontrol prints "Invalid hostlist" on stdout and still exits 0
        if proc.returncode != 0 or "Invalid hostlist" in proc.stdout or proc.stderr.strip():
            raise ValueError("scontrol show %s %r: rc=%d %s %s"
                             % (command, arg, proc.returncode, proc.stdout, proc.stderr))
        return proc.stdout

    probe = run("hostnames", "a[1-2]")
    if probe != "a1\na2\n":
        pytest.skip("scontrol does not work offline here: %r" % probe)
    return run


def scontrol_hostnames(scontrol, expr):
    out = scontrol("hostnames", expr)
    return out[:-1].split("\n") if out else []   # one name a line; a name may hold odd characters


def scontrol_hostlist(scontrol, names):
    return scontrol("hostlist", ",".join(names)).strip()


@needs_scontrol
@pytest.mark.parametrize("expr,names", [c for c in EXPAND_CASES if c[0] not in ("a, b,,c,",)])
def test_expand_cases_agree_with_scontrol(scontrol, expr, names):
    assert scontrol_hostnames(scontrol, expr) == names == expand(expr)


# Where we are stricter than Slurm 22.05 on purpose: it reads these as something, we call them typos.
STRICTER_THAN_SLURM = {
    "": [],                 # nothing; we: empty hostlist
    "   ": [],
    ",": [],
    "a[1-2": ["a]"],        # garbage
    "a[1-2],b[3": ["a1", "a2", "b]"],
    "a]": ["a]"],           # a literal ']'
    "a[1-]": ["a1"],        # an open range read as 1-1
    "a[1 - 2]": ["a01", "a02"],  # the blanks count towards the width
    "a[ 1-2]": ["a01", "a02"],
    "a[+1]": ["a01"],       # strtoul() takes a sign, and the sign counts towards the width
    "a\rb": ["a\rb"],      # a name with a carriage return in it
    "a\u00a0b": ["a\u00a0b"],
}


@needs_scontrol
@pytest.mark.parametrize("expr", [e for e, _m in EXPAND_ERRORS])
def test_errors_agree_with_scontrol(scontrol, expr):
    if expr in STRICTER_THAN_SLURM:
        assert scontrol_hostnames(scontrol, expr) == STRICTER_THAN_SLURM[expr]
    else:
        with pytest.raises(ValueError, match="Invalid hostlist"):
            scontrol_hostnames(scontrol, expr)


@needs_scontrol
@pytest.mark.parametrize("names,text", [c for c in COMPRESS_CASES if c[0] and not isinstance(c[0], type(x for x in ()))
                                        and len(c[0][-1]) < 20])
def test_compress_cases_agree_with_scontrol(scontrol, names, text):
    # scontrol show hostlist neither sorts nor dedupes: give it our canonical order
    assert scontrol_hostlist(scontrol, reference_order(names)) == text


@needs_scontrol
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(host_names(max_size=15))
def test_generated_names_agree_with_scontrol(scontrol, names):
    text = compress(names)
    assert scontrol_hostnames(scontrol, text) == expand(text)
    assert scontrol_hostlist(scontrol, expand(text)) == text


@st.composite
def expressions(draw):
    parts = []
    for dummy in range(draw(st.integers(1, 3))):
        text = draw(PREFIX)
        brackets = draw(st.integers(0 if text else 1, 3))
        for b in range(brackets):
            if b:
                text += draw(st.from_regex(r"\A[a-z-]{0,2}\Z"))
            items = []
            for dummy in range(draw(st.integers(1, 3))):
                lo = draw(st.integers(0, 120))
                hi = lo + draw(st.integers(0, 12))
                width = draw(st.integers(0, 4))
                lo_text = "%0*d" % (width, lo)
                items.append(lo_text if hi == lo and draw(st.booleans()) else "%s-%0*d" % (lo_text, width, hi))
            text += "[%s]" % ",".join(items)
        parts.append(text)
    return ",".join(parts)


@needs_scontrol
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(expressions())
def test_generated_expressions_agree_with_scontrol(scontrol, expr):
    assume(len(expand(expr, max_hosts=None)) <= 5000)
    assert expand(expr) == scontrol_hostnames(scontrol, expr)


@needs_scontrol
def test_random_malformed_expressions_agree_with_scontrol(scontrol):
    """Mutations of valid expressions: whenever we accept one, scontrol reads it the same way."""
    rnd = random.Random(22_05)
    alphabet = "ab-[],0123456789"
    checked = 0
    for dummy in range(300):
        expr = "".join(rnd.choice(alphabet) for dummy in range(rnd.randint(1, 10)))
        if expr.startswith("-"):
            continue
        try:
            ours = expand(expr, max_hosts=5000)
        except HostlistError:
            continue
        checked += 1
        assert scontrol_hostnames(scontrol, expr) == ours, expr
    assert checked > 20
