"""The policy pack's entry point, run by the Pulumi CLI: ``pulumi preview --policy-pack policies``.

Constructing the ``PolicyPack`` starts its gRPC server and serves until the CLI is done, so this module
is only ever run, never imported.
"""

from pulumi_policy import PolicyPack

from policies.pack import PACK_NAME, pack_policies

PolicyPack(name=PACK_NAME, policies=pack_policies())
