"""Code-point ranges -> sequences of byte ranges matching exactly their UTF-8 encodings."""

from __future__ import annotations

from ..core.caches import memoized

_LENGTH_BANDS = ((0x0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, 0x10FFFF))
_SURROGATES = (0xD800, 0xDFFF)


@memoized(65536, name="UTF-8 byte ranges of code-point ranges (automata/utf8.py)")
def utf8_byte_ranges(lo: int, hi: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Split [lo, hi] into byte-range sequences; each sequence matches one slice of the range.

    Surrogates (U+D800..U+DFFF) are skipped: UTF-8 cannot encode them.
    """
    out: list[list[tuple[int, int]]] = []
    pieces = []
    if lo <= _SURROGATES[1] and hi >= _SURROGATES[0]:
        if lo < _SURROGATES[0]:
            pieces.append((lo, _SURROGATES[0] - 1))
        if hi > _SURROGATES[1]:
            pieces.append((_SURROGATES[1] + 1, hi))
    else:
        pieces.append((lo, hi))
    for plo, phi in pieces:
        for band_lo, band_hi in _LENGTH_BANDS:
            a, b = max(plo, band_lo), min(phi, band_hi)
            if a <= b:
                _split_same_length(a, b, out)
    return tuple(tuple(seq) for seq in out)


def _split_same_length(lo: int, hi: int, out: list) -> None:
    """Both ends encode to the same number of bytes; split until every byte position is a plain range."""
    n = len(chr(lo).encode("utf-8", "surrogatepass"))
    for i in range(1, n):
        low_bits = (1 << (6 * i)) - 1
        if lo & ~low_bits != hi & ~low_bits:
            if lo & low_bits != 0:
                _split_same_length(lo, lo | low_bits, out)
                _split_same_length((lo | low_bits) + 1, hi, out)
                return
            if hi & low_bits != low_bits:
                _split_same_length(lo, (hi & ~low_bits) - 1, out)
                _split_same_length(hi & ~low_bits, hi, out)
                return
    first = chr(lo).encode("utf-8", "surrogatepass")
    last = chr(hi).encode("utf-8", "surrogatepass")
    out.append(list(zip(first, last)))
