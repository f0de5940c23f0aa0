//! A bounded cache of decoded chunks, so that chunks holding several samples are decoded once
//! across consecutive batches (sequential access). It never blocks: a contended or poisoned
//! lock (say, in a child forked while another thread held it) is simply a miss.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// (dataset, linear chunk position)
pub type ChunkKey = (u32, u64);

pub struct ChunkCache {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<ChunkKey, (Arc<[u8]>, u64)>,
    bytes: usize,
    tick: u64,
}

impl ChunkCache {
    /// A cache holding at most `budget` bytes of decoded chunks (0 disables it).
    pub fn new(budget: usize) -> ChunkCache {
        ChunkCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Whether a chunk of `len` bytes may be cached at all.
    pub fn fits(&self, len: usize) -> bool {
        len > 0 && len <= self.budget
    }

    pub fn get(&self, key: ChunkKey) -> Option<Arc<[u8]>> {
        if self.budget == 0 {
            return None;
        }
        let mut inner = self.inner.try_lock().ok()?;
        inner.tick += 1;
        let tick = inner.tick;
        let entry = inner.entries.get_mut(&key)?;
        entry.1 = tick;
        Some(entry.0.clone())
    }

    /// Adds a decoded chunk, evicting the least recently used until it fits.
    pub fn insert(&self, key: ChunkKey, bytes: Arc<[u8]>) {
        if !self.fits(bytes.len()) {
            return;
        }
        let Ok(mut inner) = self.inner.try_lock() else {
            return;
        };
        while inner.bytes + bytes.len() > self.budget {
            let Some((&old, _)) = inner.entries.iter().min_by_key(|(_, (_, t))| *t) else {
                break;
            };
            if let Some((b, _)) = inner.entries.remove(&old) {
                inner.bytes -= b.len();
            }
        }
        inner.tick += 1;
        let tick = inner.tick;
        inner.bytes += bytes.len();
        if let Some((b, _)) = inner.entries.insert(key, (bytes, tick)) {
            inner.bytes -= b.len();
        }
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
        assert!(c.get((0, 1)).is_some()); // 1 is now more recent than 2
        c.insert((0, 3), Arc::from(vec![3u8; 4]));
        assert!(c.get((0, 2)).is_none());
        assert_eq!(c.get((0, 1)).unwrap()[0], 1);
        assert_eq!(c.get((0, 3)).unwrap()[0], 3);
        c.insert((0, 4), Arc::from(vec![4u8; 11])); // larger than the budget: not kept
        assert!(c.get((0, 4)).is_none());
        let off = ChunkCache::new(0);
        off.insert((0, 1), Arc::from(vec![1u8; 1]));
        assert!(off.get((0, 1)).is_none());
    }
}
