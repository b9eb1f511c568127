#!/usr/bin/python3
"""A TCP relay that holds every request LATENCY_MS before passing it on, for benchmarks.

tests/net/fault_proxy.py adds latency too, but it is an HTTP server in Python that reads and writes
every body: on a 2-core machine it takes CPU from the loader being measured (the 5,000-photo
WebDataset run was 0.78x local from nginx directly and 0.62x through it at 0 ms). Here the bytes move
inside the kernel (os.splice through a pipe) and never enter Python. HTTP/1.1 clients send the next
request on a connection only after the reply to the previous one, so each burst from the client is a
request: it waits LATENCY_MS, then goes on. Replies are passed on at once.

    latency_relay.py LISTEN_PORT UPSTREAM_PORT LATENCY_MS
"""
import fcntl
import os
import socket
import sys
import threading
import time

PIPE_BYTES = 1 << 20


def pump(src, dst, delay_s):
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass  # the default pipe (64 KiB) still works, in smaller steps
    try:
        while True:
            n = os.splice(src.fileno(), w, PIPE_BYTES)
            if n == 0:
                break
            if delay_s:
                time.sleep(delay_s)
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(client, upstream_port, delay_s):
    try:
        upstream = socket.create_connection(("127.0.0.1", upstream_port))
    except OSError:
        client.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=pump, args=(upstream, client, 0), daemon=True)
    back.start()
    pump(client, upstream, delay_s)
    back.join()
    client.close()
    upstream.close()


def main():
    listen_port, upstream_port, latency_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(1024)
    while True:
        client, _ = server.accept()
        threading.Thread(target=serve, args=(client, upstream_port, latency_ms / 1000.0), daemon=True).start()


if __name__ == "__main__":
    main()
