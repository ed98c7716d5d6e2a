"""The chat channel beside e-mail: a Slack-compatible incoming webhook whose URL is a Secrets Manager secret.

The URL is read once per container (per secret). Posting is best effort: a webhook that fails is
logged and returned as the notification's error, and never keeps the SNS message from being sent.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from lambdas.aws.environment import ClientFactory
from lambdas.aws.stop_path import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)
TIMEOUT_S = 5
_urls: dict[str, str] = {}


class ChatError(RuntimeError):
    """The webhook could not be read or refused the message."""


def webhook_url(secret_arn: str, clients: ClientFactory) -> str:
    """The URL the secret holds (plain text, or JSON ``{"url": ...}``), read once per container."""
    if secret_arn not in _urls:
        region = secret_arn.split(":")[3] or None
        try:
            text = clients("secretsmanager", region).get_secret_value(SecretId=secret_arn)["SecretString"]
        except AWS_ERRORS as error:
            raise ChatError(f"could not read the chat webhook secret: {describe_error(error)}") from None
        url = text.strip()
        if url.startswith("{"):
            url = str(json.loads(url).get("url", "")).strip()
        if not url.startswith(("https://", "http://")):
            raise ChatError('the chat webhook secret holds no http(s) URL (plain text, or {"url": ...})')
        _urls[secret_arn] = url
    return _urls[secret_arn]


def post(url: str, text: str) -> None:
    """POST ``{"text": ...}`` as Slack's incoming webhooks (and Mattermost's, Teams' Workflows) take it."""
    request = urllib.request.Request(
        url,
        data=json.dumps({"text": text}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise ChatError(f"the chat webhook answered HTTP {error.code}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ChatError(f"the chat webhook could not be reached: {getattr(error, 'reason', error)}") from None


def send(secret_arn: str | None, subject: str, body: str, *, clients: ClientFactory) -> list[dict[str, str]]:
    """Post the notification to the chat channel, if one is configured; the errors, never raised."""
    if secret_arn is None:
        return []
    try:
        post(webhook_url(secret_arn, clients), f"*{subject}*\n{body}")
    except ChatError as error:
        log.error("could not post to the chat channel: %s", error)
        return [{"action": "chat", "error": str(error)}]
    log.info("posted to the chat channel: %s", subject)
    return []
