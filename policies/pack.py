"""The Pulumi CrossGuard adapter: every registered rule as a ``StackValidationPolicy``.

Stack-level validation hands a rule the whole stack at once, which is what the rules take, so the same
functions judge ``pulumi preview --policy-pack policies`` and ``parkbrake plan``. Each policy's
configuration offers the :class:`~policies.rule.PolicyContext` settings its rule reads (camelCase, as
Pulumi policy config is written); anything not configured keeps the context's default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from guardrails.durations import format_duration, parse_duration
from guardrails.errors import InputError
from policies.engine import judge
from policies.registry import RULES
from policies.rule import PolicyContext, PolicyRule

PACK_NAME = "parkbrake"


@dataclass(frozen=True)
class PolicyResourceView:
    """A ``PolicyResource`` as a :class:`~policies.rule.ResourceView` (its props are the engine's proxy)."""

    type: str
    name: str
    urn: str
    parent: str | None
    inputs: Mapping[str, Any]


def view_of(resource: PolicyResource) -> PolicyResourceView:
    # The engine links ``parent`` only when the parent is among the analysed resources; the options
    # always carry its URN.
    parent = resource.parent.urn if resource.parent is not None else resource.opts.parent
    return PolicyResourceView(
        type=resource.resource_type,
        name=resource.name,
        urn=resource.urn,
        parent=parent,
        inputs=resource.props,
    )


def _positive_integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ValueError(f"{value!r} is not a positive whole number")
    return int(value)


def _strings(value: object) -> tuple[str, ...]:
    if (
        not isinstance(value, Sequence)
        or isinstance(value, str)
        or not all(isinstance(v, str) for v in value)
    ):
        raise ValueError(f"{value!r} is not a list of strings")
    return tuple(value)


def _usd(value: object) -> Decimal:
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        amount = Decimal(-1)
    if isinstance(value, bool) or not amount.is_finite() or amount <= 0:
        raise ValueError(f"{value!r} is not a positive amount of US dollars")
    return amount


def _duration(value: object) -> timedelta:
    return parse_duration(value, ceiling=None)  # DurationError is a ValueError with the hint


@dataclass(frozen=True)
class Setting:
    """How one PolicyContext field is written in a policy's config, and read back."""

    key: str
    schema: dict[str, Any]
    parse: Callable[[object], object]


STRING_LIST = {"type": "array", "items": {"type": "string"}}
DEFAULTS = PolicyContext()
SETTINGS: dict[str, Setting] = {
    "max_pool_size": Setting(
        "maxPoolSize", {"type": "integer", "minimum": 1, "default": DEFAULTS.max_pool_size}, _positive_integer
    ),
    "allowed_instance_types": Setting(
        "allowedInstanceTypes", STRING_LIST, lambda value: frozenset(_strings(value))
    ),
    "required_tags": Setting(
        "requiredTags", {**STRING_LIST, "default": list(DEFAULTS.required_tags)}, _strings
    ),
    "gpu_host_tags": Setting(
        "gpuHostTags", {**STRING_LIST, "default": list(DEFAULTS.gpu_host_tags)}, _strings
    ),
    "tenant_budget_usd": Setting("tenantBudgetUsd", {"type": "number", "exclusiveMinimum": 0}, _usd),
    "max_runtime_ceiling": Setting(
        "maxRuntimeCeiling",
        {"type": "string", "default": format_duration(DEFAULTS.max_runtime_ceiling)},
        _duration,
    ),
}


def config_schema(settings: Iterable[str]) -> PolicyConfigSchema | None:
    properties = {SETTINGS[name].key: SETTINGS[name].schema for name in settings}
    return PolicyConfigSchema(properties=properties) if properties else None


def context_from_config(policy: str, config: Mapping[str, Any], settings: Iterable[str]) -> PolicyContext:
    """The context for one policy: its configured settings over the defaults; every bad value is reported."""
    values: dict[str, Any] = {}
    problems = []
    for name in settings:
        setting = SETTINGS[name]
        if setting.key in config:
            try:
                values[name] = setting.parse(config[setting.key])
            except ValueError as error:
                problems.append(f"{policy}.{setting.key}: {error}")
    if problems:
        raise InputError("policy pack config has problems:\n  " + "\n  ".join(problems))
    return replace(DEFAULTS, **values)


def policy_for(rule: PolicyRule) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        try:
            context = context_from_config(rule.name, args.get_config(), rule.settings)
        except InputError as error:
            report_violation(str(error), None)
            return
        for violation in judge(rule, [view_of(resource) for resource in args.resources], context).violations:
            report_violation(violation.message, violation.resource)

    return StackValidationPolicy(
        name=rule.name,
        description=rule.description,
        validate=validate,
        enforcement_level=EnforcementLevel(rule.enforcement),
        config_schema=config_schema(rule.settings),
    )


def pack_policies(rules: Sequence[PolicyRule] = RULES) -> list[Policy]:
    return [policy_for(rule) for rule in rules]
