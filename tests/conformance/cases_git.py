"""Conformance cases of the git-forge providers and the SDK-style ones (reference §4.1-§4.5).

Commit-status and comment providers make several requests per delivery: the listing calls are answered
by ``prelude`` routes and the fault matrix targets the final create call. Every ``expect`` checks the
requests against the reference for the kit's sample event; expected bodies are written out by hand.

``bitbucket`` talks to Bitbucket Cloud's API whatever the address; the case points it at the capture server
with ``BITBUCKET_API_BASE_URL``, the environment variable Flux's Bitbucket client honours.

Not run over HTTP by the kit (``http=False``), each covered by ``tests/integration/test_git_providers.py``:
``nats`` (not HTTP; a real nats-server), ``googlepubsub`` (its API and token endpoints are redirected with
``NC_GOOGLE_PUBSUB_API_URL`` and the key's ``token_uri``) and ``otel`` (it needs the matching Alert in the
delivery context, which the kit does not pass).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any
from urllib.parse import parse_qs, quote_plus

from tests.conformance.build import PROVIDER_UID, SAMPLE_EVENT, SAMPLE_REVISION
from tests.conformance.case import ProviderCase
from tests.support.capture import CapturedRequest

SHA = SAMPLE_REVISION.rsplit(":", 1)[1]
STATUS_ID = "gitrepository/webapp/" + PROVIDER_UID.split("-", 1)[0]  # reference §3.6 step 9 default
DESCRIPTION = "reconciliation succeeded"  # split_camelcase("ReconciliationSucceeded"), lower-cased
SUMMARY = "Cluster prod-eu"
MSG = "stored artifact for revision 'main@sha1:0123456'\nfetched 3 files"

SAMPLE_GO_JSON = (
    b'{"involvedObject":{"kind":"GitRepository","namespace":"gitops-system","name":"webapp",'
    b'"uid":"a1b2c3d4-0000-4000-8000-00000000beef","apiVersion":"source.toolkit.fluxcd.io/v1"},'
    b'"severity":"info","timestamp":"2026-03-01T10:20:30Z",'
    b'"message":"stored artifact for revision \'main@sha1:0123456\'\\nfetched 3 files",'
    b'"reason":"ReconciliationSucceeded",'
    b'"metadata":{"revision":"main@sha1:0123456789abcdef0123456789abcdef01234567","summary":"Cluster prod-eu"},'
    b'"reportingController":"source-controller","reportingInstance":"source-controller-7f9c"}'
)

CR_EVENT = SAMPLE_EVENT.model_copy(update={"metadata": {**SAMPLE_EVENT.metadata, "change_request": "42"}})
PR_MARKER = f"<!-- flux-pr-comment-key:{PROVIDER_UID}/GitRepository/gitops-system/webapp -->"
MR_MARKER = f"<!-- flux-mr-comment-key:{PROVIDER_UID}/GitRepository/gitops-system/webapp -->"
MARKDOWN = (
    "## Flux Status\n\nℹ️ GitRepository/gitops-system/webapp\n\n"
    f"{MSG}\n\nMetadata:\n* `revision`: {SAMPLE_REVISION}\n* `summary`: {SUMMARY}\n"
)


def compact(value: Any, *, newline: bool = False, escape_html: bool = True) -> bytes:
    """Compact JSON in the literal's key order, ``<>&`` escaped as Go's ``json.Marshal`` does
    (``escape_html=False``: go-github's encoder); ``newline`` for Go's ``json.Encoder`` output."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if escape_html:
        for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
            text = text.replace(ch, esc)
    body = text.encode()
    return body + b"\n" if newline else body


def by_method(requests: list[CapturedRequest], method: str) -> list[CapturedRequest]:
    return [r for r in requests if r.method == method]


def only(requests: list[CapturedRequest], method: str) -> CapturedRequest:
    found = by_method(requests, method)
    assert len(found) == 1, [f"{r.method} {r.raw_path}" for r in requests]
    return found[0]


# --------------------------------------------------------------------------------------------------
# commit statuses (reference §4.2)
# --------------------------------------------------------------------------------------------------


def expect_github(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.path == f"/api/v3/repos/fluxcd/webapp/commits/{SHA}/statuses"
    assert listing.query == {"per_page": "50"}
    assert listing.headers["Authorization"] == "Bearer ghp-canary-github-token"
    create = only(requests, "POST")
    assert create.path == f"/api/v3/repos/fluxcd/webapp/statuses/{SHA}"
    assert create.headers["Authorization"] == "Bearer ghp-canary-github-token"
    assert create.headers["Content-Type"] == "application/json"
    body = {"state": "success", "description": DESCRIPTION, "context": STATUS_ID}
    assert create.body == compact(body, newline=True, escape_html=False), create.body


def expect_gitlab(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.raw_path.startswith(
        f"/api/v4/projects/group%2Fsub%2Fwebapp/repository/commits/{SHA}/statuses?"
    )
    assert listing.query == {"name": STATUS_ID}
    assert listing.headers["PRIVATE-TOKEN"] == "glpat-canary-gitlab-token"
    create = only(requests, "POST")
    assert create.raw_path == f"/api/v4/projects/group%2Fsub%2Fwebapp/statuses/{SHA}"
    assert create.headers["PRIVATE-TOKEN"] == "glpat-canary-gitlab-token"
    assert create.body == compact({"state": "success", "name": STATUS_ID, "description": DESCRIPTION})


def expect_gitea(requests: list[CapturedRequest]) -> None:
    listing = only(requests, "GET")
    assert listing.path == f"/api/v1/repos/fluxcd/webapp/commits/{SHA}/statuses"
    assert listing.query == {"page": "0", "limit": "50"}
    assert listing.headers["Authorization"] == "token gitea-canary-token"
    create = only(requests, "POST")
    assert create.path == f"/api/v1/repos/fluxcd/webapp/statuses/{SHA}"
    body = {"state": "success", "target_url": "", "description": DESCRIPTION, "context": STATUS_ID}
    assert create.body == compact(body)


def expect_bitbucket(requests: list[CapturedRequest]) -> None:
    key = hashlib.sha1(STATUS_ID.encode(), usedforsecurity=False).hexdigest()
    path = f"/2.0/repositories/fluxcd/webapp/commit/{SHA}/statuses/build"
    basic = "Basic " + base64.b64encode(b"flux-bot:bitbucket-canary-app-password").decode()
    listing = only(requests, "GET")
    assert listing.path == f"{path}/{key}"
    create = only(requests, "POST")
    assert create.path == path
    for req in (listing, create):
        assert req.headers["Authorization"] == basic
    body = {
        "key": key,
        "url": "https://bitbucket.org",
        "state": "SUCCESSFUL",
        "name": "gitrepository/webapp",
        "description": DESCRIPTION,
    }
    assert create.json() == body, create.body


def expect_bitbucketserver(requests: list[CapturedRequest]) -> None:
    key = hashlib.sha1(STATUS_ID.encode(), usedforsecurity=False).hexdigest()
    path = f"/rest/api/latest/projects/PROJ/repos/webapp/commits/{SHA}/builds"
    listing = only(requests, "GET")
    assert listing.path == path
    assert listing.query == {"key": key}
    create = only(requests, "POST")
    assert create.path == path
    for req in (listing, create):
        assert req.headers["Authorization"] == "Bearer bbs-canary-token"
        assert req.headers["x-atlassian-token"] == "no-check"
        assert req.headers["x-requested-with"] == "XMLHttpRequest"
    body = {
        "description": DESCRIPTION,
        "key": key,
        "name": f"gitrepository/webapp [{DESCRIPTION}]",
        "state": "SUCCESSFUL",
        "url": f"http://{create.headers['Host']}/scm/PROJ/webapp.git",
    }
    assert create.body == compact(body, newline=True), create.body


def expect_azuredevops(requests: list[CapturedRequest]) -> None:
    path = f"/org/project/_apis/git/repositories/webapp/commits/{SHA}/statuses"
    auth = "Basic " + base64.b64encode(b":ado-canary-pat").decode()
    listing = only(requests, "GET")
    assert listing.path == path
    assert listing.headers["Authorization"] == auth
    create = only(requests, "POST")
    assert create.path == path
    assert create.query == {"api-version": "6.0"}
    assert create.headers["Authorization"] == auth
    body = {
        "context": {"genre": f"fluxcd:{SUMMARY}", "name": STATUS_ID},
        "description": DESCRIPTION,
        "state": "succeeded",
    }
    assert create.body == compact(body)


# --------------------------------------------------------------------------------------------------
# githubdispatch and change-request comments (reference §4.1, §4.3)
# --------------------------------------------------------------------------------------------------


def expect_githubdispatch(requests: list[CapturedRequest]) -> None:
    req = only(requests, "POST")
    assert len(requests) == 1
    assert req.path == "/api/v3/repos/fluxcd/webapp/dispatches"
    assert req.headers["Authorization"] == "Bearer ghp-canary-dispatch-token"
    expected = (
        b'{"event_type":"GitRepository/webapp.gitops-system","client_payload":' + SAMPLE_GO_JSON + b"}\n"
    )
    assert req.body == expected, req.body


def expect_github_pr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.path for r in gets] == ["/api/v3/user", "/api/v3/repos/fluxcd/webapp/issues/42/comments"]
    assert gets[1].query == {"sort": "created", "direction": "asc", "per_page": "100"}
    create = only(requests, "POST")
    assert create.path == "/api/v3/repos/fluxcd/webapp/issues/42/comments"
    assert create.headers["Authorization"] == "Bearer ghp-canary-comment-token"
    assert create.body == compact({"body": f"{PR_MARKER}\n\n{MARKDOWN}"}, newline=True, escape_html=False)
    assert b"<!-- flux-pr-comment-key:" in create.body


def expect_gitlab_mr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.raw_path.split("?")[0] for r in gets] == [
        "/api/v4/user",
        "/api/v4/projects/group%2Fwebapp/merge_requests/42/notes",
    ]
    assert gets[1].query == {"sort": "asc", "order_by": "created_at", "per_page": "100"}
    create = only(requests, "POST")
    assert create.raw_path == "/api/v4/projects/group%2Fwebapp/merge_requests/42/notes"
    assert create.headers["PRIVATE-TOKEN"] == "glpat-canary-mr-token"
    assert create.body == compact({"body": f"{MR_MARKER}\n\n{MARKDOWN}"})
    assert b"\\u003c!-- flux-mr-comment-key:" in create.body


def expect_gitea_pr_comment(requests: list[CapturedRequest]) -> None:
    gets = by_method(requests, "GET")
    assert [r.path for r in gets] == ["/api/v1/user", "/api/v1/repos/fluxcd/webapp/issues/42/comments"]
    assert gets[1].query == {"page": "1", "limit": "100"}
    create = only(requests, "POST")
    assert create.path == "/api/v1/repos/fluxcd/webapp/issues/42/comments"
    assert create.headers["Authorization"] == "token gitea-canary-comment-token"
    assert create.body == compact({"body": f"{PR_MARKER}\n\n{MARKDOWN}"})


# --------------------------------------------------------------------------------------------------
# azureeventhub (reference §4.1; REST instead of AMQP)
# --------------------------------------------------------------------------------------------------


def expect_azureeventhub(requests: list[CapturedRequest]) -> None:
    req = only(requests, "POST")
    assert req.path == "/flux-events/messages"
    assert req.headers["Content-Type"] == "application/atom+xml;type=entry;charset=utf-8"
    assert req.body == SAMPLE_GO_JSON
    scheme, _, fields = req.headers["Authorization"].partition(" ")
    assert scheme == "SharedAccessSignature"
    parts = {k: v[0] for k, v in parse_qs(fields, keep_blank_values=True).items()}
    resource = quote_plus(f"https://{req.headers['Host']}/flux-events")
    assert quote_plus(parts["sr"]) == resource
    assert parts["skn"] == "flux-sender"
    string_to_sign = f"{resource}\n{parts['se']}".encode()
    digest = hmac.new(b"eventhub-canary-key", string_to_sign, hashlib.sha256).digest()
    assert parts["sig"] == base64.b64encode(digest).decode()


SERVICE_ACCOUNT = json.dumps(
    {
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "kid-1",
        "private_key": "-----BEGIN PRIVATE KEY-----\nnot-used-by-the-kit\n-----END PRIVATE KEY-----\n",
        "client_email": "flux@my-project.iam.gserviceaccount.com",
        "token_uri": "{url}/token",
    }
)

CASES: list[ProviderCase] = [
    ProviderCase(
        type="github",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-github-token"},
        prelude={"GET /api/v3/repos/fluxcd/webapp/commits/.*/statuses": (200, [])},
        final="POST /api/v3/repos/fluxcd/webapp/statuses/",
        expect=expect_github,
        canaries=["ghp-canary-github-token"],
    ),
    ProviderCase(
        type="gitlab",
        spec={"address": "{url}/group/sub/webapp.git"},
        secret={"token": "glpat-canary-gitlab-token"},
        prelude={"GET /repository/commits/.*/statuses": (200, [])},
        final="POST /api/v4/projects/.*/statuses/",
        expect=expect_gitlab,
        canaries=["glpat-canary-gitlab-token"],
    ),
    ProviderCase(
        type="gitea",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "gitea-canary-token"},
        prelude={"GET /api/v1/repos/fluxcd/webapp/commits/.*/statuses": (200, [])},
        final="POST /api/v1/repos/fluxcd/webapp/statuses/",
        expect=expect_gitea,
        canaries=["gitea-canary-token"],
    ),
    ProviderCase(
        type="bitbucketserver",
        spec={"address": "{url}/scm/PROJ/webapp.git"},
        secret={"token": "bbs-canary-token"},
        prelude={"GET /rest/api/latest/projects/PROJ/repos/webapp/commits/.*/builds": (404, {"errors": []})},
        final="POST /rest/api/latest/projects/PROJ/repos/webapp/commits/.*/builds",
        expect=expect_bitbucketserver,
        canaries=["bbs-canary-token"],
    ),
    ProviderCase(
        type="azuredevops",
        spec={"address": "{url}/org/project/_git/webapp"},
        secret={"token": "ado-canary-pat"},
        prelude={
            "GET /org/project/_apis/git/repositories/webapp/commits/.*/statuses": (
                200,
                {"count": 0, "value": []},
            )
        },
        final="POST /org/project/_apis/git/repositories/webapp/commits/.*/statuses",
        expect=expect_azuredevops,
        canaries=["ado-canary-pat"],
    ),
    ProviderCase(
        type="bitbucket",
        spec={"address": "https://bitbucket.org/fluxcd/webapp"},
        secret={"token": "flux-bot:bitbucket-canary-app-password"},
        env={"BITBUCKET_API_BASE_URL": "{url}/2.0"},
        prelude={"GET /2.0/repositories/fluxcd/webapp/commit/.*/statuses/build/": (404, {"type": "error"})},
        final="POST /2.0/repositories/fluxcd/webapp/commit/.*/statuses/build$",
        expect=expect_bitbucket,
        canaries=["bitbucket-canary-app-password"],
    ),
    ProviderCase(
        type="githubdispatch",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-dispatch-token"},
        final="POST /api/v3/repos/fluxcd/webapp/dispatches",
        expect=expect_githubdispatch,
        canaries=["ghp-canary-dispatch-token"],
    ),
    ProviderCase(
        type="githubpullrequestcomment",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "ghp-canary-comment-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v3/user$": (200, {"login": "flux-bot"}),
            "GET /api/v3/repos/fluxcd/webapp/issues/42/comments": (200, []),
        },
        final="POST /api/v3/repos/fluxcd/webapp/issues/42/comments",
        expect=expect_github_pr_comment,
        canaries=["ghp-canary-comment-token"],
    ),
    ProviderCase(
        type="gitlabmergerequestcomment",
        spec={"address": "{url}/group/webapp"},
        secret={"token": "glpat-canary-mr-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v4/user$": (200, {"username": "flux-bot"}),
            "GET /merge_requests/42/notes": (200, []),
        },
        final="POST /merge_requests/42/notes",
        expect=expect_gitlab_mr_comment,
        canaries=["glpat-canary-mr-token"],
    ),
    ProviderCase(
        type="giteapullrequestcomment",
        spec={"address": "{url}/fluxcd/webapp"},
        secret={"token": "gitea-canary-comment-token"},
        event=CR_EVENT,
        prelude={
            "GET /api/v1/user$": (200, {"login": "flux-bot"}),
            "GET /api/v1/repos/fluxcd/webapp/issues/42/comments": (200, []),
        },
        final="POST /api/v1/repos/fluxcd/webapp/issues/42/comments",
        expect=expect_gitea_pr_comment,
        canaries=["gitea-canary-comment-token"],
    ),
    ProviderCase(
        type="azureeventhub",
        spec={},
        secret={
            "address": "Endpoint={url}/;SharedAccessKeyName=flux-sender;SharedAccessKey=eventhub-canary-key;"
            "EntityPath=flux-events"
        },
        final="POST /flux-events/messages",
        expect=expect_azureeventhub,
        canaries=["eventhub-canary-key"],
    ),
    ProviderCase(
        type="nats",
        spec={"address": "nats://127.0.0.1:4222", "channel": "flux.events"},
        secret={"username": "flux", "password": "nats-canary-password"},
        http=False,
        canaries=["nats-canary-password"],
    ),
    ProviderCase(
        type="googlepubsub",
        spec={"address": "my-project", "channel": "flux-events"},
        secret={"token": SERVICE_ACCOUNT},
        http=False,
    ),
    ProviderCase(
        type="otel",
        spec={"address": "{url}/v1/traces"},
        secret={"headers": "X-Scope: flux\n", "token": "otel-canary-token"},
        http=False,
        canaries=["otel-canary-token"],
    ),
]
