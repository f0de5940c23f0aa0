//! The batch engine: every format is an [`Index`] over its bytes, and one [`read_batch`] reads
//! batches for all of them.
//!
//! An index knows its samples and arrays, and for given rows plans where each piece of a
//! sample is stored and how it is encoded (an [`Extent`]: a byte range of one of its
//! [`Files`], a decode [`Pipeline`](crate::codec::Pipeline) and a place in an output). The
//! flow around that is written once, here: rows are resolved ([`Rows`]), the outputs checked,
//! the plan executed on the pool (`exec`) with every write proven disjoint, already-decoded
//! bytes copied in, and a failure labelled with the file, member or chunk it came from.
//!
//! Adding a format is one implementation of [`Index`]; adding a place bytes come from, one
//! implementation of [`crate::source::Source`]. README "Adding a format" walks through it.

mod exec;
mod parts;
pub mod pending;
pub mod pool;
pub mod shards;
pub mod tiling;

use std::sync::Arc;

use crate::codec::Faults;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
pub use exec::{Dest, Extent, Piece};
pub use parts::Part;
pub use pool::Work;

use crate::source::{Coalesce, Files};

/// One array every sample of an index holds: its name, element type and per-sample shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// How the array is named (an HDF5 dataset's path, an NPZ key, ...).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape of one sample.
    pub shape: Vec<usize>,
}

impl ArraySpec {
    /// Bytes of one sample of this array.
    pub fn sample_bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.itemsize()
    }
}

/// Sample indices resolved against an index's length: in range, negatives counted from the
/// end, order and duplicates kept, and the epoch they are read in (formats with random
/// augmentation draw from it). Made only by [`Rows::resolve`], so a read never checks them
/// twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rows {
    rows: Vec<usize>,
    epoch: u64,
}

impl Rows {
    /// Resolves Python-style indices against `len` samples; an index out of range is an
    /// `IndexError` naming `location` (the reader's file).
    pub fn resolve(idx: &[i64], len: usize, location: &str) -> Result<Rows> {
        tiling::resolve_indices(idx, len, location).map(|rows| Rows { rows, epoch: 0 })
    }

    /// The same rows, read in `epoch`.
    pub fn in_epoch(mut self, epoch: u64) -> Rows {
        self.epoch = epoch;
        self
    }

    /// The epoch the rows are read in (0 unless set).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The rows, in batch order.
    pub fn as_slice(&self) -> &[usize] {
        &self.rows
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Which failure an extent's error is: an index's own label, turned into a location by
/// [`Index::locate`] (a row, a member, a chunk's dataset and address, ...).
pub type Tag = (u32, u64);

/// Decoded bytes (a chunk of several samples) and the pieces of it a batch needs.
#[derive(Debug)]
pub struct Copy {
    /// Which output (position in the batch's arrays).
    pub slot: usize,
    /// The bytes.
    pub bytes: Arc<[u8]>,
    /// What goes where.
    pub pieces: Vec<Piece>,
}

/// A buffer the engine allocates for an extent that decodes bytes the index wants to keep (a
/// chunk of several samples, kept for the next batch): the extent writes output
/// `outputs + k` (the k-th scratch buffer), then its `pieces` are copied into `slot` and
/// [`Index::keep`] gets the bytes with `key`.
#[derive(Debug)]
pub struct Scratch {
    /// Which extent decodes into it.
    pub extent: usize,
    /// Its length.
    pub len: usize,
    /// Which output its pieces go to.
    pub slot: usize,
    /// What goes where.
    pub pieces: Vec<Piece>,
    /// What the index keeps it by.
    pub key: Tag,
}

/// What an index plans for one batch.
#[derive(Debug, Default)]
pub struct Plan {
    /// The reads, each with the tag its failure is labelled with.
    pub extents: Vec<Extent>,
    /// One tag per extent.
    pub tags: Vec<Tag>,
    /// Extents that decode into buffers of their own (see [`Scratch`]).
    pub scratch: Vec<Scratch>,
    /// Bytes already decoded, copied into the outputs after the extents ran.
    pub copies: Vec<Copy>,
    /// Outputs the index fills itself, after everything else ([`Index::fill`]): the slot and a
    /// tag saying what to fill it with.
    pub deferred: Vec<(usize, Tag)>,
    /// Bytes the index read while planning (the encoded images held in HDF5 rows, found only
    /// by reading those rows), served to this plan's extents as file [`STAGED_FILE`].
    pub staged: Option<Arc<[u8]>>,
}

/// The file number a plan's extents read its [`Plan::staged`] bytes by.
pub const STAGED_FILE: u32 = u32::MAX;

/// How staged bytes are named in messages.
pub(crate) const STAGED_NAME: &str = "<staged bytes>";

/// Reads staged bytes: a read past them is a planning error, not bad input (the index
/// planned these very bytes).
pub(crate) fn read_staged(staged: &[u8], offset: u64, buf: &mut [u8]) -> Result<()> {
    let src = usize::try_from(offset)
        .ok()
        .and_then(|start| staged.get(start..start.checked_add(buf.len())?))
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                STAGED_NAME,
                format!(
                    "internal planning error: {} bytes at offset {offset} past the staged bytes",
                    buf.len()
                ),
            )
        })?;
    buf.copy_from_slice(src);
    Ok(())
}

/// An index's files with a plan's staged bytes beside them, as file [`STAGED_FILE`].
pub struct WithStaged<'a> {
    base: &'a dyn Files,
    staged: &'a [u8],
}

impl<'a> WithStaged<'a> {
    /// `base`, with `staged` as file [`STAGED_FILE`].
    pub fn new(base: &'a dyn Files, staged: &'a [u8]) -> WithStaged<'a> {
        WithStaged { base, staged }
    }
}

impl Files for WithStaged<'_> {
    fn read_at(&self, file: u32, offset: u64, buf: &mut [u8]) -> Result<()> {
        if file != STAGED_FILE {
            return self.base.read_at(file, offset, buf);
        }
        read_staged(self.staged, offset, buf)
    }

    fn name(&self, file: u32) -> String {
        if file == STAGED_FILE {
            STAGED_NAME.to_string()
        } else {
            self.base.name(file)
        }
    }

    fn coalesce(&self) -> Option<Coalesce> {
        self.base.coalesce()
    }

    fn waits(&self) -> bool {
        self.base.waits()
    }
}

impl Plan {
    /// Adds an extent and its failure's tag.
    pub fn push(&mut self, extent: Extent, tag: Tag) {
        self.extents.push(extent);
        self.tags.push(tag);
    }
}

/// One format's knowledge of its bytes: the samples and arrays it holds, and where and how
/// each is stored. [`read_batch`] does the rest.
pub trait Index: Send + Sync {
    /// Samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arrays every sample holds, in the order outputs are given.
    fn arrays(&self) -> &[ArraySpec];

    /// How errors name this index (its file, or its first file and how many more).
    fn location(&self) -> String;

    /// The error kinds bytes that do not decode are reported as.
    fn faults(&self) -> Faults;

    /// The files the extents of a plan read their bytes from.
    fn files(&self) -> &dyn Files;

    /// What reading `rows` of `arrays` costs (tiny reads run on the caller's thread).
    fn work(&self, rows: usize, arrays: &[usize]) -> Work;

    /// The pool to run on: `Some(n)` for a pool of its own of `n` threads.
    fn threads(&self) -> Option<usize> {
        None
    }

    /// Plans reading `rows` of the arrays at `arrays` into outputs `0..arrays.len()` (output
    /// `k` holds array `arrays[k]`, one sample after another in C order).
    fn plan(&self, rows: &Rows, arrays: &[usize], plan: &mut Plan) -> Result<()>;

    /// Gives the error of the extent tagged `tag` its location (its file, member, chunk...).
    fn locate(&self, tag: Tag, error: Error) -> Error;

    /// Keeps decoded bytes a [`Scratch`] buffer received (a chunk cache), under `key`.
    fn keep(&self, _key: Tag, _bytes: Arc<[u8]>) {}

    /// The indexes a batch's rows are read from: `None` for this one, every row in place
    /// (every format); a sharded index names each shard the rows touch, with its rows and
    /// their places in the batch ([`read_split`] opens, plans and runs them).
    fn split(&self, _rows: &Rows) -> Result<Option<Vec<Part>>> {
        Ok(None)
    }

    /// Part `k` of a [`split`](Index::split), opened now if it is not open.
    fn part(&self, _k: usize) -> Result<Arc<dyn Index>> {
        Err(Error::new(
            ErrorKind::Internal,
            self.location(),
            "internal planning error: an index without parts asked for one",
        ))
    }

    /// How many parts a batch may hold open at once: [`read_split`] reads a batch touching
    /// more in groups of this many, each group's parts let go before the next opens.
    fn parts_at_once(&self) -> usize {
        usize::MAX
    }

    /// Whether reads wait on the network (object storage): such a batch never runs inline.
    fn waits(&self) -> bool {
        self.files().waits()
    }

    /// Fills output `out` (of rows `rows`) as a [`Plan::deferred`] entry tagged `tag` asked.
    fn fill(&self, _rows: &Rows, _tag: Tag, _out: &mut [u8]) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            "",
            "internal planning error: a deferred output this index does not fill",
        ))
    }
}

/// Checks that `outs` are one output per array at `arrays`, each exactly `rows` samples long.
pub fn check_outputs(
    index: &dyn Index,
    rows: usize,
    arrays: &[usize],
    outs: &[&mut [u8]],
) -> Result<()> {
    if arrays.len() != outs.len() {
        return Err(Error::new(
            ErrorKind::InvalidArgument,
            "",
            "one output per array is needed",
        ));
    }
    let specs = index.arrays();
    for (&a, out) in arrays.iter().zip(outs) {
        let spec = specs.get(a).ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "",
                format!("array {a} of {} does not exist", specs.len()),
            )
        })?;
        tiling::check_out_len(out.len(), rows, spec.sample_bytes())?;
    }
    Ok(())
}

/// Reads `rows` of the arrays at `arrays` of `index` into `outs` (one per array, each holding
/// the samples one after another in C order): the one flow every format's batches take. Runs
/// on the index's pool (inline when the caller already runs on a packread pool, or inside
/// [`pool::run_inline`]).
pub fn read_batch(
    index: &dyn Index,
    rows: &Rows,
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    pool::install_with(index.threads(), || {
        let split = index.split(rows)?;
        read_split(index, rows, split, arrays, outs)
    })
}

/// [`read_batch`] for raw indices (negatives count from the end), resolved here.
pub fn read(
    index: &dyn Index,
    idx: &[i64],
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    let rows = Rows::resolve(idx, index.len(), &index.location())?;
    read_batch(index, &rows, arrays, outs)
}

/// One index's plan for its rows of a batch, and where those rows land (`None`: in place).
struct Planned<'a> {
    index: &'a dyn Index,
    rows: &'a Rows,
    at: Option<&'a [usize]>,
    plan: Plan,
}

/// Reads a batch that [`Index::split`] has split (or not: `None`) into `outs`, on the pool
/// the caller runs on, opening the parts it reads (a shard's opener may run here, on the
/// pool).
pub fn read_split(
    index: &dyn Index,
    rows: &Rows,
    split: Option<Vec<Part>>,
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    check_outputs(index, rows.len(), arrays, outs)?;
    let Some(parts) = split else {
        let mut plan = Plan::default();
        index.plan(rows, arrays, &mut plan)?;
        let planned = Planned {
            index,
            rows,
            at: None,
            plan,
        };
        return run_plans(vec![planned], arrays, outs);
    };
    // Parts are opened a group at a time, so that a batch touching more shards than may be
    // open at once never holds more (each group's rows are disjoint in the outputs).
    for group in parts.chunks(index.parts_at_once().max(1)) {
        let opened = group
            .iter()
            .map(|part| index.part(part.part))
            .collect::<Result<Vec<_>>>()?;
        let mut planned = Vec::with_capacity(group.len());
        for (part, at) in group.iter().zip(&opened) {
            check_parts_agree(index, &**at, arrays)?;
            let mut plan = Plan::default();
            at.plan(&part.rows, arrays, &mut plan)?;
            planned.push(Planned {
                index: &**at,
                rows: &part.rows,
                at: Some(&part.at),
                plan,
            });
        }
        run_plans(planned, arrays, outs)?;
    }
    Ok(())
}

/// A part must hold the arrays of the index it is part of, sample for sample the same size:
/// its writes are moved by that size.
fn check_parts_agree(whole: &dyn Index, part: &dyn Index, arrays: &[usize]) -> Result<()> {
    for &a in arrays {
        let (w, p) = (whole.arrays().get(a), part.arrays().get(a));
        if w.map(ArraySpec::sample_bytes) != p.map(ArraySpec::sample_bytes) {
            return Err(Error::new(
                ErrorKind::Internal,
                part.location(),
                format!("array {a} of this part differs from the whole's ({w:?}, {p:?})"),
            ));
        }
    }
    Ok(())
}

/// Runs the plans of a batch's parts as one (see [`execute_plans`]), then checks that no file
/// read changed meanwhile ([`Files::verify`]).
fn run_plans(planned: Vec<Planned<'_>>, arrays: &[usize], outs: &mut [&mut [u8]]) -> Result<()> {
    let sources: Vec<&dyn Files> = planned.iter().map(|p| p.index.files()).collect();
    let result = execute_plans(planned, arrays, outs);
    verified(&sources, result)
}

/// Sources checked one after another at most; more (a batch over many shards) are checked in
/// parallel on the pool, as their reads were (each check is a `stat` of a file).
const VERIFIED_IN_SERIES: usize = 8;

/// `result`, unless a file the batch read changed under it: then that error, which is the
/// cause of any other (bytes of another file read against this one's metadata).
fn verified(sources: &[&dyn Files], result: Result<()>) -> Result<()> {
    if sources.len() <= VERIFIED_IN_SERIES {
        sources.iter().try_for_each(|s| s.verify())?;
    } else {
        use rayon::prelude::*;
        sources.par_iter().try_for_each(|s| s.verify())?;
    }
    result
}

/// Runs the plans of a batch's parts as one: each part's extents, copies and scratch buffers
/// moved to its rows' places (parts in place are left as planned), its files renumbered when
/// there are several sources, everything executed together, then each part's index keeps
/// and fills its own.
fn execute_plans(
    mut planned: Vec<Planned<'_>>,
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    let Some(first) = planned.first() else {
        return Ok(());
    };
    let faults = first.index.faults();
    let row_bytes: Vec<usize> = arrays
        .iter()
        .map(|&a| first.index.arrays()[a].sample_bytes())
        .collect();
    let merged = planned.iter().any(|p| p.at.is_some());
    let mut extents = Vec::new();
    let mut owners: Vec<(usize, Tag)> = Vec::new();
    let mut scratch: Vec<(usize, Scratch)> = Vec::new();
    let mut copies: Vec<Copy> = Vec::new();
    let mut deferred: Vec<(usize, usize, Tag)> = Vec::new();
    let mut files = parts::PartFiles::default();
    let staged: Vec<Option<Arc<[u8]>>> = planned.iter_mut().map(|p| p.plan.staged.take()).collect();
    for (p, part) in planned.iter_mut().enumerate() {
        let plan = std::mem::take(&mut part.plan);
        let base = extents.len();
        let writes_scratch: std::collections::HashSet<usize> =
            plan.scratch.iter().map(|s| s.extent).collect();
        for (i, e) in plan.extents.into_iter().enumerate() {
            extents.push(match part.at {
                None => e,
                Some(at) => {
                    let file = files.number(p, e.file, part.index.files(), staged[p].as_deref())?;
                    parts::place_extent(e, file, &row_bytes, at, writes_scratch.contains(&i))?
                }
            });
        }
        owners.extend(plan.tags.into_iter().map(|t| (p, t)));
        for mut s in plan.scratch {
            s.extent += base;
            if let Some(at) = part.at {
                s.pieces = parts::place_pieces(s.pieces, row_bytes[s.slot], at)?;
            }
            scratch.push((p, s));
        }
        for mut c in plan.copies {
            if let Some(at) = part.at {
                c.pieces = parts::place_pieces(c.pieces, row_bytes[c.slot], at)?;
            }
            copies.push(c);
        }
        deferred.extend(plan.deferred.into_iter().map(|(slot, tag)| (p, slot, tag)));
    }
    // Scratch buffers are allocated as the index keeps them (one allocation, no copy after).
    let mut buffers: Vec<Arc<[u8]>> = scratch
        .iter()
        .map(|(_, s)| std::iter::repeat_n(0u8, s.len).collect())
        .collect();
    for (k, (_, s)) in scratch.iter().enumerate() {
        extents[s.extent].out = (outs.len() + k) as u32;
    }
    {
        let mut all: Vec<&mut [u8]> = outs.iter_mut().map(|o| &mut **o).collect();
        for b in &mut buffers {
            all.push(Arc::get_mut(b).ok_or_else(|| {
                Error::new(ErrorKind::Internal, "", "a scratch buffer is shared")
            })?);
        }
        let with_staged;
        let source: &dyn Files = if merged {
            &files
        } else {
            match &staged[0] {
                Some(bytes) => {
                    with_staged = WithStaged::new(first_source(&planned), bytes);
                    &with_staged
                }
                None => first_source(&planned),
            }
        };
        exec::execute(source, &extents, &mut all, faults).map_err(|f| {
            let (p, tag) = owners[f.extent];
            planned[p].index.locate(tag, f.error)
        })?;
    }
    // Already-decoded bytes and the scratch buffers' pieces, output by output.
    let mut by_slot: std::collections::BTreeMap<usize, Vec<exec::ScatterFrom<'_>>> =
        Default::default();
    for c in &copies {
        by_slot
            .entry(c.slot)
            .or_default()
            .push((&c.bytes, &c.pieces));
    }
    for ((_, s), b) in scratch.iter().zip(&buffers) {
        by_slot.entry(s.slot).or_default().push((b, &s.pieces));
    }
    for (slot, from) in by_slot {
        exec::scatter(&from, outs[slot])?;
    }
    for ((p, s), b) in scratch.into_iter().zip(buffers) {
        planned[p].index.keep(s.key, b);
    }
    for (p, slot, tag) in deferred {
        let part = &planned[p];
        match part.at {
            None => part.index.fill(part.rows, tag, outs[slot])?,
            Some(at) => fill_placed(part.index, part.rows, at, tag, row_bytes[slot], outs[slot])?,
        }
    }
    Ok(())
}

fn first_source<'a>(planned: &[Planned<'a>]) -> &'a dyn Files {
    planned[0].index.files()
}

/// A part's deferred fill: its rows gathered from their places in the batch, filled by its
/// index (which may read what the executor wrote, as stand-ins for images that did not
/// decode), and put back.
fn fill_placed(
    index: &dyn Index,
    rows: &Rows,
    at: &[usize],
    tag: Tag,
    row_bytes: usize,
    out: &mut [u8],
) -> Result<()> {
    let mut mine = vec![0u8; rows.len() * row_bytes];
    for (j, &r) in at.iter().enumerate() {
        mine[j * row_bytes..(j + 1) * row_bytes]
            .copy_from_slice(&out[r * row_bytes..(r + 1) * row_bytes]);
    }
    index.fill(rows, tag, &mut mine)?;
    for (j, &r) in at.iter().enumerate() {
        out[r * row_bytes..(r + 1) * row_bytes]
            .copy_from_slice(&mine[j * row_bytes..(j + 1) * row_bytes]);
    }
    Ok(())
}

/// Runs extents of `source` outside a batch (a whole member, a whole file) on the pool sized
/// for `work`, labelling a failure through `locate`.
pub fn run_extents(
    source: &dyn Files,
    extents: &[Extent],
    outs: &mut [&mut [u8]],
    faults: Faults,
    work: Work,
    threads: Option<usize>,
    locate: impl Fn(usize, Error) -> Error,
) -> Result<()> {
    let result = pool::install_sized(threads, work, || {
        exec::execute(source, extents, outs, faults)
    })
    .map_err(|f| locate(f.extent, f.error));
    verified(&[source], result)
}
