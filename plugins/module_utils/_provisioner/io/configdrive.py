# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Per-host config drive: a NoCloud ``cidata`` ISO that also carries the image writer's instructions.

Files (Rock Ridge and Joliet names; cloud-init mounts the ISO and reads those):

    user-data, meta-data, network-config    NoCloud (network-config only when given)
    metalclaim/deploy.json                  read by the image writer (files/metalclaim-image-writer)

The same ISO is inserted as virtual media for the writer and later copied onto the disk for
cloud-init, so its label is ``cidata``, which NoCloud looks for.
"""

from __future__ import annotations

import io
import json
import traceback

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.instructions import (
    default_meta_data,
    validate_deploy,
)

try:
    import pycdlib

    PYCDLIB_IMPORT_ERROR = None
except ImportError:  # reported by the module through missing_required_lib
    PYCDLIB_IMPORT_ERROR = traceback.format_exc()

VOLUME_ID = "cidata"
DEPLOY_FILE = "metalclaim/deploy.json"
# NoCloud name -> ISO9660 level-3 (8.3) name, for readers without Rock Ridge or Joliet.
_NOCLOUD_FILES = {
    "user-data": "USERDATA.",
    "meta-data": "METADATA.",
    "network-config": "NETWORKC.",
}
_DEPLOY_DIR = ("metalclaim", "METALCLA")
_DEPLOY_NAME = ("deploy.json", "DEPLOY.JSO")


def build_config_drive(
    *,
    user_data: bytes | None,
    meta_data: bytes | None,
    network_data: bytes | None,
    deploy: dict,
) -> bytes:
    """The ISO image bytes. user-data and meta-data always exist: NoCloud requires both files."""
    if PYCDLIB_IMPORT_ERROR is not None:
        raise RuntimeError("the pycdlib Python package is required to build config drives")
    instructions = validate_deploy(deploy)
    contents = {
        "user-data": user_data if user_data is not None else b"",
        "meta-data": meta_data if meta_data is not None else default_meta_data(instructions),
    }
    if network_data is not None:
        contents["network-config"] = network_data
    deploy_json = json.dumps(instructions, indent=2, sort_keys=True).encode() + b"\n"

    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_ID)
    for name, data in contents.items():
        iso.add_fp(io.BytesIO(data), len(data), f"/{_NOCLOUD_FILES[name]};1", rr_name=name, joliet_path=f"/{name}")
    iso.add_directory(f"/{_DEPLOY_DIR[1]}", rr_name=_DEPLOY_DIR[0], joliet_path=f"/{_DEPLOY_DIR[0]}")
    iso.add_fp(
        io.BytesIO(deploy_json),
        len(deploy_json),
        f"/{_DEPLOY_DIR[1]}/{_DEPLOY_NAME[1]};1",
        rr_name=_DEPLOY_NAME[0],
        joliet_path=f"/{DEPLOY_FILE}",
    )
    out = io.BytesIO()
    iso.write_fp(out)
    iso.close()
    return out.getvalue()
