# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the provisioner, the media server and the image writer agree on: tokens, file names, URLs.

Pure. The files themselves are written by _provisioner/io/media.py; the server
(controller/metalclaim/mediaserver.py) keeps its own copy of these names, and
tests/unit/plugins/module_utils/_provisioner/io/test_media.py checks that they agree.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets

MEDIA_SUBDIR = "media"
CALLBACK_SUBDIR = "callbacks"
CALLBACK_SUFFIX = ".json"
# secrets.token_urlsafe(32): 32 random bytes, 43 URL-safe base64 characters.
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")
# A leading alphanumeric keeps dot files (our temporary files) and ".." out of reach.
FILENAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
CALLBACK_MAX_BYTES = 64 * 1024
CALLBACK_STATUSES = ("success", "failure")
# A warm host's writer polls GET /media/<wait token>/NEXT_FILE: 404 until the provisioner hands it a job
# ({"config_drive": URL of the job's config drive, under the job's own token}), then it acknowledges with a
# callback on the wait token before it starts.
NEXT_FILE = "next.json"


def new_token() -> str:
    return secrets.token_urlsafe(32)


# A host records its operation's tokens only as references: readers of the BareMetalHost (the claim side, an infra
# admin's tools) must never learn a token, since one opens its media and answers its callback. The token is an
# HMAC of the reference under the provisioner's key, which only the provisioner's pod holds (_provisioner/io/media.py
# token_key); secrets.token_urlsafe(16): 16 random bytes, 22 characters, never the shape of a token.
REFERENCE_RE = re.compile(r"[A-Za-z0-9_-]{22}")
# The fields of an operation that hold one: its job's, a warm writer's it was handed to, a cleaning writer's wait.
TOKEN_FIELDS = ("token", "warm", "wait")
KEY_BYTES = 32
_DERIVATION = b"metalclaim media token\0"


def new_reference() -> str:
    return secrets.token_urlsafe(16)


def token_for(key: bytes, reference: str) -> str:
    """The token a reference stands for under `key`: 32 bytes of HMAC-SHA256, URL-safe base64, as new_token's."""
    if len(key) < KEY_BYTES:
        raise ValueError("the media token key is too short")
    if not isinstance(reference, str) or not REFERENCE_RE.fullmatch(reference):
        raise ValueError("invalid media token reference")
    digest = hmac.new(key, _DERIVATION + reference.encode("ascii"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")


def opened_operation(op: dict, key: bytes) -> tuple[dict, dict]:
    """The operation as the provisioner works with it: each reference replaced by its token. Returns it and
    {token: reference}, what sealed_operation needs to put the references back. A value that is no reference (a
    token recorded by metalclaim 0.2.0, or a hand-edited one) stays as it is and maps to itself."""
    opened, references = dict(op), {}
    for name in TOKEN_FIELDS:
        value = op.get(name)
        if not value:
            continue
        token = token_for(key, value) if isinstance(value, str) and REFERENCE_RE.fullmatch(value) else value
        opened[name], references[token] = token, value
    return opened, references


def sealed_operation(op: dict, references: dict) -> dict:
    """The operation as a host may record it: each token replaced by its reference. A token with none (never minted
    through new_reference) is refused rather than written where other identities read it."""
    sealed = dict(op)
    for name in TOKEN_FIELDS:
        value = op.get(name)
        if not value:
            continue
        if value not in references:
            raise ValueError(f"operation field {name!r} holds a media token with no reference")
        sealed[name] = references[value]
    return sealed


def redact(token: str) -> str:
    """What logs and messages may show of a token."""
    return token[:6] + "..."


def check_token(token: str) -> None:
    if not isinstance(token, str) or not TOKEN_RE.fullmatch(token):
        raise ValueError("invalid media token")


def check_filename(filename: str) -> None:
    if not isinstance(filename, str) or not FILENAME_RE.fullmatch(filename):
        raise ValueError(f"invalid media file name {filename!r}")


def _join_url(base_url: str, *segments: str) -> str:
    return base_url.rstrip("/") + "/" + "/".join(segments)


def media_url(base_url: str, token: str, filename: str) -> str:
    check_token(token)
    check_filename(filename)
    return _join_url(base_url, MEDIA_SUBDIR, token, filename)


def callback_url(base_url: str, token: str) -> str:
    check_token(token)
    return _join_url(base_url, "callback", token)


def warm_instructions(base_url: str, wait_token: str) -> dict:
    """What a cleaning job's instructions carry for a host that may stay warm: where to ask for the next job and
    where to say it was taken. The wait token is minted with the cleaning's own, after the same power-off."""
    return {"next": media_url(base_url, wait_token, NEXT_FILE), "ack": callback_url(base_url, wait_token)}
