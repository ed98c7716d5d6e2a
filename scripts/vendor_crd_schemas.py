"""Derive the validation schemas in components/k8s/schemas/ from pinned upstream CRDs.

Each upstream repository is read from a local git clone (``git show <tag>:<path>``); nothing is
downloaded here. What is kept of each served version's ``openAPIV3Schema`` is only what validation
needs: types, enums, patterns, formats, bounds, required fields, ``x-kubernetes-*`` markers and the
CEL rules (``x-kubernetes-validations``, their messages included). Descriptions — the upstream prose —
are dropped, as are printer columns and everything else of the CRD.

    python scripts/vendor_crd_schemas.py --kueue PATH --karpenter PATH --karpenter-aws PATH \\
        --prometheus-operator PATH

Each PATH is a git directory (a bare clone is enough). Run it again after changing a pin below.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

OUT = Path(__file__).resolve().parent.parent / "components" / "k8s" / "schemas"

# (repository option, upstream repository, tag, licence, CRD paths, versions kept)
SOURCES: tuple[tuple[str, str, str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "kueue",
        "kubernetes-sigs/kueue",
        "v0.19.2",
        "Apache-2.0",
        tuple(
            f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
            for plural in (
                "admissionchecks",
                "clusterqueues",
                "localqueues",
                "resourceflavors",
                "workloadpriorityclasses",
                "workloads",
            )
        ),
        ("v1beta2",),
    ),
    (
        "karpenter",
        "kubernetes-sigs/karpenter",
        "v1.14.1",
        "Apache-2.0",
        ("pkg/apis/crds/karpenter.sh_nodepools.yaml", "pkg/apis/crds/karpenter.sh_nodeclaims.yaml"),
        ("v1",),
    ),
    (
        "karpenter_aws",
        "aws/karpenter-provider-aws",
        "v1.14.1",
        "Apache-2.0",
        ("pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml",),
        ("v1",),
    ),
    (
        "prometheus_operator",
        "prometheus-operator/prometheus-operator",
        "v0.93.0",
        "Apache-2.0",
        (
            "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
            "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        ),
        ("v1",),
    ),
)

# Schema keywords kept; anything else (description, example, default, title, …) is dropped.
KEPT = {
    "type", "enum", "pattern", "format", "required", "items", "properties", "additionalProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems",
    "maxItems", "minProperties", "maxProperties", "anyOf", "oneOf", "allOf", "not", "nullable",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
}  # fmt: skip


def structure(node: Any) -> Any:
    """The schema without its prose: kept keywords only, recursively; a CEL rule keeps rule and message."""
    if not isinstance(node, dict):
        return node
    kept: dict[str, Any] = {}
    for key, value in node.items():
        if key not in KEPT:
            continue
        if key == "properties":
            kept[key] = {name: structure(child) for name, child in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            kept[key] = structure(value)
        elif key in ("anyOf", "oneOf", "allOf"):
            kept[key] = [structure(child) for child in value]
        elif key == "x-kubernetes-validations":
            kept[key] = [
                {field: rule[field] for field in ("rule", "message", "messageExpression") if field in rule}
                for rule in value
            ]
        else:
            kept[key] = value
    return kept


def load_crd(text: str) -> Any:
    """The CRD document as plain data. YAML 1.1 resolution, as Kubernetes' own reader (go-yaml v2) and
    the PyYAML this script used before read it: unquoted yes/no/on/off are booleans, 010 is octal."""
    loader = YAML(typ="safe", pure=True)
    loader.version = (1, 1)
    return loader.load(text)


def git_show(git_dir: Path, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{tag}:{path}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def vendor(repositories: dict[str, Path]) -> list[str]:
    OUT.mkdir(parents=True, exist_ok=True)
    written, notice = [], []
    for option, upstream, tag, licence, paths, versions in SOURCES:
        notice.append(f"- {upstream} {tag} ({licence}): " + ", ".join(Path(path).name for path in paths))
        for path in paths:
            crd = load_crd(git_show(repositories[option], tag, path))
            spec = crd["spec"]
            for version in spec["versions"]:
                if version["name"] not in versions:
                    continue
                document = {
                    "source": f"{upstream} {tag}:{path}",
                    "group": spec["group"],
                    "version": version["name"],
                    "kind": spec["names"]["kind"],
                    "scope": spec["scope"],
                    "schema": structure(version["schema"]["openAPIV3Schema"]),
                }
                name = f"{spec['group']}_{spec['names']['plural']}_{version['name']}.json"
                (OUT / name).write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
                written.append(name)
    (OUT / "NOTICE.md").write_text(
        "# Vendored CRD schemas\n\n"
        "Derived by `scripts/vendor_crd_schemas.py` from these pinned upstream releases, all licensed\n"
        "under the Apache License 2.0. Only the schema structure is kept (types, enums, patterns,\n"
        "formats, bounds, required fields, `x-kubernetes-*` markers, CEL rules and their messages);\n"
        "the upstream descriptions and everything else of the CRDs are left out.\n\n"
        + "\n".join(notice)
        + "\n"
    )
    return written


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for option, upstream, *_ in SOURCES:
        parser.add_argument(
            f"--{option.replace('_', '-')}", type=Path, required=True, help=f"git dir of {upstream}"
        )
    arguments = parser.parse_args(argv)
    for name in vendor({option: getattr(arguments, option) for option, *_ in SOURCES}):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
