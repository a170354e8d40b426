"""The bundled example service: answers `GET /` with a greeting and `GET /healthz` with ok.

It listens on $PORT, as every Runway service does, and stops on SIGTERM.
"""

import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            body = b"ok\n"
        elif self.path == "/":
            greeting = os.environ.get("GREETING", "hello")
            revision = os.environ.get("K_REVISION", "unknown")
            body = f"{greeting} from {revision}\n".encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        print(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}", flush=True)


def main():
    port = int(os.environ.get("PORT", "8080"))
    # socketserver's default listen backlog is 5: a burst of new connections (the ingress
    # spreading queued requests onto a fresh instance) would be reset.
    ThreadingHTTPServer.request_queue_size = 128
    # All addresses, as on Cloud Run: on a platform the instance has a network of its own, and
    # the ingress reaches it there, not on its loopback.
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"listening on 0.0.0.0:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
