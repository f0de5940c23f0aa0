//! The executor: runs a batch's extents on the pool, each reading its bytes with `pread`,
//! decoding them and writing its own disjoint part of the output buffers.

use std::cell::RefCell;

use rayon::prelude::*;

use crate::codec::{Faults, Pipeline};
use crate::error::{Error, ErrorKind};
use crate::source::Source;

/// Raw reads larger than this are split so that several threads share one big sample.
const SPLIT_BYTES: usize = 4 << 20;

/// Where an extent's decoded bytes go in its output buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// All decoded bytes, contiguously, from this offset.
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
    /// Which output buffer (one per array a batch returns).
    pub out: u32,
    pub dest: Dest,
}

impl Extent {
    /// Unencoded bytes copied as they are into output 0.
    pub fn raw(file: u32, offset: u64, len: usize, dest: Dest) -> Extent {
        Extent {
            file,
            offset,
            stored_len: len,
            pipeline: Pipeline::identity(),
            decoded_len: len,
            out: 0,
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

/// An output buffer shared by the workers. Sound because [`execute`] checks up front that
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
        if len == 0 {
            return &mut [];
        }
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

/// Checks that every write lies inside its output and that no two overlap.
fn check_writes(extents: &[Extent], outs: &[Output]) -> Result<(), Failure> {
    let mut writes: Vec<(u32, usize, usize, usize)> = Vec::with_capacity(extents.len());
    for (i, e) in extents.iter().enumerate() {
        let Some(out) = outs.get(e.out as usize) else {
            return Err(internal(i, format!("output {} does not exist", e.out)));
        };
        for (dst, n) in e.writes() {
            if dst.checked_add(n).is_none_or(|end| end > out.len) {
                return Err(internal(
                    i,
                    format!("write {dst}+{n} outside a {}-byte output", out.len),
                ));
            }
            if n > 0 {
                writes.push((e.out, dst, n, i));
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
        if w[0].0 == w[1].0 && w[0].1 + w[0].2 > w[1].1 {
            return Err(internal(
                w[1].3,
                "two extents write the same output bytes".into(),
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
/// filling `outs`. Bytes that fail to decode are reported with the format's own `faults`
/// (malformed NPY, bad ZIP, bad HDF5 chunk); errors name the file they came from.
pub fn execute(
    source: &dyn Source,
    extents: &[Extent],
    outs: &mut [&mut [u8]],
    faults: Faults,
) -> Result<(), Failure> {
    let outs: Vec<Output> = outs
        .iter_mut()
        .map(|o| Output {
            ptr: o.as_mut_ptr(),
            len: o.len(),
        })
        .collect();
    check_writes(extents, &outs)?;
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
    tasks.par_iter().try_for_each(|t| {
        let e = &extents[t.extent];
        run(source, e, t.part, outs[e.out as usize], faults).map_err(|error| {
            let error = if error.location().is_empty() {
                let at = source.name(e.file);
                error.at(at)
            } else {
                error
            };
            Failure {
                extent: t.extent,
                error,
            }
        })
    })
}

/// [`execute`] with a single output buffer.
pub fn execute_into(
    source: &dyn Source,
    extents: &[Extent],
    out: &mut [u8],
    faults: Faults,
) -> Result<(), Failure> {
    execute(source, extents, &mut [out], faults)
}

fn run(
    source: &dyn Source,
    e: &Extent,
    part: Option<(usize, usize)>,
    out: Output,
    faults: Faults,
) -> Result<(), Error> {
    let in_place = e.pipeline.only_checks() && e.stored_len == e.decoded_len;
    match (&e.dest, part) {
        (Dest::At(dst), Some((start, len))) => {
            // SAFETY: check_writes proved the extent's range in bounds and exclusive; the
            // parts of one extent are disjoint.
            let target = unsafe { out.slice(dst + start, len) };
            source.read_at(e.file, e.offset + start as u64, target)
        }
        (Dest::At(dst), None) if in_place => {
            // Stored bytes are the sample: read them straight into the output, then check.
            let target = unsafe { out.slice(*dst, e.decoded_len) };
            source.read_at(e.file, e.offset, target)?;
            e.pipeline.verify(target, faults)
        }
        (dest, _) => SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let scratch = &mut *guard;
            let stored = grow(&mut scratch.stored, e.stored_len);
            source.read_at(e.file, e.offset, stored)?;
            match dest {
                Dest::At(dst) => {
                    let target = unsafe { out.slice(*dst, e.decoded_len) };
                    e.pipeline.decode(stored, target, &mut scratch.tmp, faults)
                }
                Dest::Scatter(pieces) => {
                    let decoded: &[u8] = if in_place {
                        e.pipeline.verify(stored, faults)?;
                        stored
                    } else {
                        let decoded = grow(&mut scratch.decoded, e.decoded_len);
                        e.pipeline
                            .decode(stored, decoded, &mut scratch.tmp, faults)?;
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

/// Copies pieces of already-decoded buffers (cached chunks) into `out` in parallel, after the
/// same bounds and overlap checks [`execute`] makes.
pub fn scatter(from: &[(&[u8], &[Piece])], out: &mut [u8]) -> Result<(), Error> {
    let len = out.len();
    let mut writes: Vec<(usize, usize)> = Vec::new();
    for (bytes, pieces) in from {
        for p in pieces.iter() {
            let src_ok = p.src.checked_add(p.len).is_some_and(|e| e <= bytes.len());
            let dst_ok = p.dst.checked_add(p.len).is_some_and(|e| e <= len);
            if !src_ok || !dst_ok {
                return Err(internal(0, format!("piece {p:?} out of bounds")).error);
            }
            if p.len > 0 {
                writes.push((p.dst, p.len));
            }
        }
    }
    writes.sort_unstable();
    if writes.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0) {
        return Err(internal(0, "two pieces write the same output bytes".into()).error);
    }
    let output = Output {
        ptr: out.as_mut_ptr(),
        len,
    };
    from.par_iter().for_each(|(bytes, pieces)| {
        for p in pieces.iter() {
            // SAFETY: checked above: in bounds, and no two pieces overlap.
            let target = unsafe { output.slice(p.dst, p.len) };
            target.copy_from_slice(&bytes[p.src..p.src + p.len]);
        }
    });
    Ok(())
}
