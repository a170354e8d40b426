#!/usr/bin/env python3
"""A client of `runway wrapper` built from the .proto alone, with grpcio-tools.

It knows nothing of Runway's code: it generates its stubs from proto/runner_wrapper.proto,
then, against a wrapper whose child ignores SIGQUIT and stops on SIGTERM:
  1. CheckStatus: running
  2. InitGracefulShutdown with a callback to its own HTTP server: in_shutdown
  3. InitForcefulShutdown: in_shutdown (the child stops on SIGTERM)
  4. receives the callback with the method and headers it asked for
  5. CheckStatus: stopped, with the failure reason naming SIGTERM
Needs: pip install grpcio grpcio-tools. Exits non-zero with a message on any mismatch.
"""

import argparse
import http.server
import importlib
import os
import queue
import sys
import tempfile
import threading
import time

import grpc
from grpc_tools import protoc

BOUND = 15  # seconds, for every wait


def generate(proto, out):
    include = os.path.dirname(os.path.abspath(proto))
    # grpc_tools ships the well-known protos; the wrapper's proto needs none, but keep the path.
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    code = protoc.main([
        "grpc_tools.protoc",
        f"-I{include}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        os.path.abspath(proto),
    ])
    if code != 0:
        sys.exit(f"protoc failed with {code}")
    sys.path.insert(0, out)
    name = os.path.splitext(os.path.basename(proto))[0]
    return importlib.import_module(f"{name}_pb2"), importlib.import_module(f"{name}_pb2_grpc")


def callback_server():
    received = queue.Queue()

    class Handler(http.server.BaseHTTPRequestHandler):
        def handle_any(self):
            received.put((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PUT = handle_any

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok: {what} = {got!r}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True, help="unix:///path or host:port")
    parser.add_argument("--proto", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as out:
        pb2, pb2_grpc = generate(args.proto, out)
        target = args.target[len("tcp://"):] if args.target.startswith("tcp://") else args.target
        channel = grpc.insecure_channel(target)
        grpc.channel_ready_future(channel).result(timeout=BOUND)
        stub = pb2_grpc.ProcessWrapperStub(channel)

        status = stub.CheckStatus(pb2.CheckStatusRequest(), timeout=BOUND)
        check("CheckStatus status", pb2.Status.Name(status.status), "running")
        check("CheckStatus failureReason", status.failureReason, "")

        server, received = callback_server()
        url = f"http://127.0.0.1:{server.server_address[1]}/wrapper/stopped"
        callback = pb2.ShutdownCallback(url=url, method="POST", headers={"X-Token": "from-python"})
        graceful = stub.InitGracefulShutdown(
            pb2.InitGracefulShutdownRequest(shutdownCallback=callback), timeout=BOUND)
        check("InitGracefulShutdown status", pb2.Status.Name(graceful.status), "in_shutdown")

        # The child ignores SIGQUIT: still in shutdown until the forceful call.
        time.sleep(0.3)
        status = stub.CheckStatus(pb2.CheckStatusRequest(), timeout=BOUND)
        check("CheckStatus after graceful", pb2.Status.Name(status.status), "in_shutdown")

        forceful = stub.InitForcefulShutdown(pb2.InitForcefulShutdownRequest(), timeout=BOUND)
        check("InitForcefulShutdown status", pb2.Status.Name(forceful.status), "in_shutdown")

        try:
            method, path, headers = received.get(timeout=BOUND)
        except queue.Empty:
            sys.exit("no shutdown callback received")
        check("callback method", method, "POST")
        check("callback path", path, "/wrapper/stopped")
        check("callback X-Token", headers.get("x-token"), "from-python")

        deadline = time.monotonic() + BOUND
        while True:
            status = stub.CheckStatus(pb2.CheckStatusRequest(), timeout=BOUND)
            if status.status == pb2.stopped or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        check("CheckStatus after the callback", pb2.Status.Name(status.status), "stopped")
        check("failureReason", status.failureReason, "killed by SIGTERM")
        server.shutdown()
        channel.close()
    print("all calls and the callback checked")


if __name__ == "__main__":
    main()
