"""What every parkbrake component shares: the type-token namespace, the base tags, child options."""

from __future__ import annotations

from collections.abc import Mapping

import pulumi

from guardrails import tags

AWS_TYPE_PREFIX = "parkbrake:aws"


def type_token(name: str) -> str:
    """``parkbrake:aws:<Name>``, the token every AWS component registers under."""
    return f"{AWS_TYPE_PREFIX}:{name}"


def base_tags(stack: str, revision: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags every resource of a stack carries, so guardrails and the CLI can find and attribute it."""
    return {tags.MANAGED: "true", tags.STACK: stack, tags.REVISION: revision, **(extra or {})}


def child_of(parent: pulumi.Resource, **options: object) -> pulumi.ResourceOptions:
    """Options for a child resource: parented to its component (and anything else passed)."""
    return pulumi.ResourceOptions(parent=parent, **options)  # type: ignore[arg-type]


def named_child_of(parent: pulumi.Resource, **options: object) -> pulumi.ResourceOptions:
    """Options for a child with an explicit physical name: AWS refuses a second resource of the same name,
    so a replacement must delete the old one first instead of colliding with it."""
    return child_of(parent, delete_before_replace=True, **options)
