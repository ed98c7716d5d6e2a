"""The engine's verdicts and JSON, and the conventions every registered rule keeps."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re
from decimal import Decimal
from pathlib import Path

from policy_resources import compliant_stack, gpu_group, replacing

import policies.rules
from policies.engine import evaluate
from policies.pack import SETTINGS
from policies.registry import RULES
from policies.rule import ENFORCEMENTS, PolicyContext

POLICIES_DIR = Path(policies.rules.__file__).resolve().parent.parent
KEBAB = re.compile(r"[a-z]+(-[a-z]+)*")


def test_every_rule_has_a_unique_kebab_case_name_a_description_and_a_valid_enforcement() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert KEBAB.fullmatch(rule.name), rule.name
        assert rule.description.endswith("."), rule.name
        assert len(rule.description) > 30, rule.name
        assert rule.enforcement in ENFORCEMENTS, rule.name


def test_every_rule_lives_in_its_own_module_and_every_module_is_registered() -> None:
    modules = sorted(info.name for info in pkgutil.iter_modules(policies.rules.__path__))
    assert modules == sorted(rule.name.replace("-", "_") for rule in RULES)
    for rule in RULES:
        assert importlib.import_module(f"policies.rules.{rule.name.replace('-', '_')}").RULE is rule


def test_every_setting_a_rule_reads_is_a_context_field_the_pack_can_configure() -> None:
    fields = {field.name for field in dataclasses.fields(PolicyContext)}
    for rule in RULES:
        for setting in rule.settings:
            assert setting in fields, (rule.name, setting)
            assert setting in SETTINGS, (rule.name, setting)


def test_the_issues_mandatory_and_advisory_rules() -> None:
    enforcement = {rule.name: rule.enforcement for rule in RULES}
    for name in (
        "gpu-hosts-have-a-cap",
        "reaper-is-deployed",
        "data-stores-encrypted-and-private",
        "no-unconditional-stop",
    ):
        assert enforcement[name] == "mandatory"
    assert enforcement["cost-within-budgets"] == "advisory"
    assert {"gpu-pool-size-ceiling", "instance-types-allowed", "required-tags"} <= set(enforcement)


def test_rules_import_only_guardrails_and_the_pack_alone_imports_pulumi_policy() -> None:
    for path in POLICIES_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {
            (node.module or "").split(".")[0]
            if isinstance(node, ast.ImportFrom)
            else alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert not imported & {"stacks", "components", "cli", "lambdas", "pulumi", "pulumi_aws", "boto3"}, (
            path
        )
        if path.name not in ("pack.py", "__main__.py"):
            assert "pulumi_policy" not in imported, path


def test_a_compliant_stack_passes_every_rule_in_registry_order() -> None:
    verdicts = evaluate(compliant_stack(), PolicyContext(tenant_budget_usd=Decimal(100_000)))
    assert [verdict.policy for verdict in verdicts] == [rule.name for rule in RULES]
    assert all(verdict.passed and not verdict.violations for verdict in verdicts)


def test_verdicts_serialise_to_the_plan_json_shape() -> None:
    stack = replacing(compliant_stack(), gpu_group(max_size=20.0))
    verdicts = {verdict.policy: verdict.to_json() for verdict in evaluate(stack, PolicyContext())}
    assert verdicts["gpu-pool-size-ceiling"] == {
        "policy": "gpu-pool-size-ceiling",
        "enforcement": "mandatory",
        "passed": False,
        "violations": [
            {
                "resource": gpu_group().urn,
                "message": "maxSize 20 is above the GPU pool ceiling of 8; lower it or raise the ceiling deliberately",
            }
        ],
    }
    assert verdicts["cost-within-budgets"] == {
        "policy": "cost-within-budgets",
        "enforcement": "advisory",
        "passed": True,
        "violations": [],
    }
