"""spec/quantity.py reads every quantity to the value kubernetes.utils.parse_quantity gives (the library is the
oracle here; the module has its own suffix arithmetic so that a module run does not import the whole client), and
leaves the kubernetes package unimported."""
import subprocess
import sys
from decimal import localcontext

from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as library_parse_quantity
from repo_root import ROOT

from ansible_collections.soperator.slurm.plugins.module_utils.spec import quantity as q

EXAMPLES = ["0", "1", "-1", "+7", "1.5", ".5", "5.", "500m", "100n", "3u", "2k", "1M", "16G", "2T", "1P", "1E",
            "1Ki", "1.5Mi", "1600Gi", "3Ti", "2Pi", "7Ei", "0.001Ki", "1e3", "1E3", "2e-3", "-1.25e+2", "7e17",
            "9223372036854775807"]


def _library(value):
    with localcontext(q._CONTEXT):
        return +library_parse_quantity(value)


def test_every_suffix_reads_as_the_library_reads_it():
    for value in EXAMPLES:
        assert q.parse_quantity(value) == _library(value), value
    assert q.parse_quantity("1Gi") == 2 ** 30 and q.parse_quantity("500m") * 2 == 1


@settings(max_examples=300, deadline=None)
@given(st.from_regex(q.QUANTITY_PATTERN, fullmatch=True))
def test_any_quantity_of_the_grammar_reads_as_the_library_reads_it(value):
    try:
        ours = q.parse_quantity(value)
    except q.QuantityError:
        return          # our bounds (length, exponent, 2^63-1): the library has none
    assert ours == _library(value), value


def test_reading_a_quantity_imports_no_kubernetes():
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from ansible_collections.soperator.slurm.plugins.module_utils.spec import quantity\n"
            "assert quantity.to_mib('1Gi') == 1024 and quantity.to_cpus('2') == 2\n"
            "print('kubernetes' in sys.modules)" % (ROOT + "/collections"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
