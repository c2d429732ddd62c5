# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The image writer's instructions (``metalclaim/deploy.json`` on the config drive), checked; what the
config drive's bytes are sized to. Pure: no I/O (io/configdrive.py writes the ISO)."""

from __future__ import annotations

import hashlib
import json
import re

MODES = ("deploy", "clean")
# How deep cleaning goes (the writer's "erase"): partition tables and signatures, or every byte zeroed.
ERASE_MODES = ("metadata", "full")
CHECKSUM_TYPES = ("md5", "sha256", "sha512")
IMAGE_FORMATS = ("raw", "qcow2")
# Floppy image sizes a BMC's (or QEMU's) floppy drive recognises by the image's size: 1.44 MB, 2.88 MB.
FLOPPY_SIZES = (1474560, 2949120)
# Metal3's checksumType "auto": a hex digest's type by its length.
_TYPE_BY_LENGTH = {32: "md5", 64: "sha256", 128: "sha512"}


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
        warm = deploy.get("warm")
        if warm is not None:  # fast track: where the writer, once clean, asks for its next job
            if not isinstance(warm, dict):
                raise ValueError("deploy.warm must be a mapping")
            result["warm"] = {
                key: _http_url(_require(warm, key, "deploy.warm"), f"deploy.warm.{key}") for key in ("next", "ack")
            }
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
