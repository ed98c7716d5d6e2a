"""``parkbrake package``: write the Lambda archives and layers ``pulumi up`` uploads, and their manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from cli.options import output_option, project_dir_option, stack_option
from guardrails.plurals import counted


@click.command()
@stack_option
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write the archives, the layers and manifest.json into.",
)
@click.option(
    "--architecture",
    type=click.Choice(["x86_64", "arm64"]),
    default=None,
    help="Lambda architecture; default: the stack's.",
)
@click.option(
    "--python-version",
    metavar="X.Y",
    default=None,
    help="Python the layer's wheels are chosen for; default: the stack's runtime's.",
)
@project_dir_option
@output_option
def package(
    *,
    stack: str,
    out: Path,
    architecture: str | None,
    python_version: str | None,
    project_dir: Path,
    output: str,
) -> None:
    """Write the Lambda archives and layers `pulumi up` uploads, and DIR/manifest.json.

    The functions are the ones the stack's program declares (run offline, as plan does); the layer's
    wheels come pinned and hash-checked from components/lambda_requirements.txt.

    \b
    Example:
      parkbrake package --stack dev --out build/lambda
    """
    manifest = package_stack(
        stack, out, architecture=architecture, python_version=python_version, project_dir=project_dir
    )
    if output == "json":
        click.echo(json.dumps(manifest, indent=2))
        return
    for function in manifest["functions"]:
        click.echo(
            f"{function['name']}: {function['handler']} ({function['runtime']}, {function['architecture']}) "
            f"{function['archive']} + {', '.join(function['layers'])}"
        )
    click.echo(
        f"wrote the artifacts of {counted(len(manifest['functions']), 'function')} and manifest.json to {out}"
    )


def package_stack(
    stack: str, out: Path, *, architecture: str | None, python_version: str | None, project_dir: Path
) -> dict[str, Any]:
    from cli.preview.plan_report import offline_run
    from components.lambda_archive import declared_functions, python_version_of, write_package
    from stacks.config import load_stack_config

    config = load_stack_config(stack, project_dir)
    functions = declared_functions(offline_run(config).resources, architecture=architecture)
    if not functions:
        raise click.UsageError(f"stack {stack!r} declares no Lambda function to package")
    return write_package(
        functions, out, python_version=python_version or python_version_of(functions[0].runtime)
    )
