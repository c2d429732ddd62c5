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

import hashlib
import io
import json
import re
import traceback

try:
    import pycdlib

    PYCDLIB_IMPORT_ERROR = None
except ImportError:  # reported by the module through missing_required_lib
    PYCDLIB_IMPORT_ERROR = traceback.format_exc()

VOLUME_ID = "cidata"
DEPLOY_FILE = "metalclaim/deploy.json"
MODES = ("deploy", "clean")
# How deep cleaning goes (the writer's "erase"): partition tables and signatures, or every byte zeroed.
ERASE_MODES = ("metadata", "full")
CHECKSUM_TYPES = ("md5", "sha256", "sha512")
IMAGE_FORMATS = ("raw", "qcow2")
# Floppy image sizes a BMC's (or QEMU's) floppy drive recognises by the image's size: 1.44 MB, 2.88 MB.
FLOPPY_SIZES = (1474560, 2949120)
# Metal3's checksumType "auto": a hex digest's type by its length.
_TYPE_BY_LENGTH = {32: "md5", 64: "sha256", 128: "sha512"}

# NoCloud name -> ISO9660 level-3 (8.3) name, for readers without Rock Ridge or Joliet.
_NOCLOUD_FILES = {
    "user-data": "USERDATA.",
    "meta-data": "METADATA.",
    "network-config": "NETWORKC.",
}
_DEPLOY_DIR = ("metalclaim", "METALCLA")
_DEPLOY_NAME = ("deploy.json", "DEPLOY.JSO")


def _require(mapping: dict, key: str, where: str) -> str:
    value = mapping.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}.{key} must be a non-empty string")
    return value


def _http_url(value: str, where: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError(f"{where} must be an http:// or https:// URL")
    return value


def validate_deploy(deploy: dict) -> dict:
    """The writer's instructions, checked and reduced to the keys it reads; raises ValueError."""
    if not isinstance(deploy, dict):
        raise ValueError("deploy must be a mapping")
    mode = deploy.get("mode")
    if mode not in MODES:
        raise ValueError(f"deploy.mode must be one of {', '.join(MODES)}")
    callback = deploy.get("callback")
    if not isinstance(callback, dict):
        raise ValueError("deploy.callback must be a mapping")
    result = {
        "mode": mode,
        "callback": {
            "url": _http_url(_require(callback, "url", "deploy.callback"), "deploy.callback.url"),
            "token": _require(callback, "token", "deploy.callback"),
        },
    }
    if deploy.get("disk") is not None:
        result["disk"] = _require(deploy, "disk", "deploy")
    if mode == "clean":
        if deploy.get("erase") is not None:
            if deploy["erase"] not in ERASE_MODES:
                raise ValueError(f"deploy.erase must be one of {', '.join(ERASE_MODES)}")
            result["erase"] = deploy["erase"]
        return result
    image = deploy.get("image")
    if not isinstance(image, dict):
        raise ValueError("deploy.image must be a mapping in deploy mode")
    image_format = image.get("format") or "raw"
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"deploy.image.format must be one of {', '.join(IMAGE_FORMATS)}")
    checksum = _require(image, "checksum", "deploy.image")
    is_url = checksum.startswith(("http://", "https://"))
    if not is_url and not all(c in "0123456789abcdefABCDEF" for c in checksum):
        raise ValueError("deploy.image.checksum must be a hex digest or an http(s) URL of a checksum file")
    kind = image.get("checksumType")
    if kind in (None, "", "auto") and not is_url:  # Metal3's "auto": known by the digest's length
        kind = _TYPE_BY_LENGTH.get(len(checksum))
    if kind not in CHECKSUM_TYPES:
        raise ValueError(f"deploy.image.checksumType must be one of {', '.join(CHECKSUM_TYPES)}")
    result["image"] = {
        "url": _http_url(_require(image, "url", "deploy.image"), "deploy.image.url"),
        "format": image_format,
        "checksum": checksum,
        "checksumType": kind,
    }
    return result


def checksum_type(checksum: str) -> str:
    """Metal3's checksumType 'auto': by the digest's length, or by a checksum file's name."""
    if re.fullmatch(r"[0-9a-fA-F]+", checksum) and len(checksum) in _TYPE_BY_LENGTH:
        return _TYPE_BY_LENGTH[len(checksum)]
    for name in ("sha512", "sha256", "md5"):
        if name in checksum.rsplit("/", 1)[-1].lower():
            return name
    raise ValueError(f"spec.image.checksumType is needed: cannot tell the type of checksum {checksum!r}")


def default_meta_data(deploy: dict) -> bytes:
    """NoCloud meta-data with an instance-id that changes with every deployment (so cloud-init runs again)."""
    digest = hashlib.sha256(json.dumps(deploy, sort_keys=True).encode()).hexdigest()[:16]
    return f"instance-id: iid-metalclaim-{digest}\n".encode()


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


def floppy_sized(iso: bytes) -> bytes:
    """The ISO padded with zeros to the smallest floppy size that holds it (unchanged when none does).

    BMCs that offer their removable virtual media only as a floppy drive (sushy-tools' libvirt driver: a
    QEMU floppy) need an image of a floppy's size; a USB stick takes it as well. The ISO's volume size is
    in its own header, so readers (the image writer, cloud-init) ignore the padding and the writer copies
    only the ISO itself onto the disk."""
    for size in FLOPPY_SIZES:
        if len(iso) <= size:
            return iso + bytes(size - len(iso))
    return iso
