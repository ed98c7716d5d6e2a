"""The provider host Pulumi runs for this plugin (PulumiPlugin.yaml): it serves the schema inferred
from the components' annotations and constructs them when a program asks."""

from pulumi.provider.experimental import component_provider_host

from components.package.schema import package_version
from components.package.wrappers import COMPONENTS, PACKAGE

if __name__ == "__main__":
    component_provider_host(COMPONENTS, name=PACKAGE, version=package_version())
