//! The executor: runs a batch's extents on the pool, each reading its bytes with `pread`,
//! decoding them and writing its own disjoint part of the output buffers.

use std::cell::RefCell;

use rayon::prelude::*;

use super::source::Source;
pub use super::tiling::Piece;
use crate::codec::{inflate_stream, Faults, Pipeline};
use crate::error::{Error, ErrorKind};

/// Raw reads larger than this are split so that several threads share one big sample.
const SPLIT_BYTES: usize = 4 << 20;
/// Deflated extents whose stored or inflated bytes reach this are inflated as a stream
/// ([`crate::codec::inflate_stream`]): straight into the output, reading a piece at a time,
/// instead of holding the whole stream and the whole inflated member in scratch buffers
/// (which a thread would also keep at that size afterwards).
const STREAM_BYTES: usize = 16 << 20;

/// Where an extent's decoded bytes go in its output buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// All decoded bytes, contiguously, from this offset.
    At(usize),
    /// Parts of the decoded bytes, each copied to its own place (a chunk holding several
    /// samples, or a sample split across chunks).
    Scatter(Vec<Piece>),
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

    /// Whether the stored bytes are the decoded bytes, unchecked.
    fn is_raw(&self) -> bool {
        self.pipeline.is_identity() && self.stored_len == self.decoded_len
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

/// A failed batch: which extent, and why.
#[derive(Debug)]
pub struct Failure {
    pub extent: usize,
    pub error: Error,
}

/// The bytes one extent may write: its whole destination, or one slice per scatter piece.
/// Only [`carve`] makes these, after proving every write in bounds and no two overlapping, so
/// holding one is the proof that no other task writes the same bytes.
enum Target<'o> {
    At(&'o mut [u8]),
    Scatter(Vec<&'o mut [u8]>),
}

/// One planned write: output, offset, length, and which extent (and piece) it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Write {
    out: usize,
    dst: usize,
    len: usize,
    extent: usize,
    piece: usize,
}

/// Splits `outs` into the disjoint slices `writes` ask for, or says which write is out of
/// bounds or overlaps another. Safe code: each slice is cut off the rest of its output with
/// `split_at_mut`, so the borrow checker itself guarantees that the slices are disjoint; an
/// overlap shows as a write starting before the previous cut.
fn split_disjoint<'o>(
    mut writes: Vec<Write>,
    outs: &'o mut [&mut [u8]],
) -> Result<Vec<(Write, &'o mut [u8])>, Failure> {
    writes.sort_unstable();
    // Per output: where its untaken rest starts, and the rest.
    let mut rests: Vec<(usize, &'o mut [u8])> = outs.iter_mut().map(|o| (0, &mut **o)).collect();
    let mut carved = Vec::with_capacity(writes.len());
    for w in writes {
        let Some((cursor, rest)) = rests.get_mut(w.out) else {
            return Err(internal(
                w.extent,
                format!("output {} does not exist", w.out),
            ));
        };
        let total = *cursor + rest.len();
        if w.dst.checked_add(w.len).is_none_or(|end| end > total) {
            return Err(internal(
                w.extent,
                format!("write {}+{} outside a {total}-byte output", w.dst, w.len),
            ));
        }
        if w.len == 0 {
            carved.push((w, <&mut [u8]>::default()));
            continue;
        }
        if w.dst < *cursor {
            return Err(internal(
                w.extent,
                "two extents write the same output bytes".into(),
            ));
        }
        let (_, tail) = std::mem::take(rest).split_at_mut(w.dst - *cursor);
        let (mine, tail) = tail.split_at_mut(w.len);
        *rest = tail;
        *cursor = w.dst + w.len;
        carved.push((w, mine));
    }
    Ok(carved)
}

/// Proves the extents' writes in bounds and disjoint, and hands out the slices each may
/// write: the only way the executor reaches the output bytes.
fn carve<'o>(extents: &[Extent], outs: &'o mut [&mut [u8]]) -> Result<Vec<Target<'o>>, Failure> {
    let mut writes = Vec::with_capacity(extents.len());
    for (i, e) in extents.iter().enumerate() {
        let out = e.out as usize;
        match &e.dest {
            Dest::At(dst) => writes.push(Write {
                out,
                dst: *dst,
                len: e.decoded_len,
                extent: i,
                piece: 0,
            }),
            Dest::Scatter(pieces) => {
                for (k, p) in pieces.iter().enumerate() {
                    if p.src
                        .checked_add(p.len)
                        .is_none_or(|end| end > e.decoded_len)
                    {
                        return Err(internal(
                            i,
                            format!("piece {p:?} outside {} decoded bytes", e.decoded_len),
                        ));
                    }
                    writes.push(Write {
                        out,
                        dst: p.dst,
                        len: p.len,
                        extent: i,
                        piece: k,
                    });
                }
            }
        }
    }
    let mut targets: Vec<Target<'o>> = extents
        .iter()
        .map(|e| match &e.dest {
            Dest::At(_) => Target::At(Default::default()),
            Dest::Scatter(pieces) => {
                Target::Scatter(pieces.iter().map(|_| Default::default()).collect())
            }
        })
        .collect();
    for (w, slice) in split_disjoint(writes, outs)? {
        match &mut targets[w.extent] {
            Target::At(t) => *t = slice,
            Target::Scatter(ts) => ts[w.piece] = slice,
        }
    }
    Ok(targets)
}

/// A broken promise of a planner: an [`ErrorKind::Internal`] error (a bug, not bad input).
fn internal(extent: usize, msg: String) -> Failure {
    Failure {
        extent,
        error: Error::new(
            ErrorKind::Internal,
            "",
            format!("internal planning error: {msg}"),
        ),
    }
}

/// A piece of work for one thread: a whole extent, or a part of a large raw one (`start`:
/// the part's offset into the extent).
struct Task<'o> {
    extent: usize,
    start: usize,
    target: Target<'o>,
}

/// Runs `extents` on the current packread pool (see [`crate::batch::pool::install`]), or on this
/// thread when the batch runs inline ([`crate::batch::pool::is_inline`]), filling `outs`. Bytes that
/// fail to decode are reported with the format's own `faults` (malformed NPY, bad ZIP, bad
/// HDF5 chunk); errors name the file they came from.
pub fn execute(
    source: &dyn Source,
    extents: &[Extent],
    outs: &mut [&mut [u8]],
    faults: Faults,
) -> Result<(), Failure> {
    let targets = carve(extents, outs)?;
    let mut tasks = Vec::with_capacity(extents.len());
    for (i, (e, target)) in extents.iter().zip(targets).enumerate() {
        match target {
            Target::At(out) if e.is_raw() && out.len() > SPLIT_BYTES => {
                for (k, part) in out.chunks_mut(SPLIT_BYTES).enumerate() {
                    tasks.push(Task {
                        extent: i,
                        start: k * SPLIT_BYTES,
                        target: Target::At(part),
                    });
                }
            }
            target => tasks.push(Task {
                extent: i,
                start: 0,
                target,
            }),
        }
    }
    let one = |t: Task<'_>| {
        let e = &extents[t.extent];
        run(source, e, t.start, t.target, faults).map_err(|error| {
            let error = if error.location().is_empty() {
                error.at(source.name(e.file))
            } else {
                error
            };
            Failure {
                extent: t.extent,
                error,
            }
        })
    };
    if tasks.len() <= 1 || crate::batch::pool::is_inline() {
        tasks.into_iter().try_for_each(one)
    } else {
        tasks.into_par_iter().try_for_each(one)
    }
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
    start: usize,
    target: Target<'_>,
    faults: Faults,
) -> Result<(), Error> {
    let in_place = e.pipeline.only_checks() && e.stored_len == e.decoded_len;
    let inner = e.pipeline.inner_len(e.decoded_len);
    let target = match (target, e.pipeline.stream_plan()) {
        (Target::At(out), Some(plan)) if e.stored_len.max(inner) >= STREAM_BYTES => {
            let mut read = |at: u64, buf: &mut [u8]| source.read_at(e.file, e.offset + at, buf);
            if inflate_stream(&plan, e.stored_len, inner, &mut read, out, faults)? {
                return Ok(());
            }
            Target::At(out)
        }
        (target, _) => target,
    };
    match target {
        // A raw extent, whole or a part of it.
        Target::At(out) if e.is_raw() => source.read_at(e.file, e.offset + start as u64, out),
        Target::At(out) if in_place => {
            // Stored bytes are the sample: read them straight into the output, then check.
            source.read_at(e.file, e.offset, out)?;
            e.pipeline.verify(out, faults)
        }
        target => SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let scratch = &mut *guard;
            let stored = grow(&mut scratch.stored, e.stored_len);
            source.read_at(e.file, e.offset, stored)?;
            let (pieces, outs) = match (&e.dest, target) {
                (_, Target::At(out)) => {
                    return e.pipeline.decode(stored, out, &mut scratch.tmp, faults)
                }
                (Dest::Scatter(pieces), Target::Scatter(outs)) => (pieces, outs),
                (Dest::At(_), Target::Scatter(_)) => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        "",
                        "internal planning error: a scatter target for a contiguous extent",
                    ))
                }
            };
            let decoded: &[u8] = if in_place {
                e.pipeline.verify(stored, faults)?;
                stored
            } else {
                let decoded = grow(&mut scratch.decoded, e.decoded_len);
                e.pipeline
                    .decode(stored, decoded, &mut scratch.tmp, faults)?;
                decoded
            };
            for (p, out) in pieces.iter().zip(outs) {
                out.copy_from_slice(&decoded[p.src..p.src + p.len]);
            }
            Ok(())
        }),
    }
}

/// Decoded bytes and the pieces to copy out of them.
pub type ScatterFrom<'a> = (&'a [u8], &'a [Piece]);

/// Copies pieces of already-decoded buffers (cached chunks) into `out` in parallel, through
/// the same disjointness proof [`execute`] uses.
pub fn scatter(from: &[ScatterFrom<'_>], out: &mut [u8]) -> Result<(), Error> {
    let mut writes = Vec::new();
    for (k, (bytes, pieces)) in from.iter().enumerate() {
        for (j, p) in pieces.iter().enumerate() {
            if p.src.checked_add(p.len).is_none_or(|e| e > bytes.len()) {
                return Err(internal(k, format!("piece {p:?} out of bounds")).error);
            }
            writes.push(Write {
                out: 0,
                dst: p.dst,
                len: p.len,
                extent: k,
                piece: j,
            });
        }
    }
    let mut outs = [out];
    let carved = split_disjoint(writes, &mut outs).map_err(|f| f.error)?;
    let copy = |(w, target): (Write, &mut [u8])| {
        let (bytes, pieces) = from[w.extent];
        let p = pieces[w.piece];
        target.copy_from_slice(&bytes[p.src..p.src + p.len]);
    };
    if carved.len() <= 1 || crate::batch::pool::is_inline() {
        carved.into_iter().for_each(copy);
    } else {
        carved.into_par_iter().for_each(copy);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(out: usize, dst: usize, len: usize, extent: usize) -> Write {
        Write {
            out,
            dst,
            len,
            extent,
            piece: 0,
        }
    }

    #[test]
    fn disjoint_writes_get_their_own_bytes() {
        let mut a = [0u8; 10];
        let mut b = [0u8; 4];
        let writes = vec![
            write(0, 6, 4, 0),
            write(1, 0, 4, 1),
            write(0, 0, 3, 2),
            write(0, 3, 0, 3),
        ];
        let mut outs: [&mut [u8]; 2] = [&mut a, &mut b];
        let carved = split_disjoint(writes, &mut outs).unwrap();
        for (w, s) in carved {
            assert_eq!(s.len(), w.len);
            s.fill(w.extent as u8 + 1);
        }
        assert_eq!(a, [3, 3, 3, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(b, [2; 4]);
    }

    #[test]
    fn overlaps_and_out_of_bounds_are_internal_errors() {
        let mut a = [0u8; 10];
        for writes in [
            vec![write(0, 0, 5, 0), write(0, 4, 2, 1)],
            vec![write(0, 8, 3, 0)],
            vec![write(0, usize::MAX, 2, 0)],
            vec![write(1, 0, 1, 0)],
            vec![write(0, 2, 2, 0), write(0, 2, 2, 1)],
        ] {
            let mut outs: [&mut [u8]; 1] = [&mut a];
            let f = split_disjoint(writes, &mut outs).unwrap_err();
            assert_eq!(f.error.kind(), ErrorKind::Internal);
        }
    }
}
