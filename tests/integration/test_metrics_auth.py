"""/metrics behind authentication on the real API server, as each side serves it by default (--metrics-secure).

The scrapers are ServiceAccounts with tokens from the TokenRequest API (the devenv's own identities are client
certificates, not bearer tokens): one bound to metalclaim-metrics-reader by name, one bound only through its group
(its namespace's service accounts: the SubjectAccessReview must carry the groups the TokenReview gave), and one bound
to nothing. Each side runs as its own identity, with its shipped ClusterRole (config/rbac), which lets it create the
TokenReviews and SubjectAccessReviews.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
import uuid

import pytest

from metalclaim_dev.controllerproc import ControllerProcess, claim_side, prometheus_samples

pytestmark = pytest.mark.integration

READER_ROLE = "metalclaim-metrics-reader"
SIDES = {"claims": "controller", "provisioner": "provisioner"}  # side -> the devenv identity it runs as


@pytest.fixture(scope="module")
def tokens(devenv):
    """name -> bearer token: reader (bound by name), member (bound by its group), nobody (bound to nothing)."""
    suffix = uuid.uuid4().hex[:6]
    mine, theirs = f"metrics-auth-{suffix}", f"metrics-group-{suffix}"
    accounts = {"reader": mine, "nobody": mine, "member": theirs}
    for namespace in (mine, theirs):
        devenv.kubectl("admin", "create", "namespace", namespace)
    for name, namespace in accounts.items():
        devenv.kubectl("admin", "create", "serviceaccount", name, "-n", namespace)
    bindings = {
        f"metrics-auth-{suffix}": ("--serviceaccount", f"{mine}:reader"),
        f"metrics-group-{suffix}": ("--group", f"system:serviceaccounts:{theirs}"),
    }
    for binding, subject in bindings.items():
        devenv.kubectl("admin", "create", "clusterrolebinding", binding, "--clusterrole", READER_ROLE, *subject)
    try:
        yield {
            name: devenv.kubectl("admin", "create", "token", name, "-n", namespace, "--duration=1h").stdout.strip()
            for name, namespace in accounts.items()
        }
    finally:
        devenv.kubectl("admin", "delete", "clusterrolebinding", *bindings, "--wait=false", check=False)
        devenv.kubectl("admin", "delete", "namespace", mine, theirs, "--wait=false", check=False)


@pytest.fixture(params=list(SIDES))
def controller(request, devenv, rack, tmp_path):
    side = request.param
    options = claim_side(rack) if side == "claims" else ["--infra-namespaces", rack.namespace, "--controllers", side]
    process = ControllerProcess(devenv, tmp_path, *options, kubeconfig_identity=SIDES[side], secure_metrics=True)
    yield process
    process.stop()


def scrape(controller: ControllerProcess, token: str | None = None) -> tuple[int, str]:
    """GET /metrics over HTTPS as a scraper with insecureSkipVerify (the certificate is the controller's own)."""
    request = urllib.request.Request(controller.metrics_url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15, context=ssl._create_unverified_context()) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_only_a_reader_scrapes_and_the_answers_are_kept(controller, tokens):
    assert controller.metrics_url.startswith("https://")
    status, text = scrape(controller, tokens["reader"])
    assert status == 200, text
    names = {name for name, _labels, _value in prometheus_samples(text)}
    assert {"workqueue_depth", "leader_election_master_status"} <= names

    status, text = scrape(controller, tokens["member"])  # bound through its group only
    assert status == 200, text

    status, text = scrape(controller, tokens["nobody"])  # authenticated, without the right
    assert status == 403, text
    assert "may not get /metrics" in text and ":nobody'" in text

    assert scrape(controller) == (401, "Unauthorized\n")  # no token
    assert scrape(controller, "not-a-token")[0] == 401
    # A token of another issuer, well formed: the API server does not authenticate it.
    forged = tokens["reader"].rsplit(".", 1)[0] + ".c2lnbmF0dXJl"
    assert scrape(controller, forged)[0] == 401

    # Scraped again and again (Prometheus every 15 s): the answers are kept, no review more.
    for _scrape in range(5):
        status, text = scrape(controller, tokens["reader"])
        assert status == 200
    reviews = {
        labels["review"]: value
        for name, labels, value in prometheus_samples(text)
        if name == "metalclaim_metrics_reviews_total"
    }
    # reader, member, nobody, not-a-token, forged: a TokenReview each; reader, member, nobody: an access review each.
    assert reviews == {"TokenReview": 5.0, "SubjectAccessReview": 3.0}, reviews
    assert "metrics_review_failed" not in controller.output(full=True)

    # Not served in clear: plain HTTP to the port gets no answer, and the server goes on.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{controller.metrics_port}/metrics", timeout=15)
    assert scrape(controller, tokens["reader"])[0] == 200
