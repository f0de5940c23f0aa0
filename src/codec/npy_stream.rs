//! A whole NPY stream (an `.npy` member of a ZIP or NPZ) to C-order array data. Every member's
//! header is parsed and checked against the reader's expectation, so a sample that disagrees
//! is an error, never misread bytes.

use crate::dtype::DType;
use crate::error::{Error, ErrorKind};
use crate::formats::npy::header::{parse_header, Limits, NpyHeader};

use super::fortran_to_c;

/// What every NPY member read into one batch must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyExpect {
    /// The element type every member's header must declare.
    pub dtype: DType,
    /// The shape every member's header must declare, in elements.
    pub shape: Vec<usize>,
    /// Limits every member's header is parsed under.
    pub limits: Limits,
    /// Keep the stored layout (a whole array loaded as numpy would) instead of reordering
    /// Fortran-ordered data into C order (a sample stacked into a batch).
    pub keep_layout: bool,
}

impl NpyExpect {
    /// Bytes of the array data.
    pub fn data_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.itemsize()
    }

    /// Checks that a member's header holds the array this expects: the one check every `.npy`
    /// member read into a batch passes, wherever its header was read.
    pub fn check(&self, header: &NpyHeader) -> Result<(), Error> {
        if header.dtype != self.dtype || header.shape != self.shape {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                "",
                format!(
                    "array has dtype {} and shape {:?}, expected dtype {} and shape {:?}",
                    header.dtype.descr(),
                    header.shape,
                    self.dtype.descr(),
                    self.shape
                ),
            ));
        }
        Ok(())
    }
}

/// Decodes a whole NPY stream `input` (header and data) into exactly `out`: the header must
/// hold the array `expect` describes (else `Inconsistent`), and Fortran-ordered data is
/// reordered into C order unless `expect.keep_layout`. Malformed streams are `NpyFormat`.
pub(crate) fn npy_stream_to_c(
    input: &[u8],
    out: &mut [u8],
    expect: &NpyExpect,
) -> Result<(), Error> {
    let header = npy_stream_header(input, input.len(), expect)?;
    let data = &input[header.data_offset..header.data_offset + header.data_len];
    if data.len() != out.len() {
        return Err(Error::new(
            ErrorKind::NpyFormat,
            "",
            format!("array data is {} bytes, expected {}", data.len(), out.len()),
        ));
    }
    if header.needs_transpose() && !expect.keep_layout {
        fortran_to_c(data, out, &header.shape, header.dtype.itemsize())
            .map_err(|e| Error::new(ErrorKind::NpyFormat, "", e.to_string()))
    } else {
        out.copy_from_slice(data);
        Ok(())
    }
}

/// Parses the header at the start of an NPY stream of `available` bytes (`bytes` holds at
/// least the whole header) and checks it against `expect`.
pub(super) fn npy_stream_header(
    bytes: &[u8],
    available: usize,
    expect: &NpyExpect,
) -> Result<NpyHeader, Error> {
    let header = parse_header(bytes, available, "", &expect.limits)?;
    expect.check(&header)?;
    Ok(header)
}
