//! A bounded cache of decoded chunks, so that chunks holding several samples are decoded once
//! across consecutive batches (sequential access). It never blocks: a contended or poisoned
//! lock (say, in a child forked while another thread held it) is simply a miss.
//!
//! Least recently used goes first: every entry carries the tick of its last use, and an ordered
//! map from tick to key finds the oldest in O(log n) (a small cache budget over small chunks
//! can hold many thousands of entries).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// (dataset, linear chunk position)
pub(super) type ChunkKey = (u32, u64);

/// Decoded chunks of one [`Hdf5File`](super::Hdf5File), keyed by dataset and chunk position,
/// at most `budget` bytes of them; shared by the threads of a batch, never blocking them.
pub(crate) struct ChunkCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ChunkKey, (Arc<[u8]>, u64)>,
    /// Tick of last use -> key, one per entry.
    by_use: BTreeMap<u64, ChunkKey>,
    bytes: usize,
    tick: u64,
    /// Recent lookups of chunks holding several samples, and how many hit (both halved
    /// every [`RECENT`] lookups, so they follow the current access pattern).
    looks: u32,
    hits: u32,
    /// Chunks that a decode has already checked whole (any decode that succeeded: a whole one,
    /// or a prefix whose rest was walked), so a later prefix decode need not walk the rest.
    checked: HashSet<ChunkKey>,
}

/// Most chunks remembered as checked (16 bytes each); beyond, the set starts again.
const CHECKED_MAX: usize = 1 << 20;

/// Lookups after which the hit counts are halved.
const RECENT: u32 = 512;

impl Inner {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

impl ChunkCache {
    /// A cache holding at most `budget` bytes of decoded chunks (0 disables it).
    pub(crate) fn new(budget: usize) -> ChunkCache {
        ChunkCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether a chunk of `len` bytes may be cached at all.
    pub(crate) fn fits(&self, len: usize) -> bool {
        len > 0 && len <= self.budget
    }

    /// The decoded chunk `key`, at least `need` bytes of it (an entry may hold only the
    /// first part of a chunk), now the most recently used; `None` on a miss, when the cache
    /// is off, or when its lock is contended or poisoned.
    pub(crate) fn get(&self, key: ChunkKey, need: usize) -> Option<Arc<[u8]>> {
        if self.budget == 0 {
            return None;
        }
        let mut inner = self.inner.try_lock().ok()?;
        let inner = &mut *inner;
        inner.looks += 1;
        if inner.looks >= RECENT {
            inner.looks /= 2;
            inner.hits /= 2;
        }
        let tick = inner.next_tick();
        crate::stats::count(crate::stats::Event::ChunkLooks, 1);
        let entry = inner.entries.get_mut(&key)?;
        if entry.0.len() < need {
            return None;
        }
        crate::stats::count(crate::stats::Event::ChunkHits, 1);
        inner.hits += 1;
        inner.by_use.remove(&entry.1);
        inner.by_use.insert(tick, key);
        entry.1 = tick;
        Some(entry.0.clone())
    }

    /// Whether a chunk decoded now is unlikely to serve another batch: there is no cache, or
    /// recent lookups mostly missed (fewer than one in four hit, over at least 32: a random
    /// order across chunks). Decoding only the part this batch needs then saves more than
    /// keeping the chunk whole.
    pub(crate) fn mostly_misses(&self) -> bool {
        if self.budget == 0 {
            return true; // no cache: nothing is kept for another batch
        }
        match self.inner.try_lock() {
            Ok(inner) => inner.looks >= 32 && inner.hits * 4 < inner.looks,
            Err(_) => false,
        }
    }

    /// Whether a decode of chunk `key` has succeeded before (see [`ChunkCache::insert`]).
    pub(crate) fn was_checked(&self, key: ChunkKey) -> bool {
        self.inner
            .try_lock()
            .is_ok_and(|inner| inner.checked.contains(&key))
    }

    /// Adds a decoded chunk (whole, or its first part), evicting the least recently used until
    /// it fits; either way the chunk is remembered as checked (its decode succeeded).
    pub(crate) fn insert(&self, key: ChunkKey, bytes: Arc<[u8]>) {
        let Ok(mut inner) = self.inner.try_lock() else {
            return;
        };
        let inner = &mut *inner;
        if inner.checked.len() >= CHECKED_MAX {
            inner.checked.clear();
        }
        inner.checked.insert(key);
        if !self.fits(bytes.len()) {
            return;
        }
        if let Some((b, t)) = inner.entries.remove(&key) {
            inner.by_use.remove(&t);
            inner.bytes -= b.len();
        }
        while inner.bytes + bytes.len() > self.budget {
            let Some((_, old)) = inner.by_use.pop_first() else {
                break;
            };
            if let Some((b, _)) = inner.entries.remove(&old) {
                inner.bytes -= b.len();
            }
        }
        let tick = inner.next_tick();
        inner.bytes += bytes.len();
        inner.by_use.insert(tick, key);
        inner.entries.insert(key, (bytes, tick));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_budget() {
        let c = ChunkCache::new(10);
        c.insert((0, 1), Arc::from(vec![1u8; 4]));
        c.insert((0, 2), Arc::from(vec![2u8; 4]));
        assert!(c.get((0, 1), 0).is_some()); // 1 is now more recent than 2
        c.insert((0, 3), Arc::from(vec![3u8; 4]));
        assert!(c.get((0, 2), 0).is_none());
        assert_eq!(c.get((0, 1), 0).unwrap()[0], 1);
        assert_eq!(c.get((0, 3), 0).unwrap()[0], 3);
        c.insert((0, 4), Arc::from(vec![4u8; 11])); // larger than the budget: not kept
        assert!(c.get((0, 4), 0).is_none());
        let off = ChunkCache::new(0);
        off.insert((0, 1), Arc::from(vec![1u8; 1]));
        assert!(off.get((0, 1), 0).is_none());
    }

    #[test]
    fn many_entries_evict_in_use_order() {
        // 10k one-byte chunks in a 1000-byte cache: each insert past the budget evicts
        // exactly the least recently used, whichever was touched last.
        let c = ChunkCache::new(1000);
        for i in 0..10_000u64 {
            c.insert((0, i), Arc::from(vec![i as u8]));
            if i >= 500 && i % 2 == 0 {
                assert!(
                    c.get((0, i - 500), 0).is_some(),
                    "entry {} is still held",
                    i - 500
                );
            }
        }
        let inner = c.inner.lock().unwrap();
        assert_eq!(inner.bytes, 1000);
        assert_eq!(inner.entries.len(), 1000);
        assert_eq!(inner.by_use.len(), 1000);
        for (&t, k) in &inner.by_use {
            assert_eq!(inner.entries[k].1, t);
        }
        drop(inner);
        // The newest 1000 inserts, or entries refreshed since, are what is left.
        assert!(c.get((0, 9_999), 0).is_some());
        assert!(c.get((0, 8_000), 0).is_none());
        // Re-inserting a key replaces it (bytes counted once).
        c.insert((0, 9_999), Arc::from(vec![7u8]));
        assert_eq!(c.inner.lock().unwrap().bytes, 1000);
        assert_eq!(c.get((0, 9_999), 0).unwrap()[0], 7);
    }
}
