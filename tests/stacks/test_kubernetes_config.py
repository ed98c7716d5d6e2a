"""The ``parkbrake:kubernetes`` section: the eks example parses, and every bad value is named by its path."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from ruamel.yaml import YAML

from guardrails.errors import InputError
from stacks.config import load_stack_config, parse_stack_config
from stacks.kubernetes_config import flavor_name, kubernetes_config, nodepool_name
from stacks.validation import ConfigError
from tests.conftest import REPO_ROOT


def eks() -> dict[str, Any]:
    document = YAML(typ="safe").load((REPO_ROOT / "Pulumi.eks.yaml").read_text())
    return copy.deepcopy(document["config"])


def problems_of(config: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        parse_stack_config("eks", config, "Pulumi.eks.yaml")
    return {problem.path: problem.message for problem in raised.value.problems}


def test_the_eks_example_has_two_tenants_two_gpu_types_and_the_aws_data_stores() -> None:
    config = load_stack_config("eks", REPO_ROOT)

    cluster = kubernetes_config(config)
    assert cluster.cluster_name == "parkbrake-eks"
    assert cluster.kubernetes_version == "1.33"
    assert set(cluster.tenants) == {"research", "product"}
    assert cluster.tenants["research"].namespaces == ("research", "research-batch")
    assert cluster.tenants["research"].gpu_quota == 24
    assert cluster.consolidate_after == timedelta(minutes=15)  # the agent's idle window
    assert len({pool.instance_type for pool in config.pools.values()}) >= 2
    assert config.database is not None
    assert config.cache is not None


def test_an_aws_stack_is_not_a_kubernetes_stack() -> None:
    dev = load_stack_config("dev", REPO_ROOT)

    assert dev.kubernetes is None
    with pytest.raises(InputError, match="no parkbrake:kubernetes section"):
        kubernetes_config(dev)


def test_every_bad_value_is_named_by_its_path() -> None:
    config = eks()
    section = config["parkbrake:kubernetes"]
    section["kubernetes_version"] = "1.29"  # no ValidatingAdmissionPolicy v1
    section["cluster_name"] = "not a name"
    section["tenants"]["product"]["namespaces"] = ["Product_NS"]
    section["tenants"]["research"]["gpu_quota"] = -1
    section["colour"] = "blue"

    problems = problems_of(config)

    assert "is not a supported version" in problems["kubernetes.kubernetes_version"]
    assert "is not an EKS cluster name" in problems["kubernetes.cluster_name"]
    assert "is not a namespace name" in problems["kubernetes.tenants.product.namespaces[0]"]
    assert "out of range" in problems["kubernetes.tenants.research.gpu_quota"]
    assert "unknown key" in problems["kubernetes.colour"]


def test_a_tenant_with_pools_needs_its_namespaces_and_a_namespace_has_one_tenant() -> None:
    config = eks()
    tenants = config["parkbrake:kubernetes"]["tenants"]
    tenants["product"]["namespaces"] = ["research"]
    problems = problems_of(config)
    assert "already tenant research's" in problems["kubernetes.tenants.product.namespaces"]

    del tenants["product"]
    assert "is required: the tenant has GPU pools" in problems_of(config)["kubernetes.tenants.product"]


def test_ec2_host_settings_are_refused_and_a_nightly_window_kept_on_a_kubernetes_stack() -> None:
    config = eks()
    config["parkbrake:hosts"] = {"agent_package": "parkbrake==0.1.0"}
    config["parkbrake:nightly"] = {"pool": "training", "cron": "0 1 * * *", "capacity": 1}

    problems = problems_of(config)

    assert "not used by a Kubernetes stack" in problems["hosts"]
    assert "nightly" not in problems  # the nightly pool's NodePool window (docs/kubernetes.md)


def test_names_the_controller_relies_on() -> None:
    assert flavor_name("research", "training") == "research-training"
    assert nodepool_name("research", "training") == "research-training"
