"""The StackSet's code buckets under the mock engine (``spokes: stackset``): a private, versioned,
encrypted bucket per spoke region in the hub account, each through its region's provider; its policy,
decided by AWS's documented rules (tests/iam_evaluation.py) and checked by parliament, lets the
organisation read the code and nothing else; the uploaded objects are the keys and versions the
template names, and the StackSet and its instances wait for them."""

from __future__ import annotations

import functools
import json
from typing import Any

import parliament
import pytest

from components.lambda_archive import CODE_ARCHIVE, DEPENDENCY_LAYER, package_dir
from components.org_code_buckets import OrgCodeBuckets, OrgCodeBucketsArgs, code_read_policy
from components.org_spoke_parts import SpokeArgs
from components.org_spoke_stackset import (
    CODE_VERSIONS,
    OrgSpokeStackSet,
    OrgSpokeStackSetArgs,
    TemplateArgs,
    template_body,
)
from stacks.offline import OfflineRun, RegisteredResource, run_offline
from tests.components.org_build import HUB_ACCOUNT, HUB_REGION, TAGS, org_config, org_run
from tests.iam_evaluation import Request, decide

ORG_ID = "o-a1b2c3d4e5"
REGIONS = ["us-east-1", "us-west-2", "eu-west-1"]
PREFIX = "parkbrake-org-code-111111111111"
BUCKET = "aws:s3/bucket:Bucket"
OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"
POLICY = "aws:s3/bucketPolicy:BucketPolicy"
PROVIDER = "pulumi:providers:aws"
STACK_SET = "aws:cloudformation/stackSet:StackSet"
INSTANCE = "aws:cloudformation/stackSetInstance:StackSetInstance"
MEMBER_ROLE = "arn:aws:iam::222222222222:role/stacksets-exec-0123456789abcdef"


@functools.cache
def hub_run(sweep: str = "spoke") -> OfflineRun:
    """The hub stack as Pulumi.org.yaml declares it, with a StackSet in three regions whose spokes
    run their own functions (``sweep: spoke``): the only form that reads code."""
    return org_run(org_config(spokes="stackset", sweep=sweep, regions=REGIONS))


def region_of(run: OfflineRun, resource: RegisteredResource) -> str:
    (provider,) = [p for p in run.of_type(PROVIDER) if p.urn == resource.provider]
    assert json.loads(provider.inputs["allowedAccountIds"]) == [HUB_ACCOUNT]
    return str(provider.inputs["region"])


def stack_set_template(run: OfflineRun) -> dict[str, Any]:
    (stack_set,) = run.of_type(STACK_SET)
    return dict(json.loads(stack_set.inputs["templateBody"]))


def test_a_private_versioned_encrypted_bucket_per_spoke_region_through_its_regions_provider() -> None:
    run = hub_run()
    buckets = {region_of(run, bucket): bucket for bucket in run.of_type(BUCKET)}
    assert sorted(buckets) == sorted(REGIONS)
    for region, bucket in buckets.items():
        assert bucket.inputs["bucket"] == f"{PREFIX}-{region}"
        assert bucket.inputs["tags"]["parkbrake:stack"] == "org"
        settings = {
            r.type.split(":")[-1]: r
            for r in run.resources
            if r.name == bucket.name and r.type.startswith("aws:s3/") and r is not bucket
        }
        assert {
            key: settings["BucketPublicAccessBlock"].inputs[key] for key in PUBLIC_ACCESS
        } == dict.fromkeys(PUBLIC_ACCESS, True)
        assert settings["BucketVersioning"].inputs["versioningConfiguration"] == {"status": "Enabled"}
        (rule,) = settings["BucketServerSideEncryptionConfiguration"].inputs["rules"]
        assert rule["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
        for setting in settings.values():
            assert region_of(run, setting) == region
        # S3 refuses a policy while the public access block changes: the policy waits for it.
        assert settings["BucketPublicAccessBlock"].urn in settings["BucketPolicy"].dependencies
        # and the archives wait for versioning, encryption and the organisation's read
        for uploaded in (o for o in run.of_type(OBJECT) if o.name.startswith(f"{bucket.name}-")):
            waits_for = {
                settings[kind].urn
                for kind in ("BucketVersioning", "BucketServerSideEncryptionConfiguration", "BucketPolicy")
            }
            assert waits_for <= set(uploaded.dependencies), uploaded.name


PUBLIC_ACCESS = ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")


def test_each_bucket_policy_lets_the_organisation_read_the_stacks_code_and_nothing_else() -> None:
    run = hub_run()
    for policy in run.of_type(POLICY):
        region = region_of(run, policy)
        document = json.loads(policy.inputs["policy"])
        assert document == code_read_policy(f"arn:aws:s3:::{PREFIX}-{region}", "org", ORG_ID)
        code = f"arn:aws:s3:::{PREFIX}-{region}/parkbrake/org/{CODE_ARCHIVE}"
        member = {"aws:PrincipalOrgID": ORG_ID}
        decided = {
            (action, resource, org): decide(
                Request(action, resource, MEMBER_ROLE, {"aws:PrincipalOrgID": org} if org else {}),
                [],
                [document],
            )
            for action in ("s3:GetObject", "s3:GetObjectVersion", "s3:PutObject", "s3:DeleteObject")
            for resource in (code, f"arn:aws:s3:::{PREFIX}-{region}/parkbrake/prod/{CODE_ARCHIVE}")
            for org in (ORG_ID, "o-zzzzzzzzzz", None)
        }
        allowed = {key for key, decision in decided.items() if decision == "Allow"}
        assert allowed == {("s3:GetObject", code, ORG_ID), ("s3:GetObjectVersion", code, ORG_ID)}
        assert decide(Request("s3:GetObject", code, MEMBER_ROLE, member), [], [document]) == "Allow"


def test_parliament_finds_nothing_wrong_with_the_bucket_policy_and_would_notice_a_misspelt_action() -> None:
    document = code_read_policy(f"arn:aws:s3:::{PREFIX}-us-east-1", "org", ORG_ID)
    assert parliament.analyze_policy_string(json.dumps(document)).findings == []
    document["Statement"][0]["Action"].append("s3:GetObjectVerison")
    issues = {finding.issue for finding in parliament.analyze_policy_string(json.dumps(document)).findings}
    assert "UNKNOWN_ACTION" in issues


def test_the_uploaded_objects_are_what_the_template_reads_in_every_region() -> None:
    run = hub_run("spoke")
    template = stack_set_template(run)
    code = [
        resource["Properties"].get("Code") or resource["Properties"]["Content"]
        for resource in template["Resources"].values()
        if resource["Type"] in ("AWS::Lambda::Function", "AWS::Lambda::LayerVersion")
    ]
    assert code
    referenced_keys = {reference["S3Key"] for reference in code}
    assert referenced_keys == {f"parkbrake/org/{CODE_ARCHIVE}", f"parkbrake/org/{DEPENDENCY_LAYER}"}
    buckets = {region_of(run, bucket): bucket.inputs["bucket"] for bucket in run.of_type(BUCKET)}
    for reference in code:
        for region in REGIONS:
            assert reference["S3Bucket"]["Fn::Sub"].replace("${AWS::Region}", region) == buckets[region]
    uploaded: dict[str, set[str]] = {}
    for uploaded_object in run.of_type(OBJECT):
        uploaded.setdefault(region_of(run, uploaded_object), set()).add(uploaded_object.inputs["key"])
        assert uploaded_object.inputs["source"].path.endswith(
            uploaded_object.inputs["key"].removeprefix("parkbrake/org/")
        )
    assert uploaded == dict.fromkeys(REGIONS, referenced_keys)
    versions = template["Mappings"][CODE_VERSIONS]
    assert sorted(versions) == sorted(REGIONS)
    # every region's bucket numbers its own versions: no two regions share one
    assert len({version for columns in versions.values() for version in columns.values()}) == 2 * len(REGIONS)


def test_the_stack_set_and_its_instances_wait_for_every_uploaded_object() -> None:
    run = hub_run()
    objects = {uploaded.urn for uploaded in run.of_type(OBJECT)}
    assert len(objects) == 2 * len(REGIONS)
    waiting = run.of_type(STACK_SET) + run.of_type(INSTANCE)
    assert len(waiting) == 1 + len(REGIONS)
    for resource in waiting:
        assert objects <= set(resource.dependencies), resource.name


def test_the_template_names_the_version_each_regions_upload_returned() -> None:
    """Component and StackSet alone: the versions the buckets' uploads return are the template's."""
    returned: list[dict[str, dict[str, str]]] = []
    template = TemplateArgs(SpokeArgs("org", HUB_ACCOUNT, HUB_REGION), PREFIX, TAGS)

    def program() -> None:
        code = OrgCodeBuckets(
            "spoke-code",
            OrgCodeBucketsArgs("org", HUB_ACCOUNT, ORG_ID, PREFIX, REGIONS[:2], package_dir("org"), TAGS),
        )
        code.versions.apply(returned.append)
        OrgSpokeStackSet(
            "spokes",
            OrgSpokeStackSetArgs(
                template, ["ou-ab12-cdef3456"], REGIONS[:2], TAGS, code.versions, code.objects
            ),
        )

    run = run_offline(program, stack="org", region=HUB_REGION)
    (versions,) = returned
    assert sorted(versions) == REGIONS[:2]
    assert all(set(columns) == {"Code", "Layer"} for columns in versions.values())
    assert stack_set_template(run)["Mappings"][CODE_VERSIONS] == versions
    code_buckets = run.named("parkbrake:org:CodeBuckets", "spoke-code")
    assert {child.type for child in run.children_of(code_buckets)} >= {BUCKET, OBJECT, POLICY, PROVIDER}


def test_a_template_without_the_code_of_a_region_it_deploys_to_is_refused() -> None:
    template = TemplateArgs(SpokeArgs("org", HUB_ACCOUNT, HUB_REGION), PREFIX, TAGS)
    versions = {"us-east-1": {"Code": "v1", "Layer": "v2"}}
    with pytest.raises(ValueError, match="no code versions for us-west-2: upload the code to every region"):
        template_body(template, versions, ["us-east-1", "us-west-2"])
    body = json.loads(template_body(template, versions, ["us-east-1"]))
    assert body["Mappings"][CODE_VERSIONS] == versions
    # without versions (a template rendered for a test) the keys alone, no mapping
    assert "Mappings" not in json.loads(template_body(template, {}, ["us-east-1"]))


def test_the_stacks_form_declares_no_code_bucket() -> None:
    run = org_run(org_config(spokes="stacks"))
    # each spoke's functions take their archives from Pulumi directly (components/org_spoke.py)
    assert not run.of_type(BUCKET)
    assert not run.of_type("parkbrake:org:CodeBuckets")


def test_central_spokes_run_no_function_so_no_code_bucket_is_made() -> None:
    run = hub_run("central")
    template = stack_set_template(run)
    kinds = {resource["Type"] for resource in template["Resources"].values()}
    assert run.of_type(BUCKET) == []
    assert not kinds & {"AWS::Lambda::Function", "AWS::Lambda::LayerVersion"}
