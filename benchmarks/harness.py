"""What the benchmarks run on: moto in this process behind a counting proxy, and Cloud Custodian.

Cloud Custodian pins its own boto3 and botocore, so it never enters the project's environment: the
benchmark makes it a virtual environment of its own, ``.bench-venvs/c7n`` (gitignored), on first use
(``python -m venv`` and ``pip install c7n``; ``PARKBRAKE_C7N_PYTHON`` names another interpreter
instead), and runs it as a subprocess: one process kept warm that runs a policy for each line it reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from guardrails import tags
from lambdas.aws.environment import ClientFactory
from tests.aws_fault_proxy import FaultProxy

ACCOUNT, REGION, AMI, STACK = "123456789012", "us-east-1", "ami-12345678", "bench"
# A managed training host's tags, as the stack's launch templates give them.
GPU_HOST_TAGS = {
    tags.MANAGED: "true",
    tags.STACK: STACK,
    tags.POOL: "training",
    tags.TENANT: "research",
    tags.MAX_RUNTIME: "90m",
    tags.REVISION: "bench",
}
BASELINE_CAP = timedelta(minutes=90)
REPO_ROOT = Path(__file__).resolve().parent.parent
CUSTODIAN_VENV = REPO_ROOT / ".bench-venvs" / "c7n"
# The release the published figures were measured with; a newer one may page or batch differently.
CUSTODIAN_REQUIREMENT = "c7n==0.9.53"
CUSTODIAN_LOG = Path("/tmp/parkbrake-bench-custodian.log")
# moto renders 15-50 ms of XML per listed host: a page of 1,000 on a loaded machine outlasts botocore's
# default 60 s read timeout, so both tools' clients wait this long.
READ_TIMEOUT_S = 600

CUSTODIAN_POLICY: dict[str, Any] = {
    "name": "gpu-uptime-cap",
    "resource": "ec2",
    "query": [{"instance-state-name": "running"}],
    "filters": [
        {"type": "value", "key": "InstanceType", "op": "regex", "value": "^(p|g|gr|trn|inf|dl|f|vt)[0-9].*"},
        {"type": "instance-uptime", "op": "greater-than", "days": BASELINE_CAP / timedelta(days=1)},
    ],
    "actions": ["stop"],
}


def custodian_policy(pools: tuple[str, ...] | None) -> dict[str, Any]:
    """The uptime policy, limited to hosts of ``pools`` by their ``parkbrake:pool`` tag (None: every GPU host)."""
    if pools is None:
        return CUSTODIAN_POLICY
    pool_filter = {"type": "value", "key": "tag:parkbrake:pool", "op": "in", "value": list(pools)}
    return {**CUSTODIAN_POLICY, "filters": [*CUSTODIAN_POLICY["filters"], pool_filter]}


# Runs inside Cloud Custodian's own virtual environment: one policy run per line read from stdin.
CUSTODIAN_WORKER = """
import json, sys, time
import botocore.config
# moto renders 15-50 ms of XML per listed host: a page of 1,000 on a loaded machine outlasts botocore's
# 60 s read timeout, so both tools wait as long as moto takes (READ_TIMEOUT_S).
botocore.config.Config.OPTION_DEFAULTS["read_timeout"] = int(sys.argv[3])
from c7n.config import Config
from c7n.policy import Policy
from c7n.provider import clouds
from c7n.resources import load_resources
load_resources(("aws.ec2",))
provider = clouds["aws"]()
conf = provider.initialize(Config.empty(region=sys.argv[1], regions=[sys.argv[1]], output_dir="/tmp/c7n-bench",
                                        cache="", cache_period=0, account_id=sys.argv[2]))
for line in sys.stdin:
    started = time.perf_counter()
    policy = Policy(json.loads(line), conf, session_factory=provider.get_session_factory(conf))
    policy.validate()
    stopped = [r["InstanceId"] for r in policy.run()]
    print(json.dumps({"ids": stopped, "seconds": time.perf_counter() - started}), flush=True)
"""


class Moto:
    """moto in this process: its server for the code under test, its backends for the world."""

    def __init__(self, *, serial_upstream: bool = False) -> None:
        from moto.server import ThreadedMotoServer

        # moto scans its ~1,300 default AMIs for every instance it launches; this account needs none.
        os.environ["MOTO_EC2_LOAD_DEFAULT_AMIS"] = "false"
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.url = f"http://{host}:{port}"
        self.proxy = FaultProxy(self.url, serial_upstream=serial_upstream).__enter__()

    def reset(self) -> None:
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")).close()
        self.proxy.clear()

    def backend(self, service: str) -> Any:
        from moto.backends import get_backend

        backends: Any = get_backend(service)  # type: ignore[call-overload]  # a runtime service name
        return backends[ACCOUNT][REGION]

    def clients(self, *, counted: bool) -> ClientFactory:
        endpoint = self.proxy.url if counted else self.url
        config = BotoConfig(retries={"mode": "adaptive", "max_attempts": 3}, read_timeout=READ_TIMEOUT_S)
        made: dict[str, Any] = {}

        def make(service: str, region: str | None) -> Any:
            if service not in made:
                session: Any = boto3.session.Session()
                made[service] = session.client(
                    service,
                    region_name=region or REGION,
                    endpoint_url=endpoint,
                    config=config,
                    aws_access_key_id="bench",
                    aws_secret_access_key="bench",
                )
            return made[service]

        return make

    def close(self) -> None:
        self.proxy.__exit__(None, None, None)
        self.server.stop()


def custodian_python() -> Path:
    """Cloud Custodian's interpreter: ``PARKBRAKE_C7N_PYTHON``, else its own virtual environment under
    ``.bench-venvs/``, made (once) with the ordinary clients; never the project's environment."""
    named = os.environ.get("PARKBRAKE_C7N_PYTHON")
    if named:
        if not Path(named).exists():
            raise SystemExit(f"PARKBRAKE_C7N_PYTHON={named} does not exist; unset it to use {CUSTODIAN_VENV}")
        return Path(named)
    python = CUSTODIAN_VENV / "bin" / "python"
    installed = CUSTODIAN_VENV / ".installed"  # written last: a half-made environment is made again
    if not installed.exists():
        print(f"making Cloud Custodian's environment {CUSTODIAN_VENV} ({CUSTODIAN_REQUIREMENT})", flush=True)
        # The interpreter under this one's virtual environment: the new one inherits nothing from it.
        base = Path(getattr(sys, "_base_executable", sys.executable))
        subprocess.run([str(base), "-m", "venv", "--clear", str(CUSTODIAN_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", CUSTODIAN_REQUIREMENT], check=True)
        installed.write_text(CUSTODIAN_REQUIREMENT + "\n")
    return python


class Custodian:
    """Cloud Custodian in its own environment (it pins a boto3 older than ours), one process kept warm."""

    def __init__(self, endpoint: str) -> None:
        python = custodian_python()
        environment = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": REGION,
        }
        self.process = subprocess.Popen(
            [str(python), "-c", CUSTODIAN_WORKER, REGION, ACCOUNT, str(READ_TIMEOUT_S)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=CUSTODIAN_LOG.open("w"),
            text=True,
            env=environment,
        )
        if self.process.stdin is None or self.process.stdout is None:
            raise RuntimeError("could not talk to Cloud Custodian's worker")
        self.requests, self.answers = self.process.stdin, self.process.stdout

    def run(self, policy: dict[str, Any]) -> tuple[list[str], float]:
        self.requests.write(json.dumps(policy) + "\n")
        self.requests.flush()
        answer = self.answers.readline()
        if not answer:
            raise RuntimeError(f"Cloud Custodian's worker exited; its log is {CUSTODIAN_LOG}")
        result = json.loads(answer)
        return list(result["ids"]), float(result["seconds"])

    def close(self) -> None:
        self.requests.close()
        self.process.wait(timeout=30)
