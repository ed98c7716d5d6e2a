"""`parkbrake plan` end to end through the CLI: the real program under the mock engine, every output
format, the exit codes, byte-identical output, and `--against` a file or a git ref."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from ruamel.yaml import YAML

from cli.main import parkbrake
from cli.preview.plan_text import TRAILING_SPACES
from tests.conftest import REPO_ROOT

DEV = REPO_ROOT / "Pulumi.dev.yaml"


def dev_config() -> dict[str, Any]:
    document: dict[str, Any] = YAML(typ="safe").load(DEV.read_text())
    return document


def write_stack(folder: Path, change: Callable[[dict[str, Any]], None] | None = None) -> Path:
    document = dev_config()
    if change is not None:
        change(document["config"])
    path = folder / "Pulumi.dev.yaml"
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    with path.open("w") as stream:
        yaml.dump(document, stream)
    return path


def plan(*arguments: str) -> Result:
    return CliRunner().invoke(parkbrake, ["plan", "--stack", "dev", *arguments])


def test_json_carries_resources_costs_and_verdicts_and_exits_0() -> None:
    result = plan("--project-dir", str(REPO_ROOT), "--output", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["stack"], report["parked"], report["region"]) == ("dev", False, "us-east-1")
    urns = [resource["urn"] for resource in report["resources"]]
    assert urns == sorted(urns)
    monthly = report["cost"]["monthly_usd"]
    assert 0 < monthly["parked"] < monthly["unparked"] <= monthly["worst_case"]
    items = {(item["kind"], item["name"]): item for item in report["cost"]["items"]}
    assert items[("gpu-pool", "training")]["detail"].endswith("(covering 5d)")
    assert items[("public-ipv4", "public-ipv4")]["parked"] > 0
    # Parked, nothing starts a host, so the budget clock leaves the database to pause.
    assert "auto-paused" in items[("database", "database-cluster")]["parked_detail"]
    assert sum(item["unparked"] for item in items.values()) == pytest.approx(monthly["unparked"])
    assert all(verdict["passed"] for verdict in report["policies"] if verdict["enforcement"] == "mandatory")


def test_text_shows_the_tree_the_costs_and_the_verdicts() -> None:
    result = plan("--project-dir", str(REPO_ROOT), "--tree")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Stack dev (us-east-1), unparked: ")
    assert "Cost items (USD a month, us-east-1 prices, 730 h)" in result.output
    assert "parkbrake:aws:GpuPool training" in result.output
    assert "gpu-hosts-have-a-cap" in result.output
    # Counts read as counts, though the mock engine hands them back as floats.
    assert "control-plane desiredCount=1\n" in result.output
    assert "maxCapacity=3" in result.output
    assert "=1.0" not in result.output


def test_markdown_is_a_pull_request_comment() -> None:
    result = plan("--project-dir", str(REPO_ROOT), "--output", "markdown")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "### parkbrake plan: stack `dev` (us-east-1, unparked)"
    assert "| monthly cost | USD |" in lines
    assert any(line.startswith("| training | gpu-pool | $") for line in lines)
    assert "<details><summary>Cost items</summary>" in lines


def test_a_mandatory_violation_exits_1_and_names_the_policy(tmp_path: Path) -> None:
    def only_small_hosts(config: dict[str, Any]) -> None:
        config["parkbrake:policy"]["allowed_instance_types"] = ["g5.xlarge"]

    stack = write_stack(tmp_path, only_small_hosts)
    result = plan("--config", str(stack), "--output", "markdown")
    assert result.exit_code == 1, result.output
    assert "**Mandatory policies failed: `instance-types-allowed`**" in result.output
    assert "g5.12xlarge" in result.output


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda config: config.update({"parkbrake:nighty": {}}), "nighty: unknown key"),
        (
            lambda config: config.update({"aws:region": "eu-central-1"}),
            "no prices for region eu-central-1 in prices.json",
        ),
    ],
    ids=["unknown-key", "unpriced-region"],
)
def test_bad_input_exits_2_without_a_traceback(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], message: str
) -> None:
    result = plan("--config", str(write_stack(tmp_path, change)))
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def run_cli(*arguments: str, seed: str) -> bytes:
    environment = {**os.environ, "PYTHONHASHSEED": seed}
    command = [sys.executable, "-c", "from cli.main import main; main()", *arguments]
    return subprocess.run(command, cwd=REPO_ROOT, env=environment, capture_output=True, check=True).stdout


@pytest.mark.parametrize("output", ["json", "text"])
def test_the_same_input_gives_the_same_bytes(output: str) -> None:
    runs = {run_cli("plan", "--stack", "dev", "--output", output, seed=seed) for seed in ("1", "2")}
    assert len(runs) == 1


def bigger_training_pool(config: dict[str, Any]) -> None:
    config["parkbrake:pools"]["training"]["max"] = 4


def test_against_another_file_prints_the_resource_and_cost_difference(tmp_path: Path) -> None:
    current = write_stack(tmp_path, bigger_training_pool)
    result = plan("--config", str(current), "--against", str(DEV), "--output", "json")
    assert result.exit_code == 0, result.output
    diff = json.loads(result.output)["diff"]
    assert diff["against"] == str(DEV)
    updates = {(change["type"], change["name"]): change for change in diff["resources"]}
    group = updates[("aws:autoscaling/group:Group", "training-group")]
    assert {"input": "maxSize", "before": 2, "after": 4} in group["inputs"]
    # the training line's expected cost is unchanged (nightly capacity 1), so the month's total is too
    assert diff["monthly_usd"]["difference"] == 0
    text = plan("--config", str(current), "--against", str(DEV))
    assert f"Against {DEV}: worst case +$" in text.output
    assert "~ aws:autoscaling/group:Group training-group (maxSize: 2 → 4" in text.output


def test_against_a_git_ref_reads_the_stack_file_at_that_ref(tmp_path: Path) -> None:
    def git(*arguments: str) -> None:
        subprocess.run(["git", *arguments], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    write_stack(tmp_path)
    git("add", "Pulumi.dev.yaml")
    git("-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-q", "-m", "base")

    def warm_inference_pool(config: dict[str, Any]) -> None:  # the dev stack's scales to zero
        config["parkbrake:pools"]["inference"] |= {"min": 1, "desired": 1}

    write_stack(tmp_path, warm_inference_pool)
    result = plan("--project-dir", str(tmp_path), "--against", "HEAD", "--output", "markdown")
    assert result.exit_code == 0, result.output
    assert "**Against `HEAD`**: unparked +$742.38 a month" in result.output
    assert "| inference | gpu-pool | $0.00 → $742.38 (+$742.38) | $0.00 | $2,227.14 |" in result.output
    missing = plan("--project-dir", str(tmp_path), "--against", "no-such-ref")
    assert missing.exit_code == 2
    assert "neither a file nor a git ref" in missing.output


def test_the_answer_comes_first_and_item_names_are_whole_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    lines = plan("--project-dir", str(REPO_ROOT)).output.splitlines()
    assert lines[0].startswith("Stack dev (us-east-1), unparked: ")
    opening = "\n".join(lines[:8])
    from policies.registry import RULES

    every_rule_passes = f"Policies: all {len(RULES)} pass"
    assert all(figure in opening for figure in ("unparked", "parked", "worst case", every_rule_passes))
    assert "$11,034.87" in opening
    assert max(len(line.rstrip()) for line in lines) <= 80
    table = lines[lines.index(next(line for line in lines if line.startswith("Cost items"))) :]
    names = [line.split()[0] for line in table[3:15]]
    assert "control-plane" in names
    assert "cache-replication-group" in names
    assert "…" not in "\n".join(table[:20])
    # the answer again at the end: what a 24-line terminal still shows
    assert lines[-3:] == [
        "Stack dev, unparked, 188 resources (the tree: --tree)",
        "Monthly: unparked $849.93 · parked $105.95 · worst case $11,034.87",
        f"Policies: all {len(RULES)} pass ({len(RULES) - 1} mandatory, 1 advisory)",
    ]
    assert "188 resources" not in lines  # the tree only with --tree


def test_with_the_tree_the_answer_still_closes_the_output() -> None:
    lines = plan("--project-dir", str(REPO_ROOT), "--tree").output.splitlines()
    # the tree after the verdict table, the closing totals after the tree
    assert (
        lines.index("Policies")
        < lines.index("188 resources")
        < lines.index("Stack dev, unparked, 188 resources")
    )
    assert lines[-2].startswith("Monthly: unparked $849.93")
    assert lines[-1].startswith("Policies: all ")


def test_a_failed_policy_is_named_in_the_closing_lines_too(tmp_path: Path) -> None:
    def only_small_hosts(config: dict[str, Any]) -> None:
        config["parkbrake:policy"]["allowed_instance_types"] = ["g5.xlarge"]

    result = plan("--config", str(write_stack(tmp_path, only_small_hosts)))
    assert result.exit_code == 1, result.output
    from policies.registry import RULES

    closing = result.output.splitlines()[-3:]
    assert closing[0] == f"Policies: {len(RULES) - 1} of {len(RULES)} pass; failed:"
    assert closing[1].startswith("  FAIL instance-types-allowed (mandatory, ")
    assert closing[2] == "Mandatory policies failed: instance-types-allowed"


def test_config_names_the_file_given_not_the_stack(tmp_path: Path) -> None:
    stack = write_stack(tmp_path)
    given = plan("--config", str(stack), "--summary")
    assert given.exit_code == 0, given.output
    assert given.output.startswith(f"Stack dev (us-east-1, from {stack}), unparked: ")
    missing = CliRunner().invoke(parkbrake, ["plan", "--config", str(tmp_path / "my-stack.yaml")])
    assert missing.exit_code == 2
    assert (
        missing.output
        == f"Error: --config {tmp_path / 'my-stack.yaml'}: no such file; give the path of a stack file\n"
    )
    assert "'dev'" not in missing.output


def test_a_narrow_terminal_stacks_the_items_rather_than_dropping_a_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    output = plan("--project-dir", str(REPO_ROOT), "--no-tree").output
    assert " cache-replication-group (cache)\n   unparked 18.69  parked 18.69  worst case 18.69\n" in output
    assert "   unparked 849.93  parked 105.95  worst case 11,034.87\n" in output


@pytest.mark.parametrize("columns", ["60", "80", "120"])
@pytest.mark.parametrize("stack", ["dev", "eks"])
def test_no_line_of_the_plan_ends_in_a_space(
    stack: str, columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    result = CliRunner().invoke(parkbrake, ["plan", "--stack", stack, "--project-dir", str(REPO_ROOT)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("Cost items") for line in lines)
    padded = [line for line in lines if line != line.rstrip()]
    assert padded == []


def test_trailing_spaces_go_before_a_lines_closing_colour_codes() -> None:
    coloured = "\x1b[1mtotal\x1b[0m  \x1b[1m849.83\x1b[0m   \x1b[0m\n  \x1b[2mkept\x1b[0m\nplain   \n"
    assert TRAILING_SPACES.sub(r"\1", coloured) == (
        "\x1b[1mtotal\x1b[0m  \x1b[1m849.83\x1b[0m\x1b[0m\n  \x1b[2mkept\x1b[0m\nplain\n"
    )


def test_summary_and_no_tree_leave_out_what_they_say() -> None:
    full = plan("--project-dir", str(REPO_ROOT), "--tree").output
    no_tree = plan("--project-dir", str(REPO_ROOT), "--no-tree").output
    assert plan("--project-dir", str(REPO_ROOT)).output == no_tree  # the tree is opt-in
    summary = plan("--project-dir", str(REPO_ROOT), "--summary").output
    assert "parkbrake:aws:GpuPool training" in full
    assert "parkbrake:aws:GpuPool training" not in no_tree
    assert "Cost items" in no_tree
    assert "Cost items" not in summary
    from policies.registry import RULES

    advisory = sum(rule.enforcement == "advisory" for rule in RULES)
    assert summary.splitlines()[-1] == (
        f"Policies: all {len(RULES)} pass ({len(RULES) - advisory} mandatory, {advisory} advisory)"
    )
    assert full.startswith(summary)


def doubled_training_maximum(config: dict[str, Any]) -> None:
    config["parkbrake:pools"]["training"]["max"] *= 2


def test_a_doubled_gpu_maximum_is_the_headline_of_the_diff(tmp_path: Path) -> None:
    """The expected figures do not move (the nightly capacity is 1); the worst case does, and leads."""
    current = write_stack(tmp_path, doubled_training_maximum)
    markdown = plan("--config", str(current), "--against", str(DEV), "--output", "markdown").output
    lines = markdown.splitlines()
    assert lines[2] == f"**Against `{DEV}`**: worst case +$8,297.12 a month"
    assert "| worst case | $11,034.87 | $19,331.99 | +$8,297.12 |" in lines
    assert "| unparked | $849.93 | $849.93 | +$0.00 |" in lines
    assert "| training | gpu-pool | $681.96 | $0.00 | $8,297.12 → $16,594.24 (+$8,297.12) |" in lines
    text = plan("--config", str(current), "--against", str(DEV), "--summary").output
    assert f"Against {DEV}: worst case +$8,297.12 a month" in text
    assert "  training (gpu-pool): worst case $8,297.12 → $16,594.24 (+$8,297.12)" in text


def test_the_largest_item_change_comes_first(tmp_path: Path) -> None:
    def two_changes(config: dict[str, Any]) -> None:
        doubled_training_maximum(config)  # worst case +$8,297.12
        config["parkbrake:pools"]["inference"] |= {"min": 1, "desired": 1}  # unparked +$742.38

    current = write_stack(tmp_path, two_changes)
    markdown = plan("--config", str(current), "--against", str(DEV), "--output", "markdown").output
    items = [line for line in markdown.splitlines() if line.startswith("| training | gpu-pool | $681.96")]
    first = markdown.index("| training | gpu-pool | $681.96")
    assert items
    assert first < markdown.index("| inference | gpu-pool | $0.00 → $742.38 (+$742.38)")
    # the stack's totals: the worst case moved most, so it is the headline
    assert f"**Against `{DEV}`**: worst case +$" in markdown
