"""Known TCP traffic between rig machines (run inside a machine's namespace).

    serve PORT CONNECTIONS RECV SEND      accept CONNECTIONS connections one after another;
                                          on each read RECV bytes, then send SEND bytes
    send HOST PORT CONNECTIONS SEND RECV  the other side: send SEND, read RECV, close
    pingpong HOST PORT SECONDS            small request/answer every 20 ms (RTT samples)
    echo PORT                             answer pingpong clients, until killed
Prints "ready" once listening.
"""

from __future__ import annotations

import socket
import sys
import threading
import time

CHUNK = 1 << 16


def _read(conn: socket.socket, size: int) -> None:
    while size > 0:
        data = conn.recv(min(CHUNK, size))
        if not data:
            raise SystemExit(f"peer closed with {size} bytes to go")
        size -= len(data)


def _write(conn: socket.socket, size: int) -> None:
    block = b"x" * CHUNK
    while size > 0:
        size -= conn.send(block[: min(CHUNK, size)])


def serve(port: int, connections: int, recv: int, send: int) -> None:
    listener = socket.create_server(("0.0.0.0", port), backlog=128)
    print("ready", flush=True)
    for _ in range(connections):
        conn, _ = listener.accept()
        with conn:
            _read(conn, recv)
            _write(conn, send)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)  # wait for the peer's close: every byte was delivered


def send(host: str, port: int, connections: int, size: int, recv: int) -> None:
    for _ in range(connections):
        with socket.create_connection((host, port), timeout=60) as conn:
            _write(conn, size)
            _read(conn, recv)


def echo(port: int) -> None:
    listener = socket.create_server(("0.0.0.0", port), backlog=16)
    print("ready", flush=True)

    def answer(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(64):
                conn.sendall(data)

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def pingpong(host: str, port: int, seconds: float) -> None:
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        print("ready", flush=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            conn.sendall(b"ping")
            _read(conn, 4)
            time.sleep(0.02)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "serve":
        serve(*map(int, args))
    elif mode == "send":
        send(args[0], *map(int, args[1:]))
    elif mode == "echo":
        echo(int(args[0]))
    else:
        pingpong(args[0], int(args[1]), float(args[2]))
