"""The processes of a multi-VM run, on emulated and on live slices alike.

worker.py         one VM's process: jax.distributed up, then jobs (batch) or requests (serve)
local.py          LocalProcesses: one worker per VM on this machine, over loopback
ray_nodes.py      RayCluster: one Ray node per emulated VM, inside its namespace
ray_driver.py     the Ray driver (run on VM1): actors pinned one per VM start the workers
driver_client.py  DriverClient: this side of the driver's JSON-lines protocol
protocol.py       the error shape every JSON-lines protocol here answers with
"""
