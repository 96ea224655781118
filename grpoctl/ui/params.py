"""Query parameters of the JSON API, validated: a bad one is a 400 with one line, never
a traceback, and a name the endpoint does not know is refused too (a typo is not
silently ignored)."""

from __future__ import annotations

import re

from starlette.datastructures import QueryParams

from grpoctl import metrics

MAX_QUERY_CHARS = 2_000
MAX_STEP = 10**9
NAME_RE = re.compile(r"^[A-Za-z0-9_.:=+,@ \-]{1,200}$")  # a sweep or group name as the URL carries it


class BadRequest(Exception):
    """A request the API refuses (400), with the line to answer."""


def check_known(query: QueryParams, allowed: set[str]) -> None:
    unknown = sorted(set(query.keys()) - allowed - {"token"})
    if unknown:
        raise BadRequest(f"unknown query parameter '{unknown[0][:40]}' (expected: {', '.join(sorted(allowed))})")
    for key in query.keys():
        if len(query.getlist(key)) > 1:
            raise BadRequest(f"query parameter '{key}' given more than once")


def _given(query: QueryParams, key: str, pattern: str, what: str) -> str | None:
    """The parameter's text if given (None if absent or empty), once it matches `pattern`."""
    raw = query.get(key)
    if raw is None or raw == "":
        return None
    if not re.fullmatch(pattern, raw):
        raise BadRequest(f"'{key}' must be {what}, not '{raw[:40]}'")
    return raw


def integer(query: QueryParams, key: str, default: int | None, low: int, high: int) -> int | None:
    raw = _given(query, key, r"-?\d{1,10}", "an integer")
    if raw is None:
        return default
    value = int(raw)
    if not low <= value <= high:
        raise BadRequest(f"'{key}' must be between {low} and {high}, not {value}")
    return value


def fraction(query: QueryParams, key: str, default: float) -> float:
    raw = _given(query, key, r"0(\.\d{1,6})?|1(\.0{1,6})?|\.\d{1,6}", "a number from 0 to 1")
    if raw is None:
        return default
    value = float(raw)
    if value >= 1:
        raise BadRequest(f"'{key}' must be below 1")
    return value


def choice(query: QueryParams, key: str, options: tuple[str, ...], default: str | None) -> str | None:
    raw = query.get(key)
    if raw is None or raw == "":
        return default
    if raw not in options:
        raise BadRequest(f"'{key}' must be one of {', '.join(options)}, not '{raw[:40]}'")
    return raw


def metric(query: QueryParams, default: str = metrics.EVAL_ACCURACY) -> str:
    raw = query.get("metric") or default
    if not metrics.NAME_RE.fullmatch(raw):
        raise BadRequest(f"'{raw[:60]}' is not a metric name (family/name, e.g. {metrics.REWARD})")
    return raw


def name(raw: str, what: str) -> str:
    if not NAME_RE.fullmatch(raw):
        raise BadRequest(f"not a {what} name: '{raw[:60]}'")
    return raw
