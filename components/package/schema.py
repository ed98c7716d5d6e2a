"""The package's schema, built offline by the SDK's own analyzer (what the provider host serves), and
``python -m components.package.schema`` to write it to components/package/schema.json."""

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pulumi.provider.experimental.analyzer import Analyzer
from pulumi.provider.experimental.schema import generate_schema

from components.package.wrappers import COMPONENTS, PACKAGE

SCHEMA_FILE = Path(__file__).with_name("schema.json")


def package_version() -> str:
    return version(PACKAGE)


def package_schema() -> dict[str, Any]:
    """The schema the host derives from the components' annotations, as JSON."""
    analyzed = Analyzer(PACKAGE).analyze(COMPONENTS)
    spec = generate_schema(
        PACKAGE,
        package_version(),
        None,
        analyzed["component_definitions"],
        analyzed["type_definitions"],
        sorted(analyzed["dependencies"], key=lambda dependency: f"{dependency.name}{dependency.version}"),
    )
    document: dict[str, Any] = spec.to_json()
    return document


def rendered() -> str:
    return json.dumps(package_schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if SCHEMA_FILE.read_text() == rendered() else 1)
    SCHEMA_FILE.write_text(rendered())
