"""The media directory contract (_media) and the media server's own copy of it (metalclaim.mediaserver)."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io import media
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import media_protocol as protocol

from metalclaim import mediaserver


def test_server_and_collection_agree_on_the_layout():
    assert mediaserver.MEDIA_SUBDIR == protocol.MEDIA_SUBDIR
    assert mediaserver.CALLBACK_SUBDIR == protocol.CALLBACK_SUBDIR
    assert mediaserver.CALLBACK_SUFFIX == protocol.CALLBACK_SUFFIX
    assert protocol.TOKEN_RE.pattern == mediaserver.TOKEN_PATTERN
    assert protocol.FILENAME_RE.pattern == mediaserver.FILENAME_PATTERN
    assert mediaserver.CALLBACK_MAX_BYTES == protocol.CALLBACK_MAX_BYTES
    assert mediaserver.CALLBACK_STATUSES == protocol.CALLBACK_STATUSES


def test_server_routes_match_the_urls_the_collection_builds():
    token = protocol.new_token()
    media_path = protocol.media_url("http://127.0.0.1:1", token, "config-drive.iso").removeprefix("http://127.0.0.1:1")
    route = mediaserver.MEDIA_ROUTE.fullmatch(media_path)
    assert route and route["token"] == token and route["filename"] == "config-drive.iso"
    callback_path = protocol.callback_url("http://127.0.0.1:1/", token).removeprefix("http://127.0.0.1:1")
    assert mediaserver.CALLBACK_ROUTE.fullmatch(callback_path)["token"] == token


def test_publish_is_private_and_unguessable(tmp_path):
    token, path = media.publish(str(tmp_path), "config-drive.iso", b"iso")
    assert protocol.TOKEN_RE.fullmatch(token)
    assert path == str(tmp_path / "media" / token / "config-drive.iso")
    with open(path, "rb") as handle:
        assert handle.read() == b"iso"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for directory in (tmp_path / "media", tmp_path / "media" / token, tmp_path / "callbacks"):
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert media.publish(str(tmp_path), "config-drive.iso", b"iso")[0] != token
    assert os.listdir(tmp_path / "media" / token) == ["config-drive.iso"]  # no temporary file left


def test_publish_under_a_given_token(tmp_path):
    token = protocol.new_token()
    assert media.publish(str(tmp_path), "a.iso", b"1", token=token)[0] == token
    with pytest.raises(ValueError, match="token"):
        media.publish(str(tmp_path), "a.iso", b"1", token="../../etc")


@pytest.mark.parametrize("filename", ["../x", ".hidden", "a/b", "", "x" * 200, "a b"])
def test_unsafe_file_names_are_refused(tmp_path, filename):
    with pytest.raises(ValueError, match="file name"):
        media.publish(str(tmp_path), filename, b"")


def test_callback_result_and_withdraw(tmp_path):
    token, path = media.publish(str(tmp_path), "config-drive.iso", b"iso")
    assert media.callback_result(str(tmp_path), token) is None
    store = mediaserver.MediaStore(str(tmp_path))
    assert store.record_callback(token, {"status": "success", "message": "written"})
    assert not store.record_callback(token, {"status": "failure", "message": "again"})
    result = media.callback_result(str(tmp_path), token)
    assert result["status"] == "success" and result["message"] == "written" and result["received_at"] > 0
    media.withdraw(str(tmp_path), token)
    assert not os.path.exists(path)
    assert media.callback_result(str(tmp_path), token) is None
    assert not store.token_exists(token)
    media.withdraw(str(tmp_path), token)  # idempotent


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"\xff", "UTF-8 JSON"),
        (b"[]", "JSON object"),
        (b'{"status": "done"}', "status"),
        (b'{"status": "success", "message": 1}', "message"),
        (b'{"status": "success", "extra": 1}', "unknown fields"),
    ],
)
def test_invalid_callbacks_are_refused(body, complaint):
    with pytest.raises(ValueError, match=complaint):
        mediaserver.validate_callback(body)


def test_valid_callback():
    body = json.dumps({"status": "failure", "message": "sha256 checksum mismatch"}).encode()
    assert mediaserver.validate_callback(body) == {"status": "failure", "message": "sha256 checksum mismatch"}
    assert mediaserver.validate_callback(b'{"status": "success"}') == {"status": "success", "message": ""}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=90-", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=50-500", (50, 99)),
        ("bytes=100-", "unsatisfiable"),
        ("bytes=-0", "unsatisfiable"),
        ("bytes=0-1,5-6", None),
        ("items=0-1", None),
    ],
)
def test_ranges(header, expected):
    assert mediaserver.parse_range(header, 100) == expected


def test_tokens_are_redacted_in_log_text():
    token = protocol.new_token()
    line = mediaserver.redact(f"GET /media/{token}/config-drive.iso HTTP/1.1")
    assert token not in line and f"/media/{token[:6]}.../config-drive.iso" in line
    assert protocol.redact(token) == token[:6] + "..."


def test_media_no_host_records_are_swept_once_older_than_any_operation(tmp_path):
    directory = str(tmp_path)
    orphan, orphan_path = media.publish(directory, "config-drive.iso", b"iso")  # its host write failed
    owned, owned_path = media.publish(directory, "config-drive.iso", b"iso")
    _fresh, fresh_path = media.publish(directory, "config-drive.iso", b"iso")  # this step's, not yet recorded
    mediaserver.MediaStore(directory).record_callback(orphan, {"status": "success", "message": "late"})
    now = os.path.getmtime(orphan_path)
    old = now - 4000
    for token in (orphan, owned):
        os.utime(os.path.dirname(media.media_path(directory, token, "config-drive.iso")), (old, old))
    os.utime(media.callback_path(directory, orphan), (old, old))
    assert media.sweep(directory, {owned}, older_than=2100, now=now) == [orphan]
    assert not os.path.exists(orphan_path) and media.callback_result(directory, orphan) is None
    assert os.path.exists(owned_path) and os.path.exists(fresh_path)
    assert not mediaserver.MediaStore(directory).token_exists(orphan)
    assert media.sweep(directory, {owned}, older_than=2100, now=now) == []  # idempotent


def test_the_media_directory_is_bounded(tmp_path):
    media.publish(str(tmp_path), "config-drive.iso", b"x" * 600)
    with pytest.raises(ValueError, match="media directory holds more than"):
        media.publish(str(tmp_path), "config-drive.iso", b"x" * 600, limit=1000)


# -- token references: what a host records instead of its tokens -------------------------------------------------------


def test_a_reference_opens_into_a_token_only_under_its_key():
    key, other_key = bytes(range(32)), bytes(32)
    reference = protocol.new_reference()
    assert protocol.REFERENCE_RE.fullmatch(reference) and not protocol.TOKEN_RE.fullmatch(reference)
    token = protocol.token_for(key, reference)
    assert protocol.TOKEN_RE.fullmatch(token)  # served and called back like any token
    assert token == protocol.token_for(key, reference) != protocol.token_for(other_key, reference)
    assert reference not in token
    for bad_key, bad_reference in ((b"short", reference), (key, token), (key, "../" * 8), (key, None)):
        with pytest.raises(ValueError):
            protocol.token_for(bad_key, bad_reference)


def test_an_operation_is_recorded_with_references_and_opened_with_tokens():
    key = bytes(range(32))
    recorded = {"kind": "clean", "token": "T" * 22, "wait": "W" * 22, "started": "2026-12-02T00:00:00Z"}
    opened, references = protocol.opened_operation(recorded, key)
    assert opened == {**recorded, "token": protocol.token_for(key, "T" * 22), "wait": protocol.token_for(key, "W" * 22)}
    assert protocol.sealed_operation(opened, references) == recorded
    # A step that moves a token to another field (a cleaning's wait token becomes the warm host's) records its
    # reference there.
    warm = {"kind": "warm", "token": opened["wait"]}
    assert protocol.sealed_operation(warm, references) == {"kind": "warm", "token": "W" * 22}
    # A token minted elsewhere, with no reference, is never written where the host's readers would see it.
    with pytest.raises(ValueError, match="'token' holds a media token with no reference"):
        protocol.sealed_operation({"kind": "deploy", "token": protocol.new_token()}, references)
    # What metalclaim 0.2.0 recorded (a token itself) stays as it was, so its operation goes on.
    legacy = {"kind": "deploy", "token": "L" * 43}
    opened, references = protocol.opened_operation(legacy, key)
    assert opened == legacy and protocol.sealed_operation(opened, references) == legacy


def test_the_token_key_is_made_once_private_and_shared(tmp_path):
    directory = str(tmp_path / "media")
    key = media.token_key(directory)
    assert len(key) == protocol.KEY_BYTES and media.token_key(directory) == key
    path = tmp_path / "media" / media.TOKEN_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(directory)) == [media.TOKEN_KEY_FILE]  # no temporary file left behind
    path.write_bytes(b"torn")
    with pytest.raises(ValueError, match="not a 32-byte media token key"):
        media.token_key(directory)


def test_the_media_server_never_serves_the_token_key(tmp_path):
    media.token_key(str(tmp_path))
    assert not mediaserver.MEDIA_ROUTE.fullmatch(f"/media/{media.TOKEN_KEY_FILE}")
    assert not mediaserver.MEDIA_ROUTE.fullmatch(f"/media/../{media.TOKEN_KEY_FILE}")


def test_a_media_directory_another_user_owns_is_used_as_it_is(tmp_path, monkeypatch):
    """The provisioner's pod mounts the media directory as an emptyDir (root's, 0777) and runs as user 65532, which
    may not chmod it: the controller crashed at start making the token key (node-test). Below it, all is private."""
    mount = tmp_path / "media"
    mount.mkdir(mode=0o777)
    mount.chmod(0o777)
    monkeypatch.setattr(media.os, "geteuid", lambda: os.stat(mount).st_uid + 1)  # as another user than the owner
    chmod = media.os.chmod

    def refused_on_the_mount(path, mode):
        if os.path.samefile(path, mount):
            raise PermissionError(1, "Operation not permitted", str(path))
        chmod(path, mode)

    monkeypatch.setattr(media.os, "chmod", refused_on_the_mount)
    assert len(media.token_key(str(mount))) == protocol.KEY_BYTES
    _token, path = media.publish(str(mount), "config-drive.iso", b"iso")
    assert stat.S_IMODE(mount.stat().st_mode) == 0o777  # left as the platform made it
    assert stat.S_IMODE((mount / "media").stat().st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
