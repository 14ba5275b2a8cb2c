"""HPACK against RFC 7541's own examples (Appendix C, the Huffman code of Appendix B) and a
bad header block."""

from __future__ import annotations

import pytest

from node_agent.podresources import hpack

pytestmark = pytest.mark.unit


def test_integers_of_rfc7541_c1() -> None:
    assert hpack.decode_int(bytes([0x0A]), 0, 5) == (10, 1)
    assert hpack.decode_int(bytes([0x1F, 0x9A, 0x0A]), 0, 5) == (1337, 3)
    assert hpack.decode_int(bytes([0x2A]), 0, 8) == (42, 1)
    assert hpack.encode_int(1337, 5) == bytes([0x1F, 0x9A, 0x0A])


def test_requests_with_huffman_of_rfc7541_c4_share_one_dynamic_table() -> None:
    d = hpack.Decoder()
    assert d.decode(bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff")) == [
        (":method", "GET"), (":scheme", "http"), (":path", "/"),
        (":authority", "www.example.com")]
    assert d.decode(bytes.fromhex("828684be5886a8eb10649cbf")) == [
        (":method", "GET"), (":scheme", "http"), (":path", "/"),
        (":authority", "www.example.com"), ("cache-control", "no-cache")]
    assert d.decode(bytes.fromhex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf")) == [
        (":method", "GET"), (":scheme", "https"), (":path", "/index.html"),
        (":authority", "www.example.com"), ("custom-key", "custom-value")]


def test_the_huffman_code_is_canonical_with_rfc7541_appendix_b_values() -> None:
    codes = hpack.huffman_codes()
    assert codes[ord("0")] == (0x0, 5)
    assert codes[0] == (0x1FF8, 13)
    assert codes[ord("a")] == (0x3, 5)
    assert codes[255] == (0x3FFFFEE, 26)
    assert codes[256] == (0x3FFFFFFF, 30)  # EOS


@pytest.mark.parametrize("block", [
    bytes([0x80]),  # index 0
    bytes([0xFF, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),  # integer beyond 2**32
    bytes([0xBE]),  # dynamic index 62 with an empty table
    bytes([0x00, 0x05, ord("a")]),  # string past the block
    bytes([0x00, 0x81, 0x00, 0x00]),  # Huffman: 8 zero bits are no symbol's end: bad padding
    bytes([0x3F, 0xE2, 0x1F]),  # table size update to 4097, above 4096
    bytes([0x00, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x00]),  # Huffman EOS inside a string
])
def test_a_bad_header_block_is_an_hpack_error(block: bytes) -> None:
    with pytest.raises(hpack.HpackError):
        hpack.Decoder().decode(block)


def test_encoded_request_headers_decode_back() -> None:
    headers = [(":path", "/v1.PodResourcesLister/List"), ("te", "trailers")]
    assert hpack.Decoder().decode(hpack.encode_headers(headers)) == headers
