//! Core errors to Python exceptions. The exception classes live in `packread/errors.py`, where
//! they can inherit from both `PackreadError` and the builtin a caller expects.

use std::io;

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::error::{Error, ErrorKind};

fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py
        .import("packread.errors")?
        .getattr(name)?
        .cast_into::<PyType>()?)
}

/// Builds the Python exception for a core error.
pub(super) fn to_py(py: Python<'_>, err: Error) -> PyErr {
    let name = match err.kind() {
        ErrorKind::Io => match err.io_kind() {
            Some(io::ErrorKind::NotFound) => "PackreadFileNotFoundError",
            Some(io::ErrorKind::IsADirectory) => "PackreadIsADirectoryError",
            Some(io::ErrorKind::PermissionDenied) => "PackreadPermissionError",
            Some(io::ErrorKind::TimedOut) => "PackreadTimeoutError",
            _ => "PackreadOSError",
        },
        ErrorKind::Changed => "PackreadOSError",
        // A format reports it as its own damage; one that reaches Python unmapped is data
        // shorter than it says, as a truncated file is.
        ErrorKind::PastEnd => "PackreadOSError",
        ErrorKind::NpyFormat => "NpyFormatError",
        ErrorKind::BadZip => "BadZipError",
        ErrorKind::BadTar => "BadTarError",
        ErrorKind::Hdf5 => "HDF5Error",
        ErrorKind::LimitExceeded => "LimitExceededError",
        ErrorKind::Inconsistent => "InconsistentError",
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Key => "MissingKeyError",
        ErrorKind::Index => "IndexOutOfRangeError",
        ErrorKind::Unsupported => "UnsupportedError",
        ErrorKind::Decode => "DecodeError",
        ErrorKind::Internal => "InternalError",
    };
    let cls = match class(py, name) {
        Ok(cls) => cls,
        Err(e) => return e,
    };
    let args = match err.raw_os_error() {
        // OSError(errno, strerror, filename) fills in `.errno` and `.filename`.
        Some(errno) => (errno, err.message().to_string(), err.location().to_string())
            .into_pyobject(py)
            .map(|t| t.into_any()),
        None => (err.to_string(),).into_pyobject(py).map(|t| t.into_any()),
    };
    match args.and_then(|a| cls.call1(a.cast_into::<pyo3::types::PyTuple>()?)) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// `Result<T, core::Error>` to `PyResult<T>`.
pub(super) trait IntoPyResult<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, e))
    }
}

/// A `ValueError` subclass for invalid arguments, raised before any I/O.
pub(super) fn invalid_argument(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    to_py(py, Error::new(ErrorKind::InvalidArgument, "", msg))
}
