"""Each setting's default is written once (issue 35): every declared default (the settings table's rows,
the sweep's rate, the GPU quiet threshold) has one literal in the source, its declaration, and every
other place imports it.

A second literal is looked for where it is clearly the same setting: a literal equal to the default
(a number, a boolean, a ``timedelta(...)`` of constants, or a duration string such as ``"15m"``) whose
name is the setting's. A literal's name is what it stands beside: the keyword it is passed as, the
variable, field or parameter it is assigned to, the dict key it is filed under, or the option or key a
call names beside it (``click.option("--threshold", default=5.0)``,
``section.duration("sweep_every", timedelta(minutes=5))``). A name matches the setting's own (its row
name, its variable without ``PARKBRAKE_``, its stack key's last part, or its constant's name) when equal,
or when one ends with the other and the shorter has two words or more (``--idle-after`` is
``agent_idle_after``). Equal values under other names (a 15-minute warning, a 5-minute resync) are
different settings and are left alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from guardrails.durations import DurationError, parse_duration
from guardrails.idle import QUIET_PERCENT
from guardrails.settings_table import SETTINGS, SWEEP_EVERY, Setting

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("cli", "lambdas", "guardrails", "stacks", "components", "services", "policies", "alerts", "scripts")  # fmt: skip
DURATION_TEXT = re.compile(r"(\d+[dhms])+")
OPTION_OR_KEY = re.compile(r"-{0,2}[A-Za-z_][\w.-]{0,80}")


@dataclass(frozen=True)
class Declared:
    """A default declared once: the names a second literal of it would stand beside, and its home."""

    label: str
    names: frozenset[str]
    default: object
    home: str  # the file whose literal is the declaration


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.name})"


def normalized(name: str) -> str:
    """``--idle-after``, ``PARKBRAKE_AGENT_IDLE_AFTER``, ``pools.<name>.agent_idle_after`` → snake case."""
    name = name.rpartition(".")[2].strip("-_").lower().replace("-", "_")
    return name.removeprefix("parkbrake_")


def row_names(row: Setting) -> frozenset[str]:
    return frozenset(normalized(name) for name in (row.name, row.variable, row.stack_key))


def declared_defaults() -> list[Declared]:
    table = "guardrails/settings_table.py"
    rows = [
        Declared(row.name, row_names(row), row.default, table) for row in SETTINGS if row.default is not None
    ]
    return [
        *rows,
        Declared("sweep_every", frozenset({"sweep_every"}), SWEEP_EVERY, table),
        Declared(
            "the GPU quiet threshold",
            frozenset({"threshold", "threshold_percent", "quiet_percent"}),
            QUIET_PERCENT,
            "guardrails/idle.py",
        ),
    ]


def same_name(name: str, names: frozenset[str]) -> bool:
    for declared in names:
        if name == declared:
            return True
        shorter, longer = sorted((name, declared), key=len)
        if shorter.count("_") >= 1 and longer.endswith("_" + shorter):
            return True
    return False


def literal_value(node: ast.AST) -> object:
    """The value a literal node writes, or ``NotImplemented`` where it is not a literal."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):
            if DURATION_TEXT.fullmatch(node.value):
                try:
                    return parse_duration(node.value, ceiling=None)
                except DurationError:
                    return NotImplemented
            return NotImplemented
        return node.value
    if isinstance(node, ast.Call) and _called(node) == "timedelta":
        return _timedelta_of(node)
    return NotImplemented


def _timedelta_of(call: ast.Call) -> object:
    """``timedelta(minutes=15)`` of constants, evaluated; ``NotImplemented`` for anything computed."""
    arguments = [arg.value for arg in call.args if isinstance(arg, ast.Constant)]
    keywords = {
        keyword.arg: keyword.value.value
        for keyword in call.keywords
        if keyword.arg is not None and isinstance(keyword.value, ast.Constant)
    }
    if len(arguments) != len(call.args) or len(keywords) != len(call.keywords):
        return NotImplemented
    try:
        return timedelta(*arguments, **keywords)
    except TypeError:
        return NotImplemented


def _called(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


def _call_keys(call: ast.Call) -> list[str]:
    """The option names or keys a call names as strings among its positional arguments."""
    return [
        arg.value
        for arg in call.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and OPTION_OR_KEY.fullmatch(arg.value)
    ]


def _targets(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple | ast.List):
        return [name for element in node.elts for name in _targets(element)]
    return []


def names_beside(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> list[str]:
    """What a literal stands beside (see the module's docstring), nearest first."""
    names: list[str] = []
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.keyword):
            call = parents[parent]
            names.append(parent.arg or "")
            if parent.arg == "default" and isinstance(call, ast.Call):
                names.extend(_call_keys(call))
            return names
        if isinstance(parent, ast.Call) and child in parent.args:
            names.extend(_call_keys(parent))
        elif isinstance(parent, ast.Assign):
            return names + [name for target in parent.targets for name in _targets(target)]
        elif isinstance(parent, ast.AnnAssign):
            return names + _targets(parent.target)
        elif isinstance(parent, ast.arguments):
            return names + _parameter_of(parent, child)
        elif isinstance(parent, ast.Dict):
            return names + [
                key.value
                for key, value in zip(parent.keys, parent.values, strict=True)
                if value is child and isinstance(key, ast.Constant) and isinstance(key.value, str)
            ]
        elif isinstance(parent, ast.stmt):
            return names
        child, parent = parent, parents.get(parent)
    return names


def _parameter_of(arguments: ast.arguments, default: ast.AST) -> list[str]:
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = list(
        zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True)
    )
    pairs += [
        (arg, value) for arg, value in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if value
    ]
    return [arg.arg for arg, value in pairs if value is default]


def _equal(value: object, default: object) -> bool:
    # True == 1 in Python: a boolean setting matches booleans only, a number numbers only.
    if isinstance(default, bool) or isinstance(value, bool):
        return type(value) is type(default) and value == default
    return value == default


def literals_of(source: str, path: str, declared: Sequence[Declared]) -> Iterator[tuple[Declared, Hit]]:
    """Every literal in ``source`` equal to a declared default and standing beside its name."""
    tree = ast.parse(source)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        value = literal_value(node)
        if value is NotImplemented or value is None:
            continue
        candidates = [item for item in declared if _equal(value, item.default)]
        if not candidates:
            continue
        names = [normalized(name) for name in names_beside(node, parents) if name]
        for item in candidates:
            matched = next((name for name in names if same_name(name, item.names)), None)
            if matched is not None:
                yield item, Hit(path, getattr(node, "lineno", 0), matched)


def scanned_files() -> Iterator[Path]:
    for package in SCANNED:
        yield from sorted((ROOT / package).rglob("*.py"))


@pytest.fixture(scope="module")
def hits() -> dict[str, list[Hit]]:
    declared = declared_defaults()
    found: dict[str, list[Hit]] = {item.label: [] for item in declared}
    for file in scanned_files():
        path = file.relative_to(ROOT).as_posix()
        for item, hit in literals_of(file.read_text(), path, declared):
            found[item.label].append(hit)
    return found


@pytest.mark.parametrize("item", declared_defaults(), ids=lambda item: item.label)
def test_each_declared_default_is_written_once(item: Declared, hits: dict[str, list[Hit]]) -> None:
    found = hits[item.label]
    elsewhere = [str(hit) for hit in found if hit.path != item.home]
    assert not elsewhere, f"{item.label}'s default is written again; import it from {item.home}: {elsewhere}"
    # The declaration itself is seen: the matcher reads the form the default is written in.
    assert len(found) == 1, f"{item.label}: expected its one declaration in {item.home}, found {found}"


def hits_in(source: str) -> list[str]:
    return [f"{item.label} at {hit}" for item, hit in literals_of(source, "example.py", declared_defaults())]


@pytest.mark.parametrize(
    ("source", "label"),
    [
        # The three the issue found: the agent's idle window, the sweep's rate, the quiet threshold.
        ("AGENT_IDLE_AFTER = timedelta(minutes=15)\n", "agent_idle_after"),
        ("@dataclass\nclass Args:\n    sweep_every: timedelta = timedelta(minutes=5)\n", "sweep_every"),
        (
            "@click.option('--threshold', type=click.FloatRange(0, 100), default=5.0, show_default=True)\n"
            "def command(threshold: float) -> None: ...\n",
            "the GPU quiet threshold",
        ),
        # The same settings written otherwise: a duration string, a parameter default, a key, a dict.
        ("@click.option('--idle-after', default='15m')\ndef agent(idle_after): ...\n", "agent_idle_after"),
        ("def sweep(sweep_every=timedelta(seconds=300)): ...\n", "sweep_every"),
        ("every = section.duration('sweep_every', timedelta(minutes=5))\n", "sweep_every"),
        ("DEFAULTS = {'PARKBRAKE_WARN_BEFORE': '15m'}\n", "warn_before"),
        ("config = Config(reap_untagged=False)\n", "reap_untagged"),
    ],
)
def test_a_second_literal_of_a_setting_is_found(source: str, label: str) -> None:
    found = hits_in(source)
    assert [hit for hit in found if hit.startswith(f"{label} at ")], found


@pytest.mark.parametrize(
    "source",
    [
        # Equal values under other names are other settings.
        "termination_grace_period: timedelta = timedelta(minutes=15)\n",
        "resync = timedelta(minutes=5)\n",
        "@click.option('--interval', default='5m')\ndef watch(interval): ...\n",
        "sweep_every = section.duration('sweep_every', SWEEP_EVERY, ceiling=timedelta(minutes=5))\n",
        "dry_run = False\n",
        "retries = 5.0\n",
    ],
)
def test_equal_values_under_other_names_are_left_alone(source: str) -> None:
    assert hits_in(source) == []
