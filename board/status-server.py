"""A firmware status URL for the board tests: every POST's body is appended, one JSON line per
request, to the file named on the command line; the answer is 204. Run inside the test's
network namespace: python3 board/status-server.py ADDRESS PORT FILE"""

import http.server
import sys


class Recorder(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        with open(sys.argv[3], "ab") as out:
            out.write(body.replace(b"\n", b" ") + b"\n")
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_):
        pass


http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Recorder).serve_forever()
