"""Who may talk to the dashboard: the Host header, the access token, the URL's length.

- Host: a page on another site can make a browser send requests to 127.0.0.1 under a
  name it controls (DNS rebinding); the server answers only requests whose Host names
  this machine's loopback names or the --host it was given.
- Token: on any other --host the registry can be read from the network, so the server
  starts with a random token (printed once, with the URL), and every request must carry
  it: `?token=` once (the answer sets an HttpOnly cookie), the cookie, or the
  X-Grpoctl-Token header. Compared in constant time.
- Length: a URL longer than any the page makes is refused before any handler runs.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
TOKEN_COOKIE = "grpoctl_token"
TOKEN_HEADER = b"x-grpoctl-token"
MAX_TARGET_CHARS = 4_000
# Every answer: no framing by other sites, no scripts but our own, no token in a Referer.
SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
    ),
]


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header, lowercased: `[::1]:8000` -> `[::1]`, `a:80` -> `a`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header.split("]", 1)[0] + "]"
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(bind_host: str) -> set[str]:
    hosts = set(LOOPBACK_NAMES)
    bind = bind_host.lower()
    hosts.add(f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind)
    return hosts


async def _answer(send, status: int, message: str, headers: list | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            + (headers or []),
        }
    )
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: the checks above, before any route runs."""

    def __init__(self, app, bind_host: str, token: str | None) -> None:
        self.app = app
        self.hosts = allowed_hosts(bind_host)
        self.token = token

    def _token_given(self, scope) -> tuple[str | None, bool]:
        """(the token the request carries, whether it came in the query string)."""
        headers = dict(scope.get("headers") or [])
        if TOKEN_HEADER in headers:
            return headers[TOKEN_HEADER].decode("latin-1"), False
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "token" in query:
            return query["token"][0], True
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get(b"cookie", b"").decode("latin-1"))
        except Exception:  # a malformed cookie header carries no token
            return None, False
        morsel = cookie.get(TOKEN_COOKIE)
        return (morsel.value if morsel else None), False

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        target = len(scope.get("raw_path") or scope["path"]) + len(scope.get("query_string", b""))
        if target > MAX_TARGET_CHARS:
            await _answer(send, 414, "request URL too long")
            return
        headers = dict(scope.get("headers") or [])
        host = host_of(headers.get(b"host", b"").decode("latin-1"))
        if host not in self.hosts:
            await _answer(send, 400, "unexpected Host header (the dashboard answers only the names it listens on)")
            return
        cookie = None
        if self.token is not None:
            given, in_query = self._token_given(scope)
            if given is None or not hmac.compare_digest(given.encode(), self.token.encode()):
                await _answer(send, 401, "this dashboard needs its access token (the URL `grpoctl ui` printed)")
                return
            if in_query:
                cookie = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()

        async def send_secured(message) -> None:
            if message["type"] == "http.response.start":
                extra = SECURITY_HEADERS + ([(b"set-cookie", cookie)] if cookie else [])
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_secured)
