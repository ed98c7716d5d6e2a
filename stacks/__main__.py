"""Entry point for ``pulumi up`` / ``pulumi preview``: read the stack's config through the one model."""

from __future__ import annotations

import pulumi

from stacks.config import TOP_LEVEL_KEYS, parse_stack_config
from stacks.program import build_platform


def _raw_config() -> dict[str, object]:
    own = pulumi.Config("parkbrake")
    raw: dict[str, object] = {"aws:region": pulumi.Config("aws").get("region")}
    for key in TOP_LEVEL_KEYS:
        value = own.get_object(key)
        if value is not None:
            raw[f"parkbrake:{key}"] = value
    return raw


build_platform(parse_stack_config(pulumi.get_stack(), _raw_config(), f"Pulumi.{pulumi.get_stack()}.yaml"))
