"""Every accelerator host carries a runtime cap it can enforce on itself.

The ``parkbrake:max-runtime`` tag is what the deadline schedule and the sweep read, and the shutdown
behaviour is what lets ``shutdown -h now`` on the host actually stop the billing.
"""

from __future__ import annotations

from collections.abc import Iterator

from guardrails import tags
from guardrails.durations import DurationError, parse_duration
from policies.resources import INSTANCE, LAUNCH_TEMPLATE, host_tags, is_accelerator_host
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource

SHUTDOWN_BEHAVIOURS = ("stop", "terminate")


def cap_problems(host: ResourceView, context: PolicyContext) -> Iterator[str]:
    if not is_accelerator_host(host):
        return
    where = "its instance tag specification" if host.type == LAUNCH_TEMPLATE else "its tags"
    host_tag_values = host_tags(host)
    if host_tag_values is None:
        yield f"has no tag specification for resourceType 'instance', so its hosts get no {tags.MAX_RUNTIME} tag"
    elif tags.MAX_RUNTIME not in host_tag_values:
        yield f"has no {tags.MAX_RUNTIME} tag in {where}"
    else:
        try:
            parse_duration(host_tag_values[tags.MAX_RUNTIME], ceiling=context.max_runtime_ceiling)
        except DurationError as error:
            yield f"{tags.MAX_RUNTIME} in {where}: {error}"
    behaviour = host.inputs.get("instanceInitiatedShutdownBehavior")
    if behaviour not in SHUTDOWN_BEHAVIOURS:
        shown = "is not set" if behaviour is None else f"is {behaviour!r}"
        yield (
            f"instanceInitiatedShutdownBehavior {shown}; set 'stop' (or 'terminate' in an Auto Scaling "
            "group or for spot) so the host can stop itself"
        )


RULE = PolicyRule(
    name="gpu-hosts-have-a-cap",
    description=(
        "Every accelerator launch template and instance has a parseable parkbrake:max-runtime tag on its "
        "hosts and an instance-initiated shutdown behaviour of stop or terminate."
    ),
    enforcement="mandatory",
    check=per_resource((LAUNCH_TEMPLATE, INSTANCE), cap_problems),
    settings=("max_runtime_ceiling",),
)
