"""RBAC for the FAKE API server (tests/cli/k8s/fake_api_server.py): a request the rendered roles do not
grant answers 403, and every grant a request used is counted, so a test can fail on a forbidden request
and on a grant no request needs (the counterpart of the IAM permission test on AWS).

A model of Kubernetes' RBAC authorizer, rule by rule (kubernetes v1.33, the files named):

- A request's attributes come from its method and path
  (``staging/src/k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``): ``/api/v1/…`` is the core
  group ``""``, ``/apis/<group>/<version>/…`` a named one; ``namespaces/<ns>/<resource>[/<name>[/<sub>]]``
  is namespaced; GET on an object is ``get``, on a collection ``list``, with ``watch=1|true`` ``watch``;
  POST ``create``, PUT ``update``, PATCH ``patch``, DELETE ``delete`` (``deletecollection`` without a name).
- A rule allows a request when its verbs, API groups, resources and resource names all match
  (``pkg/apis/rbac/v1/evaluation_helpers.go``: ``VerbMatches``, ``APIGroupMatches``, ``ResourceMatches`` —
  the resource is ``<resource>/<subresource>`` for a subresource, so a grant on ``workloads`` does not
  cover ``workloads/status`` — and ``ResourceNameMatches``, where no names means any name).
- A ClusterRole bound by a ClusterRoleBinding grants in every namespace and on cluster-scoped objects; a
  Role (or a ClusterRole) bound by a RoleBinding grants only in the binding's namespace
  (``plugin/pkg/auth/authorizer/rbac/rbac.go``, ``pkg/registry/rbac/validation/rule.go``
  ``VisitRulesFor``). RBAC only allows: there are no deny rules.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

VERB_OF_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    api_group: str
    resource: str  # with its subresource: "workloads/status"
    namespace: str  # "" for cluster-scoped objects and requests across namespaces
    name: str

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.api_group or 'core'}/{self.resource}{where}"


def request_attributes(method: str, path: str) -> RequestAttributes:
    """What RBAC sees of a request (requestinfo.go); a ValueError for a path that names no resource."""
    parts = urlsplit(path)
    segments = [segment for segment in parts.path.split("/") if segment]
    if segments[:1] == ["api"] and len(segments) >= 3:
        group, rest = "", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 4:
        group, rest = segments[1], segments[3:]
    else:
        raise ValueError(f"{path} names no resource")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method in ("GET", "HEAD"):
        watching = parse_qs(parts.query).get("watch", [""])[0] in ("1", "true")
        verb = "get" if name else "watch" if watching else "list"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = VERB_OF_METHOD[method]
    return RequestAttributes(verb, group, resource, namespace, name)


@dataclass(frozen=True)
class Grant:
    """One (API group, resource, verb) of one rule, and where its binding grants it ("": everywhere)."""

    role: str
    namespace: str
    api_group: str
    resource: str
    verb: str
    names: tuple[str, ...] = ()

    def allows(self, request: RequestAttributes) -> bool:
        """evaluation_helpers.go, for one group, resource and verb of a rule."""
        if self.namespace and request.namespace != self.namespace:
            return False
        subresource = request.resource.partition("/")[2]
        resource_matches = self.resource in ("*", request.resource) or (
            bool(subresource) and self.resource == f"*/{subresource}"
        )
        return (
            self.verb in ("*", request.verb)
            and self.api_group in ("*", request.api_group)
            and resource_matches
            and (not self.names or request.name in self.names)
        )

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.role}: {self.verb} {self.api_group or 'core'}/{self.resource}{where}"


def grants_of(role: Mapping[str, Any], namespace: str = "") -> list[Grant]:
    """Every (group, resource, verb) a role's rules grant, bound cluster-wide ("") or in ``namespace``."""
    name = str(role["metadata"]["name"])
    return [
        Grant(name, namespace, group, resource, verb, tuple(rule.get("resourceNames") or ()))
        for rule in role.get("rules") or []
        for group in rule.get("apiGroups") or []
        for resource in rule.get("resources") or []
        for verb in rule.get("verbs") or []
    ]


def bound_grants(objects: Iterable[Mapping[str, Any]], service_account: str, namespace: str) -> list[Grant]:
    """The grants the rendered objects give ``namespace``/``service_account``: each (Cluster)RoleBinding
    naming it as a subject, with the role it refers to (rbac.go ``VisitRulesFor``)."""
    objects = list(objects)
    roles = {(body["kind"], body["metadata"].get("namespace", ""), body["metadata"]["name"]): body
             for body in objects if body["kind"] in ("ClusterRole", "Role")}  # fmt: skip
    grants: list[Grant] = []
    for binding in objects:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
        if subject not in binding.get("subjects") or []:
            continue
        bound_in = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        reference = binding["roleRef"]
        role_namespace = bound_in if reference["kind"] == "Role" else ""
        grants += grants_of(roles[(reference["kind"], role_namespace, reference["name"])], bound_in)
    return grants


class Authorizer:
    """The fake's RBAC: :meth:`authorize` answers as the API server would for ``grants``, and records
    what was allowed, what was forbidden, and which grants were used."""

    def __init__(self, grants: Sequence[Grant]) -> None:
        self.grants = list(grants)
        self.allowed: list[RequestAttributes] = []
        self.forbidden: list[RequestAttributes] = []
        self.used: set[Grant] = set()
        self.lock = threading.Lock()

    def authorize(self, method: str, path: str) -> bool:
        request = request_attributes(method, path)
        matching = [grant for grant in self.grants if grant.allows(request)]
        with self.lock:
            (self.allowed if matching else self.forbidden).append(request)
            self.used.update(matching)
        return bool(matching)

    def unused(self) -> list[str]:
        return sorted(str(grant) for grant in self.grants if grant not in self.used)
