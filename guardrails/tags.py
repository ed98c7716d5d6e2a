"""The tag keys of docs/architecture.md, spelled once."""

from __future__ import annotations

MANAGED = "parkbrake:managed"
STACK = "parkbrake:stack"
POOL = "parkbrake:pool"
TENANT = "parkbrake:tenant"
MAX_RUNTIME = "parkbrake:max-runtime"
EXEMPT_UNTIL = "parkbrake:exempt-until"
REVISION = "parkbrake:revision"
# Who is told about this host: an e-mail address or a chat handle (guardrails/owners.py says which).
OWNER = "parkbrake:owner"
# Beyond docs/architecture.md's contracts: what `parkbrake extend` records beside the exemption it sets.
EXTENDED_BY = "parkbrake:extended-by"
EXTENDED_AT = "parkbrake:extended-at"
EXTENSION_REASON = "parkbrake:extended-reason"
# Beyond docs/architecture.md's contracts: which service (and colour) an ECS service or target group belongs to.
SERVICE = "parkbrake:service"
COLOUR = "parkbrake:colour"
# Where `park --now` records the capacity it took away, so any engineer's `unpark --now` restores it.
PARKED_CAPACITY = "parkbrake:parked-capacity"
# On the Aurora cluster: the storage the stack plans for (Aurora grows storage by itself and bills it per
# GB-month, parked or not), so the estimate, which reads only declared resources, can price it.
STORAGE_GB = "parkbrake:storage-gb"
# On a GPU pool's group while `deploy` holds an extra host there, so a later deploy can remove it.
DEPLOY_SURGE = "parkbrake:deploy-surge"
# On an inference pool's hosts: the sweep rotates them at their lifetime instead of stopping them, and
# marks one whose replacement it asked for (the instant, ISO-8601 UTC).
SERVING = "parkbrake:serving"
ROTATING_SINCE = "parkbrake:rotating-since"
# On a task definition a deploy verified serving (the instant, ISO-8601 UTC): what `rollback` goes back to.
VERIFIED = "parkbrake:verified"
# On a guardrail Lambda whose clock reads the database only while accelerator hosts run
# (DATABASE_WHILE_HOSTS_RUN), so the estimate knows that clock lets a parked database pause.
DATABASE_USE = "parkbrake:database-use"
DATABASE_WHILE_HOSTS_RUN = "while-hosts-run"
# On a Karpenter node's instance (its EC2NodeClass sets it): how long past its cap the cluster has to
# reclaim it (terminationGracePeriod + one sweep interval) before the sweep stops it as the backstop.
RECLAIM_GRACE = "parkbrake:reclaim-grace"
# What Karpenter itself tags every instance it launches with (restricted: no EC2NodeClass may set them).
KARPENTER_NODEPOOL = "karpenter.sh/nodepool"
KARPENTER_NODECLAIM = "karpenter.sh/nodeclaim"

REQUIRED_ON_GPU_HOSTS = (MANAGED, STACK, POOL, TENANT, MAX_RUNTIME, REVISION)


def as_dict(tags: list[dict[str, str]] | None) -> dict[str, str]:
    """AWS's ``[{"Key": k, "Value": v}]`` as a plain mapping."""
    return {tag["Key"]: tag["Value"] for tag in tags or []}
