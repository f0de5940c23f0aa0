//! The one error type of the core. The binding layer maps each [`ErrorKind`] to a Python
//! exception class; the message always names the file (and member or dataset) concerned.

use std::fmt;
use std::io;

/// What went wrong, as far as the caller should care: each kind becomes one Python exception.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The operating system refused an open/read (missing file, permissions, ...).
    Io,
    /// A file changed size or kind since the reader opened it.
    Changed,
    /// A read past the end of data held whole (in memory): the data is shorter than its
    /// format's structure says. Formats report it as their own damage ([`Error::as_damage`]).
    PastEnd,
    /// Malformed NPY header or data.
    NpyFormat,
    /// Malformed ZIP structure, CRC mismatch, corrupt deflate stream.
    BadZip,
    /// Malformed tar structure: a header that does not check out, a size past the end, a
    /// lying PAX record, a key that occurs twice.
    BadTar,
    /// Malformed HDF5 metadata or chunk.
    Hdf5,
    /// A header asks for more than the configured limits allow.
    LimitExceeded,
    /// Samples that should agree (shape, dtype, keys) do not.
    Inconsistent,
    /// A caller-supplied argument is invalid (wrong `out=`, bad index type, ...).
    InvalidArgument,
    /// A missing member, key or dataset.
    Key,
    /// An index outside the sample range.
    Index,
    /// Valid input that packread does not read (object dtype, encryption, unknown filter).
    Unsupported,
    /// An encoded image that does not decode: truncated, damaged, not an image, too large.
    Decode,
    /// A broken promise inside packread itself (a bug), or a read that could not finish.
    Internal,
}

/// An error with the place it happened (`location`: a path, optionally `path:member`).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    location: String,
    message: String,
    io: Option<io::Error>,
}

/// The core's result: [`Error`] unless another error type is named.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` at `location` (empty when the caller does not know it yet; see
    /// [`Error::at`]).
    pub fn new(kind: ErrorKind, location: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            kind,
            location: location.into(),
            message: message.into(),
            io: None,
        }
    }

    /// An OS-level failure on `location`, keeping the `io::Error` (and so its errno).
    pub fn io(location: impl Into<String>, err: io::Error) -> Self {
        Error {
            kind: ErrorKind::Io,
            location: location.into(),
            message: err.to_string(),
            io: Some(err),
        }
    }

    /// What went wrong: the Python exception the binding raises.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Where it happened (a path, `path:member`, ...); empty if unknown.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// What happened, without the location (`Display` prefixes it).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The errno of an OS-level failure, if there was one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.io.as_ref().and_then(io::Error::raw_os_error)
    }

    /// The kind of an OS-level failure, if there was one.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        self.io.as_ref().map(io::Error::kind)
    }

    /// This error, a read past the end of data held whole ([`ErrorKind::PastEnd`]) becoming
    /// damage of the format reading it (`kind`: `BadZip`, `Hdf5`, `NpyFormat`, ...).
    pub fn as_damage(self, kind: ErrorKind) -> Self {
        if self.kind == ErrorKind::PastEnd {
            return Error { kind, ..self };
        }
        self
    }

    /// Replaces the location, e.g. to add the member or dataset a format knows about.
    pub fn at(mut self, location: impl Into<String>) -> Self {
        self.location = location.into();
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.location.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.location, self.message)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.io.as_ref().map(|e| e as _)
    }
}
