"""Production signals about served sessions: the events, their validation, and their store.

Events arrive through `POST /v1/feedback` and `harnessrl live ingest FILE`, one JSON object each:

    {"type": "edit_kept", "session_id": "s-1", "after_s": 600}    the edit is still there, 10 min on
    {"type": "edit_reverted", "session_id": "s-1"}                 the user undid it
    {"type": "followup", "session_id": "s-1", "text": "still broken"}  labelled by the classifier
    {"type": "followup", "session_id": "s-1", "dissatisfied": true}
    {"type": "accepted", "session_id": "s-1"}  /  {"type": "rejected", ...}
    {"type": "latency", "session_id": "s-1", "seconds": 3.2}      what the user waited

Every event is kept (feedback.jsonl), including those for sessions the server never logged, which
are counted at collection. A repeated `event_id` is a duplicate: counted, stored once.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from harnessrl.serve.session_log import AppendLog, read_log

SESSION_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
OUTCOMES = ("edit_kept", "edit_reverted", "accepted", "rejected", "followup")  # feedback that ends the wait


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    session_id: str = Field(pattern=SESSION_ID)
    event_id: str | None = Field(None, max_length=128, description="None: derived from the content")
    time: float | None = Field(None, description="unix seconds it happened; None: when it arrived")


class EditKept(Event):
    type: Literal["edit_kept"]
    after_s: float = Field(0.0, ge=0, description="how long after the session the edit was checked; 0: at its end")


class EditReverted(Event):
    type: Literal["edit_reverted"]
    after_s: float = Field(0.0, ge=0)


class Followup(Event):
    type: Literal["followup"]
    dissatisfied: bool | None = Field(None, description="None: the classifier labels `text`")
    text: str | None = Field(None, max_length=20_000)

    @model_validator(mode="after")
    def _labelled_or_text(self) -> Followup:
        if self.dissatisfied is None and self.text is None:
            raise ValueError("a followup needs `dissatisfied` or `text` to classify")
        return self


class Accepted(Event):
    type: Literal["accepted"]


class Rejected(Event):
    type: Literal["rejected"]


class Latency(Event):
    type: Literal["latency"]
    seconds: float = Field(ge=0, le=86_400)


FeedbackEvent = Annotated[
    EditKept | EditReverted | Followup | Accepted | Rejected | Latency, Field(discriminator="type")
]
EVENT = TypeAdapter(FeedbackEvent)


def parse_event(obj: Any, where: str) -> dict[str, Any]:
    """A validated event as a stored record (arrival time and event id filled in). `where` names the
    event in the error, e.g. `feedback.jsonl:12` or `events[3]`."""
    try:
        event = EVENT.validate_python(obj)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"][1:] if x != "body") or "type"
        msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"].removeprefix("Value error, ")
        raise ValueError(f"{where}.{loc}: {msg}") from None
    record = event.model_dump()
    if record["event_id"] is None:  # the same event sent twice is one event: its id is its content's
        body = json.dumps({k: v for k, v in record.items() if k != "event_id"}, sort_keys=True)
        record["event_id"] = "sha256:" + hashlib.sha256(body.encode()).hexdigest()[:32]
    record["received"] = time.time()
    if record["time"] is None:
        record["time"] = record["received"]
    return record


class Dissatisfaction:
    """The configurable follow-up classifier: any of the patterns, case-insensitive."""

    def __init__(self, patterns: list[str]) -> None:
        self.patterns = [re.compile(p, re.IGNORECASE) for p in patterns]

    def __call__(self, event: dict[str, Any]) -> bool:
        if event.get("dissatisfied") is not None:
            return bool(event["dissatisfied"])
        return any(p.search(event.get("text") or "") for p in self.patterns)


class FeedbackStore:
    """feedback.jsonl, appended to by the server and by ingest. Duplicates (by event id) are refused
    here, and counted; a record from another writer that slips past is caught again at collection."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        records, _ = read_log(path)
        self.seen = {r.get("event_id") for r in records}
        self.log = AppendLog(path, fsync)
        self._lock = threading.Lock()

    def add(self, events: list[dict[str, Any]]) -> dict[str, int]:
        """Store validated records; returns how many were stored and how many were duplicates."""
        counts = {"stored": 0, "duplicate": 0}
        with self._lock:
            for e in events:
                if e["event_id"] in self.seen:
                    counts["duplicate"] += 1
                    continue
                self.log.append(e)  # first: an event whose write failed is not a duplicate when retried
                self.seen.add(e["event_id"])
                counts["stored"] += 1
        return counts

    def close(self) -> None:
        self.log.close()


def read_events_file(path: Path) -> list[dict[str, Any]]:
    """A JSONL file of events for `harnessrl live ingest`, every line validated before any is stored:
    a bad line fails the whole file, naming the line and field, and stores nothing."""
    events = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{i}: invalid JSON ({e.msg} at column {e.colno})") from None
        events.append(parse_event(obj, f"{path}:{i}"))
    return events
