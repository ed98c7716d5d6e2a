"""An event a guardrail cannot read: logged, counted and answered, never raised.

Retried, such an event would fail the same way every time, so raising would only fill the
dead-letter queue; the answer names the problem, the counted action reaches the dashboard and its
alarm, and the sweep still judges every host whatever its events say.
"""

from __future__ import annotations

import logging
from typing import Any

from lambdas.aws import heartbeat

log = logging.getLogger(__name__)


def refuse_event(guardrail: str, action: str, error: ValueError, answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` for the refused event, after logging ``error`` and counting ``action``/malformed-event."""
    log.error("%s refused an event: %s", guardrail, error)
    heartbeat.count_action(guardrail, action, "malformed-event")
    return answer
