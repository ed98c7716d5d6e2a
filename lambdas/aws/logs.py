"""Structured JSON logs at INFO for the guardrail Lambdas, through aws-lambda-powertools' Logger.

Lambda's Python runtime logs at WARNING unless told otherwise, which would drop every "stopped",
"armed" and "judged" line. The handlers call :func:`configure_logging` once per container: every
``lambdas.*`` logger then writes one JSON object per line (level, time, logger, message, and the
guardrail as ``service``), which CloudWatch Logs Insights can query by field.
"""

from __future__ import annotations

from functools import cache

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

LEVEL = "INFO"


@cache
def configure_logging(guardrail: str) -> Logger:
    logger = Logger(service=f"parkbrake-{guardrail}", level=LEVEL, utc=True)
    copy_config_to_registered_loggers(source_logger=logger, include={"lambdas"}, log_level=LEVEL)
    return logger
