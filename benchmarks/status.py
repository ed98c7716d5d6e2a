"""``parkbrake status`` at 1,000 GPU hosts: client time, against a fixed recorded AWS response.

moto answers 1,000 hosts slowly, and its time is not ours. So the fleet is built in moto once, every
AWS answer ``status`` reads is recorded through a proxy, and the measured runs read those recorded
answers from a replay server in another process, which only looks them up: what is measured is the
client's own time (botocore's parsing included), and every run reads exactly the same response.

    python -m benchmarks.status [--hosts 1000] [--runs 5] [--tmux-capture status-80col.txt]

Figures: ``in-process`` is fleet_status + the text rendering at 80 columns with fresh clients (what
one run of the command does after Python started); ``command`` is the whole ``parkbrake status``
process (interpreter start and imports included), text at 80 columns and JSON. Each is given as CPU
time (user + system: the client's own work, which is what the goal is about) and wall time, which on
a busy machine also counts the time other processes held the CPU (the load average is printed).

``--tmux-capture FILE`` also runs ``parkbrake status`` in a real 80-column terminal (a detached tmux
pane, 80×50, against the same replay) and writes everything it printed, scrollback included, to FILE:
what an on-call engineer sees. It needs tmux on PATH.
"""

from __future__ import annotations

import argparse
import base64
import gc
import http.client
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from benchmarks.harness import AMI, REGION, Moto
from guardrails import tags

STACK = "dev"
TENANTS = ("research", "product", "vision", "speech", "search")
POOLS = ("training", "batch", "eval", "notebooks")
GOAL_SECONDS = 2.0
# Answers the recorded requests; one JSON line per request: key → status, headers, base64 body.
REPLAY_SERVER = r"""
import base64, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
answers = {}
for line in open(sys.argv[1]):
    item = json.loads(line)
    answers[item["key"]] = item
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        key = "|".join([self.command, self.path, self.headers.get("x-amz-target", ""), body.decode("utf-8", "replace")])
        item = answers.get(key)
        payload = base64.b64decode(item["body"]) if item else b"not recorded"
        self.send_response(item["status"] if item else 599)
        for name, value in (item["headers"] if item else []):
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
    do_GET = do_POST
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""
SKIPPED_HEADERS = {"content-length", "connection", "keep-alive", "transfer-encoding", "date", "server"}


def request_key(method: str, path: str, target: str, body: bytes) -> str:
    return "|".join([method, path, target, body.decode("utf-8", "replace")])


class Recorder:
    """A proxy on 127.0.0.1 in front of moto that keeps every answer, keyed by the request."""

    def __init__(self, upstream: str) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        target = urllib.parse.urlsplit(upstream)
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                connection.request(self.command, self.path, body=body, headers=headers)
                answer = connection.getresponse()
                payload = answer.read()
                kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in SKIPPED_HEADERS]
                key = request_key(self.command, self.path, self.headers.get("x-amz-target", ""), body)
                recorder.answers[key] = {
                    "key": key,
                    "status": answer.status,
                    "headers": kept,
                    "body": base64.b64encode(payload).decode(),
                }
                self.send_response(answer.status)
                for name, value in kept:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def save(self, path: Path) -> None:
        path.write_text("".join(json.dumps(item) + "\n" for item in self.answers.values()))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def seed(moto: Moto, hosts: int) -> None:
    """The demo stack (pools, services, schedules), then stand-alone GPU hosts up to ``hosts``:
    45 % past their cap, 3 without the managed tag, 2 % exempt, the rest within their caps."""
    from tests.cli.oncall.ops_fleet import demo_fleet

    moto.reset()
    clients = moto.clients(counted=False)
    demo_fleet.seed_fleet(
        lambda service: clients(service, REGION), stack=STACK, region=REGION, now=datetime.now(UTC)
    )
    ec2 = moto.backend("ec2")
    now = datetime.now(UTC).replace(tzinfo=None)
    for index in range(hosts - 4):  # the demo stack has four GPU hosts
        overdue, unmanaged, exempt = index % 20 < 9, index < 3, index % 50 == 49
        host_tags = {
            tags.MANAGED: "false" if unmanaged else "true",
            tags.STACK: STACK,
            tags.POOL: POOLS[index % len(POOLS)],
            tags.TENANT: TENANTS[index % len(TENANTS)],
            tags.MAX_RUNTIME: "2h",
            tags.REVISION: "bench",
        }
        if exempt:
            host_tags[tags.EXEMPT_UNTIL] = (datetime.now(UTC) + timedelta(hours=6)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
        reservation = ec2.run_instances(
            AMI, 1, None, [], instance_type="g5.xlarge" if index % 3 else "g5.12xlarge",
            is_instance_type_default=False, tags={"instance": host_tags},
        )  # fmt: skip
        for instance in reservation.instances:
            instance.launch_time = now - timedelta(minutes=150 if overdue and not exempt else 40)


def in_process_run(endpoint: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one status: fresh clients, every read, the text at 80 columns."""
    from rich.console import Console

    from cli.oncall.collector import collector_paused
    from cli.oncall.fleet.status import fleet_status
    from cli.oncall.fleet.status_view import print_status, select
    from guardrails.settings import settings_from_environment
    from lambdas import clients

    os.environ["AWS_ENDPOINT_URL"] = endpoint
    clients._models.cache_clear()  # fresh models, as a new process loads them (and fresh clients below)
    cpu, started = time.process_time(), time.perf_counter()
    with collector_paused():  # as the command runs
        report = fleet_status(
            stack=None, regions=[REGION], clients=clients.one_session_clients(),
            settings=settings_from_environment({"PARKBRAKE_REGIONS": REGION}), now=datetime.now(UTC),
        )  # fmt: skip
        print_status(Console(file=io.StringIO(), width=80), select(report, {}, "action"))
    timing = (time.process_time() - cpu, time.perf_counter() - started)
    if not report.hosts or report.errors:
        raise SystemExit(f"status read {len(report.hosts)} hosts, errors: {report.errors}")
    return timing


def command_run(endpoint: str, *arguments: str) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stdout) of one ``parkbrake status`` process."""
    environment = {**os.environ, "AWS_ENDPOINT_URL": endpoint, "COLUMNS": "80"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "parkbrake"), "status", "--regions", REGION, *arguments],
        capture_output=True, text=True, env=environment, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"parkbrake status failed ({done.returncode}): {done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, done.stdout


def tmux_capture(endpoint: str, path: Path) -> None:
    """``parkbrake status`` in an 80-column tmux pane; the pane's whole text (scrollback too) to ``path``."""
    folder = Path(tempfile.mkdtemp(prefix="parkbrake-status-tmux-"))
    config = folder / "tmux.conf"
    config.write_text("set -g history-limit 100000\nset -g remain-on-exit on\n")
    tmux = ["tmux", "-S", str(folder / "socket"), "-f", str(config)]
    command = " ".join(
        [
            f"AWS_ENDPOINT_URL={endpoint}",
            str(Path(sys.executable).parent / "parkbrake"),
            "status",
            "--regions",
            REGION,
        ]
    )
    subprocess.run([*tmux, "new-session", "-d", "-x", "80", "-y", "50", "-s", "status", command], check=True)
    try:
        for _ in range(600):  # the pane stays (remain-on-exit) once the command has ended
            panes = subprocess.run(
                [*tmux, "list-panes", "-t", "status", "-F", "#{pane_dead} #{pane_dead_status}"],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            dead, _, code = panes.stdout.strip().partition(" ")
            if dead == "1":
                break
            time.sleep(0.1)
        else:
            raise SystemExit("parkbrake status did not finish in the tmux pane within 60 s")
        text = subprocess.run(
            [*tmux, "capture-pane", "-p", "-t", "status", "-S", "-", "-E", "-"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if lines and lines[-1].startswith("Pane is dead"):  # tmux's own remain-on-exit line
        lines.pop()
    path.write_text("\n".join(lines).rstrip() + "\n")
    widest = max(len(line) for line in lines)
    print(f"tmux capture: {len(lines)} lines, widest {widest} columns, exit {code or '?'}, in {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--tmux-capture", type=Path, help="Also capture status in an 80-column tmux pane here."
    )
    options = parser.parse_args(argv)
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_REGION=REGION)
    os.environ.pop("PARKBRAKE_DATABASE_URL", None)
    moto = Moto()
    recorder = Recorder(moto.url)
    recording = Path(tempfile.mkdtemp(prefix="parkbrake-status-bench-")) / "answers.jsonl"
    try:
        seed(moto, options.hosts)
        in_process_run(recorder.url)  # records every answer status reads
        recorder.save(recording)
    finally:
        recorder.close()
        moto.close()
    replay = subprocess.Popen(
        [sys.executable, "-c", REPLAY_SERVER, str(recording)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert replay.stdout is not None
        endpoint = f"http://127.0.0.1:{replay.stdout.readline().strip()}"
        # moto's fleet stayed in this process's heap; a fresh process's collector would not walk it.
        gc.collect()
        gc.freeze()
        in_process = [in_process_run(endpoint) for _ in range(options.runs)]
        text = [command_run(endpoint) for _ in range(options.runs)]
        as_json = [command_run(endpoint, "--output", "json") for _ in range(options.runs)]
        if options.tmux_capture:
            tmux_capture(endpoint, options.tmux_capture)
    finally:
        replay.terminate()
        replay.wait(timeout=10)
    hosts = len(json.loads(as_json[0][2])["hosts"])
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(
        f"status at {hosts} GPU hosts, {len(recorder.answers)} recorded AWS answers replayed (moto excluded)"
    )
    print(f"load average while measuring: {load} (on {os.cpu_count()} CPUs); medians of {options.runs} runs")
    for label, runs in (
        ("in-process: reads + text at 80 columns", in_process),
        ("command: parkbrake status (text, 80 columns)", [item[:2] for item in text]),
        ("command: parkbrake status --output json", [item[:2] for item in as_json]),
    ):
        cpu = statistics.median(run[0] for run in runs)
        wall = statistics.median(run[1] for run in runs)
        verdict = "meets" if cpu < GOAL_SECONDS else "MISSES"
        print(
            f"  {label:<46} CPU {cpu:.2f} s, wall {wall:.2f} s ({verdict} the < {GOAL_SECONDS:.0f} s goal in CPU)"
        )


if __name__ == "__main__":
    main()
