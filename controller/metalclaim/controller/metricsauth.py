"""Who may read /metrics: decided as controller-runtime's metrics filter (WithAuthenticationAndAuthorization) does.

The caller's bearer token is reviewed by the API server (a TokenReview); the user it names, with its uid, groups and
extra, is then asked about the non-resource URL it requested (a SubjectAccessReview: `get /metrics`, the right of
ClusterRole metalclaim-metrics-reader). 401 without a token or with one the API server does not authenticate, 403
when the review says no, 200 otherwise; 500 when the API server could not be asked (the reason logged, never kept).

Pure: no client, no clock of its own. `Guard` calls the two reviews it is given (serving.ApiReviews in the process)
and keeps their results a while in a bounded cache on an injected clock, so a Prometheus scraping every 15 s costs
two API calls a minute (one of each), not two a scrape.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

TOKEN_REVIEW = "TokenReview"
ACCESS_REVIEW = "SubjectAccessReview"
# How long a review's answer is kept (seconds). An authenticated token and an access allowed: a minute, as
# controller-runtime keeps its token reviews (1 min). A refusal is asked again sooner, so a RoleBinding just made
# (or a token just issued) works at the next scrape but one.
ALLOWED_TTL = 60.0
REFUSED_TTL = 10.0
MAX_ENTRIES = 1024  # answers kept at most, per review kind: the least recently used go first
UNAUTHORIZED = "Unauthorized"


class ReviewFailed(Exception):
    """The API server could not be asked (unreachable, or refused the review itself: the controller's RBAC)."""


@dataclass(frozen=True)
class User:
    """A TokenReview's user, hashable (a cache key): extra as sorted (key, values) pairs."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Verdict:
    status: int  # the HTTP status: 200, 401, 403 or 500
    message: str = ""  # the body of a refusal
    user: str = ""  # who asked, once authenticated


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme in any case, RFC 7235), else None."""
    scheme, _space, token = (header or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


def token_review(token: str) -> dict:
    """The TokenReview to create for `token` (no audiences: the API server's own, as a ServiceAccount token has)."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": TOKEN_REVIEW, "spec": {"token": token}}


def authenticated(status: dict) -> User | None:
    """The user a TokenReview's status authenticates, or None."""
    user = status.get("user") or {}
    if status.get("authenticated") is not True or not user.get("username"):
        return None
    extra = tuple(sorted((key, tuple(values or ())) for key, values in (user.get("extra") or {}).items()))
    return User(user["username"], user.get("uid") or "", tuple(user.get("groups") or ()), extra)


def access_review(user: User, verb: str, path: str) -> dict:
    """The SubjectAccessReview to create: may `user` `verb` the non-resource URL `path`."""
    spec: dict = {"user": user.name, "nonResourceAttributes": {"path": path, "verb": verb}}
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": ACCESS_REVIEW, "spec": spec}


def allowed(status: dict) -> bool:
    """A SubjectAccessReview's status: allowed, and not denied (an authorizer may say both)."""
    return status.get("allowed") is True and status.get("denied") is not True


def verdict(user: User | None, access: bool, verb: str, path: str) -> Verdict:
    """The answer from the two reviews' results: who (None: not authenticated), and whether they may."""
    if user is None:
        return Verdict(401, UNAUTHORIZED)
    if not access:
        return Verdict(403, f"Forbidden: user {user.name!r} may not {verb} {path}", user.name)
    return Verdict(200, "", user.name)


class Answers:
    """Review answers kept for their time to live on an injected clock, `size` at most (least recently used out)."""

    def __init__(self, clock: Callable[[], float], size: int = MAX_ENTRIES):
        self.clock = clock
        self.size = size
        self._entries: OrderedDict[Hashable, tuple[float, object]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> tuple[bool, object]:
        """(found, answer): an answer past its time is not found (and dropped)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            if self.clock() >= entry[0]:
                del self._entries[key]
                return False, None
            self._entries.move_to_end(key)
            return True, entry[1]

    def put(self, key: Hashable, answer: object, ttl: float) -> None:
        if ttl <= 0 or self.size <= 0:
            return
        with self._lock:
            self._entries[key] = (self.clock() + ttl, answer)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


class Guard:
    """The verdict on a request from its Authorization header, verb and path; the reviews are the caller's I/O.

    review_token(body) and review_access(body) create the review and return its status (a dict), or raise
    ReviewFailed; on_review(kind) counts each one made (the cache's misses).
    """

    def __init__(
        self,
        review_token: Callable[[dict], dict],
        review_access: Callable[[dict], dict],
        clock: Callable[[], float],
        on_review: Callable[[str], None] | None = None,
        size: int = MAX_ENTRIES,
        allowed_ttl: float = ALLOWED_TTL,
        refused_ttl: float = REFUSED_TTL,
    ):
        self.review_token = review_token
        self.review_access = review_access
        self.on_review = on_review or (lambda _kind: None)
        self.allowed_ttl, self.refused_ttl = allowed_ttl, refused_ttl
        self.users = Answers(clock, size)  # sha256 of the token -> User | None (the token itself is never kept)
        self.access = Answers(clock, size)  # (User, verb, path) -> bool

    def check(self, header: str | None, verb: str, path: str) -> Verdict:
        token = bearer_token(header)
        if token is None:
            return Verdict(401, UNAUTHORIZED)
        try:
            user = self._user(token)
            access = user is not None and self._access(user, verb, path)
        except ReviewFailed as error:
            return Verdict(500, f"the API server could not review the request: {error}")
        return verdict(user, access, verb, path)

    def _user(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        found, user = self.users.get(key)
        if not found:
            self.on_review(TOKEN_REVIEW)
            user = authenticated(self.review_token(token_review(token)))
            self.users.put(key, user, self.allowed_ttl if user is not None else self.refused_ttl)
        return user

    def _access(self, user: User, verb: str, path: str) -> bool:
        key = (user, verb, path)
        found, access = self.access.get(key)
        if not found:
            self.on_review(ACCESS_REVIEW)
            access = allowed(self.review_access(access_review(user, verb, path)))
            self.access.put(key, access, self.allowed_ttl if access else self.refused_ttl)
        return bool(access)
