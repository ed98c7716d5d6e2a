"""Every taggable resource says it is parkbrake's, which stack owns it and which revision deployed it;
accelerator hosts also say which pool they serve, who pays and how long they may run.

The guardrails find hosts by ``parkbrake:managed``, the ledger bills by ``parkbrake:tenant``, and the
CLI finds what a stack made by ``parkbrake:stack``: a missing tag silently takes a resource out of all
three.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from guardrails import tags
from policies.resources import INSTANCE, host_tags, is_accelerator_host, tags_of
from policies.rule import PolicyContext, PolicyRule, ResourceView, per_resource, stack_name

# The resource types parkbrake declares that accept tags (tests keep this in step with pulumi-aws and
# with what the example stacks declare). Scheduler schedules, role policies and attachments take none.
TAGGABLE_TYPES = frozenset({
    "aws:appautoscaling/target:Target",
    "aws:autoscaling/group:Group",
    "aws:cloudwatch/eventBus:EventBus",
    "aws:cloudwatch/eventRule:EventRule",
    "aws:cloudwatch/logGroup:LogGroup",
    "aws:cloudwatch/metricAlarm:MetricAlarm",
    "aws:dynamodb/table:Table",
    "aws:ec2/eip:Eip",
    "aws:ec2/instance:Instance",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/launchTemplate:LaunchTemplate",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/securityGroup:SecurityGroup",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/vpc:Vpc",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:ecr/repository:Repository",
    "aws:ecs/capacityProvider:CapacityProvider",
    "aws:ecs/cluster:Cluster",
    "aws:ecs/service:Service",
    "aws:ecs/taskDefinition:TaskDefinition",
    "aws:elasticache/cluster:Cluster",
    "aws:elasticache/parameterGroup:ParameterGroup",
    "aws:elasticache/replicationGroup:ReplicationGroup",
    "aws:elasticache/subnetGroup:SubnetGroup",
    "aws:elasticache/user:User",
    "aws:elasticache/userGroup:UserGroup",
    "aws:iam/instanceProfile:InstanceProfile",
    "aws:iam/policy:Policy",
    "aws:iam/role:Role",
    "aws:kms/key:Key",
    "aws:lambda/function:Function",
    "aws:lb/listener:Listener",
    "aws:lb/listenerRule:ListenerRule",
    "aws:lb/loadBalancer:LoadBalancer",
    "aws:lb/targetGroup:TargetGroup",
    "aws:rds/cluster:Cluster",
    "aws:rds/clusterInstance:ClusterInstance",
    "aws:rds/clusterParameterGroup:ClusterParameterGroup",
    "aws:rds/instance:Instance",
    "aws:rds/parameterGroup:ParameterGroup",
    "aws:rds/subnetGroup:SubnetGroup",
    "aws:s3/bucket:Bucket",
    "aws:s3/bucketObjectv2:BucketObjectv2",
    "aws:scheduler/scheduleGroup:ScheduleGroup",
    "aws:secretsmanager/secret:Secret",
    "aws:sns/topic:Topic",
    "aws:sqs/queue:Queue",
    "aws:ssm/parameter:Parameter",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:wafv2/webAcl:WebAcl",
})  # fmt: skip


def _tag_problems(found: dict[str, str], required: Iterable[str], stack: str, where: str) -> Iterator[str]:
    missing = [key for key in dict.fromkeys(required) if not found.get(key)]
    if missing:
        yield f"{where} lack {', '.join(missing)}"
    if found.get(tags.MANAGED, "true") != "true":
        yield f"{where}: {tags.MANAGED} is {found[tags.MANAGED]!r}; it must be 'true'"
    if found.get(tags.STACK, stack) != stack:
        yield f"{where}: {tags.STACK} is {found[tags.STACK]!r} but the resource belongs to stack {stack!r}"


def tag_problems(resource: ResourceView, context: PolicyContext) -> Iterator[str]:
    stack = stack_name(resource)
    gpu_host = is_accelerator_host(resource)
    if resource.type == INSTANCE and gpu_host:
        yield from _tag_problems(
            tags_of(resource), (*context.required_tags, *context.gpu_host_tags), stack, "its tags"
        )
        return
    yield from _tag_problems(tags_of(resource), context.required_tags, stack, "its tags")
    if gpu_host:
        launched = host_tags(resource)
        if launched is None:
            yield "has no tag specification for resourceType 'instance', so its hosts carry no tags"
        else:
            yield from _tag_problems(launched, context.gpu_host_tags, stack, "its hosts' tags")


RULE = PolicyRule(
    name="required-tags",
    description=(
        "Every taggable resource carries parkbrake:managed=true, parkbrake:stack and parkbrake:revision; "
        "accelerator hosts also carry parkbrake:pool, parkbrake:tenant and parkbrake:max-runtime."
    ),
    enforcement="mandatory",
    check=per_resource(TAGGABLE_TYPES, tag_problems),
    settings=("required_tags", "gpu_host_tags"),
)
