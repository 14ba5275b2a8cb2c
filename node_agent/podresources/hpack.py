"""HPACK (RFC 7541), as much as a gRPC client needs: decode any header block a server sends
(static and dynamic table, Huffman strings), encode request headers as plain literals.

The kubelet's gRPC server (Go) indexes headers in its dynamic table and Huffman-codes strings,
so decoding is complete; encoding uses "literal without indexing" only, which every decoder
accepts and which leaves the server's table for our connection empty.

Everything is bounded: a header block is decoded from bytes already read (the caller caps its
size), integers are capped at 2**32, the dynamic table at the 4,096 bytes the client announced.
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE: the default, never raised by the client
MAX_INT = 2**32


class HpackError(Exception):
    """A header block that is not valid HPACK (a connection error in HTTP/2 terms)."""


# RFC 7541 Appendix A.
STATIC_TABLE: tuple[tuple[str, str], ...] = (
    (":authority", ""), (":method", "GET"), (":method", "POST"), (":path", "/"),
    (":path", "/index.html"), (":scheme", "http"), (":scheme", "https"), (":status", "200"),
    (":status", "204"), (":status", "206"), (":status", "304"), (":status", "400"),
    (":status", "404"), (":status", "500"), ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"), ("accept-language", ""), ("accept-ranges", ""),
    ("accept", ""), ("access-control-allow-origin", ""), ("age", ""), ("allow", ""),
    ("authorization", ""), ("cache-control", ""), ("content-disposition", ""),
    ("content-encoding", ""), ("content-language", ""), ("content-length", ""),
    ("content-location", ""), ("content-range", ""), ("content-type", ""), ("cookie", ""),
    ("date", ""), ("etag", ""), ("expect", ""), ("expires", ""), ("from", ""), ("host", ""),
    ("if-match", ""), ("if-modified-since", ""), ("if-none-match", ""), ("if-range", ""),
    ("if-unmodified-since", ""), ("last-modified", ""), ("link", ""), ("location", ""),
    ("max-forwards", ""), ("proxy-authenticate", ""), ("proxy-authorization", ""),
    ("range", ""), ("referer", ""), ("refresh", ""), ("retry-after", ""), ("server", ""),
    ("set-cookie", ""), ("strict-transport-security", ""), ("transfer-encoding", ""),
    ("user-agent", ""), ("vary", ""), ("via", ""), ("www-authenticate", ""),
)
assert len(STATIC_TABLE) == 61

# RFC 7541 Appendix B is a canonical Huffman code: the code of every symbol (0..255, and 256,
# end of string) follows from the code lengths alone, assigned in order of (length, symbol).
# The lengths, symbol 0 first, as runs: "28x7" is seven symbols of 28 bits.
_LENGTH_RUNS = (
    "13 23 28x7 24 30 28x2 30 28x8 30 28x9 6 10x2 12 13 6 8 11 10x2 8 11 8 6x3 5x3 6x7 7 8 15 "
    "6 12 10 13 6 7x22 8 7 8 13 19 13 14 6 15 5 6 5 6 5 6x3 5 7x2 6x3 5 6 7 6 5x2 6 7x5 15 11 "
    "14 13 28 20 22 20x2 22x3 23 22 23x5 24 23 24x2 22 23 24 23x4 21 22 23 22 23x2 24 22 21 20 "
    "22x2 23x2 21 23 22x2 24 21 22 23x2 21x2 22 21 23 22 23x2 20 22x3 23 22x2 23 26x2 20 19 22 "
    "23 22 25 26x3 27x2 26 24 25 19 21 26 27x2 26 27 24 21x2 26x2 28 27x3 20 24 20 21 22 21x2 "
    "23 22x2 25x2 24x2 26 23 26 27 26x2 27x5 28 27x5 26 30"
)
EOS = 256


def _lengths() -> list[int]:
    out: list[int] = []
    for run in _LENGTH_RUNS.split():
        length, _, count = run.partition("x")
        out += [int(length)] * int(count or 1)
    return out


def huffman_codes() -> dict[int, tuple[int, int]]:
    """symbol → (code, bit length), built from the canonical lengths."""
    lengths = _lengths()
    if len(lengths) != 257:  # pragma: no cover - the table above is fixed
        raise AssertionError(f"{len(lengths)} Huffman code lengths, want 257")
    codes: dict[int, tuple[int, int]] = {}
    code, previous = 0, 0
    for symbol in sorted(range(257), key=lambda s: (lengths[s], s)):
        code <<= lengths[symbol] - previous
        previous = lengths[symbol]
        codes[symbol] = (code, previous)
        code += 1
    return codes


_DECODE: dict[tuple[int, int], int] | None = None  # (bit length, code) → symbol, built once


def huffman_decode(data: bytes) -> bytes:
    """Decode a Huffman-coded string; padding must be fewer than 8 one-bits (RFC 7541 5.2)."""
    global _DECODE
    if _DECODE is None:
        _DECODE = {(n, c): s for s, (c, n) in huffman_codes().items()}
    table = _DECODE
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            symbol = table.get((length, code))
            if symbol is not None:
                if symbol == EOS:
                    raise HpackError("Huffman string contains end-of-string")
                out.append(symbol)
                code = length = 0
            elif length > 30:
                raise HpackError("invalid Huffman code")
    if length > 7 or code != (1 << length) - 1:
        raise HpackError("invalid Huffman padding")
    return bytes(out)


def decode_int(data: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """An HPACK integer with an N-bit prefix starting at data[pos]; returns (value, next pos)."""
    if pos >= len(data):
        raise HpackError("header block ends inside an integer")
    mask = (1 << prefix_bits) - 1
    value = data[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    while True:
        if pos >= len(data):
            raise HpackError("header block ends inside an integer")
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if value > MAX_INT:
            raise HpackError("integer too large")
        if not byte & 0x80:
            return value, pos


def encode_int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    mask = (1 << prefix_bits) - 1
    if value < mask:
        return bytes([first | value])
    out = bytearray([first | mask])
    value -= mask
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _decode_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos >= len(data):
        raise HpackError("header block ends before a string")
    huffman = bool(data[pos] & 0x80)
    length, pos = decode_int(data, pos, 7)
    if pos + length > len(data):
        raise HpackError("string runs past the header block")
    raw = data[pos:pos + length]
    text = huffman_decode(raw) if huffman else raw
    # Header values are octets; gRPC's are ASCII. latin-1 keeps every byte, never fails.
    return text.decode("latin-1"), pos + length


def encode_headers(headers: Iterable[tuple[str, str]]) -> bytes:
    """A header block of literals without indexing, new names, no Huffman (RFC 7541 6.2.2)."""
    out = bytearray()
    for name, value in headers:
        raw_name, raw_value = name.encode("ascii"), value.encode("ascii")
        out.append(0x00)
        out += encode_int(len(raw_name), 7) + raw_name
        out += encode_int(len(raw_value), 7) + raw_value
    return bytes(out)


class Decoder:
    """Decodes the header blocks of one connection, in order (the dynamic table carries over)."""

    def __init__(self, max_table_size: int = MAX_TABLE_SIZE) -> None:
        self._limit = max_table_size
        self._max = max_table_size
        self._table: list[tuple[str, str]] = []  # newest first
        self._size = 0

    def _entry(self, index: int) -> tuple[str, str]:
        if index == 0:
            raise HpackError("header index 0")
        if index <= len(STATIC_TABLE):
            return STATIC_TABLE[index - 1]
        dynamic = index - len(STATIC_TABLE) - 1
        if dynamic >= len(self._table):
            raise HpackError(f"header index {index} not in the table")
        return self._table[dynamic]

    def _evict(self) -> None:
        while self._size > self._max and self._table:
            name, value = self._table.pop()
            self._size -= len(name) + len(value) + 32

    def _add(self, name: str, value: str) -> None:
        size = len(name) + len(value) + 32
        if size > self._max:  # RFC 7541 4.4: an entry larger than the table empties it
            self._table.clear()
            self._size = 0
            return
        self._table.insert(0, (name, value))
        self._size += size
        self._evict()

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = []
        pos = 0
        while pos < len(block):
            first = block[pos]
            if first & 0x80:  # indexed header field
                index, pos = decode_int(block, pos, 7)
                headers.append(self._entry(index))
                continue
            if first & 0xE0 == 0x20:  # dynamic table size update
                size, pos = decode_int(block, pos, 5)
                if size > self._limit:
                    raise HpackError(f"table size {size} above the {self._limit} allowed")
                self._max = size
                self._evict()
                continue
            indexing = first & 0xC0 == 0x40
            index, pos = decode_int(block, pos, 6 if indexing else 4)
            if index:
                name = self._entry(index)[0]
            else:
                name, pos = _decode_string(block, pos)
            value, pos = _decode_string(block, pos)
            if indexing:
                self._add(name, value)
            headers.append((name, value))
        return headers
