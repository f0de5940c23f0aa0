//! Rows of whole arrays as samples: one large `.npy` file (`X.npy`, `y.npy`) or a stored
//! member of an `.npz` archive, whose first axis is the samples ([`NpyRows`]). This is the
//! layout `numpy.load(path, mmap_mode="r")[idx]` reads; packread reads the rows of a batch
//! in parallel straight into the output, from any [`Source`].

use std::sync::Arc;

use super::{read_start, Limits, NpyHeader, NPY_FAULTS};
use crate::batch::pool::{self, Work};
use crate::batch::{ArraySpec, Dest, Extent, Index, Plan, Rows, Tag};
use crate::codec::{Faults, Pipeline};
use crate::error::{Error, ErrorKind, Result};
use crate::formats::zip::ZipIndex;
use crate::source::{FileList, Files, Source};

/// One array whose rows are samples: where its data starts in which file, and its header.
#[derive(Debug, Clone)]
struct RowArray {
    /// Which file of the index (a position in its [`FileList`]).
    file: u32,
    /// Offset of the array's first data byte in that file.
    data_start: u64,
    /// Bytes of one row.
    row_bytes: usize,
    /// Where messages say the array is (`X.npy`, `train.npz:images.npy`).
    location: String,
}

/// Arrays of equal length read row by row: sample `i` holds row `i` of each. Rows are read
/// straight from the source into the output (no staging, no decode); rows adjacent in the
/// file and in the batch are read as one extent.
pub struct NpyRows {
    files: FileList,
    arrays: Vec<RowArray>,
    specs: Vec<ArraySpec>,
    len: usize,
    location: String,
    threads: Option<usize>,
}

/// The array's rows, checked: C order (or one dimension), at least one dimension, data
/// within the `available` bytes from `data_start`.
fn row_array(
    name: &str,
    location: String,
    header: &NpyHeader,
    file: u32,
    data_start: u64,
    available: u64,
) -> Result<(RowArray, ArraySpec, usize)> {
    let Some((&len, row_shape)) = header.shape.split_first() else {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            location,
            "a 0-d array has no rows to read as samples",
        ));
    };
    if header.fortran_order && header.shape.iter().filter(|&&d| d != 1).count() > 1 {
        return Err(Error::new(
            ErrorKind::Unsupported,
            location,
            format!(
                "the array {:?} is stored in Fortran order, so a row's elements are not \
                 together in the file; save it with numpy.ascontiguousarray first",
                header.shape
            ),
        ));
    }
    let end = data_start.checked_add(header.data_len as u64);
    if end.is_none_or(|e| e > available) {
        return Err(Error::new(
            ErrorKind::NpyFormat,
            location,
            format!(
                "truncated: the header says {} bytes of data from offset {data_start}, but \
                 only {} are there",
                header.data_len,
                available.saturating_sub(data_start)
            ),
        ));
    }
    let row_bytes = header.data_len.checked_div(len).unwrap_or(0);
    let spec = ArraySpec::fixed(name, header.dtype.clone(), row_shape.to_vec());
    Ok((
        RowArray {
            file,
            data_start,
            row_bytes,
            location,
        },
        spec,
        len,
    ))
}

impl NpyRows {
    /// The rows of `.npy` files, one array each, named by the first of each pair; every
    /// header read (in parallel) and checked here, and all arrays of one length.
    pub fn open(
        named: Vec<(String, Arc<dyn Source>)>,
        limits: &Limits,
        threads: Option<usize>,
    ) -> Result<NpyRows> {
        let headers = pool::install_with(threads, || {
            pool::try_map(&named, |_, (_, s)| {
                let header = read_start(&**s, limits).map(|(h, _)| h);
                s.opened();
                header
            })
        })?;
        let mut parts = Vec::with_capacity(named.len());
        for (k, ((name, source), header)) in named.iter().zip(&headers).enumerate() {
            parts.push(row_array(
                name,
                source.name().to_string(),
                header,
                k as u32,
                header.data_offset as u64,
                source.len(),
            )?);
        }
        let sources = named.into_iter().map(|(_, s)| s).collect();
        NpyRows::new(FileList::new(sources), parts, threads)
    }

    /// The rows of the `.npy` members `keys` of the NPZ archive `zip` (all of its `.npy`
    /// members when `None`; a key is a member's name without `.npy`). Members must be stored
    /// (`numpy.savez`): a compressed member's rows cannot be reached without inflating all
    /// of it. A row read this way is not checked against the member's CRC-32 (which covers
    /// the whole member), as a row of an `.npy` file has no checksum at all.
    pub fn open_npz(
        zip: ZipIndex,
        keys: Option<Vec<String>>,
        threads: Option<usize>,
    ) -> Result<NpyRows> {
        let archive = zip.location().to_string();
        let members: Vec<(String, usize)> = match keys {
            Some(keys) => keys
                .into_iter()
                .map(|k| {
                    let member = format!("{k}.npy");
                    let i = zip.position(&member).or_else(|_| zip.position(&k))?;
                    Ok((k, i))
                })
                .collect::<Result<_>>()?,
            None => zip
                .members()
                .iter()
                .enumerate()
                .filter_map(|(i, m)| m.name().strip_suffix(".npy").map(|k| (k.to_string(), i)))
                .collect(),
        };
        if members.is_empty() {
            return Err(Error::new(
                ErrorKind::Key,
                archive,
                "the archive holds no .npy members",
            ));
        }
        let mut parts = Vec::with_capacity(members.len());
        for (key, i) in &members {
            let location = zip.member_location(*i);
            let data = zip.member_data(*i)?;
            let layout = match zip.npy_layout(*i)? {
                Some(l) => l,
                None if !data.is_stored() => {
                    return Err(Error::new(
                        ErrorKind::Unsupported,
                        location,
                        "the member is compressed (numpy.savez_compressed): its rows cannot \
                         be read without inflating all of it; load it whole with load_npz, \
                         or save it with numpy.savez",
                    ))
                }
                None => {
                    return Err(Error::new(
                        ErrorKind::NpyFormat,
                        location,
                        "the member is not an NPY array",
                    ))
                }
            };
            let header = &layout.header;
            // The member's bytes end where the archive says; the array must fit in them.
            let member_end = data.data_start.saturating_add(data.size);
            parts.push(row_array(
                key,
                location,
                header,
                0,
                data.data_start + header.data_offset as u64,
                member_end,
            )?);
        }
        let source = zip.source().clone();
        NpyRows::new(FileList::new(vec![source]), parts, threads)
    }

    fn new(
        files: FileList,
        parts: Vec<(RowArray, ArraySpec, usize)>,
        threads: Option<usize>,
    ) -> Result<NpyRows> {
        let Some((first, _, len)) = parts.first() else {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                "no arrays to read rows of",
            ));
        };
        let len = *len;
        for (a, spec, n) in &parts {
            if *n != len {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    a.location.clone(),
                    format!(
                        "{:?} has {n} rows, but {} has {len}: arrays read together have one \
                         row per sample",
                        spec.name, first.location
                    ),
                ));
            }
        }
        let location = match parts.as_slice() {
            [one] => one.0.location.clone(),
            [first, rest @ ..] => format!("{} (and {} more arrays)", first.0.location, rest.len()),
            [] => String::new(),
        };
        let (arrays, specs) = parts.into_iter().map(|(a, s, _)| (a, s)).unzip();
        Ok(NpyRows {
            files,
            arrays,
            specs,
            len,
            location,
            threads,
        })
    }
}

impl Index for NpyRows {
    fn len(&self) -> usize {
        self.len
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.specs
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn faults(&self) -> Faults {
        NPY_FAULTS
    }

    fn files(&self) -> &dyn Files {
        &self.files
    }

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        let per_row: u64 = arrays
            .iter()
            .map(|&a| self.arrays[a].row_bytes as u64)
            .sum();
        Work::new(rows, (rows as u64).saturating_mul(per_row))
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    /// One extent per run of rows that follow each other both in the file and in the batch
    /// (a sequential batch is one read), each straight into its place in the output.
    fn plan(&self, rows: &Rows, arrays: &[usize], plan: &mut Plan) -> Result<()> {
        let rows = rows.as_slice();
        for (out, &a) in arrays.iter().enumerate() {
            let array = &self.arrays[a];
            let n = array.row_bytes;
            if n == 0 {
                continue;
            }
            let mut k = 0;
            while k < rows.len() {
                let first = rows[k];
                let mut end = k + 1;
                while end < rows.len() && rows[end] == rows[end - 1] + 1 {
                    end += 1;
                }
                let len = (end - k) * n;
                plan.push(
                    Extent {
                        file: array.file,
                        offset: array.data_start + (first as u64) * (n as u64),
                        stored_len: len,
                        pipeline: Pipeline::identity(),
                        decoded_len: len,
                        out: out as u32,
                        dest: Dest::At(k * n),
                    },
                    Tag::new(a as u32, first as u64),
                );
                k = end;
            }
        }
        Ok(())
    }

    fn locate(&self, tag: Tag, error: Error) -> Error {
        let array = &self.arrays[tag.array as usize];
        let located = error.at(array.location.clone());
        let message = format!("{} (row {})", located.message(), tag.at);
        Error::new(located.kind(), located.location(), message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::read_batch;
    use crate::source::Memory;

    fn npy(shape: &[usize], data: &[u8], fortran: bool) -> Vec<u8> {
        let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
        let shape = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        let mut header = format!(
            "{{'descr': '|u1', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    fn source(bytes: Vec<u8>) -> Arc<dyn Source> {
        Arc::new(Memory::from_vec("x.npy", bytes))
    }

    #[test]
    fn rows_of_two_arrays_read_together() {
        let x: Vec<u8> = (0..30).collect();
        let y: Vec<u8> = (100..110).collect();
        let rows = NpyRows::open(
            vec![
                ("x".into(), source(npy(&[10, 3], &x, false))),
                ("y".into(), source(npy(&[10], &y, false))),
            ],
            &Limits::default(),
            None,
        )
        .unwrap();
        assert_eq!(rows.len(), 10);
        assert_eq!(rows.arrays()[0].shape, vec![3]);
        assert_eq!(rows.arrays()[1].shape, Vec::<usize>::new());
        let picked = Rows::resolve(&[7, 8, 2, -1], 10, "x").unwrap();
        let mut plan = Plan::default();
        rows.plan(&picked, &[0, 1], &mut plan).unwrap();
        // 7, 8 follow each other: one extent, then 2 and 9 (= -1) alone; for each array.
        assert_eq!(plan.extents.len(), 6);
        let mut xs = vec![0u8; 12];
        let mut ys = vec![0u8; 4];
        read_batch(&rows, &picked, &[0, 1], &mut [&mut xs, &mut ys]).unwrap();
        assert_eq!(xs, [21, 22, 23, 24, 25, 26, 6, 7, 8, 27, 28, 29]);
        assert_eq!(ys, [107, 108, 102, 109]);
    }

    #[test]
    fn refuses_what_has_no_rows() {
        let unequal = NpyRows::open(
            vec![
                ("x".into(), source(npy(&[10], &[0; 10], false))),
                ("y".into(), source(npy(&[9], &[0; 9], false))),
            ],
            &Limits::default(),
            None,
        );
        assert_eq!(unequal.err().unwrap().kind(), ErrorKind::Inconsistent);
        let fortran = NpyRows::open(
            vec![("x".into(), source(npy(&[2, 3], &[0; 6], true)))],
            &Limits::default(),
            None,
        );
        assert_eq!(fortran.err().unwrap().kind(), ErrorKind::Unsupported);
        let scalar = NpyRows::open(
            vec![("x".into(), source(npy(&[], &[0; 1], false)))],
            &Limits::default(),
            None,
        );
        assert_eq!(scalar.err().unwrap().kind(), ErrorKind::InvalidArgument);
        let mut short = npy(&[10, 3], &[0; 30], false);
        short.truncate(short.len() - 1);
        let truncated = NpyRows::open(vec![("x".into(), source(short))], &Limits::default(), None);
        assert!(truncated.is_err());
    }
}
