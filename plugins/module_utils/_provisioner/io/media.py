# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The directory shared by the provisioner and the media server (controller/metalclaim/mediaserver.py).

Layout under ``media_dir``::

    media/<token>/<filename>     served read-only at GET /media/<token>/<filename>
    callbacks/<token>.json       written once by the server on POST /callback/<token>
    .token-key                   the key hosts' token references are opened with (never served)

The token is the only secret: it is unguessable, appears in no listing, and is withdrawn
after use. Hosts record only references to tokens, opened with the key (it lives and dies
with the media it guards). Tokens, names and URLs: _provisioner/pure/media_protocol.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import time

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.media_protocol import (
    CALLBACK_SUBDIR,
    CALLBACK_SUFFIX,
    KEY_BYTES,
    MEDIA_SUBDIR,
    check_filename,
    check_token,
    new_token,
)


def _private_dir(path: str) -> None:
    os.makedirs(path, mode=0o700, exist_ok=True)
    # makedirs' mode is filtered by the umask. A directory another user owns is left as it is: the media directory
    # is a volume's mount point in the provisioner's pod (an emptyDir: root's, 0777), which its non-root user may
    # not chmod; what is private lives below it, in directories and files of its own (0700, 0600).
    if os.stat(path).st_uid == os.geteuid():
        os.chmod(path, 0o700)


def _write_private(path: str, data: bytes) -> None:
    """Write atomically (a reader sees the old file or the whole new one), mode 0600."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


TOKEN_KEY_FILE = ".token-key"


def token_key(media_dir: str) -> bytes:
    """The provisioner's key for token references (media_protocol.token_for), made on first use. The provisioner's
    runs and its controller (shards sharing the directory too) may race to make it: the first link wins and every
    other reads that one."""
    path = os.path.join(media_dir, TOKEN_KEY_FILE)
    with contextlib.suppress(FileNotFoundError):
        return _read_key(path)
    _private_dir(media_dir)
    candidate = os.path.join(media_dir, f".{TOKEN_KEY_FILE}.{secrets.token_hex(8)}.tmp")
    fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(candidate, path)
    finally:
        os.unlink(candidate)
    return _read_key(path)


def _read_key(path: str) -> bytes:
    with open(path, "rb") as handle:
        key = handle.read()
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} holds {len(key)} bytes, not a {KEY_BYTES}-byte media token key")
    return key


def media_path(media_dir: str, token: str, filename: str) -> str:
    check_token(token)
    check_filename(filename)
    return os.path.join(media_dir, MEDIA_SUBDIR, token, filename)


def callback_path(media_dir: str, token: str) -> str:
    check_token(token)
    return os.path.join(media_dir, CALLBACK_SUBDIR, token + CALLBACK_SUFFIX)


# The media directory holds at most this much: a config drive is a few MiB at most, one per host in flight.
MEDIA_DIR_LIMIT = 1024 * 1024 * 1024


def _usage(directory: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def publish(
    media_dir: str, filename: str, data: bytes, token: str | None = None, limit: int = MEDIA_DIR_LIMIT
) -> tuple[str, str]:
    """Make ``data`` downloadable under a fresh token (or a given one, e.g. the one a config drive
    already carries for its callback). Returns (token, path). Raises ValueError when the media
    directory would grow past `limit` bytes."""
    token = new_token() if token is None else token
    path = media_path(media_dir, token, filename)
    if _usage(media_dir) + len(data) > limit:
        raise ValueError(f"the media directory holds more than {limit // (1024 * 1024)} MiB: nothing more is published")
    _private_dir(media_dir)
    _private_dir(os.path.join(media_dir, MEDIA_SUBDIR))
    _private_dir(os.path.join(media_dir, CALLBACK_SUBDIR))
    _private_dir(os.path.dirname(path))
    _write_private(path, data)
    return token, path


def callback_result(media_dir: str, token: str) -> dict | None:
    """The image writer's report ({"status", "message", "received_at"}) once it arrived, else None."""
    try:
        with open(callback_path(media_dir, token), "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return None


def withdraw(media_dir: str, token: str) -> None:
    """Remove a token's media and callback; the token then means nothing to the server. Idempotent."""
    check_token(token)
    shutil.rmtree(os.path.join(media_dir, MEDIA_SUBDIR, token), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(callback_path(media_dir, token))


def sweep(media_dir: str, owned: set, older_than: float, now: float | None = None) -> list[str]:
    """Withdraw every token no host records any more (`owned`: the tokens of operations in flight) whose media or
    callback is older than `older_than` seconds: media published by a step whose host write then failed, or by a
    provisioner that died in between, stop being servable. Returns the tokens withdrawn."""
    now = time.time() if now is None else now
    found = {}
    for subdir, suffix in ((MEDIA_SUBDIR, ""), (CALLBACK_SUBDIR, CALLBACK_SUFFIX)):
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(os.path.join(media_dir, subdir)):
                if entry.name.startswith(".") or not entry.name.endswith(suffix):
                    continue
                token = entry.name[: len(entry.name) - len(suffix)] if suffix else entry.name
                with contextlib.suppress(OSError):
                    found[token] = max(found.get(token, 0.0), entry.stat(follow_symlinks=False).st_mtime)
    swept = []
    for token, modified in sorted(found.items()):
        if token in owned or now - modified < older_than:
            continue
        try:
            withdraw(media_dir, token)
        except ValueError:  # not a token of ours: not ours to remove either
            continue
        swept.append(token)
    return swept
