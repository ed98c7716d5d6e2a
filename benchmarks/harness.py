"""What the benchmarks run on: moto in this process behind a counting proxy, and Cloud Custodian.

Cloud Custodian pins an older boto3 than parkbrake's, so it runs from its own virtual environment
(``python -m venv /tmp/c7n-venv && /tmp/c7n-venv/bin/pip install c7n``, or ``PARKBRAKE_C7N_PYTHON``),
in one process kept warm that runs a policy for each line it reads.
"""

from __future__ import annotations

import json
import os
import subprocess
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
CUSTODIAN_PYTHON = Path(os.environ.get("PARKBRAKE_C7N_PYTHON", "/tmp/c7n-venv/bin/python"))
CUSTODIAN_LOG = Path("/tmp/parkbrake-bench-custodian.log")

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
        config = BotoConfig(retries={"mode": "adaptive", "max_attempts": 3})
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


class Custodian:
    """Cloud Custodian in its own environment (it pins a boto3 older than ours), one process kept warm."""

    def __init__(self, endpoint: str) -> None:
        if not CUSTODIAN_PYTHON.exists():
            raise SystemExit(
                f"Cloud Custodian not found at {CUSTODIAN_PYTHON}: python -m venv /tmp/c7n-venv && "
                "/tmp/c7n-venv/bin/pip install c7n (or set PARKBRAKE_C7N_PYTHON)"
            )
        environment = {
            **os.environ,
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": REGION,
        }
        self.process = subprocess.Popen(
            [str(CUSTODIAN_PYTHON), "-c", CUSTODIAN_WORKER, REGION, ACCOUNT],
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
