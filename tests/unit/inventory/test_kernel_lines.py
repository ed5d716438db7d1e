"""The one source of kernel lines (kernel/lines.py) where the host has no journal: /dev/kmsg's
record format, a file and a FIFO standing in for the device, the position kept and an unusable
one read from the boot's start, no source at all said with both reasons, a consumer that
raises costing only itself. The journal side runs on real journal files in
tests/integration/inventory/test_gpu_remedies.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from faden_agent.workers.inventory.kernel import journald
from faden_agent.workers.inventory.kernel.kmsg import KmsgRecord, parse_record
from faden_agent.workers.inventory.kernel.lines import KernelLine, KernelLines
from tests.support.agentproc import wait_for

BOOT = "b" * 32


def test_kmsg_records_are_read_as_the_kernel_writes_them():
    assert parse_record(b"3,1234,5678901,-;NVRM: Xid (PCI:0000:18:00): 48, pid=7") == KmsgRecord(
        3, 1234, 5678901, "NVRM: Xid (PCI:0000:18:00): 48, pid=7"
    )
    assert parse_record(b"6,17,99,c,caller=T1;a; semicolon in the text") == KmsgRecord(
        6, 17, 99, "a; semicolon in the text"
    )
    assert parse_record(b" SUBSYSTEM=pci") is None  # the record's dictionary
    assert parse_record(b"14,18,100,-;systemd[1]: a program's line") is None  # facility user, not the kernel
    for junk in (b"", b"no header", b"x,1,2,-;text", b"3,1;short", b"3," + b"9" * 30 + b",1,-;big"):
        assert parse_record(junk) is None
    assert parse_record(b"4,5,6,-;\xff\xfe bytes").text.endswith("bytes")  # type: ignore[union-attr]


class Collected:
    name = "collected"

    def __init__(self) -> None:
        self.lines: list[KernelLine] = []

    def take(self, line: KernelLine) -> None:
        self.lines.append(line)


class Raises:
    name = "raises"

    def take(self, line: KernelLine) -> None:
        raise ValueError("a consumer's bug")


def source(tmp_path: Path, kmsg: Path, cursor: str | None = None) -> tuple[KernelLines, Collected, threading.Thread]:
    empty = tmp_path / "no-journal"
    empty.mkdir(exist_ok=True)
    lines = KernelLines(threading.Event(), BOOT, cursor, journal_directory=empty, kmsg_path=kmsg)
    collected = Collected()
    lines.add(Raises())  # first: its failures must not keep the line from the next consumer
    lines.add(collected)
    thread = threading.Thread(target=lines.run, daemon=True)
    thread.start()
    return lines, collected, thread


def stop(lines: KernelLines, thread: threading.Thread) -> None:
    lines.stop()
    thread.join(5)
    assert not thread.is_alive()


def record(seq: int, text: str, level: int = 3) -> bytes:
    usec = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
    return f"{level},{seq},{usec},-;{text}\n SUBSYSTEM=pci\n DEVICE=+pci:0000:18:00.0\n".encode()


def test_a_file_for_kmsg_is_followed_and_its_position_kept(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(record(1, "usb 1-1: new device") + record(2, "NVRM: Xid (PCI:0000:18:00): 13, pid=1"))
    lines, collected, thread = source(tmp_path, kmsg)
    try:
        wait_for(lambda: len(collected.lines) == 2, 5, what="the two records already there")
        assert lines.source == "kmsg" and lines.problem is None
        with open(kmsg, "ab") as fh:
            fh.write(record(3, "NVRM: Xid (PCI:0000:18:00): 79, pid=2") + b"7,4,1,-;half a rec")
        wait_for(lambda: len(collected.lines) == 3, 5, what="the record appended")
        first = collected.lines[-1]
        assert (first.text, first.boot_id, first.source, first.level, first.seq) == (
            "NVRM: Xid (PCI:0000:18:00): 79, pid=2",
            BOOT,
            "kmsg",
            3,
            3,  # what names the line in its boot: its time is computed again by each run
        )
        assert abs(first.at - time.time()) < 5  # the kernel's clock since boot, as wall time
        assert lines.cursor == f"kmsg:{BOOT}:3" and lines.status()["consumer_errors"] == {"raises": 3}
    finally:
        stop(lines, thread)
    # started again after the saved position: nothing read twice
    again, collected, thread = source(tmp_path, kmsg, cursor=f"kmsg:{BOOT}:2")
    try:
        wait_for(lambda: len(collected.lines) == 1, 5, what="the one record after the position")
        assert collected.lines[0].text.endswith("79, pid=2") and again.note is None
    finally:
        stop(again, thread)


def test_an_unusable_position_reads_from_the_boot_s_start(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_bytes(record(1, "one") + record(2, "two"))
    for cursor in ("kmsg:not-a-boot:2", "kmsg:" + BOOT + ":2x", "\x00garbage", f"kmsg:{'c' * 32}:9"):
        lines, collected, thread = source(tmp_path, kmsg, cursor=cursor)
        try:
            wait_for(lambda c=collected: len(c.lines) == 2, 5, what=f"both records after {cursor!r}")
            assert lines.note and "boot's start" in lines.note, cursor
        finally:
            stop(lines, thread)


def test_a_fifo_for_kmsg_is_read_as_written(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # held open: the reader never sees the end
    try:
        lines, collected, thread = source(tmp_path, fifo)
        try:
            os.write(writer, record(10, "NVRM: GPU at PCI:0000:18:00: GPU-x"))
            os.write(writer, record(11, "NVRM: Xid (PCI:0000:18:00): 48, pid=3")[:20])  # a record in two writes
            time.sleep(0.2)
            os.write(writer, record(11, "NVRM: Xid (PCI:0000:18:00): 48, pid=3")[20:])
            wait_for(lambda: len(collected.lines) == 2, 5, what="both records from the FIFO")
            assert [line.text for line in collected.lines] == [
                "NVRM: GPU at PCI:0000:18:00: GPU-x",
                "NVRM: Xid (PCI:0000:18:00): 48, pid=3",
            ]
        finally:
            stop(lines, thread)
    finally:
        os.close(writer)


def test_no_kernel_source_says_both_reasons(tmp_path):
    lines, collected, thread = source(tmp_path, tmp_path / "missing-kmsg")
    try:
        wait_for(lambda: lines.problem, 5, what="the problem")
        assert lines.source is None
        assert lines.problem == (
            f"no kernel log: no journal files in {tmp_path / 'no-journal'}; {tmp_path / 'missing-kmsg'}: "
            "No such file or directory"
        )
    finally:
        stop(lines, thread)
    link = tmp_path / "linked-kmsg"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(record(1, "x"))
    lines, collected, thread = source(tmp_path, link)
    try:
        wait_for(lambda: lines.problem, 5, what="a symlink refused")
        assert collected.lines == [] and "Too many levels of symbolic links" in lines.problem
    finally:
        stop(lines, thread)


def test_the_journal_command_and_its_cursor():
    good = "s=" + "a" * 32 + ";i=1f;b=" + "b" * 32 + ";m=2a;t=5f1;x=9"
    assert journald.usable_cursor(good)
    for bad in (None, "", "s=1;i=5", good + ";junk", "x" * 500, good.replace("i=1f", "i=zz")):
        assert not journald.usable_cursor(bad), bad
    argv = journald.argv(Path("/j"), BOOT, good)
    assert "_TRANSPORT=kernel" in argv and f"_BOOT_ID={BOOT}" in argv and f"--after-cursor={good}" in argv
    started = journald.argv(None, BOOT, "s=1;i=5")  # unusable: the boot's start, no --since
    assert not any(a.startswith(("--after-cursor", "--since")) for a in started)
