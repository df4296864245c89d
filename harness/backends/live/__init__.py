"""A live slice's VMs made into the suite's cluster over SSH (`python -m harness live`).

hosts.py       the hosts file: how SSH reaches each VM, and the slice file they must match
ssh.py         asyncssh sessions to every VM at once, through a jump host; the driver's pipe
host_check.py  what a VM has (Python, packages, GPUs), run there on any Python 3
bringup.py     up (check, install, measure, Ray, inventory), down, and the links measured again
links.py       every pair's RTT and one flow, held against the slice file; timeouts from the RTT
remote.py      the VM's side: stop what up started there, and nothing else
provision.py   a FABRIC slice from a slice file (FABlib), and its hosts file
"""
