import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import slices
from harness.errors import BadInput


def test_table_i_is_the_papers():
    got = {s.name: (s.rtt_ms, [(vm.site, vm.gpus, vm.gpu) for vm in s.vms]) for s in slices.table_i()}
    assert got == {
        "TACC-TACC": (0.1, [("TACC", 2, "RTX6000"), ("TACC", 2, "T4")]),
        "UTAH-GPN": (20.2, [("UTAH", 2, "RTX6000"), ("GPN", 2, "T4")]),
        "UTAH-MASS": (57.4, [("UTAH", 2, "RTX6000"), ("MASS", 2, "RTX6000")]),
        "BRIS-STAR": (95.9, [("BRIS", 2, "A30"), ("STAR", 2, "RTX6000")]),
        "GAT-AMST": (103.0, [("GAT", 2, "A30"), ("AMST", 2, "A30")]),
    }


GOOD = 'name = "x"\nrtt_ms = 10\n[[vm]]\nsite = "A"\ngpus = 2\ngpu = "T4"\n'


@pytest.mark.parametrize("text, message", [
    (GOOD.replace("rtt_ms = 10\n", ""), "slice.toml: missing field 'rtt_ms'"),
    (GOOD.replace('gpu = "T4"', 'gpu = "V100"'), "slice.toml: field 'vm[0].gpu' must be one of T4"),
    (GOOD.replace("gpus = 2", "gpus = 0"), "slice.toml: field 'vm[0].gpus' must be >= 1, got 0"),
    (GOOD.replace("gpus = 2", 'gpus = "two"'), "slice.toml: field 'vm[0].gpus' must be an integer, got 'two'"),
    (GOOD.replace("rtt_ms = 10", "rtt_ms = -1"), "slice.toml: field 'rtt_ms' must be >= 0"),
    ("name = ", "slice.toml: not valid TOML"),
    (GOOD.replace("rtt_ms = 10", 'rtt_ms = {"A-B" = 5}'), "slice.toml: field 'rtt_ms': key 'A-B' must be SITE-SITE"),
    (GOOD.replace("rtt_ms = 10", 'rtt_ms = {"A-A" = -2}'), "slice.toml: field 'rtt_ms.A-A' must be >= 0, got -2"),
    (GOOD.replace("rtt_ms = 10\n", "rtt_ms = 10\nbandwidth_gbps = 0\n"),
     "slice.toml: field 'bandwidth_gbps' must be > 0"),
    (GOOD + '[[vm]]\nsite = "B"\ngpus = 2\n', "slice.toml: vm[1]: missing field 'gpu'"),
    (GOOD.replace("[[vm]]", 'rtt = 5\n[[vm]]'), "slice.toml: unknown field 'rtt'"),  # a typo is not ignored
    (GOOD.replace('site = "A"', 'site = "A"\ngpu_count = 2'), "slice.toml: vm[0]: unknown field 'gpu_count'"),
    (GOOD.replace("[[vm]]", "vm = []\n").split("vm = []")[0] + "vm = []\n", "slice.toml: field 'vm' must be a list of at least 1"),
    (GOOD.replace("rtt_ms = 10", 'rtt_ms = {"A-B" = 5}') + '[[vm]]\nsite = "C"\nname = "x"\ngpus = 2\ngpu = "A30"\n',
     "slice.toml: field 'rtt_ms': key 'A-B' must be SITE-SITE with sites of this slice (A, C)"),
])
def test_bad_slice_files_name_file_and_field(text, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        slices.parse(text, "slice.toml")


def test_rtt_per_pair_of_sites():
    text = ('name = "three"\nrtt_ms = {"UTAH-GPN" = 20.2, "UTAH-MASS" = 57.4, "GPN-MASS" = 40.0}\n'
            'bandwidth_gbps = 10\n' + "".join(f'[[vm]]\nsite = "{site}"\ngpus = 2\ngpu = "RTX6000"\n'
                                                for site in ("UTAH", "GPN", "MASS", "UTAH")))
    sl = slices.parse(text, "three.toml")
    assert sl.rtt_between("vm1", "vm2") == 20.2 and sl.rtt_between("vm3", "vm2") == 40.0
    assert sl.rtt_between("vm1", "vm4") == slices.SAME_SITE_RTT_MS  # same site
    assert sl.rtt_ms == 57.4 and sl.bandwidth_gbps == 10.0
    missing = text.replace(', "GPN-MASS" = 40.0', "")
    with pytest.raises(BadInput, match='has no RTT for sites GPN and MASS'):
        slices.parse(missing, "three.toml")


values = st.one_of(st.integers(-3, 5), st.floats(-1, 200, allow_nan=False), st.text(max_size=8), st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.fixed_dictionaries({}, optional={"name": values, "rtt_ms": values, "network": values}),
       vm=st.fixed_dictionaries({}, optional={"site": values, "gpus": values, "gpu": st.sampled_from(["T4", "A30", "X"]),
                                              "name": values}))
def test_any_slice_document_parses_or_is_rejected_with_a_named_field(doc, vm):
    lines = [f"{k} = {v!r}".replace("'", '"').replace("True", "true").replace("False", "false") for k, v in doc.items()]
    lines += ["[[vm]]"] + [f"{k} = {v!r}".replace("'", '"').replace("True", "true").replace("False", "false")
                           for k, v in vm.items()]
    try:
        parsed = slices.parse("\n".join(lines), "gen.toml")
    except BadInput as e:
        assert str(e).startswith("gen.toml")
        assert "\n" not in str(e)
    else:
        assert parsed.rtt_ms >= 0 and parsed.vms[0].gpus >= 1
