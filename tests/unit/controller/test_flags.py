"""metalclaim-controller's flags as Kubernetes users type them: a boolean flag alone, Go durations, --version, and
one line (exit 1) for what the flags cannot tell, a missing collection or a bad kubeconfig, never a traceback."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes.config import kube_config

from metalclaim.controller import __main__ as cli
from metalclaim.controller import settings
from metalclaim.controller.settings import Settings

DURATION_FLAGS = sorted(action.option_strings[0] for action in cli.parser()._actions if action.type is cli.duration)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15", 15.0),
        ("0.25", 0.25),
        ("-5", -5.0),  # a number as given, for the range checks to name
        ("15s", 15.0),
        ("2m", 120.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("2h45m30s", 9930.0),
        ("1m0.5s", 60.5),
        ("-1m", -60.0),
    ],
)
def test_a_duration_is_seconds_or_a_go_duration(text, seconds):
    assert cli.duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5x", "1h30", "m", "15 s", "s15", "1d", "inf", "nan", "1h-30m"])
def test_anything_else_is_not_a_duration(text):
    with pytest.raises(Exception, match="is not a duration"):
        cli.duration(text)


def test_every_time_flag_is_a_duration():
    # Every flag that is a time takes 15s as well as 15: none is left a bare float.
    assert not [a.option_strings for a in cli.parser()._actions if a.type is float]
    assert "--resync-period" in DURATION_FLAGS and "--grace-period" in DURATION_FLAGS
    assert "--provision-callback-timeout" in DURATION_FLAGS and "--leader-elect-lease-duration" in DURATION_FLAGS
    for flag in DURATION_FLAGS:
        args = cli.parser().parse_args([flag, "1h30m"])
        assert getattr(args, flag.lstrip("-").replace("-", "_")) == 5400.0, flag


def test_each_flag_is_defined_once_and_its_default_shown_as_written():
    options = [o for a in cli.parser()._actions for o in a.option_strings]
    assert len(options) == len(set(options))
    args = cli.parser().parse_args([])
    assert (args.resync_period, args.batch_quiet, args.batch_max_wait) == (600.0, 0.005, 0.25)
    assert (args.leader_elect_lease_duration, args.grace_period, args.standby_max_age) == (15.0, 20.0, 300.0)
    help_text = " ".join(cli.parser().format_help().split())  # as wrapped to any width
    assert "(default: 10m)" in help_text and "(default: 250ms)" in help_text


def test_help_lists_every_flag_in_its_section_with_one_metavar_style():
    sections = {group.title: group for group in cli.parser()._action_groups}
    assert [title for title in sections if title in settings.GROUPS] == list(settings.GROUPS)
    placed = {}
    for title in settings.GROUPS:
        actions = sections[title]._group_actions
        assert actions, f"section {title!r} lists no flag"
        placed |= {action.option_strings[0]: title for action in actions}
    assert sorted(placed) == sorted(flag.name for _name, flag in settings.flags())
    assert placed["--kubeconfig"] == "API server and sides" and placed["--identity"] == "leader election"
    assert placed["--metrics-secure"] == placed["--health-probe-bind-address"] == "metrics and health"
    assert placed["--deploy-iso-url"] == "provisioner side" and placed["--kinds"] == "claim side"
    for action in (a for title in settings.GROUPS for a in sections[title]._group_actions):
        assert re.fullmatch(r"[A-Z]+(/[A-Z]+)?", action.metavar), (action.option_strings, action.metavar)
    metavars = {a.option_strings[0]: a.metavar for a in cli.parser()._actions if a.option_strings}
    assert metavars["--resync-period"] == "DURATION" and metavars["--batch-max-size"] == "N"
    assert metavars["--leader-elect"] == "BOOL" and metavars["--metrics-bind-address"] == "ADDRESS"
    help_text = cli.parser().format_help()
    assert "--leader-elect [BOOL]" in help_text and "--kubeconfig PATH" in help_text
    assert "\nmetrics and health:\n" in help_text


def test_help_is_the_same_at_each_call_and_the_identity_is_made_at_start(monkeypatch):
    monkeypatch.delenv("METALCLAIM_IDENTITY", raising=False)
    first, second = cli.parser().format_help(), cli.parser().format_help()
    assert first == second
    assert f"(default: {settings.IDENTITY_SHOWN})" in " ".join(first.split())
    # Made once per Settings (a process makes one at start), from this host's name, distinct each time.
    one, two = Settings().identity, Settings().identity
    assert one != two and one.startswith(f"{socket.gethostname()}_")
    p = cli.parser()
    made = cli.settings_from(p, p.parse_args([]), late=False)["identity"]
    assert made.startswith(f"{socket.gethostname()}_") and len(made) > len(socket.gethostname()) + 1
    assert cli.settings_from(p, p.parse_args(["--identity", "pod-0"]), late=False)["identity"] == "pod-0"
    monkeypatch.setenv("METALCLAIM_IDENTITY", "pod-1")  # as the Deployments set it: shown as given
    p = cli.parser()
    assert "(default: pod-1)" in p.format_help()
    assert cli.settings_from(p, p.parse_args([]), late=False)["identity"] == "pod-1"


def test_metrics_are_secure_unless_told_and_a_cert_dir_needs_them_secure(capsys):
    args = cli.parser().parse_args([])
    assert (args.metrics_secure, args.metrics_bind_address, args.metrics_cert_dir) == (True, "127.0.0.1:8443", "")
    assert Settings().metrics_secure is True
    assert cli.parser().parse_args(["--metrics-secure=false"]).metrics_secure is False
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--metrics-secure=false", "--metrics-cert-dir", "/etc/metrics-tls"])
    assert exit_.value.code == 2
    assert "--metrics-cert-dir serves HTTPS" in capsys.readouterr().err


def test_a_duration_from_the_environment(monkeypatch):
    monkeypatch.setenv("METALCLAIM_RESYNC_PERIOD", "1h")
    monkeypatch.setenv("METALCLAIM_GRACE_PERIOD", "45")
    args = cli.parser().parse_args([])
    assert (args.resync_period, args.grace_period) == (3600.0, 45.0)
    assert cli.parser().parse_args(["--resync-period", "2m"]).resync_period == 120.0  # the flag wins


@pytest.mark.parametrize(
    ("argv", "value"),
    [
        ([], False),
        (["--leader-elect"], True),
        (["--leader-elect", "--leader-election-id", "x"], True),
        (["--leader-elect=true"], True),
        (["--leader-elect", "false"], False),
        (["--leader-elect=False"], False),
        (["--leader-elect", "1"], True),
        (["--leader-elect=off"], False),
    ],
)
def test_a_boolean_flag_alone_is_true(argv, value):
    assert cli.parser().parse_args(argv).leader_elect is value


def test_every_boolean_flag_alone_is_true():
    booleans = [a.option_strings[0] for a in cli.parser()._actions if a.type is cli._bool]
    assert sorted(booleans) == ["--cluster-api", "--leader-elect", "--metrics-secure", "--standby", "--watch-secrets"]
    for flag in booleans:
        assert getattr(cli.parser().parse_args([flag]), flag.lstrip("-").replace("-", "_")) is True


@pytest.mark.parametrize("argv", [["--leader-elect", "maybe"], ["--leader-elect=2"], ["--watch-secrets=nope"]])
def test_an_unknown_boolean_value_is_refused(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0].split('=')[0]}: " in err
    assert "is not a boolean: true or false" in err


def test_an_unknown_boolean_from_the_environment_is_refused(monkeypatch, capsys):
    monkeypatch.setenv("METALCLAIM_LEADER_ELECT", "maybe")
    with pytest.raises(SystemExit) as exit_:
        cli.parser().parse_args([])
    assert exit_.value.code == 2
    assert "'maybe' is not a boolean" in capsys.readouterr().err
    monkeypatch.setenv("METALCLAIM_LEADER_ELECT", "true")
    assert cli.parser().parse_args([]).leader_elect is True


def test_a_bad_duration_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--resync-period", "10 minutes"])
    assert exit_.value.code == 2
    assert "argument --resync-period: '10 minutes' is not a duration" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("metalclaim-controller ") and out.count("\n") == 1
    assert out.split()[1] == cli._version() != ""


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("metalclaim-controller: error: ")
    return lines[0]


def test_a_missing_collection_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(tmp_path))
    assert cli.main(["--kubeconfig", str(tmp_path / "kubeconfig")]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"metalclaim.hostclaim is not installed in the collections path {tmp_path}" in line


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "No configuration found"),  # no such file
        ("", "is empty"),
        ("clusters: [\n", "while parsing"),  # not YAML
        ("- a\n- b\n", "list indices"),  # YAML, not a kubeconfig
        ("apiVersion: v1\nkind: Config\nclusters: []\n", "current-context"),
    ],
)
def test_a_bad_kubeconfig_is_one_line(content, says, tmp_path, capsys):
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    assert cli.main(["--kubeconfig", str(path)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"--kubeconfig {path}: " in line and says in line


def test_no_kubeconfig_outside_a_pod_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    assert cli.main([]) == 1
    assert "not in a pod, the default kubeconfig: " in _one_line(capsys.readouterr().err)


def test_the_command_prints_one_line_not_a_traceback(tmp_path):
    # As a user runs it: the process's whole stderr, and its exit status.
    (tmp_path / "kubeconfig").write_text("clusters: [\n")
    result = subprocess.run(
        [sys.executable, "-m", "metalclaim.controller", "--kubeconfig", str(tmp_path / "kubeconfig")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    _one_line(result.stderr)


def test_a_metrics_cert_dir_without_its_pair_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", str(Path(__file__).resolve().parents[3] / ".collections"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    argv = ["--kubeconfig", str(kubeconfig), "--metrics-cert-dir", str(tmp_path / "none")]
    assert cli.main([*argv, "--health-probe-bind-address", "0"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"--metrics-cert-dir {tmp_path / 'none'}: " in line
