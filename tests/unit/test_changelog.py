"""The release notes are those of the release galaxy.yml builds: changelogs/changelog.yaml and CHANGELOG.rst have
galaxy.yml's version as a release, and no fragment waits outside it. `make changelog` folds the fragments of
changelogs/fragments/ into that release and removes them (changelogs/config.yaml: keep_fragments false), so the
tarball ships every change in its notes and no stale fragment."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from packaging.version import Version

from metalclaim_dev.support import REPO_ROOT

CHANGELOGS = REPO_ROOT / "changelogs"


def _galaxy_version() -> str:
    return str(yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["version"])


def _releases() -> dict:
    return yaml.safe_load((CHANGELOGS / "changelog.yaml").read_text())["releases"]


def _fragments() -> list[str]:
    # What antsibull-changelog reads as fragments: every file not starting with a dot.
    directory = CHANGELOGS / "fragments"
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) if directory.is_dir() else []


def test_the_changelog_releases_galaxy_yml_s_version():
    version, releases = _galaxy_version(), _releases()
    assert version in releases, f"changelogs/changelog.yaml has no release {version} (galaxy.yml): make changelog"
    newest = max(releases, key=Version)
    assert newest == version, f"changelogs/changelog.yaml releases {newest}, newer than galaxy.yml's {version}"
    assert releases[version].get("release_date"), version
    assert releases[version].get("changes", {}).get("release_summary"), f"{version} has no release summary"
    rst = (REPO_ROOT / "CHANGELOG.rst").read_text()
    assert re.search(rf"^v{re.escape(version)}\n=+\n", rst, re.MULTILINE), (
        f"CHANGELOG.rst has no section v{version}: make changelog (it writes both files)"
    )
    # The two files say the same: CHANGELOG.rst's releases are changelog.yaml's, newest first.
    headings = re.findall(r"^v(\d+\.\d+\.\d+\S*)\n=+\n", rst, re.MULTILINE)
    assert headings == sorted(releases, key=Version, reverse=True), headings


def test_no_fragment_waits_outside_the_release():
    """A fragment left after its version's release is a change the notes and the tarball's CHANGELOG.rst leave out
    (or, already folded, a stale copy): fine only while galaxy.yml names a newer version, not released yet."""
    config = yaml.safe_load((CHANGELOGS / "config.yaml").read_text())
    assert config["keep_fragments"] is False, "make changelog must remove what it folds, or the tarball ships it"
    version, releases = _galaxy_version(), _releases()
    if version not in releases:
        return  # the next version's fragments, before its release (the test above fails meanwhile)
    folded = {name: v for v, release in releases.items() for name in release.get("fragments", [])}
    waiting = _fragments()
    described = [f"{name} (already in {folded[name]}: remove it)" if name in folded else name for name in waiting]
    assert not waiting, f"fragments outside release {version}: {', '.join(described)}; make changelog folds them"


def test_the_changelog_yaml_is_valid():
    linter = Path(sys.executable).parent / "antsibull-changelog"
    result = subprocess.run(
        [str(linter), "lint-changelog-yaml", "--strict", str(CHANGELOGS / "changelog.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
