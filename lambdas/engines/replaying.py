"""Replaying the meter's dead-letter queue: state changes the meter could not record (the database
down longer than the retries) are metered again, ``source=replay``, and relayed decisions are
appended to the decision log. ``parkbrake ledger replay-dlq``.

The queue holds two shapes: EventBridge's dead letter is the event itself; Lambda's on-failure
record wraps it as ``requestPayload``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from guardrails import names
from guardrails.ledger import MalformedEvent, state_change_from_event
from guardrails.settings import Settings
from lambdas.aws.environment import ClientFactory, utc_now
from lambdas.engines.metering import GUARDRAIL, MeterResult, meter
from lambdas.ledger import decisions
from lambdas.ledger.store import LedgerStore


@dataclass
class ReplayResult:
    read: int = 0
    deleted: int = 0
    kept: list[dict[str, str]] = field(default_factory=list)  # {"message_id", "reason"}
    meter: MeterResult = field(default_factory=MeterResult)
    decisions: int = 0  # relayed decisions appended (or found already logged)

    def as_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "deleted": self.deleted,
            "kept": self.kept,
            "meter": self.meter.as_dict(),
            "decisions": self.decisions,
        }


def dead_letter_event(body: str) -> Mapping[str, Any]:
    """The event in a dead letter: EventBridge's is the event; Lambda's on-failure record wraps it."""
    document = json.loads(body)
    if not isinstance(document, dict):
        raise MalformedEvent("not a JSON object")
    payload = document.get("requestPayload", document)
    if not isinstance(payload, dict):
        raise MalformedEvent("requestPayload is not a JSON object")
    return payload


def replay_dead_letters(
    clients: ClientFactory,
    *,
    queue_region: str | None,
    stack: str,
    store: LedgerStore,
    settings: Settings,
    max_messages: int,
) -> ReplayResult:
    """Meter the dead letters again (``source=replay``), a receive batch at a time; a message is
    deleted only once its event is recorded, so a replay that fails half-way loses nothing."""
    sqs = clients("sqs", queue_region)
    queue_url = sqs.get_queue_url(QueueName=names.dead_letter_queue(stack, GUARDRAIL))["QueueUrl"]
    result = ReplayResult()
    while result.read < max_messages:
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=min(10, max_messages - result.read), VisibilityTimeout=300
        ).get("Messages", [])
        if not messages:
            break
        result.read += len(messages)
        received_at = utc_now()
        parsed = {}
        for message in messages:
            try:
                event = dead_letter_event(message["Body"])
                if decisions.is_relayed(event):
                    result.decisions += len(
                        decisions.append_relayed(event, decisions.DecisionLedger.of(store))
                    )
                    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
                    result.deleted += 1
                    continue
                parsed[message["MessageId"]] = state_change_from_event(event, received_at=received_at)
            except (ValueError, MalformedEvent) as error:
                result.kept.append({"message_id": message["MessageId"], "reason": str(error)})
        batch = meter(list(parsed.values()), store=store, clients=clients, settings=settings,
                      received_at=received_at, source="replay")  # fmt: skip
        result.meter.add(batch)
        unknown = {note["event_id"]: note["reason"] for note in batch.unattributed}
        for message in messages:
            change = parsed.get(message["MessageId"])
            if change is None:
                continue
            if change.event_id in unknown:
                result.kept.append({"message_id": message["MessageId"], "reason": unknown[change.event_id]})
                continue
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            result.deleted += 1
    return result
