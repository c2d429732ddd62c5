"""metalclaim's development package: the devenv, the test helpers and the bench's helpers, in the checkout only.

Neither the wheel nor the collection tarball holds it; `make setup` installs it into the .venv as an editable path.
`devenv` is the local control plane, Redfish fleet, VMs and node (`python -m metalclaim_dev.devenv up`); `runner`
runs the collection's playbooks and modules on localhost; `support`, `claimlayer`, `site`, `tenancy`,
`controllerproc`, `netfixtures`, `remotecluster`, `vmenv` and `configdrive_reader` are what tests/ and bench/ build
on (racks of hosts, the emulated fleet, the controller as a process, loopback HTTP servers); `fixtures` holds the
pytest fixtures the suites share (clients, rack, site); `bench` builds racks, sites and the controller's process
at the benches' sizes and holds what only they measure (a claim watch, a timing proxy, the floor F, /proc).
"""

from pathlib import Path

# The repository (and collection) root: config/, playbooks/ and .collections/ are found from here.
REPO_ROOT = Path(__file__).resolve().parents[2]
