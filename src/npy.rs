//! The NPY format: header parsing (versions 1.0, 2.0, 3.0) and the indexer that tells the
//! engine where each sample's bytes are. Follows numpy's `numpy.lib.format` rules, but never
//! evaluates the header and checks every size before anything is allocated.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::codec::{Faults, Pipeline};
use crate::dtype::{DType, DescrError};
use crate::error::{Error, ErrorKind, Result};
use crate::exec::{execute_into, Dest, Extent};
use crate::literal::{self, Literal};
use crate::plan::{check_out_len, resolve_indices};
use crate::pool;
use crate::source::{FileStamp, PathSet};

pub const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy's own default for `max_header_size`.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 10_000;
const NPY_FAULTS: Faults = Faults::both(ErrorKind::NpyFormat);
/// How much of a file is read to find its header in one go (numpy pads headers to 64 bytes).
const HEADER_PROBE: usize = 4096;

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
    pub version: (u8, u8),
    pub dtype: DType,
    pub fortran_order: bool,
    pub shape: Vec<usize>,
    /// Offset of the first data byte from the start of the NPY stream.
    pub data_offset: usize,
    /// Bytes of array data (`prod(shape) * itemsize`), checked not to overflow.
    pub data_len: usize,
}

impl NpyHeader {
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

/// Reads and parses the header of an NPY file; also returns the file's stamp.
pub fn read_file_header(path: &Path, limits: &Limits) -> Result<(NpyHeader, FileStamp)> {
    let location = path.display().to_string();
    let file = File::open(path).map_err(|e| Error::io(&location, e))?;
    let stamp = FileStamp::of(&file.metadata().map_err(|e| Error::io(&location, e))?);
    let file_len = stamp.len;
    let available = usize::try_from(file_len).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; HEADER_PROBE.min(available)];
    file.read_exact_at(&mut buf, 0)
        .map_err(|e| Error::io(&location, e))?;
    let end = header_end(&buf, available, &location, limits)?;
    if end > buf.len() {
        // `end` is bounded by both the header limit and the file length.
        buf.resize(end, 0);
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| Error::io(&location, e))?;
    }
    Ok((parse_header(&buf, available, &location, limits)?, stamp))
}

/// The pipeline that turns stored sample bytes into C order.
fn layout_pipeline(header: &NpyHeader) -> Pipeline {
    if header.needs_transpose() {
        Pipeline::fortran_to_c(&header.shape, header.dtype.itemsize())
    } else {
        Pipeline::identity()
    }
}

/// Reads the data of one NPY file, stored layout kept, into `out` (`data_len` bytes).
pub fn read_file_data(
    path: &Path,
    header: &NpyHeader,
    stamp: FileStamp,
    out: &mut [u8],
) -> Result<()> {
    let files = PathSet::new(vec![path.to_path_buf()], vec![stamp]);
    let extent = Extent::raw(0, header.data_offset as u64, header.data_len, Dest::At(0));
    pool::install(|| execute_into(&files, std::slice::from_ref(&extent), out, NPY_FAULTS))
        .map_err(|f| f.error)
}

/// Many NPY files, one sample each, all of the same dtype and shape.
pub struct NpySet {
    files: PathSet,
    header: NpyHeader,
    data_offsets: Vec<usize>,
    pipelines: Vec<Pipeline>,
}

impl NpySet {
    /// Reads every header (in parallel) and checks that all samples agree.
    pub fn open(paths: Vec<PathBuf>, limits: &Limits) -> Result<NpySet> {
        if paths.is_empty() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "NpyReader needs at least one file",
            ));
        }
        let headers: Vec<Result<(NpyHeader, FileStamp)>> = pool::install(|| {
            paths
                .par_iter()
                .map(|p| read_file_header(p, limits))
                .collect()
        });
        let mut parsed = Vec::with_capacity(paths.len());
        for h in headers {
            parsed.push(h?);
        }
        let first = parsed[0].0.clone();
        for (path, (header, _)) in paths.iter().zip(&parsed) {
            if !header.same_array_type(&first) {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    path.display().to_string(),
                    format!(
                        "sample has dtype {} and shape {:?}, but {} has dtype {} and shape {:?}",
                        header.dtype.descr(),
                        header.shape,
                        paths[0].display(),
                        first.dtype.descr(),
                        first.shape
                    ),
                ));
            }
        }
        let data_offsets = parsed.iter().map(|(h, _)| h.data_offset).collect();
        let pipelines = parsed.iter().map(|(h, _)| layout_pipeline(h)).collect();
        let stamps = parsed.iter().map(|(_, stamp)| *stamp).collect();
        Ok(NpySet {
            files: PathSet::new(paths, stamps),
            header: first,
            data_offsets,
            pipelines,
        })
    }

    pub fn len(&self) -> usize {
        self.data_offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data_offsets.is_empty()
    }

    pub fn dtype(&self) -> &DType {
        &self.header.dtype
    }

    /// Shape of one sample.
    pub fn sample_shape(&self) -> &[usize] {
        &self.header.shape
    }

    pub fn sample_bytes(&self) -> usize {
        self.header.data_len
    }

    pub fn paths(&self) -> &[PathBuf] {
        self.files.paths()
    }

    /// Reads the samples `idx` (negative counts from the end) into `out`, one after another,
    /// each in C order. `out` must be exactly `idx.len() * sample_bytes()` long.
    pub fn read_batch(&self, idx: &[i64], out: &mut [u8]) -> Result<()> {
        let rows = resolve_indices(idx, self.len())?;
        let n = self.sample_bytes();
        check_out_len(out.len(), rows.len(), n)?;
        let extents: Vec<Extent> = rows
            .iter()
            .enumerate()
            .map(|(k, &i)| Extent {
                file: i as u32,
                offset: self.data_offsets[i] as u64,
                stored_len: n,
                pipeline: self.pipelines[i].clone(),
                decoded_len: n,
                out: 0,
                dest: Dest::At(k * n),
            })
            .collect();
        pool::install(|| execute_into(&self.files, &extents, out, NPY_FAULTS)).map_err(|f| f.error)
    }
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
