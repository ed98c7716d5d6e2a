"""Run reads side by side in daemon threads, so that Ctrl-C ends the command even while one of them
waits on the network (a thread pool's workers would keep the process alive until their call returns)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


def side_by_side(calls: Sequence[Callable[[], Any]], name: str) -> list[Any]:
    """Each call's result, in order; the first call's exception (by position) is raised."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as error:  # handed to the caller's thread
            errors[index] = error

    threads = [
        threading.Thread(target=run, args=(index,), name=f"{name}-{index}", daemon=True)
        for index in range(len(calls))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results
