"""The hardware table: which GPU a device's name is, so that MFU and memory come from its own data
sheet, and a look-alike (another GPU with a similar name) is left unknown rather than mismeasured."""
import pytest

from harness.analysis import gpu_compiler
from harness.platform import hardware


@pytest.mark.parametrize("device_kind, gpu", [
    ("Tesla T4", "T4"),
    ("Quadro RTX 6000", "RTX6000"),
    ("NVIDIA A30", "A30"),
    ("NVIDIA A40", "A40"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H200", "H200"),
    # look-alikes: other GPUs, with other peaks or memory
    ("NVIDIA RTX 6000 Ada Generation", None),
    ("NVIDIA RTX A6000", None),
    ("NVIDIA RTX A4000", None),
    ("NVIDIA H100 NVL", None),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA GH200 480GB", None),
    ("cpu", None),
])
def test_a_device_name_is_its_own_gpu_or_unknown(device_kind, gpu):
    found = hardware.identify(device_kind)
    assert (found.name if found else None) == gpu


def test_each_gpu_of_the_table_has_its_peaks_and_a_target_for_the_gpu_compiler():
    for name, acc in hardware.ACCELERATORS.items():
        # the 16-bit tensor cores are the fastest arithmetic; TF32, where there is one, between
        assert acc.peak_tflops_fp32 < acc.peak_tflops_tensor
        if acc.peak_tflops_tf32:
            assert acc.peak_tflops_fp32 < acc.peak_tflops_tf32 < acc.peak_tflops_tensor
        assert f"device_memory_size: {acc.memory_bytes}" in gpu_compiler.target_config(name)


def test_the_memory_variants_share_peaks_but_not_memory():
    a40gb, a80gb = hardware.accelerator("A100-40GB"), hardware.accelerator("A100-80GB")
    assert a40gb.peak_for("bfloat16") == a80gb.peak_for("bfloat16")
    assert a80gb.memory_bytes == 2 * a40gb.memory_bytes
