"""Every name, description and tag the stack declares fits what AWS accepts in that field.

The table is ``policies.aws_fields``; tags are checked on every resource that has them (a map, an Auto
Scaling group's list, a launch template's tag specifications).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from policies.aws_fields import FIELDS, TAG_KEY, TAG_VALUE, problem, values_at
from policies.resources import AUTOSCALING_GROUP, items, mapping
from policies.rule import PolicyContext, PolicyRule, ResourceView, Violation


def declared_tags(resource: ResourceView) -> Iterator[tuple[str, object, object]]:
    """(where, key, value) of every tag the resource declares."""
    raw = resource.inputs.get("tags")
    if resource.type == AUTOSCALING_GROUP:
        for index, tag in enumerate(map(mapping, items(raw))):
            yield f"tags[{index}]", tag.get("key"), tag.get("value")
    else:
        for key, value in mapping(raw).items():
            yield f"tags.{key}", key, value
    for index, specification in enumerate(map(mapping, items(resource.inputs.get("tagSpecifications")))):
        for key, value in mapping(specification.get("tags")).items():
            yield f"tagSpecifications[{index}].tags.{key}", key, value


def field_problems(resource: ResourceView, _context: PolicyContext) -> Iterator[str]:
    for path, field in FIELDS.get(resource.type, {}).items():
        for where, value in values_at(resource.inputs, path):
            found = problem(field, value) if isinstance(value, str) else None
            if found:
                yield f"{where}: {found}"
    for where, key, value in declared_tags(resource):
        for field, text in ((TAG_KEY, key), (TAG_VALUE, value)):
            found = problem(field, text) if isinstance(text, str) else None
            if found:
                yield f"{where}: {found}"


def names_problems(resources: Sequence[ResourceView], context: PolicyContext) -> Iterator[Violation]:
    for resource in resources:
        for message in field_problems(resource, context):
            yield Violation(resource.urn, f"{resource.name}: {message}")


RULE = PolicyRule(
    name="names-fit-aws",
    description=(
        "Every name, description and tag the stack declares fits AWS's documented character set and length "
        "for its field (policies/aws_fields.py), so AWS does not refuse it halfway through pulumi up."
    ),
    enforcement="mandatory",
    check=names_problems,
)
