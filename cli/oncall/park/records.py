"""The records ``park --now`` leaves in AWS (tags): what it took away, who parked, and when.

A record is the JSON of the capacities (``{"desired":2,"max":3,"min":1}``), the schedules it disabled
(``{"enabled_schedules":[...]}``), plus ``by`` (the caller's ARN, from STS) and ``at`` (ISO-8601 UTC)
when known. It must fit in a tag value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from guardrails.errors import ParkbrakeError

TAG_VALUE_LIMIT = 256  # AWS's limit on a tag value, for every service used here


@dataclass(frozen=True)
class ParkedBy:
    """Who parks (the caller's ARN, from STS) and when (ISO-8601 UTC): kept in every park record."""

    arn: str
    at: str

    def fields(self) -> dict[str, str]:
        return {"by": self.arn, "at": self.at}


def encode_record(record: dict[str, Any]) -> str:
    text = json.dumps(record, separators=(",", ":"), sort_keys=True)
    if len(text) > TAG_VALUE_LIMIT:
        raise ParkbrakeError(f"the parked-capacity record {text} is longer than a tag value may be")
    return text


def decode_record(text: str, required: tuple[str, ...]) -> dict[str, Any]:
    """A record written by ``park --now``; ValueError when it is not one (edited by hand, truncated)."""
    record = json.loads(text)
    if not isinstance(record, dict) or any(key not in record for key in required):
        raise ValueError(f"{text!r} lacks {', '.join(required)}")
    return record


@dataclass(frozen=True)
class ParkRecord:
    """What ``park --now`` took away (the capacities), and who parked it and when, when recorded."""

    capacities: dict[str, int]
    by: str | None
    at: str | None
    unreadable: str | None = None  # the tag's text, when it is not a record

    @classmethod
    def parse(cls, text: str | None) -> ParkRecord | None:
        if text is None:
            return None
        try:
            record = json.loads(text)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            return cls({}, None, None, unreadable=text)
        capacities = {key: value for key, value in record.items() if isinstance(value, int)}
        return cls(capacities, record.get("by"), record.get("at"))

    def summary(self) -> str:
        if self.unreadable is not None:
            return f"unreadable record {self.unreadable!r}"
        kept = ", ".join(f"{key} {value}" for key, value in sorted(self.capacities.items()))
        who = f" by {self.by.rsplit(':', 1)[-1]}" if self.by else ""
        when = f" at {self.at}" if self.at else ""
        return f"parked{who}{when} (was {kept})"

    def as_dict(self) -> dict[str, Any]:
        return {"capacities": self.capacities, "by": self.by, "at": self.at, "unreadable": self.unreadable}
