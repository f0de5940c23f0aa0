//! NPY headers (versions 1.0, 2.0, 3.0): the magic string, the header length and the literal
//! dict, parsed as numpy's `numpy.lib.format` reads them but never evaluated, every size
//! checked before anything is allocated. Below both the codecs (an `.npy` member's stream is
//! checked against it) and the NPY indexer, and needs neither.

use crate::dtype::literal::{self, Literal};
use crate::dtype::{DType, DescrError};
use crate::error::{Error, ErrorKind, Result};

/// The six bytes every NPY stream starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy's own default for `max_header_size`.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 10_000;

/// How large a header [`parse_header`] and [`header_end`] accept, checked before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest header (the dict text) accepted, as numpy's `max_header_size`.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
        }
    }
}

/// A parsed NPY header: what the array is and where its data starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The format version (major, minor): (1, 0), (2, 0) or (3, 0).
    pub version: (u8, u8),
    /// The element type, from the header's `'descr'` (never the object dtype).
    pub dtype: DType,
    /// Whether the data is laid out in Fortran (column-major) order rather than C order.
    pub fortran_order: bool,
    /// The array's dimensions, outermost first; empty for a 0-d array.
    pub shape: Vec<usize>,
    /// Offset of the first data byte from the start of the NPY stream.
    pub data_offset: usize,
    /// Bytes of array data (`prod(shape) * itemsize`), checked not to overflow.
    pub data_len: usize,
}

impl NpyHeader {
    /// Whether the data of an NPY stream held in memory at address `base` can be viewed in
    /// place as an array of its dtype, whose alignment (as numpy computes it) is `align`.
    pub fn data_aligned(&self, base: usize, align: usize) -> bool {
        base.wrapping_add(self.data_offset) % align.max(1) == 0
    }

    /// Whether the data must be reordered to reach C order (Fortran order, 2+ real axes).
    pub fn needs_transpose(&self) -> bool {
        self.fortran_order && self.shape.iter().filter(|&&d| d > 1).count() > 1
    }

    /// Whether two headers describe arrays with the same layout in memory.
    pub fn same_array_type(&self, other: &NpyHeader) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }
}

fn npy_err(location: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::NpyFormat, location, msg)
}

/// From the first bytes of an NPY stream, the total length of preamble plus header
/// (= the data offset). `available` is how many bytes the stream has in all.
pub fn header_end(
    prefix: &[u8],
    available: usize,
    location: &str,
    limits: &Limits,
) -> Result<usize> {
    if prefix.len() < 10 || &prefix[..6] != MAGIC {
        return Err(npy_err(location, "not an NPY file (bad magic string)"));
    }
    let (major, minor) = (prefix[6], prefix[7]);
    let (len_bytes, header_len) = match (major, minor) {
        (1, 0) => (2usize, u16::from_le_bytes([prefix[8], prefix[9]]) as usize),
        (2, 0) | (3, 0) => {
            if prefix.len() < 12 {
                return Err(npy_err(location, "truncated NPY preamble"));
            }
            let n = u32::from_le_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
            (4, n as usize)
        }
        _ => {
            return Err(npy_err(
                location,
                format!("unsupported NPY format version {major}.{minor}"),
            ))
        }
    };
    if header_len > limits.max_header_bytes {
        return Err(Error::new(
            ErrorKind::LimitExceeded,
            location,
            format!(
                "NPY header is {header_len} bytes, more than max_header_size={} allows",
                limits.max_header_bytes
            ),
        ));
    }
    let end = 8 + len_bytes + header_len;
    if end > available {
        return Err(npy_err(
            location,
            format!("NPY header of {header_len} bytes runs past the end of the data ({available} bytes)"),
        ));
    }
    Ok(end)
}

/// Parses a whole header. `bytes` holds at least preamble + header; `available` is the length
/// of the whole NPY stream, so that data shorter than the shape needs is refused here.
pub fn parse_header(
    bytes: &[u8],
    available: usize,
    location: &str,
    limits: &Limits,
) -> Result<NpyHeader> {
    let data_offset = header_end(bytes, available, location, limits)?;
    if bytes.len() < data_offset {
        return Err(npy_err(location, "truncated NPY header"));
    }
    let version = (bytes[6], bytes[7]);
    let start = if version.0 == 1 { 10 } else { 12 };
    let raw = &bytes[start..data_offset];
    let text: String = if version.0 == 3 {
        std::str::from_utf8(raw)
            .map_err(|_| npy_err(location, "NPY 3.0 header is not valid UTF-8"))?
            .to_owned()
    } else {
        // Versions 1 and 2 are latin-1: every byte is the code point of the same value.
        raw.iter().map(|&b| char::from(b)).collect()
    };
    let dict = literal::parse(&text)
        .map_err(|e| npy_err(location, format!("NPY header is not a literal dict: {e}")))?;
    let Literal::Dict(items) = dict else {
        return Err(npy_err(
            location,
            format!("NPY header is a {}, not a dict", dict.type_name()),
        ));
    };
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    for (key, value) in items {
        match key.as_str() {
            Some("descr") => descr = Some(value),
            Some("fortran_order") => fortran = Some(value),
            Some("shape") => shape = Some(value),
            _ => {
                return Err(npy_err(
                    location,
                    format!("NPY header has an unexpected key {key}"),
                ))
            }
        }
    }
    let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
        return Err(npy_err(
            location,
            "NPY header must have exactly the keys 'descr', 'fortran_order' and 'shape'",
        ));
    };
    let Literal::Bool(fortran_order) = fortran else {
        return Err(npy_err(
            location,
            format!("'fortran_order' must be a bool, not {fortran}"),
        ));
    };
    let Literal::Tuple(dims) = shape else {
        return Err(npy_err(
            location,
            format!("'shape' must be a tuple, not {shape}"),
        ));
    };
    let shape = dims
        .iter()
        .map(|d| match d {
            Literal::Int(n) if *n >= 0 => usize::try_from(*n)
                .map_err(|_| npy_err(location, format!("dimension {n} is too large"))),
            Literal::Int(n) => Err(npy_err(
                location,
                format!("negative dimension {n} in 'shape'"),
            )),
            other => Err(npy_err(
                location,
                format!("'shape' entry {other} is not an int"),
            )),
        })
        .collect::<Result<Vec<usize>>>()?;
    let dtype = DType::from_descr(descr).map_err(|e| match e {
        DescrError::Object => npy_err(
            location,
            "NPY data has object dtype ('O'), which would need unpickling; packread never unpickles",
        ),
        DescrError::Malformed(msg) => npy_err(location, format!("bad 'descr': {msg}")),
    })?;
    // numpy refuses arrays whose non-zero dimensions multiply past a signed size, even when
    // another dimension is 0; so do we, before anything is allocated.
    let itemsize = dtype.itemsize();
    let nonzero_bytes = shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(itemsize.max(1), |acc, &d| acc.checked_mul(d))
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or_else(|| {
            npy_err(
                location,
                format!("shape {shape:?} times itemsize {itemsize} overflows"),
            )
        })?;
    let data_len = if shape.contains(&0) || itemsize == 0 {
        0
    } else {
        nonzero_bytes
    };
    let needed = data_offset
        .checked_add(data_len)
        .ok_or_else(|| npy_err(location, "data size overflows"))?;
    if needed > available {
        return Err(npy_err(
            location,
            format!(
                "NPY data is {} bytes but shape {shape:?} needs {data_len}",
                available.saturating_sub(data_offset)
            ),
        ));
    }
    Ok(NpyHeader {
        version,
        dtype,
        fortran_order,
        shape,
        data_offset,
        data_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend([version, 0]);
        let pre = if version == 1 { 10 } else { 12 };
        let mut header = dict.as_bytes().to_vec();
        while (pre + header.len() + 1) % 64 != 0 {
            header.push(b' ');
        }
        header.push(b'\n');
        if version == 1 {
            out.extend((header.len() as u16).to_le_bytes());
        } else {
            out.extend((header.len() as u32).to_le_bytes());
        }
        out.extend(header);
        out.extend(data);
        out
    }

    fn parse(bytes: &[u8]) -> Result<NpyHeader> {
        parse_header(bytes, bytes.len(), "t.npy", &Limits::default())
    }

    #[test]
    fn versions() {
        for v in [1, 2, 3] {
            let b = npy(
                v,
                "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }",
                &[0; 12],
            );
            let h = parse(&b).unwrap();
            assert_eq!(h.shape, vec![2, 3]);
            assert_eq!(h.data_len, 12);
            assert_eq!(h.data_offset % 64, 0);
            assert_eq!(h.version, (v, 0));
        }
    }

    #[test]
    fn short_data_is_refused() {
        let b = npy(
            1,
            "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }",
            &[0; 11],
        );
        let e = parse(&b).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NpyFormat);
        assert!(e.to_string().contains("needs 12"), "{e}");
    }

    #[test]
    fn huge_header_len_is_a_limit() {
        let mut b = npy(
            2,
            "{'descr': '<i2', 'fortran_order': False, 'shape': (), }",
            &[0; 2],
        );
        b[8..12].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert_eq!(parse(&b).unwrap_err().kind(), ErrorKind::LimitExceeded);
    }

    #[test]
    fn bad_headers() {
        for dict in [
            "{'descr': '<i2', 'fortran_order': False}",
            "{'descr': '<i2', 'fortran_order': False, 'shape': (1,), 'x': 1}",
            "{'descr': '<i2', 'fortran_order': 0, 'shape': (1,)}",
            "{'descr': '<i2', 'fortran_order': False, 'shape': [1]}",
            "{'descr': '<i2', 'fortran_order': False, 'shape': (-1,)}",
            "{'descr': '<i2', 'fortran_order': False, 'shape': (2**62,)}",
            "{'descr': '<i2', 'fortran_order': False, 'shape': (4611686018427387904, 4)}",
            "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4)}",
            "['descr']",
        ] {
            let b = npy(1, dict, &[0; 64]);
            assert_eq!(
                parse(&b).unwrap_err().kind(),
                ErrorKind::NpyFormat,
                "{dict}"
            );
        }
        let b = npy(
            1,
            "{'descr': '|O', 'fortran_order': False, 'shape': (1,)}",
            &[0; 8],
        );
        let e = parse(&b).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NpyFormat);
        assert!(e.message().contains("object dtype"));
    }
}
