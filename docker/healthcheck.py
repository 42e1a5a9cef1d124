"""Container health probe: exit 0 when the server answers grpc.health.v1 ``Check`` with SERVING.

Docker's HEALTHCHECK (and the compose file's ``healthcheck``) run it inside the container
every few seconds. It checks the server's overall status (service ``""``), which is SERVING
once every model has loaded and warmed up, and turns NOT_SERVING as soon as a SIGTERM starts
the drain, so a load balancer stops sending new work before the process goes away.

    python healthcheck.py [ADDRESS] [--service NAME] [--timeout SECONDS]

ADDRESS defaults to 127.0.0.1:$ATTNSERVE_PORT (50051). Exit codes: 0 SERVING, 1 anything
else (not serving, unreachable, timed out), as Docker expects.

When the server serves TLS (ATTNSERVE_TLS_CERT is set) the probe speaks TLS too. It trusts
ATTNSERVE_HEALTHCHECK_CA (a PEM bundle), else the server's own certificate, pinned; with mutual TLS
(ATTNSERVE_TLS_CLIENT_CA) it presents ATTNSERVE_HEALTHCHECK_CERT / ATTNSERVE_HEALTHCHECK_KEY.
ATTNSERVE_HEALTHCHECK_TLS_NAME overrides the name checked against the certificate when it
names neither 127.0.0.1 nor the address probed. The health service needs no bearer token.
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def default_address() -> str:
    host = os.environ.get("ATTNSERVE_HOST", "")
    if host in ("", "0.0.0.0", "::", "[::]"):  # listening everywhere: loopback reaches it
        host = "127.0.0.1"
    return f"{host}:{os.environ.get('ATTNSERVE_PORT', '50051')}"


def _read(env: str) -> bytes | None:
    path = os.environ.get(env, "")
    return open(path, "rb").read() if path else None  # noqa: SIM115 - small PEM files


def channel_for(address: str) -> grpc.Channel:
    """A plaintext channel, or a TLS one when the server's environment says it serves TLS."""
    cert = _read("ATTNSERVE_TLS_CERT")
    if cert is None:
        return grpc.insecure_channel(address)
    roots = _read("ATTNSERVE_HEALTHCHECK_CA") or cert
    client_cert, client_key = _read("ATTNSERVE_HEALTHCHECK_CERT"), _read("ATTNSERVE_HEALTHCHECK_KEY")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=roots, private_key=client_key, certificate_chain=client_cert
    )
    name = os.environ.get("ATTNSERVE_HEALTHCHECK_TLS_NAME", "")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(address, credentials, options=options)


def check(address: str, service: str = "", timeout: float = 3.0) -> str:
    """The status name (``SERVING``, ``NOT_SERVING``, ``SERVICE_UNKNOWN``) or ``UNREACHABLE: <code>``."""
    try:
        channel = channel_for(address)
    except OSError as exc:
        return f"UNREACHABLE: cannot read a TLS file: {exc}"
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"UNREACHABLE: {exc.code().name}"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="grpc.health.v1 probe for attnserve-server")
    parser.add_argument("address", nargs="?", default=None, help="host:port (default 127.0.0.1:$ATTNSERVE_PORT)")
    parser.add_argument("--service", default="", help="health service name ('' = the whole server)")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    args = parser.parse_args(argv)
    address = args.address or default_address()
    status = check(address, args.service, args.timeout)
    print(f"{address} {args.service or '(server)'}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
