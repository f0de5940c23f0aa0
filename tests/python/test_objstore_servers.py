"""The loopback object stores of ``support.objstore`` behave as the remote-read tests assume:
moto's S3 (objects, ranges, conditions, 404s, 403s for wrong credentials), nginx (suffix ranges,
ETag, If-Match, read-only, torn down) and the fault proxy (forwards, delays, cuts, drops)."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import threading
import time

import pytest
from botocore.exceptions import ClientError

from support.objstore import (
    FaultProxy,
    moto_s3,
    nginx_http,
    s3_fixture,  # noqa: F401  (the `s3` fixture)
)

DATA = os.urandom(200_000)


def fetch(host: str, port: int, path: str = "/blob.bin", method: str = "GET", timeout=5, **hdr):
    """(status, headers, body) of one request on a connection of its own."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request(method, path, headers={k.replace("_", "-"): v for k, v in hdr.items()})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def error_of(call) -> tuple[int, str]:
    """(HTTP status, S3 error code) of the ClientError ``call()`` raises."""
    with pytest.raises(ClientError) as info:
        call()
    resp = info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


# --------------------------------------------------------------------------------------------
# moto S3
# --------------------------------------------------------------------------------------------


# First in the module: moto's state is per process, so this server cannot run beside the
# module's `s3` fixture, which the tests after it set up.
def test_moto_auth_rejects_wrong_credentials():
    with moto_s3(auth=True) as s3:
        # The server's own credentials (minted for an IAM user) work...
        assert s3.env["AWS_ACCESS_KEY_ID"].startswith("AKIA")
        url = s3.put("authed", "k.bin", b"payload")
        assert url == "s3://authed/k.bin"
        assert s3.client().get_object(Bucket="authed", Key="k.bin")["Body"].read() == b"payload"
        # ...an unknown key, a wrong secret and moto's default keys do not.
        unknown = s3.client(aws_access_key_id="AKIAUNKNOWNUNKNOWN00", aws_secret_access_key="x")
        assert error_of(lambda: unknown.get_object(Bucket="authed", Key="k.bin")) == (
            403,
            "InvalidAccessKeyId",
        )
        wrong = s3.client(aws_secret_access_key="wrong")
        assert error_of(lambda: wrong.get_object(Bucket="authed", Key="k.bin")) == (
            403,
            "SignatureDoesNotMatch",
        )
        assert error_of(lambda: wrong.head_object(Bucket="authed", Key="k.bin"))[0] == 403
        default = s3.client(aws_access_key_id="testing", aws_secret_access_key="testing")
        assert error_of(lambda: default.list_objects_v2(Bucket="authed"))[0] == 403


def test_moto_one_server_at_a_time_and_isolated(s3):
    with pytest.raises(RuntimeError, match="one moto_s3"), moto_s3():
        pass
    # The server of the test above was wiped: its bucket is not in this one.
    names = [b["Name"] for b in s3.client().list_buckets()["Buckets"]]
    assert "authed" not in names


def test_moto_env_and_urls(s3):
    env = s3.env
    assert env["AWS_ENDPOINT_URL"] == s3.endpoint
    assert s3.endpoint.startswith("http://127.0.0.1:")
    assert int(s3.endpoint.rsplit(":", 1)[1]) == s3.port > 0
    assert env["AWS_ACCESS_KEY_ID"] == env["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ALLOW_HTTP"] == "true"
    assert s3.url("b", "dir/k.npz") == "s3://b/dir/k.npz"


def test_moto_buckets_are_fresh(s3):
    a, b = s3.bucket("Shards_Test"), s3.bucket("Shards_Test")
    assert a != b
    for name in (a, b):
        assert name.startswith("shards-test-")
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", name), name
        assert s3.client().list_objects_v2(Bucket=name)["KeyCount"] == 0
    unmade = s3.bucket("later", create=False)
    assert error_of(lambda: s3.client().head_bucket(Bucket=unmade))[0] == 404


def test_moto_put_list_head_get(s3, tmp_path):
    bucket = s3.bucket("objects")
    path = tmp_path / "blob.bin"
    path.write_bytes(DATA)
    assert s3.put(bucket, "dir/from-path.bin", path) == f"s3://{bucket}/dir/from-path.bin"
    s3.put(bucket, "dir/from-bytes.bin", b"abc")
    s3.put(f"{bucket}-made-by-put", "k", b"x")  # a missing bucket is created
    client = s3.client()
    listed = client.list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == ["dir/from-bytes.bin", "dir/from-path.bin"]
    head = client.head_object(Bucket=bucket, Key="dir/from-path.bin")
    assert head["ContentLength"] == len(DATA)
    assert head["ETag"] == f'"{hashlib.md5(DATA).hexdigest()}"'
    got = client.get_object(Bucket=bucket, Key="dir/from-path.bin")["Body"].read()
    assert got == DATA
    assert client.get_object(Bucket=f"{bucket}-made-by-put", Key="k")["Body"].read() == b"x"


def test_moto_ranged_get_and_if_match(s3):
    bucket = s3.bucket("ranges")
    s3.put(bucket, "k", DATA)
    client = s3.client()
    etag = client.head_object(Bucket=bucket, Key="k")["ETag"]
    got = client.get_object(Bucket=bucket, Key="k", Range="bytes=-100")
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {len(DATA) - 100}-{len(DATA) - 1}/{len(DATA)}"
    assert got["Body"].read() == DATA[-100:]
    assert got["ETag"] == etag  # a range carries the whole object's ETag
    got = client.get_object(Bucket=bucket, Key="k", Range="bytes=10-19", IfMatch=etag)
    assert got["Body"].read() == DATA[10:20]
    assert error_of(
        lambda: client.get_object(Bucket=bucket, Key="k", Range="bytes=0-9", IfMatch='"stale"')
    ) == (412, "PreconditionFailed")
    assert error_of(lambda: client.get_object(Bucket=bucket, Key="k", Range="bytes=999999-")) == (
        416,
        "InvalidRange",
    )


def test_moto_missing(s3):
    bucket = s3.bucket("missing")
    client = s3.client()
    assert error_of(lambda: client.head_object(Bucket=bucket, Key="nope"))[0] == 404
    assert error_of(lambda: client.get_object(Bucket=bucket, Key="nope")) == (404, "NoSuchKey")
    gone = s3.bucket("gone", create=False)
    assert error_of(lambda: client.get_object(Bucket=gone, Key="k")) == (404, "NoSuchBucket")


def test_moto_require_auth_is_temporary(s3):
    bucket = s3.bucket("auth")
    s3.put(bucket, "k", b"v")
    anyone = s3.client(aws_access_key_id="anyone", aws_secret_access_key="anything")
    assert anyone.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    with s3.require_auth() as (key_id, secret):
        assert (s3.env["AWS_ACCESS_KEY_ID"], s3.env["AWS_SECRET_ACCESS_KEY"]) == (key_id, secret)
        assert s3.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
        assert error_of(lambda: anyone.get_object(Bucket=bucket, Key="k")) == (
            403,
            "InvalidAccessKeyId",
        )
    assert s3.env["AWS_ACCESS_KEY_ID"] == "testing"
    assert anyone.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"


def test_moto_through_the_proxy(s3):
    bucket = s3.bucket("proxied")
    s3.put(bucket, "k", DATA)
    with FaultProxy(s3.host, s3.port) as proxy:
        client = s3.client(endpoint_url=proxy.address)
        assert (
            client.get_object(Bucket=bucket, Key="k", Range="bytes=-10")["Body"].read()
            == (DATA[-10:])
        )
        assert proxy.connections >= 1


# --------------------------------------------------------------------------------------------
# nginx
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "blob.bin").write_bytes(DATA)
    (root / "sub").mkdir()
    (root / "sub" / "small.txt").write_bytes(b"hello")
    return root


@pytest.fixture(scope="module")
def web(http_root):
    with nginx_http(http_root) as server:
        yield server


def test_nginx_head_etag_length(web):
    assert web.base == f"http://127.0.0.1:{web.port}"
    status, headers, body = fetch(web.host, web.port, method="HEAD")
    assert status == 200
    assert body == b""
    assert int(headers["content-length"]) == len(DATA)
    assert re.fullmatch(r'"[0-9a-f]+-[0-9a-f]+"', headers["etag"])  # "mtime-size" in hex
    assert headers["accept-ranges"] == "bytes"
    status, _, body = fetch(web.host, web.port, "/sub/small.txt")
    assert (status, body) == (200, b"hello")


def test_nginx_ranges(web):
    status, headers, body = fetch(web.host, web.port, Range="bytes=-100")
    assert status == 206
    assert body == DATA[-100:]
    assert headers["content-range"] == f"bytes {len(DATA) - 100}-{len(DATA) - 1}/{len(DATA)}"
    status, _, body = fetch(web.host, web.port, Range="bytes=1000-1999")
    assert (status, body) == (206, DATA[1000:2000])
    status, headers, _ = fetch(web.host, web.port, Range=f"bytes={len(DATA)}-")
    assert status == 416
    assert headers["content-range"] == f"bytes */{len(DATA)}"


def test_nginx_if_match(web):
    etag = fetch(web.host, web.port, method="HEAD")[1]["etag"]
    assert fetch(web.host, web.port, If_Match='"stale"')[0] == 412
    assert fetch(web.host, web.port, If_Match='"stale"', Range="bytes=-100")[0] == 412
    status, _, body = fetch(web.host, web.port, If_Match=etag, Range="bytes=-100")
    assert (status, body) == (206, DATA[-100:])
    assert fetch(web.host, web.port, If_None_Match=etag)[0] == 304


def test_nginx_read_only_no_listing(web, http_root):
    assert fetch(web.host, web.port, "/")[0] == 403  # autoindex off
    assert fetch(web.host, web.port, "/sub/")[0] == 403
    assert fetch(web.host, web.port, "/nope.bin")[0] == 404
    for method in ("PUT", "POST", "DELETE"):
        assert fetch(web.host, web.port, "/blob.bin", method=method)[0] in (403, 405)
    assert (http_root / "blob.bin").read_bytes() == DATA


def test_nginx_torn_down(http_root):
    with nginx_http(http_root) as server:
        pid, port = server.proc.pid, server.port
        assert fetch(server.host, port, Range="bytes=0-0")[2] == DATA[:1]
        assert not str(server.prefix).startswith(("/var", "/etc"))
    assert server.proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # master and workers are all gone
    assert refused(port)
    assert not server.prefix.exists()


# --------------------------------------------------------------------------------------------
# FaultProxy
# --------------------------------------------------------------------------------------------


@pytest.fixture
def proxy(web):
    with FaultProxy(web.host, web.port) as p:
        yield p


def timed_fetch(proxy, **hdr):
    t = time.perf_counter()
    status, _, body = fetch(proxy.host, proxy.port, **hdr)
    return status, body, time.perf_counter() - t


def test_proxy_forwards(proxy):
    assert proxy.address == f"http://127.0.0.1:{proxy.port}"
    status, _, body = fetch(proxy.host, proxy.port)
    assert (status, body) == (200, DATA)
    status, _, body = fetch(proxy.host, proxy.port, Range="bytes=-100")
    assert (status, body) == (206, DATA[-100:])
    assert proxy.connections == 2
    assert proxy.dropped == proxy.cut == 0


def test_proxy_delay(proxy):
    _, _, fast = timed_fetch(proxy, Range="bytes=0-9")
    proxy.delay = 0.3
    status, body, slow = timed_fetch(proxy, Range="bytes=0-9")
    assert (status, body) == (206, DATA[:10])
    assert slow >= 0.3 > fast
    # Each response on a kept-alive connection waits again.
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=5)
    for _ in range(2):
        t = time.perf_counter()
        conn.request("GET", "/blob.bin", headers={"Range": "bytes=-5"})
        assert conn.getresponse().read() == DATA[-5:]
        assert time.perf_counter() - t >= 0.3
    conn.close()
    assert proxy.connections == 3


def test_proxy_cut_after_bytes(proxy):
    proxy.cut_after_bytes = 5000
    conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=5)
    conn.request("GET", "/blob.bin")
    resp = conn.getresponse()
    assert resp.status == 200
    with pytest.raises(http.client.IncompleteRead) as info:
        resp.read()
    conn.close()
    partial = info.value.partial
    assert 0 < len(partial) < 5000
    assert DATA.startswith(partial)
    assert proxy.cut == 1
    proxy.reset = True
    with pytest.raises(ConnectionResetError):
        fetch(proxy.host, proxy.port)
    proxy.cut_after_bytes = None
    assert fetch(proxy.host, proxy.port)[2] == DATA


def test_proxy_down_and_drops(proxy):
    proxy.down = True
    with pytest.raises(http.client.RemoteDisconnected):
        fetch(proxy.host, proxy.port)
    assert proxy.dropped == 1
    proxy.down = False
    assert fetch(proxy.host, proxy.port, Range="bytes=0-0")[2] == DATA[:1]
    proxy.drop_every = 2
    outcomes = []
    for _ in range(4):
        try:
            outcomes.append(fetch(proxy.host, proxy.port, Range="bytes=0-0")[0])
        except http.client.RemoteDisconnected:
            outcomes.append("dropped")
    assert outcomes == [206, "dropped", 206, "dropped"]
    assert proxy.dropped == 3
    assert proxy.connections == 6


def test_proxy_blackhole(proxy):
    proxy.blackhole = True
    t = time.perf_counter()
    with pytest.raises(TimeoutError):
        fetch(proxy.host, proxy.port, timeout=0.5)
    assert time.perf_counter() - t >= 0.5
    proxy.blackhole = False
    assert fetch(proxy.host, proxy.port, Range="bytes=0-0")[0] == 206


def test_proxy_closes_everything(web):
    before = {t.ident for t in threading.enumerate()}
    p = FaultProxy(web.host, web.port)
    conn = http.client.HTTPConnection(p.host, p.port, timeout=5)
    conn.request("GET", "/blob.bin", headers={"Range": "bytes=0-0"})
    assert conn.getresponse().read() == DATA[:1]  # the connection stays open (keep-alive)
    p.blackhole = True
    held = socket.create_connection((p.host, p.port))
    deadline = time.monotonic() + 5
    while p.connections < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.connections == 2
    p.close()
    assert refused(p.port)
    assert held.recv(1) == b""  # closed by the proxy
    held.close()
    conn.close()
    leftover = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    assert leftover == []
