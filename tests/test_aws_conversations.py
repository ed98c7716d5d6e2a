"""Where each AWS conversation lives: every ECS call in ``cli/oncall/ecs.py``, every Elastic Load
Balancing call in ``cli/oncall/deploy/elb.py`` (docs/architecture.md, "Where each AWS conversation lives").

import-linter sees imports, and a boto3 client is not imported: it is made from a string
(``client("ecs")``) and handed around, so which module *calls* ECS is invisible to it. This test reads
every module of the packages with :mod:`ast` instead and finds each call of an operation of the
service: ``x.update_service(...)``, ``x.get_paginator("list_tasks")``. An operation name that another
service the project talks to also has (``tag_resource``, ``describe_services``) counts only where the
receiver names the service (``ecs.tag_resource``, ``at.clients.elbv2.describe_tags``). The operation
names are botocore's own service models, so a new operation needs no list kept here.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import botocore.session
import pytest
from botocore import xform_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "lambdas", "services", "stacks", "components", "policies", "guardrails")
# service → (what a receiver's name says, the modules allowed to call it)
HOMES = {
    "ecs": (
        "ecs",
        {
            # beside the engines, so that park --now and status reach it too (pyproject.toml keeps
            # them off the deploy engine)
            "cli/oncall/ecs.py",
        },
    ),
    "elbv2": ("elb", {"cli/oncall/deploy/elb.py"}),
}


@cache
def operations(service: str) -> frozenset[str]:
    model = botocore.session.get_session().get_service_model(service)
    return frozenset(xform_name(name) for name in model.operation_names)


@cache
def services_in_use() -> frozenset[str]:
    """Every service the packages make a client for: ``client("ec2")``, ``clients("ssm", region)``."""
    found = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and node.args and _name(node.func).endswith(("client", "clients")):
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found.add(first.value)
    return frozenset(found)


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def calls_of(service: str, source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, operation) of each call of one of ``service``'s operations in ``source``."""
    own, receiver_word = operations(service), HOMES[service][0]
    others = frozenset().union(*(operations(other) for other in services_in_use() - {service}))
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        operation = node.func.attr
        if operation == "get_paginator" and node.args and isinstance(node.args[0], ast.Constant):
            operation = str(node.args[0].value)
        if operation not in own:
            continue
        if operation in others and receiver_word not in ast.unparse(node.func.value).lower():
            continue
        found.append((node.lineno, operation))
    return found


@pytest.mark.parametrize("service", sorted(HOMES))
def test_each_service_is_called_from_its_module_alone(service: str) -> None:
    allowed = HOMES[service][1]
    strays = [
        f"{path.relative_to(ROOT)}:{line} calls {service} {operation}"
        for path in modules()
        if path.relative_to(ROOT).as_posix() not in allowed
        for line, operation in calls_of(service, path.read_text(), str(path))
    ]
    assert not strays, f"{service} is called outside {sorted(allowed)}:\n" + "\n".join(strays)


@pytest.mark.parametrize("service", sorted(HOMES))
def test_the_home_modules_are_found_calling_their_service(service: str) -> None:
    """The scan sees what it must: without this, a scan that found nothing anywhere would pass."""
    (home,) = HOMES[service][1]
    assert calls_of(service, (ROOT / home).read_text(), home)


def test_a_call_outside_the_home_is_caught_and_a_shared_name_needs_the_service_named() -> None:
    source = (
        "def step(at, scheduler):\n"
        "    at.clients.ecs.update_service(cluster='c', service='s', desiredCount=0)\n"
        "    at.clients.ecs.get_paginator('list_tasks')\n"
        "    scheduler.tag_resource(ResourceArn='a', Tags=[])\n"
        "    at.clients.ecs.tag_resource(resourceArn='a', tags=[])\n"
        "    at.clients.elbv2.modify_listener(ListenerArn='l', DefaultActions=[])\n"
    )
    assert calls_of("ecs", source) == [(2, "update_service"), (3, "list_tasks"), (5, "tag_resource")]
    assert calls_of("elbv2", source) == [(6, "modify_listener")]
