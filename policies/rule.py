"""What a policy rule is: a name, a description, an enforcement level and a plain check function.

Rules see resources through :class:`ResourceView`, which ``stacks.offline.RegisteredResource`` (what
``parkbrake plan`` collects) satisfies as it is and which the Pulumi adapter builds from each
``PolicyResource``, so one function judges a stack in ``plan`` and in ``pulumi preview``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal, Protocol

from guardrails import tags
from guardrails.durations import DEFAULT_CEILING
from guardrails.instance_types import is_accelerator
from guardrails.pricing import load_price_table

Enforcement = Literal["mandatory", "advisory"]
ENFORCEMENTS: tuple[Enforcement, ...] = ("mandatory", "advisory")


class ResourceView(Protocol):
    """One resource of a stack as the rules see it; ``inputs`` use Pulumi's camelCase property names."""

    @property
    def type(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def urn(self) -> str: ...

    @property
    def parent(self) -> str | None:
        """The parent component's URN, or None for a resource directly under the stack."""
        ...

    @property
    def inputs(self) -> Mapping[str, Any]: ...


def _priced_accelerator_types() -> frozenset[str]:
    return frozenset(name for name in load_price_table().instances if is_accelerator(name))


@dataclass(frozen=True)
class PolicyContext:
    """The settings rules are judged against; ``plan`` fills them from the stack config, the pack from its config."""

    max_pool_size: int = 8
    # Default: every accelerator type with a price, since an unpriced type cannot be budgeted.
    allowed_instance_types: frozenset[str] = field(default_factory=_priced_accelerator_types)
    required_tags: tuple[str, ...] = (tags.MANAGED, tags.STACK, tags.REVISION)
    gpu_host_tags: tuple[str, ...] = tags.REQUIRED_ON_GPU_HOSTS
    # The sum of the tenants' monthly budgets; None when no budget is known (the cost rule then passes).
    tenant_budget_usd: Decimal | None = None
    # The stack's monthly cost unparked, when the caller has it (``plan`` prices the unparked program);
    # None: the cost rule estimates the resources it is given.
    monthly_estimate_usd: Decimal | None = None
    # Whose prices the cost rule uses when it estimates itself (None: the price table's home region).
    region: str | None = None
    # The longest ``parkbrake:max-runtime`` a GPU host may carry.
    max_runtime_ceiling: timedelta = DEFAULT_CEILING


@dataclass(frozen=True)
class Violation:
    """What is wrong and where: ``resource`` is a URN (the stack's own URN for stack-wide findings)."""

    resource: str
    message: str


Check = Callable[[Sequence[ResourceView], PolicyContext], Iterable[Violation]]
ResourceCheck = Callable[[ResourceView, PolicyContext], Iterable[str]]


@dataclass(frozen=True)
class PolicyRule:
    """One rule of the pack.

    ``settings`` names the :class:`PolicyContext` fields the check reads, so the Pulumi pack offers
    exactly those as the policy's configuration.
    """

    name: str
    description: str
    enforcement: Enforcement
    check: Check
    settings: tuple[str, ...] = ()


def per_resource(types: Iterable[str], check: ResourceCheck) -> Check:
    """Lift a check of one resource (returning messages) into a check of a stack, for the given types."""
    wanted = frozenset(types)

    def check_stack(resources: Sequence[ResourceView], context: PolicyContext) -> Iterator[Violation]:
        for resource in resources:
            if resource.type in wanted:
                for message in check(resource, context):
                    yield Violation(resource.urn, message)

    return check_stack


def stack_name(resource: ResourceView) -> str:
    """The Pulumi stack a resource belongs to, from its URN ``urn:pulumi:<stack>::<project>::…``."""
    return resource.urn.split("::")[0].removeprefix("urn:pulumi:")


def stack_urn(resource: ResourceView) -> str:
    """The URN of the stack resource that ``resource`` belongs to: where stack-wide findings point."""
    stack, project = resource.urn.split("::")[:2]
    return f"{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack.removeprefix('urn:pulumi:')}"
