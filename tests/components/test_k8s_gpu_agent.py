"""GpuAgent under the offline engine: the NVML agent as a DaemonSet on GPU nodes, and its PodMonitor."""

from __future__ import annotations

from components.k8s.gpu_agent import GpuAgent, GpuAgentArgs
from stacks.offline import OfflineRun, run_offline

DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
POD_MONITOR = "kubernetes:monitoring.coreos.com/v1:PodMonitor"


def build(prometheus_operator: bool) -> OfflineRun:
    args = GpuAgentArgs(
        stack="eks", namespace="parkbrake", image="example/agent:1", revision="abc123",
        prometheus_operator=prometheus_operator,
    )  # fmt: skip
    return run_offline(lambda: GpuAgent("agent", args), stack="eks", region="us-east-1")


def test_agent_runs_on_parkbrake_gpu_nodes_only_tolerating_their_taint_and_reports_only() -> None:
    (daemon_set,) = build(prometheus_operator=False).of_type(DAEMON_SET)

    pod = daemon_set.inputs["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {"matchExpressions": [{"key": "parkbrake.dev/pool", "operator": "Exists"}]}
    (container,) = pod["containers"]
    # Karpenter's consolidation reclaims an idle node: the agent's shutdown is a no-op and it leaves no group.
    assert container["command"][:2] == ["parkbrake", "agent"]
    assert container["command"][container["command"].index("--shutdown-command") + 1] == "true"
    assert "--no-release-from-group" in container["command"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400}]
    assert "nvidia.com/gpu" not in container["resources"]["requests"]  # NVML without claiming a GPU


def test_pod_monitor_only_when_the_prometheus_operator_is_there() -> None:
    assert build(prometheus_operator=False).of_type(POD_MONITOR) == []
    (monitor,) = build(prometheus_operator=True).of_type(POD_MONITOR)
    assert monitor.inputs["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "parkbrake-agent"}
    }
    assert monitor.inputs["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
