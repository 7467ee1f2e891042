"""Tarballs for the jail tests, built from TarInfo members."""
import io
import tarfile


def make_tar(path, members, fmt=tarfile.DEFAULT_FORMAT, compression=""):
    """members: (TarInfo, bytes or None). -> the archive's path as a string."""
    with tarfile.open(str(path), "w" + (":" + compression if compression else ""), format=fmt) as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return str(path)


SIZE_FIELD = (124, 12)          # a header's size
GNU_SPARSE_REALSIZE = (483, 12)  # an old GNU sparse header's real size


def header_offsets(path):
    """The byte offset of each member's first header (a GNU long name's or PAX header's, where it has one)."""
    with tarfile.open(str(path)) as tar:
        return dict((m.name, m.offset) for m in tar.getmembers())


def set_number(path, header, field, value):
    """Write `value` into the numeric `field` (offset, width) of the 512-byte header at byte `header` of the plain
    archive `path` - base-256 as GNU tar writes it, so negative or huge - and fix the header's checksum: a header no
    tar writer makes."""
    start, width = field
    if value < 0:
        raw = bytes([0xff]) + (256 ** (width - 1) + value).to_bytes(width - 1, "big")
    else:
        raw = bytes([0x80]) + value.to_bytes(width - 1, "big")
    with open(str(path), "r+b") as f:
        f.seek(header)
        block = bytearray(f.read(512))
        block[start:start + width] = raw
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
        f.seek(header)
        f.write(bytes(block))
