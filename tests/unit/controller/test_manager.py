"""What a batch hands its playbook: flags become the roles' variables, and only when set."""

from __future__ import annotations

import pytest

from metalclaim.controller import __main__ as cli
from metalclaim.controller.dispatch import remote_slot_wanted, run_of, standby_group
from metalclaim.controller.groups import GROUPS
from metalclaim.controller.manager import Controller, Settings, media_warning

HOSTS = [("host", "infra", "h1"), ("host", "infra", "h2")]


def test_a_provision_batch_names_its_hosts_and_passes_only_the_options_set():
    playbook, extravars = run_of("host", HOSTS, Settings())
    assert playbook.endswith("provision.yml")
    # Unset options leave the role's defaults (one source for each default).
    assert extravars == {
        "provisioner_hosts": [{"namespace": "infra", "name": "h1"}, {"namespace": "infra", "name": "h2"}],
        "provisioner_in_process": True,  # the controller's runs step the hosts in ansible-playbook's process
    }
    settings = Settings(
        provision_max_concurrent=3, deploy_iso_url="http://127.0.0.1:1/deploy.iso", provision_callback_timeout=90
    )
    extravars = run_of("host", HOSTS, settings)[1]
    assert extravars["provisioner_max_concurrent"] == 3
    assert extravars["provisioner_deploy_iso_url"] == "http://127.0.0.1:1/deploy.iso"
    assert extravars["provisioner_callback_timeout"] == 90


def test_the_cleaning_erase_flag_reaches_the_provision_role_only_when_set():
    assert "provisioner_cleaning_erase" not in run_of("host", HOSTS, Settings())[1]
    extravars = run_of("host", HOSTS, Settings(provision_cleaning_erase="full"))[1]
    assert extravars["provisioner_cleaning_erase"] == "full"
    args = cli.parser().parse_args(["--provision-cleaning-erase", "metadata"])
    assert args.provision_cleaning_erase == "metadata"


def test_an_unknown_cleaning_erase_is_a_flag_error(capsys, monkeypatch):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--provision-cleaning-erase", "quick"])
    assert exit_.value.code == 2
    assert "--provision-cleaning-erase: invalid choice: 'quick'" in capsys.readouterr().err
    monkeypatch.setenv("METALCLAIM_PROVISION_CLEANING_ERASE", "quick")  # a variable is checked as well
    with pytest.raises(SystemExit) as exit_:
        cli.main([])
    assert exit_.value.code == 2
    assert "--provision-cleaning-erase quick: metadata or full" in capsys.readouterr().err


def test_a_tenant_batch_names_its_tenants_and_the_claim_side():
    """Every group's variables are built from Settings as the command line makes it (a renamed field broke the tenants
    side's runs: AttributeError at dispatch, every Tenant stuck)."""
    playbook, extravars = run_of("tenant", [("tenant", "", "blue"), ("tenant", "", "green")], Settings())
    assert playbook.endswith("tenant.yml")
    assert extravars == {
        "tenancy_names": ["blue", "green"],
        "tenancy_fail_on_refusal": False,
        "tenancy_claim_side_subjects": [
            {"kind": "ServiceAccount", "namespace": "metalclaim-system", "name": "metalclaim-controller"}
        ],
        "tenancy_required_prefix": "",
    }
    for group in GROUPS:
        run_of(group, [(group, "ns", "name")], Settings())


def test_a_negative_callback_timeout_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--provision-callback-timeout", "-5"])
    assert exit_.value.code == 2
    assert "--provision-callback-timeout -5.0" in capsys.readouterr().err


def test_a_negative_provision_limit_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--provision-max-concurrent", "-1"])
    assert exit_.value.code == 2
    assert "--provision-max-concurrent -1" in capsys.readouterr().err


REMOTE_CLAIM = {
    "metadata": {"namespace": "tenant-a", "name": "r1", "uid": "u1", "generation": 1},
    "spec": {"kind": "remote", "remote": {"kubeconfigSecretRef": {"name": "hw"}}},
}
BAREMETAL_CLAIM = {"metadata": {"namespace": "tenant-a", "name": "c1", "uid": "u2", "generation": 1}, "spec": {}}
OTHER_CLAIM = {
    "metadata": {"namespace": "tenant-a", "name": "v1", "uid": "u3", "generation": 1},
    "spec": {"kind": "vm"},
}


def _queued(controller: Controller) -> list:
    return sorted(controller.queue.get_batch(group=lambda key: "all", max_size=100, quiet=0, max_wait=0, timeout=0.1))


@pytest.mark.parametrize(
    ("kinds", "served"),
    [
        (("baremetal",), [("claim", "tenant-a", "c1")]),
        (("remote",), [("remote", "tenant-a", "r1")]),
        (("baremetal", "remote"), [("claim", "tenant-a", "c1"), ("remote", "tenant-a", "r1")]),
    ],
)
def test_only_the_kinds_served_are_queued(kinds, served):
    controller = Controller(Settings(kinds=kinds, watch_secrets=False), api_client=None)
    for claim in (REMOTE_CLAIM, BAREMETAL_CLAIM, OTHER_CLAIM):
        controller.stores["HostClaim"].apply("ADDED", claim)
        controller.handlers.on_claim(None, claim)
    assert _queued(controller) == served


def test_a_remote_batch_runs_the_remote_playbook_with_its_claims():
    keys = [("remote", "tenant-a", "r1"), ("remote", "tenant-b", "r2")]
    playbook, extravars = run_of("remote", keys, Settings(kinds=("remote",)))
    assert playbook.endswith("remote.yml")
    assert extravars == {
        "remote_claims": [{"namespace": "tenant-a", "name": "r1"}, {"namespace": "tenant-b", "name": "r2"}]
    }
    settings = Settings(kinds=("remote",), remote_allowed_namespaces=("hw-.*", "shared"))
    extravars = run_of("remote", keys, settings)[1]
    assert extravars["remote_allowed_namespaces"] == ["hw-.*", "shared"]


def test_an_unknown_kind_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--kinds", "baremetal,vm"])
    assert exit_.value.code == 2
    assert "--kinds 'baremetal,vm'" in capsys.readouterr().err


def test_a_bad_allowed_namespace_pattern_is_a_flag_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--kinds", "remote", "--remote-allowed-namespaces", "hw-.*,tenant-("])
    assert exit_.value.code == 2
    assert "--remote-allowed-namespaces: allowed_namespaces: 'tenant-('" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sides", "kinds", "wanted"),
    [
        (("claims",), ("baremetal", "remote"), True),
        (("claims",), ("remote",), False),  # remote claims alone: every slot is theirs
        (("claims",), ("baremetal",), False),
        (("claims", "provisioner"), ("remote",), True),
        (("claims", "tenants"), ("remote",), True),
        (("provisioner",), ("remote",), False),  # no claims side: no remote claim served
    ],
)
def test_remote_claims_get_a_slot_of_their_own_only_beside_other_work(sides, kinds, wanted):
    assert remote_slot_wanted(Settings(kinds=kinds, controllers=sides)) is wanted


@pytest.mark.parametrize(
    ("sides", "standby", "group"),
    [
        (("claims",), True, "claim"),
        (("claims", "provisioner"), True, "claim"),  # one standby per slot: the runs a tenant waits on
        (("provisioner",), True, "host"),  # a provisioner alone, as deployed
        (("tenants",), True, None),
        (("claims",), False, None),
        (("provisioner",), False, None),
    ],
)
def test_the_standby_serves_the_claim_side_else_a_provisioner_alone(sides, standby, group):
    assert standby_group(Settings(controllers=sides, standby=standby)) == group


def test_a_provisioner_standby_starts_with_the_provision_options_and_waits_for_its_hosts():
    settings = Settings(controllers=("provisioner",), standby=True, provision_max_concurrent=100)
    entry = GROUPS[standby_group(settings)]
    assert entry.playbook_path().endswith("provision.yml")
    assert entry.standby_var == "provisioner_standby"
    assert entry.run_options(settings) == {"provisioner_max_concurrent": 100, "provisioner_in_process": True}


def test_a_baremetal_batch_never_waits_behind_a_remote_one():
    """Issue 22: one runner slot, a remote run held (a hardware cluster that does not answer); a baremetal claim
    created meanwhile runs at once, on the slot the remote run does not take."""
    import threading
    import time

    controller = Controller(Settings(kinds=("baremetal", "remote"), runner_slots=1), api_client=None)
    dispatcher_ = controller.dispatcher
    dispatcher_.remote_slot = 1
    ran, held = [], threading.Event()

    def run_batch(keys, slot):
        ran.append((slot, keys))
        if keys[0][0] == "remote":
            held.wait(10)

    dispatcher_.run_batch = run_batch
    dispatchers = [threading.Thread(target=dispatcher_.loop, args=(slot,), daemon=True) for slot in (0, 1)]
    for dispatcher in dispatchers:
        dispatcher.start()
    try:
        controller.queue.add(("remote", "tenant-a", "silent"))
        deadline = time.monotonic() + 5
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
        controller.queue.add(("claim", "tenant-a", "c1"))
        while len(ran) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not held.is_set()
        assert ran == [(1, [("remote", "tenant-a", "silent")]), (0, [("claim", "tenant-a", "c1")])]
    finally:
        held.set()
        controller.stop.set()
        controller.queue.shutdown()
        for dispatcher in dispatchers:
            dispatcher.join(5)


def test_a_controller_not_started_is_not_ready():
    # Its readiness probe answers before start(): no watch yet must not read as every watch synced.
    controller = Controller(Settings(watch_secrets=False), api_client=None)
    assert controller.synced() is False


def test_a_provisioner_side_warns_at_start_of_media_no_bmc_can_fetch():
    shipped = "http://metalclaim-media.metalclaim-system.svc:8082"  # config/manager's MEDIA_URL
    warning = media_warning(Settings(controllers=("provisioner",), media_url=shipped))
    assert warning["level"] == "WARNING" and warning["problem"].startswith("the media URL names a cluster-internal")
    assert "MEDIA_URL" in warning["problem"]
    assert media_warning(Settings(controllers=("provisioner",), media_url="http://192.0.2.10:8082")) is None
    assert media_warning(Settings(controllers=("claims",), media_url=shipped)) is None  # not its concern
