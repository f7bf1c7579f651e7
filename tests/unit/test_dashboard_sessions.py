"""How long the in-cluster dashboard trusts a sign-in (at most until the token's own `exp`), how
an open stream ends when its session does (signed out, expired), and server-sent events that
follow the specification's line rules whatever a log line or an annotation holds."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Callable
from typing import Any, cast

import pytest
from aiohttp import ClientTimeout, web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from manager.cli.dashboard.incluster import SESSION_COOKIE, SESSION_SECONDS, ClusterAccess, session_seconds, token_expiry
from manager.cli.dashboard.server import RECHECK_SECONDS, SESSION_ENDED, Settings, create_app, event_text, live
from manager.controllers.visibility import User, VisibilityServer
from manager.kube.client import KubeClient

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0  # seconds since the epoch


def jwt(claims: Any) -> str:
    """A token shaped as a JWT (header.claims.signature, base64url without padding); unsigned:
    the dashboard reads `exp` only to bound a session the apiserver already accepted."""

    def part(value: Any) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("token", "lasts"),
    [
        (jwt({"exp": NOW + 600}), 600.0),  # a ServiceAccount token of 10 minutes: 10 minutes
        (jwt({"exp": NOW + 86400}), float(SESSION_SECONDS)),  # a day: the dashboard's own maximum
        (jwt({"exp": NOW - 1}), 0.0),  # already expired: no session
        (jwt({"sub": "alice"}), float(SESSION_SECONDS)),  # no exp: the maximum, as before
        (jwt({"exp": "soon"}), float(SESSION_SECONDS)),
        (jwt({"exp": True}), float(SESSION_SECONDS)),
        (jwt(["exp", 1]), float(SESSION_SECONDS)),
        ("an-opaque-token", float(SESSION_SECONDS)),
        ("a.b%%.c", float(SESSION_SECONDS)),  # not base64: read as a token without exp
        ("a." + base64.urlsafe_b64encode(b"\xff\xfe").decode() + ".c", float(SESSION_SECONDS)),
    ],
)
def test_a_session_ends_at_its_tokens_expiry_or_at_the_dashboards_maximum(token: str, lasts: float) -> None:
    assert session_seconds(token, now=NOW) == lasts


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.builds(jwt, st.dictionaries(st.text(max_size=5), st.integers() | st.floats() | st.text())))
def test_any_token_reads_as_an_expiry_or_none_and_a_session_never_outlives_the_maximum(token: str) -> None:
    exp = token_expiry(token)
    assert exp is None or isinstance(exp, float)
    assert 0.0 <= session_seconds(token, now=NOW) <= SESSION_SECONDS


# --- server-sent events --------------------------------------------------------------------------------
def fields(stream: str) -> list[tuple[str, str]]:
    """The fields of a server-sent-event stream as the specification's parser reads them: lines
    end at CRLF, CR or LF; a line is `name: value` (one space after the colon dropped)."""
    found = []
    for line in re.split(r"\r\n|\r|\n", stream):
        if line:
            name, _, value = line.partition(":")
            found.append((name, value[1:] if value.startswith(" ") else value))
    return found


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("one line", ["one line"]),
        ("a\nb", ["a", "b"]),
        ("a\r\nb", ["a", "b"]),
        ("progress 10%\rprogress 20%", ["progress 10%", "progress 20%"]),
        ("line\revent: end", ["line", "event: end"]),  # a field name in a log line stays data
        ("\r\r", ["", "", ""]),
    ],
)
def test_each_line_of_an_event_is_a_data_field_whatever_ends_it(data: str, expected: list[str]) -> None:
    assert fields(event_text("line", data)) == [("event", "line"), *(("data", line) for line in expected)]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(max_size=10) | st.sampled_from(["\r", "\n", "\r\n", ":", "event: end", "data:"])).map("".join))
def test_no_data_can_start_another_field_or_event(data: str) -> None:
    text = event_text("line", data)
    assert text.endswith("\n\n")
    parsed = fields(text)
    assert parsed[0] == ("event", "line") and all(name == "data" for name, _ in parsed[1:])
    assert "\n".join(value for _, value in parsed[1:]) == "\n".join(re.split(r"\r\n|\r|\n", data))
    # One event: the blank line that dispatches it comes only at the end.
    assert re.search(r"(\r\n|\r|\n)(\r\n|\r|\n)", text[:-1]) is None


# --- streams end with their session ---------------------------------------------------------------------
class Ticks:
    """The dashboard's sleep, injected: returns at once and keeps each delay asked for."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        await asyncio.sleep(0)


def signed_in_access(clock: list[float]) -> tuple[ClusterAccess, str]:
    """A ClusterAccess with one session of alice's, until t=100 on `clock` (no apiserver: a
    session cookie is checked without one)."""
    reviews = cast(VisibilityServer, object())
    access = ClusterAccess(cast(KubeClient, object()), reviews, clock=lambda: clock[0])
    access.sessions["alices-session"] = (User("alice"), 100.0)
    return access, "alices-session"


def streaming_app(access: ClusterAccess, sleep: Ticks, on_read: Callable[[int], None]) -> web.Application:
    """The dashboard with a live view whose read says how many times it was called."""
    reads = [0]

    async def read() -> tuple[dict[str, Any], list[str]]:
        reads[0] += 1
        on_read(reads[0])
        return {}, [f"read {reads[0]}"]

    def add(app: web.Application) -> None:
        async def stream(request: web.Request) -> web.StreamResponse:
            return await live(request, "_notes.html", read)

        app.router.add_get("/view/stream", stream)

    return create_app(Settings(access, extra_routes=[add]), sleep=sleep)


async def open_stream(app: web.Application, cookie: str) -> str:
    async with TestClient(TestServer(app)) as client:
        answer = await client.get("/view/stream", cookies={SESSION_COOKIE: cookie}, timeout=ClientTimeout(total=30))
        assert answer.status == 200 and answer.headers["Content-Type"] == "text/event-stream"
        return await answer.text()


@pytest.mark.parametrize("how", ["signed out", "expired"])
async def test_an_open_stream_ends_when_its_session_does(how: str) -> None:
    clock = [0.0]
    access, key = signed_in_access(clock)
    sleep = Ticks()

    def on_read(count: int) -> None:
        if count == 3:
            if how == "signed out":
                access.sign_out(key)
            else:
                clock[0] = 100.0

    text = await open_stream(streaming_app(access, sleep, on_read), key)
    events = [e for e in text.split("\n\n") if e]
    # Read 1 only decided that the stream may start; the updates follow, a period apart.
    assert events[0].startswith("event: fragment\n") and "read 2" in events[0]
    assert events[-1] == f"event: end\ndata: {SESSION_ENDED}"
    assert "read 1" not in text
    assert RECHECK_SECONDS in sleep.asked and max(sleep.asked) <= 30.0


async def test_a_stream_without_a_session_is_refused_before_it_starts() -> None:
    clock = [0.0]
    access, _ = signed_in_access(clock)
    app = create_app(Settings(access))
    async with TestClient(TestServer(app)) as client:
        answer = await client.get("/jobs/stream", cookies={SESSION_COOKIE: "guessed"})
        assert answer.status == 401 and (await answer.text()).strip() == "sign in first: /login"
