"""ansible-runner's private data dir is the controller's own: another local user who creates it first (or plants a
symlink there) must never get code run as the controller."""

from __future__ import annotations

import os
import stat

import pytest

from metalclaim.controller.runs import private_directory


def test_a_new_directory_is_made_private(tmp_path):
    path = tmp_path / "runner"
    private_directory(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_an_own_directory_open_to_others_is_closed(tmp_path):
    path = tmp_path / "runner"
    path.mkdir(mode=0o777)
    path.chmod(0o777)
    private_directory(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory another user's takes root")
def test_a_directory_another_user_made_first_is_refused(tmp_path):
    path = tmp_path / "metalclaim-controller"
    (path / "env").mkdir(parents=True)
    (path / "env" / "envvars").write_text("PATH: /tmp/attacker\n")  # what ansible-runner would take
    os.chown(path, 12345, 12345)
    with pytest.raises(PermissionError, match="owned by uid 12345"):
        private_directory(path)


def test_a_symlink_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "runner").symlink_to(elsewhere)
    with pytest.raises(PermissionError, match="symlink"):
        private_directory(tmp_path / "runner")
