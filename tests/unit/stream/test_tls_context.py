"""One client TLS context per trust setting and process (faden_agent/http/tls.py): every new
https connection of http/client.py reuses it instead of building a context and parsing the CA
bundle again (4.4 MiB per worker with the public bundle), and verification stays as strict.
Against a real TLS server on loopback whose certificate a private CA signed."""

from __future__ import annotations

import http.server
import os
import ssl
import threading

import pytest

from faden_agent.config import load_config
from faden_agent.http import tls
from faden_agent.http.client import HttpClient, TlsFailure
from faden_agent.supervisor.prefork import preload
from tests.support.privateca import make_ca_and_server_cert


class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # HTTP/1.0: the server closes every connection after one answer
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def https_server(tmp_path):
    ca, cert, key = make_ca_and_server_cert(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{server.server_address[1]}", str(ca)
    server.shutdown()
    server.server_close()


@pytest.fixture
def counted(monkeypatch):
    """How many contexts tls.py and the ssl module build from now on."""
    counts = {"tls": 0, "ssl": 0}
    monkeypatch.setattr(tls, "_contexts", {})
    build, ssl_build = tls._build, ssl.create_default_context

    def counting_build(verify):
        counts["tls"] += 1
        return build(verify)

    def counting_ssl(*args, **kwargs):
        counts["ssl"] += 1
        return ssl_build(*args, **kwargs)

    monkeypatch.setattr(tls, "_build", counting_build)
    monkeypatch.setattr(ssl, "create_default_context", counting_ssl)
    return counts


def get(verify, url: str, client: HttpClient | None = None) -> tuple[int, bytes]:
    """One GET through http/client.py: (status, body)."""
    with (client or HttpClient(verify)).request("GET", url, timeout=5) as answer:
        return answer.status, answer.read_all(1 << 20, 5)


def test_new_connections_share_one_context(https_server, counted):
    url, ca = https_server
    clients = [HttpClient(ca) for _ in range(3)]  # one per thread, as BackendClient has
    for client in clients:
        for _ in range(2):  # the server closes each connection: every request is a new handshake
            assert get(ca, url, client) == (200, b"hello")
    assert counted == {"tls": 1, "ssl": 1}


def test_the_shared_context_still_verifies(https_server, counted, tmp_path):
    url, _ca = https_server
    (tmp_path / "other").mkdir()
    other_ca, _, _ = make_ca_and_server_cert(tmp_path / "other")
    with pytest.raises(TlsFailure, match="certificate verify failed"):
        get(str(other_ca), url)  # signed by another CA
    with pytest.raises(TlsFailure):
        get(True, url)  # the public bundle does not know our CA
    assert get(False, url) == (200, b"hello")  # VERIFY_TLS=false
    wrong_name = url.replace("127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    with pytest.raises(TlsFailure, match="match"):
        get(_ca, wrong_name)


def test_supervisor_builds_the_context_before_forking(https_server, counted):
    url, ca = https_server
    preload.share_tls_context(ca)
    assert counted["tls"] == 1 and ca in tls._contexts
    assert get(ca, url)[0] == 200
    assert counted["tls"] == 1


def test_an_unreadable_bundle_is_left_to_the_workers(tmp_path, counted, caplog):
    missing = str(tmp_path / "no-such-ca.pem")
    preload.share_tls_context(missing)  # logs, does not raise: the worker reports it where it is seen
    assert "TLS context was not built" in caplog.text and missing not in tls._contexts
    with pytest.raises(OSError):
        tls.client_context(missing)


def test_a_bundle_that_is_no_pem_fails_each_request_with_a_reason(https_server, counted, tmp_path):
    url, _ca = https_server
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a certificate\n")
    client = HttpClient(str(garbage))  # the client is made; its requests fail, naming TLS
    for _ in range(2):  # each one tries again
        with pytest.raises(TlsFailure, match="the CA bundle cannot be loaded"):
            get(str(garbage), url, client)


@pytest.mark.parametrize(
    "backend, loki, built",
    [
        ("https://backend.example", None, True),
        ("http://127.0.0.1:8000", "https://loki.example", True),
        ("HTTPS://backend.example", "http://loki:3100", True),
        ("http://127.0.0.1:8000", "http://loki:3100", False),
        ("http://127.0.0.1:8000", None, False),
    ],
)
def test_the_supervisor_builds_it_only_where_something_speaks_https(backend, loki, built):
    env = {"FADEN_NODE_AGENT_BACKEND_URL": backend, "FADEN_NODE_AGENT_HOST": "node-1"}
    if loki:
        env["FADEN_NODE_AGENT_LOKI_URL"] = loki
    assert load_config(env).speaks_tls() is built


def test_a_client_that_only_speaks_http_parses_no_bundle(https_server, counted):
    """A backend or Loki on plain http: the worker's client never builds a context (16 ms of
    CPU and 1.6 MiB of parsed certificates it would hold for nothing); its first https
    request takes the shared one."""
    url, ca = https_server
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = HttpClient(ca)
        plain = f"http://127.0.0.1:{server.server_address[1]}"
        assert [get(ca, plain, client)[0] for _ in range(2)] == [200, 200]
        assert counted == {"tls": 0, "ssl": 0} and ca not in tls._contexts
        assert get(ca, url, client)[0] == 200
        assert counted == {"tls": 1, "ssl": 1}
    finally:
        server.shutdown()
        server.server_close()


def test_requests_ca_variables_do_not_change_the_trust(https_server, counted, monkeypatch, tmp_path):
    """requests put REQUESTS_CA_BUNDLE in place of verify=True; the agent trusts what its own
    settings say (FADEN_NODE_AGENT_CA_BUNDLE), and the shared context takes no bundle in."""
    url, ca = https_server
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca)  # would trust the server
    monkeypatch.setenv("CURL_CA_BUNDLE", ca)
    with pytest.raises(TlsFailure):
        get(True, url)
    (tmp_path / "other").mkdir()
    other_ca, _, _ = make_ca_and_server_cert(tmp_path / "other")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other_ca))  # would not
    assert get(ca, url)[0] == 200
    assert tls.client_context(ca).cert_store_stats()["x509_ca"] == 1  # still the private CA alone


@pytest.fixture
def system_store_with(tmp_path, https_server):
    """A copy of this machine's system store with the test CA added (the real one is shared: never touched)."""
    _url, ca = https_server
    real = next((path for path in tls.SYSTEM_BUNDLES if os.path.isfile(path)), None)
    store = tmp_path / "ca-certificates.crt"
    store.write_bytes((open(real, "rb").read() if real else b"") + b"\n" + open(ca, "rb").read())
    return store


@pytest.fixture
def no_store_variables(monkeypatch):
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


def test_a_ca_only_in_the_system_store_is_trusted_with_no_variable_set(
    https_server, counted, system_store_with, monkeypatch, no_store_variables
):
    url, _ca = https_server
    monkeypatch.setattr(tls, "SYSTEM_BUNDLES", ("/nonexistent/bundle.crt", str(system_store_with)))
    assert load_config({"FADEN_NODE_AGENT_BACKEND_URL": url, "FADEN_NODE_AGENT_HOST": "n"}).tls_verify() is True
    assert get(True, url) == (200, b"hello")
    assert tls.trust_words(True) == f"the system's trust store ({system_store_with})"


def test_ssl_cert_file_names_the_system_store_as_openssl_reads_it(
    https_server, counted, system_store_with, monkeypatch, no_store_variables
):
    url, _ca = https_server
    monkeypatch.setattr(tls, "SYSTEM_BUNDLES", ())
    monkeypatch.setenv("SSL_CERT_FILE", str(system_store_with))
    assert get(True, url) == (200, b"hello")


def test_the_variable_overrides_the_system_store(https_server, counted, system_store_with, monkeypatch, tmp_path):
    url, _ca = https_server
    monkeypatch.setattr(tls, "SYSTEM_BUNDLES", (str(system_store_with),))
    (tmp_path / "other").mkdir()
    other_ca, _, _ = make_ca_and_server_cert(tmp_path / "other")
    with pytest.raises(TlsFailure):  # CA_BUNDLE alone is trusted, not the store beside it
        get(str(other_ca), url)


def test_certifi_where_the_host_has_no_store(https_server, counted, monkeypatch, tmp_path, no_store_variables):
    url, _ca = https_server
    monkeypatch.setattr(tls, "SYSTEM_BUNDLES", (str(tmp_path / "none.crt"),))
    monkeypatch.setattr(tls, "SYSTEM_DIRS", (str(tmp_path),))
    assert tls.system_store() is None and tls.trust_words(True) == "the public CA bundle (certifi)"
    context = tls.client_context(True)
    assert context.cert_store_stats()["x509_ca"] > 50  # certifi's public roots
    with pytest.raises(TlsFailure):
        get(True, url)
