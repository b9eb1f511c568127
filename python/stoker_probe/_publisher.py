"""The probe's publishing thread: JSON lines to a monitor, a file, or monitors that dial in.

The training loop only appends to a bounded queue (never blocks, never does I/O); this
thread writes. When the queue is full, or a socket's buffer is, a record is dropped and
counted. A monitor that is absent, stops or restarts is dialled again at most once a second.
"""

import collections
import errno
import json
import os
import select
import socket
import threading
import time

_QUEUE_LIMIT = 4096
_PENDING_LIMIT = 256 * 1024
_MAX_LISTEN_PEERS = 16


def _split_host_port(text, what):
    rest = text[len("tcp://"):] if text.startswith("tcp://") else text
    host, sep, port = rest.rpartition(":")
    if not sep:
        if rest.isdigit():  # listen:PORT
            host, port = "", rest
        else:
            raise ValueError(f"address {text!r}: expected HOST:PORT or :PORT ({what})")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port)
    except ValueError:
        raise ValueError(f"address {text!r}: the port is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"address {text!r}: the port is out of range")
    return host, port


class _Peer:
    """A connected socket and the bytes of a line it took only partly."""

    def __init__(self, sock):
        self.sock = sock
        self.pending = b""

    def send(self, data):
        """True when the line was taken whole (or queued behind a partial one)."""
        if len(self.pending) + len(data) > _PENDING_LIMIT:
            self._flush()
            return False
        self.pending += data
        return self._flush()

    def _flush(self):
        if not self.pending:
            return True
        try:
            n = self.sock.send(self.pending, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
        except BlockingIOError:
            return True
        except OSError:
            self.close()
            return False
        self.pending = self.pending[n:]
        return True

    def close(self):
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        self.sock = None


class _FileTarget:
    def __init__(self, path):
        if not path:
            raise ValueError("address 'file:': file: needs a path")
        self.path = path
        self.fd = None

    def deliver(self, data):
        try:
            if self.fd is None:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            return os.write(self.fd, data) == len(data)
        except OSError:
            return False

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class _ConnectTarget:
    """Dials a listening monitor; while it is away, records are dropped and it is dialled again."""

    def __init__(self, address):
        host, port = _split_host_port(address, "a monitor to connect to")
        if port == 0:
            raise ValueError(f"address {address!r}: publishing needs a port other than 0")
        self.host = host or "127.0.0.1"
        self.port = port
        self.peer = None
        self.connected = False
        self.next_attempt = 0.0

    def deliver(self, data):
        now = time.monotonic()
        if self.peer is None or self.peer.sock is None:
            if now < self.next_attempt:
                return False
            self.next_attempt = now + 1.0
            try:
                info = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0]
                sock = socket.socket(info[0], socket.SOCK_STREAM)
                sock.setblocking(False)
                err = sock.connect_ex(info[4])
            except OSError:
                return False
            if err not in (0, errno.EINPROGRESS):
                sock.close()
                return False
            self.peer = _Peer(sock)
            self.connected = False
        if not self.connected:
            # poll, not select: select() fails on descriptors >= 1024, common in data-heavy processes.
            p = select.poll()
            p.register(self.peer.sock, select.POLLOUT)
            if not p.poll(0):
                return False  # still connecting: drop, do not wait
            if self.peer.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                self.peer.close()
                return False
            self.connected = True
        return self.peer.send(data)

    def close(self):
        if self.peer is not None:
            self.peer.close()


class _ListenTarget:
    """Monitors dial in (`stoker monitor --connect HOST:PORT`): for jobs behind a firewall
    that lets only the workstation connect out."""

    def __init__(self, address):
        host, port = _split_host_port(address, "a port to listen on")
        info = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self.sock = socket.socket(info[0], socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(info[4])
        except OSError as e:
            self.sock.close()
            raise OSError(f"listen:{address}: cannot listen there: {e.strerror}") from None
        self.sock.listen(16)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.peers = []

    def deliver(self, data):
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if len(self.peers) >= _MAX_LISTEN_PEERS:
                conn.close()
                continue
            conn.setblocking(False)
            self.peers.append(_Peer(conn))
        taken = False
        for p in self.peers:
            if p.send(data):
                taken = True
        self.peers = [p for p in self.peers if p.sock is not None]
        return taken

    def close(self):
        for p in self.peers:
            p.close()
        self.sock.close()


def make_target(address):
    if address.startswith("prometheus:"):
        # Read as HOST:PORT it dialled a host named "prometheus" for ever, serving nothing.
        raise ValueError(
            "the probe publishes to HOST:PORT, file:PATH or listen:PORT; for "
            "Prometheus, publish to `stoker monitor :PORT --prometheus :9464` (or the workbench's Monitor)")
    if address.startswith("file:"):
        return _FileTarget(address[len("file:"):])
    if address.startswith("listen:"):
        return _ListenTarget(address[len("listen:"):])
    return _ConnectTarget(address)


class Publisher:
    """One per address and process: every watched loader of the process shares it."""

    def __init__(self, address, queue_limit=_QUEUE_LIMIT):
        self.address = address
        self.target = make_target(address)
        self.queue_limit = queue_limit
        self._queue = collections.deque()
        self._cond = threading.Condition()
        self._quit = False
        self._busy = False
        self.sent = 0
        self._dropped_full = 0  # the queue was full (the training thread counts, under the lock)
        self._dropped_send = 0  # no reader took it (the publishing thread counts)
        self._thread = threading.Thread(target=self._run, name="stoker-probe-publisher", daemon=True)
        self._thread.start()

    @property
    def port(self):
        """The port a listen: address got (listen:0 picks one), else None."""
        return getattr(self.target, "port", None)

    @property
    def dropped(self):
        """Records dropped so far rather than wait: the queue or every reader was full or absent."""
        return self._dropped_full + self._dropped_send

    def publish(self, record):
        """Queues one record (a dict); never blocks. Returns False when it was dropped."""
        with self._cond:
            if len(self._queue) >= self.queue_limit:
                self._dropped_full += 1
                return False
            self._queue.append(record)
            self._cond.notify()
        return True

    def flush(self, timeout=1.0):
        end = time.monotonic() + timeout
        with self._cond:
            while (self._queue or self._busy) and time.monotonic() < end:
                self._cond.wait(0.02)

    def close(self, timeout=0.5):
        self.flush(timeout)
        with self._cond:
            self._quit = True
            self._cond.notify()
        self._thread.join(timeout)
        if not self._thread.is_alive():  # else it may still write to the target: leave it open
            self.target.close()

    def _run(self):
        while True:
            with self._cond:
                # Sleeps until a record comes: a thread waking on a timer would take the GIL
                # from the training loop for nothing.
                while not self._queue and not self._quit:
                    self._cond.wait()
                if self._quit and not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._busy = bool(batch)
            for record in batch:
                try:
                    data = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
                    taken = self.target.deliver(data)
                except Exception:  # noqa: BLE001 - whatever went wrong, this thread must live on
                    taken = False
                if taken:
                    self.sent += 1
                else:
                    self._dropped_send += 1
            with self._cond:
                self._busy = False
                self._cond.notify_all()
