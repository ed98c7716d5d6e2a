"""Which AWS calls each guardrail Lambda makes, recorded with a botocore ``before-call`` hook.

A call is attributed to the guardrail whose handler module (``lambdas/<guardrail>.py``) or engine
(``lambdas/engines/<engine>.py``, :data:`ENGINES`) is outermost on the Python stack when botocore is
about to send it, or, for a call made on a worker thread (the stop
path's removals from groups), on the main thread's stack, where the handler waits for its workers;
calls a test makes itself (setting up hosts, reading results) have no handler on the stack and are
not counted. Loaded as a pytest plugin
(``-p tests.aws_call_recorder``) with ``PARKBRAKE_AWS_CALLS`` naming the JSON file to write at the end
of the session.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
GUARDRAILS = ("reaper", "deadline", "launcher", "meter", "budget", "reconciler")
# Each guardrail's engine: a test driving it below the handler makes the guardrail's calls all the same.
ENGINES = {
    "reaper": "sweeping",
    "deadline": "deadlines",
    "launcher": "launching",
    "meter": "metering",
    "budget": "budgeting",
    "reconciler": "reconciling",
}
HANDLER_MODULES = {str(REPO_ROOT / "lambdas" / f"{guardrail}.py"): guardrail for guardrail in GUARDRAILS} | {
    str(REPO_ROOT / "lambdas" / "engines" / f"{engine}.py"): guardrail
    for guardrail, engine in ENGINES.items()
}
OUTPUT_VARIABLE = "PARKBRAKE_AWS_CALLS"
RECORDED: dict[str, set[str]] = defaultdict(set)


def iam_action(model: Any) -> str:
    """``ec2:DescribeInstances`` from botocore's operation model (the service id is IAM's prefix)."""
    return f"{model.service_model.service_id.lower().replace(' ', '')}:{model.name}"


def record_call(model: Any, **_: Any) -> None:
    stack = traceback.extract_stack()
    if threading.current_thread() is not threading.main_thread():
        main = sys._current_frames().get(threading.main_thread().ident or 0)
        stack += traceback.extract_stack(main) if main is not None else []
    for frame in stack:
        guardrail = HANDLER_MODULES.get(frame.filename)
        if guardrail is not None:
            RECORDED[guardrail].add(iam_action(model))
            return


def observe(session: Any) -> None:
    """Record the calls of every client ``session`` makes."""
    session.events.register("before-call", record_call)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    output = os.environ.get(OUTPUT_VARIABLE)
    if output:
        Path(output).write_text(
            json.dumps({name: sorted(calls) for name, calls in RECORDED.items()}, indent=2)
        )
