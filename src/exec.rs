//! The executor: runs a batch's extents on the pool, each reading its bytes with `pread`,
//! decoding them and writing its own disjoint part of one output buffer.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::codec::Pipeline;
use crate::error::{Error, ErrorKind};
use crate::source::Source;

/// Raw reads larger than this are split so that several threads share one big sample.
const SPLIT_BYTES: usize = 4 << 20;

/// Where an extent's decoded bytes go in the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// All decoded bytes, contiguously, from this output offset.
    At(usize),
    /// Parts of the decoded bytes, each copied to its own place (a chunk holding several
    /// samples, or a sample split across chunks).
    Scatter(Vec<Piece>),
}

/// A run of `len` decoded bytes from `src` copied to output offset `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub src: usize,
    pub dst: usize,
    pub len: usize,
}

/// One unit of work: a byte range of a file, how it is encoded, and where it lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extent {
    /// Which file of the [`Source`].
    pub file: u32,
    pub offset: u64,
    pub stored_len: usize,
    pub pipeline: Pipeline,
    pub decoded_len: usize,
    pub dest: Dest,
}

impl Extent {
    /// Unencoded bytes copied as they are.
    pub fn raw(file: u32, offset: u64, len: usize, dest: Dest) -> Extent {
        Extent {
            file,
            offset,
            stored_len: len,
            pipeline: Pipeline::identity(),
            decoded_len: len,
            dest,
        }
    }

    /// The output ranges this extent writes.
    fn writes(&self) -> Vec<(usize, usize)> {
        match &self.dest {
            Dest::At(dst) => vec![(*dst, self.decoded_len)],
            Dest::Scatter(pieces) => pieces.iter().map(|p| (p.dst, p.len)).collect(),
        }
    }
}

/// A failed batch: which extent, and why.
#[derive(Debug)]
pub struct Failure {
    pub extent: usize,
    pub error: Error,
}

/// The output buffer, shared by the workers. Sound because [`execute`] checks up front that
/// every write is in bounds and that no two writes overlap.
#[derive(Clone, Copy)]
struct Output {
    ptr: *mut u8,
    len: usize,
}

unsafe impl Send for Output {}
unsafe impl Sync for Output {}

impl Output {
    /// # Safety
    /// `dst..dst + len` is in bounds and written by no one else during the batch.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, dst: usize, len: usize) -> &mut [u8] {
        debug_assert!(dst + len <= self.len);
        std::slice::from_raw_parts_mut(self.ptr.add(dst), len)
    }
}

/// Per-thread scratch: stored bytes, decoded bytes, and the pipeline's intermediates.
#[derive(Default)]
struct Scratch {
    stored: Vec<u8>,
    decoded: Vec<u8>,
    tmp: [Vec<u8>; 2],
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

fn grow(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    if buf.len() < len {
        buf.resize(len, 0);
    }
    &mut buf[..len]
}

/// Checks that every write lies inside `len` bytes and that no two overlap.
fn check_writes(extents: &[Extent], len: usize) -> Result<(), Failure> {
    let mut writes: Vec<(usize, usize, usize)> = Vec::with_capacity(extents.len());
    for (i, e) in extents.iter().enumerate() {
        for (dst, n) in e.writes() {
            if dst.checked_add(n).is_none_or(|end| end > len) {
                return Err(internal(
                    i,
                    format!("write {dst}+{n} outside a {len}-byte output"),
                ));
            }
            if n > 0 {
                writes.push((dst, n, i));
            }
        }
        if let Dest::Scatter(pieces) = &e.dest {
            if let Some(p) = pieces.iter().find(|p| {
                p.src
                    .checked_add(p.len)
                    .is_none_or(|end| end > e.decoded_len)
            }) {
                return Err(internal(
                    i,
                    format!("piece {p:?} outside {} decoded bytes", e.decoded_len),
                ));
            }
        }
    }
    writes.sort_unstable();
    for w in writes.windows(2) {
        if w[0].0 + w[0].1 > w[1].0 {
            return Err(internal(
                w[1].2,
                "two extents write the same output bytes".to_string(),
            ));
        }
    }
    Ok(())
}

fn internal(extent: usize, msg: String) -> Failure {
    Failure {
        extent,
        error: Error::new(
            ErrorKind::InvalidArgument,
            "",
            format!("internal planning error: {msg}"),
        ),
    }
}

/// A piece of work for one thread: a whole extent, or a slice of a large raw one.
struct Task {
    extent: usize,
    /// For a split raw extent: (offset into the extent, length).
    part: Option<(usize, usize)>,
}

/// Runs `extents` in parallel on the current rayon pool (see [`crate::pool::install`]),
/// filling `out`. Bytes that fail to decode are reported as `corrupt` (the format's own kind
/// of error: malformed NPY, bad ZIP, bad HDF5 chunk).
pub fn execute(
    source: &dyn Source,
    extents: &[Extent],
    out: &mut [u8],
    corrupt: ErrorKind,
) -> Result<(), Failure> {
    check_writes(extents, out.len())?;
    let mut tasks = Vec::with_capacity(extents.len());
    for (i, e) in extents.iter().enumerate() {
        let raw = e.pipeline.is_identity()
            && matches!(e.dest, Dest::At(_))
            && e.stored_len == e.decoded_len;
        if raw && e.stored_len > SPLIT_BYTES {
            let mut start = 0;
            while start < e.stored_len {
                let len = SPLIT_BYTES.min(e.stored_len - start);
                tasks.push(Task {
                    extent: i,
                    part: Some((start, len)),
                });
                start += len;
            }
        } else {
            tasks.push(Task {
                extent: i,
                part: None,
            });
        }
    }
    let output = Output {
        ptr: out.as_mut_ptr(),
        len: out.len(),
    };
    tasks.par_iter().try_for_each(|t| {
        run(source, &extents[t.extent], t.part, output, corrupt).map_err(|error| Failure {
            extent: t.extent,
            error,
        })
    })
}

fn run(
    source: &dyn Source,
    e: &Extent,
    part: Option<(usize, usize)>,
    out: Output,
    corrupt: ErrorKind,
) -> Result<(), Error> {
    let decode_err = |msg: String| {
        Error::new(
            corrupt,
            source.name(e.file),
            format!(
                "cannot decode {} bytes at offset {}: {msg}",
                e.stored_len, e.offset
            ),
        )
    };
    match (&e.dest, part) {
        (Dest::At(dst), Some((start, len))) => {
            // SAFETY: check_writes proved the extent's range in bounds and exclusive; the
            // parts of one extent are disjoint.
            let target = unsafe { out.slice(dst + start, len) };
            source.read_at(e.file, e.offset + start as u64, target)
        }
        (Dest::At(dst), None) if e.pipeline.is_identity() && e.stored_len == e.decoded_len => {
            let target = unsafe { out.slice(*dst, e.decoded_len) };
            source.read_at(e.file, e.offset, target)
        }
        (dest, _) => SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let scratch = &mut *guard;
            let stored = grow(&mut scratch.stored, e.stored_len);
            source.read_at(e.file, e.offset, stored)?;
            match dest {
                Dest::At(dst) => {
                    let target = unsafe { out.slice(*dst, e.decoded_len) };
                    e.pipeline
                        .decode(stored, target, &mut scratch.tmp)
                        .map_err(decode_err)
                }
                Dest::Scatter(pieces) => {
                    let decoded: &[u8] = if e.pipeline.is_identity() {
                        stored
                    } else {
                        let decoded = grow(&mut scratch.decoded, e.decoded_len);
                        e.pipeline
                            .decode(stored, decoded, &mut scratch.tmp)
                            .map_err(decode_err)?;
                        decoded
                    };
                    for p in pieces {
                        let target = unsafe { out.slice(p.dst, p.len) };
                        target.copy_from_slice(&decoded[p.src..p.src + p.len]);
                    }
                    Ok(())
                }
            }
        }),
    }
}
