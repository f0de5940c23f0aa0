"""Exceptions raised by packread.

Every class subclasses :class:`PackreadError` and the builtin exception a caller of h5py,
numpy or zipfile would already catch (``ValueError``, ``OSError``, ``zipfile.BadZipFile``...).
"""

from __future__ import annotations

import tarfile
import zipfile

__all__ = [
    "BadTarError",
    "BadZipError",
    "DecodeError",
    "HDF5Error",
    "InconsistentError",
    "IndexOutOfRangeError",
    "InternalError",
    "InvalidArgumentError",
    "LimitExceededError",
    "MissingKeyError",
    "NpyFormatError",
    "PackreadError",
    "PackreadFileNotFoundError",
    "PackreadIsADirectoryError",
    "PackreadOSError",
    "PackreadPermissionError",
    "PackreadTimeoutError",
    "PackreadTypeError",
    "ReaderClosedError",
    "UnsupportedError",
]


class PackreadError(Exception):
    """Base class of every exception packread raises.

    >>> try:
    ...     packread.HDF5Reader("train.h5", "no_such_dataset")
    ... except packread.PackreadError as e:
    ...     print(type(e).__name__, isinstance(e, KeyError))
    MissingKeyError True
    """


class PackreadOSError(PackreadError, OSError):
    """A file could not be opened or read, or changed since the reader opened it."""


class PackreadFileNotFoundError(PackreadOSError, FileNotFoundError):
    """A file does not exist."""


class PackreadIsADirectoryError(PackreadOSError, IsADirectoryError):
    """A directory was given where a file was expected."""


class PackreadPermissionError(PackreadOSError, PermissionError):
    """A file may not be read (an object: access denied, with the HTTP status)."""


class PackreadTimeoutError(PackreadOSError, TimeoutError):
    """An object in object storage could not be read in time: its requests timed out and the
    retries ran out."""


class NpyFormatError(PackreadError, ValueError):
    """A malformed NPY header or data section."""


class BadZipError(PackreadError, zipfile.BadZipFile):
    """A malformed ZIP archive, a CRC mismatch or a corrupt deflate stream."""


class BadTarError(PackreadError, tarfile.ReadError):
    """A malformed tar archive: a header whose checksum does not match, a member running past
    the end of the file, a lying PAX record, a key that occurs twice in one shard."""


class HDF5Error(PackreadError, OSError):
    """Malformed HDF5 metadata or chunk data, or a truncated file."""


class PackreadTypeError(PackreadError, TypeError):
    """An argument of the wrong type, such as a float index or one member name where a list
    is expected."""


class LimitExceededError(PackreadError, ValueError):
    """A header asks for more than the configured limits allow."""


class InconsistentError(PackreadError, ValueError):
    """Samples that must agree (shape, dtype, keys) do not."""


class InvalidArgumentError(PackreadError, ValueError):
    """An invalid argument, such as an ``out=`` array of the wrong shape or dtype."""


class MissingKeyError(PackreadError, KeyError):
    """A missing member, key or dataset."""


class IndexOutOfRangeError(PackreadError, IndexError):
    """An index outside the range of samples."""


class ReaderClosedError(PackreadError, ValueError):
    """A reader used after ``close()`` (like a closed file's ``ValueError``)."""


class UnsupportedError(PackreadError, NotImplementedError):
    """Valid input that packread cannot read (encryption, unknown compression or filter)."""


class DecodeError(PackreadError, ValueError):
    """An encoded image (JPEG, PNG, WebP) that does not decode: truncated, damaged, not an
    image at all, or declaring more pixels than allowed. The message names the file or the
    archive and member, and what is wrong."""


class InternalError(PackreadError, RuntimeError):
    """A read that could not finish (a batch started before a ``fork``), or a bug in packread."""


def os_error(error: OSError, what: str) -> PackreadOSError:
    """``error`` (a builtin ``OSError`` of a file packread opened itself) as the packread
    exception of the same kind, its message saying ``what`` was being done."""
    if isinstance(error, PackreadOSError):
        return error
    cls: type[PackreadOSError] = PackreadOSError
    if isinstance(error, FileNotFoundError):
        cls = PackreadFileNotFoundError
    elif isinstance(error, IsADirectoryError):
        cls = PackreadIsADirectoryError
    elif isinstance(error, PermissionError):
        cls = PackreadPermissionError
    detail = error.strerror or str(error)
    return cls(f"{what}: {detail}")
