"""The UI's two actions — replay a dead letter, expire a Silence — and who may do them (issue 27 item 3).

Read-only is the default: without ``--ui-actions-token-file`` every action answers 403 and no page shows a
button. With it, a POST to an action is done only for a caller who proves the token:

* **a bearer token** — ``Authorization: Bearer <token>`` (curl, scripts). A browser never attaches this
  header on its own, so a cross-site page cannot forge it: no CSRF token is needed on top;
* **a session** — the ``/login`` form posts the token once; the answer sets a cookie
  (``HttpOnly; SameSite=Strict; Path=/``) holding ``<issued>.<HMAC(token, "session:" + issued)>``. Nothing is
  stored on the server: the cookie is checked against the token read now, so rotating the token (the file
  is read on each check: a mounted Secret's update) ends every session, and a session ends after
  ``SESSION_TTL``. Every form of a signed-in page carries a CSRF token, ``HMAC(token, "csrf:" + cookie)``,
  which a POST must echo (``SameSite=Strict`` already keeps the cookie off cross-site requests; the token
  also covers a same-site attacker and old browsers).

Comparisons are constant time (``hmac.compare_digest`` on bytes), and wrong tokens are rate-limited for the
whole listener (``Guard``: ten at once, then ten a minute; past that 429 with ``Retry-After``). A token file that cannot be read or is
empty refuses every action (and is logged once per change, at error: an operator's mistake, not a
client's). Before any of this, ``__init__.py`` has refused a foreign ``Host`` or ``Origin``.

Outcomes are plain HTML pages (``result.html``) with a link back; a refusal is a plain-text 403 naming what
is missing, never which part of a token was wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from ...lib.tokenbucket import Bucket
from .context import Actions, UIActionError, UIContext

log = logging.getLogger(__name__)

COOKIE = "nc_ui_session"
SESSION_TTL = 12 * 3600.0
"""Seconds a signed-in session lasts."""
MAX_TOKEN_FILE = 4096
"""Bytes read from the token file (a token is far shorter; a wrong path must not read a large file)."""
MAX_FIELD = 512
"""Characters of a form field (an id, a namespace, a name)."""
GUESS_BURST = 10
GUESS_RATE = 10 / 60
"""Wrong tokens allowed: a burst of ``GUESS_BURST``, then ten a minute (for the whole listener)."""


class TokenFile:
    """The token, read from ``path`` on each call (stripped of surrounding whitespace). Empty bytes when the
    file is missing, unreadable or empty: nothing matches it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._last_error = ""

    def __call__(self) -> bytes:
        token, problem = self.read()
        if problem:
            self._complain(problem)
            return b""
        self._last_error = ""
        return token

    def read(self) -> tuple[bytes, str]:
        """(the token, "") or (b"", what is wrong with the file), without logging (the start-up check)."""
        try:
            with self.path.open("rb") as f:
                token = f.read(MAX_TOKEN_FILE).strip()
        except OSError as exc:
            return b"", f"cannot read it: {exc.strerror or type(exc).__name__}"
        return (token, "") if token else (b"", "it is empty")

    def _complain(self, why: str) -> None:
        if why != self._last_error:
            self._last_error = why
            log.error("ui: --ui-actions-token-file %s: %s; every action is refused", self.path, why)


def _mac(token: bytes, purpose: str) -> str:
    return hmac.new(token, purpose.encode(), hashlib.sha256).hexdigest()


def new_session(token: bytes, now: float) -> str:
    issued = str(int(now))
    return f"{issued}.{_mac(token, 'session:' + issued)}"


def session_valid(token: bytes, cookie: str, now: float) -> bool:
    issued, _, mac = cookie.partition(".")
    if not token or not issued.isdigit() or len(issued) > 12 or not mac:
        return False
    if not hmac.compare_digest(mac.encode(), _mac(token, "session:" + issued).encode()):
        return False
    return 0 <= now - int(issued) <= SESSION_TTL


def csrf_token(token: bytes, cookie: str) -> str:
    return _mac(token, "csrf:" + cookie)


def bearer_valid(token: bytes, header: str) -> bool:
    scheme, _, presented = header.partition(" ")
    if not token or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token)


class Guard:
    """Who is signed in, and whether a POST may act. Wrong tokens (a login, a bearer header, a forged session
    cookie) are limited to ``GUESS_BURST`` and then ``GUESS_RATE`` a second for the whole listener: past
    that every attempt is a 429 until a guess is allowed again, so a weak token cannot be brute-forced
    quickly (reads are never affected; a long random token is still the defence, docs/ui.md)."""

    def __init__(
        self,
        actions: Actions | None,
        now: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.actions = actions
        self.now = now
        self.monotonic = monotonic
        self._guesses = Bucket(GUESS_RATE, GUESS_BURST, monotonic())
        self._locked_until = 0.0

    def throttle(self) -> None:
        """Raise 429 while wrong tokens have used up their budget."""
        wait = self._locked_until - self.monotonic()
        if wait > 0:
            raise web.HTTPTooManyRequests(
                text="Too many wrong tokens: try again later.", headers={"Retry-After": str(math.ceil(wait))}
            )

    def wrong_token(self, request: web.Request, what: str) -> None:
        log.info("ui: %s refused (wrong token) from %s", what, request.remote)
        now = self.monotonic()
        self._guesses.take(now)
        if self._guesses.tokens < 1.0:  # the budget is spent: locked until the next guess is allowed
            self._locked_until = now + (1.0 - self._guesses.tokens) / GUESS_RATE

    def session(self, request: web.Request) -> tuple[bool, str]:
        """(signed in, the CSRF token for this page's forms)."""
        if self.actions is None:
            return False, ""
        cookie = request.cookies.get(COOKIE, "")
        token = self.actions.token()
        if cookie and session_valid(token, cookie, self.now()):
            return True, csrf_token(token, cookie)
        return False, ""

    async def authorize(self, request: web.Request) -> dict[str, str]:
        """The form's fields when the caller may act; raises 403 otherwise."""
        if self.actions is None:
            raise web.HTTPForbidden(
                text="Actions are disabled: this UI is read-only (see --ui-actions-token-file)."
            )
        form = await _form(request)
        token = self.actions.token()
        if not token:
            raise web.HTTPForbidden(
                text="Actions are unavailable: the controller cannot read its token file."
            )
        self.throttle()
        header = request.headers.get("Authorization")
        if header is not None:
            if bearer_valid(token, header):
                return form
            self.wrong_token(request, "bearer token")
            raise web.HTTPForbidden(text="Forbidden: the bearer token is not valid.")
        cookie = request.cookies.get(COOKIE, "")
        if not cookie or not session_valid(token, cookie, self.now()):
            if cookie:
                self.wrong_token(request, "session cookie")
            raise web.HTTPForbidden(text="Forbidden: sign in first (/login) or send Authorization: Bearer.")
        if not hmac.compare_digest(form.get("csrf", "").encode(), csrf_token(token, cookie).encode()):
            raise web.HTTPForbidden(
                text="Forbidden: missing or stale CSRF token; reload the page and try again."
            )
        return form


async def _form(request: web.Request) -> dict[str, str]:
    if request.content_type not in ("application/x-www-form-urlencoded", "multipart/form-data"):
        raise web.HTTPBadRequest(text="Send the form as application/x-www-form-urlencoded.")
    data = await request.post()
    out: dict[str, str] = {}
    for key in ("csrf", "token", "id", "namespace", "name"):
        value = data.get(key)
        if isinstance(value, str):
            if len(value) > MAX_FIELD and key != "token":
                raise web.HTTPBadRequest(text=f"{key}: longer than {MAX_FIELD} characters")
            out[key] = value
    return out


def action_routes(ctx: UIContext, guard: Guard, render: Callable[..., web.Response]) -> list[web.RouteDef]:
    """``/login`` (GET: the form; POST: check the token, set the cookie), ``/logout``, and the two actions.
    ``render(template, request, **values)`` is ``pages.Pages.render``."""
    actions = ctx.actions

    def result(request: web.Request, status: int, title: str, message: str) -> web.Response:
        response = render("result.html", request, title=title, message=message)
        response.set_status(status)
        return response

    async def login_form(request: web.Request) -> web.Response:
        if actions is None:
            raise web.HTTPNotFound(text="Actions are disabled: this UI is read-only.")
        return render("login.html", request, failed=False)

    async def login(request: web.Request) -> web.StreamResponse:
        if actions is None:
            raise web.HTTPForbidden(
                text="Actions are disabled: this UI is read-only (see --ui-actions-token-file)."
            )
        form = await _form(request)
        guard.throttle()
        token = actions.token()
        presented = form.get("token", "").strip().encode()
        if not token or not hmac.compare_digest(presented, token):
            guard.wrong_token(request, "sign-in")
            response = render("login.html", request, failed=True)
            response.set_status(403)
            return response
        return _signed_in(request, new_session(token, guard.now()))

    async def logout(request: web.Request) -> web.StreamResponse:
        await guard.authorize(request)
        response = web.Response(status=303, headers={"Location": "/"})
        response.del_cookie(COOKIE, path="/")
        return response

    async def replay(request: web.Request) -> web.Response:
        form = await guard.authorize(request)
        ident = form.get("id", "")
        if not ident:
            raise web.HTTPBadRequest(text="id: required")
        if actions is None or actions.replay is None:
            return result(
                request, 409, "Nothing to replay", "This controller keeps no dead letters (memory store)."
            )
        if not await actions.replay(ident):
            return result(request, 404, "Not replayed", "No such dead letter (replayed or deleted already?).")
        log.info("ui: dead letter %s replayed", ident)
        return result(
            request, 200, "Replayed", "The notification is back in the outbox; it will be sent again."
        )

    async def expire(request: web.Request) -> web.Response:
        form = await guard.authorize(request)
        namespace, name = form.get("namespace", ""), form.get("name", "")
        if not namespace or not name:
            raise web.HTTPBadRequest(text="namespace and name: required")
        if actions is None or actions.expire_silence is None:
            return result(request, 409, "Not expired", "Silences cannot be expired from this controller.")
        try:
            done = await actions.expire_silence(namespace, name)
        except UIActionError as exc:
            return result(request, 409, "Not expired", str(exc))
        log.info("ui: Silence %s/%s expired", namespace, name)
        return result(request, 200, "Expired", done)

    return [
        web.get("/login", login_form),
        web.post("/login", login),
        web.post("/logout", logout),
        web.post("/actions/dead-letters/replay", replay),
        web.post("/actions/silences/expire", expire),
    ]


def _signed_in(request: web.Request, cookie: str) -> web.Response:
    response = web.Response(status=303, headers={"Location": "/"})
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(SESSION_TTL),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=request.secure,
    )
    return response
