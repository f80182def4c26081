"""S3Config / AzureConfig: options for delta-rs, environment fallbacks, URI parsing (no servers)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posixlake import AzureConfig, S3Config
from posixlake.errors import InvalidOperation
from posixlake.storage import (
    EMULATOR_ACCOUNT,
    EMULATOR_KEY,
    ObjectLocation,
    config_for,
    is_local,
    normalize_uri,
    parse_uri,
    storage_options_for,
)

AWS_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
)
AZURE_VARS = (
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT_NAME",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ENDPOINT",
    "AZURE_STORAGE_USE_EMULATOR",
    "AZURITE_BLOB_STORAGE_URL",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run each test without the caller's cloud credentials."""
    for name in (*AWS_VARS, *AZURE_VARS):
        monkeypatch.delenv(name, raising=False)


# -- URIs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/a/b", ObjectLocation("s3", "bucket", "a/b")),
        ("s3a://bucket/a/", ObjectLocation("s3", "bucket", "a")),
        ("s3://bucket", ObjectLocation("s3", "bucket", "")),
        ("az://ctr/t", ObjectLocation("azure", "ctr", "t")),
        ("azure://ctr/x/y", ObjectLocation("azure", "ctr", "x/y")),
        (
            "abfss://ctr@acct.dfs.core.windows.net/t",
            ObjectLocation("azure", "ctr", "t", "acct"),
        ),
        ("abfs://ctr/t", ObjectLocation("azure", "ctr", "t")),
        ("/tmp/table", None),
        ("file:///tmp/table", None),
        ("gs://bucket/t", None),
    ],
)
def test_parse_uri(uri: str, expected: ObjectLocation | None) -> None:
    assert parse_uri(uri) == expected


@pytest.mark.parametrize(
    "uri", ["s3:///path", "az:///path", "abfss://@acct.dfs.core.windows.net/p"]
)
def test_parse_uri_without_bucket(uri: str) -> None:
    with pytest.raises(InvalidOperation):
        parse_uri(uri)


def test_location_keys() -> None:
    loc = ObjectLocation("s3", "b", "t")
    assert loc.key("_delta_log/0.json") == "t/_delta_log/0.json"
    assert loc.dir_prefix == "t/"
    root = ObjectLocation("s3", "b", "")
    assert root.key("/x") == "x"
    assert root.dir_prefix == ""


def test_local_helpers_unchanged(tmp_path: os.PathLike[str]) -> None:
    assert is_local("/a/b") and is_local("file:///a") and is_local("rel/path")
    assert not is_local("s3://b/t")
    assert normalize_uri("s3://b/t/") == "s3://b/t"
    assert normalize_uri("file:///x/y") == "/x/y"
    assert normalize_uri("rel") == os.path.abspath("rel")
    assert storage_options_for("/x", None) is None
    assert storage_options_for("/x", {"a": 1}) == {"a": "1"}


# -- S3 ----------------------------------------------------------------------------------


def test_s3_options_for_a_local_server() -> None:
    cfg = S3Config("http://127.0.0.1:9000", "key", "secret", "eu-west-1")
    opts = cfg.storage_options()
    assert opts["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert opts["AWS_ACCESS_KEY_ID"] == "key"
    assert opts["AWS_SECRET_ACCESS_KEY"] == "secret"
    assert opts["AWS_REGION"] == "eu-west-1"
    assert opts["AWS_ALLOW_HTTP"] == "true"
    assert opts["conditional_put"] == "etag"
    assert opts["connect_timeout"] == "5000ms"
    assert opts["max_retries"] == "3"
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in opts
    assert "timeout" not in opts


def test_s3_https_endpoint_does_not_allow_http() -> None:
    opts = S3Config("https://s3.example.com", "k", "s").storage_options()
    assert "AWS_ALLOW_HTTP" not in opts
    assert opts["AWS_REGION"] == "us-east-1"


def test_s3_keyword_fields_and_extra_options() -> None:
    cfg = S3Config(
        endpoint="https://minio.local",
        access_key_id="k",
        secret_access_key="s",
        session_token="tok",
        virtual_hosted_style=True,
        allow_http=True,
        timeout=12.5,
        connect_timeout=0.25,
        max_retries=0,
        options={"max_retries": "7", "AWS_S3_EXPRESS": "false"},
    )
    opts = cfg.storage_options()
    assert opts["AWS_SESSION_TOKEN"] == "tok"
    assert opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] == "true"
    assert opts["AWS_ALLOW_HTTP"] == "true"
    assert opts["timeout"] == "12500ms"
    assert opts["connect_timeout"] == "250ms"
    assert opts["max_retries"] == "7"  # explicit options win
    assert opts["AWS_S3_EXPRESS"] == "false"


def test_s3_repr_hides_secrets() -> None:
    cfg = S3Config("http://h:1", "AKIDVISIBLE", "very-secret", session_token="tok-secret")
    text = repr(cfg)
    assert "AKIDVISIBLE" in text
    assert "very-secret" not in text and "tok-secret" not in text


def test_s3_environment_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "envkey")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    opts = S3Config().storage_options()
    assert opts["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4566"
    assert opts["AWS_ACCESS_KEY_ID"] == "envkey"
    assert opts["AWS_SECRET_ACCESS_KEY"] == "envsecret"
    assert opts["AWS_REGION"] == "ap-south-1"
    assert opts["AWS_ALLOW_HTTP"] == "true"
    # explicit fields win over the environment
    assert S3Config(access_key_id="mine").storage_options()["AWS_ACCESS_KEY_ID"] == "mine"
    assert S3Config.from_env(region="us-west-2").region == "us-west-2"
    # the S3-specific endpoint variable wins over the generic one
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9999")
    assert S3Config().resolved().endpoint == "http://127.0.0.1:9999"
    # storage=None on an S3 URI uses the environment too
    none_opts = storage_options_for("s3://b/t", None)
    assert none_opts is not None and none_opts["AWS_ACCESS_KEY_ID"] == "envkey"


def test_s3_from_options_understands_delta_rs_spellings() -> None:
    cfg = S3Config.from_options(
        {
            "aws_endpoint": "http://h:9000",
            "AWS_ACCESS_KEY_ID": "k",
            "aws_secret_access_key": "s",
            "region": "eu-central-1",
            "create_bucket": "true",
            "AWS_S3_LOCKING_PROVIDER": "dynamodb",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
            "timeout": "30s",
        }
    )
    assert (cfg.endpoint, cfg.access_key_id, cfg.secret_access_key, cfg.region) == (
        "http://h:9000",
        "k",
        "s",
        "eu-central-1",
    )
    assert cfg.create_bucket is True
    opts = cfg.storage_options()
    assert opts["timeout"] == "30s"
    assert "AWS_S3_LOCKING_PROVIDER" not in opts  # delta-rs 1.x has no DynamoDB lock
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in opts


@pytest.mark.parametrize(
    "kwargs",
    [
        {"endpoint": "127.0.0.1:9000"},
        {"endpoint": "ftp://x"},
        {"connect_timeout": 0},
        {"timeout": -1.0},
        {"max_retries": -1},
        {"max_retries": True},
    ],
)
def test_s3_bad_config(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidOperation):
        S3Config(**kwargs)  # type: ignore[arg-type]


def test_bad_boolean_option() -> None:
    with pytest.raises(InvalidOperation):
        S3Config.from_options({"allow_http": "maybe"})


_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)


@given(
    endpoint=st.one_of(st.none(), _text.map(lambda h: f"http://{h}:9000")),
    key=st.one_of(st.none(), _text),
    secret=st.one_of(st.none(), _text),
    region=_text,
    virtual=st.booleans(),
)
def test_s3_options_round_trip(
    endpoint: str | None, key: str | None, secret: str | None, region: str, virtual: bool
) -> None:
    """from_options(storage_options()) gives back the same options."""
    cfg = S3Config(endpoint, key, secret, region, virtual_hosted_style=virtual)
    opts = cfg.storage_options()
    assert S3Config.from_options(opts).storage_options() == opts


# -- Azure -------------------------------------------------------------------------------


def test_azure_options_with_key() -> None:
    cfg = AzureConfig("acct", "a2V5", None)
    opts = cfg.storage_options()
    assert opts["azure_storage_account_name"] == "acct"
    assert opts["azure_storage_account_key"] == "a2V5"
    assert "azure_storage_endpoint" not in opts
    assert "azure_allow_http" not in opts
    assert cfg.account_url == "https://acct.blob.core.windows.net"
    assert "a2V5" not in repr(cfg)


def test_azure_emulator_defaults_and_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = AzureConfig(use_emulator=True).storage_options()
    assert opts["azure_storage_account_name"] == EMULATOR_ACCOUNT
    assert opts["azure_storage_account_key"] == EMULATOR_KEY
    assert opts["azure_storage_endpoint"] == "http://127.0.0.1:10000/devstoreaccount1"
    assert opts["azure_allow_http"] == "true"
    assert "azure_storage_use_emulator" not in opts  # explicit endpoint instead
    custom = AzureConfig.emulator("http://127.0.0.1:41234").storage_options()
    assert custom["azure_storage_endpoint"] == "http://127.0.0.1:41234/devstoreaccount1"
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:5555")
    env = AzureConfig(use_emulator=True).storage_options()
    assert env["azure_storage_endpoint"] == "http://127.0.0.1:5555/devstoreaccount1"


def test_azure_endpoint_with_account_path_kept() -> None:
    cfg = AzureConfig("devstoreaccount1", EMULATOR_KEY, "http://127.0.0.1:10000/devstoreaccount1")
    assert (
        cfg.storage_options()["azure_storage_endpoint"] == "http://127.0.0.1:10000/devstoreaccount1"
    )
    host_style = AzureConfig("acct", "k", "https://acct.blob.core.usgovcloudapi.net")
    assert host_style.account_url == "https://acct.blob.core.usgovcloudapi.net"


def test_azure_connection_strings() -> None:
    cfg = AzureConfig.from_connection_string(
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net"
    )
    assert (cfg.account_name, cfg.account_key) == ("acct", "a2V5")
    assert cfg.account_url == "https://acct.blob.core.windows.net"
    azurite = AzureConfig.from_connection_string(
        f"DefaultEndpointsProtocol=http;AccountName={EMULATOR_ACCOUNT};AccountKey={EMULATOR_KEY};"
        "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"
    )
    assert azurite.storage_options()["azure_storage_endpoint"] == (
        "http://127.0.0.1:10000/devstoreaccount1"
    )
    dev = AzureConfig.from_connection_string("UseDevelopmentStorage=true")
    assert dev.use_emulator and dev.resolved().account_name == EMULATOR_ACCOUNT
    sas = AzureConfig.from_connection_string(
        "BlobEndpoint=https://acct.blob.core.windows.net;SharedAccessSignature=sv=2024&sig=x"
    )
    assert sas.storage_options()["azure_storage_sas_token"] == "sv=2024&sig=x"


@pytest.mark.parametrize("text", ["", ";;", "AccountName", "Foo=bar"])
def test_azure_bad_connection_string(text: str) -> None:
    with pytest.raises(InvalidOperation):
        AzureConfig.from_connection_string(text)


def test_azure_environment_fallbacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_NAME", "envacct")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", "ZW52")
    opts = AzureConfig().storage_options()
    assert opts["azure_storage_account_name"] == "envacct"
    assert opts["azure_storage_account_key"] == "ZW52"
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_NAME")
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT_KEY")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    dev = storage_options_for("az://c/t", None)
    assert dev is not None and dev["azure_storage_account_name"] == EMULATOR_ACCOUNT


def test_azure_account_from_abfs_uri() -> None:
    cfg = config_for("abfss://ctr@myacct.dfs.core.windows.net/t", AzureConfig(account_key="k"))
    assert isinstance(cfg, AzureConfig) and cfg.account_name == "myacct"
    explicit = config_for("abfss://ctr@myacct.dfs.core.windows.net/t", AzureConfig("other", "k"))
    assert isinstance(explicit, AzureConfig) and explicit.account_name == "other"


def test_azure_from_options() -> None:
    cfg = AzureConfig.from_options(
        {
            "account_name": "a",
            "AZURE_STORAGE_ACCOUNT_KEY": "k",
            "azure_storage_endpoint": "http://127.0.0.1:1/a",
            "create_bucket": "yes",
            "timeout": "9s",
        }
    )
    assert (cfg.account_name, cfg.account_key, cfg.create_container) == ("a", "k", True)
    assert cfg.storage_options()["timeout"] == "9s"
    from_conn = AzureConfig.from_options({"connection_string": "UseDevelopmentStorage=true"})
    assert from_conn.use_emulator


def test_config_kind_must_match_uri() -> None:
    with pytest.raises(InvalidOperation):
        config_for("s3://b/t", AzureConfig("a", "k"))
    with pytest.raises(InvalidOperation):
        config_for("az://c/t", S3Config("http://h:1"))
    assert config_for("/local", S3Config()) is None
    mapped = config_for("s3://b/t", {"AWS_ENDPOINT_URL": "http://h:1"})
    assert isinstance(mapped, S3Config) and mapped.endpoint == "http://h:1"
