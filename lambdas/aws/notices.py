"""The sweep's one SNS message, and the DynamoDB record that keeps a repeated finding to once a day.

Every message about hosts (the sweep's, the warning, the budget's and the meter's, all through
:func:`publish`) names their owners and carries them as the SNS message attribute ``owner`` (a String
for one owner, a String.Array for several), so a subscription's filter policy can select by owner.
The sweep's and the warning also go to the chat channel when one is configured (:mod:`lambdas.aws.chat`).

Each notice with a key is claimed with a conditional write (new, or last sent more than a day ago), so
two sweeps running at once cannot both send it. If publishing fails, the claims are released, so the
next sweep sends the notices again rather than never. Without a table, every sweep sends everything:
a duplicate is better than silence.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from botocore.exceptions import ClientError

from guardrails.settings import Settings
from guardrails.sweep_notice import REPEAT_AFTER, Notice, compose, owners
from lambdas.aws import chat
from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)
KEY = "notice"  # the table's partition key
# Items outlive the repeat window by a day, then DynamoDB's TTL removes them.
EXPIRES_AT = "expires_at"
NOTIFIED_AT = "notified_at"


@dataclass
class Publication:
    sent: list[Notice] = field(default_factory=list)
    repeats: list[Notice] = field(default_factory=list)  # already sent within the repeat window
    errors: list[dict[str, str]] = field(default_factory=list)
    subject: str | None = None


def publish_notices(
    notices: Sequence[Notice], settings: Settings, *, clients: ClientFactory, now: datetime
) -> Publication:
    """Send the notices not sent recently, in one message; the errors are returned, never raised."""
    publication = Publication()
    if not notices or not settings.sns_topic_arn:
        return publication
    claimed: list[str] = []
    for notice in notices:
        if notice.key is None or settings.notices_table is None:
            publication.sent.append(notice)
            continue
        try:
            fresh = _claim(clients, settings.notices_table, notice.key, now)
        except AWS_ERRORS as error:  # cannot remember: send it anyway
            publication.errors.append({"action": "remember-notice", "error": describe_error(error)})
            fresh = True
        else:
            if fresh:
                claimed.append(notice.key)
        (publication.sent if fresh else publication.repeats).append(notice)
    if not publication.sent:
        log.info("every finding was sent within the repeat window", extra={"repeats": len(notices)})
        return publication
    subject, body = compose(settings.stack, publication.sent, repeats=len(publication.repeats), now=now)
    errors = notify(subject, body, owners(publication.sent), settings, clients=clients)
    publication.errors += errors
    if any(error["action"] == "notify" for error in errors):
        _release(clients, settings.notices_table, claimed)
        return publication
    publication.subject = subject
    log.info("published %d notice(s): %s", len(publication.sent), subject)
    return publication


def notify(
    subject: str, body: str, owner_names: Sequence[str], settings: Settings, *, clients: ClientFactory
) -> list[dict[str, str]]:
    """Publish to the alarm topic with the ``owner`` attribute, and post to the chat channel; the
    errors (``notify`` for SNS, ``chat`` for the webhook) are returned, never raised."""
    errors: list[dict[str, str]] = []
    if settings.sns_topic_arn:
        try:
            publish(settings.sns_topic_arn, subject, body, owner_names, clients=clients)
        except Exception as error:  # a notifier never takes the sweep's decision log or heartbeat down
            reason = describe_error(error) if isinstance(error, AWS_ERRORS) else type(error).__name__
            log.error("could not publish %r: %s", subject, reason)
            errors.append({"action": "notify", "error": reason})
    return errors + chat.send(settings.chat_webhook_secret_arn, subject, body, clients=clients)


def publish(
    topic_arn: str,
    subject: str,
    body: str,
    owner_names: Sequence[str],
    *,
    clients: ClientFactory,
    attributes: Mapping[str, str] | None = None,
) -> None:
    """Publish one message about hosts to the topic (in its own region), the owners as the ``owner``
    attribute and ``attributes`` as more String ones; AWS's error is raised."""
    message_attributes = owner_attribute(owner_names) | {
        name: {"DataType": "String", "StringValue": value} for name, value in (attributes or {}).items()
    }
    clients("sns", topic_region(topic_arn)).publish(
        TopicArn=topic_arn, Subject=subject, Message=body, MessageAttributes=message_attributes
    )


def topic_region(topic_arn: str) -> str | None:
    """The region an ARN names (``arn:aws:sns:REGION:ACCOUNT:NAME``); None (the process's own) when it
    names none."""
    parts = topic_arn.split(":")
    return parts[3] or None if len(parts) >= 6 else None


def owner_attribute(owner_names: Sequence[str]) -> dict[str, dict[str, str]]:
    if not owner_names:
        return {}
    if len(owner_names) == 1:
        return {"owner": {"DataType": "String", "StringValue": owner_names[0]}}
    return {"owner": {"DataType": "String.Array", "StringValue": json.dumps(list(owner_names))}}


def _claim(clients: ClientFactory, table: str, key: str, now: datetime) -> bool:
    """True when the notice is new or was last sent longer ago than the repeat window."""
    dynamodb = clients("dynamodb", None)
    try:
        dynamodb.put_item(
            TableName=table,
            Item={
                KEY: {"S": key},
                NOTIFIED_AT: {"N": str(int(now.timestamp()))},
                EXPIRES_AT: {"N": str(int((now + 2 * REPEAT_AFTER).timestamp()))},
            },
            ConditionExpression=f"attribute_not_exists({KEY}) OR {NOTIFIED_AT} <= :cutoff",
            ExpressionAttributeValues={":cutoff": {"N": str(int((now - REPEAT_AFTER).timestamp()))}},
        )
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
            return False
        raise
    return True


def _release(clients: ClientFactory, table: str | None, keys: Sequence[str]) -> None:
    if table is None:
        return
    for key in keys:
        try:
            clients("dynamodb", None).delete_item(TableName=table, Key={KEY: {"S": key}})
        except AWS_ERRORS as error:  # the notice then waits a day; the publish error is already reported
            log.error("could not release notice %s: %s", key, describe_error(error))
