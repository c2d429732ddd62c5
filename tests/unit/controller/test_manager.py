"""What a batch hands its playbook: flags become the roles' variables, and only when set."""

from __future__ import annotations

import pytest

from metalclaim.controller import __main__ as cli
from metalclaim.controller.manager import Controller, Settings

HOSTS = [("host", "infra", "h1"), ("host", "infra", "h2")]


def test_a_provision_batch_names_its_hosts_and_passes_only_the_options_set():
    playbook, extravars = Controller(Settings(), api_client=None)._extravars("host", HOSTS)
    assert playbook.endswith("provision.yml")
    # Unset options leave the role's defaults (one source for each default).
    assert extravars == {
        "hostclaim_provision_hosts": [{"namespace": "infra", "name": "h1"}, {"namespace": "infra", "name": "h2"}]
    }
    settings = Settings(provision_max_concurrent=3, deploy_iso_url="http://127.0.0.1:1/deploy.iso")
    extravars = Controller(settings, api_client=None)._extravars("host", HOSTS)[1]
    assert extravars["hostclaim_provision_max_concurrent"] == 3
    assert extravars["hostclaim_provision_deploy_iso_url"] == "http://127.0.0.1:1/deploy.iso"


def test_a_negative_provision_limit_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--provision-max-concurrent", "-1"])
    assert exit_.value.code == 2
    assert "--provision-max-concurrent -1" in capsys.readouterr().err
