"""``stacks/__main__.py``, the program ``pulumi up`` runs, under the mock engine with the engine's config."""

from __future__ import annotations

import copy
import json
import runpy
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest
from ruamel.yaml import YAML

from stacks.config import load_stack_config, parse_stack_config
from stacks.offline import OfflineRun, run_offline
from stacks.platform import build_platform
from stacks.validation import ConfigError
from tests.conftest import REPO_ROOT

MAIN = REPO_ROOT / "stacks" / "__main__.py"


def example(stack: str = "dev") -> dict[str, Any]:
    document = YAML(typ="safe").load((REPO_ROOT / f"Pulumi.{stack}.yaml").read_text())
    return copy.deepcopy(document["config"])


def as_engine_passes_it(config: dict[str, Any]) -> dict[str, str]:
    """What the engine hands a program: every value a string, structured ones JSON-encoded."""
    return {key: value if isinstance(value, str) else json.dumps(value) for key, value in config.items()}


@pytest.fixture
def engine_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({})


def run_main(config: dict[str, Any], stack: str = "dev") -> OfflineRun:
    def program() -> None:
        pulumi.runtime.set_all_config(as_engine_passes_it(config))
        runpy.run_path(str(MAIN), run_name="__main__")

    return run_offline(program, stack=stack, region=config["aws:region"])


@pytest.mark.usefixtures("engine_config")
@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_pulumi_up_declares_exactly_what_plan_declares(stack: str) -> None:
    config = load_stack_config(stack, REPO_ROOT)
    planned = run_offline(lambda: build_platform(config), stack=stack, region=config.region)

    deployed = run_main(example(stack), stack)

    assert sorted((r.type, r.name) for r in deployed.resources) == sorted(
        (r.type, r.name) for r in planned.resources
    )
    assert len(deployed.resources) > 100


@pytest.mark.usefixtures("engine_config")
@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (lambda c: c.update({"parkbrake:nighty": c.pop("parkbrake:nightly")}), "nighty: unknown key"),
        (lambda c: c["parkbrake:pools"]["training"].update(max_runtime="90 minutes"),
         'pools.training.max_runtime: "90 minutes" is not a duration'),
        (lambda c: c["parkbrake:guardrails"].pop("alarm_email"), "guardrails.alarm_email: is required"),
    ],
)  # fmt: skip
def test_a_bad_config_stops_pulumi_up_with_the_message_plan_prints(mutate: Any, problem: str) -> None:
    config = example()
    mutate(config)
    with pytest.raises(ConfigError) as planned:
        parse_stack_config("dev", config, "Pulumi.dev.yaml")

    with pytest.raises(pulumi.RunError) as stopped:
        run_main(config)

    assert str(stopped.value) == str(planned.value)
    assert problem in str(stopped.value)
