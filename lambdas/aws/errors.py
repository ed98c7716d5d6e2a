"""What an AWS call can raise, and the one line that describes it to a person or a log.

Every adapter, engine and command that calls AWS catches :data:`AWS_ERRORS` and reports
:func:`describe_error`; the stop path is one of them.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

# What one AWS call can raise: AWS's errors, botocore's own, and a response botocore cannot parse.
AWS_ERRORS = (ClientError, BotoCoreError, ResponseParserError)


def describe_error(error: Exception) -> str:
    """``Code: message`` for AWS's errors, the text otherwise.

    A proxy or a wrong endpoint can answer with an HTML page, which botocore passes on as the message:
    that becomes one line naming the HTTP status, never the page.
    """
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        message = str(details.get("Message", ""))
        if message.lstrip().startswith("<") and "html" in message[:200].lower():
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?")
            return (
                f"HTTP {status} with an HTML page, not an AWS response; check AWS_ENDPOINT_URL and the region"
            )
        return f"{details.get('Code', 'Unknown')}: {message}".strip()
    return str(error)
