"""metalclaim: HostClaims on bare metal over Redfish - controller and development environment."""

from pathlib import Path

# The repository (and collection) root: config/, playbooks/ and .collections/ are found from here.
REPO_ROOT = Path(__file__).resolve().parents[2]
