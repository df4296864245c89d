"""What is worked out rather than run: the cost model, link similarity, memory, the compilers' analyses.

netmodel.py          the network inside a VM (ici, PCIe) and between VMs (dcn, TCP)
costmodel.py         each technique on a slice before spending GPU hours: step time, epochs, TFLOP/s, memory
costmodel_check.py   the cost model fitted to and checked against measured trials
measured_link.py     a link as measured, for predictions on a user's slice
similarity.py        the links on which the scale model splits its step as gpt2m did in the paper
memory.py            each technique's per-device memory at paper scale, without a GPU
gpu_compiler.py      XLA's GPU compiler for the paper's GPUs, without a GPU
gpu_compiler_child.py  that child's loop
hlo.py               the collectives a compiled step holds, read from its HLO
"""
