"""Reading a config drive back, for tests: what the image writer and cloud-init would see on it."""

from __future__ import annotations

import io

import pycdlib


def read_config_drive(iso_bytes: bytes) -> dict[str, bytes]:
    """Every file of a config drive by its Rock Ridge path relative to the root ("metalclaim/deploy.json")."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(iso_bytes))
    try:
        files = {}
        for root, _dirs, names in iso.walk(rr_path="/"):
            for name in names:
                path = f"{root.rstrip('/')}/{name}"
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, rr_path=path)
                files[path.lstrip("/")] = out.getvalue()
        return files
    finally:
        iso.close()


def volume_id(iso_bytes: bytes) -> str:
    """The primary volume descriptor's volume identifier (what blkid reports as LABEL)."""
    # The primary volume descriptor is sector 16 (2048-byte sectors); its identifier is bytes 40-72.
    return iso_bytes[16 * 2048 + 40 : 16 * 2048 + 72].decode("ascii").rstrip()
