"""Loki's native push body: a logproto PushRequest, protobuf-encoded by hand, snappy block.

PushRequest{streams=1: StreamAdapter{labels=1, entries=2: EntryAdapter{timestamp=1:
Timestamp{seconds=1, nanos=2}, line=2, structuredMetadata=3: LabelPair{name=1, value=2}}}}.
Loki 2.8 skips field 3 without a word, so metadata goes here only to a target known to take it.
"""

from __future__ import annotations

import orjson

from faden_agent.workers.logs.entry import Entry, Labels

CONTENT_TYPE = "application/x-protobuf"
_SMALL = [bytes([n]) for n in range(128)]  # one-byte varints: most lengths and every tag
_LABELS_CACHE_MAX = 1024


def varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    if n < 16384:
        return bytes((n & 127 | 128, n >> 7))
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, bytes."""
    return tag + varint(len(payload)) + payload


def label_text(labels: Labels) -> str:
    """The stream's labels as Loki parses them: {a="b", c="d"}. A JSON string is a Go string
    literal Loki's parser unquotes (\\" \\\\ \\n \\uXXXX ...): no control character gets through raw."""
    return "{" + ", ".join(f"{name}={orjson.dumps(value).decode()}" for name, value in labels) + "}"


class ProtoEncoder:
    """Encodes batches; keeps the encoded labels and metadata it met (few: one per stream or process)."""

    def __init__(self) -> None:
        self._labels: dict[Labels, bytes] = {}
        self._metadata: dict[int, tuple[dict[str, str], bytes]] = {}  # by id(): sources share the dict

    def encode(self, streams: list[list[Entry]], with_metadata: bool) -> bytes:
        """The snappy-compressed PushRequest of these streams (each one stream's entries, in order)."""
        import cramjam  # here, not at import: +1.7 MiB PSS only in a worker that pushes protobuf

        body = b"".join(self._stream(entries, with_metadata) for entries in streams)
        return bytes(cramjam.snappy.compress_raw(body))

    def _stream(self, entries: list[Entry], with_metadata: bool) -> bytes:
        labels = self._labels.get(entries[0].stream)
        if labels is None:
            if len(self._labels) >= _LABELS_CACHE_MAX:
                self._labels.clear()
            labels = self._labels[entries[0].stream] = _field(b"\x0a", label_text(entries[0].stream).encode())
        parts: list[bytes] = []
        add = parts.extend
        metadata_of = self._metadata_bytes
        last_seconds, head, fixed = -1, b"", 0
        last_metadata, extra = None, b""
        for e in entries:
            seconds, n = divmod(e.ts_ns, 1_000_000_000)
            if seconds != last_seconds:  # the Timestamp up to its nanos: the same for a run of lines
                last_seconds, encoded = seconds, varint(seconds)
                head = b"\x0a" + _SMALL[len(encoded) + 7] + b"\x08" + encoded + b"\x10"
                fixed = len(head) + 6  # + the 5 nanos bytes + the line's tag
            metadata = e.metadata
            if metadata is last_metadata or metadata is None or with_metadata:
                text = e.line
                if metadata is not last_metadata:  # a run of lines of one process shares it
                    last_metadata, extra = metadata, metadata_of(metadata) if metadata is not None else b""
            else:
                text, extra = e.with_detail(), b""
            try:  # strict first: naming the handler costs every line a lookup
                line = text.encode()
            except UnicodeEncodeError:
                line = text.encode("utf-8", "surrogatepass")
            # One EntryAdapter as its pieces (joined once per push); the nanos as a 5-byte
            # varint (a longer form of a small value is valid protobuf): no loop per line, and
            # the usual one- and two-byte lengths without a call.
            length = len(line)
            size = _SMALL[length] if length < 128 else varint(length)
            whole = fixed + len(size) + length + len(extra)
            add(
                (
                    b"\x12",
                    bytes((whole & 127 | 128, whole >> 7)) if 127 < whole < 16384 else varint(whole),
                    head,
                    bytes((n & 127 | 128, n >> 7 & 127 | 128, n >> 14 & 127 | 128, n >> 21 & 127 | 128, n >> 28)),
                    b"\x12",
                    size,
                    line,
                    extra,
                )
            )
        body = b"".join(parts)
        return b"\x0a" + varint(len(labels) + len(body)) + labels + body

    def _metadata_bytes(self, metadata: dict[str, str]) -> bytes:
        known = self._metadata.get(id(metadata))
        if known is not None and known[0] is metadata:
            return known[1]
        encoded = b"".join(
            _field(b"\x1a", _field(b"\x0a", name.encode()) + _field(b"\x12", value.encode("utf-8", "surrogatepass")))
            for name, value in metadata.items()
        )
        if len(self._metadata) >= _LABELS_CACHE_MAX:
            self._metadata.clear()
        self._metadata[id(metadata)] = (metadata, encoded)  # holding the dict keeps its id unique
        return encoded
