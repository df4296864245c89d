import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.analysis import costmodel
from harness.commands.cli import main
from harness.errors import BadInput
from harness.platform import slices


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
     "slice.toml: field 'bandwidth_gbps' must be >= 0.001, got 0"),
    (GOOD + '[[vm]]\nsite = "B"\ngpus = 2\n', "slice.toml: vm[1]: missing field 'gpu'"),
    (GOOD.replace("[[vm]]", 'rtt = 5\n[[vm]]'), "slice.toml: unknown field 'rtt'"),  # a typo is not ignored
    (GOOD.replace('site = "A"', 'site = "A"\ngpu_count = 2'), "slice.toml: vm[0]: unknown field 'gpu_count'"),
    (GOOD.replace("[[vm]]", "vm = []\n").split("vm = []")[0] + "vm = []\n", "slice.toml: field 'vm' must be a list of at least 1"),
    (GOOD.replace("rtt_ms = 10", 'rtt_ms = {"A-B" = 5}') + '[[vm]]\nsite = "C"\nname = "x"\ngpus = 2\ngpu = "A30"\n',
     "slice.toml: field 'rtt_ms': key 'A-B' must be SITE-SITE with sites of this slice (A, C)"),
    # The bounds (docs/emulation.md, "Slice files"): finite numbers, sizes a cluster can have, safe names.
    (GOOD.replace("rtt_ms = 10", "rtt_ms = nan"), "slice.toml: field 'rtt_ms' must be a finite number, got nan"),
    (GOOD.replace("rtt_ms = 10", "rtt_ms = inf"), "slice.toml: field 'rtt_ms' must be a finite number, got inf"),
    (GOOD.replace("rtt_ms = 10", 'rtt_ms = {"A-A" = -inf}'), "field 'rtt_ms.A-A' must be a finite number"),
    (GOOD.replace("rtt_ms = 10", "rtt_ms = 1e9"), "slice.toml: field 'rtt_ms' must be <= 10000"),
    (GOOD.replace("gpus = 2", "gpus = 1000000000000"), "slice.toml: field 'vm[0].gpus' must be <= 16"),
    (GOOD + "".join('[[vm]]\nsite = "A"\ngpus = 2\ngpu = "T4"\n' for _ in range(64)),
     "slice.toml: field 'vm' must be a list of at most 64"),
    (GOOD.replace('name = "x"', 'name = "../../etc"'), "slice.toml: field 'name' must be of the form 1-64 letters"),
    (GOOD.replace('name = "x"', 'name = "a b"'), "slice.toml: field 'name' must be of the form"),
    (GOOD.replace('name = "x"', 'name = "x.toml"'), "slice.toml: field 'name' must not end in .toml"),
    (GOOD.replace('site = "A"', 'site = "A"\nname = "vm/1"'), "slice.toml: field 'vm[0].name' must be of the form"),
    (GOOD.replace('site = "A"', 'site = "A"\nname = "' + "v" * 33 + '"'), "field 'vm[0].name' must be of the form"),
    (GOOD.replace('site = "A"', 'site = "UC-SD"'), "slice.toml: field 'vm[0].site' must be of the form 1-32 letters, "
                                                   "digits or '_' (no '-': it separates the sites of an rtt_ms key)"),
    (GOOD.replace("rtt_ms = 10\n", "rtt_ms = 10\nbandwidth_gbps = 1e6\n"), "field 'bandwidth_gbps' must be <= 1000"),
    (GOOD.replace("rtt_ms = 10\n", "rtt_ms = 10\nloss_percent = 101\n"), "field 'loss_percent' must be <= 100"),
    (GOOD.replace("rtt_ms = 10\n", 'rtt_ms = 10\njitter_distribution = "cauchy"\n'),
     "field 'jitter_distribution' must be one of uniform, normal, pareto"),
    (GOOD.replace("rtt_ms = 10\n", "rtt_ms = 10\nloss_gemodel = {p = 1}\n"), "loss_gemodel: missing field 'r'"),
    (GOOD.replace("rtt_ms = 10\n", "rtt_ms = 10\nqueue_packets = 0\n"), "field 'queue_packets' must be >= 1"),
    (GOOD + '[[link]]\nfrom = "A"\nto = "Z"\ndelay_ms = 3\n',
     "slice.toml: field 'link[0].to' must be a site of this slice (A), got 'Z'"),
    (GOOD + '[[link]]\nfrom = "A"\nto = "A"\n[[link]]\nfrom = "A"\nto = "A"\n',
     "slice.toml: field 'link[1]' repeats the direction A -> A"),
    (GOOD + '[[link]]\nfrom = "A"\nto = "A"\ndelay = 3\n', "slice.toml: link[0]: unknown field 'delay'"),
    (GOOD.replace('name = "x"', 'name = "' + "n" * 10000 + '"'), "got 'nnnnnnnnnn"),  # quoted, cut short
])
def test_bad_slice_files_name_file_and_field(text, message):
    with pytest.raises(BadInput, match=re.escape(message)):
        slices.parse(text, "slice.toml")


def test_an_error_line_quotes_a_long_value_cut_short():
    with pytest.raises(BadInput) as e:
        slices.parse(GOOD.replace('name = "x"', 'name = "' + "n" * 10000 + '"'), "slice.toml")
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)


TWO_SITES = ('[[vm]]\nsite = "UTAH"\ngpus = 2\ngpu = "RTX6000"\n'
             '[[vm]]\nsite = "MASS"\ngpus = 2\ngpu = "RTX6000"\n')


def test_rtt_is_a_round_trip_split_evenly_unless_a_direction_says_otherwise():
    even = slices.parse('name = "even"\nrtt_ms = 57.4\n' + TWO_SITES, "even.toml")
    assert even.shape("vm1", "vm2").delay_ms == even.shape("vm2", "vm1").delay_ms == 28.7
    uneven = slices.parse('name = "uneven"\nrtt_ms = 57.4\n' + TWO_SITES
                          + '[[link]]\nfrom = "UTAH"\nto = "MASS"\ndelay_ms = 40\n', "uneven.toml")
    assert (uneven.shape("vm1", "vm2").delay_ms, uneven.shape("vm2", "vm1").delay_ms) == (40.0, 28.7)
    assert uneven.rtt_between("vm1", "vm2") == uneven.rtt_ms == 68.7  # the slice's RTT is what the packets see
    swept = uneven.with_rtt(10.0)  # a latency sweep: one RTT, half each way, the rest of the shape kept
    assert (swept.shape("vm1", "vm2").delay_ms, swept.shape("vm2", "vm1").delay_ms, swept.rtt_ms) == (5.0, 5.0, 10.0)


def test_a_scaled_link_keeps_the_slices_geography():
    """Similarity scaling moves a slice's farthest pair to the RTT it solved for; the other pairs
    follow in proportion, so VMs at one site stay near each other and an asymmetric path stays so."""
    sl = slices.parse('name = "geo"\nrtt_ms = {"A-B" = 30.0, "A-C" = 60.0, "B-C" = 40.0}\n'
                      + "".join(f'[[vm]]\nname = "{n}"\nsite = "{site}"\ngpus = 1\ngpu = "T4"\n'
                                for n, site in (("a1", "A"), ("a2", "A"), ("b", "B"), ("c", "C")))
                      + '[[link]]\nfrom = "C"\nto = "A"\ndelay_ms = 40\n', "geo.toml")
    assert sl.rtt_ms == sl.rtt_between("a1", "c") == 70.0  # 30 there, 40 back
    scaled = sl.scaled_to(7.0)
    assert scaled.rtt_ms == 7.0 and scaled.farthest_pair == sl.farthest_pair
    for a, b in (("a1", "a2"), ("a1", "b"), ("b", "c"), ("a2", "c")):
        assert scaled.rtt_between(a, b) == pytest.approx(sl.rtt_between(a, b) / 10), (a, b)
    assert scaled.shape("c", "a1").delay_ms == pytest.approx(4.0) and scaled.shape("a1", "c").delay_ms == pytest.approx(3.0)
    assert scaled.rtt_between("a1", "a2") == pytest.approx(slices.SAME_SITE_RTT_MS / 10)


@pytest.mark.parametrize("name", slices.TABLE_I_ORDER)
def test_a_scaled_table_i_slice_is_its_latency_sweep_point(name):
    """One RTT for every pair: scaling it and sweeping it are the same slice."""
    sl = slices.load(name)
    assert sl.scaled_to(3.5) == sl.with_rtt(3.5)


def test_netem_settings_for_every_link_and_per_direction():
    sl = slices.parse('name = "wan"\nrtt_ms = 20\nbandwidth_gbps = 1\njitter_ms = 2\njitter_distribution = "pareto"\n'
                      'loss_percent = 0.1\nqueue_packets = 500\n' + TWO_SITES
                      + '[[link]]\nfrom = "MASS"\nto = "UTAH"\nbandwidth_gbps = 0.1\n'
                        'loss_gemodel = {p = 1, r = 25, bad_loss = 50}\n', "wan.toml")
    there, back = sl.shape("vm1", "vm2"), sl.shape("vm2", "vm1")
    assert (there.jitter_ms, there.jitter_distribution, there.loss_percent, there.bandwidth_gbps,
            there.queue_packets, there.loss_gemodel) == (2, "pareto", 0.1, 1, 500, None)
    assert (back.bandwidth_gbps, back.loss_gemodel, back.jitter_ms) == (0.1, (1.0, 25.0, 50.0, 0.0), 2)
    assert back.to_dict(20)["loss_gemodel"] == {"p": 1.0, "r": 25.0, "bad_loss": 50.0, "good_loss": 0.0}
    # the slowest link paces a ring (and the paper-scale cost model's link), whichever table set it
    assert sl.slowest_gbps == 0.1 and costmodel.network_for(sl).link_bytes_per_s == pytest.approx(0.1e9 / 8)
    assert slices.load("UTAH-GPN").slowest_gbps is None


@pytest.mark.parametrize("gbps, rtt_ms, packets", [
    (None, 103.0, 171667),  # uncapped: sized for 10 Gbit/s, twice the BDP in 1500-byte packets
    (1.0, 103.0, 17167),
    (0.01, 20.0, 1000),  # never below netem's default
])
def test_the_default_queue_holds_twice_the_bandwidth_delay_product(gbps, rtt_ms, packets):
    assert slices.lossless_queue_packets(gbps, rtt_ms) == packets
    assert slices.Shape(rtt_ms / 2, bandwidth_gbps=gbps).limit(rtt_ms) == packets
    assert slices.Shape(rtt_ms / 2, bandwidth_gbps=gbps, queue_packets=7).limit(rtt_ms) == 7  # as given


def test_rtt_per_pair_of_sites():
    text = ('name = "three"\nrtt_ms = {"UTAH-GPN" = 20.2, "UTAH-MASS" = 57.4, "GPN-MASS" = 40.0}\n'
            'bandwidth_gbps = 10\n' + "".join(f'[[vm]]\nsite = "{site}"\ngpus = 2\ngpu = "RTX6000"\n'
                                                for site in ("UTAH", "GPN", "MASS", "UTAH")))
    sl = slices.parse(text, "three.toml")
    assert sl.rtt_between("vm1", "vm2") == 20.2 and sl.rtt_between("vm3", "vm2") == 40.0
    assert sl.rtt_between("vm1", "vm4") == slices.SAME_SITE_RTT_MS  # same site
    assert sl.rtt_ms == 57.4 and sl.bandwidth_gbps == 10.0
    assert sl.farthest_pair == ("vm1", "vm3")  # the trials measure the slice's RTT there, not vm1-vm4's 0.1 ms
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


# Slice files as a user might write them, right or wrong, through the command that reads them:
# every one either predicts or ends in the one-line error with exit status 2, never a traceback.
# Each field is usually right, so that whole files are right often enough to be predicted too.
numbers = st.one_of(st.integers(-5, 10**20), st.floats(allow_nan=True, allow_infinity=True))
names = st.one_of(st.sampled_from(["x-y", "../x", "a b", "", "-x", "x.toml"]),
                  st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=40))


def mostly(good, bad=st.one_of(numbers, names, st.booleans())):
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda right: good if right else bad)


@st.composite
def slice_documents(draw) -> str:
    n_vms = draw(st.integers(1, 4))
    sites = [draw(mostly(st.sampled_from(["UTAH", "MASS", "GPN"]), names)) for _ in range(n_vms)]
    lines = [f"name = {_str(draw(mostly(st.sampled_from(['mine', 'UTAH-GPN', 'a.b_c']), names)))}"]
    pairs = [f"{a}-{b}" for a in sites for b in sites if a < b]
    rtt = draw(st.one_of(mostly(st.floats(0, 300)),
                         st.fixed_dictionaries({p: mostly(st.floats(0, 300)) for p in pairs})))
    lines.append(f"rtt_ms = {_toml(rtt)}")
    optional = {"bandwidth_gbps": st.floats(0.01, 100), "jitter_ms": st.floats(0, 10), "loss_percent": st.floats(0, 5),
                "queue_packets": st.integers(1, 10**6), "jitter_distribution": st.sampled_from(["normal", "pareto"]),
                "network": st.just("L2STS")}
    for key in draw(st.sets(st.sampled_from(sorted(optional)))):
        lines.append(f"{key} = {_toml(draw(mostly(optional[key])))}")
    gpus = draw(mostly(st.sampled_from([1, 2, 4, 16]), st.integers(-1, 10**12)))
    for i in range(n_vms):
        lines += ["[[vm]]", f"site = {_str(sites[i])}", f"gpus = {_toml(gpus)}",
                  f"gpu = {_str(draw(mostly(st.sampled_from(['T4', 'A30', 'RTX6000']), st.just('H100x'))))}"]
        if draw(st.booleans()):
            lines.append(f"name = {_str(draw(mostly(st.just(f'node{i}'), names)))}")
    for _ in range(draw(st.integers(0, 2))):
        lines += ["[[link]]", f"from = {_str(draw(st.sampled_from(sites)))}",
                  f"to = {_str(draw(mostly(st.sampled_from(sites), st.just('NOWHERE'))))}",
                  f"{draw(st.sampled_from(['delay_ms', 'loss_percent', 'jitter_ms']))} = "
                  f"{_toml(draw(mostly(st.floats(0, 50))))}"]
    return "\n".join(lines) + "\n"


def _str(value) -> str:
    """A TOML basic string (JSON's escapes, but astral characters as themselves, not surrogates)."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else _toml(value)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_str(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=slice_documents())
def test_no_slice_file_gives_a_traceback(text, tmp_path, capsys):
    path = tmp_path / "generated.toml"
    path.write_text(text)
    status = main(["predict", "--slice", str(path), "--model", "scale-tiny", "--tokens", "1e6", "--json"])
    out, err = capsys.readouterr()
    if status == 2:
        assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"harness: error: {path}: "), err
    else:
        assert status == 0, err
        result = json.loads(out)
        assert all(math.isfinite(p["step_s"]) and p["step_s"] > 0 for p in result["predictions"]), result
        vms = text.count("[[vm]]")
        placements = vms + (vms > 1)  # each VM alone, and all of them together when they are several
        assert len(result["predictions"]) + len(result["cannot_run"]) == 4 * placements
