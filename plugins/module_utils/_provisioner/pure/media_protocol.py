# Copyright: metalclaim maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the provisioner, the media server and the image writer agree on: tokens, file names, URLs.

Pure. The files themselves are written by _provisioner/io/media.py; the server
(controller/metalclaim/mediaserver.py) keeps its own copy of these names, and
tests/unit/plugins/module_utils/_provisioner/io/test_media.py checks that they agree.
"""

from __future__ import annotations

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
