//! Many files of one format as one index: the shards' samples one after another, in the
//! order given. A shard is opened only when a batch first touches it (its length is known
//! before: given, from an index file, or counted once when the reader is made), and at most
//! `max_open` stay open; the least recently used is closed first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::parts::Part;
use super::pool::{self, Work};
use super::{check_outputs, check_ragged, run, ArraySpec, Batches, Index, Plan, RaggedBatch, Rows};
use crate::error::{Error, ErrorKind, Result};

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

    /// A shard must hold the samples counted for it, and the arrays of the whole (the opener
    /// has said how one differs; this is the engine's own check that writes stay in place).
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
        if want > 0 && index.arrays() != self.arrays.as_slice() {
            return Err(Error::new(
                ErrorKind::Inconsistent,
                name.as_str(),
                format!(
                    "shard {k} holds other arrays than {} ({:?}, not {:?})",
                    self.names[0],
                    index.arrays(),
                    self.arrays
                ),
            ));
        }
        Ok(())
    }
}

impl Shards {
    /// Splits `rows` by shard: the shards in the order the batch first touches them, each
    /// with its rows (kept in batch order) and their places in the batch.
    fn split(&self, rows: &Rows) -> Vec<Part> {
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
        order
            .into_iter()
            .map(|k| {
                let (local, at) = by_shard.remove(&k).unwrap_or_default();
                Part {
                    part: k,
                    rows: Rows::of(local, rows.epoch()),
                    at,
                }
            })
            .collect()
    }

    /// A batch over more shards than may be open is read this many shards at a time, each
    /// group's shards let go before the next opens.
    fn at_once(&self) -> usize {
        self.lock().max.max(1)
    }
}

impl Batches for Shards {
    fn len(&self) -> usize {
        self.starts[self.starts.len() - 1]
    }

    fn arrays(&self) -> &[ArraySpec] {
        &self.arrays
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn threads(&self) -> Option<usize> {
        self.threads
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

    fn work(&self, rows: usize, arrays: &[usize]) -> Work {
        let bytes: usize = arrays
            .iter()
            .filter_map(|&a| self.arrays.get(a))
            .map(ArraySpec::sample_bytes)
            .sum();
        Work::new(rows, (rows as u64).saturating_mul(bytes as u64))
    }

    /// Each shard's rows are planned by the shard, and the plans run as one, so that shards
    /// are read in parallel with each other; a group of shards at a time.
    fn read(&self, rows: &Rows, arrays: &[usize], outs: &mut [&mut [u8]]) -> Result<()> {
        for &a in arrays {
            if self.arrays.get(a).is_some_and(|s| s.ragged.is_some()) {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    self.location.as_str(),
                    format!(
                        "{:?} holds samples of different sizes: they are read as a ragged \
                         batch",
                        self.arrays[a].name
                    ),
                ));
            }
        }
        pool::install_with(self.threads, || {
            check_outputs(&self.arrays, rows.len(), arrays, outs)?;
            crate::stats::count(crate::stats::Event::Batches, 1);
            let parts = self.split(rows);
            for group in parts.chunks(self.at_once()) {
                let opened = group
                    .iter()
                    .map(|part| self.shard(part.part))
                    .collect::<Result<Vec<_>>>()?;
                let mut planned = Vec::with_capacity(group.len());
                for (part, index) in group.iter().zip(&opened) {
                    let mut plan = Plan::default();
                    let timer = crate::stats::start();
                    index.plan(&part.rows, arrays, &mut plan)?;
                    timer.stop(crate::stats::Stage::Plan, part.rows.len());
                    planned.push(run::Planned {
                        index: &**index,
                        rows: &part.rows,
                        at: Some(&part.at),
                        plan,
                    });
                }
                run::run_plans(planned, arrays, outs)?;
            }
            Ok(())
        })
    }

    /// Each shard reads its rows, and the batches are put together in the batch's order.
    fn read_ragged(&self, rows: &Rows, array: usize) -> Result<RaggedBatch> {
        check_ragged(&self.arrays, &self.location, array)?;
        pool::install_with(self.threads, || {
            let parts = self.split(rows);
            let mut read = Vec::with_capacity(parts.len());
            for group in parts.chunks(self.at_once()) {
                for part in group {
                    let index = self.shard(part.part)?;
                    read.push((index.read_ragged(&part.rows, array)?, part.at.as_slice()));
                }
            }
            RaggedBatch::assemble(&read, rows.len())
        })
    }
}
