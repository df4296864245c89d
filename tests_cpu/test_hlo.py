"""The HLO reader on the forms XLA prints replica groups in."""
from harness.analysis import hlo

TEXT = """HloModule m
%body.1 (p: f32[4]) -> f32[4] {
  %ar = f32[4]{0} all-reduce(%p), channel_id=1, replica_groups=[2,2]<=[2,2]T(1,0), use_global_device_ids=true
}
ENTRY %main (a: f32[4]) -> f32[4] {
  %w = f32[4]{0} while(%a), condition=%cond.1, body=%body.1
  %rs = f32[2]{0} reduce-scatter(%w), channel_id=2, replica_groups={{0,1},{2,3}}, dimensions={0}
  %cp = f32[8,2]{1,0} collective-permute(%w), channel_id=3, source_target_pairs={{0,2},{1,3}}
  ROOT %t = (f32[3]{0}, f32[]) all-reduce(%x, %y), channel_id=4, replica_groups={}
}
"""


def test_collectives_groups_sizes_and_loops():
    found = {c.op + ("-loop" if c.in_loop else ""): c for c in hlo.collectives(TEXT, n_devices=4)}
    assert found["all-reduce-loop"].groups == [[0, 2], [1, 3]]
    assert found["all-reduce-loop"].crosses_hosts(devices_per_host=2)
    assert found["reduce-scatter"].groups == [[0, 1], [2, 3]] and not found["reduce-scatter"].crosses_hosts(2)
    assert found["collective-permute"].groups == [[0, 2], [1, 3]] and found["collective-permute"].elements == 16
    assert found["all-reduce"].groups == [[0, 1, 2, 3]] and found["all-reduce"].elements == 4
