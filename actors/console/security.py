"""Who may use the console, and from where: a token on every request, CSRF on every change.

``Guard`` wraps the console's ASGI app. Every request must carry the console's token
(drawn at start and printed, like Jupyter's, or the key it was configured with), as

- ``Authorization: Bearer <token>`` (scripts; such requests are never CSRF, since a browser
  does not add that header on its own), or
- the cookie ``Guard.cookie`` (HttpOnly, SameSite=Strict; its value is derived from the
  token, ``Guard.session``), set when a browser opens the printed URL (``?token=...``, then
  redirected to the same page without it) or posts the token to ``login``.

A request without a valid token gets 401 and changes nothing; only the page's own script
and style (``static/``, which hold no data) are served to anyone. A request that changes
state (any method but GET, HEAD, OPTIONS) made with the cookie must also come from the
console's own origin (its ``Origin``, else its ``Referer``, must be the console's; a
browser's ``Sec-Fetch-Site`` must be ``same-origin``) and carry ``X-Greenroom-CSRF``, the
CSRF token the page reads from ``api/session`` (a page of another origin cannot read it):
a forged cross-site request is refused with 403. With ``hosts`` set (``server`` sets it
when bound to loopback), a request whose ``Host`` is not one of them is refused (DNS
rebinding).

Every response forbids framing, sniffing, caching and any script or style not served by
the console itself (``Content-Security-Policy``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

__all__ = ["CSRF_HEADER", "Guard"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_HEADER = "x-greenroom-csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        b"base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]

LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>greenroom console: token needed</title>
<link rel="stylesheet" href="{root}/static/console.css"></head>
<body class="login"><main><h1>greenroom console</h1>
<p>This console needs its token. Open the address it printed when it started
(<code>...?token=...</code>), or paste the token here.</p>
<form method="post" action="{root}/login"><input type="password" name="token" autocomplete="off"
 aria-label="token" autofocus> <button type="submit">Open</button></form>
<p class="refused">{message}</p></main></body></html>
"""


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


class Guard:
    """The console's gate (see the module docstring)."""

    def __init__(self, app: ASGIApp, token: str, *, hosts: set[str] | None = None) -> None:
        if len(token) < 16:
            raise ValueError("a console key must be at least 16 characters")
        self.app = app
        self.token = token
        self.hosts = hosts
        self.csrf = hmac.new(token.encode(), b"greenroom console csrf", hashlib.sha256).hexdigest()
        self.session = hmac.new(token.encode(), b"greenroom console session", hashlib.sha256).hexdigest()
        self.cookie = "greenroom_console_" + hashlib.sha256(token.encode()).hexdigest()[:12]

    def valid(self, candidate: str | None, secret: str | None = None) -> bool:
        """Whether ``candidate`` is the token (or ``secret``), compared in constant time."""
        expected = (secret if secret is not None else self.token).encode()
        return candidate is not None and hmac.compare_digest(candidate.encode(), expected)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host", "")
        if self.hosts is not None and host.lower() not in self.hosts:
            return await _answer(send, 403, {"error": f"host {host!r} is not this console's", "code": "bad_host"})
        root = scope.get("root_path", "")
        method = scope["method"]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        path = scope["path"]
        relative = path[len(root) :] if root and path.startswith(root) else path
        if method == "POST" and relative == "/login":
            return await self._login(scope, receive, send, headers, root)
        if method == "GET" and "token" in query:
            if not self.valid(query["token"][0]):
                return await self._unauthorized(send, headers, root, "That token is not this console's.")
            rest = {k: v for k, v in query.items() if k != "token"}
            location = (path or "/") + (f"?{urlencode(rest, doseq=True)}" if rest else "")
            return await self._redirect(send, location, set_cookie=True)
        if method == "GET" and relative.startswith("/static/"):  # the page's own code and style: no data
            return await self.app(scope, receive, _with_headers(send))
        bearer = headers.get("authorization", "")
        by_header = bearer.startswith("Bearer ") and self.valid(bearer[7:])
        by_cookie = self.valid(self._cookie_of(headers), self.session)
        if not (by_header or by_cookie):
            return await self._unauthorized(send, headers, root, "")
        if method not in SAFE_METHODS and not by_header:
            refused = self._cross_site(headers, scope)
            if refused is not None:
                return await _answer(send, 403, {"error": refused, "code": "csrf"})
        scope.setdefault("state", {})["csrf"] = self.csrf
        await self.app(scope, receive, _with_headers(send))

    def _cookie_of(self, headers: dict[str, str]) -> str | None:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except CookieError:
            return None
        morsel = jar.get(self.cookie)
        return morsel.value if morsel is not None else None

    def _same_origin(self, headers: dict[str, str], scope: Scope) -> str | None:
        """Why the request is not from the console's own origin, or None."""
        own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a cross-site request (Sec-Fetch-Site: {site}) was refused"
        claimed = headers.get("origin") or (_origin(headers["referer"]) if "referer" in headers else None)
        if claimed is not None and claimed.lower() != own:
            return f"a request from another origin ({claimed}) was refused"
        return None

    def _cross_site(self, headers: dict[str, str], scope: Scope) -> str | None:
        why = self._same_origin(headers, scope)
        if why is not None:
            return why
        if not hmac.compare_digest(headers.get(CSRF_HEADER, "").encode(), self.csrf.encode()):
            return "the request lacks the console's CSRF token (X-Greenroom-CSRF): refused"
        return None

    async def _login(self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], root: str) -> None:
        why = self._same_origin(headers, scope)
        if why is not None:
            return await _answer(send, 403, {"error": why, "code": "csrf"})
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > 4096:
                return await _answer(send, 413, {"error": "too large", "code": "invalid"})
            if not message.get("more_body"):
                break
        token = parse_qs(body.decode("latin-1")).get("token", [""])[0]
        if not self.valid(token):
            return await self._unauthorized(send, headers, root, "That token is not this console's.")
        await self._redirect(send, root + "/", set_cookie=True)

    async def _redirect(self, send: Send, location: str, *, set_cookie: bool) -> None:
        headers = [(b"location", location.encode("latin-1")), *HEADERS]
        if set_cookie:
            cookie = f"{self.cookie}={self.session}; HttpOnly; SameSite=Strict; Path=/"
            headers.append((b"set-cookie", cookie.encode("latin-1")))
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def _unauthorized(self, send: Send, headers: dict[str, str], root: str, message: str) -> None:
        if "text/html" in headers.get("accept", ""):
            import html

            page = LOGIN_PAGE.format(root=html.escape(root), message=html.escape(message))
            return await _send(send, 401, page.encode(), b"text/html; charset=utf-8")
        text = message or "this console needs its token (Authorization: Bearer, or open the address it printed)"
        await _answer(send, 401, {"error": text, "code": "unauthorized"})


async def _send(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _answer(send: Send, status: int, data: dict[str, Any]) -> None:
    await _send(send, status, json.dumps(data).encode(), b"application/json")


def _with_headers(send: Send) -> Send:
    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
        await send(message)

    return wrapped
