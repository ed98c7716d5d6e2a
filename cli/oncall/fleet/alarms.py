"""What ``status`` shows of each stack's alarm topic: who is subscribed, and whether SNS has had each
subscription confirmed.

An e-mail subscription stays ``PendingConfirmation`` until its address follows the link SNS mailed
it, and until then receives nothing: a stack whose only address is pending pages nobody. So status
names every e-mail subscription and its state in its summary.

The topic is the one the stack creates, ``parkbrake-<stack>-alarms``, found by name among the
region's topics (listed once per region, when the first stack needs them), else the one the stack
file adopts (``alarm_topic_arn`` under ``parkbrake:guardrails`` in ``Pulumi.<stack>.yaml`` in the
current folder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli.oncall.stack_file import config_text
from guardrails import names

# What SNS shows instead of a SubscriptionArn: until the endpoint confirms, and once unsubscribed.
UNCONFIRMED_STATES = {"PendingConfirmation": "pending confirmation", "Deleted": "deleted"}
PEOPLE = ("email", "email-json")  # the protocols that reach a person's inbox
ADOPTED_TOPIC_KEY = "parkbrake:guardrails.alarm_topic_arn"


@dataclass(frozen=True)
class AlarmSubscription:
    protocol: str
    endpoint: str
    state: str  # confirmed, pending confirmation (receives nothing yet) or deleted

    @property
    def confirmed(self) -> bool:
        return self.state == "confirmed"

    def as_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "endpoint": self.endpoint, "state": self.state}


@dataclass(frozen=True)
class AlarmTopic:
    """A stack's alarm topic in one region and its subscriptions, or why they are not known."""

    arn: str | None  # None: no such topic (or the topics could not be listed: see ``error``)
    subscriptions: tuple[AlarmSubscription, ...] = ()
    error: str | None = None  # set: the subscriptions are unknown

    @property
    def emails(self) -> list[AlarmSubscription]:
        return [subscription for subscription in self.subscriptions if subscription.protocol in PEOPLE]

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic_arn": self.arn,
            "subscriptions": None if self.error else [item.as_dict() for item in self.subscriptions],
            "error": self.error,
        }


class RegionAlarmTopics:
    """The alarm topics of the stacks of one region; reads are sequential (one thread per region)."""

    def __init__(self, sns: Callable[[str], Any], region: str, project_dir: Path) -> None:
        self._sns = sns  # region -> SNS client: an adopted topic may live in another region
        self._region = region
        self._project_dir = project_dir
        self._listed: list[str] | None = None

    def topic_arn(self, stack: str) -> str | None:
        """``parkbrake-<stack>-alarms`` in the region, else the topic the stack file adopts; None when
        neither exists. A stack that adopts a topic creates none of its own, so the stack file (slow
        to parse) is read only when the region has no topic of the stack's name."""
        if self._listed is None:
            pages = self._sns(self._region).get_paginator("list_topics").paginate()
            self._listed = [topic["TopicArn"] for page in pages for topic in page.get("Topics", [])]
        wanted = names.alarm_topic(stack)
        created = next((arn for arn in self._listed if arn.rsplit(":", 1)[-1] == wanted), None)
        return created or config_text(stack, ADOPTED_TOPIC_KEY, self._project_dir)

    def subscriptions(self, topic_arn: str) -> tuple[AlarmSubscription, ...]:
        parts = topic_arn.split(":")  # arn:aws:sns:<region>:<account>:<name>
        region = parts[3] if len(parts) == 6 and parts[3] else self._region
        pages = self._sns(region).get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic_arn)
        return tuple(
            AlarmSubscription(
                protocol=item.get("Protocol", "?"),
                endpoint=item.get("Endpoint", "?"),
                state=UNCONFIRMED_STATES.get(item.get("SubscriptionArn", ""), "confirmed"),
            )
            for page in pages
            for item in page.get("Subscriptions", [])
        )
