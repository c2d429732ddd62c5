"""The main job on the embedded default: the user guide's scenario on a local fleet.

    python -m metalclaim.demo --dir .devenv --hosts 4

Brings the devenv up (control plane + Redfish emulator + registered BareMetalHosts),
applies the guide's HostDeployPolicy as the infra team and its HostClaim as a tenant,
then shows what each of them can see.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

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


def host_names(env: Devenv) -> list[str]:
    listing = env.kubectl("infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE, "-o", "name").stdout
    return [line.split("/", 1)[1] for line in listing.split()]


def run_module(env: Devenv, identity: str, module: str, args: dict) -> dict:
    """Run one collection module on localhost as `identity`; return its result."""
    with tempfile.TemporaryDirectory() as private:
        result = run(Path(private), env.kubeconfig(identity), module=f"metalclaim.hostclaim.{module}", module_args=args)
    if not result.tasks:
        raise DevenvError(f"{module} did not run ({result.status}):\n{result.stdout}")
    return result.tasks[0]


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

        step("No provisioner yet: the demo marks the hosts `available` itself, as the infra identity")
        print("(The Redfish provisioner, which will register and inspect hosts for real, is not built yet.)")
        for host in sorted(host_names(env)):
            env.kubectl(
                "infra",
                "patch",
                "baremetalhost",
                host,
                "-n",
                INFRA_NAMESPACE,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(
                    {"status": {"provisioning": {"state": "available"}, "operationalStatus": "OK", "poweredOn": False}}
                ),
            )
        show(env, "infra", "get", "baremetalhosts", "-n", INFRA_NAMESPACE)

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
        print(f"hardwareData: {status.get('hardwareData')}   hostUID: {status.get('hostUID')}")
        print(f"  {'TYPE':<16} {'STATUS':<8} {'REASON':<24} MESSAGE")
        for condition in status.get("conditions", []):
            print(
                f"  {condition['type']:<16} {condition['status']:<8} {condition['reason']:<24} {condition['message']}"
            )
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

        step("Not built yet")
        print(
            "Provisioning over Redfish does not exist yet: nothing moves the host past `available`, so the\n"
            "claim reports Provisioned False (reason: available), as the user guide shows right after association."
        )
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
