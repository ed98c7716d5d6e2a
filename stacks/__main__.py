"""Entry point for ``pulumi up`` / ``pulumi preview``: the stack's config through the same loader as ``plan``.

Every key the engine holds for this project goes to :func:`stacks.config.parse_stack_config`, so a typo
(``parkbrake:nighty``) or a bad value stops ``pulumi up`` with the message ``plan`` prints, instead of
being silently ignored.
"""

from __future__ import annotations

import pulumi

from components.lambda_archive import (
    DEFAULT_ARCHITECTURE,
    RUNTIME,
    build_artifacts,
    package_dir,
    python_version_of,
)
from guardrails.errors import InputError, ParkbrakeError
from stacks.config import StackConfig, config_from_engine, parse_stack_config
from stacks.platform import build_platform


def stack_config() -> StackConfig:
    stack = pulumi.get_stack()
    try:
        return parse_stack_config(stack, config_from_engine(), f"Pulumi.{stack}.yaml")
    except InputError as error:
        # RunError ends the program with the message alone: no traceback, no program source.
        raise pulumi.RunError(str(error)) from None


def build_lambda_artifacts(stack: str) -> None:
    """The archives the Guardrails component uploads, built as `parkbrake package` builds them."""
    try:
        build_artifacts(
            package_dir(stack), python_version=python_version_of(RUNTIME), architecture=DEFAULT_ARCHITECTURE
        )
    except ParkbrakeError as error:
        raise pulumi.RunError(str(error)) from None


config = stack_config()
build_lambda_artifacts(config.stack)
build_platform(config)
