"""Offline, strict validation of rendered Kubernetes objects: no API server is needed (or available here).

- Built-in kinds (Namespace, Deployment, RBAC, …) against Kubernetes' own OpenAPI schemas for the stack's
  version, with the ``kubernetes-validate`` package in strict mode: an unknown field is an error.
- Kueue, Karpenter and Prometheus-operator kinds against their upstream CRDs, vendored in
  components/k8s/schemas/ (scripts/vendor_crd_schemas.py), converted to JSON Schema with unknown fields as
  errors wherever the CRD does not preserve them — the API server would drop such a field silently, so a
  typo or a field of another API version would otherwise vanish unseen.
- Their CEL rules (``x-kubernetes-validations``), each evaluated with ``cel-python`` at its place in the
  object. Rules that compare with the stored object (``oldSelf``: transition rules) cannot be judged for a
  new object and are skipped; a rule using a Kubernetes CEL extension that cel-python lacks (``quantity()``,
  ``format.*``, ``ip()``, …) is reported as not evaluated, never as passed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent.parent / "components" / "k8s" / "schemas"
# The ObjectMeta fields a client may set; the rest are the server's.
OBJECT_META = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
}


@dataclass
class ObjectVerdict:
    """One object's validation: ``errors`` empty means valid."""

    api_version: str
    kind: str
    name: str
    validated_by: str  # "kubernetes-validate 1.33" or the vendored CRD's source
    errors: list[str] = field(default_factory=list)
    cel_evaluated: int = 0
    cel_not_evaluated: list[str] = field(default_factory=list)  # "rule: why"

    @property
    def valid(self) -> bool:
        return not self.errors


@cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → the vendored document (``schema`` is the structural schema)."""
    found = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        document = json.loads(path.read_text())
        found[(f"{document['group']}/{document['version']}", document["kind"])] = document
    return found


def is_custom_kind(api_version: str, kind: str) -> bool:
    return (api_version, kind) in _crd_schemas()


def to_json_schema(node: dict[str, Any], *, root: bool = False) -> dict[str, Any]:
    """A CRD's structural schema as JSON Schema, strict: an object that lists its properties and does not
    preserve unknown fields admits no other property."""
    converted: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            converted[key] = {name: to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            converted[key] = to_json_schema(value)
        elif key in ("anyOf", "oneOf", "allOf"):
            # In a structural schema these only add value checks; their types live on the node itself.
            converted[key] = [to_json_schema(child) for child in value]
        elif key in ("type", "enum", "pattern", "required", "minimum", "maximum", "minLength", "maxLength",
                     "minItems", "maxItems", "minProperties", "maxProperties", "exclusiveMinimum",
                     "exclusiveMaximum", "additionalProperties"):  # fmt: skip
            converted[key] = value
    if node.get("x-kubernetes-int-or-string"):
        converted.pop("type", None)
        converted["anyOf"] = [*converted.get("anyOf", []), {"type": ["integer", "string"]}]
    if node.get("nullable") and "type" in converted:
        converted["type"] = [converted["type"], "null"]
    preserves = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-embedded-resource")
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not preserves
    ):
        converted["additionalProperties"] = False
    if root:
        properties = converted.setdefault("properties", {})
        properties["metadata"] = OBJECT_META
        properties.setdefault("apiVersion", {"type": "string"})
        properties.setdefault("kind", {"type": "string"})
        converted["additionalProperties"] = False
    return converted


@cache
def _crd_validator(api_version: str, kind: str) -> Any:
    from jsonschema import Draft202012Validator

    schema = to_json_schema(_crd_schemas()[(api_version, kind)]["schema"], root=True)
    return Draft202012Validator(schema)


def validate_object(body: dict[str, Any], kubernetes_version: str) -> ObjectVerdict:
    api_version, kind = str(body.get("apiVersion")), str(body.get("kind"))
    name = str((body.get("metadata") or {}).get("name", "?"))
    if is_custom_kind(api_version, kind):
        document = _crd_schemas()[(api_version, kind)]
        verdict = ObjectVerdict(api_version, kind, name, document["source"])
        for error in sorted(_crd_validator(api_version, kind).iter_errors(body), key=lambda e: list(e.path)):
            verdict.errors.append(f"{_where(error.absolute_path)}: {error.message}")
        if verdict.valid:
            _check_cel(document["schema"], body, "", verdict)
        return verdict
    import kubernetes_validate

    verdict = ObjectVerdict(
        api_version, kind, name, f"kubernetes-validate (Kubernetes {kubernetes_version}, strict)"
    )
    try:
        kubernetes_validate.validate(body, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as error:
        verdict.errors.append(f"{_where(error.absolute_path)}: {error.message}")
    except kubernetes_validate.SchemaNotFoundError as error:
        verdict.errors.append(
            f"no schema for {api_version} {kind} in Kubernetes {kubernetes_version}: {error}"
        )
    return verdict


def _where(path: Any) -> str:
    return ".".join(str(part) for part in path) or "(object)"


# --- CEL ---------------------------------------------------------------------------------------------


def _check_cel(schema: dict[str, Any], value: Any, where: str, verdict: ObjectVerdict) -> None:
    """Evaluate every CEL rule of ``schema`` at ``value``, then descend into what the object has."""
    for rule in schema.get("x-kubernetes-validations") or []:
        _evaluate_rule(rule, value, where, verdict)
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, child in value.items():
            child_schema = properties.get(key) or (extra if isinstance(extra, dict) else None)
            if child_schema is not None:
                _check_cel(child_schema, child, f"{where}.{key}" if where else key, verdict)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _check_cel(schema["items"], item, f"{where}[{index}]", verdict)


def _evaluate_rule(rule: dict[str, Any], value: Any, where: str, verdict: ObjectVerdict) -> None:
    import celpy

    text = str(rule["rule"])
    if "oldSelf" in text:
        verdict.cel_not_evaluated.append(
            f"{where or '(object)'}: {text} — a transition rule (needs the stored object)"
        )
        return
    try:
        environment = celpy.Environment()
        program = environment.program(environment.compile(text))
        result = program.evaluate({"self": celpy.json_to_cel(value)})
    except Exception as error:  # cel-python lacks a Kubernetes extension, or the rule's types
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        verdict.cel_not_evaluated.append(f"{where or '(object)'}: {text} — {reason[:120]}")
        return
    if isinstance(result, celpy.CELEvalError):
        verdict.cel_not_evaluated.append(f"{where or '(object)'}: {text} — {str(result)[:120]}")
        return
    verdict.cel_evaluated += 1
    if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
        message = rule.get("message") or f"failed {text}"
        verdict.errors.append(f"{where or '(object)'}: {message} (CEL rule {text})")


def validate_objects(objects: list[dict[str, Any]], kubernetes_version: str) -> list[ObjectVerdict]:
    return [validate_object(body, kubernetes_version) for body in objects]
