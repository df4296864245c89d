"""The comparisons each backend declares it cannot show, with the reason. A declared comparison that
does not hold is reported as an expected failure with its evidence; every other comparison of the
same part still fails its test (harness.suite.checks.check_claim). Each reason is a measurement of
this backend, not a wish: where it stops being true, the comparison holds and the report says so."""

_GLOO = ("XLA's CPU runtime runs Data's combined all-reduce of the 17 MB of gradients tensor by tensor, each a gloo "
         "ring over TCP (xla/service/cpu/runtime/all_reduce_thunk.cc), as it runs ZeRO2's reduce-scatter and all-gather "
         "of each tensor (16 + 16 collectives), where GPUs send both in one 30 MiB bucket: measured, Data 12-13% "
         "longer at 20 ms (within the noise in the quick run, beyond it in the full run) and 19-30% longer from 57 ms "
         "to 103 ms")
_COMPUTE_BOUND = ("at 0.1 ms the scale model is compute-bound on one core per VM, so Pipeshard's pipeline bubble "
                  "(2 microbatches, 2 stages) costs more than Data's and ZeRO2's collectives; the paper's GPUs were "
                  "not compute-bound this way")
_SAME_ARITHMETIC = ("on one emulated VM Data and ZeRO2 do the same arithmetic on the same cores, with no interconnect "
                    "for ZeRO2's two collectives to cost more than Data's one; measured side by side (40 interleaved "
                    "steps each, 4 runs, one with a busy core) their median step times differed by -13% to +4%; the "
                    "full reproduce (five slices pooled) had them tie within the noise, a CI run had ZeRO2 9% ahead: "
                    "the machine's load picks the winner")
_ZERO2_T4 = ("in XLA's memory analysis ZeRO2 saves ~4 GiB per GPU over Data for gpt2L (19.1 vs 22.8 GiB at the "
             "stated assumptions), not enough to bring it under a T4's usable 14.4 GiB; of the 36 setups "
             "`memory --infer` tries, only 1 sequence per GPU in float16 fits it on a T4, and there Pipeshard fits "
             "too, which the paper saw fail: no plausible setup reproduces the paper's gpt2L runs on 2 RTX + 2 T4")
_ONE_PROGRAM_PER_HARDWARE = ("the analysis gives one figure per technique, model and GPU, at one stated setup; the "
                             "paper's outcomes on the same hardware differ between slices (see C4.observed), so its "
                             "setup must have differed, and at ours ZeRO2 fits gpt2L on 2 x 24 GiB (20.3 GiB); the "
                             "setups the paper's other runs point to (`memory --infer`: 1 sequence per GPU, or 4 in "
                             "float16 with rematerialisation) fit some technique on one VM too")
_PIPESHARD_FIRST_STAGE = ("analysed per stage as Alpa compiles it, Pipeshard's first stage keeps two microbatches in "
                          "flight (1F1B) and needs 29.3 GiB for gpt2L at the stated setup, over a 24 GiB GPU's usable "
                          "21.6; it fits with rematerialisation (18.1 GiB) or at 1 sequence per GPU, and 25 of the 36 "
                          "setups `memory --infer` tries rule this run out")
_GPT2L_ON_T4 = ("XLA's CPU analysis puts gpt2l with Data or Shard over a T4's usable 14.4 GiB at the stated setup "
                "(20.0 and 20.2 GiB; parameters, gradients and Adam's moments alone take 8.6 GiB), yet the paper ran "
                "both on TACC-TACC's T4s: its gpt2l runs (the model it cut down for tight memory) must have used a "
                "smaller setup, or the GPU compiler smaller buffers")
_GPT2L_PIPESHARD = ("at the stated 4 sequences per GPU Pipeshard's first stage needs 25.9 GiB for gpt2l (two "
                    "microbatches in flight), over the usable 21.6 GiB of an RTX 6000 or A30; the paper's gpt2l "
                    "runs, its model for tight memory, likely used a smaller batch")

# The CPU scale model on emulated slices (the timed claims).
SCALE_MODEL = {
    "C1.single-site": {"Pipeshard vs Data": _COMPUTE_BOUND, "Pipeshard vs ZeRO2": _COMPUTE_BOUND},
    "C2.order": {"Data vs ZeRO2": _GLOO + ", so Data < ZeRO2 does not come out"},
    "C2.sensitivity": {"ZeRO2 degrades more than Data": _GLOO + ", so ZeRO2's time grows with RTT less than "
                                                                "Data's"},
    "C3.data-most": {"Data wins more single-VM experiments than ZeRO2": _SAME_ARITHMETIC},
    "C7.geo-pipeshard": {"picks Pipeshard on all VMs": "on the scale model one VM alone trains faster than Pipeshard "
                                                        "on both VMs at 20 ms (C5's mechanism, on every slice), and "
                                                        "Algorithm 1's T per GPU favours the single VM twice over: step 5 "
                                                        "answers a single VM"},
}

# XLA's compile-only memory analysis of our techniques at the paper's scale (the memory claims).
MEMORY_ANALYSIS = {
    "C4.zero2-only": {"ZeRO2 runs": _ZERO2_T4},
    "C4.gpt2L-one-vm": {"gpt2L fits no technique on one VM in most slices": _ONE_PROGRAM_PER_HARDWARE},
    "C4.observed": {"gpt2L on 4 GPUs: Pipeshard ran": _PIPESHARD_FIRST_STAGE, "gpt2l on 4 GPUs: Pipeshard ran": _GPT2L_PIPESHARD,
                    "gpt2L on 4 GPUs: ZeRO2 ran": _ZERO2_T4, "gpt2L on 4 GPUs: ZeRO2 failed": _ONE_PROGRAM_PER_HARDWARE,
                    "gpt2l on 4 GPUs: Data ran": _GPT2L_ON_T4, "gpt2l on 4 GPUs: Shard ran": _GPT2L_ON_T4,
                    "gpt2l on 1 VM: Pipeshard ran": _GPT2L_PIPESHARD},
}
