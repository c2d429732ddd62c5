"""The development environment: a local control plane and Redfish fleet (in the checkout, never in the wheel)."""

from .. import REPO_ROOT

__all__ = ["REPO_ROOT"]
