"""The sweep plan's error records as the lines `reap` prints, in one account or across many."""

from __future__ import annotations

from collections.abc import Mapping


def describe_plan_error(error: Mapping[str, str]) -> str:
    what = {
        "list": "list GPU hosts",
        "list-stacks": "list the stacks",
        "list-stopped": "list stopped GPU hosts",
        "list-volumes": "list the volumes of stopped GPU hosts",
    }.get(error["action"], error["action"])
    return f"could not {what} in {error['region']}: {error['error']}"
