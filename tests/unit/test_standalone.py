"""A checkout stands alone: nothing tracked names a path outside the repository.

Users clone the repository by itself, and `.ci/run` tests a clone in a directory holding nothing else; a path that
climbs out of the tree (`../beside/...`, `REPO_ROOT.parent`, `parents[k]` past the root) works only on a machine
that happens to have that directory beside the checkout, and fails for everyone else.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
# A run of `../` that starts a path: at the start of a word, or after what the file's own directory stands for
# (Ansible's role_path and playbook_dir, a script's dirname "$0"). `x/../y` inside a longer path is left alone
# (in the tests those are attack payloads for the media server, never paths of ours).
CLIMB = re.compile(
    r"""(?:(?<![\w.}/\]-])|\{\{\s*(?P<role>role_path)?(?:playbook_dir)?\s*\}\}/"""
    r"""|(?P<here>\$\(dirname\s+"?\$(?:0|\{BASH_SOURCE\[0\]\})"?\)/))"""
    r"""(?P<up>(?:\.\./)+|\.\.(?=["'\s)]|$))(?P<rest>[\w.{}$-]*)"""
)
# Python: the repository root's parent, or `Path(__file__).resolve().parents[k]` beyond the root.
ROOT_PARENT = re.compile(r"\b(?:REPO|REPO_ROOT|ROOT)\.parents?\b")
FILE_PARENTS = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[(\d+)\]")
# Where a relative path is taken from the repository root (make and CI run there) rather than the file's directory.
RUN_AT_ROOT = ("Makefile", ".ci/")
TEXT = (".py", ".sh", ".yml", ".yaml", ".toml", ".cfg", ".txt", ".j2", ".json", ".ini", "Makefile", "Containerfile")


def tracked() -> list[str]:
    """The tracked text files, less this one (its examples climb out on purpose)."""
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    this = Path(__file__).resolve().relative_to(REPO).as_posix()
    return [n for n in listed.splitlines() if (n.endswith(TEXT) or n.startswith(".ci/")) and n != this]


def climbs_out(name: str, text: str) -> list[str]:
    """Each place of `text` (the tracked file `name`) that names a path outside the repository."""
    found = []
    base = "." if name.startswith(RUN_AT_ROOT) else posixpath.dirname(name) or "."
    for number, line in enumerate(text.splitlines(), 1):
        for match in CLIMB.finditer(line):
            start = base
            if match.group("role"):  # roles/<role>
                start = "/".join(name.split("/")[:2])
            elif match.group("here"):  # the script's own directory, wherever it runs
                start = posixpath.dirname(name) or "."
            target = posixpath.normpath(posixpath.join(start, match.group("up") + match.group("rest")))
            if target == ".." or target.startswith("../"):
                found.append(f"{name}:{number}: {line.strip()}")
        if name.endswith(".py"):
            if ROOT_PARENT.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
            for match in FILE_PARENTS.finditer(line):
                if int(match.group(1)) >= len(PurePosixPath(name).parts):
                    found.append(f"{name}:{number}: {line.strip()}")
    return found


def test_no_tracked_file_names_a_path_outside_the_repository():
    names = tracked()
    assert "Makefile" in names and ".ci/run" in names and "devtools/metalclaim_dev/devenv/demo.py" in names
    found = [place for name in names for place in climbs_out(name, (REPO / name).read_text(errors="replace"))]
    assert not found, "paths outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("devtools/metalclaim_dev/devenv/demo.py", 'GUIDE = REPO_ROOT.parent / "beside" / "guide.txt"'),
        ("tests/unit/test_crds.py", 'SEED = Path(__file__).resolve().parents[3] / "beside"'),
        (".ci/run", "[[ -d ../beside/docs ]] || exit 1"),
        ("Makefile", "\tcp ../beside/guide.txt build/"),
        ("hack/x.sh", 'cd "$(dirname "$0")/../.."'),
        ("roles/install/defaults/main.yml", 'install_manifests: "{{ role_path }}/../../../config"'),
        ("config/default/kustomization.yaml", "  - ../../../outside"),
    ],
)
def test_a_path_outside_is_found(name, text):
    assert climbs_out(name, text), text


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("tests/unit/test_crds.py", "REPO = Path(__file__).resolve().parents[2]"),
        ("roles/install/defaults/main.yml", 'install_manifests: "{{ role_path }}/../../config"'),
        ("molecule/claims/molecule.yml", "    create: ../resources/create.yml"),
        ("config/default/kustomization.yaml", "  - ../crd"),
        ("changelogs/config.yaml", "changelog_filename_template: ../CHANGELOG.rst"),
        ("hack/x.sh", 'cd "$(dirname "$0")/.."'),
        (".ci/run", 'checkout=$(cd "$(dirname "$0")/.." && pwd)'),
        ("tests/integration/test_mediaserver.py", 'f"/media/{token}/../../../../etc/passwd",'),
    ],
)
def test_a_path_inside_is_not_found(name, text):
    assert not climbs_out(name, text), text
