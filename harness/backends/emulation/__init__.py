"""Emulated FABRIC slices on one machine: a network namespace per VM, latency on the packets.

netns.py      namespaces (project prefix, owner records, the sweep of leftovers)
delaylink.py  the userspace delay link: TUN devices and a relay with a timed queue
network.py    EmulatedNetwork: namespaces + link for a slice, live RTT changes, teardown
probe.py      RTT and bulk TCP throughput between emulated VMs
"""
