"""Every rule of the pack, in the order verdicts are reported. Adding a rule is adding a module and a line here."""

from __future__ import annotations

from policies.rule import PolicyRule
from policies.rules import (
    cost_within_budgets,
    data_stores_encrypted_and_private,
    gpu_deployments_have_a_revision,
    gpu_hosts_have_a_cap,
    gpu_hosts_locked_down,
    gpu_jobs_carry_exec_time,
    gpu_node_pools_expire,
    gpu_pool_size_ceiling,
    gpu_queues_gated_by_budget,
    instance_types_allowed,
    names_fit_aws,
    no_unconditional_stop,
    public_endpoints_https_behind_waf,
    reaper_is_deployed,
    required_tags,
    spokes_forward_and_sweep,
)

RULES: tuple[PolicyRule, ...] = (
    gpu_hosts_have_a_cap.RULE,
    gpu_hosts_locked_down.RULE,
    reaper_is_deployed.RULE,
    spokes_forward_and_sweep.RULE,
    gpu_pool_size_ceiling.RULE,
    instance_types_allowed.RULE,
    required_tags.RULE,
    names_fit_aws.RULE,
    data_stores_encrypted_and_private.RULE,
    no_unconditional_stop.RULE,
    public_endpoints_https_behind_waf.RULE,
    gpu_node_pools_expire.RULE,
    gpu_queues_gated_by_budget.RULE,
    gpu_jobs_carry_exec_time.RULE,
    gpu_deployments_have_a_revision.RULE,
    cost_within_budgets.RULE,
)
