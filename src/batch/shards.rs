//! Many files of one format as one index: the shards' samples one after another, in the
//! order given. A shard is opened only when a batch first touches it (its length is known
//! before: given, from an index file, or counted once when the reader is made), and at most
//! `max_open` stay open; the least recently used is closed first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::parts::Part;
use super::pool::Work;
use super::{ArraySpec, Index, Plan, Rows, Tag};
use crate::codec::Faults;
use crate::error::{Error, ErrorKind, Result};
use crate::source::Files;

/// Opens shard `k` as an index of its format (with the options every shard shares).
pub type Opener = Box<dyn Fn(usize) -> Result<Arc<dyn Index>> + Send + Sync>;

/// The open shards, least recently used first out. Written here rather than taken from a
/// crate: it is a map and a counter, touched once per shard per batch, never per sample.
struct Open {
    max: usize,
    tick: u64,
    shards: HashMap<usize, (Arc<dyn Index>, u64)>,
}

impl Open {
    fn get(&mut self, k: usize) -> Option<Arc<dyn Index>> {
        self.tick += 1;
        let tick = self.tick;
        self.shards.get_mut(&k).map(|(index, used)| {
            *used = tick;
            Arc::clone(index)
        })
    }

    /// Keeps `index` as shard `k`, closing the least recently used beyond `max` (a batch
    /// that still reads a closed one holds it until it ends).
    fn put(&mut self, k: usize, index: Arc<dyn Index>) {
        self.tick += 1;
        self.shards.insert(k, (index, self.tick));
        while self.shards.len() > self.max {
            let oldest = self
                .shards
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(&k, _)| k);
            match oldest {
                Some(k) => drop(self.shards.remove(&k)),
                None => break,
            }
        }
    }
}

/// An index over the concatenation of shards that hold the same arrays.
pub struct Shards {
    names: Vec<String>,
    /// Where each shard's samples start; one more entry: the total.
    starts: Vec<usize>,
    arrays: Vec<ArraySpec>,
    opener: Opener,
    open: Mutex<Open>,
    threads: Option<usize>,
    location: String,
}

/// Stands in for a source: a sharded index's plans read from its shards' sources.
struct NoFiles;

impl Files for NoFiles {
    fn read_at(&self, _file: u32, _offset: u64, _buf: &mut [u8]) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            "",
            "internal planning error: a sharded index reads through its shards",
        ))
    }

    fn name(&self, file: u32) -> String {
        format!("<shard file {file}>")
    }
}

impl Shards {
    /// Shards named `names` holding `lengths` samples of `arrays` each, opened by `opener`;
    /// `opened` are shards already open (kept up to `max_open`).
    pub fn new(
        names: Vec<String>,
        lengths: &[usize],
        arrays: Vec<ArraySpec>,
        opener: Opener,
        max_open: usize,
        opened: Vec<(usize, Arc<dyn Index>)>,
        threads: Option<usize>,
    ) -> Result<Shards> {
        if names.is_empty() || names.len() != lengths.len() {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                "",
                format!("{} shard names for {} lengths", names.len(), lengths.len()),
            ));
        }
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut total = 0usize;
        starts.push(0);
        for &n in lengths {
            total = total.checked_add(n).ok_or_else(|| {
                Error::new(
                    ErrorKind::LimitExceeded,
                    "",
                    "more samples than an index holds",
                )
            })?;
            starts.push(total);
        }
        let location = match names.len() {
            1 => names[0].clone(),
            n => format!("{} (and {} more shards)", names[0], n - 1),
        };
        let shards = Shards {
            names,
            starts,
            arrays,
            opener,
            open: Mutex::new(Open {
                max: max_open.max(1),
                tick: 0,
                shards: HashMap::new(),
            }),
            threads,
            location,
        };
        for (k, index) in opened {
            shards.check(k, &*index)?;
            shards.lock().put(k, index);
        }
        Ok(shards)
    }

    /// Shards.
    pub fn count(&self) -> usize {
        self.names.len()
    }

    /// The samples of shard `k`: a range of the index's rows.
    pub fn range(&self, k: usize) -> std::ops::Range<usize> {
        self.starts[k]..self.starts[k + 1]
    }

    /// Shards open now.
    pub fn open_count(&self) -> usize {
        self.lock().shards.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Which shard row `row` is in (empty shards hold none).
    pub fn shard_of(&self, row: usize) -> usize {
        self.starts.partition_point(|&s| s <= row) - 1
    }

    /// Shard `k`, opened now if it is not open.
    pub fn shard(&self, k: usize) -> Result<Arc<dyn Index>> {
        if let Some(index) = self.lock().get(k) {
            return Ok(index);
        }
        // Opened outside the lock: other batches go on meanwhile.
        let index = (self.opener)(k)?;
        self.check(k, &*index)?;
        self.lock().put(k, Arc::clone(&index));
        Ok(index)
    }

    /// A shard must hold the samples counted for it, and arrays of the same shapes and item
    /// sizes as every other (the binding checks names and dtypes, which it names its own way).
    fn check(&self, k: usize, index: &dyn Index) -> Result<()> {
        let name = &self.names[k];
        let want = self.range(k).len();
        if index.len() != want {
            return Err(Error::new(
                ErrorKind::Changed,
                name.as_str(),
                format!(
                    "shard {k} holds {} samples, but {want} were counted when the reader was \
                     made (the file changed since, or the index file is stale); open the \
                     shards again",
                    index.len()
                ),
            ));
        }
        let got = index.arrays();
        if got.len() != self.arrays.len() {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                name.as_str(),
                format!(
                    "shard {k} holds {} arrays, {} holds {}",
                    got.len(),
                    self.names[0],
                    self.arrays.len()
                ),
            ));
        }
        for (g, w) in got.iter().zip(&self.arrays) {
            if g.shape != w.shape || g.dtype.itemsize() != w.dtype.itemsize() {
                return Err(Error::new(
                    ErrorKind::Inconsistent,
                    name.as_str(),
                    format!(
                        "shard {k} holds {:?} of shape {:?} ({}-byte items), but {} holds \
                         {:?} of shape {:?} ({}-byte items)",
                        g.name,
                        g.shape,
                        g.dtype.itemsize(),
                        self.names[0],
                        w.name,
                        w.shape,
                        w.dtype.itemsize()
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Index for Shards {
    fn len(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    /// A shard's own (each batch is executed with its first part's); HDF5's until one opens.
    fn faults(&self) -> Faults {
        let open = self.lock();
        match open.shards.values().next() {
            Some((index, _)) => index.faults(),
            None => Faults::both(ErrorKind::Decode),
        }
    }

    fn files(&self) -> &dyn Files {
        &NoFiles
    }

    fn threads(&self) -> Option<usize> {
        self.threads
    }

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        let bytes: usize = arrays
            .iter()
            .filter_map(|&a| self.arrays.get(a))
            .map(ArraySpec::sample_bytes)
            .sum();
        Work::new(rows, (rows as u64).saturating_mul(bytes as u64))
    }

    fn plan(&self, _rows: &Rows, _arrays: &[usize], _plan: &mut Plan) -> Result<()> {
        Err(Error::new(
            ErrorKind::Internal,
            self.location.as_str(),
            "internal planning error: a sharded index is planned shard by shard",
        ))
    }

    fn split(&self, rows: &Rows) -> Result<Option<Vec<Part>>> {
        // Shards in the order the batch first touches them; rows kept in batch order.
        let mut order: Vec<usize> = Vec::new();
        let mut by_shard: HashMap<usize, (Vec<usize>, Vec<usize>)> = HashMap::new();
        for (at, &row) in rows.as_slice().iter().enumerate() {
            let k = self.shard_of(row);
            let entry = by_shard.entry(k).or_insert_with(|| {
                order.push(k);
                Default::default()
            });
            entry.0.push(row - self.starts[k]);
            entry.1.push(at);
        }
        let mut parts = Vec::with_capacity(order.len());
        for k in order {
            let (local, at) = by_shard.remove(&k).unwrap_or_default();
            parts.push(Part {
                part: k,
                rows: Rows {
                    rows: local,
                    epoch: rows.epoch(),
                },
                at,
            });
        }
        Ok(Some(parts))
    }

    fn part(&self, k: usize) -> Result<Arc<dyn Index>> {
        self.shard(k)
    }

    /// A batch over more shards than may be open is read `max_open` shards at a time.
    fn parts_at_once(&self) -> usize {
        self.lock().max
    }

    /// Whether the shards are objects in object storage (every shard is of one kind: an open
    /// one tells).
    fn waits(&self) -> bool {
        let open = self.lock();
        open.shards
            .values()
            .next()
            .is_some_and(|(index, _)| index.waits())
    }

    fn locate(&self, _tag: Tag, error: Error) -> Error {
        error
    }
}
