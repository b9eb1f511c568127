#!/usr/bin/python3
"""A loopback HTTP proxy that puts faults between Stoker and a real server (nginx, s3rver).

    fault_proxy.py LISTEN_PORT UPSTREAM_PORT [--sigv4 KEYID:SECRET[,...]]

Forwards every request to 127.0.0.1:UPSTREAM_PORT (headers, Host included, so S3 signatures hold)
and logs it. The test steers it with POST /__fault {"mode": M, "count": N, "latency_ms": L}: the
next N GETs that carry a body get fault M, and every request waits L ms first (0 by default):
  status:CODE    answer CODE (503 and 429 with S3's SlowDown body) instead of forwarding
  status:CODE:S3 the same with S3's error code S3 (status:400:ExpiredToken)
  drop           send the headers and half the body, then close the connection
  short          a clean reply whose Content-Length says half of what Content-Range says
  ignore_range   forward without the Range header (the server answers 200 with the whole object)
  first_ranges:K forward a Range of several ranges with its first K only (a server such as lighttpd,
                 which serves the first 10 of a request's ranges in a whole multipart reply)
  stall          send the headers and half the body, then stop sending for 60 s
  trickle        send the body 100 bytes a second
  redirect:URL   answer 307 with Location: URL
  etag:VALUE     the reply's ETag header says VALUE (a replica with another version)
  no_length      the reply has no Content-Length: its body ends when the connection closes
  unknown_total  a 206's Content-Range says "bytes A-B/*" (the object's size not known)
  overlong       the reply's Content-Length says one byte more than its body (cut after its end)
Faults combine: "ignore_range+short" puts both on one GET; "drop|ignore_range" gives the next GETs
drop, then ignore_range, in turn (N in all).
With --sigv4, every request signed with one of those key ids must carry the SigV4 signature S3
would compute (sigv4_check.py); one that does not is answered 403 (SignatureDoesNotMatch and the
other codes S3 uses) and logged, never forwarded.
GET /__log returns the forwarded requests as JSON lines [method, path, range, status, body bytes,
requests in flight when it came (itself included)] and empties the log.
"""
import http.client
import http.server
import json
import socket
import sys
import threading
import time

UPSTREAM = ("127.0.0.1", int(sys.argv[2]))
SIGV4_KEYS = {}
if len(sys.argv) > 4 and sys.argv[3] == "--sigv4":
    import sigv4_check  # botocore: only the S3 proxy needs it
    SIGV4_KEYS = sigv4_check.parse_keys(sys.argv[4])
state = {"mode": "", "count": 0, "latency_ms": 0, "taken": 0}
log = []
active = [0]  # requests being forwarded now
lock = threading.Lock()


def take_fault():
    with lock:
        if state["count"] > 0:
            state["count"] -= 1
            turns = state["mode"].split("|")
            state["taken"] += 1
            return turns[(state["taken"] - 1) % len(turns)]
        return ""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK wait

    def log_message(self, *args):
        pass

    def reply(self, status, body, headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/__fault":
            with lock:
                state.update({"mode": "", "count": 0, "latency_ms": 0, "taken": 0})
                state.update(json.loads(body))
            return self.reply(200, b"ok")
        self.forward(body)

    def do_HEAD(self):
        self.forward(None)

    def do_PUT(self):
        self.forward(self.rfile.read(int(self.headers.get("Content-Length", "0"))))

    def do_GET(self):
        if self.path == "/__log":
            with lock:
                out = "\n".join(json.dumps(e) for e in log).encode()
                log.clear()
            return self.reply(200, out)
        self.forward(None)

    def forward(self, body):
        with lock:
            active[0] += 1
            concurrent = active[0]
        self.counted = True
        try:
            self.forward_counted(body, concurrent)
        finally:
            self.uncount()

    def uncount(self):
        # Before the reply goes out: a client's next request can only come after it, so requests
        # sent one after another never count as in flight together.
        if self.counted:
            self.counted = False
            with lock:
                active[0] -= 1

    def forward_counted(self, body, concurrent):
        time.sleep(state["latency_ms"] / 1000.0)
        refused = SIGV4_KEYS and sigv4_check.check(self.command, self.path, self.headers, body, SIGV4_KEYS)
        if refused:
            code, message = refused
            xml = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>").encode()
            with lock:
                log.append([self.command, self.path, self.headers.get("Range", ""), 403, 0, concurrent])
            self.uncount()
            return self.reply(403, xml, [("Content-Type", "application/xml")])
        faults = (take_fault() if self.command == "GET" else "").split("+")
        fault = faults[0]
        if fault.startswith("status:"):
            code = int(fault.split(":")[1])
            s3code = fault.split(":")[2] if fault.count(":") > 1 else "SlowDown"
            xml = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{s3code}</Code>"
                   f"<Message>Please reduce your request rate.</Message></Error>").encode()
            with lock:
                log.append([self.command, self.path, self.headers.get("Range", ""), code, 0, concurrent])
            self.uncount()
            return self.reply(code, xml, [("Content-Type", "application/xml")])
        if fault.startswith("redirect:"):
            with lock:
                log.append([self.command, self.path, self.headers.get("Range", ""), 307, 0, concurrent])
            self.uncount()
            return self.reply(307, b"", [("Location", fault[len("redirect:"):])])
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
        if "ignore_range" in faults:
            headers.pop("Range", None)
        if fault.startswith("first_ranges:") and "," in headers.get("Range", ""):
            keep = int(fault.split(":")[1])
            headers["Range"] = "bytes=" + ",".join(headers["Range"][len("bytes="):].split(",")[:keep])
        conn = http.client.HTTPConnection(*UPSTREAM, timeout=60)
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        with lock:
            log.append([self.command, self.path, self.headers.get("Range", ""), resp.status, len(data), concurrent])
        self.uncount()
        self.send_response(resp.status)
        etag = next((f[len("etag:"):] for f in faults if f.startswith("etag:")), None)
        for k, v in resp.getheaders():
            if k.lower() in ("connection", "keep-alive", "transfer-encoding", "content-length"):
                continue
            if k.lower() == "etag" and etag is not None:
                v = etag
            if k.lower() == "content-range" and "unknown_total" in faults:
                v = v.rsplit("/", 1)[0] + "/*"
            self.send_header(k, v)
        half = len(data) // 2
        if "no_length" in faults or "overlong" in faults:
            if "overlong" in faults:
                self.send_header("Content-Length", str(len(data) + 1))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        if "short" in faults:
            self.send_header("Content-Length", str(half))
            self.end_headers()
            self.wfile.write(data[:half])
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if "trickle" in faults:
            try:
                for at in range(0, len(data), 100):
                    self.wfile.write(data[at:at + 100])
                    self.wfile.flush()
                    time.sleep(1)
            except OSError:  # the client gave up on it
                pass
            self.close_connection = True
            return
        if "drop" in faults or "stall" in faults:
            self.wfile.write(data[:half])
            self.wfile.flush()
            if "stall" in faults:
                time.sleep(60)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(data)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver listens with a backlog of 5: past that, a burst of new connections (a reader
    # with 16 or more requests in flight) waited for the kernel's 1 s SYN retry, and benchmarks
    # read the proxy's limit as Stoker's.
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client that hung up is no news
            super().handle_error(request, client_address)


if __name__ == "__main__":
    server = Server(("127.0.0.1", int(sys.argv[1])), Handler)
    print("listening", flush=True)
    server.serve_forever()
