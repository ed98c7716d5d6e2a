"""AWS region names, checked before any call: a mistyped region is one clear line, not a traceback."""

from __future__ import annotations

import difflib
from functools import cache

from guardrails.errors import InputError

PARTITIONS = ("aws", "aws-cn", "aws-us-gov")


@cache
def known_regions() -> frozenset[str]:
    """Every region botocore's endpoint data knows, in every partition."""
    from lambdas.clients import new_session

    session = new_session()  # the models the clients then use, read once
    return frozenset(
        region
        for partition in PARTITIONS
        for service in ("ec2", "ssm")
        for region in session.get_available_regions(service, partition_name=partition)
    )


def checked_region(region: str, source: str) -> str:
    """``region`` when AWS has it; an InputError naming where it came from and the nearest name."""
    if region in known_regions():
        return region
    nearest = difflib.get_close_matches(region, sorted(known_regions()), n=1)
    hint = f"; did you mean {nearest[0]}?" if nearest else ""
    raise InputError(
        f"unknown AWS region {region!r} (from {source}){hint} (a region newer than this botocore needs "
        "an upgrade: pip install -U botocore)"
    )


def choose_regions(
    explicit: str | None, flag: str, *, stack: str | None, environ: dict[str, str] | None = None
) -> list[str]:
    """The regions a command reads: ``flag``'s value, else PARKBRAKE_REGIONS, else the stack file's
    ``aws:region`` (in the current folder), else AWS_REGION; each checked."""
    import os
    from pathlib import Path

    from cli.oncall.stack_file import config_region
    from guardrails.settings import REGIONS, aws_region, configured_regions

    environment = os.environ if environ is None else environ
    sources = (
        (flag, explicit),
        (REGIONS, configured_regions(environment)),
        (f"aws:region in Pulumi.{stack}.yaml", config_region(stack, Path(".")) if stack else None),
        ("AWS_REGION", aws_region(environment)),
    )
    for source, text in sources:
        chosen = list(dict.fromkeys(part.strip() for part in (text or "").split(",") if part.strip()))
        if chosen:
            return [checked_region(region, source) for region in chosen]
    raise InputError(f"no region to read: pass {flag}, or set PARKBRAKE_REGIONS or AWS_REGION")
