"""A throwaway PKI for the local control plane: one CA, serving and client certs.

Client certificates carry the Kubernetes identity the apiserver sees:
CN is the user name, each O is a group.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(path: Path, key) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class CertificateAuthority:
    def __init__(self, directory: Path):
        self.directory = directory
        self.cert_path = directory / "ca.crt"
        key_path = directory / "ca.key"
        if self.cert_path.exists() and key_path.exists():
            self._key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            return
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name("metalclaim-devenv-ca")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        _write_key(key_path, self._key)
        self.cert_path.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        stem: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        *,
        server_names: tuple[str, ...] = (),
    ) -> KeyPair:
        """Issue a client certificate, or a serving one when server_names are given."""
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        if pair.cert.exists() and pair.key.exists():
            return pair
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            # Key identifiers (RFC 5280), which Python 3.13's default TLS context (VERIFY_X509_STRICT) and urllib3
            # on it require: without them a client on 3.13 refuses the devenv's certificates.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if server_names:
            sans: list[x509.GeneralName] = []
            for name in server_names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    sans.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        _write_key(pair.key, key)
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return pair


def service_account_keys(directory: Path) -> KeyPair:
    """RSA key pair the apiserver signs service-account tokens with (cert holds the public key)."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pair.key, key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair
