"""Spot notices as the instance metadata service serves them, and what the host does about each.

An interruption notice (``/latest/meta-data/spot/instance-action``, 404 until there is one) is
``{"action": "terminate"|"stop"|"hibernate", "time": "2026-11-30T21:42:00Z"}``, about two minutes
before the action (hibernation starts at once). A rebalance recommendation
(``/latest/meta-data/events/recommendations/rebalance``) is ``{"noticeTime": "..."}``: an elevated
risk of interruption, often well before a notice, and sometimes never followed by one.

On a notice the job gets its signal and the checkpoint hook runs, bounded to end ``margin`` before
the action. On a recommendation the host does what ``OnRebalance`` says; by default it runs the hook
(an early checkpoint costs little, and the job keeps running).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
ACTIONS = ("terminate", "stop", "hibernate")
# What EC2 gives between the notice and the action; the bound of a hook run for a recommendation.
NOTICE_LEAD = timedelta(minutes=2)
# The hook must be done this long before the action: the job's own exit and the OS still need time.
HOOK_MARGIN = timedelta(seconds=15)


class NoticeError(ValueError):
    """The metadata service served a notice that does not read as AWS documents it."""


class OnRebalance(StrEnum):
    LOG = "log"  # only say so
    HOOK = "hook"  # run the checkpoint hook; the job keeps running
    INTERRUPT = "interrupt"  # treat it as an interruption notice: the signal and the hook


@dataclass(frozen=True)
class InterruptionNotice:
    action: str
    time: datetime  # when EC2 acts

    def as_json(self) -> dict[str, str]:
        return {"action": self.action, "time": self.time.isoformat()}


@dataclass(frozen=True)
class RebalanceRecommendation:
    notice_time: datetime

    def as_json(self) -> dict[str, str]:
        return {"notice_time": self.notice_time.isoformat()}


def _document(body: str, path: str) -> dict[str, object]:
    try:
        document = json.loads(body)
    except json.JSONDecodeError as error:
        raise NoticeError(f"{path} is not JSON: {error.msg}") from None
    if not isinstance(document, dict):
        raise NoticeError(f"{path} is not a JSON object")
    return document


def _instant(document: dict[str, object], key: str, path: str) -> datetime:
    value = document.get(key)
    try:
        instant = datetime.fromisoformat(str(value)) if isinstance(value, str) else None
    except ValueError:
        instant = None
    if instant is None:
        raise NoticeError(f"{path}: {key} {value!r} is not an ISO 8601 time")
    return instant if instant.tzinfo is not None else instant.replace(tzinfo=UTC)


def parse_instance_action(body: str) -> InterruptionNotice:
    document = _document(body, INSTANCE_ACTION_PATH)
    action = document.get("action")
    if action not in ACTIONS:
        raise NoticeError(f"{INSTANCE_ACTION_PATH}: action {action!r} is not one of {', '.join(ACTIONS)}")
    return InterruptionNotice(str(action), _instant(document, "time", INSTANCE_ACTION_PATH))


def parse_rebalance(body: str) -> RebalanceRecommendation:
    return RebalanceRecommendation(_instant(_document(body, REBALANCE_PATH), "noticeTime", REBALANCE_PATH))


def hook_budget(deadline: datetime, now: datetime, margin: timedelta = HOOK_MARGIN) -> timedelta:
    """How long the hook may run: until ``margin`` before ``deadline``, never negative."""
    return max(deadline - margin - now, timedelta(0))
