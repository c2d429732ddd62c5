"""The development environment: a local control plane and Redfish fleet (in the checkout, never in the wheel)."""

from pathlib import Path

# The repository (and collection) root: config/, playbooks/ and .collections/ are found from here.
REPO_ROOT = Path(__file__).resolve().parents[3]
