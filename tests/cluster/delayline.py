"""A userspace delay line for kernels without netem (CONFIG_NET_SCH_NETEM unset, as here).

    before: machine eth0 <-veth-> fdnh<i> (on the bridge)
    after:  machine eth0 <-veth-> fdnh<i>  ~pump~  fdnd<i> <-veth-> fdnb<i> (on the bridge)

The pump (a subprocess: `python3 -m tests.cluster.delayline PUMP_ARGS`) moves every frame
between fdnh<i> and fdnd<i> over AF_PACKET sockets and holds the frames machine i sends
(to one IPv4 address only, when given) for the delay: the same effect on RTT as
`tc qdisc add dev eth0 root netem delay D` in the machine. Checksum and segmentation
offloads are switched off on the path and on every sender (ethtool: Rig._delay_line), so
the frames it copies are complete and no larger than the MTU; one larger still is dropped, as
a link drops it. Meant for RTT tests, not for throughput.
"""

from __future__ import annotations

import collections
import errno
import select
import signal
import socket
import subprocess
import sys
import time
from typing import Any

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
OFFLOADS = ("tx", "off", "tso", "off", "gso", "off", "gro", "off")


class DelayLine:
    def __init__(self, machine: Any, bridge: str, delay_ms: float, to: str | None):
        self.machine, self.bridge, self.delay_ms, self.to = machine, bridge, delay_ms, to
        self.host_end = machine.host_veth
        self.pump_end = f"fdnd{machine.index}"
        self.bridge_end = f"fdnb{machine.index}"
        self.pump: subprocess.Popen | None = None

    def insert(self) -> DelayLine:
        from tests.cluster.rig import run

        self.machine.run("ethtool", "-K", "eth0", *OFFLOADS)
        run(["ip", "link", "add", self.pump_end, "type", "veth", "peer", "name", self.bridge_end])
        for name in (self.host_end, self.pump_end, self.bridge_end):
            run(["sysctl", "-qw", f"net.ipv6.conf.{name}.disable_ipv6=1"], check=False)
            run(["ethtool", "-K", name, *OFFLOADS])
        run(["ip", "link", "set", self.host_end, "nomaster"])
        run(["ip", "link", "set", self.bridge_end, "master", self.bridge])
        for name in (self.pump_end, self.bridge_end):
            run(["ip", "link", "set", name, "up"])
        argv = [sys.executable, "-m", "tests.cluster.delayline", self.host_end, self.pump_end, str(self.delay_ms)]
        self.pump = subprocess.Popen(argv + ([self.to] if self.to else []), stdin=subprocess.DEVNULL)
        time.sleep(0.3)  # sockets bound before the first frame is due
        if self.pump.poll() is not None:
            raise RuntimeError(f"the delay line pump exited with {self.pump.returncode}")
        return self

    def remove(self) -> None:
        from tests.cluster.rig import run

        if self.pump is not None and self.pump.poll() is None:
            self.pump.terminate()
            self.pump.wait(10)
        run(["ip", "link", "del", self.pump_end], check=False)  # takes fdnb<i> with it
        run(["ip", "link", "set", self.host_end, "master", self.bridge], check=False)
        self.machine.run("ethtool", "-K", "eth0", "tx", "on", "tso", "on", "gso", "on", check=False)


def _packet_socket(interface: str) -> socket.socket:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.bind((interface, 0))
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    return sock


def _delayed(frame: bytes, to: bytes | None) -> bool:
    if to is None:
        return True
    return frame[12:14] == b"\x08\x00" and frame[30:34] == to  # IPv4 and its destination


def pump(machine_side: str, bridge_side: str, delay_ms: float, to: str | None) -> None:
    inner, outer = _packet_socket(machine_side), _packet_socket(bridge_side)
    delay = delay_ms / 1000.0
    target = socket.inet_aton(to) if to else None
    held: collections.deque[tuple[float, bytes]] = collections.deque()
    while True:
        timeout = max(0.0, held[0][0] - time.monotonic()) if held else None
        readable, _, _ = select.select([inner, outer], [], [], timeout)
        for sock in readable:
            while True:
                try:
                    frame, address = sock.recvfrom(65536)
                except BlockingIOError:
                    break
                if address[2] == PACKET_OUTGOING:
                    continue  # our own send, seen again on the way out
                if sock is outer:
                    _forward(inner, frame)
                elif _delayed(frame, target):
                    held.append((time.monotonic() + delay, frame))
                else:
                    _forward(outer, frame)
        now = time.monotonic()
        while held and held[0][0] <= now:
            _forward(outer, held.popleft()[1])


def _forward(sock: socket.socket, frame: bytes) -> None:
    """Send one frame; one larger than the link's MTU is dropped, as a link drops it."""
    try:
        sock.send(frame)
    except OSError as exc:
        if exc.errno != errno.EMSGSIZE:
            raise
        print(f"delay line: dropped a {len(frame)}-byte frame (over the MTU)", file=sys.stderr)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    pump(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
