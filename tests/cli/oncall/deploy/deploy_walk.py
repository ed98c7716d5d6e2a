"""The walk of a deploy's revision, from the ``deploy`` command to its first ECS write, as the code runs it.

A reader who follows the revision opens one file after another: the command, the code it hands the
revision to, and on down to the call that writes it into ECS. :func:`walk` records that path while
``parkbrake deploy`` runs (``sys.setprofile``, Python calls only):

* a call is on the walk when its code lives in the project (not the tests, not a library, not a
  module body run by an import) and one of its arguments is the revision, or holds it in its fields,
  items or attributes within :data:`HOPS` steps. An AWS client is not searched: it is how the deploy
  talks, not what it says;
* the lease's modules (``gate``, :data:`GATE` unless told otherwise) are not stays: every step and
  every write confirms the lease there by design (``docs/deploy.md``); the walk counts its crossings
  apart, and does not search the lease's objects (the lease, its clock and guarded clients hold the
  revision as the holder's record, not as the deploy's data). ``gate=frozenset()`` walks through
  them like any other module: the raw figure;
* the walk ends at the first ECS request the project makes that is not a read (botocore's
  ``BaseClient._make_api_call`` for an operation not named ``Describe…``, ``List…`` or ``Get…``);
  requests made by the tests' simulated ECS scheduler do not count.

A *stay* is a run of consecutive walk calls in one file; a *return* is a stay in a file the walk
already left.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
COMMAND = ("cli/deploy.py", "deploy")
GATE = frozenset({"cli/oncall/deploy/lease.py", "cli/oncall/deploy/lease_guard.py"})
HOPS = 3
READ_PREFIXES = ("Describe", "List", "Get")
PLAIN = (int, float, bool, bytes, type(None))


@dataclass
class Walk:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (file, function), in order
    gate_crossings: int = 0
    first_write: str | None = None  # the ECS operation that ended the walk
    unreadable: list[str] = field(default_factory=list)  # calls whose arguments could not be searched

    @property
    def stays(self) -> list[tuple[str, list[str]]]:
        runs: list[tuple[str, list[str]]] = []
        for file, function in self.calls:
            if runs and runs[-1][0] == file:
                runs[-1][1].append(function)
            else:
                runs.append((file, [function]))
        return runs

    @property
    def files(self) -> list[str]:
        return sorted({file for file, _ in self.calls})

    @property
    def returns(self) -> list[str]:
        """The files the walk came back to after leaving them, once per return."""
        seen: set[str] = set()
        again = []
        for file, _ in self.stays:
            if file in seen:
                again.append(file)
            seen.add(file)
        return again

    def summary(self) -> str:
        return (
            f"{len(self.stays)} stays in {len(self.files)} files, {len(self.returns)} returns, "
            f"{self.gate_crossings} lease-gate crossings, ending at ECS {self.first_write}"
        )

    def text(self) -> str:
        lines = [self.summary()]
        lines += [
            f"  {number:2}. {file}: {', '.join(names)}" for number, (file, names) in enumerate(self.stays, 1)
        ]
        return "\n".join(lines)


def project_file(filename: str) -> str | None:
    """``filename`` relative to the repository when it is the project's code, else None."""
    if not filename.endswith(".py") or not filename.startswith("/"):
        return None
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] in (".venv", "tests"):
        return None
    return relative.as_posix()


def module_names(files: frozenset[str]) -> frozenset[str]:
    return frozenset(path.removesuffix(".py").replace("/", ".") for path in files)


def carries(value: Any, revision: str, opaque: frozenset[str] = frozenset(), hops: int = HOPS) -> bool:
    """Whether ``value`` is ``revision`` or holds it within ``hops`` steps; objects of the ``opaque``
    modules (and AWS clients) are not looked into."""
    seen: set[int] = set()

    def search(item: Any, left: int) -> bool:
        if isinstance(item, str):
            return item == revision
        if left == 0 or isinstance(item, PLAIN) or id(item) in seen or not _data(item, opaque):
            return False
        seen.add(id(item))
        if isinstance(item, dict):
            children: list[Any] = list(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            children = list(item)
        elif is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, each.name, None) for each in fields(item)]
        else:
            children = list(getattr(item, "__dict__", {}).values())
        return any(search(child, left - 1) for child in children[:64])

    return search(value, hops)


def _data(item: Any, opaque: frozenset[str]) -> bool:
    """Whether the revision may travel in ``item``: not in a boto3 client (how the deploy talks, not
    what it says), nor in the lease's objects (the gate, counted apart), which hold the clients and
    the lease's record of the revision."""
    if hasattr(type(item), "_make_api_call"):
        return False
    return type(item).__module__ not in opaque


def _arguments(frame: FrameType) -> list[Any]:
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
    return [frame.f_locals.get(name) for name in code.co_varnames[:count]]


def _made_by_the_tests(frame: FrameType) -> bool:
    caller: FrameType | None = frame.f_back
    while caller is not None:
        filename = caller.f_code.co_filename
        if "/tests/" in filename:
            return True
        if project_file(filename):
            return False
        caller = caller.f_back
    return False


def walk(run: Callable[[], object], revision: str, gate: frozenset[str] = GATE) -> Walk:
    """Run ``run`` (a ``parkbrake deploy`` of ``revision``) and record the revision's walk."""
    recorded = Walk()
    started = False
    opaque = module_names(gate)

    def profile(frame: FrameType, event: str, _: object) -> None:
        nonlocal started
        if event != "call" or recorded.first_write is not None:
            return
        code = frame.f_code
        file = project_file(code.co_filename)
        if not started:
            started = (file, code.co_name) == COMMAND
            if not started:
                return
        if code.co_name == "_make_api_call" and "botocore" in code.co_filename:
            client, operation = frame.f_locals.get("self"), str(frame.f_locals.get("operation_name"))
            service = client.meta.service_model.service_name if client is not None else ""
            if service == "ecs" and not operation.startswith(READ_PREFIXES) and not _made_by_the_tests(frame):
                recorded.first_write = operation
            return
        if file is None or code.co_name == "<module>":
            return
        try:
            on_walk = any(carries(argument, revision, opaque) for argument in _arguments(frame))
        except Exception as error:  # an argument that cannot be looked into: say so, not break the run
            recorded.unreadable.append(f"{file}:{code.co_name}: {error!r}")
            return
        if not on_walk:
            return
        if file in gate:
            recorded.gate_crossings += 1
        else:
            recorded.calls.append((file, code.co_name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(previous)
    return recorded
