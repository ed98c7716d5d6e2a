"""The record ``parkbrake rollback`` reads: which task definitions a deploy verified serving.

When a deploy's final verification passes, the task definition it verified gets the tag
``parkbrake:verified`` (the instant). ``rollback`` goes back to the newest such task definition of
the service's family that carries another revision than the one serving now; the record lives in
AWS, so any engineer's rollback finds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cli.oncall.deploy.runtime import ServiceAt
from cli.oncall.ecs import (
    TaskDefinitionFacts,
    describe_service,
    describe_task_definition,
    family_task_definitions,
    tag_resource,
    task_definition_facts,
)
from guardrails import tags


@dataclass(frozen=True)
class VerifiedRevision:
    facts: TaskDefinitionFacts
    verified_at: str


def mark_verified(at: ServiceAt, colour: str, when: datetime) -> None:
    arn = describe_service(at.clients.ecs, at.target.cluster, at.service(colour))["taskDefinition"]
    tag_resource(at.clients.ecs, arn, tags.VERIFIED, when.isoformat())


def previous_verified(at: ServiceAt, serving: TaskDefinitionFacts) -> VerifiedRevision | None:
    """The newest verified task definition of ``serving``'s family with another revision label."""
    ecs = at.clients.ecs
    family = serving.name.rsplit(":", 1)[0]
    arns = family_task_definitions(ecs, family)
    for arn in sorted(arns, key=lambda item: int(item.rsplit(":", 1)[-1]), reverse=True):
        answer = describe_task_definition(ecs, arn)
        verified = {item["key"]: item["value"] for item in answer.get("tags", [])}.get(tags.VERIFIED)
        if verified is None:
            continue
        facts = task_definition_facts(ecs, arn, serving.container)
        if facts.revision_label and facts.revision_label != serving.revision_label:
            return VerifiedRevision(facts, verified)
    return None
