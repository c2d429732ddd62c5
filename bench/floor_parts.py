"""Benchmark: the floor F split into its parts on this machine (what a cold run pays before its first API write).

    .venv/bin/python bench/floor_parts.py [--devenv DIR] [--runs 7]

Prints figures, never pass/fail: the median of --runs of each step, and each part as the
difference of two steps. The playbooks run with the controller's settings (local connection,
this interpreter). With a devenv (METALCLAIM_DEVENV or --devenv), also the claim layer's own
start: the `kubernetes` import, the client and its discovery, and a reconcile of no claim; and one list of
HostClaims through the modules' client beside the same list through a light client (a prototype: yaml, the
standard library's TLS and HTTP, no discovery), which is what a lighter client would buy each module run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "controller"))

from metalclaim.controller.runs import Runner  # noqa: E402

PLAY = "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
PLAYBOOKS = {
    "empty": PLAY + "    []\n",
    "debug": PLAY + "    - ansible.builtin.debug:\n        msg: hi\n",
    "ping": PLAY + "    - ansible.builtin.ping:\n",
    "reconcile": PLAY
    + "    - metalclaim.hostclaim.hostclaim_reconcile:\n        claims: [{namespace: floor-none, name: none}]\n",
}


# One list of HostClaims (a namespace with none), in a fresh interpreter, two ways. Through the modules' own client
# (plugins/module_utils/_common/io/kube.py: the kubernetes package, its dynamic client and discovery)...
MODULE_CLIENT_LIST = """
import sys
sys.path.insert(0, sys.argv[2])
from ansible_collections.metalclaim.hostclaim.plugins.module_utils._common.io.kube import AUTH_ARG_SPEC, Kube
params = dict.fromkeys(AUTH_ARG_SPEC)
params.update(kubeconfig=sys.argv[1], request_timeout=30)
assert Kube(params).list("metal3.io/v1alpha1", "HostClaim", "floor-none") == []
"""
# ...and as a light client would: the kubeconfig read with yaml, TLS from the standard library, the path known
# without discovery (the modules know their kinds' plurals), one request. What the difference buys every module run.
LIGHT_CLIENT_LIST = """
import http.client, json, ssl, sys, urllib.parse
import yaml
config = yaml.safe_load(open(sys.argv[1]))
cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
context = ssl.create_default_context(cafile=cluster["certificate-authority"])
context.load_cert_chain(user["client-certificate"], user["client-key"])
server = urllib.parse.urlsplit(cluster["server"])
connection = http.client.HTTPSConnection(server.hostname, server.port, context=context, timeout=30)
connection.request("GET", "/apis/metal3.io/v1alpha1/namespaces/floor-none/hostclaims")
response = connection.getresponse()
assert response.status == 200, response.status
assert json.loads(response.read())["items"] == []
"""


def median_seconds(command: list[str], runs: int, env: dict) -> float:
    times = []
    for _run in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--devenv", default=os.environ.get("METALCLAIM_DEVENV"))
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metalclaim-floor-"))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections")}
    if args.devenv:
        sys.path.insert(0, str(REPO))
        from metalclaim_dev.devenv.env import Devenv

        env["K8S_AUTH_KUBECONFIG"] = Devenv.load(Path(args.devenv).resolve()).kubeconfig("controller")
    inventory = f"localhost ansible_connection=local ansible_python_interpreter={sys.executable},"
    playbook_bin = str(Path(sys.executable).parent / "ansible-playbook")
    step = {}
    step["python -c pass"] = median_seconds([sys.executable, "-c", "pass"], args.runs, env)
    step["import ansible's playbook CLI"] = median_seconds(
        [sys.executable, "-c", "import ansible.cli.playbook"], args.runs, env
    )
    step["import kubernetes (dynamic client)"] = median_seconds(
        [sys.executable, "-c", "import kubernetes.dynamic, kubernetes.client"], args.runs, env
    )
    step["ansible-playbook --version"] = median_seconds([playbook_bin, "--version"], args.runs, env)
    if args.devenv:
        kubeconfig, collections = env["K8S_AUTH_KUBECONFIG"], env["ANSIBLE_COLLECTIONS_PATH"]
        step["a list through the modules' client"] = median_seconds(
            [sys.executable, "-c", MODULE_CLIENT_LIST, kubeconfig, collections], args.runs, env
        )
        step["a list through a light client (prototype)"] = median_seconds(
            [sys.executable, "-c", LIGHT_CLIENT_LIST, kubeconfig], args.runs, env
        )
    for name, text in PLAYBOOKS.items():
        if name == "reconcile" and not args.devenv:
            continue
        path = work / f"{name}.yml"
        path.write_text(text)
        step[f"ansible-playbook, {name}"] = median_seconds([playbook_bin, "-i", inventory, str(path)], args.runs, env)
    runner = Runner(work / "runner", {"ANSIBLE_COLLECTIONS_PATH": env["ANSIBLE_COLLECTIONS_PATH"]})
    runner.run(str(work / "debug.yml"), {})  # the child's own start is not part of F
    step["F: ansible_runner.run(), debug"] = statistics.median(
        runner.run(str(work / "debug.yml"), {}).seconds for _run in range(args.runs)
    )
    runner.close()

    f = step["F: ansible_runner.run(), debug"]
    parts = {
        "interpreter start": step["python -c pass"],
        "ansible imports": step["import ansible's playbook CLI"] - step["python -c pass"],
        "CLI start, inventory, playbook parse, teardown": step["ansible-playbook, empty"]
        - step["import ansible's playbook CLI"],
        "task start (worker, templating, callbacks)": step["ansible-playbook, debug"] - step["ansible-playbook, empty"],
        "ansible-runner around the run (pexpect, events, artifacts)": f - step["ansible-playbook, debug"],
        "module start (AnsiballZ, interpreter), ping vs debug": step["ansible-playbook, ping"]
        - step["ansible-playbook, debug"],
    }
    if "ansible-playbook, reconcile" in step:
        parts["claim layer: kubernetes import, client, discovery, reads (reconcile vs ping)"] = (
            step["ansible-playbook, reconcile"] - step["ansible-playbook, ping"]
        )
        parts["  of which importing kubernetes"] = step["import kubernetes (dynamic client)"] - step["python -c pass"]
        parts["what a light client would save per module run"] = (
            step["a list through the modules' client"] - step["a list through a light client (prototype)"]
        )
    width = max(map(len, [*step, *parts]))
    print(f"steps (median of {args.runs}):")
    for name, seconds in step.items():
        print(f"  {name:<{width}} {seconds:6.3f} s  {seconds / f:5.2f} F")
    print("parts:")
    for name, seconds in parts.items():
        print(f"  {name:<{width}} {seconds:6.3f} s  {seconds / f:5.2f} F")
    return 0


if __name__ == "__main__":
    sys.exit(main())
