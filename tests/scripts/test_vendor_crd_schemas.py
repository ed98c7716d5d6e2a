"""The CRD reader of scripts/vendor_crd_schemas.py: ruamel.yaml read with YAML 1.1 resolution, so a CRD
parses as Kubernetes (and the PyYAML the script used before) reads it, and the vendored schemas stay the
same bytes when the script is run again."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]

SAMPLE_CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    schema:
      openAPIV3Schema:
        description: prose that is dropped
        type: object
        properties:
          mode:
            type: string
            enum: ["On", "Off"]
          legacy:
            enum: [on, off, yes, no]
          mask:
            default: 010
            maximum: 0777
          size:
            type: integer
            minimum: 1
            maximum: 1_000
          ratio:
            type: number
            maximum: 1.5e+3
          name:
            type: string
            pattern: '^[a-z]([-a-z0-9]*[a-z0-9])?$'
            x-kubernetes-validations:
            - rule: "self.size() <= 63"
              message: |
                name is at most
                63 characters
              reason: FieldValueInvalid
        required: [mode]
"""


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vendor_crd_schemas", REPO_ROOT / "scripts" / "vendor_crd_schemas.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_imports_no_undeclared_yaml_library() -> None:
    tree = ast.parse((REPO_ROOT / "scripts" / "vendor_crd_schemas.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "yaml" not in imported
    assert "ruamel.yaml" in imported


def test_a_crd_reads_with_yaml_1_1_scalars() -> None:
    crd = script().load_crd(SAMPLE_CRD)
    properties = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert properties["mode"]["enum"] == ["On", "Off"]
    assert properties["legacy"]["enum"] == [True, False, True, False]
    assert properties["mask"] == {"default": 8, "maximum": 0o777}
    assert properties["size"]["maximum"] == 1000
    assert properties["ratio"]["maximum"] == 1500.0
    assert properties["name"]["pattern"] == "^[a-z]([-a-z0-9]*[a-z0-9])?$"
    assert properties["name"]["x-kubernetes-validations"][0]["message"] == "name is at most\n63 characters\n"


def test_the_kept_structure_of_a_sample_crd() -> None:
    module = script()
    crd = module.load_crd(SAMPLE_CRD)
    kept = module.structure(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert "description" not in kept
    assert kept["properties"]["mask"] == {"maximum": 511}
    assert kept["properties"]["name"]["x-kubernetes-validations"] == [
        {"rule": "self.size() <= 63", "message": "name is at most\n63 characters\n"}
    ]
    assert json.loads(json.dumps(kept, sort_keys=True)) == kept
