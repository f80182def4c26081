"""Microsoft Fabric OneLake tables with a service principal, without the internet.

A local HTTPS server plays Microsoft Entra ID (azure-identity's and object_store's
authority host override): it serves the OpenID discovery MSAL asks for and answers the
OAuth2 client-credentials POST to ``<authority>/<tenant>/oauth2/v2.0/token`` with a JWT
that Azurite (HTTPS, ``--oauth basic``) accepts as a bearer token. The OneLake URI's
blob endpoint is pointed at that Azurite, so delta-rs and azure-storage-blob both really
authenticate with the service principal's tokens; the token server records every request.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from cli.main import cli
from posixlake import AzureConfig, DatabaseOps, Field, Schema
from posixlake.errors import InvalidOperation
from posixlake.storage import (
    StorageAuthenticationError,
    open_store,
    prepare,
    storage_options_for,
)
from posixlake.storage import azure as azure_module
from tests.storage._fake_entra import CLIENT, SECRET, TENANT
from tests.storage.servers import LocalServer, ServerUnavailable, start_azurite

pytestmark = pytest.mark.azure

WORKSPACE = "sales-ws"


# -- a CA, a server certificate, the token server and Azurite over HTTPS ----------------------


@dataclass(frozen=True)
class Tls:
    ca_file: str
    cert_file: str
    key_file: str


def _make_tls(directory: Path) -> Tls:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "posixlake test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
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
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (directory / "ca.pem").write_bytes(ca.public_bytes(pem))
    (directory / "cert.pem").write_bytes(cert.public_bytes(pem))
    (directory / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Tls(str(directory / "ca.pem"), str(directory / "cert.pem"), str(directory / "key.pem"))


@dataclass(frozen=True)
class TokenRequest:
    tenant: str
    form: dict[str, str]
    msal: bool  # sent by azure-identity (MSAL), not by delta-rs (object_store)


class FakeEntra:
    """The token server (its own process: delta-rs holds the GIL while it waits on it).

    It writes every request it gets to a JSON-lines log, read back here.
    """

    def __init__(self, tls: Tls, log: Path) -> None:
        self.log = log
        self._proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.storage._fake_entra",
                tls.cert_file,
                tls.key_file,
                str(log),
            ],
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().split()
        if line[:1] != ["ready"]:
            self._proc.kill()
            raise RuntimeError(f"the fake token server did not start: {line}")
        self.url = f"https://127.0.0.1:{line[1]}"

    def _entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(ln) for ln in self.log.read_text().splitlines() if ln]

    @property
    def paths(self) -> list[str]:
        return [f"{e['method']} {e['path']}" for e in self._entries()]

    @property
    def tokens(self) -> list[TokenRequest]:
        return [
            TokenRequest(e["path"].strip("/").split("/")[0], e["form"], e["msal"])
            for e in self._entries()
            if e["method"] == "POST" and e["path"].endswith("/oauth2/v2.0/token")
        ]

    def reset(self) -> None:
        self.log.write_text("")

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


@dataclass(frozen=True)
class OneLake:
    entra: FakeEntra
    azurite: LocalServer
    tls: Tls

    def uri(self, name: str) -> str:
        return f"abfss://{WORKSPACE}@onelake.dfs.fabric.microsoft.com/Lakehouse1.Lakehouse/Tables/{name}"

    def config(self, **kw: Any) -> AzureConfig:
        fields: dict[str, Any] = {
            "endpoint": self.azurite.endpoint,
            "client_id": CLIENT,
            "client_secret": SECRET,
            "tenant_id": TENANT,
            "authority_host": self.entra.url,
            "create_container": True,
        }
        fields.update(kw)
        return AzureConfig(**fields)

    def blob_names(self, prefix: str) -> list[str]:
        """List the container with Azurite's shared key (not through posixlake)."""
        from azure.storage.blob import BlobServiceClient

        from posixlake.storage import EMULATOR_ACCOUNT, EMULATOR_KEY

        client = BlobServiceClient(
            self.azurite.endpoint,
            credential={"account_name": EMULATOR_ACCOUNT, "account_key": EMULATOR_KEY},
            connection_verify=self.tls.ca_file,
        )
        container = client.get_container_client(WORKSPACE)
        if not container.exists():
            return []
        return sorted(b.name for b in container.list_blobs(name_starts_with=prefix))


@pytest.fixture(scope="module")
def onelake_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OneLake, str]]:
    tls = _make_tls(tmp_path_factory.mktemp("tls"))
    try:
        azurite = start_azurite(
            workdir=str(tmp_path_factory.mktemp("azurite-oauth")),
            https=(tls.cert_file, tls.key_file),
        )
    except ServerUnavailable as err:
        pytest.skip(str(err))
    entra = FakeEntra(tls, tmp_path_factory.mktemp("entra") / "requests.jsonl")
    with azurite:
        try:
            yield OneLake(entra, azurite, tls), tls.ca_file
        finally:
            entra.close()


@pytest.fixture
def onelake(onelake_servers: tuple[OneLake, str], monkeypatch: pytest.MonkeyPatch) -> OneLake:
    """The servers, with this test's environment trusting the test CA and no Azure variables."""
    lake, ca_file = onelake_servers
    lake.entra.reset()
    # Each test starts without azure-identity tokens cached in this process.
    azure_module._cached_principal_credential.cache_clear()
    for name in (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_NAME",
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_ENDPOINT",
        "AZURE_STORAGE_USE_EMULATOR",
        "AZURE_STORAGE_CLIENT_ID",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_STORAGE_TENANT_ID",
        "AZURE_AUTHORITY_HOST",
        "AZURE_CLIENT_ID",
        "AZURE_CLIENT_SECRET",
        "AZURE_TENANT_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    # azure-core (requests) and delta-rs (rustls with native roots) trust the test CA.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", ca_file)
    monkeypatch.setenv("SSL_CERT_FILE", ca_file)
    monkeypatch.setenv("POSIXLAKE_ENGINE", "local")
    return lake


SCHEMA = Schema([Field("id", "Int64", False), Field("name", "String")])


# -- the tests ------------------------------------------------------------------------------


def test_options_for_a_onelake_uri_name_the_fabric_endpoint_and_the_principal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AZURE_STORAGE_ENDPOINT", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_AUTHORITY_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_ID", CLIENT)
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_SECRET", SECRET)
    monkeypatch.setenv("AZURE_STORAGE_TENANT_ID", TENANT)
    uri = "abfss://ws@onelake.dfs.fabric.microsoft.com/item.Lakehouse/Tables/sales"
    opts = storage_options_for(uri, None)
    assert opts is not None
    assert opts["azure_storage_account_name"] == "onelake"
    assert opts["azure_use_fabric_endpoint"] == "true"
    assert (opts["azure_client_id"], opts["azure_client_secret"], opts["azure_tenant_id"]) == (
        CLIENT,
        SECRET,
        TENANT,
    )
    assert "azure_storage_account_key" not in opts
    assert "azure_authority_host" not in opts  # object_store's public-cloud default
    cfg = AzureConfig.from_env().for_uri(uri).resolved()
    assert cfg.account_url == "https://onelake.blob.fabric.microsoft.com"
    assert SECRET not in repr(cfg)


def test_a_service_principal_creates_writes_and_reads_a_onelake_table(onelake: OneLake) -> None:
    uri = onelake.uri("people")
    with DatabaseOps.create(uri, SCHEMA, storage=onelake.config(), engine="local") as db:
        assert db.insert([{"id": 1, "name": "ana"}, {"id": 2, "name": "bo"}]) == 2
    again = DatabaseOps.open(uri, storage=onelake.config(), engine="local")
    assert again.query("SELECT id, name FROM data ORDER BY id").to_pylist() == [
        {"id": 1, "name": "ana"},
        {"id": 2, "name": "bo"},
    ]
    # The table's files are in the workspace container under <item>/Tables/<name>.
    names = onelake.blob_names("Lakehouse1.Lakehouse/Tables/people/")
    assert "Lakehouse1.Lakehouse/Tables/people/_delta_log/00000000000000000000.json" in names
    assert any(n.endswith(".parquet") for n in names)
    # Both clients got their tokens from the configured authority, for this principal.
    tokens = onelake.entra.tokens
    assert {t.msal for t in tokens} == {True, False}, "azure-identity and delta-rs both ask"
    for t in tokens:
        assert t.tenant == TENANT
        assert t.form["grant_type"] == "client_credentials"
        assert t.form["client_id"] == CLIENT
        assert t.form["client_secret"] == SECRET
        assert t.form["scope"] == "https://storage.azure.com/.default"
    # No request left for login.microsoftonline.com: discovery went to the authority too.
    assert f"GET /{TENANT}/v2.0/.well-known/openid-configuration" in onelake.entra.paths


def test_the_object_store_writes_and_reads_onelake_files(onelake: OneLake) -> None:
    """Backups and security files go through :func:`open_store` with delta-rs' options."""
    uri = onelake.uri("files")
    prepare(uri, onelake.config(), create=True)  # the workspace's container
    options = storage_options_for(uri, onelake.config())
    assert options is not None
    store = open_store(uri, options)
    store.write_bytes("_posixlake/probe.txt", b"hello", if_absent=True)
    assert store.read_bytes("_posixlake/probe.txt") == b"hello"
    assert [e.key for e in store.list("_posixlake")] == ["_posixlake/probe.txt"]
    assert onelake.blob_names("Lakehouse1.Lakehouse/Tables/files/") == [
        "Lakehouse1.Lakehouse/Tables/files/_posixlake/probe.txt"
    ]
    assert [t.form["client_id"] for t in onelake.entra.tokens] == [CLIENT]
    # A second store for the same principal reuses the token.
    assert open_store(uri, options).read_bytes("_posixlake/probe.txt") == b"hello"
    assert len(onelake.entra.tokens) == 1


def test_azurite_refuses_the_table_without_a_token(onelake: OneLake) -> None:
    """The Azurite of these tests checks bearer tokens: no credential, no table."""
    uri = onelake.uri("nobody")
    with pytest.raises(StorageAuthenticationError, match="AZURE_STORAGE_CLIENT_ID"):
        DatabaseOps.create(
            uri,
            SCHEMA,
            storage=onelake.config(client_id=None, client_secret=None, tenant_id=None),
            engine="local",
        )
    assert onelake.blob_names("Lakehouse1.Lakehouse/Tables/nobody/") == []


def test_a_wrong_secret_is_a_clear_error_naming_the_variables(onelake: OneLake) -> None:
    uri = onelake.uri("wrong")
    with pytest.raises(StorageAuthenticationError) as info:
        DatabaseOps.create(
            uri, SCHEMA, storage=onelake.config(client_secret="not-it"), engine="local"
        )
    message = str(info.value)
    assert CLIENT in message
    for name in (
        "AZURE_STORAGE_CLIENT_ID",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_STORAGE_TENANT_ID",
    ):
        assert name in message
    assert "not-it" not in message
    assert onelake.entra.tokens and onelake.entra.tokens[0].form["client_secret"] == "not-it"
    assert onelake.blob_names("Lakehouse1.Lakehouse/Tables/wrong/") == []


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        (
            {"AZURE_STORAGE_CLIENT_ID": CLIENT},
            ["AZURE_STORAGE_CLIENT_SECRET", "AZURE_STORAGE_TENANT_ID"],
        ),
        (
            {"AZURE_STORAGE_CLIENT_ID": CLIENT, "AZURE_STORAGE_TENANT_ID": TENANT},
            ["AZURE_STORAGE_CLIENT_SECRET"],
        ),
    ],
)
def test_an_incomplete_principal_names_what_is_missing(
    onelake: OneLake,
    monkeypatch: pytest.MonkeyPatch,
    given: dict[str, str],
    missing: list[str],
) -> None:
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    cfg = AzureConfig(endpoint=onelake.azurite.endpoint, authority_host=onelake.entra.url)
    with pytest.raises(StorageAuthenticationError) as info:
        DatabaseOps.create(onelake.uri("partial"), SCHEMA, storage=cfg, engine="local")
    message = str(info.value)
    for name in missing:
        assert name in message
    assert onelake.entra.tokens == []


def test_an_account_key_wins_over_a_partial_principal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_ID", CLIENT)
    opts = storage_options_for("az://c/t", AzureConfig("acct", "a2V5"))
    assert opts is not None
    assert opts["azure_storage_account_key"] == "a2V5"
    assert "azure_client_id" not in opts


def test_a_plain_http_authority_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidOperation, match="https"):
        AzureConfig(authority_host="http://127.0.0.1:1")
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", "http://login.example")
    with pytest.raises(InvalidOperation, match="AZURE_AUTHORITY_HOST"):
        storage_options_for("abfss://ws@onelake.dfs.fabric.microsoft.com/i/Tables/t", None)


def test_the_cli_uses_the_principal_from_the_environment(
    onelake: OneLake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_ID", CLIENT)
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_SECRET", SECRET)
    monkeypatch.setenv("AZURE_STORAGE_TENANT_ID", TENANT)
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", onelake.entra.url)
    uri = onelake.uri("cli_sales")
    where = ["--azure-endpoint", onelake.azurite.endpoint]
    runner = CliRunner()
    made = runner.invoke(
        cli, ["create", uri, "--schema", "id:Int64, item:String", "--create-bucket", *where]
    )
    assert made.exit_code == 0, (made.stdout, made.stderr)
    added = runner.invoke(cli, ["insert", uri, *where], input='{"id": 1, "item": "pen"}\n')
    assert added.exit_code == 0, (added.stdout, added.stderr)
    read = runner.invoke(
        cli, ["query", uri, "SELECT id, item FROM data", "--format", "csv", *where]
    )
    assert read.exit_code == 0, (read.stdout, read.stderr)
    assert read.stdout.splitlines() == ["id,item", "1,pen"]
    assert {t.msal for t in onelake.entra.tokens} == {True, False}
    assert all(t.form["client_id"] == CLIENT for t in onelake.entra.tokens)


def test_the_cli_reports_a_wrong_secret(onelake: OneLake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_ID", CLIENT)
    monkeypatch.setenv("AZURE_STORAGE_CLIENT_SECRET", "not-it")
    monkeypatch.setenv("AZURE_STORAGE_TENANT_ID", TENANT)
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", onelake.entra.url)
    result = CliRunner().invoke(
        cli,
        [
            "create",
            onelake.uri("cli_wrong"),
            "--schema",
            "id:Int64",
            "--create-bucket",
            "--azure-endpoint",
            onelake.azurite.endpoint,
        ],
    )
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "AZURE_STORAGE_CLIENT_SECRET" in last
    assert last.startswith(f"Error: {onelake.uri('cli_wrong')}: Azure rejected the credentials")
    assert "not-it" not in result.stderr
