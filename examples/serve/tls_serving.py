"""HTTPS for a replica's HTTP server, when tessera gives its leader a certificate
(docs/serving.md "TLS to replicas"): the agent writes the certificate, its key and the cluster
CA beside the worker's files and names them in TESSERA_TLS_CERT, TESSERA_TLS_KEY and
TESSERA_CA_FILE. Without them the server stays plain HTTP (a head started with
--replicas-plain-http). Standard library only; used by server.py and by the test backend
(tests/integration/serving_backend.py).

  ctx = context_from_env()            # None: plain HTTP
  class Server(TlsServerMixin, http.server.ThreadingHTTPServer): ...
  httpd = Server(...); httpd.tls = ctx

Each connection's TLS handshake runs in its own thread (a slow client does not hold up the
accept loop), under a 10 s deadline. A client that speaks plain HTTP to the port gets a plain
400 saying it speaks HTTPS only, as tessera's own ports answer. TLS 1.2 and 1.3 only, no session
tickets. The files are read again when the certificate file changes (the agent replaces them
when the head renews the certificate), for the connections after. Every accepted socket gets
TCP_NODELAY: a streamed token is one small write that must not wait for the previous ACK.
"""
import os
import socket
import ssl
import threading

TLS_HANDSHAKE_RECORD = 0x16  # the first byte of every TLS connection
HANDSHAKE_TIMEOUT_S = 10.0

PLAIN_HTTP_REFUSAL = (
    b'{"error": "this port speaks HTTPS only: use https://... and verify the replica with the '
    b'cluster CA", "field": "scheme"}\n')


def context_from_env(environ=None):
    """A ReloadingContext for $TESSERA_TLS_CERT and $TESSERA_TLS_KEY, or None when neither is
    set. ValueError naming the variable when only one is, or a file does not load."""
    environ = os.environ if environ is None else environ
    cert = environ.get("TESSERA_TLS_CERT", "")
    key = environ.get("TESSERA_TLS_KEY", "")
    if not cert and not key:
        return None
    if not cert or not key:
        raise ValueError("TESSERA_TLS_CERT and TESSERA_TLS_KEY: give both or neither "
                         f"(got TESSERA_TLS_CERT={cert!r}, TESSERA_TLS_KEY={key!r})")
    return ReloadingContext(cert, key)


class ReloadingContext:
    """A server SSLContext for a certificate and key file, made again when the certificate
    file changes."""

    def __init__(self, cert_file, key_file):
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp = None
        self._context = None
        self.current()  # a file that does not load is an error at start, not per connection

    def _make(self):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.options |= ssl.OP_NO_TICKET | ssl.OP_NO_COMPRESSION
        if hasattr(context, "num_tickets"):
            context.num_tickets = 0  # TLS 1.3 tickets would sit unread on an idle connection
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"TESSERA_TLS_CERT={self.cert_file!r}, TESSERA_TLS_KEY="
                             f"{self.key_file!r}: cannot load: {e}") from e
        return context

    def current(self):
        try:
            st = os.stat(self.cert_file)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = self._stamp  # replaced this instant: keep the one we have
        with self._lock:
            if self._context is None or stamp != self._stamp:
                try:
                    self._context = self._make()
                    self._stamp = stamp
                except ValueError:
                    if self._context is None:
                        raise
        return self._context


def _refuse_plain_http(sock):
    response = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(PLAIN_HTTP_REFUSAL), PLAIN_HTTP_REFUSAL))
    try:
        sock.sendall(response)
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def accept_tls(sock, context):
    """The server side of one accepted connection: the TLS socket once its handshake is done,
    or None when the client spoke plain HTTP (answered with 400) or the handshake failed
    (either way `sock` is closed)."""
    try:
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        first = sock.recv(1, socket.MSG_PEEK)
        if not first:
            sock.close()
            return None
        if first[0] != TLS_HANDSHAKE_RECORD:
            _refuse_plain_http(sock)
            sock.close()
            return None
        tls = context.current().wrap_socket(sock, server_side=True)
        tls.settimeout(None)
        return tls
    except (OSError, ssl.SSLError, ValueError):
        sock.close()
        return None


class TlsServerMixin:
    """For a socketserver.ThreadingMixIn server: TCP_NODELAY on every connection, and TLS with
    `tls` (a ReloadingContext) when it is set; None = plain HTTP."""

    tls = None

    def process_request_thread(self, request, client_address):
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        if self.tls is not None:
            request = accept_tls(request, self.tls)
            if request is None:
                return
        super().process_request_thread(request, client_address)


def tls_version(connection):
    """"TLSv1.3" for a TLS connection, None for a plain one (what a test backend reports)."""
    return connection.version() if isinstance(connection, ssl.SSLSocket) else None
