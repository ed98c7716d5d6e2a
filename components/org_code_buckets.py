"""The StackSet's code buckets (``spokes: stackset``): one bucket per spoke region in the hub account,
holding the hub's code archive and dependency layer where the StackSet's template reads them.

Why a bucket per region: Lambda reads a function's code from a bucket in the function's own region,
and the bucket may be another account's (botocore ``lambda/2015-03-31/service-2.json``,
``FunctionCode.S3Bucket``: "An Amazon S3 bucket in the same Amazon Web Services Region as your
function. The bucket can be in a different Amazon Web Services account."). So the hub account keeps
``<code_bucket_prefix>-<region>`` in every spoke region, each declared through a provider of its region
pinned to the hub account, and every member account's spoke reads its own region's copy.

Each bucket is private (every public access blocked), versioned, encrypted with S3's own keys (SSE-S3:
a bucket encrypted with the account's ``aws/s3`` KMS key could not be read from another account, and a
key of our own would need its own policy for the organisation), and its policy lets the organisation's
accounts read the code and nothing else: ``s3:GetObject`` and ``s3:GetObjectVersion`` on the stack's
objects, for a principal of the organisation (``aws:PrincipalOrgID``). ``GetObjectVersion`` because the
template names each object's version (components/org_spoke_stackset.py), and reading a named version
needs it instead of ``GetObject`` (botocore ``s3/2006-03-01/service-2.json``, ``GetObject``: "If you
include a versionId in your request header, you must have the s3:GetObjectVersion permission to access
a specific version of an object.").

Unverified here: ``block_public_policy`` refuses a policy S3 judges public (Amazon S3 User Guide,
``access-control-block-public-access.html``, "The meaning of public"), and this one must not count as
public for the block to accept it. The list of non-public condition keys as the SDKs' text of
``PublicAccessBlockConfiguration`` gives it names ``aws:SourceAccount``, ``aws:SourceArn`` and others
but not ``aws:PrincipalOrgID``; moto does not judge it. The first ``pulumi up`` against AWS tells: a
refused policy fails the ``BucketPolicy`` with ``AccessDenied``, before any object or StackSet.

Why versions and not a fixed key alone: CloudFormation updates a function's code only when the
template's ``Code`` changes, so a new archive under the same key would never reach the spokes. Each
region's bucket numbers its versions itself, so the template holds them all in one mapping, looked up
by ``${AWS::Region}``, rather than in per-instance parameter overrides, which every instance
operation would have to carry, the ones automatic deployment starts on its own for an account that
joins an OU included: the template alone is always complete. A new archive is a new template, which
the StackSet rolls into every account.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from components.common import child_of, named_child_of
from components.org_spoke_stackset import CODE_ARCHIVES, code_bucket, code_key

CODE_BUCKETS_TOKEN = "parkbrake:org:CodeBuckets"
READ_ACTIONS = ("s3:GetObject", "s3:GetObjectVersion")


@dataclass
class OrgCodeBucketsArgs:
    stack: str
    hub_account: str  # the providers are pinned to it: a bucket never lands in another account
    org_id: str  # whose accounts may read the code
    bucket_prefix: str  # the buckets are <prefix>-<region>
    regions: Sequence[str]
    artifacts: Path  # the folder holding the archives (components/lambda_archive.py, package_dir)
    tags: Mapping[str, str]


def code_read_policy(bucket_arn: str, stack: str, org_id: str) -> dict[str, Any]:
    """The bucket's policy: the organisation's principals may read the stack's code objects, nothing more."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "OrganisationReadsCode",
                "Effect": "Allow",
                "Principal": "*",
                "Action": list(READ_ACTIONS),
                "Resource": f"{bucket_arn}/{code_key(stack, '*')}",
                "Condition": {"StringEquals": {"aws:PrincipalOrgID": org_id}},
            }
        ],
    }


class OrgCodeBuckets(pulumi.ComponentResource):
    """A private, versioned code bucket per region, the archives uploaded to each."""

    bucket_names: pulumi.Output[dict[str, str]]
    # region → column of CODE_ARCHIVES → the uploaded object's version id, for the template.
    versions: pulumi.Output[dict[str, dict[str, str]]]
    objects: list[aws.s3.BucketObjectv2]

    def __init__(
        self, name: str, args: OrgCodeBucketsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(CODE_BUCKETS_TOKEN, name, None, opts)
        self._args = args
        self.objects = []
        buckets: dict[str, pulumi.Output[str]] = {}
        versions: dict[str, dict[str, pulumi.Output[str]]] = {}
        for region in args.regions:
            buckets[region], versions[region] = self._region(name, region)
        self.bucket_names = pulumi.Output.from_input(buckets)  # type: ignore[arg-type]
        self.versions = pulumi.Output.from_input(versions)  # type: ignore[arg-type]
        self.register_outputs({"bucket_names": self.bucket_names, "versions": self.versions})

    def _region(self, name: str, region: str) -> tuple[pulumi.Output[str], dict[str, pulumi.Output[str]]]:
        """The region's bucket, its settings and policy, and the archives in it (their versions returned)."""
        args = self._args
        provider = aws.Provider(
            f"{name}-{region}", region=region, allowed_account_ids=[args.hub_account], opts=child_of(self)
        )
        bucket = aws.s3.Bucket(
            f"{name}-{region}",
            bucket=code_bucket(args.bucket_prefix, region),
            # The archives are rebuilt from the repository; nothing in the bucket outlives the stack.
            force_destroy=True,
            tags=dict(args.tags),
            opts=named_child_of(self, provider=provider),
        )
        in_region = child_of(self, provider=provider)
        public_access = aws.s3.BucketPublicAccessBlock(
            f"{name}-{region}",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=in_region,
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-{region}",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=in_region,
        )
        encryption = aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-{region}",
            bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "AES256"}}],
            opts=in_region,
        )
        read_policy = aws.s3.BucketPolicy(
            f"{name}-{region}",
            bucket=bucket.id,
            policy=bucket.arn.apply(lambda arn: json.dumps(code_read_policy(arn, args.stack, args.org_id))),
            # S3 refuses a policy while the public access block is being changed (OperationAborted).
            opts=child_of(self, provider=provider, depends_on=[public_access]),
        )
        versions = {}
        for column, archive in CODE_ARCHIVES.items():
            uploaded = aws.s3.BucketObjectv2(
                f"{name}-{region}-{column.lower()}",
                bucket=bucket.id,
                key=code_key(args.stack, archive),
                source=pulumi.FileAsset(str(args.artifacts / archive)),
                tags=dict(args.tags),
                # Uploaded once versioning and encryption hold, so the object has a version to name,
                # and once the organisation may read it: what waits for the objects may use them.
                opts=child_of(self, provider=provider, depends_on=[versioning, encryption, read_policy]),
            )
            self.objects.append(uploaded)
            versions[column] = uploaded.version_id
        return bucket.bucket, versions
