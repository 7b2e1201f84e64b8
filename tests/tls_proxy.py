"""A small TLS-terminating reverse proxy on 127.0.0.1, as a team puts in front of a console.

``TlsProxy(upstream_port, tmp)`` listens on a free port of 127.0.0.1 with a throwaway
self-signed certificate (made here with ``cryptography``, for ``127.0.0.1`` and
``localhost``, written under ``tmp``), ends TLS, and passes each request on to the console
over plain HTTP, one request per connection (it asks for ``Connection: close``): the whole
request is read, then the answer piped back as it comes (server-sent events included), all
on the connection's one thread (an OpenSSL connection is not for two threads at once). Like a real proxy it drops the forwarded
headers a client sent and writes its own:

- ``style="x-forwarded"`` (nginx's way): ``X-Forwarded-Proto`` and ``X-Forwarded-Host``,
  and ``Host`` rewritten to the console's own address;
- ``style="forwarded"`` (RFC 7239, Caddy's way with the Host passed on): ``Forwarded:
  for=...;proto=https;host=...``, ``Host`` as the client sent it.

Threads only (no process); ``close()`` ends them all, bounded.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
import threading
from base64 import b64encode
from pathlib import Path
from typing import Literal

__all__ = ["TlsProxy", "self_signed"]

Style = Literal["x-forwarded", "forwarded"]
DROPPED = (b"forwarded", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-for", b"connection", b"keep-alive")


def self_signed(directory: Path) -> tuple[Path, Path, str]:
    """A throwaway certificate for 127.0.0.1 and localhost: its file, its key's file, and
    the base64 SHA-256 of its public key (what Chromium's ``--ignore-certificate-errors-spki-list`` takes)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "greenroom test proxy")])
    now = datetime.datetime.now(datetime.timezone.utc)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "proxy.crt", directory / "proxy.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return cert_file, key_file, b64encode(hashlib.sha256(spki).digest()).decode()


def _length(head: bytes) -> int:
    """The request's ``Content-Length`` (0 without one: the console's requests have no chunked body)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class TlsProxy:
    """See the module docstring."""

    def __init__(self, upstream_port: int, tmp: Path, style: Style = "x-forwarded") -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.style = style
        self.cert, key, self.spki = self_signed(tmp)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(self.cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.origin = f"https://127.0.0.1:{self.port}"
        self.requests = 0
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closing = False
        self._spawn(self._accept)

    def client_context(self) -> ssl.SSLContext:
        """A client's TLS context that trusts this proxy's certificate (and nothing else)."""
        return ssl.create_default_context(cafile=str(self.cert))

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.add(sock)

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            self._track(conn)
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        upstream = tls = None
        try:
            conn.settimeout(30)
            tls = self.context.wrap_socket(conn, server_side=True)
            self._track(tls)
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = tls.recv(65536)
                if not chunk or len(head) > 65536:
                    return
                head += chunk
            head, _, body = head.partition(b"\r\n\r\n")
            while len(body) < _length(head):  # the whole request first: one thread uses the TLS socket
                chunk = tls.recv(65536)
                if not chunk:
                    return
                body += chunk
            upstream = socket.create_connection(self.upstream, timeout=30)
            self._track(upstream)
            upstream.sendall(self._rewrite(head) + body)
            with self._lock:
                self.requests += 1
            self._pipe(upstream, tls)
        except (OSError, ssl.SSLError):
            return
        finally:
            for s in (tls, conn, upstream):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def _rewrite(self, head: bytes) -> bytes:
        request, *lines = head.split(b"\r\n")
        fields = [line.split(b":", 1) for line in lines if b":" in line]
        host = next((v.strip() for k, v in fields if k.strip().lower() == b"host"), b"")
        kept = [(k.strip(), v.strip()) for k, v in fields if k.strip().lower() not in DROPPED]
        if self.style == "x-forwarded":
            kept = [(k, v) for k, v in kept if k.lower() != b"host"]
            kept += [
                (b"Host", f"{self.upstream[0]}:{self.upstream[1]}".encode()),
                (b"X-Forwarded-Proto", b"https"),
                (b"X-Forwarded-Host", host),
            ]
        else:
            kept.append((b"Forwarded", b'for=127.0.0.1;proto=https;host="' + host + b'"'))
        kept.append((b"Connection", b"close"))
        return b"\r\n".join([request, *(k + b": " + v for k, v in kept)]) + b"\r\n\r\n"

    def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        try:
            source.settimeout(None)
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Stop listening, end every connection and thread (bounded)."""
        self._closing = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        self.listener.close()
        with self._lock:
            open_, threads = list(self._open), list(self._threads)
        for s in open_:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        for t in threads:
            t.join(10)
        assert not [t for t in threads if t.is_alive()], "a proxy thread outlived close()"

    def __enter__(self) -> TlsProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
