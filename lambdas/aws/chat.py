"""The chat channel beside e-mail: a Slack-compatible incoming webhook whose URL is a Secrets Manager secret.

The URL is read once per container (per secret). Posting is best effort: a webhook that fails is
logged and returned as the notification's error, and never keeps the SNS message from being sent.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import urllib.error
import urllib.request

from lambdas.aws.environment import ClientFactory
from lambdas.aws.errors import AWS_ERRORS, describe_error

log = logging.getLogger(__name__)
TIMEOUT_S = 5
_urls: dict[str, str] = {}


class ChatError(RuntimeError):
    """The webhook could not be read or refused the message."""


def webhook_url(secret_arn: str, clients: ClientFactory) -> str:
    """The URL the secret holds (plain text, or JSON ``{"url": ...}``), read once per container."""
    if secret_arn not in _urls:
        region = secret_arn.split(":")[3] if secret_arn.count(":") >= 5 else None
        try:
            text = clients("secretsmanager", region or None).get_secret_value(SecretId=secret_arn)[
                "SecretString"
            ]
        except AWS_ERRORS as error:
            raise ChatError(f"could not read the chat webhook secret: {describe_error(error)}") from None
        except KeyError:
            raise ChatError("the chat webhook secret holds no text (SecretString)") from None
        _urls[secret_arn] = url_from_secret(text)
    return _urls[secret_arn]


def url_from_secret(text: object) -> str:
    """The webhook URL in a secret's text; ChatError for anything else. The URL is the credential (its
    path is the token): no message here quotes the secret, or any part of it."""
    url = text.strip() if isinstance(text, str) else ""
    if url.startswith("{"):
        try:
            document = json.loads(url)
        except ValueError:
            raise ChatError(
                'the chat webhook secret is not valid JSON (plain text, or {"url": ...})'
            ) from None
        found = document.get("url") if isinstance(document, dict) else None
        url = found.strip() if isinstance(found, str) else ""
    if not url.startswith(("https://", "http://")):
        raise ChatError('the chat webhook secret holds no http(s) URL (plain text, or {"url": ...})')
    if any(
        character.isspace() or not character.isprintable() or not character.isascii() for character in url
    ):
        raise ChatError(
            "the chat webhook secret's URL holds spaces or control characters; store the URL alone"
        )
    return url


def post(url: str, text: str) -> None:
    """POST ``{"text": ...}`` as Slack's incoming webhooks (and Mattermost's, Teams' Workflows) take it.

    Every failure is a ChatError whose message names no part of the URL (urllib's and http.client's
    own messages may quote it: ``InvalidURL`` does, with the token)."""
    try:
        request = urllib.request.Request(
            url,
            data=json.dumps({"text": text}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            response.read()
    except urllib.error.HTTPError as error:
        raise ChatError(f"the chat webhook answered HTTP {error.code}") from None
    except urllib.error.URLError as error:
        reason = error.reason if isinstance(error.reason, OSError) else None
        raise ChatError(f"the chat webhook could not be reached ({_kind(reason or error)})") from None
    except (OSError, ValueError, http.client.HTTPException) as error:  # InvalidURL is a ValueError
        raise ChatError(f"the chat webhook could not be reached ({_kind(error)})") from None


def _kind(error: BaseException) -> str:
    """What failed, without the exception's text (which may carry the URL): its class, and for an
    OS error its errno's name (``ECONNREFUSED``)."""
    code = getattr(error, "errno", None)
    return f"{type(error).__name__} {errno.errorcode.get(code, '')}".strip() if code else type(error).__name__


def send(secret_arn: str | None, subject: str, body: str, *, clients: ClientFactory) -> list[dict[str, str]]:
    """Post the notification to the chat channel, if one is configured; the errors, never raised."""
    if secret_arn is None:
        return []
    try:
        post(webhook_url(secret_arn, clients), f"*{subject}*\n{body}")
    except Exception as error:  # a notifier never takes the decision log or heartbeat down
        if not isinstance(error, ChatError):
            error = ChatError(f"the chat channel failed ({type(error).__name__})")
        log.error("could not post to the chat channel: %s", error)
        return [{"action": "chat", "error": str(error)}]
    log.info("posted to the chat channel: %s", subject)
    return []
