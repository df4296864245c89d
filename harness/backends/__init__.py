"""Where trials run: clusters of VMs (harness.backends.contract.Cluster) and the processes on them.

contract.py       the Cluster protocol a trial runner drives: groups, build, steps, RTT, link counters, facts
local.py          this machine's processes over loopback: LocalProcesses (jobs) and LocalCluster (the protocol)
ray_clusters.py   the protocol on Ray: an emulated slice (emulation/) and a live one
ray_nodes.py      one Ray node per emulated VM, inside its namespace
ray_driver.py     the Ray driver (run on VM1): actors pinned one per VM start the workers
driver_client.py  this side of the driver's JSON-lines protocol
worker.py         one VM's process: jax.distributed up, then jobs (batch) or requests (serve)
servers.py        a worker server as its launcher sees it, and why a worker died
layout.py         which worker processes an emulated VM runs, on which GPUs
collective.py     a timed collective between VMs
protocol.py       the error shape every JSON-lines protocol here answers with
process_trees.py  stopping the process trees a run started, and nothing else
emulation/        the slice's VMs as namespaces, the delayed link, CPU quotas
live/             a live slice's VMs over SSH: up, links checked, down; FABRIC provisioning
"""
