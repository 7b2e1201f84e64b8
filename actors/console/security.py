"""Who may use the console, and from where: a token on every request, CSRF on every change.

``Guard`` wraps the console's ASGI app. Every request must carry a token of the console: the
anonymous one (drawn at start and printed, like Jupyter's, or the key it was configured with)
or a named user's (``users``: name to token, each its own), as

- ``Authorization: Bearer <token>`` (scripts; such requests are never CSRF, since a browser
  does not add that header on its own), or
- the cookie ``Guard.cookie`` (HttpOnly, SameSite=Strict, ``Secure`` when the console is
  reached over https; its value is derived from the token, so it names its user), set when
  a browser opens the printed URL (``?token=...``, then redirected to the same page without
  it) or posts the token to ``login``.

The request's user (its name, or None for the anonymous token) is put in the ASGI scope's
``state["user"]``; the app sends each command with it as its ``by``.

A request without a valid token gets 401 and changes nothing; only the page's own script
and style (``static/``, which hold no data) are served to anyone. A request that changes
state (any method but GET, HEAD, OPTIONS) made with the cookie must also come from the
console's own origin (its ``Origin``, else its ``Referer``, must be the console's; a
browser's ``Sec-Fetch-Site`` must be ``same-origin``) and carry ``X-Greenroom-CSRF``, the
CSRF token of its user, which the page reads from ``api/session`` (a page of another origin
cannot read it): a forged cross-site request is refused with 403. With ``hosts`` set
(``server`` sets it when bound to loopback and not behind a proxy), a request whose ``Host``
is not one of them is refused (DNS rebinding).

The console's own origin is its request's scheme and ``Host``; with ``trust_proxy`` (a TLS
reverse proxy in front), the scheme and host the proxy forwards instead: the last element
of ``Forwarded`` (``proto=``, ``host=``), else the last value of ``X-Forwarded-Proto`` and
``X-Forwarded-Host`` (the one the proxy nearest the console wrote). Untrusted (the default),
those headers are ignored. A forwarded value that is not a scheme or a host is refused (403).

Every response forbids framing, sniffing, caching and any script or style not served by
the console itself (``Content-Security-Policy``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from messages.principals import check_principal

__all__ = ["CSRF_HEADER", "BadForwarded", "Guard", "Login", "forwarded", "logins"]

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
(<code>...?token=...</code>), or paste the token here: the console's, or your own.</p>
<form method="post" action="{root}/login"><input type="password" name="token" autocomplete="off"
 aria-label="token" autofocus> <button type="submit">Open</button></form>
<p class="refused">{message}</p></main></body></html>
"""


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def _joined(scope: Scope, name: bytes) -> str:
    """Every value of header ``name`` (several lines count as one, comma-joined)."""
    return ",".join(v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == name)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return _without_default_port(parts.scheme, parts.netloc.lower())


def _without_default_port(scheme: str, host: str) -> str:
    """``scheme://host``, without the port that is the scheme's own (as a browser's ``Origin``)."""
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    if default and host.endswith(default):
        host = host[: -len(default)]
    return f"{scheme}://{host}".lower()


_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class BadForwarded(ValueError):
    """A trusted proxy forwarded a scheme or host that is not one."""


def forwarded(scope: Scope) -> tuple[str | None, str | None]:
    """``(scheme, host)`` a proxy forwarded (the last element of ``Forwarded``, else the last
    values of ``X-Forwarded-Proto`` and ``X-Forwarded-Host``), each None when not given."""
    standard = _joined(scope, b"forwarded")
    if standard:
        pairs = {}
        for part in standard.split(",")[-1].split(";"):
            key, _, value = part.strip().partition("=")
            pairs[key.strip().lower()] = value.strip().strip('"')
        scheme, host = pairs.get("proto"), pairs.get("host")
    else:
        scheme = _joined(scope, b"x-forwarded-proto").split(",")[-1].strip() or None
        host = _joined(scope, b"x-forwarded-host").split(",")[-1].strip() or None
    if scheme is not None and scheme.lower() not in ("http", "https"):
        raise BadForwarded(f"the proxy forwarded the scheme {scheme!r}: not http or https")
    if host is not None and not _HOST.fullmatch(host):
        raise BadForwarded(f"the proxy forwarded the host {host!r}: not a host")
    return (scheme.lower() if scheme else None), host


@dataclass(frozen=True)
class Login:
    """One way in: a user's name (None: the anonymous token), its token, and the values
    derived from it: its session cookie's and its CSRF token."""

    user: str | None
    token: str
    session: str
    csrf: str

    @classmethod
    def of(cls, user: str | None, token: str) -> Login:
        def derive(what: bytes) -> str:
            return hmac.new(token.encode(), what, hashlib.sha256).hexdigest()

        return cls(user, token, derive(b"greenroom console session"), derive(b"greenroom console csrf"))


def logins(token: str | None, users: Mapping[str, str] | None) -> list[Login]:
    """The console's ways in, checked: at least one; each token 16 characters or more and
    its own; each user's name a principal. The errors name users, never tokens."""
    out = [Login.of(None, token)] if token is not None else []
    for name, secret in (users or {}).items():
        try:
            check_principal(name)
        except ValueError as exc:
            raise ValueError(f"a console user's name: {exc}") from None
        out.append(Login.of(name, secret))
    if not out:
        raise ValueError("a console needs a key or at least one user")
    for login in out:
        if not isinstance(login.token, str) or len(login.token) < 16:
            who = f"the token of user {login.user!r}" if login.user is not None else "a console key"
            raise ValueError(f"{who} must be at least 16 characters")
    if len({login.token for login in out}) < len(out):
        raise ValueError("two of the console's users (or a user and its key) have the same token: each needs its own")
    return out


class Guard:
    """The console's gate (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        *,
        hosts: set[str] | None = None,
        users: Mapping[str, str] | None = None,
        trust_proxy: bool = False,
    ) -> None:
        self.app = app
        self.logins = logins(token, users)
        self.hosts = hosts
        self.trust_proxy = trust_proxy
        secrets = sorted(login.token for login in self.logins)
        self.cookie = "greenroom_console_" + hashlib.sha256("\0".join(secrets).encode()).hexdigest()[:12]

    def login(self, candidate: str | None, *, cookie: bool = False) -> Login | None:
        """The login whose token (or, with ``cookie``, session value) ``candidate`` is, compared
        in constant time with every one."""
        found = None
        for login in self.logins:
            expected = login.session if cookie else login.token
            if candidate is not None and hmac.compare_digest(candidate.encode(), expected.encode()):
                found = login
        return found

    def own(self, scope: Scope, headers: dict[str, str]) -> tuple[str, str]:
        """The console's scheme and host as the browser sees them (see the module docstring);
        ``BadForwarded`` for a trusted proxy's bad value."""
        scheme, host = scope.get("scheme", "http"), headers.get("host", "")
        if self.trust_proxy:
            by_proxy = forwarded(scope)
            scheme, host = by_proxy[0] or scheme, by_proxy[1] or host
        return scheme, host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            scheme, host = self.own(scope, headers)
        except BadForwarded as exc:
            return await _answer(send, 403, {"error": str(exc), "code": "bad_host"})
        if self.hosts is not None and host.lower() not in self.hosts:
            return await _answer(send, 403, {"error": f"host {host!r} is not this console's", "code": "bad_host"})
        origin = _without_default_port(scheme, host)
        secure = scheme == "https"
        root = scope.get("root_path", "")
        method = scope["method"]
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        path = scope["path"]
        relative = path[len(root) :] if root and path.startswith(root) else path
        if method == "POST" and relative == "/login":
            return await self._login(receive, send, headers, root, origin, secure)
        if method == "GET" and "token" in query:
            by_query = self.login(query["token"][0])
            if by_query is None:
                return await self._unauthorized(send, headers, root, "That token is not this console's.")
            rest = {k: v for k, v in query.items() if k != "token"}
            location = (path or "/") + (f"?{urlencode(rest, doseq=True)}" if rest else "")
            return await self._redirect(send, location, by_query, secure)
        if method == "GET" and relative.startswith("/static/"):  # the page's own code and style: no data
            return await self.app(scope, receive, _with_headers(send))
        bearer = headers.get("authorization", "")
        by_header = self.login(bearer[7:]) if bearer.startswith("Bearer ") else None
        login = by_header or self.login(self._cookie_of(headers), cookie=True)
        if login is None:
            return await self._unauthorized(send, headers, root, "")
        if method not in SAFE_METHODS and by_header is None:
            refused = self._cross_site(headers, origin, login)
            if refused is not None:
                return await _answer(send, 403, {"error": refused, "code": "csrf"})
        state = scope.setdefault("state", {})
        state["csrf"], state["user"] = login.csrf, login.user
        await self.app(scope, receive, _with_headers(send))

    def _cookie_of(self, headers: dict[str, str]) -> str | None:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get("cookie", ""))
        except CookieError:
            return None
        morsel = jar.get(self.cookie)
        return morsel.value if morsel is not None else None

    @staticmethod
    def _same_origin(headers: dict[str, str], own: str) -> str | None:
        """Why the request is not from the console's own origin (``own``), or None."""
        site = headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return f"a cross-site request (Sec-Fetch-Site: {site}) was refused"
        claimed = headers.get("origin") or (_origin(headers["referer"]) if "referer" in headers else None)
        if claimed is not None and claimed.lower() != own:
            return f"a request from another origin ({claimed}) was refused"
        return None

    def _cross_site(self, headers: dict[str, str], own: str, login: Login) -> str | None:
        why = self._same_origin(headers, own)
        if why is not None:
            return why
        if not hmac.compare_digest(headers.get(CSRF_HEADER, "").encode(), login.csrf.encode()):
            return "the request lacks the console's CSRF token (X-Greenroom-CSRF): refused"
        return None

    async def _login(
        self, receive: Receive, send: Send, headers: dict[str, str], root: str, own: str, secure: bool
    ) -> None:
        why = self._same_origin(headers, own)
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
        login = self.login(parse_qs(body.decode("latin-1")).get("token", [""])[0])
        if login is None:
            return await self._unauthorized(send, headers, root, "That token is not this console's.")
        await self._redirect(send, root + "/", login, secure)

    async def _redirect(self, send: Send, location: str, login: Login, secure: bool) -> None:
        cookie = f"{self.cookie}={login.session}; HttpOnly; SameSite=Strict; Path=/" + ("; Secure" if secure else "")
        headers = [(b"location", location.encode("latin-1")), *HEADERS, (b"set-cookie", cookie.encode("latin-1"))]
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
