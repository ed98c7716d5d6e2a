"""The components as a Pulumi component package, for TypeScript, Go, .NET, Java and YAML programs.

Pulumi's Python component provider host (``pulumi.provider.experimental``) infers a package schema
from the type annotations of a component's ``args``, and hands each construct call its inputs as a
plain mapping. The components in ``components/`` take dataclasses holding durations, capacities,
literals and unions for the Python program, which the host can neither describe nor build, so this
package declares, for each component it covers, an ``args`` TypedDict in the schema's own terms
(strings for durations, enums for choices) and a component that checks those inputs the way the
stack config does and builds the real component as its child. See docs/components.md.
"""
