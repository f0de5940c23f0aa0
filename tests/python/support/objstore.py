"""Loopback object stores for the remote-read tests: an S3 endpoint (moto's server, in this
process), a static HTTP server (nginx, a child process) and a TCP proxy that injects faults
(latency, dropped and cut connections, an unreachable or silent server) between a reader and
either of them. Everything listens on 127.0.0.1 on a free port and is torn down on exit.

    with moto_s3() as s3:
        url = s3.put(s3.bucket("npz"), "a.npz", path)        # "s3://npz-1-3fa2c1/a.npz"
        os.environ.update(s3.env)                           # AWS_ENDPOINT_URL, keys, region

    with nginx_http(tmp_path) as http, FaultProxy(http.host, http.port) as proxy:
        proxy.delay = 0.2
        read(proxy.address + "/a.npz")
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (another process may take it before
    the caller binds it: callers that cannot bind port 0 themselves retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0, alive=lambda: True) -> None:
    """Returns once 127.0.0.1:``port`` accepts a connection; raises ``TimeoutError`` after
    ``timeout`` seconds, or ``RuntimeError`` as soon as ``alive()`` is false."""
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise RuntimeError(f"the server meant for port {port} exited")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing accepts connections on {LOOPBACK}:{port}") from None
            time.sleep(0.02)


# --------------------------------------------------------------------------------------------
# S3: moto's server
# --------------------------------------------------------------------------------------------

#: moto keeps its state (buckets, IAM users, the authentication switch) per process, not per
#: server, so one ``moto_s3()`` at a time: a second one would share and reset the first's state.
_moto_lock = threading.Lock()


class MotoS3:
    """A running moto S3 server (see ``moto_s3``)."""

    def __init__(self, host: str, port: int):
        self.host = host
        self.port = port
        self.endpoint = f"http://{host}:{port}"
        self.access_key_id = "testing"
        self.secret_access_key = "testing"
        self.region = "us-east-1"
        self._names = itertools.count(1)

    @property
    def env(self) -> dict[str, str]:
        """The variables an S3 client reads (object_store's ``from_env``, boto3): this endpoint,
        credentials it accepts (minted ones while authentication is on), the region, plain
        HTTP allowed."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self, **kwargs):
        """A boto3 S3 client against this server (path-style addressing), with the credentials
        of ``env``; any of boto3.client's arguments overrides (``aws_access_key_id``,
        ``endpoint_url`` to go through a ``FaultProxy``, ``config``...)."""
        import boto3
        from botocore.config import Config

        kwargs.setdefault("endpoint_url", self.endpoint)
        kwargs.setdefault("aws_access_key_id", self.access_key_id)
        kwargs.setdefault("aws_secret_access_key", self.secret_access_key)
        kwargs.setdefault("region_name", self.region)
        kwargs.setdefault("config", Config(s3={"addressing_style": "path"}))
        return boto3.client("s3", **kwargs)

    def url(self, bucket: str, key: str) -> str:
        return f"s3://{bucket}/{key}"

    def bucket(self, name_hint: str = "bucket", *, create: bool = True) -> str:
        """A bucket name used by nothing else in this server's life (``hint-N-xxxxxx``, lower
        case, valid for S3), created unless ``create=False``."""
        hint = re.sub(r"[^a-z0-9-]+", "-", name_hint.lower()).strip("-")[:40] or "bucket"
        name = f"{hint}-{next(self._names)}-{secrets.token_hex(3)}"
        if create:
            self.client().create_bucket(Bucket=name)
        return name

    def put(self, bucket: str, key: str, data: bytes | str | os.PathLike) -> str:
        """Uploads ``data`` (bytes, or the path of a file) as ``bucket/key``, creating the
        bucket if it is missing; returns ``s3://bucket/key``."""
        from botocore.exceptions import ClientError

        body = bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else None
        if body is None:
            body = Path(data).read_bytes()
        client = self.client()
        try:
            client.head_bucket(Bucket=bucket)
        except ClientError as e:
            if e.response["Error"]["Code"] not in ("404", "NoSuchBucket"):
                raise
            client.create_bucket(Bucket=bucket)
        client.put_object(Bucket=bucket, Key=key, Body=body)
        return self.url(bucket, key)

    def reset(self) -> None:
        """Forgets every bucket, object and IAM user (moto's ``/moto-api/reset``)."""
        self._moto_api("reset", b"")

    @contextlib.contextmanager
    def require_auth(self) -> Iterator[tuple[str, str]]:
        """Makes the server check every request's signature against IAM, as S3 does, for the
        duration: wrong or unknown credentials then get 403 (``InvalidAccessKeyId``,
        ``SignatureDoesNotMatch``). moto's own ``testing``/``testing`` keys are no IAM user's,
        so a user allowed everything is made first and its keys become this server's (``env``,
        ``client()``); yields them as ``(access_key_id, secret_access_key)``."""
        user = f"packread-{secrets.token_hex(4)}"
        iam = self._iam()
        iam.create_user(UserName=user)
        iam.put_user_policy(
            UserName=user,
            PolicyName="everything",
            PolicyDocument='{"Version": "2012-10-17", "Statement": '
            '[{"Effect": "Allow", "Action": "*", "Resource": "*"}]}',
        )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        saved = (self.access_key_id, self.secret_access_key)
        # moto authenticates a request once it has served INITIAL_NO_AUTH_ACTION_COUNT
        # unauthenticated ones since the count was last set; 0 means from now on.
        previous = self._moto_api("reset-auth", b"0")["PREVIOUS_INITIAL_NO_AUTH_ACTION_COUNT"]
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
        try:
            yield self.access_key_id, self.secret_access_key
        finally:
            self._moto_api("reset-auth", str(previous).encode())
            self.access_key_id, self.secret_access_key = saved

    def _iam(self):
        import boto3

        return boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            region_name=self.region,
        )

    def _moto_api(self, what: str, data: bytes) -> dict:
        # Not a form (urllib's default type): moto reads the raw body.
        req = urllib.request.Request(
            f"{self.endpoint}/moto-api/{what}",
            data=data,
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read() or b"{}")


@contextlib.contextmanager
def moto_s3(auth: bool = False) -> Iterator[MotoS3]:
    """Runs moto's S3 server in this process on 127.0.0.1 (free port) and yields a ``MotoS3``:
    ``endpoint``, ``env``, ``client()``, ``put()``, ``url()``, ``bucket()``. moto's state is
    wiped when it starts and when it stops. ``auth=True`` checks credentials for the whole life
    of the server (``MotoS3.require_auth``); by default moto takes any credentials. One at a
    time per process (moto's state is global): a second raises ``RuntimeError``."""
    from moto.server import ThreadedMotoServer

    if not _moto_lock.acquire(blocking=False):
        raise RuntimeError("moto keeps its state per process: one moto_s3() at a time")
    # werkzeug logs every request at INFO (on stderr when no handler is set): errors only.
    wlog = logging.getLogger("werkzeug")
    wlog_level = wlog.level
    wlog.setLevel(logging.WARNING)
    try:
        server = ThreadedMotoServer(ip_address=LOOPBACK, port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            s3 = MotoS3(host, port)
            s3.reset()
            with contextlib.ExitStack() as stack:
                if auth:
                    stack.enter_context(s3.require_auth())
                yield s3
            s3.reset()
        finally:
            server.stop()
    finally:
        wlog.setLevel(wlog_level)
        _moto_lock.release()


@pytest.fixture(scope="module", name="s3")
def s3_fixture() -> Iterator[MotoS3]:
    """One moto S3 server per test module; take fresh buckets with ``s3.bucket("hint")``.
    Import it into a test module (``from support.objstore import s3_fixture``) to use it."""
    with moto_s3() as s3:
        yield s3


# --------------------------------------------------------------------------------------------
# HTTP: nginx
# --------------------------------------------------------------------------------------------


class NginxHttp:
    """A running nginx (see ``nginx_http``)."""

    def __init__(self, root: Path, port: int, prefix: Path, proc: subprocess.Popen):
        self.root = root
        self.host = LOOPBACK
        self.port = port
        self.base = f"http://{LOOPBACK}:{port}"
        self.prefix = prefix
        self.proc = proc

    def url(self, relpath: str) -> str:
        return f"{self.base}/{relpath.lstrip('/')}"

    @property
    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _nginx_binary() -> str:
    found = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise RuntimeError("nginx is not installed (make installs it: apt-get install -y nginx)")
    return found


def _nginx_conf(root: Path, port: int, prefix: Path) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {prefix / 'tmp' / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    user = "user root;\n" if os.geteuid() == 0 else ""
    return textwrap.dedent(
        """\
        {user}daemon off;
        master_process on;
        worker_processes 1;
        pid {prefix}/nginx.pid;
        error_log {prefix}/error.log warn;
        events {{
            worker_connections 256;
        }}
        http {{
            access_log {prefix}/access.log;
        {temp}
            default_type application/octet-stream;
            sendfile on;
            tcp_nopush on;
            etag on;
            keepalive_timeout 30s;
            server {{
                listen {host}:{port};
                server_name localhost;
                root {root};
                autoindex off;
                location / {{
                    limit_except GET {{
                        deny all;
                    }}
                }}
                # Folders under /listed/ have index pages (nginx's autoindex), the "listing"
                # an HTTP glob reads.
                location /listed/ {{
                    autoindex on;
                    limit_except GET {{
                        deny all;
                    }}
                }}
            }}
        }}
        """
    ).format(user=user, prefix=prefix, temp=temp, host=LOOPBACK, port=port, root=root)


def _stop_process_group(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM (nginx's fast shutdown) to the child's whole process group, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            continue
    # A worker left behind by a master that died first is in the same group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def nginx_http(root: str | os.PathLike, *, attempts: int = 5) -> Iterator[NginxHttp]:
    """Serves the folder ``root`` read-only (GET and HEAD; ranges, ETag, ``If-Match`` as nginx
    does them; directory index pages only under ``/listed/``) on 127.0.0.1 (free port) with a
    foreground nginx whose configuration, pid, logs and temp files all live in a temp folder.
    Yields an
    ``NginxHttp`` (``base``, ``url(relpath)``) once the port accepts connections."""
    nginx = _nginx_binary()
    root = Path(root).resolve()
    if not root.is_dir():
        raise NotADirectoryError(root)
    with tempfile.TemporaryDirectory(prefix="packread-nginx-") as tmp:
        prefix = Path(tmp)
        (prefix / "tmp").mkdir()
        for attempt in range(attempts):
            # nginx cannot listen on port 0 and say which port it got: pick a free one and try
            # again should another process take it first.
            port = free_port()
            conf = prefix / "nginx.conf"
            conf.write_text(_nginx_conf(root, port, prefix))
            log = prefix / "error.log"
            log.write_text("")
            # -e: the error log before the configuration is read (else /var/log/nginx);
            # -p: the prefix for relative paths; its own session, so teardown reaches workers.
            cmd = [nginx, "-p", str(prefix), "-e", str(log), "-c", str(conf)]
            with open(prefix / "stderr.log", "wb") as stderr:
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    start_new_session=True,
                )
            try:
                wait_for_port(port, alive=lambda p=proc: p.poll() is None)
            except (RuntimeError, TimeoutError):
                _stop_process_group(proc)
                err = (prefix / "stderr.log").read_text(errors="replace")
                err += log.read_text(errors="replace")
                if "Address already in use" in err and attempt + 1 < attempts:
                    continue
                raise RuntimeError(f"nginx did not start:\n{err}") from None
            break
        try:
            yield NginxHttp(root, port, prefix, proc)
        finally:
            _stop_process_group(proc)


# --------------------------------------------------------------------------------------------
# Faults: a TCP proxy
# --------------------------------------------------------------------------------------------


def _close(sock: socket.socket, reset: bool = False) -> None:
    """Closes ``sock`` (with RST instead of FIN when ``reset``), waking any thread blocked on
    it; never raises."""
    with contextlib.suppress(OSError):
        if reset:
            # Linger on, 0 s: the kernel aborts (RST) when the socket is finally released, which
            # is once no other thread is blocked on it: SHUT_RD wakes those without a FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.shutdown(socket.SHUT_RD)
        else:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class _Link:
    """One proxied connection: the client's socket, the upstream's, the response bytes sent."""

    def __init__(self, client: socket.socket, upstream: socket.socket):
        self.client = client
        self.upstream = upstream
        self.sent_down = 0
        self.awaiting_response = False
        self.lock = threading.Lock()
        self.open = 2  # directions still pumping

    def close(self, reset: bool = False) -> None:
        _close(self.client, reset)
        _close(self.upstream)


class FaultProxy:
    """A TCP proxy on 127.0.0.1 (free port) to ``(host, port)`` whose faults can be switched at
    any time, from any thread (each takes effect at the next connection or chunk):

    - ``delay``: seconds slept before the first bytes of each response go to the client (the
      first chunk from upstream after the client sent something), i.e. latency per request;
    - ``drop_every``: close every Nth connection accepted since it was set (the Nth, 2Nth...)
      at once, before any byte (N >= 1; None: off);
    - ``cut_after_bytes``: close a connection once N bytes (counted over all the responses on
      that connection) have reached the client: a large enough body is cut mid-way;
    - ``down``: accept every connection and close it at once (the server is gone);
    - ``blackhole``: accept every connection and never answer, nor close (a hung server);
    - ``reset``: close deliberately cut or dropped connections with RST instead of FIN.

    Counters: ``connections`` (accepted, whatever happened next), ``dropped`` (closed by
    ``drop_every``/``down``), ``cut`` (closed by ``cut_after_bytes``). ``address`` is
    ``http://127.0.0.1:PORT``. Use as a context manager; ``close()`` closes every socket."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 5.0):
        self.target = (host, port)
        self.connect_timeout = connect_timeout
        self.delay = 0.0
        self._lock = threading.Lock()
        self._drop_every: int | None = None
        self._since_drop_set = 0
        self.cut_after_bytes: int | None = None
        self.down = False
        self.blackhole = False
        self.reset = False
        self.connections = 0
        self.dropped = 0
        self.cut = 0
        self._links: set[_Link] = set()
        self._held: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(128)
        self._listener.settimeout(0.1)
        self.host = LOOPBACK
        self.port = self._listener.getsockname()[1]
        self.address = f"http://{LOOPBACK}:{self.port}"
        self._spawn(self._accept_loop, "accept")

    @property
    def drop_every(self) -> int | None:
        return self._drop_every

    @drop_every.setter
    def drop_every(self, n: int | None) -> None:
        if n is not None and n < 1:
            raise ValueError(f"drop_every must be >= 1 or None, not {n}")
        with self._lock:
            self._drop_every, self._since_drop_set = n, 0

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def clear(self) -> None:
        """Switches every fault off (the counters stay)."""
        self.delay = 0.0
        self.drop_every = None
        self.cut_after_bytes = None
        self.down = self.blackhole = self.reset = False

    def close(self) -> None:
        """Stops accepting, closes every socket and waits for the proxy's threads."""
        self._closed.set()
        _close(self._listener)
        with self._lock:
            links, held = list(self._links), list(self._held)
            self._links.clear()
            self._held.clear()
        for link in links:
            link.close()
        for sock in held:
            _close(sock)
        for t in list(self._threads):
            if t is not threading.current_thread():
                t.join(timeout=5)

    def _spawn(self, target, name: str, *args) -> None:
        t = threading.Thread(target=target, args=args, name=f"FaultProxy-{name}", daemon=True)
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()]
            self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed.is_set():
                    _close(client)
                    return
                self.connections += 1
                self._since_drop_set += 1
                n = self.connections
                drop = bool(self._drop_every and self._since_drop_set % self._drop_every == 0)
                if self.blackhole:
                    self._held.add(client)
                    continue
            if self.down or drop:
                with self._lock:
                    self.dropped += 1
                _close(client, self.reset)
                continue
            self._spawn(self._connect, f"conn{n}", client)

    def _connect(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            _close(client, True)
            return
        upstream.settimeout(None)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client, upstream)
        with self._lock:
            if self._closed.is_set():
                link.close()
                return
            self._links.add(link)
        self._spawn(self._pump, "up", link, True)
        self._pump(link, False)

    def _pump(self, link: _Link, upward: bool) -> None:
        """Copies one direction of ``link``: client -> upstream (``upward``) or back."""
        src, dst = (link.client, link.upstream) if upward else (link.upstream, link.client)
        try:
            while True:
                try:
                    chunk = src.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    break
                if upward:
                    link.awaiting_response = True
                    dst.sendall(chunk)
                    continue
                if link.awaiting_response:
                    link.awaiting_response = False
                    if self.delay > 0 and self._closed.wait(self.delay):
                        break
                limit = self.cut_after_bytes
                if limit is not None and link.sent_down + len(chunk) >= limit:
                    dst.sendall(chunk[: max(limit - link.sent_down, 0)])
                    link.sent_down = max(link.sent_down, limit)
                    with self._lock:
                        self.cut += 1
                    link.close(self.reset)
                    break
                dst.sendall(chunk)
                link.sent_down += len(chunk)
        except OSError:
            pass  # either side went away (or close() closed both): the link ends either way
        finally:
            with link.lock:
                link.open -= 1
                done = link.open == 0
            if done:
                link.close()
                with self._lock:
                    self._links.discard(link)


# --------------------------------------------------------------------------------------------
# HTTP with chosen validators: a small server of our own
# --------------------------------------------------------------------------------------------


class VersionedHttp:
    """An HTTP/1.1 object server on 127.0.0.1 whose validators are chosen (see
    ``versioned_http``): objects are ``put(path, data)`` and replaced by ``put`` again (same
    size or not), each version stamped with a Last-Modified time ten seconds after the last.
    ``requests`` records each request's preconditions (``If-Match``, ``If-Unmodified-Since``).
    nginx cannot send no ETag with a Last-Modified time or a weak ETag for a plain file, and
    Python's ``http.server`` ignores ranges: hence this one."""

    def __init__(self, etag: str, last_modified: bool, strict: bool):
        import email.utils
        import hashlib
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        assert etag in ("strong", "weak", "none")
        self.objects: dict[str, tuple[bytes, int, float]] = {}
        self.requests: list[dict[str, str | None]] = []
        self._lock = threading.Lock()
        self._version = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, code: int, headers: dict[str, str], body: bytes = b"") -> None:
                self.send_response(code)
                for k, v in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                with server._lock:
                    got = server.objects.get(self.path.split("?", 1)[0])
                    server.requests.append(
                        {k: self.headers.get(k) for k in ("If-Match", "If-Unmodified-Since")}
                    )
                if got is None:
                    return self._answer(404, {})
                data, version, mtime = got
                headers = {"Accept-Ranges": "bytes"}
                tag = f'"{hashlib.sha1(data).hexdigest()[:12]}-{version}"'
                if etag != "none":
                    headers["ETag"] = ("W/" if etag == "weak" else "") + tag
                if last_modified:
                    headers["Last-Modified"] = email.utils.formatdate(mtime, usegmt=True)
                if strict:
                    wanted = self.headers.get("If-Match")
                    # RFC 9110 13.1.1: a strong comparison, which a weak tag never passes.
                    if wanted and (etag != "strong" or tag not in wanted.split(", ")):
                        return self._answer(412, headers)
                    since = self.headers.get("If-Unmodified-Since")
                    if since and last_modified:
                        limit = email.utils.parsedate_to_datetime(since).timestamp()
                        if mtime > limit:
                            return self._answer(412, headers)
                spec = self.headers.get("Range", "")
                if not spec.startswith("bytes="):
                    return self._answer(200, headers, data)
                first, _, last = spec[6:].partition("-")
                n = len(data)
                start, end = (
                    (n - int(last), n - 1) if first == "" else (int(first), int(last or n - 1))
                )
                start, end = max(0, start), min(end, n - 1)
                if start > end:
                    return self._answer(416, {**headers, "Content-Range": f"bytes */{n}"})
                headers["Content-Range"] = f"bytes {start}-{end}/{n}"
                return self._answer(206, headers, data[start : end + 1])

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self._httpd = Server((LOOPBACK, 0), Handler)
        self.base = f"http://{LOOPBACK}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def put(self, path: str, data: bytes) -> str:
        """Stores (or replaces) the object at ``path``; its URL."""
        with self._lock:
            self._version += 1
            self.objects["/" + path.lstrip("/")] = (data, self._version, 1.7e9 + 10 * self._version)
        return f"{self.base}/{path.lstrip('/')}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextlib.contextmanager
def versioned_http(
    etag: str = "strong", last_modified: bool = True, strict: bool = True
) -> Iterator[VersionedHttp]:
    """A ``VersionedHttp`` sending ``etag`` ETags (``"strong"``, ``"weak"`` or ``"none"``),
    Last-Modified times or not, and (``strict``) answering 412 to a failed ``If-Match`` (always
    for a weak ETag, as RFC 9110 says) or ``If-Unmodified-Since``."""
    server = VersionedHttp(etag, last_modified, strict)
    try:
        yield server
    finally:
        server.close()
