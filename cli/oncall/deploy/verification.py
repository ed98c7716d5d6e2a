"""A deploy's verification: the colour taking the traffic runs the revision, and every listener route
to the service sends its traffic to that revision (the checks are ``revision_checks.py``'s)."""

from __future__ import annotations

from cli.oncall.deploy.deploy_run import DeployRun
from cli.oncall.deploy.elb import colour_traffic, routes_to
from cli.oncall.deploy.revision_checks import RevisionReport, check_service, route_checks


def verify_colour(run: DeployRun, colour: str) -> RevisionReport:
    at, request = run.at, run.request
    checks = check_service(
        at.clients.ecs,
        at.source,
        at.target.cluster,
        at.service(colour),
        request.revision,
        expected_digest=request.image.digest,
        expected_deployment=run.health.expected_deployment,
    )
    traffic = colour_traffic(routes_to(at.clients.elbv2, at.topology.target_groups.values()), at.topology)
    checks += route_checks(at.clients.ecs, at.source, at.topology, traffic, request.revision)
    report = RevisionReport(at.target.service, request.revision, tuple(checks))
    run.result.verification = report
    return report
