"""The answer on the last screen: ``plan``, ``status`` and ``park``/``unpark --now --dry-run`` print more
than a 24-line terminal holds, so each ends with its answer (totals and verdicts, the fleet summary or
"no host matches", what would change). Each is run as a real process on a pseudo-terminal of 80×24
(COLUMNS, LINES and TERM set as a shell sets them), colours stripped; the answer lines must be within
the last 24 lines and no line wider than 80 columns. ``status`` and ``park`` read the demo fleet in
moto's server, as the other status tests do."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cli.oncall.demo_terminal import Demo, on_terminal
from tests.cli.oncall.ops_fleet import REGION, STACK, project_copy, seed
from tests.conftest import REPO_ROOT

COLUMNS, ROWS = 80, 24


def last_screen(demo: Demo, *arguments: str, over_a_screen: bool = True) -> list[str]:
    """The last 24 lines ``parkbrake ARGUMENTS`` leaves on an 80×24 terminal; every line fits 80 columns.
    ``over_a_screen``: the output is longer than the terminal (else nothing scrolls away)."""
    status, shown = on_terminal(demo, COLUMNS, *arguments, rows=ROWS, term="xterm")
    assert status == 0, shown
    lines = shown.splitlines()
    assert (len(lines) > ROWS) is over_a_screen, len(lines)
    too_wide = [line for line in lines if len(line) > COLUMNS]
    assert not too_wide, too_wide
    return lines[-ROWS:]


def without_aws() -> dict[str, str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("AWS_", "PARKBRAKE_"))}
    return {**environ, "PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture
def fleet(aws: str, tmp_path: Path) -> Demo:
    """The demo fleet in moto (4 GPU hosts of stack dev), and a project folder with the stack files."""
    seed(aws)
    environ = {key: value for key, value in os.environ.items() if not key.startswith("PARKBRAKE_")}
    return Demo({**environ, "PYTHONPATH": str(REPO_ROOT)}, project_copy(tmp_path))


@pytest.mark.parametrize("tree", [False, True], ids=["default", "tree"])
def test_plan_ends_with_its_totals_and_verdicts(tree: bool) -> None:
    from policies.registry import RULES

    screen = last_screen(
        Demo(without_aws(), REPO_ROOT), "plan", "--stack", STACK, *(["--tree"] if tree else [])
    )
    closing = screen[-3:]
    assert closing[0].startswith("Stack dev, unparked, 188 resources")
    assert re.fullmatch(r"Monthly: unparked \$[\d,.]+ · parked \$[\d,.]+ · worst case \$[\d,.]+", closing[1])
    assert closing[2].startswith(f"Policies: all {len(RULES)} pass")
    if not tree:
        assert "Policies" in screen  # and the verdict table above it, on the same screen


def test_plan_of_an_organisation_ends_with_its_accounts_and_their_total() -> None:
    screen = last_screen(Demo(without_aws(), REPO_ROOT), "plan", "--stack", "org")
    closing = screen[-4:]
    assert closing[0].startswith("Stack org, unparked, ")
    assert re.fullmatch(r"Organisation, 3 account lines: unparked \$[\d,.]+ · parked \$[\d,.]+", closing[2])
    assert closing[3].startswith("Policies: all ")
    table = screen[screen.index(next(line for line in screen if line.startswith("Organisation: "))) :]
    assert [line.split()[0] for line in table[2:6]] == [
        "111111111111",
        "222222222222",
        "333333333333",
        "total",
    ]


def test_make_plan_runs_what_is_rendered_here() -> None:
    """``make plan`` prints its command line and then exactly this plan: its last screen is the same."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    recipe = re.search(r"^plan:.*\n\t(.*)$", makefile, re.MULTILINE)
    assert recipe is not None
    assert recipe.group(1) == "$(BIN)/parkbrake plan --stack $(STACK)"
    assert re.search(r"^STACK \?= dev$", makefile, re.MULTILINE)


def test_status_ends_with_the_fleet_summary(fleet: Demo) -> None:
    screen = last_screen(fleet, "status", "--stack", STACK)
    assert screen[-3].startswith(f"GPU fleet in {REGION} at ")
    assert screen[-2].strip().startswith("hosts 4 · accelerators ")
    assert screen[-1].strip().startswith("burn $")


def test_status_with_a_filter_matching_nothing_is_the_answer_alone(fleet: Demo) -> None:
    status, shown = on_terminal(
        fleet, COLUMNS, "status", "--stack", STACK, "--filter", "state=overdue", "--filter", "tenant=research",
        rows=ROWS, term="xterm",
    )  # fmt: skip
    assert status == 0, shown
    lines = shown.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"GPU fleet (state=overdue, tenant=research) in {REGION} at ")
    assert lines[1] == "no host matches state=overdue, tenant=research (4 running)"


@pytest.mark.parametrize(
    ("command", "answer"),
    [
        ("park", [f"park --now {STACK} ({REGION}): 8 of 8 would change; dry run, nothing changed",
                  "  would change: 2 autoscaling-group, 3 ecs-service, 2 schedule, 1 ssm-parameter"]),
        ("unpark", [f"unpark --now {STACK} ({REGION}): 0 of 7 would change; dry run, nothing changed",
                    "  left: 6 skipped, 1 unchanged"]),
    ],
)  # fmt: skip
def test_park_now_dry_run_ends_with_what_would_change(fleet: Demo, command: str, answer: list[str]) -> None:
    # park's table is over a screen; unpark's (nothing parked: every row one line) is not
    screen = last_screen(
        fleet, command, "--now", "--dry-run", "--stack", STACK, over_a_screen=command == "park"
    )
    assert screen[-len(answer) :] == answer


def test_park_dry_run_ends_with_the_switch_and_the_monthly_cost(fleet: Demo) -> None:
    """``park`` without --now (the stack file's switch): its tables and lists run over a screen too."""
    screen = last_screen(fleet, "park", "--stack", STACK, "--dry-run")
    assert re.fullmatch(
        rf"Stack {STACK}: parked false → true; Monthly cost: \$[\d,.]+ → \$[\d,.]+ \(saves \$[\d,.]+\)",
        screen[-2],
    )
    assert screen[-1] == "Dry run: nothing written, nothing applied."
