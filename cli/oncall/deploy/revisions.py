"""A deploy's revision and image: the revision text checked, the image pinned to its digest.

The one AWS call here is ECR's (a tag resolved to its digest, in the image's own region); what ECS
reports about revisions is ``cli/oncall/ecs.py``'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from guardrails.errors import InputError

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
ECR_HOST = re.compile(
    r"(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?"
)
REPOSITORY = re.compile(r"[\w.\-/:]+")
# A git commit (or a release name): it becomes a Docker label and an AWS tag value.
REVISION = re.compile(r"[0-9A-Za-z][0-9A-Za-z._\-]{0,127}")


def revision_text(text: str) -> str:
    """``text`` as a revision, or a clear error: it is written into labels and tags."""
    if not REVISION.fullmatch(text):
        raise InputError(f"{text!r} is not a revision; pass the git commit, e.g. --revision 3f2c1ab")
    return text


# -- Images ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageReference:
    repository: str  # registry host and path, without tag or digest
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageReference:
        name, _, digest = text.strip().partition("@")
        if digest and not DIGEST.fullmatch(digest):
            raise InputError(f"{text!r}: {digest!r} is not a sha256 digest (sha256: and 64 hex digits)")
        repository, tag = name, None
        last = name.rsplit("/", 1)[-1]
        if ":" in last:
            repository, tag = name.rsplit(":", 1)
        if not repository or not REPOSITORY.fullmatch(repository) or tag == "":
            raise InputError(f"{text!r} is not an image reference such as REGISTRY/REPO:TAG or REPO@sha256:…")
        return cls(repository, tag, digest or None)

    @property
    def ecr(self) -> tuple[str, str, str] | None:
        """(account, region, repository name) when the image lives in ECR."""
        host, _, path = self.repository.partition("/")
        match = ECR_HOST.fullmatch(host)
        return (match["account"], match["region"], path) if match and path else None


@dataclass(frozen=True)
class ResolvedImage:
    requested: str
    image: str  # what the task definition will name: REPO@sha256:… when pinned
    digest: str | None  # None only for a tag accepted with --allow-tag


def resolve_image(text: str, *, allow_tag: bool, ecr_in: Callable[[str], Any]) -> ResolvedImage:
    """Pin ``text`` to a digest: kept when given, looked up in ECR for an ECR tag.

    A tag outside ECR cannot be resolved here and may move under a running service, so it is
    refused unless ``allow_tag``. ``ecr_in(region)`` returns an ECR client for that region.
    """
    reference = ImageReference.parse(text)
    ecr = reference.ecr
    if ecr is None:
        if reference.digest:
            return ResolvedImage(text, f"{reference.repository}@{reference.digest}", reference.digest)
        if allow_tag:
            return ResolvedImage(text, text, None)
        raise InputError(
            f"{text} is a mutable tag without a digest, and only ECR tags can be resolved to one; "
            f"deploy {reference.repository}@sha256:…, push the image to ECR, or pass --allow-tag"
        )
    account, region, repository = ecr
    image_id = (
        {"imageDigest": reference.digest} if reference.digest else {"imageTag": reference.tag or "latest"}
    )
    client = ecr_in(region)
    try:
        details = client.describe_images(registryId=account, repositoryName=repository, imageIds=[image_id])
    except (client.exceptions.ImageNotFoundException, client.exceptions.RepositoryNotFoundException) as error:
        raise InputError(f"{text}: {error.response['Error']['Message']}") from None
    digest = details["imageDetails"][0]["imageDigest"]
    return ResolvedImage(text, f"{reference.repository}@{digest}", digest)
