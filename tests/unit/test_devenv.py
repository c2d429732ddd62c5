"""Pure parts of the devenv: PKI identities, tenancy objects, host inventory."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
import threading

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from metalclaim_dev.devenv import processes, redfish
from metalclaim_dev.devenv.controlplane import IDENTITIES
from metalclaim_dev.devenv.env import INFRA_NAMESPACE, TENANT_NAMESPACES, host_inventory, tenancy_objects
from metalclaim_dev.devenv.pki import CertificateAuthority
from metalclaim_dev.devenv.processes import alive, spawn, stop_process_group


def load(path):
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_client_certificates_carry_user_and_groups(tmp_path):
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("tenant-a", *IDENTITIES["tenant-a"])
    cert = load(pair.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "tenant-a"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["metalclaim:tenants"]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.issuer == load(ca.cert_path).subject
    assert oct(pair.key.stat().st_mode & 0o777) == "0o600"


def test_serving_certificate_names_loopback(tmp_path):
    pair = CertificateAuthority(tmp_path).issue("apiserver", "kube-apiserver", server_names=("127.0.0.1", "localhost"))
    sans = load(pair.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]


def test_serving_certificate_passes_strict_verification(tmp_path):
    # Python 3.13's default TLS context, and urllib3's (the kubernetes client) on it, verify with VERIFY_X509_STRICT,
    # which wants key identifiers: a module run by ansible-core 2.21 on 3.13 must accept the devenv's apiserver.
    ca = CertificateAuthority(tmp_path)
    pair = ca.issue("apiserver", "kube-apiserver", server_names=("127.0.0.1",))
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(pair.cert, pair.key)
    strict = ssl.create_default_context(cafile=str(ca.cert_path))
    strict.verify_flags |= ssl.VERIFY_X509_STRICT
    left, right = socket.socketpair()

    def serve():
        with contextlib.suppress(OSError):  # (ssl.SSLError too: the client hangs up on a certificate it refuses)
            serving.wrap_socket(right, server_side=True).close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        with strict.wrap_socket(left, server_hostname="127.0.0.1") as tls:
            assert tls.version()
    finally:
        left.close()
        server.join(10)
        right.close()


def test_ca_is_reused_not_regenerated(tmp_path):
    first = CertificateAuthority(tmp_path).cert_path.read_bytes()
    assert CertificateAuthority(tmp_path).cert_path.read_bytes() == first


def test_only_admin_is_a_cluster_admin():
    masters = [name for name, (_user, groups) in IDENTITIES.items() if "system:masters" in groups]
    assert masters == ["admin"]


def test_each_tenant_is_bound_only_in_its_own_namespace():
    bindings = [o for o in tenancy_objects() if o["kind"] == "RoleBinding"]
    for tenant, namespace in TENANT_NAMESPACES.items():
        mine = [b for b in bindings if b["subjects"][0]["name"] == tenant]
        assert [(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in mine] == [(namespace, "metalclaim-tenant")]
    cluster_bindings = [o for o in tenancy_objects() if o["kind"] == "ClusterRoleBinding"]
    assert [(b["roleRef"]["name"], b["subjects"][0]["name"]) for b in cluster_bindings] == [
        ("metalclaim-controller", "metalclaim-controller"),
        ("metalclaim-provisioner", "metalclaim-provisioner"),
    ]


def test_each_side_of_the_controller_gets_secret_rights_only_per_namespace():
    """Claims: read in tenant namespaces, write copies in infra ones; provisioner: read in infra ones."""
    secret_roles = sorted(
        (b["metadata"]["namespace"], b["roleRef"]["name"], b["subjects"][0]["name"])
        for b in tenancy_objects()
        if b["kind"] == "RoleBinding" and b["roleRef"]["name"].endswith(("-reader", "-writer"))
    )
    assert secret_roles == sorted(
        [
            (INFRA_NAMESPACE, "metalclaim-copies-writer", "metalclaim-controller"),
            (INFRA_NAMESPACE, "metalclaim-bmc-secrets-reader", "metalclaim-provisioner"),
            *((ns, "metalclaim-tenant-secrets-reader", "metalclaim-controller") for ns in TENANT_NAMESPACES.values()),
        ]
    )


def test_host_inventory_pairs_each_host_with_its_bmc_secret():
    systems = redfish.fleet_systems(3, 8000)
    fleet = redfish.RedfishFleet("http://127.0.0.1:8000", "admin", "s3cret", systems, 1, "/s", "/l")
    objects = host_inventory(fleet)
    hosts = [o for o in objects if o["kind"] == "BareMetalHost"]
    secrets = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Secret"}
    assert [h["metadata"]["name"] for h in hosts] == ["bm-00", "bm-01", "bm-02"]
    assert [h["metadata"]["labels"]["infra-kind"] for h in hosts] == ["medium", "large", "medium"]
    for host, system in zip(hosts, systems, strict=True):
        assert host["metadata"]["namespace"] == INFRA_NAMESPACE
        assert host["spec"]["bmc"]["address"] == system.address
        assert host["spec"]["bootMACAddress"] == system.boot_mac
        secret = secrets[host["spec"]["bmc"]["credentialsName"]]
        assert secret["stringData"] == {"username": "admin", "password": "s3cret"}
        # The password lives only in the Secret, never in the host object.
        assert "s3cret" not in repr(host)


def test_stop_process_group_stops_children_too(tmp_path):
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
    script += "print(flush=True); time.sleep(60)"
    pid = spawn([sys.executable, "-c", script], tmp_path / "log")
    children = []
    for _attempt in range(100):
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
        if children:
            break
        subprocess.run(["sleep", "0.05"], check=True)
    assert children, "the test process did not start its child"
    stop_process_group(pid)
    assert not alive(pid)
    assert not any(alive(int(child)) for child in children)


def test_free_ports_come_from_below_the_ephemeral_range(tmp_path, monkeypatch):
    """An outgoing connection takes its port from the ephemeral range: one handed to a listener of ours must not be
    there, or a connection may take it before the listener binds (etcd failed so in CI)."""
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", ranges)
    ports = {processes.free_port() for _ in range(50)}
    assert all(processes.OWN_PORTS_LOWEST <= port < 32768 for port in ports), sorted(ports)
    assert len(ports) > 40  # at random: parallel callers rarely meet
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE_FILE", tmp_path / "absent")  # not Linux: bind(0)
    assert 0 < processes.free_port() < 65536
