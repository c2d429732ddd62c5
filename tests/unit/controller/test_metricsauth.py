"""Who may read /metrics (metricsauth, pure): the verdict from the two reviews' answers, and the answers kept for a
while on an injected clock, so a scrape every 15 s costs two API calls a minute, not two a scrape."""

from __future__ import annotations

import pytest

from metalclaim.controller import metricsauth
from metalclaim.controller.metricsauth import (
    ACCESS_REVIEW,
    ALLOWED_TTL,
    REFUSED_TTL,
    TOKEN_REVIEW,
    Answers,
    Guard,
    ReviewFailed,
    User,
)

PROMETHEUS = {
    "username": "system:serviceaccount:monitoring:prometheus",
    "uid": "5d1c",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:monitoring", "system:authenticated"],
    "extra": {"authentication.kubernetes.io/pod-name": ["prometheus-0"]},
}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ApiServer:
    """The two reviews as the API server answers them: tokens -> user, users allowed; each call recorded."""

    def __init__(self, tokens: dict[str, dict], readers: set[str]):
        self.tokens, self.readers = tokens, readers
        self.calls: list[tuple[str, dict]] = []
        self.failing = False

    def token(self, body: dict) -> dict:
        self.calls.append((body["kind"], body))
        if self.failing:
            raise ReviewFailed("TokenReview: 503 Service Unavailable")
        user = self.tokens.get(body["spec"]["token"])
        return {"authenticated": True, "user": user} if user else {"authenticated": False, "error": "invalid token"}

    def access(self, body: dict) -> dict:
        self.calls.append((body["kind"], body))
        if self.failing:
            raise ReviewFailed("SubjectAccessReview: 503 Service Unavailable")
        if body["spec"]["user"] in self.readers:
            return {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "prometheus"'}
        return {"allowed": False}

    def kinds(self) -> list[str]:
        return [kind for kind, _body in self.calls]


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def api():
    return ApiServer(
        {"prometheus-token": PROMETHEUS, "nobody-token": {"username": "nobody", "groups": ["system:authenticated"]}},
        readers={PROMETHEUS["username"]},
    )


@pytest.fixture
def guard(api, clock):
    return Guard(api.token, api.access, clock)


# -- the header -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),  # the scheme in any case (RFC 7235)
        ("BEARER   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer a b", None),
        ("abc", None),
    ],
)
def test_the_token_is_a_bearer_token_or_none(header, token):
    assert metricsauth.bearer_token(header) == token


# -- the reviews' bodies and answers --------------------------------------------------------------------------------


def test_the_access_review_asks_for_the_user_as_authenticated_on_the_non_resource_url():
    user = metricsauth.authenticated({"authenticated": True, "user": PROMETHEUS})
    assert user == User(
        PROMETHEUS["username"],
        "5d1c",
        tuple(PROMETHEUS["groups"]),
        (("authentication.kubernetes.io/pod-name", ("prometheus-0",)),),
    )
    assert metricsauth.access_review(user, "get", "/metrics") == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": PROMETHEUS["username"],
            "uid": "5d1c",
            "groups": PROMETHEUS["groups"],
            "extra": PROMETHEUS["extra"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    bare = metricsauth.access_review(User("alice"), "get", "/metrics")["spec"]
    assert bare == {"user": "alice", "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert metricsauth.token_review("t") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t"},
    }


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"authenticated": False, "user": PROMETHEUS},
        {"authenticated": True},
        {"authenticated": True, "user": {"username": ""}},
        {"authenticated": "true", "user": PROMETHEUS},  # only the boolean
    ],
)
def test_a_token_review_without_an_authenticated_user_names_nobody(status):
    assert metricsauth.authenticated(status) is None


@pytest.mark.parametrize(
    ("status", "allowed"),
    [
        ({"allowed": True}, True),
        ({"allowed": True, "denied": True}, False),  # an authorizer may say both: denied wins
        ({"allowed": False, "denied": True}, False),
        ({"allowed": False}, False),
        ({}, False),
        ({"allowed": "true"}, False),
    ],
)
def test_access_is_allowed_and_not_denied(status, allowed):
    assert metricsauth.allowed(status) is allowed


def test_the_verdict_from_the_reviews():
    assert metricsauth.verdict(None, False, "get", "/metrics").status == 401
    refused = metricsauth.verdict(User("nobody"), False, "get", "/metrics")
    assert (refused.status, refused.user) == (403, "nobody")
    assert "'nobody' may not get /metrics" in refused.message
    assert metricsauth.verdict(User("prom"), True, "get", "/metrics") == metricsauth.Verdict(200, "", "prom")


# -- the guard: verdicts ---------------------------------------------------------------------------------------------


def test_a_reader_gets_in_the_others_do_not(guard, api):
    assert guard.check("Bearer prometheus-token", "get", "/metrics").status == 200
    assert guard.check("Bearer nobody-token", "get", "/metrics").status == 403
    assert guard.check("Bearer garbage", "get", "/metrics").status == 401
    assert guard.check(None, "get", "/metrics").status == 401
    # No token: nothing asked of the API server; a garbage one: its TokenReview only.
    assert api.kinds() == [TOKEN_REVIEW, ACCESS_REVIEW, TOKEN_REVIEW, ACCESS_REVIEW, TOKEN_REVIEW]


def test_the_access_review_names_the_path_and_verb_asked(guard, api):
    assert guard.check("Bearer prometheus-token", "get", "/metrics/extra").status == 200
    _kind, body = api.calls[-1]
    assert body["spec"]["nonResourceAttributes"] == {"path": "/metrics/extra", "verb": "get"}


def test_an_api_server_that_cannot_be_asked_is_a_500_and_is_not_kept(guard, api):
    api.failing = True
    failed = guard.check("Bearer prometheus-token", "get", "/metrics")
    assert failed.status == 500 and "503 Service Unavailable" in failed.message
    api.failing = False
    assert guard.check("Bearer prometheus-token", "get", "/metrics").status == 200
    assert api.kinds() == [TOKEN_REVIEW, TOKEN_REVIEW, ACCESS_REVIEW]


# -- the guard: answers kept ----------------------------------------------------------------------------------------


def test_a_scrape_every_15_s_costs_two_reviews_a_minute(guard, api, clock):
    counted = []
    guard.on_review = counted.append
    for _scrape in range(8):  # two minutes of scrapes
        assert guard.check("Bearer prometheus-token", "get", "/metrics").status == 200
        clock.now += 15
    assert api.kinds() == [TOKEN_REVIEW, ACCESS_REVIEW] * 2
    assert counted == api.kinds()
    # Without keeping the answers: two a scrape.
    uncached_api = ApiServer(api.tokens, api.readers)
    uncached = Guard(uncached_api.token, uncached_api.access, clock, allowed_ttl=0, refused_ttl=0)
    for _scrape in range(8):
        uncached.check("Bearer prometheus-token", "get", "/metrics")
    assert len(uncached_api.calls) == 16


def test_a_refusal_is_asked_again_sooner_than_a_grant(guard, api, clock):
    assert guard.check("Bearer nobody-token", "get", "/metrics").status == 403
    assert guard.check("Bearer garbage", "get", "/metrics").status == 401
    clock.now += REFUSED_TTL - 0.001
    guard.check("Bearer nobody-token", "get", "/metrics")
    guard.check("Bearer garbage", "get", "/metrics")
    assert api.kinds() == [TOKEN_REVIEW, ACCESS_REVIEW, TOKEN_REVIEW]
    # The RoleBinding is made meanwhile: seen once the refusal's time is over (the token's own answer still kept).
    api.readers.add("nobody")
    clock.now += 0.001
    assert guard.check("Bearer nobody-token", "get", "/metrics").status == 200
    assert api.kinds()[3:] == [ACCESS_REVIEW]
    assert REFUSED_TTL < ALLOWED_TTL


def test_a_grant_lasts_its_time_then_is_asked_again(guard, api, clock):
    guard.check("Bearer prometheus-token", "get", "/metrics")
    clock.now += ALLOWED_TTL - 0.001
    guard.check("Bearer prometheus-token", "get", "/metrics")
    assert len(api.calls) == 2
    api.readers.clear()  # the binding removed: refused once the grant's time is over
    clock.now += 0.001
    assert guard.check("Bearer prometheus-token", "get", "/metrics").status == 403
    assert api.kinds()[2:] == [TOKEN_REVIEW, ACCESS_REVIEW]


def test_two_users_are_kept_apart(guard, api):
    guard.check("Bearer prometheus-token", "get", "/metrics")
    guard.check("Bearer nobody-token", "get", "/metrics")
    assert guard.check("Bearer prometheus-token", "get", "/metrics").status == 200
    assert guard.check("Bearer nobody-token", "get", "/metrics").status == 403
    assert len(api.calls) == 4


def test_the_token_itself_is_not_kept(guard):
    guard.check("Bearer prometheus-token", "get", "/metrics")
    assert "prometheus-token" not in repr(list(guard.users._entries))


# -- the answers: bounded --------------------------------------------------------------------------------------------


def test_answers_are_bounded_and_the_least_recently_used_go_first(clock):
    answers = Answers(clock, size=3)
    for key in "abc":
        answers.put(key, key.upper(), ttl=60)
    assert answers.get("a") == (True, "A")  # a used: b is now the oldest
    answers.put("d", "D", ttl=60)
    assert len(answers) == 3
    assert answers.get("b") == (False, None)
    assert [answers.get(key)[0] for key in "acd"] == [True, True, True]


def test_an_answer_past_its_time_is_gone(clock):
    answers = Answers(clock)
    answers.put("k", None, ttl=10)  # None is an answer (nobody authenticated), not a miss
    assert answers.get("k") == (True, None)
    clock.now += 10
    assert answers.get("k") == (False, None)
    assert len(answers) == 0
    answers.put("k", True, ttl=0)  # nothing kept
    assert answers.get("k") == (False, None)


def test_a_flood_of_garbage_tokens_keeps_the_cache_bounded(api, clock):
    guard = Guard(api.token, api.access, clock, size=16)
    for index in range(100):
        assert guard.check(f"Bearer garbage-{index}", "get", "/metrics").status == 401
    assert len(guard.users) == 16
