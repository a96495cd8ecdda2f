"""quiclab's driver of aioquic's HTTP/3 server and client (the built-in external stack
"aioquic", crates/quiclab-external/stacks/aioquic.toml; the format is in docs/stacks.md).

    quiclab-aioquic server --htdocs DIR --cert PEM --key PEM [--addr A] [--port P]
                           [--qlog-dir DIR] [--cc newreno|cubic]
    quiclab-aioquic client --download DIR --cacert PEM [--qlog-dir DIR] [--cc ...] URL

The client prints one line per event as it happens (start, handshake complete alpn=...,
status N, first byte, last byte, or error: ...), as quiclab's stack file reads them.

qlog: aioquic keeps a connection's events in memory and writes them as one JSON document when
the connection ends, with wall-clock times. quiclab reads JSON-SEQ files whose times count from
the file's creation (its anchor on the monotonic clock), so this driver writes its own: the file
is created when the connection begins, each event is written once the packet that caused it
has been processed (aioquic completes an event's frame list after logging it) with its time
in milliseconds since the file's creation, and aioquic's `cwnd` is named `congestion_window` as in the qlog
schema. SSLKEYLOGFILE, when set, receives the TLS secrets.
"""

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from urllib.parse import urlparse

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent
from aioquic.quic.logger import QuicLogger, QuicLoggerTrace

# quiclab's controller names and aioquic's
CONTROLLERS = {"newreno": "reno", "cubic": "cubic"}


class StreamingTrace(QuicLoggerTrace):
    """One connection's qlog, written to its file as the events happen (JSON-SEQ)."""

    def __init__(self, *, is_client: bool, odcid: bytes, path: str) -> None:
        super().__init__(is_client=is_client, odcid=odcid)
        self._t0 = time.monotonic()
        self._pending: list[dict] = []
        self._scheduled = False
        self._file = open(path, "w", buffering=1 << 16)
        header = {
            "qlog_format": "JSON-SEQ",
            "qlog_version": "0.3",
            "trace": {
                "vantage_point": {
                    "name": "aioquic",
                    "type": "client" if is_client else "server",
                },
                "common_fields": {
                    "ODCID": odcid.hex(),
                    "time_format": "relative",
                    "reference_time": 0,
                },
            },
        }
        self._write(header)

    def _write(self, record: dict) -> None:
        self._file.write("\x1e" + json.dumps(record, separators=(",", ":")) + "\n")

    def log_event(self, *, category: str, event: str, data: dict) -> None:
        if self._file.closed:
            return
        # aioquic fills a received packet's frame list after logging it: the event is written
        # once the packet's processing has returned to the event loop, with the time it had
        self._pending.append(
            {
                "time": (time.monotonic() - self._t0) * 1000.0,
                "name": category + ":" + event,
                "data": data,
            }
        )
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self._file.closed:
            return
        for record in self._pending:
            data = record["data"]
            if "cwnd" in data:
                data = dict(data)
                data["congestion_window"] = data.pop("cwnd")
                record["data"] = data
            self._write(record)
        self._pending.clear()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()


class StreamingLogger(QuicLogger):
    """Starts each connection's qlog file when the connection begins."""

    def __init__(self, directory: str) -> None:
        if not os.path.isdir(directory):
            raise ValueError(f"--qlog-dir {directory}: not a directory")
        super().__init__()
        self._dir = directory

    def start_trace(self, is_client: bool, odcid: bytes) -> QuicLoggerTrace:
        path = os.path.join(self._dir, odcid.hex() + ".sqlog")
        trace = StreamingTrace(is_client=is_client, odcid=odcid, path=path)
        self._traces.append(trace)
        return trace

    def end_trace(self, trace: QuicLoggerTrace) -> None:
        if isinstance(trace, StreamingTrace):
            trace.close()
        if trace in self._traces:
            self._traces.remove(trace)

    def close_all(self) -> None:
        for trace in list(self._traces):
            self.end_trace(trace)


def configuration(args, is_client: bool) -> QuicConfiguration:
    conf = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=H3_ALPN,
        congestion_control_algorithm=CONTROLLERS[args.cc],
        idle_timeout=10.0,
    )
    keylog = os.environ.get("SSLKEYLOGFILE")
    if keylog:
        conf.secrets_log_file = open(keylog, "a")
    if args.qlog_dir:
        conf.quic_logger = StreamingLogger(args.qlog_dir)
    return conf


# ---- server


class FileServer(QuicConnectionProtocol):
    """Answers each GET with the file of its path under the documents directory."""

    htdocs = "."

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._h3 = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if self._h3 is None:
            self._h3 = H3Connection(self._quic)
        for h3_event in self._h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                self._answer(h3_event)

    def _answer(self, event: HeadersReceived) -> None:
        headers = dict(event.headers)
        method = headers.get(b":method", b"").decode()
        path = headers.get(b":path", b"/").decode().split("?", 1)[0]
        root = os.path.realpath(self.htdocs)
        file = os.path.realpath(os.path.join(root, path.lstrip("/")))
        if method not in ("GET", "HEAD"):
            self._send(event.stream_id, 405, b"")
        elif os.path.commonpath([root, file]) != root or not os.path.isfile(file):
            self._send(event.stream_id, 404, b"not found\n")
        else:
            with open(file, "rb") as f:
                body = f.read()
            self._send(event.stream_id, 200, b"" if method == "HEAD" else body)

    def _send(self, stream_id: int, status: int, body: bytes) -> None:
        self._h3.send_headers(
            stream_id,
            [
                (b":status", str(status).encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        )
        self._h3.send_data(stream_id, body, end_stream=True)
        self.transmit()


async def run_server(args) -> None:
    conf = configuration(args, is_client=False)
    conf.load_cert_chain(args.cert, args.key)
    FileServer.htdocs = args.htdocs
    server = await serve(
        args.addr, args.port, configuration=conf, create_protocol=FileServer
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    # close every connection (which ends its qlog), then the socket
    for proto in list(getattr(server, "_protocols", {}).values()):
        proto.close()
    await asyncio.sleep(0.05)
    server.close()
    if conf.quic_logger is not None:
        conf.quic_logger.close_all()


# ---- client


class Fetch(QuicConnectionProtocol):
    """One GET over HTTP/3, its events printed as they happen, its body written to a file."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._h3 = H3Connection(self._quic)
        self.done = asyncio.get_running_loop().create_future()
        self.out = None
        self._first = True

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated) and not self.done.done():
            self.done.set_exception(
                RuntimeError(f"connection closed: {event.reason_phrase or event.error_code}")
            )
        for h3_event in self._h3.handle_event(event):
            self._h3_event(h3_event)

    def _h3_event(self, event: H3Event) -> None:
        if isinstance(event, HeadersReceived):
            status = dict(event.headers).get(b":status", b"0").decode()
            print(f"status {status}", flush=True)
            if event.stream_ended:
                self._end()
        elif isinstance(event, DataReceived):
            if event.data:
                if self._first:
                    print("first byte", flush=True)
                    self._first = False
                self.out.write(event.data)
            if event.stream_ended:
                self._end()

    def _end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def get(self, authority: str, path: str) -> None:
        stream_id = self._quic.get_next_available_stream_id()
        self._h3.send_headers(
            stream_id,
            [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", authority.encode()),
                (b":path", path.encode()),
            ],
            end_stream=True,
        )
        self.transmit()


async def run_client(args) -> None:
    url = urlparse(args.url)
    if url.scheme != "https" or not url.hostname:
        raise ValueError(f"{args.url}: give an https:// URL")
    conf = configuration(args, is_client=True)
    conf.load_verify_locations(args.cacert)
    print("start", flush=True)
    async with connect(
        url.hostname, url.port or 443, configuration=conf, create_protocol=Fetch
    ) as client:
        alpn = client._quic.tls.alpn_negotiated
        print(f"handshake complete alpn={alpn}", flush=True)
        with open(os.path.join(args.download, "body"), "wb") as out:
            client.out = out
            client.get(url.netloc, url.path or "/")
            await asyncio.wait_for(client.done, 60)
        print("last byte", flush=True)
        client.close()
    if conf.quic_logger is not None:
        conf.quic_logger.close_all()


def main() -> int:
    p = argparse.ArgumentParser(
        prog="quiclab-aioquic", description="aioquic's HTTP/3 server and client, for quiclab"
    )
    sub = p.add_subparsers(dest="command", required=True)
    cc = dict(choices=sorted(CONTROLLERS), default="newreno",
              help="congestion controller (aioquic's reno or cubic)")
    s = sub.add_parser("server", help="serve files over HTTP/3")
    s.add_argument("--htdocs", required=True)
    s.add_argument("--cert", required=True)
    s.add_argument("--key", required=True)
    s.add_argument("--addr", default="::")
    s.add_argument("--port", type=int, default=443)
    s.add_argument("--qlog-dir")
    s.add_argument("--cc", **cc)
    c = sub.add_parser("client", help="fetch one URL over HTTP/3")
    c.add_argument("--download", required=True)
    c.add_argument("--cacert", required=True)
    c.add_argument("--qlog-dir")
    c.add_argument("--cc", **cc)
    c.add_argument("url")
    args = p.parse_args()
    try:
        asyncio.run(run_server(args) if args.command == "server" else run_client(args))
    except Exception as e:  # every failure is the stack file's `error` line
        print(f"error: {type(e).__name__}: {e}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
