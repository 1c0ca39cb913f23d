"""What the blocking and the asyncio clients share to wait for results and
to read ``GET /v1/events``: the server-sent events decoder, the stream's
query, and which failures a stream reconnects after."""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Union

import httpx

from ._errors import DecodeError, TetherError, Unavailable, error_from_body
from ._models import FeedEvent, FeedGap, FeedItem

MAX_WAIT_MS = 30_000
"""The longest ``wait_ms`` one read asks for (the server's ``max_wait_ms``
default); a longer wait is several reads."""

FINISHED_JOB_STATES = frozenset({"succeeded", "failed", "cancelled"})
"""The states a job's wait ends in."""

STREAM_READ_TIMEOUT = 45.0
"""Seconds a stream may stay silent before it counts as dropped: the server
sends a comment line at least every 15 s, so three of them were missed."""

EVENTS_PATH = "/v1/events"


def wait_ms_for(deadline: Optional[float], now: float) -> int:
    """The ``wait_ms`` of the next read of a wait ending at ``deadline``
    (a ``time.monotonic()`` instant; None: no end)."""
    if deadline is None:
        return MAX_WAIT_MS
    left = math.ceil((deadline - now) * 1000)
    return max(0, min(left, MAX_WAIT_MS))


def answered_early(started: float, now: float, wait_ms: int) -> bool:
    """Whether a waiting read of an unfinished object came back well before
    its ``wait_ms`` (the tenant had no waiting place free, so the server
    answered at once): the next read then pauses first instead of spinning."""
    return wait_ms > 0 and (now - started) * 1000 < wait_ms / 2


def stream_params(
    queue: Optional[str],
    job_id: Optional[str],
    workflow_id: Optional[str],
    events: Union[str, Iterable[str], None],
) -> Dict[str, str]:
    """The query of ``GET /v1/events`` for these filters."""
    params: Dict[str, str] = {}
    if queue is not None:
        params["queue"] = queue
    if job_id is not None:
        params["job_id"] = str(job_id)
    if workflow_id is not None:
        params["workflow_id"] = str(workflow_id)
    if events is not None:
        names = [events] if isinstance(events, str) else list(events)
        if names:
            params["event"] = ",".join(names)
    return params


def stream_headers(last_id: Optional[str]) -> Dict[str, str]:
    headers = {"accept": "text/event-stream", "cache-control": "no-cache"}
    if last_id is not None:
        headers["last-event-id"] = last_id
    return headers


def stream_timeout(timeout: float) -> httpx.Timeout:
    return httpx.Timeout(timeout, read=max(timeout, STREAM_READ_TIMEOUT))


def stream_error(resp: httpx.Response) -> Optional[TetherError]:
    """The error a stream's answer stands for (its body already read), or
    None when it is a stream of events."""
    if resp.status_code >= 400:
        try:
            body: Any = resp.json()
        except ValueError:
            body = None
        return error_from_body(resp.status_code, body, resp.text)
    ctype = resp.headers.get("content-type", "")
    if resp.status_code != 200 or "text/event-stream" not in ctype:
        return DecodeError(
            f"GET {EVENTS_PATH}: HTTP {resp.status_code} {ctype or 'without a content type'}, "
            "not an event stream",
            status=resp.status_code,
        )
    return None


def reconnects_after(e: TetherError) -> bool:
    """Whether a stream reconnects after ``e`` rather than raising it: no
    answer, ``unavailable`` (503), or a proxy's 502 or 504."""
    return isinstance(e, Unavailable) or e.status in (502, 504)


class Message(NamedTuple):
    """One server-sent event: its ``id`` (None when it had none), ``event``
    name (``message`` when it had none) and ``data`` lines joined."""

    id: Optional[str]
    event: str
    data: str


_LINE = re.compile(r"\r\n|\r|\n")


class SseDecoder:
    """Server-sent events from the bytes of a ``text/event-stream``, as the
    WHATWG specification reads them: lines end with CR, LF or CRLF (also
    across chunks), a blank line ends a message, comment lines (``:``) and
    unknown fields are skipped, a message without data is dropped. A
    message cut off by the end of the bytes is never returned."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._rest = ""
        self._after_cr = False
        self._started = False
        self._id: Optional[str] = None
        self._event = ""
        self._data: List[str] = []

    def feed(self, chunk: bytes) -> List[Message]:
        """The messages that ``chunk`` completes, in order."""
        text = self._utf8.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._after_cr:
            self._after_cr = False
            if text.startswith("\n"):
                text = text[1:]
        buf = self._rest + text
        lines = _LINE.split(buf)
        self._rest = lines.pop()
        self._after_cr = buf.endswith("\r")
        out = []
        for line in lines:
            msg = self._line(line)
            if msg is not None:
                out.append(msg)
        return out

    def _line(self, line: str) -> Optional[Message]:
        if not line:
            data, self._data = self._data, []
            mid, self._id = self._id, None
            event, self._event = self._event, ""
            if not data:
                return None
            return Message(mid, event or "message", "\n".join(data))
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None


def feed_item(msg: Message) -> FeedItem:
    """The item a message of ``GET /v1/events`` stands for."""
    try:
        data = json.loads(msg.data)
        if msg.event == "gap":
            return FeedGap.from_dict(data)
        return FeedEvent.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise DecodeError(
            f"GET {EVENTS_PATH}: unexpected {msg.event!r} message ({e!r}): {msg.data[:200]!r}",
            status=200,
        ) from e


def item_id(msg: Message, item: FeedItem) -> str:
    """Where a reader stands once it has ``item``: the message's ``id``, else
    the cursor in its data."""
    if msg.id:
        return msg.id
    return item.cursor if isinstance(item, FeedEvent) else item.oldest
