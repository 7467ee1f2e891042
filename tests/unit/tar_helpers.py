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
