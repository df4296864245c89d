"""Emulated FABRIC slices on one machine: a network namespace per VM, latency on the packets.

netns.py      namespaces (project prefix, owner records, the sweep of leftovers)
delaylink.py  the userspace delay link: TUN devices and a relay with a timed queue
netem.py      the kernel's delay link: veths with netem queues, and their counters
network.py    EmulatedNetwork: namespaces + link for a slice, live RTT changes, teardown
probe.py      RTT and bulk TCP throughput between emulated VMs
compute.py    each VM at its GPU's relative speed: a CPU quota per VM
"""
