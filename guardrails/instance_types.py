"""Which EC2 instance types carry accelerators: the one list the whole project uses."""

from __future__ import annotations

import re

# AWS's "accelerated computing" families, by the letters before the generation digit.
ACCELERATOR_FAMILY_PREFIXES = frozenset({"p", "g", "gr", "trn", "inf", "dl", "f", "vt"})

_INSTANCE_TYPE = re.compile(r"(?P<family>[a-z]+)(?P<generation>\d+)[a-z0-9-]*\.(?P<size>[a-z0-9]+)")


def is_instance_type(text: str) -> bool:
    """True for text shaped like an EC2 instance type, e.g. ``g5.xlarge``."""
    return _INSTANCE_TYPE.fullmatch(text) is not None


def is_accelerator(instance_type: str) -> bool:
    """True when ``instance_type`` belongs to an accelerated-computing family."""
    match = _INSTANCE_TYPE.fullmatch(instance_type)
    return match is not None and match["family"] in ACCELERATOR_FAMILY_PREFIXES


def accelerator_filter_values() -> list[str]:
    """Wildcards for EC2's ``instance-type`` filter, so listing is done server-side."""
    return sorted(f"{prefix}*" for prefix in ACCELERATOR_FAMILY_PREFIXES)
