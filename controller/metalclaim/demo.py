"""The main job on the embedded default: the user guide's scenario on a local fleet.

    python -m metalclaim.demo --dir .devenv --hosts 4

Brings the devenv up (control plane + Redfish emulator + registered BareMetalHosts),
applies the guide's HostDeployPolicy as the infra team and its HostClaim as a tenant,
then shows what each of them can see.
"""

from __future__ import annotations

import argparse
import base64
import functools
import http.server
import io
import json
import re
import sys
import tempfile
import threading
from pathlib import Path

import pycdlib

from . import REPO_ROOT
from .devenv.env import INFRA_NAMESPACE, TENANT_NAMESPACES, Devenv
from .devenv.processes import DevenvError
from .runner import run

GUIDE = REPO_ROOT.parent / "shared" / "seeds" / "000_1b8e7e2e89d67340.txt"
TENANT = "tenant-a"


def guide_block(kind: str) -> str:
    for block in re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), flags=re.S):
        if re.search(rf"^kind: {kind}$", block, flags=re.M):
            return block
    raise DevenvError(f"the user guide {GUIDE} has no {kind} block")


def step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def show(env: Devenv, identity: str, *args: str) -> None:
    print(f"[{identity}] $ kubectl {' '.join(args)}")
    result = env.kubectl(identity, *args, check=False)
    print((result.stdout or result.stderr).rstrip())


def run_module(env: Devenv, identity: str, module: str, args: dict) -> dict:
    """Run one collection module on localhost as `identity`; return its result."""
    with tempfile.TemporaryDirectory() as private:
        result = run(Path(private), env.kubeconfig(identity), module=f"metalclaim.hostclaim.{module}", module_args=args)
    if not result.tasks:
        raise DevenvError(f"{module} did not run ({result.status}):\n{result.stdout}")
    return result.tasks[0]


def provision(env: Devenv, wait: float) -> dict:
    """Steps of the Redfish provisioner over the infra namespace, as the controller identity."""
    return run_module(env, "controller", "bmh_redfish", {"namespaces": [INFRA_NAMESPACE], "wait": wait})


def reconcile(env: Devenv) -> None:
    with tempfile.TemporaryDirectory() as private:
        result = run(
            Path(private), env.kubeconfig("controller"), playbook=str(REPO_ROOT / "playbooks" / "reconcile.yml")
        )
    failed = [task for task in result.tasks if task["failed"]]
    if failed:
        raise DevenvError(f"reconcile failed: {failed[0].get('msg')}")


def tenant_claim(env: Devenv, namespace: str) -> dict:
    return json.loads(env.kubectl(TENANT, "get", "hostclaim", "my-hostclaim", "-n", namespace, "-o", "json").stdout)


def condition(claim: dict, type_: str) -> str:
    found = next((c for c in claim.get("status", {}).get("conditions", []) if c["type"] == type_), {})
    return f"{found.get('status')} ({found.get('reason')})"


def print_conditions(claim: dict) -> None:
    status = claim.get("status", {})
    print(
        f"hardwareData: {status.get('hardwareData')}   hostUID: {status.get('hostUID')}"
        f"   poweredOn: {status.get('poweredOn')}"
    )
    print(f"  {'TYPE':<16} {'STATUS':<8} {'REASON':<24} MESSAGE")
    for entry in status.get("conditions", []):
        print(f"  {entry['type']:<16} {entry['status']:<8} {entry['reason']:<24} {entry['message']}")


class LiveIso:
    """A small live ISO served on loopback while the emulated BMC downloads it."""

    def __enter__(self) -> str:
        self._dir = tempfile.TemporaryDirectory()
        iso = pycdlib.PyCdlib()
        iso.new(vol_ident="METALCLAIM_DEMO")
        text = b"metalclaim demo live system\n"
        iso.add_fp(io.BytesIO(text), len(text), "/README.;1")
        iso.write(str(Path(self._dir.name) / "demo-live.iso"))
        iso.close()
        handler = functools.partial(_QuietFiles, directory=self._dir.name)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self._server.server_address[1]}/demo-live.iso"

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._dir.cleanup()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # the demo's output stays readable
        pass


def show_bmc(env: Devenv, host: str) -> None:
    sys.path.insert(0, str(REPO_ROOT / ".collections"))
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.io.redfish import RedfishClient
    from ansible_collections.metalclaim.hostclaim.plugins.module_utils._provisioner.pure.bmc_address import (
        parse_bmc_address,
    )

    bmh = json.loads(env.kubectl("infra", "get", "baremetalhost", host, "-n", INFRA_NAMESPACE, "-o", "json").stdout)
    secret = json.loads(
        env.kubectl(
            "infra", "get", "secret", bmh["spec"]["bmc"]["credentialsName"], "-n", INFRA_NAMESPACE, "-o", "json"
        ).stdout
    )
    username, password = (base64.b64decode(secret["data"][key]).decode() for key in ("username", "password"))
    client = RedfishClient(parse_bmc_address(bmh["spec"]["bmc"]["address"]), username, password, timeout=5)
    try:
        print(f"  {host}: power {client.power_state()}, boot override {client.boot_override()}")
        print(f"  {host}: virtual CD {client.media('cd')}")
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metalclaim.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=Path(".devenv"))
    parser.add_argument("--hosts", type=int, default=4)
    args = parser.parse_args(argv)
    try:
        step(f"Local environment with {args.hosts} emulated Redfish servers")
        env = Devenv.up(args.dir, args.hosts)
        tenant_ns = TENANT_NAMESPACES[TENANT]
        show(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE, "--show-labels")

        step("The infra team applies the guide's HostDeployPolicy")
        print(env.kubectl("infra", "apply", "-f", "-", stdin=guide_block("HostDeployPolicy")).stdout.rstrip())

        step(f"The tenant ({TENANT}) creates its userData Secret and the guide's HostClaim in {tenant_ns}")
        userdata = "#cloud-config\nhostname: demo\n"
        secret = env.kubectl(
            TENANT,
            "create",
            "secret",
            "generic",
            "my-userdata",
            "-n",
            tenant_ns,
            f"--from-literal=userData={userdata}",
            "--dry-run=client",
            "-o",
            "yaml",
        ).stdout
        print(env.kubectl(TENANT, "apply", "-f", "-", stdin=secret).stdout.rstrip())
        print(env.kubectl(TENANT, "apply", "-f", "-", stdin=guide_block("HostClaim")).stdout.rstrip())
        show(env, TENANT, "get", "hostclaims", "-n", tenant_ns)

        step("What the tenant cannot see")
        show(env, TENANT, "get", "baremetalhosts", "-n", INFRA_NAMESPACE)
        show(env, TENANT, "get", "secret", "bm-00-bmc-secret", "-n", INFRA_NAMESPACE)

        step("The controller asks which policies admit the claim (metalclaim.hostclaim.hostdeploypolicy_check)")
        result = run_module(
            env, "controller", "hostdeploypolicy_check", {"namespace": tenant_ns, "claim": "my-hostclaim"}
        )
        print(result.get("message") or result.get("msg"))
        for decision in result.get("decisions", []):
            print(f"  {decision['policy']:<24} {decision['reason']:<16} {decision['message']}")

        step("The Redfish provisioner registers and inspects the fleet (metalclaim.hostclaim.bmh_redfish)")
        result = provision(env, wait=90)
        print(
            f"  {result.get('states')} after {result.get('steps')} steps, "
            f"{result.get('redfish_requests')} Redfish requests"
        )
        show(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE)
        show(env, "infra", "get", "hardwaredata", "-n", INFRA_NAMESPACE)

        step("The controller runs the reconcile playbook (metalclaim.hostclaim.reconcile)")
        with tempfile.TemporaryDirectory() as private:
            result = run(
                Path(private), env.kubeconfig("controller"), playbook=str(REPO_ROOT / "playbooks" / "reconcile.yml")
            )
        for task in result.tasks:
            print(
                f"  {task['task']:<40} {'FAILED: ' + task.get('msg', '') if task['failed'] else task.get('msg', 'ok')}"
            )

        step("What the tenant sees: its claim, bound, with the guide's conditions and Events")
        show(env, TENANT, "get", "hostclaims", "-n", tenant_ns)
        claim = json.loads(
            env.kubectl(TENANT, "get", "hostclaim", "my-hostclaim", "-n", tenant_ns, "-o", "json").stdout
        )
        status = claim.get("status", {})
        print_conditions(claim)
        show(env, TENANT, "get", "events", "-n", tenant_ns, "--field-selector=involvedObject.name=my-hostclaim")
        step("What the infra team sees: the host's consumer and the copied userData Secret beside it")
        show(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE)
        host = (status.get("hardwareData") or {}).get("name", "bm-00")
        show(
            env,
            "infra",
            "get",
            "secret",
            f"{host}-userdata",
            "-n",
            INFRA_NAMESPACE,
            "-o",
            "custom-columns=NAME:.metadata.name,OWNER:.metadata.ownerReferences[0].name",
        )

        step("The tenant switches to a live ISO and sets online: true (the guide's provisioning step)")
        with LiveIso() as iso_url:
            patch = {"spec": {"online": True, "image": {"url": iso_url, "format": "live-iso"}}}
            print(
                f"[{TENANT}] $ kubectl patch hostclaim my-hostclaim -n {tenant_ns} "
                f"--type=merge -p '{json.dumps(patch)}'"
            )
            env.kubectl(
                TENANT, "patch", "hostclaim", "my-hostclaim", "-n", tenant_ns, "--type=merge", "-p", json.dumps(patch)
            )
            for round_number in range(1, 9):
                reconcile(env)
                result = provision(env, wait=20)
                reconcile(env)
                claim = tenant_claim(env, tenant_ns)
                provisioned = condition(claim, "Provisioned")
                print(f"  round {round_number}: host {result.get('states')}, claim Provisioned={provisioned}")
                if provisioned.startswith("True"):
                    break
        print_conditions(tenant_claim(env, tenant_ns))
        step("What the emulated BMC says (read over Redfish as the infra team's provisioner would)")
        show_bmc(env, host)
        print(
            f"\nThe environment keeps running: kubeconfigs are in {env.directory / 'kubeconfig'}.\n"
            "Stop it with: make devenv-down"
        )
    except DevenvError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
