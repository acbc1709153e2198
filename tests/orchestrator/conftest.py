"""Fixtures of the orchestrator's tests."""

import http.server
import threading

import pytest

from tests.orchestrator.e2e import own_ray_temp


@pytest.fixture
def ray_temp():
    with own_ray_temp() as path:
        yield path


@pytest.fixture
def http_server():
    """`http_server(answer)`: an HTTP server on 127.0.0.1 whose every request (GET or
    POST) `answer(handler)` answers (`replies` makes one); returns its base URL and
    the list of the requests it saw, as (path, headers)."""
    servers = []

    def make(answer) -> tuple[str, list]:
        seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append((self.path, dict(self.headers)))
                answer(self)

            do_GET = do_POST

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", seen

    yield make
    for server in servers:
        server.shutdown()


def replies(status: int, body: bytes = b"", **headers):
    """An answer for `http_server`: `status`, `headers` (Content_Type for
    Content-Type) and `body`."""
    def answer(handler):
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return answer
