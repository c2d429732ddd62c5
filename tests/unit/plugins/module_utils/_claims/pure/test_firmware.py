"""Firmware settings a claim asks for: allowed per infra namespace by its policies, refused without a leak."""

from __future__ import annotations

from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import binding
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._claims.pure import firmware as fw
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure import firmware_policy
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.pure.policy import evaluate_policies


def policy(namespace, name, allowed, admits=("tenant-a",)):
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {
            "hostclaimNamespaces": {"names": list(admits)},
            "firmware": {"allowedSettings": [{"name": k, "values": v} for k, v in allowed.items()]},
        },
    }


def claim(settings=None, namespace="tenant-a"):
    spec = {"firmware": {"settings": settings}} if settings is not None else {}
    return {"metadata": {"namespace": namespace, "name": "c1", "uid": "u1"}, "spec": spec}


def host(namespace, name):
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": {}},
        "spec": {},
        "status": {"provisioning": {"state": "available"}, "poweredOn": False},
    }


POLICIES = [
    policy("infra-a", "virt", {"ProcVirtualization": ["Enabled", "Disabled"]}),
    policy("infra-a", "smt", {"ProcHyperthreading": ["Disabled"]}),
    policy("infra-b", "virt", {"ProcVirtualization": ["Enabled"]}),
    policy("infra-c", "other-tenant", {"ProcHyperthreading": ["Enabled"]}, admits=("tenant-b",)),
]


def allowances(namespace="tenant-a"):
    authorized, decisions = evaluate_policies(POLICIES, namespace, {})
    return authorized, firmware_policy.allowances(POLICIES, decisions)


def test_policies_of_one_namespace_add_up_and_only_admitting_ones_count():
    _authorized, allowed = allowances()
    assert allowed == {
        "infra-a": {"ProcVirtualization": {"Enabled", "Disabled"}, "ProcHyperthreading": {"Disabled"}},
        "infra-b": {"ProcVirtualization": {"Enabled"}},
    }


def test_a_claim_binds_only_where_every_setting_is_allowed():
    authorized, allowed = allowances()
    hosts = [host("infra-a", "a1"), host("infra-b", "b1")]
    both = binding.plan(claim({"ProcVirtualization": "Enabled"}), hosts, authorized, firmware_allowed=allowed)
    assert both.action == "bind" and {binding.key(h) for h in both.candidates} == {("infra-a", "a1"), ("infra-b", "b1")}
    smt = binding.plan(
        claim({"ProcVirtualization": "Enabled", "ProcHyperthreading": "Disabled"}),
        hosts,
        authorized,
        firmware_allowed=allowed,
    )
    assert smt.action == "bind" and [binding.key(h) for h in smt.candidates] == [("infra-a", "a1")]
    plain = binding.plan(claim(), hosts, authorized, firmware_allowed=allowed)
    assert len(plain.candidates) == 2


def test_a_refusal_names_the_setting_and_value_asked_and_nothing_else():
    authorized, allowed = allowances()
    hosts = [host("infra-a", "a1"), host("infra-b", "b1"), host("infra-c", "c1")]
    refused = binding.plan(claim({"ProcHyperthreading": "Enabled"}), hosts, authorized, firmware_allowed=allowed)
    assert refused.action == "refuse" and refused.reason == "FirmwareSettingNotAllowed"
    assert "ProcHyperthreading='Enabled'" in refused.message
    for secret in ("infra-a", "infra-b", "infra-c", "virt", "smt", "other-tenant", "Disabled", "a1", "c1"):
        assert secret not in refused.message, secret
    # Each allowed somewhere, never together: still refused, naming one of them.
    mixed = binding.plan(
        claim({"ProcVirtualization": "Disabled", "ProcHyperthreading": "Disabled", "QuietBoot": "false"}),
        hosts,
        authorized,
        firmware_allowed=allowed,
    )
    assert mixed.reason == "FirmwareSettingNotAllowed" and "QuietBoot='false'" in mixed.message
    together = fw.refusal({"ProcVirtualization": "Disabled", "ProcHyperthreading": "Disabled"}, ["infra-b"], allowed)
    assert "ProcHyperthreading='Disabled'" in together


def test_the_hostfirmwaresettings_written_and_read_back():
    h = host("infra-a", "a1")
    made = fw.desired(None, h, {"ProcVirtualization": "Enabled"})
    assert made["kind"] == "HostFirmwareSettings" and made["metadata"]["name"] == "a1"
    assert made["metadata"]["ownerReferences"][0]["uid"] == "uid-a1"
    assert fw.desired(None, h, {}) is None
    stored = {**made, "status": {"settings": {"ProcVirtualization": "Enabled", "SerialNumber": "QPX1"}}}
    assert fw.desired(stored, h, {"ProcVirtualization": "Enabled"}) is None
    emptied = fw.desired(stored, h, {})
    assert emptied["spec"]["settings"] == {} and "status" not in emptied
    # The claim reports only what it asked, never the host's other attributes.
    assert fw.read_back(stored, {"ProcVirtualization": "Enabled", "ProcHyperthreading": "Disabled"}) == {
        "ProcVirtualization": "Enabled"
    }


def test_involved():
    assert not fw.involved(claim())
    assert fw.involved(claim({"ProcVirtualization": "Enabled"}))
    assert fw.involved({**claim(), "status": {"firmware": {"settings": {}}}})
    assert fw.involved(None)
