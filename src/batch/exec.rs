//! The executor: runs a batch's extents on the pool, each reading its bytes with `pread`,
//! decoding them and writing its own disjoint part of the output buffers.

use std::cell::RefCell;

use rayon::prelude::*;

pub use super::tiling::Piece;
use crate::codec::{inflate_stream, Faults, Pipeline};
use crate::error::{Error, ErrorKind};
use crate::source::{Coalesce, Files};
use crate::stats::{self, Event, Stage};

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
    /// Which file of the [`Files`].
    pub file: u32,
    /// Byte offset in the file where the stored bytes start.
    pub offset: u64,
    /// Bytes stored in the file from `offset`: what is read.
    pub stored_len: usize,
    /// How the stored bytes decode into the `decoded_len` bytes.
    pub pipeline: Pipeline,
    /// Bytes the pipeline produces: all written at [`Dest::At`], or the bytes
    /// [`Dest::Scatter`]'s pieces copy from.
    pub decoded_len: usize,
    /// Which output buffer (one per array a batch returns).
    pub out: u32,
    /// Where in output `out` the decoded bytes go.
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
pub(crate) struct Failure {
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
/// HDF5 chunk); errors name the file they came from. A source that wants reads merged
/// ([`Files::coalesce`]) is read one group of nearby extents at a time.
pub(crate) fn execute(
    source: &dyn Files,
    extents: &[Extent],
    outs: &mut [&mut [u8]],
    faults: Faults,
) -> Result<(), Failure> {
    let targets = carve(extents, outs)?;
    if let Some(c) = source.coalesce().filter(|_| extents.len() > 1) {
        return execute_grouped(source, extents, targets, faults, c);
    }
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
    // The reads of each thread's run of tasks are one region ([`stats::Region`]).
    let one = |reads: &mut stats::Region, t: Task<'_>| {
        let e = &extents[t.extent];
        run(source, reads, e, t.start, t.target, faults)
            .map_err(|error| failed(source, e, t.extent, error, faults))
    };
    let region = || stats::Region::new(Stage::Read);
    if tasks.len() <= 1 || crate::batch::pool::is_inline() {
        let mut reads = region();
        tasks.into_iter().try_for_each(|t| one(&mut reads, t))
    } else {
        tasks.into_par_iter().try_for_each_init(region, one)
    }
}

/// The failure of extent `i`, its error naming the extent's file unless it names a place; a
/// read past the end of data held whole is the format's damage (`faults`).
fn failed(source: &dyn Files, e: &Extent, i: usize, error: Error, faults: Faults) -> Failure {
    let error = error.as_damage(faults.corrupt);
    let error = if error.location().is_empty() {
        error.at(source.name(e.file))
    } else {
        error
    };
    Failure { extent: i, error }
}

/// The groups of extents one read each fetches: the extents of one file, by offset, merged
/// while the next starts at most `c.gap` bytes past the group's end and the group's span
/// stays within `c.max_len`. Every extent is in exactly one group; an extent longer than
/// `c.max_len` is a group of its own.
pub(crate) fn coalesce(extents: &[Extent], c: Coalesce) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..extents.len()).collect();
    order.sort_by_key(|&i| (extents[i].file, extents[i].offset));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    // The open group's file and byte span.
    let mut span = (u32::MAX, 0u64, 0u64);
    for i in order {
        let e = &extents[i];
        let end = e.offset.saturating_add(e.stored_len as u64);
        let (file, start, open_end) = span;
        let joins = !groups.is_empty()
            && file == e.file
            && e.offset <= open_end.saturating_add(c.gap)
            && end.max(open_end) - start <= c.max_len;
        match groups.last_mut() {
            Some(group) if joins => {
                group.push(i);
                span.2 = open_end.max(end);
            }
            _ => {
                groups.push(vec![i]);
                span = (e.file, e.offset, end);
            }
        }
    }
    groups
}

/// [`execute`] for a source that merges reads: each group of [`coalesce`] is one task, one
/// read of the group's span, and its extents decode from those bytes.
fn execute_grouped(
    source: &dyn Files,
    extents: &[Extent],
    targets: Vec<Target<'_>>,
    faults: Faults,
    c: Coalesce,
) -> Result<(), Failure> {
    let mut targets: Vec<Option<Target<'_>>> = targets.into_iter().map(Some).collect();
    let tasks: Vec<Vec<(usize, Target<'_>)>> = coalesce(extents, c)
        .into_iter()
        .map(|group| {
            group
                .into_iter()
                .map(|i| (i, targets[i].take().expect("each extent is in one group")))
                .collect()
        })
        .collect();
    // Every group's span is fetched first, all in flight together, then decoded in parallel.
    let spans: Vec<(u32, u64, usize)> = tasks
        .iter()
        .map(|group| {
            let first = &extents[group[0].0];
            let end = group
                .iter()
                .map(|(i, _)| extents[*i].offset + extents[*i].stored_len as u64)
                .max()
                .unwrap_or(first.offset);
            (first.file, first.offset, (end - first.offset) as usize)
        })
        .collect();
    let timer = stats::start();
    let fetched = source.read_ranges(&spans);
    timer.stop(Stage::Read, spans.iter().map(|s| s.2).sum());
    let merged: Vec<usize> = tasks.iter().map(Vec::len).filter(|&n| n > 1).collect();
    stats::count(Event::MergedReads, merged.len() as u64);
    stats::count(Event::MergedExtents, merged.iter().sum::<usize>() as u64);
    // Reads of a group's bytes, already read, are copies.
    let one =
        |copies: &mut stats::Region,
         (group, bytes): (Vec<(usize, Target<'_>)>, Result<bytes::Bytes, Error>)| {
            let first = &extents[group[0].0];
            let bytes = bytes.map_err(|error| failed(source, first, group[0].0, error, faults))?;
            let held = Held {
                source,
                file: first.file,
                start: first.offset,
                bytes: &bytes,
            };
            for (i, target) in group {
                let e = &extents[i];
                run(&held, copies, e, 0, target, faults)
                    .map_err(|error| failed(source, e, i, error, faults))?;
            }
            Ok(())
        };
    let work: Vec<_> = tasks.into_iter().zip(fetched).collect();
    let region = || stats::Region::new(Stage::Copy);
    if work.len() <= 1 || crate::batch::pool::is_inline() {
        let mut copies = region();
        work.into_iter().try_for_each(|w| one(&mut copies, w))
    } else {
        work.into_par_iter().try_for_each_init(region, one)
    }
}

/// A group's bytes, fetched by one read of `source`, served to its extents.
struct Held<'a> {
    source: &'a dyn Files,
    file: u32,
    start: u64,
    bytes: &'a [u8],
}

impl Files for Held<'_> {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let at = offset
            .checked_sub(self.start)
            .and_then(|at| usize::try_from(at).ok());
        let held = at
            .and_then(|at| Some(at..at.checked_add(buf.len())?))
            .and_then(|range| self.bytes.get(range))
            .filter(|_| file == self.file)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Internal,
                    self.source.name(file),
                    format!(
                        "internal planning error: {} bytes at {offset} are not in the group read",
                        buf.len()
                    ),
                )
            })?;
        buf.copy_from_slice(held);
        Ok(())
    }

    fn name(&self, file: u32) -> String {
        self.source.name(file)
    }
}

/// `source.read_at`, counted in `reads`, the region its thread's reads are timed in.
fn read_at(
    source: &dyn Files,
    reads: &mut stats::Region,
    file: u32,
    at: u64,
    buf: &mut [u8],
) -> Result<(), Error> {
    reads.add(buf.len());
    source.read_at(file, at, buf)
}

/// Reads, decodes and places one extent (or part of a raw one), reading through `source`
/// counted in `reads` ([`read_at`]).
fn run(
    source: &dyn Files,
    reads: &mut stats::Region,
    e: &Extent,
    start: usize,
    target: Target<'_>,
    faults: Faults,
) -> Result<(), Error> {
    let in_place = e.pipeline.only_checks() && e.stored_len == e.decoded_len;
    let inner = e.pipeline.inner_len(e.decoded_len);
    let target = match (target, e.pipeline.stream_plan()) {
        (Target::At(out), Some(plan)) if e.stored_len.max(inner) >= STREAM_BYTES => {
            let mut read =
                |at: u64, buf: &mut [u8]| read_at(source, reads, e.file, e.offset + at, buf);
            // Inflated as it is read: the inflate is the region less the reads inside it.
            let timer = stats::start();
            let streamed = inflate_stream(&plan, e.stored_len, inner, &mut read, out, faults)?;
            if streamed {
                timer.stop_exclusive(Stage::Inflate, out.len());
                return Ok(());
            }
            Target::At(out)
        }
        (target, _) => target,
    };
    match target {
        // A raw extent, whole or a part of it.
        Target::At(out) if e.is_raw() => {
            read_at(source, reads, e.file, e.offset + start as u64, out)
        }
        Target::At(out) if in_place => {
            // Stored bytes are the sample: read them straight into the output, then check.
            read_at(source, reads, e.file, e.offset, out)?;
            e.pipeline.verify(out, faults)
        }
        target => SCRATCH.with(|cell| {
            let mut guard = cell.borrow_mut();
            let scratch = &mut *guard;
            let stored = grow(&mut scratch.stored, e.stored_len);
            read_at(source, reads, e.file, e.offset, stored)?;
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
            let timer = stats::start();
            let mut copied = 0;
            for (p, out) in pieces.iter().zip(outs) {
                out.copy_from_slice(&decoded[p.src..p.src + p.len]);
                copied += p.len;
            }
            timer.stop(Stage::Copy, copied);
            Ok(())
        }),
    }
}

/// Decoded bytes and the pieces to copy out of them.
pub(crate) type ScatterFrom<'a> = (&'a [u8], &'a [Piece]);

/// Copies pieces of already-decoded buffers (cached chunks) into `out` in parallel, through
/// the same disjointness proof [`execute`] uses.
pub(crate) fn scatter(from: &[ScatterFrom<'_>], out: &mut [u8]) -> Result<(), Error> {
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
    let timer = stats::start();
    let total: usize = carved.iter().map(|(w, _)| w.len).sum();
    if carved.len() <= 1 || crate::batch::pool::is_inline() {
        carved.into_iter().for_each(copy);
    } else {
        carved.into_par_iter().for_each(copy);
    }
    // One region for the whole scatter (per piece would cost more than small pieces do); in
    // parallel, its wall time on the calling thread.
    timer.stop(Stage::Copy, total);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Step, Wrapper};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Files in memory that count their reads, merging them or not.
    struct Counting {
        files: Vec<Vec<u8>>,
        reads: AtomicUsize,
        coalesce: Option<Coalesce>,
    }

    impl Files for Counting {
        fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let bytes = &self.files[file as usize];
            let at = offset as usize;
            let src = bytes
                .get(at..at + buf.len())
                .ok_or_else(|| Error::new(ErrorKind::Io, self.name(file), "read past the end"))?;
            buf.copy_from_slice(src);
            Ok(())
        }

        fn name(&self, file: u32) -> String {
            format!("file{file}")
        }

        fn coalesce(&self) -> Option<Coalesce> {
            self.coalesce
        }
    }

    fn extent(file: u32, offset: u64, len: usize, dst: usize) -> Extent {
        Extent::raw(file, offset, len, Dest::At(dst))
    }

    #[test]
    fn groups_merge_nearby_reads_of_one_file_within_the_span_limit() {
        let c = Coalesce {
            gap: 10,
            max_len: 100,
        };
        let extents = [
            extent(0, 50, 10, 0),  // 0: 50..60
            extent(1, 0, 10, 10),  // 1: another file
            extent(0, 0, 10, 20),  // 2: 0..10
            extent(0, 15, 5, 30),  // 3: 15..20, 5 past extent 2
            extent(0, 31, 4, 40),  // 4: 31..35, 11 past extent 3: a new group
            extent(0, 35, 70, 50), // 5: 35..105, the group would span 74 bytes
            extent(0, 90, 30, 60), // 6: 90..120, overlapping; would span 89
            extent(0, 121, 9, 70), // 7: the span would be 99
            extent(1, 5, 500, 80), // 8: longer than max_len, after extent 1
        ];
        let groups = coalesce(&extents, c);
        assert_eq!(
            groups,
            vec![vec![2, 3], vec![4, 5, 0, 6, 7], vec![1], vec![8]]
        );
        let mut seen: Vec<usize> = groups.concat();
        seen.sort();
        assert_eq!(seen, (0..extents.len()).collect::<Vec<_>>());
    }

    /// A source that merges reads fills the outputs exactly as one that does not, with one
    /// read per group, decoded extents and scatters included; errors name the failing file.
    #[test]
    fn grouped_reads_give_the_same_bytes_with_fewer_reads() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let payload: Vec<u8> = (0..3000u32).map(|i| (i % 13) as u8).collect();
        let deflated = miniz_oxide::deflate::compress_to_vec(&payload, 6);
        let mut file1 = vec![9u8; 100];
        file1.extend_from_slice(&deflated);
        let inflate = Extent {
            file: 1,
            offset: 100,
            stored_len: deflated.len(),
            pipeline: Pipeline::new(vec![Step::Inflate(Wrapper::Raw)]),
            decoded_len: payload.len(),
            out: 1,
            dest: Dest::At(0),
        };
        let scatter = Extent {
            file: 0,
            offset: 1000,
            stored_len: 64,
            pipeline: Pipeline::identity(),
            decoded_len: 64,
            out: 0,
            dest: Dest::Scatter(vec![
                Piece {
                    src: 0,
                    dst: 800,
                    len: 8,
                },
                Piece {
                    src: 56,
                    dst: 808,
                    len: 8,
                },
            ]),
        };
        let extents: Vec<Extent> = (0..40)
            .map(|k| extent(0, (k * 97 % 40) * 24, 20, k as usize * 20))
            .chain([inflate, scatter, extent(1, 0, 100, 816)])
            .collect();
        let run_on = |coalesce| {
            let source = Counting {
                files: vec![data.clone(), file1.clone()],
                reads: AtomicUsize::new(0),
                coalesce,
            };
            let (mut a, mut b) = (vec![0u8; 916], vec![0u8; payload.len()]);
            execute(
                &source,
                &extents,
                &mut [&mut a, &mut b],
                Faults::both(ErrorKind::BadZip),
            )
            .unwrap();
            (a, b, source.reads.into_inner())
        };
        let (a, b, plain_reads) = run_on(None);
        assert_eq!(b, payload);
        assert_eq!(&a[..20], &data[..20]);
        assert_eq!(&a[800..808], &data[1000..1008]);
        assert_eq!(&a[816..916], &file1[..100]);
        assert_eq!(plain_reads, extents.len());
        let c = Coalesce {
            gap: 4,
            max_len: 1 << 20,
        };
        let (ga, gb, grouped_reads) = run_on(Some(c));
        assert_eq!((ga, gb), (a, b));
        // File 0: the 40 extents tile 0..956 with gaps of 4 (one read), and 1000..1064 is
        // 44 past them (another); file 1: 0..100 and the deflated bytes right after (one).
        assert_eq!(grouped_reads, 3);
        assert_eq!(coalesce(&extents, c).len(), 3);

        // A group whose read fails names its file; a decode failure names the extent's file.
        let short = Counting {
            files: vec![data[..500].to_vec(), file1[..file1.len() - 4].to_vec()],
            reads: AtomicUsize::new(0),
            coalesce: Some(c),
        };
        let (mut a, mut b) = (vec![0u8; 916], vec![0u8; payload.len()]);
        let f = execute(
            &short,
            &extents,
            &mut [&mut a, &mut b],
            Faults::both(ErrorKind::BadZip),
        )
        .unwrap_err();
        assert!(f.error.location().starts_with("file"), "{:?}", f.error);
    }

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
