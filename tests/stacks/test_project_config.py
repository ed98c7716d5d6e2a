"""Pulumi.yaml's `config:` block declares exactly the keys the stack parser accepts, in the form
Pulumi's project schema allows: a type only where it has one (string, integer, boolean, array — it
has none for mappings), a description for each, and a default only where the program's own is."""

from __future__ import annotations

from typing import Any

import pytest
from ruamel.yaml import YAML

from stacks.config import NAMESPACE, TOP_LEVEL_KEYS, parse_stack_config
from tests.conftest import REPO_ROOT

# Pulumi's configTypeDeclaration (sdk/go/common/workspace/project.json): its properties, and the
# types it can name.
DECLARATION_FIELDS = {"type", "items", "description", "secret", "default", "value"}
SIMPLE_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list}


def declared() -> dict[str, Any]:
    project: dict[str, Any] = YAML(typ="safe").load((REPO_ROOT / "Pulumi.yaml").read_text())
    config: dict[str, Any] = project["config"]
    return config


def dev_values() -> dict[str, Any]:
    document: dict[str, Any] = YAML(typ="safe").load((REPO_ROOT / "Pulumi.dev.yaml").read_text())
    values: dict[str, Any] = document["config"]
    return values


def test_every_key_the_parser_accepts_is_declared_and_nothing_else() -> None:
    assert set(declared()) == {f"{NAMESPACE}:{key}" for key in TOP_LEVEL_KEYS}


@pytest.mark.parametrize("key", sorted(f"{NAMESPACE}:{key}" for key in TOP_LEVEL_KEYS))
def test_each_declaration_is_one_pulumi_accepts(key: str) -> None:
    declaration = declared()[key]
    assert isinstance(declaration, dict), f"{key}: a bare value is a default, not a declaration"
    assert set(declaration) <= DECLARATION_FIELDS, f"{key}: {set(declaration) - DECLARATION_FIELDS}"
    assert isinstance(declaration.get("description"), str)
    assert declaration["description"].strip()
    if "type" in declaration:
        assert declaration["type"] in SIMPLE_TYPES
        assert declaration["type"] != "array" or "items" in declaration


@pytest.mark.parametrize("key", sorted(f"{NAMESPACE}:{key}" for key in TOP_LEVEL_KEYS))
def test_the_declared_type_is_what_the_program_reads(key: str) -> None:
    """Typed keys hold that type in the dev stack; untyped ones are mappings, which Pulumi cannot type."""
    declaration, value = declared()[key], dev_values().get(key)
    if value is None:
        pytest.skip(f"{key} is not set in Pulumi.dev.yaml")
    if "type" in declaration:
        assert isinstance(value, SIMPLE_TYPES[declaration["type"]])
    else:
        assert isinstance(value, dict), f"{key} holds a {type(value).__name__}: declare its type"


def test_a_declared_default_is_the_programs_own_default() -> None:
    defaults = {
        key: declaration["default"] for key, declaration in declared().items() if "default" in declaration
    }
    assert defaults == {"parkbrake:parked": False}
    without = {key: value for key, value in dev_values().items() if key not in defaults}
    with_defaults = without | defaults
    absent = parse_stack_config("dev", without, "Pulumi.dev.yaml", project_dir=REPO_ROOT)
    filled = parse_stack_config("dev", with_defaults, "Pulumi.dev.yaml", project_dir=REPO_ROOT)
    assert absent == filled


def test_an_undeclared_key_would_be_caught() -> None:
    """The comparison can fail: a key the parser accepts but Pulumi.yaml lacks shows as a difference."""
    keys = {f"{NAMESPACE}:{key}" for key in {*TOP_LEVEL_KEYS, "rehearsal"}}
    assert keys - set(declared()) == {"parkbrake:rehearsal"}
