"""A local Microsoft Entra ID for the OneLake tests: ``python -m tests.storage._fake_entra CERT KEY LOG``.

Serves HTTPS on 127.0.0.1 (a free port, printed as ``ready PORT``):

- ``GET /<tenant>/v2.0/.well-known/openid-configuration``: the OpenID discovery document
  MSAL (azure-identity) reads before asking for a token;
- ``POST /<tenant>/oauth2/v2.0/token``: the OAuth2 client-credentials grant. The
  principal :data:`CLIENT` with :data:`SECRET` gets a JWT that Azurite (``--oauth basic``)
  accepts for storage (issuer ``https://sts.windows.net/<tenant>/``, audience
  ``https://storage.azure.com``, valid for an hour); anyone else gets Entra ID's 401
  ``invalid_client``.

Every request is appended to LOG as one JSON line: method, path, form, and whether MSAL
sent it (its ``x-client-sku`` header), so tests can tell azure-identity from delta-rs.
It runs in its own process because delta-rs holds the GIL while it waits for a token.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

TENANT: Final = "72f988bf-0000-4000-8000-2d7cd011db47"
CLIENT: Final = "8d0c2a52-1111-4111-8111-9f3c5e0e7a10"
SECRET: Final = "s3cr3t~value"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def access_token(tenant: str, client: str) -> str:
    """A bearer token shaped as Entra ID issues it for storage (the signature is fake)."""
    now = int(time.time())
    claims = {
        "aud": "https://storage.azure.com",
        "iss": f"https://sts.windows.net/{tenant}/",
        "iat": now - 60,
        "nbf": now - 60,
        "exp": now + 3600,
        "appid": client,
        "tid": tenant,
        "oid": "0e4c6d3f-2222-4222-8222-1c2d3e4f5a6b",
    }
    header = {"alg": "RS256", "typ": "JWT"}
    return ".".join(
        [_b64(json.dumps(header).encode()), _b64(json.dumps(claims).encode()), _b64(b"sig")]
    )


def main(argv: list[str]) -> int:
    """Serve until terminated; return the exit status."""
    cert_file, key_file, log_file = argv[1:4]
    lock = threading.Lock()
    base_url = ""

    def record(entry: dict[str, Any]) -> None:
        with lock, open(log_file, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            record({"method": "GET", "path": path, "form": {}, "msal": self._msal()})
            parts = path.strip("/").split("/")
            if len(parts) == 4 and parts[1:] == ["v2.0", ".well-known", "openid-configuration"]:
                base = f"{base_url}/{parts[0]}"
                self._reply(
                    200,
                    {
                        "token_endpoint": f"{base}/oauth2/v2.0/token",
                        "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                        "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                        "issuer": f"{base}/v2.0",
                    },
                )
            else:
                self._reply(404, {"error": "not_found"})

        def do_POST(self) -> None:
            path = urlsplit(self.path).path
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode()
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            record({"method": "POST", "path": path, "form": form, "msal": self._msal()})
            parts = path.strip("/").split("/")
            if len(parts) != 4 or parts[1:] != ["oauth2", "v2.0", "token"]:
                self._reply(404, {"error": "not_found"})
                return
            if form.get("client_id") != CLIENT or form.get("client_secret") != SECRET:
                self._reply(
                    401,
                    {
                        "error": "invalid_client",
                        "error_description": "AADSTS7000215: Invalid client secret provided.",
                    },
                )
                return
            self._reply(
                200,
                {
                    "token_type": "Bearer",
                    "expires_in": 3599,
                    "ext_expires_in": 3599,
                    "access_token": access_token(parts[0], CLIENT),
                },
            )

        def _msal(self) -> bool:
            return self.headers.get("x-client-sku", "").startswith("MSAL")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    port = server.server_address[1]
    base_url = f"https://127.0.0.1:{port}"
    print("ready", port, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
