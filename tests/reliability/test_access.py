"""Access: TLS, mutual TLS, bearer tokens and the admin switch (issue 8, "Access").

Certificates are generated here (the ``cryptography`` package): a CA, a server
certificate for 127.0.0.1 and a client certificate, all signed by the CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from attnserve.protos.attnserve.v1 import admin_pb2
from attnserve.protos.attnserve.v1 import admin_pb2_grpc as admin_grpc
from attnserve.protos.attnserve.v1 import inference_pb2 as pb
from attnserve.protos.attnserve.v1 import inference_pb2_grpc as pb_grpc
from attnserve.server.shared.security import TokenChecker

from .conftest import digit_png

ROOT = Path(__file__).resolve().parents[2]
TOKEN, OTHER_TOKEN = "s3cret-token-0123456789abcdef", "second-token-abcdefghijklmnop"
TIMEOUT = 30.0


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _cert(subject: str, key, issuer_name: x509.Name, issuer_key, *, ca: bool = False, server: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    return obj.public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """ca.pem, server.pem/server.key, client.pem/client.key, and rogue-client.* from another CA."""
    root = tmp_path_factory.mktemp("pki")
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "attnserve test CA")])
    ca = _cert("attnserve test CA", ca_key, ca_name, ca_key, ca=True)
    rogue_key = _key()
    rogue_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rogue CA")])
    files = {"ca.pem": _pem(ca)}
    for name, issuer, issuer_key, server in (
        ("server", ca_name, ca_key, True),
        ("client", ca_name, ca_key, False),
        ("rogue-client", rogue_name, rogue_key, False),
    ):
        key = _key()
        files[f"{name}.pem"] = _pem(_cert(name, key, issuer, issuer_key, server=server))
        files[f"{name}.key"] = _pem(key)
    for name, data in files.items():
        (root / name).write_bytes(data)
    return {name: root / name for name in files}


def _classify(channel: grpc.Channel, metadata=()) -> pb.ClassifyResponse:
    stub = pb_grpc.InferenceServiceStub(channel)
    request = pb.ClassifyRequest(model="digits", images=[pb.ImageInput(encoded=digit_png(4))])
    return stub.Classify(request, timeout=TIMEOUT, metadata=metadata)


def _code(fn) -> grpc.StatusCode:
    try:
        fn()
    except grpc.RpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _tls_channel(address: str, pki, client: str | None = None) -> grpc.Channel:
    kw = {}
    if client:
        kw = dict(private_key=pki[f"{client}.key"].read_bytes(), certificate_chain=pki[f"{client}.pem"].read_bytes())
    credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca.pem"].read_bytes(), **kw)
    return grpc.secure_channel(address, credentials)


def test_tls_serves_encrypted_and_refuses_plaintext(serve, repo, pki):
    with serve(repo, tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"])) as server:
        with _tls_channel(server.address, pki) as channel:
            assert _classify(channel).results[0].labels
        with grpc.insecure_channel(server.address) as channel:
            assert _code(lambda: _classify(channel)) == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_needs_a_client_certificate_from_the_ca(serve, repo, pki):
    settings = dict(tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"]), tls_client_ca=str(pki["ca.pem"]))
    with serve(repo, **settings) as server:
        with _tls_channel(server.address, pki, client="client") as channel:
            assert _classify(channel).results[0].labels
        with _tls_channel(server.address, pki) as channel:  # no client certificate
            assert _code(lambda: _classify(channel)) == grpc.StatusCode.UNAVAILABLE
        with _tls_channel(server.address, pki, client="rogue-client") as channel:
            assert _code(lambda: _classify(channel)) == grpc.StatusCode.UNAVAILABLE


def test_bearer_tokens_guard_every_rpc_but_health(serve, repo, tmp_path):
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# one per line\n{OTHER_TOKEN}\n")
    with serve(repo, auth_tokens=TOKEN, auth_token_file=str(token_file), enable_admin=True) as server:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.InferenceServiceStub(channel)
            admin = admin_grpc.AdminServiceStub(channel)
            cases = {
                "no token": (),
                "wrong token": (("authorization", "Bearer not-the-token"),),
                "token without scheme": (("authorization", TOKEN),),
                "another scheme": (("authorization", f"Basic {TOKEN}"),),
                "token prefix": (("authorization", f"Bearer {TOKEN[:-1]}"),),
            }
            for case, metadata in cases.items():
                assert _code(lambda m=metadata: _classify(channel, m)) == grpc.StatusCode.UNAUTHENTICATED, case
            refused = len(cases)
            for metadata in ((), (("authorization", "Bearer nope"),)):
                for call in (
                    lambda m=metadata: stub.ListModels(pb.ListModelsRequest(), timeout=TIMEOUT, metadata=m),
                    lambda m=metadata: list(
                        stub.TranslateStream(pb.TranslateRequest(texts=["x"]), timeout=TIMEOUT, metadata=m)
                    ),
                    lambda m=metadata: admin.Reload(admin_pb2.ReloadRequest(), timeout=TIMEOUT, metadata=m),
                ):
                    assert _code(call) == grpc.StatusCode.UNAUTHENTICATED
                    refused += 1
            for token in (TOKEN, OTHER_TOKEN):
                assert _classify(channel, (("authorization", f"Bearer {token}"),)).results[0].labels
            reply = admin.Reload(
                admin_pb2.ReloadRequest(), timeout=TIMEOUT, metadata=(("authorization", f"Bearer {TOKEN}"),)
            )
            assert {m.action for m in reply.models} == {admin_pb2.RELOAD_ACTION_UNCHANGED}
            health = health_pb2_grpc.HealthStub(channel)  # open: probes carry no credentials
            assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT).status == 1
        assert server.metric("attnserve_unauthenticated_total", method="Classify") == len(cases)
        total = sum(
            server.metric("attnserve_unauthenticated_total", method=m)
            for m in ("Classify", "ListModels", "TranslateStream", "Reload")
        )
        assert total == refused
        assert server.metric("attnserve_requests_total", model="-", method="Reload", status="UNAUTHENTICATED") == 2


def test_an_unauthenticated_request_is_refused_before_it_is_parsed(serve, repo):
    with serve(repo, auth_tokens=TOKEN) as server, grpc.insecure_channel(server.address) as channel:
        raw = channel.unary_unary("/attnserve.v1.InferenceService/Classify", None, None)
        assert _code(lambda: raw(b"\x12\x80\x80\x80\x80\x10", timeout=TIMEOUT)) == grpc.StatusCode.UNAUTHENTICATED
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        code = _code(lambda: raw(b"\x12\x80\x80\x80\x80\x10", timeout=TIMEOUT, metadata=metadata))
        assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_admin_rpcs_are_off_unless_enabled(serve, repo):
    with serve(repo) as server, grpc.insecure_channel(server.address) as channel:
        admin = admin_grpc.AdminServiceStub(channel)
        assert _code(lambda: admin.Reload(admin_pb2.ReloadRequest(), timeout=TIMEOUT)) == grpc.StatusCode.UNIMPLEMENTED
    with serve(repo, enable_admin=True) as server, grpc.insecure_channel(server.address) as channel:
        admin = admin_grpc.AdminServiceStub(channel)
        assert admin.Reload(admin_pb2.ReloadRequest(models=["digits"]), timeout=TIMEOUT).models[0].name == "digits"


def test_the_client_and_its_cli_speak_mutual_tls_with_a_token(serve, repo, pki, tmp_path, capsys):
    from attnserve.client import AttnServeError, Client
    from attnserve.client.cli import main as client_main

    settings = dict(tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"]), tls_client_ca=str(pki["ca.pem"]))
    tls = dict(
        root_certificates=pki["ca.pem"].read_bytes(),
        private_key=pki["client.key"].read_bytes(),
        certificate_chain=pki["client.pem"].read_bytes(),
    )
    png = tmp_path / "digit.png"
    png.write_bytes(digit_png(2))
    with serve(repo, auth_tokens=TOKEN, **settings) as server:
        with Client(server.address, retries=0, timeout=TIMEOUT, token=TOKEN, **tls) as client:
            assert client.classify([png], "digits")[0].labels
            assert {m.name for m in client.list_models()} == {"digits", "colors"}
        with Client(server.address, retries=0, timeout=TIMEOUT, **tls) as client:
            assert client.health() == "SERVING"
            with pytest.raises(AttnServeError) as err:
                client.list_models()
            assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
        flags = ["--address", server.address, "--tls-ca", str(pki["ca.pem"]), "--tls-cert", str(pki["client.pem"])]
        flags += ["--tls-key", str(pki["client.key"]), "--token", TOKEN, "--retries", "0"]
        assert client_main([*flags, "classify", str(png), "--model", "digits"]) == 0
        assert capsys.readouterr().out.strip()
        assert client_main([*flags[:-4], "--retries", "0", "models"]) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err


def test_token_check_is_exact():
    checker = TokenChecker([TOKEN, OTHER_TOKEN])
    assert checker.check(f"Bearer {TOKEN}") and checker.check(f"bearer {OTHER_TOKEN}")
    assert checker.check(f"Bearer {TOKEN}".encode())
    for bad in (None, "", "Bearer", "Bearer ", TOKEN, f"Bearer {TOKEN}x", f"Bearer {TOKEN.upper()}", "Bearer \0"):
        assert not checker.check(bad), bad


def test_an_empty_token_file_refuses_to_start(tmp_path, repo):
    from attnserve.server.shared.config import ConfigError
    from attnserve.server.shared.security import load_tokens

    from .conftest import settings_for

    (tmp_path / "tokens").write_text("# all tokens removed\n\n")
    with pytest.raises(ConfigError, match="holds no token"):
        load_tokens(settings_for(repo, auth_token_file=str(tmp_path / "tokens")))


def test_reflection_needs_a_token_too(serve, repo):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with serve(repo, auth_tokens=TOKEN) as server, grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as err:
            list(stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        (reply,) = stub.ServerReflectionInfo(iter([request]), timeout=TIMEOUT, metadata=metadata)
        assert "attnserve.v1.InferenceService" in {s.name for s in reply.list_services_response.service}


def test_default_bind_is_loopback():
    from attnserve.server.shared.config import Settings

    assert Settings().host == "127.0.0.1"


def _health_probe(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """docker/healthcheck.py, the container's HEALTHCHECK, run with the container's environment."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run(
        [sys.executable, str(ROOT / "docker" / "healthcheck.py"), address],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean | env,
    )


def test_container_healthcheck_speaks_tls_and_mutual_tls(serve, repo, pki):
    """With TLS on, the image's HEALTHCHECK still reports SERVING (else Docker restarts a healthy server)."""
    tls = {"ATTNSERVE_TLS_CERT": str(pki["server.pem"]), "ATTNSERVE_TLS_KEY": str(pki["server.key"])}
    with serve(repo, tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"])) as server:
        assert _health_probe(server.address, {}).returncode == 1  # plaintext against a TLS-only server
        ok = _health_probe(server.address, tls | {"ATTNSERVE_HEALTHCHECK_CA": str(pki["ca.pem"])})
        assert ok.returncode == 0 and ok.stdout.strip().endswith("SERVING"), ok.stdout + ok.stderr
        pinned = _health_probe(server.address, tls)  # no CA given: the server's own certificate is trusted
        assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    mutual = tls | {"ATTNSERVE_TLS_CLIENT_CA": str(pki["ca.pem"]), "ATTNSERVE_HEALTHCHECK_CA": str(pki["ca.pem"])}
    settings = dict(tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"]), tls_client_ca=str(pki["ca.pem"]))
    with serve(repo, **settings) as server:
        assert _health_probe(server.address, mutual).returncode == 1  # no client certificate
        client = {
            "ATTNSERVE_HEALTHCHECK_CERT": str(pki["client.pem"]),
            "ATTNSERVE_HEALTHCHECK_KEY": str(pki["client.key"]),
        }
        ok = _health_probe(server.address, mutual | client)
        assert ok.returncode == 0, ok.stdout + ok.stderr


# ------------------------------------------------------------------ the HTTP port (KServe v2 REST)


def _https(server, path: str, pki, client: str | None = None, headers: dict | None = None, body: bytes | None = None):
    """(status, body) of an HTTPS request that trusts the test CA (and presents ``client``'s certificate)."""
    import ssl
    import urllib.error
    import urllib.request

    context = ssl.create_default_context(cafile=str(pki["ca.pem"]))
    if client:
        context.load_cert_chain(str(pki[f"{client}.pem"]), str(pki[f"{client}.key"]))
    request = urllib.request.Request(f"https://{server.http_address}{path}", data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _plain_http_fails(server) -> bool:
    import http.client

    connection = http.client.HTTPConnection(server.http_address, timeout=TIMEOUT)
    try:
        connection.request("GET", "/v2/health/live")
        return connection.getresponse().status != 200
    except (OSError, http.client.HTTPException):
        return True
    finally:
        connection.close()


def test_http_port_serves_tls_and_mutual_tls_with_the_grpc_certificates(serve, repo, pki):
    import ssl

    tls = dict(tls_cert=str(pki["server.pem"]), tls_key=str(pki["server.key"]))
    with serve(repo, http_port=0, **tls) as server:
        assert _https(server, "/v2/health/ready", pki)[0] == 200
        assert _https(server, "/v2/models/digits", pki)[0] == 200
        assert _plain_http_fails(server)
    with serve(repo, http_port=0, tls_client_ca=str(pki["ca.pem"]), **tls) as server:
        assert _https(server, "/v2/models/digits", pki, client="client")[0] == 200
        for client in (None, "rogue-client"):  # no certificate, or one of another CA: the handshake fails
            with pytest.raises((ssl.SSLError, OSError)):
                _https(server, "/v2/models/digits", pki, client=client)


def test_http_bearer_tokens_guard_everything_but_health(serve, repo):
    import json
    import urllib.error
    import urllib.request

    with serve(repo, http_port=0, auth_tokens=TOKEN) as server:

        def get(path: str, token: str | None = None, body: bytes | None = None) -> tuple[int, dict, bytes]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            request = urllib.request.Request(f"http://{server.http_address}{path}", data=body, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
                    return reply.status, dict(reply.headers), reply.read()
            except urllib.error.HTTPError as err:
                return err.code, dict(err.headers), err.read()

        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/digits/ready"):
            assert get(path)[0] == 200, path  # orchestrators probe without credentials
        status, headers, body = get("/v2/models/digits")
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert "Authorization: Bearer" in json.loads(body)["error"]
        infer = json.dumps({"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1], "data": ["x"]}]}).encode()
        assert get("/v2/models/digits/infer", OTHER_TOKEN, infer)[0] == 401
        assert get("/v2/models/digits", TOKEN)[0] == 200
        assert get("/v2/models/digits/infer", TOKEN, infer)[0] == 400  # authenticated, then refused for the input
        assert server.metric("attnserve_unauthenticated_total", method="kserve.http.ModelMetadata") == 1
        assert server.metric("attnserve_unauthenticated_total", method="kserve.http.ModelInfer") == 1
