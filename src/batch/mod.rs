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
//! implementation of [`crate::source::Source`]. docs/develop.md, "Adding a format", walks through it.

mod exec;
mod parts;
pub mod pending;
pub mod pool;
mod ragged;
mod run;
pub mod shards;
pub mod tiling;

use std::sync::Arc;

use crate::codec::Faults;
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
pub use exec::{Dest, Extent, Piece};
pub use pool::Work;
pub use ragged::{Ragged, RaggedBatch, RaggedKind};

use crate::source::Files;

/// One array every sample of an index holds: its name, element type and per-sample shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArraySpec {
    /// How the array is named (an HDF5 dataset's path, an NPZ key, ...).
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape of one sample.
    pub shape: Vec<usize>,
    /// For an array whose samples differ in size: what they hold (read with
    /// [`Batches::read_ragged`], never into fixed-size outputs). `dtype` and `shape` are then
    /// what a fixed-size read of the index's own would take (an HDF5 dataset's heap IDs).
    pub ragged: Option<Ragged>,
}

impl ArraySpec {
    /// A fixed-size array.
    pub fn fixed(name: impl Into<String>, dtype: DType, shape: Vec<usize>) -> ArraySpec {
        ArraySpec {
            name: name.into(),
            dtype,
            shape,
            ragged: None,
        }
    }

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

    /// Rows already resolved (a shard's part of a batch's), read in `epoch`.
    pub(crate) fn of(rows: Vec<usize>, epoch: u64) -> Rows {
        Rows { rows, epoch }
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

/// What an extent's failure is labelled with, for [`Index::locate`] to name: the array its
/// bytes belong to (a dataset or key by position; 0 for an index of one array) and the thing
/// in it that failed (a row, a member's position, a chunk's address: whatever the index
/// plans by).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Tag {
    /// The array, by position among the index's arrays.
    pub array: u32,
    /// The row, member or chunk, as the index numbers them.
    pub at: u64,
}

impl Tag {
    /// `at` of array `array`.
    pub fn new(array: u32, at: u64) -> Tag {
        Tag { array, at }
    }
}

/// A step the engine runs after a plan's extents have been read, in the order planned.
#[derive(Debug)]
pub enum After {
    /// Bytes decoded before (a chunk the index keeps), copied piece by piece into output
    /// `out`.
    Copy {
        /// Which output.
        out: usize,
        /// The bytes.
        bytes: Arc<[u8]>,
        /// What goes where.
        pieces: Vec<Piece>,
    },
    /// Extent `extent` decodes into a buffer of its own, `len` bytes, whose `pieces` are then
    /// copied into output `out` and which the index keeps ([`Index::keep`]) under `key`: a
    /// chunk holding several samples, kept for the next batch.
    Keep {
        /// Which extent of the plan.
        extent: usize,
        /// The buffer's length.
        len: usize,
        /// Which output its pieces go to.
        out: usize,
        /// What goes where.
        pieces: Vec<Piece>,
        /// What the index keeps it by.
        key: Tag,
    },
    /// The index fills output `out` itself ([`Index::fill`]), after everything else.
    Fill {
        /// Which output.
        out: usize,
        /// What to fill it with, as the index says.
        tag: Tag,
    },
}

/// What an index plans for one batch: the extents, each labelled, and the steps after them.
#[derive(Default)]
pub struct Plan {
    /// The reads.
    pub extents: Vec<Extent>,
    /// One label per extent.
    pub tags: Vec<Tag>,
    /// What runs once the extents have.
    pub after: Vec<After>,
    /// Where this plan's extents read, when not from the index's files: bytes the index read
    /// while planning (encoded images found only by reading HDF5 rows first), as a source.
    pub files: Option<Arc<dyn Files + Send>>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("extents", &self.extents)
            .field("tags", &self.tags)
            .field("after", &self.after)
            .field("files", &self.files.is_some())
            .finish()
    }
}

impl Plan {
    /// Adds an extent and its failure's label.
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

    /// Keeps the bytes an [`After::Keep`] buffer received (a chunk cache), under `key`.
    fn keep(&self, _key: Tag, _bytes: Arc<[u8]>) {}

    /// Whether reads wait on the network (object storage): such a batch never runs inline.
    fn waits(&self) -> bool {
        self.files().waits()
    }

    /// Fills output `out` (of rows `rows`) as an [`After::Fill`] tagged `tag` asked.
    fn fill(&self, _rows: &Rows, _tag: Tag, _out: &mut [u8]) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            "",
            "internal planning error: a deferred output this index does not fill",
        ))
    }

    /// Reads `rows` of the ragged array at `array` (its samples differ in size: their sizes
    /// are known only from the bytes) into a new [`RaggedBatch`].
    fn read_ragged(&self, _rows: &Rows, array: usize) -> Result<RaggedBatch> {
        Err(Error::new(
            ErrorKind::Internal,
            self.location(),
            format!("array {array} is not ragged"),
        ))
    }
}

/// What a reader reads batches through: one index ([`Index`], every format), or many read
/// as one ([`shards::Shards`]).
pub trait Batches: Send + Sync {
    /// Samples.
    fn len(&self) -> usize;

    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The arrays every sample holds.
    fn arrays(&self) -> &[ArraySpec];

    /// How errors name it.
    fn location(&self) -> String;

    /// The pool to run on: `Some(n)` for a pool of its own of `n` threads.
    fn threads(&self) -> Option<usize>;

    /// Whether reads wait on the network (object storage): such a batch never runs inline.
    fn waits(&self) -> bool;

    /// What reading `rows` of `arrays` costs (tiny reads run on the caller's thread).
    fn work(&self, rows: usize, arrays: &[usize]) -> Work;

    /// Reads `rows` of the fixed-size arrays at `arrays` into `outs`, one per array.
    fn read(&self, rows: &Rows, arrays: &[usize], outs: &mut [&mut [u8]]) -> Result<()>;

    /// Reads `rows` of the ragged array at `array` into a new batch.
    fn read_ragged(&self, rows: &Rows, array: usize) -> Result<RaggedBatch>;
}

impl<T: Index> Batches for T {
    fn len(&self) -> usize {
        Index::len(self)
    }

    fn arrays(&self) -> &[ArraySpec] {
        Index::arrays(self)
    }

    fn location(&self) -> String {
        Index::location(self)
    }

    fn threads(&self) -> Option<usize> {
        Index::threads(self)
    }

    fn waits(&self) -> bool {
        Index::waits(self)
    }

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        Index::work(self, rows, arrays)
    }

    fn read(&self, rows: &Rows, arrays: &[usize], outs: &mut [&mut [u8]]) -> Result<()> {
        check_fixed(self, arrays)?;
        read_batch(self, rows, arrays, outs)
    }

    fn read_ragged(&self, rows: &Rows, array: usize) -> Result<RaggedBatch> {
        check_ragged(self.arrays(), &self.location(), array)?;
        pool::install_with(Index::threads(self), || {
            Index::read_ragged(self, rows, array)
        })
    }
}

/// Refuses a fixed-size read of a ragged array (its samples' sizes are not the spec's).
pub(crate) fn check_fixed(index: &dyn Index, arrays: &[usize]) -> Result<()> {
    for &a in arrays {
        if let Some(spec) = index.arrays().get(a).filter(|s| s.ragged.is_some()) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                index.location(),
                format!(
                    "{:?} holds samples of different sizes: they are read as a ragged batch",
                    spec.name
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that `array` is a ragged array of `arrays`.
pub(crate) fn check_ragged(arrays: &[ArraySpec], location: &str, array: usize) -> Result<()> {
    match arrays.get(array) {
        Some(spec) if spec.ragged.is_some() => Ok(()),
        Some(spec) => Err(Error::new(
            ErrorKind::InvalidArgument,
            location,
            format!(
                "{:?} is not ragged: its samples are read into arrays",
                spec.name
            ),
        )),
        None => Err(Error::new(
            ErrorKind::Internal,
            location,
            format!("array {array} of {} does not exist", arrays.len()),
        )),
    }
}

/// Checks that `outs` are one output per array at `arrays`, each exactly `rows` samples long.
pub fn check_outputs(
    specs: &[ArraySpec],
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
        check_outputs(index.arrays(), rows.len(), arrays, outs)?;
        crate::stats::count(crate::stats::Event::Batches, 1);
        let mut plan = Plan::default();
        let timer = crate::stats::start();
        index.plan(rows, arrays, &mut plan)?;
        timer.stop(crate::stats::Stage::Plan, rows.len());
        run::run_plans(
            vec![run::Planned {
                index,
                rows,
                at: None,
                plan,
            }],
            arrays,
            outs,
        )
    })
}

/// [`Batches::read`] for raw indices (negatives count from the end), resolved here.
pub fn read(
    batches: &dyn Batches,
    idx: &[i64],
    arrays: &[usize],
    outs: &mut [&mut [u8]],
) -> Result<()> {
    let rows = Rows::resolve(idx, batches.len(), &batches.location())?;
    batches.read(&rows, arrays, outs)
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
    run::verified(&[source], result)
}
