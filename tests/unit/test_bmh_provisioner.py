"""Pure helpers of the provisioner's edge."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._bmh_provisioner import (
    checksum_type,
    without_tokens,
)

TOKEN = "h128PKc4zqNoP_2WL5CB6OJ-3p569jNRQfcPOl2Sti0"


def test_media_tokens_never_reach_an_error_message():
    message = f"inserting http://127.0.0.1:1/media/{TOKEN}/config-drive.iso into virtual media config: HTTP 500"
    scrubbed = without_tokens(message)
    assert TOKEN not in scrubbed
    assert "/media/h128PK.../config-drive.iso" in scrubbed


@pytest.mark.parametrize(
    ("checksum", "expected"),
    [
        ("0" * 32, "md5"),
        ("a" * 64, "sha256"),
        ("F" * 128, "sha512"),
        ("http://127.0.0.1:8080/images/jammy/img.md5", "md5"),
        ("http://127.0.0.1:8080/SHA256SUMS", "sha256"),
    ],
)
def test_checksum_type_auto_as_metal3(checksum, expected):
    assert checksum_type(checksum) == expected


def test_an_undecidable_checksum_type_names_the_field():
    with pytest.raises(ValueError, match="checksumType"):
        checksum_type("http://127.0.0.1/checksums.txt")
