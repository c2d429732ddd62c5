"""The image writer's instructions, checked: modes, Metal3's checksumType "auto", what is dropped."""

from __future__ import annotations

import pytest
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure import instructions

TOKEN = "A" * 43
DEPLOY = {
    "mode": "deploy",
    "image": {
        "url": "http://127.0.0.1:8080/images/focal.qcow2",
        "format": "qcow2",
        "checksum": "ab" * 32,
        "checksumType": "sha256",
    },
    "callback": {"url": f"http://127.0.0.1:9000/callback/{TOKEN}", "token": TOKEN},
}


def test_clean_mode_needs_no_image_and_drops_unknown_keys():
    clean = {"mode": "clean", "callback": DEPLOY["callback"], "image": DEPLOY["image"], "extra": 1}
    assert instructions.validate_deploy(clean) == {"mode": "clean", "callback": DEPLOY["callback"]}


@pytest.mark.parametrize(
    ("checksum", "checksum_type"), [("a" * 32, "md5"), ("a" * 64, "sha256"), ("a" * 128, "sha512")]
)
def test_an_absent_or_auto_checksum_type_follows_the_digest_length(checksum, checksum_type):
    for given in (None, "auto"):
        image = dict(DEPLOY["image"], checksum=checksum, checksumType=given)
        assert instructions.validate_deploy({**DEPLOY, "image": image})["image"]["checksumType"] == checksum_type


def test_auto_needs_a_known_length_or_a_literal_digest():
    for checksum in ("a" * 40, "https://127.0.0.1/SHA256SUMS"):
        with pytest.raises(ValueError, match="checksumType"):
            instructions.validate_deploy(
                {**DEPLOY, "image": dict(DEPLOY["image"], checksum=checksum, checksumType="auto")}
            )


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
    assert instructions.checksum_type(checksum) == expected


def test_an_undecidable_checksum_type_names_the_field():
    with pytest.raises(ValueError, match="checksumType"):
        instructions.checksum_type("http://127.0.0.1/checksums.txt")


def test_a_checksum_url_is_accepted():
    image = dict(DEPLOY["image"], checksum="https://127.0.0.1/SHA256SUMS")
    assert instructions.validate_deploy({**DEPLOY, "image": image})["image"]["checksum"] == image["checksum"]
