"""A throwaway certificate authority for tests: a PEM bundle shaped like AWS's RDS CA bundle."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def ca_certificate_pem(name: str) -> bytes:
    """One self-signed CA certificate named ``name``, PEM-encoded."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM)


def ca_bundle_pem() -> bytes:
    """Two CA certificates one after the other, as AWS's global bundle lists one per region and key type."""
    return ca_certificate_pem("Test RDS us-east-1 Root CA") + ca_certificate_pem("Test RDS eu-west-1 Root CA")
