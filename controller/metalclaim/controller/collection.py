"""Where the metalclaim.hostclaim collection is, and its names the controller shares.

The controller only runs the collection's playbooks, so it never works without the collection:
it finds it where ansible-playbook will (ANSIBLE_COLLECTIONS_PATH, then Ansible's defaults) and
imports its pure constants from there instead of keeping copies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path

DEFAULT_PATHS = (Path("~/.ansible/collections").expanduser(), Path("/usr/share/ansible/collections"))
SUBDIR = Path("ansible_collections") / "metalclaim" / "hostclaim"


def collections_path() -> str:
    """The collections path the controller and its runs use: the configured one, else Ansible's defaults."""
    configured = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get("ANSIBLE_COLLECTIONS_PATHS")
    if configured:
        return configured
    return os.pathsep.join(str(path) for path in DEFAULT_PATHS if (path / SUBDIR).is_dir()) or str(DEFAULT_PATHS[0])


def collection_dir(path: str | None = None) -> Path:
    for entry in (path or collections_path()).split(os.pathsep):
        candidate = Path(entry).expanduser() / SUBDIR
        if (candidate / "playbooks").is_dir():
            return candidate
    raise FileNotFoundError(
        f"metalclaim.hostclaim is not installed in the collections path {path or collections_path()}"
    )


def playbook(name: str, path: str | None = None) -> str:
    return str(collection_dir(path) / "playbooks" / f"{name}.yml")


def import_path(path: str | None = None) -> None:
    """Make `ansible_collections.metalclaim.hostclaim` importable (its pure module_utils)."""
    root = str(collection_dir(path).parents[2])
    if root not in sys.path:
        sys.path.append(root)


def fingerprint(path: str | None = None) -> str:
    """What the runs would load from the collection (each file's path, size and mtime): it changes with an
    upgrade, so a standby run started before it is recycled."""
    root = collection_dir(path)
    digest = hashlib.sha256()
    for part in ("plugins", "roles", "playbooks", "meta"):
        for directory, subdirectories, files in os.walk(root / part):
            subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
            for name in sorted(files):
                with contextlib.suppress(OSError):  # removed while we walk: the next look sees it
                    stat = os.stat(os.path.join(directory, name))
                    digest.update(f"{directory}/{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()
