"""AWS's RDS CA bundle in the guardrails' dependency layer, so that ``PGSSLMODE=verify-full`` has a root
to verify the TLS-only Aurora cluster against: layers unpack under ``/opt``, and the functions that use
the ledger read ``PGSSLROOTCERT=/opt/rds-ca/global-bundle.pem``.

RDS signs its servers' certificates with AWS's own certificate authorities, which no operating system
trusts by default, so the bundle has to travel with the functions. Where it comes from, in order:

- ``PARKBRAKE_RDS_CA_BUNDLE``: a PEM file (an offline build, or a bundle a security team vetted);
- the bundle cached beside the layer's wheels by an earlier build: a rebuild asks nobody and gives
  the same bytes;
- AWS's published bundle (:data:`BUNDLE_URL`), over HTTPS checked against the system's roots.

Whatever the source, every block must parse as an X.509 certificate, or the build stops naming the
source and the fix: a proxy's HTML error page must never become the functions' trust root.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from guardrails.errors import ParkbrakeError
from guardrails.settings import process_variable
from guardrails.settings_table import RDS_CA_BUNDLE

LAYER_PATH = "rds-ca/global-bundle.pem"
# Where AWS publishes the certificates of every commercial region's RDS CAs (the RDS user guide's
# "Using SSL/TLS to encrypt a connection to a DB instance or cluster").
BUNDLE_URL = "https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem"
BUNDLE_VARIABLE = RDS_CA_BUNDLE
CACHED_NAME = "rds-ca-global-bundle.pem"
CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)
DOWNLOAD_TIMEOUT_S = 30


def rds_ca_bundle(cache: Path, *, url: str = BUNDLE_URL) -> bytes:
    """The bundle's bytes: from ``PARKBRAKE_RDS_CA_BUNDLE``, else the cache, else ``url`` (then cached)."""
    configured = process_variable(os.environ, BUNDLE_VARIABLE)
    if configured:
        try:
            return validated(Path(configured).read_bytes(), f"{BUNDLE_VARIABLE}={configured}")
        except OSError as error:
            raise ParkbrakeError(f"cannot read {BUNDLE_VARIABLE}={configured}: {error.strerror}") from None
    cached = cache / CACHED_NAME
    if cached.is_file():
        return validated(cached.read_bytes(), str(cached))
    bundle = validated(_download(url), url)
    cache.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(bundle)
    return bundle


def validated(bundle: bytes, source: str) -> bytes:
    """``bundle`` when it is one or more PEM certificates that parse; else an error naming ``source``."""
    fix = f"download it from {BUNDLE_URL} and set {BUNDLE_VARIABLE} to the file"
    certificates = CERTIFICATE.findall(bundle)
    if not certificates:
        raise ParkbrakeError(f"the RDS CA bundle from {source} holds no PEM certificate; {fix}")
    try:
        # Loading is parsing: an SSL context refuses a certificate whose DER does not decode.
        ssl.create_default_context(cadata=b"\n".join(certificates).decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError) as error:
        raise ParkbrakeError(f"the RDS CA bundle from {source} does not parse ({error}); {fix}") from None
    return bundle


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            body: bytes = response.read()
            return body
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise ParkbrakeError(
            f"cannot download the RDS CA bundle from {url} ({reason}); for an offline build, download it "
            f"elsewhere and set {BUNDLE_VARIABLE} to the file"
        ) from None
