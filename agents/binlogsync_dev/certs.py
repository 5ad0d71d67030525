"""Throwaway certificates for TLS tests and demos: a CA, server and client certificates it
signs, written as PEM files (keys mode 0600, which libpq insists on for client keys).

Made with the `cryptography` package in a few milliseconds (EC P-256 keys), so every test can
make its own CA instead of sharing files. `server` names 127.0.0.1 and localhost by default;
give other names to make a certificate whose identity does not match (for `verify_identity`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAYS = 30


@dataclass(frozen=True)
class Pair:
    """A certificate and its private key, as files."""

    cert: Path
    key: Path


class Authority:
    """A self-signed CA in `folder/NAME-ca.pem` that signs server and client certificates."""

    def __init__(self, folder: Path, name: str = "test") -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"binlogsync {name} CA")])
        now = dt.datetime.now(dt.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca = folder / f"{name}-ca.pem"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def server(
        self, name: str = "server", hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    ) -> Pair:
        """A server certificate for `hosts` (IP addresses and DNS names)."""
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        return self._issue(name, hosts[0], names, ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, name: str = "client", user: str = "root") -> Pair:
        """A client certificate whose common name is `user` (what PostgreSQL's `cert`
        authentication compares with the user name)."""
        return self._issue(name, user, [], ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(
        self, name: str, common: str, alt: list[x509.GeneralName], usage: x509.ObjectIdentifier
    ) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if alt:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(
            self.folder / f"{self.name}-{name}.pem", self.folder / f"{self.name}-{name}.key"
        )
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        fd = os.open(pair.key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
        return pair
