"""moto's IAM authorisation, switched on for one test: the caller an IAM user allowed to assume some
member accounts' roles and not others. moto applies authorisation once its server is told to
(``POST /moto-api/reset-auth``, moto/moto_api/_internal/responses.py) and then evaluates the user's
and the role's policies (moto/core/authorization.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import boto3

from lambdas.aws.assumed import AccountAccess, AccountSessions

HUB = "123456789012"  # moto's default account: the caller's
READ = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["ec2:Describe*", "ssm:*", "ecs:*", "autoscaling:Describe*",
                                       "scheduler:*", "sns:*", "elasticloadbalancing:Describe*",
                                       "sts:GetCallerIdentity"], "Resource": "*"}
    ],
}  # fmt: skip


def role_arn(account: str, name: str = "reader") -> str:
    return f"arn:aws:iam::{account}:role/{name}"


@contextmanager
def enforced_iam(
    server: str, spokes: Sequence[str], allowed: Sequence[str], *, caller_may: Sequence[str] = ()
) -> Iterator[dict[str, str]]:
    """Each of ``spokes`` has a ``reader`` role trusted by the hub that may read; the hub's caller
    (the credentials yielded) may assume ``allowed``'s readers only, and call ``caller_may``'s
    actions. Authorisation off after."""
    iam = boto3.client("iam")
    iam.create_user(UserName="oncall")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": [role_arn(a) for a in allowed]},
            *([{"Effect": "Allow", "Action": list(caller_may), "Resource": "*"}] if caller_may else []),
        ],
    }
    iam.put_user_policy(UserName="oncall", PolicyName="assume", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="oncall")["AccessKey"]
    sessions = AccountSessions()
    for account in spokes:
        spoke_iam = sessions.clients(AccountAccess(account, (role_arn(account, "admin"),)))("iam", None)
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:aws:iam::{HUB}:root"},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        spoke_iam.create_role(RoleName="reader", AssumeRolePolicyDocument=json.dumps(trust))
        spoke_iam.put_role_policy(RoleName="reader", PolicyName="read", PolicyDocument=json.dumps(READ))
    reset_auth(server, "0")
    try:
        yield {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}
    finally:
        reset_auth(server, "inf")


def reset_auth(server: str, count: str) -> None:
    request = urllib.request.Request(
        f"{server}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    urllib.request.urlopen(request, timeout=30).close()
