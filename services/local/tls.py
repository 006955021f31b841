"""TLS for the local broker: a certificate authority of its own and one broker certificate,
made with the `cryptography` package, so `jobledger broker --secure` needs no keytool, no
openssl command and no Java keystore.

Kafka reads PEM directly (KIP-651): `ssl.keystore.type=PEM` with `ssl.keystore.location` at one
file holding an unencrypted PKCS#8 private key (`BEGIN PRIVATE KEY`) followed by its certificate
chain, and `ssl.truststore.type=PEM` at the CA's certificate (its own inter-broker connections
verify peers as any client does). The key is not encrypted: Kafka's PEM loader takes only
PKCS#8 encryption schemes the JDK knows, and a file readable by its owner alone protects it as
well on one machine. Every node of a local cluster listens on the same loopback address, so one
certificate, named for `127.0.0.1` and `localhost`, serves them all; clients check that name
(librdkafka's `ssl.endpoint.identification.algorithm=https`, the default).

The CA's key is thrown away once the broker certificate is signed: nothing else is ever
issued, so no file can sign a certificate a client would trust.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .loopback import LOOPBACK

VALID_DAYS = 825
"""How long the certificates last: the longest TLS clients accept for a server certificate."""


def write_private(path: Path, data: bytes) -> None:
    """Create or replace `path` readable and writable by its owner only (mode 0600) from the
    first byte on: the mode is set when the file is opened, never after the secret is in."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(tmp, 0o600)  # the umask may have taken bits away, never added: state it anyway
    tmp.replace(path)


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "jobledger local broker"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])  # fmt: skip


def make_certificates(ca_path: Path, keystore_path: Path) -> None:
    """Write the CA's certificate to `ca_path` (what clients trust) and the broker's key and
    certificate chain to `keystore_path` (mode 0600), unless both are there already."""
    if ca_path.is_file() and keystore_path.is_file():
        return
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("jobledger local CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(LOOPBACK))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost")).issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    write_private(keystore_path, pkcs8 + cert.public_bytes(pem) + ca.public_bytes(pem))
    write_private(ca_path, ca.public_bytes(pem))
