"""What the trials run on, as data: slices (VMs, GPUs, the links between them) and their GPUs.

slices.py     a slice: Table I's or a user's file (slice.schema.json), its links and shape
hardware.py   the accelerators: memory and peak dense throughput, from data sheets
inventory.py  a live slice's inventory: its Ray address and VMs (inventory.schema.json)
"""
