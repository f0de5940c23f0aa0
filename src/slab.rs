//! The state word of a batch buffer shared by two processes (a DataLoader worker writes a
//! batch into it, the main process reads it): one `u32` at the start of the shared memory,
//! changed only atomically by both, so that a buffer is never written while the other process
//! may still read it. The binding (`py/buffers.rs`) keeps the memory and the numpy views;
//! the protocol is here, tested without Python.
//!
//! - The worker [`claim`](SlabState::claim)s the slab before writing a batch into it (only
//!   when nobody holds it), and sends the batch; or [`release`](SlabState::release)s it if the
//!   read failed and nothing was sent.
//! - The main process, after mapping the slab once, marks it
//!   [`register`](SlabState::register)ed; when the last view of a batch it received is gone,
//!   it [`release`](SlabState::release)s the slab to the worker.
//! - The main process may [`evict`](SlabState::evict) its mapping of a slab no worker holds.

use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes before a shared slab's arrays: its state word, padded to a cache line.
pub const SLAB_HEADER: usize = 64;
/// A worker has claimed the slab: it is being written, in flight, or viewed by the main
/// process.
pub const BUSY: u32 = 1;
/// The main process holds a mapping of the slab (tickets may name it by id).
pub const REGISTERED: u32 = 2;

/// The state word of one shared slab.
#[derive(Clone, Copy)]
pub struct SlabState<'a>(&'a AtomicU32);

impl<'a> SlabState<'a> {
    /// The state word `word` (the first bytes of the slab).
    pub fn new(word: &'a AtomicU32) -> SlabState<'a> {
        SlabState(word)
    }

    /// Claims the slab for writing (worker side): `None` if it is busy, else whether the main
    /// process holds a mapping of it. Acquire: every read of the previous batch in the main
    /// process happened before this claim's writes.
    pub fn claim(self) -> Option<bool> {
        let mut now = self.0.load(Ordering::Acquire);
        loop {
            if now & BUSY != 0 {
                return None;
            }
            match self
                .0
                .compare_exchange_weak(now, now | BUSY, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(now & REGISTERED != 0),
                Err(seen) => now = seen,
            }
        }
    }

    /// Gives the slab back: the main process's last view of its batch is gone, or the worker
    /// gives up a claim whose batch was never sent. Release: every read of the batch happens
    /// before the next claim's writes.
    pub fn release(self) {
        self.0.fetch_and(!BUSY, Ordering::Release);
    }

    /// Records that the main process holds a mapping of the slab (main side).
    pub fn register(self) {
        self.0.fetch_or(REGISTERED, Ordering::AcqRel);
    }

    /// Forgets the main process's mapping if no worker holds the slab (main side): whether
    /// the mapping may be dropped now.
    pub fn evict(self) -> bool {
        self.0
            .compare_exchange(REGISTERED, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The word: [`BUSY`] and [`REGISTERED`] bits.
    pub fn load(self) -> u32 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn a_claimed_slab_is_not_claimed_again_until_released() {
        let word = AtomicU32::new(0);
        let s = SlabState::new(&word);
        assert_eq!(s.claim(), Some(false));
        assert_eq!(s.claim(), None);
        s.register();
        assert!(!s.evict(), "a busy slab's mapping stays");
        s.release();
        assert_eq!(s.load(), REGISTERED);
        assert_eq!(
            s.claim(),
            Some(true),
            "the worker learns the main process maps it"
        );
        s.release();
        assert!(s.evict());
        assert_eq!(s.load(), 0);
    }

    /// A worker and a reader pass one slab back and forth: every batch the reader sees is
    /// whole (never half rewritten), and every batch is seen.
    #[test]
    fn writer_and_reader_never_overlap() {
        let word = Arc::new(AtomicU32::new(0));
        let data = Arc::new([const { AtomicU64::new(0) }; 16]);
        let sent = Arc::new(AtomicU64::new(0));
        let rounds = 20_000u64;
        let writer = {
            let (word, data, sent) = (word.clone(), data.clone(), sent.clone());
            std::thread::spawn(move || {
                let s = SlabState::new(&word);
                let mut k = 1;
                while k <= rounds {
                    if s.claim().is_none() {
                        std::hint::spin_loop();
                        continue;
                    }
                    for d in data.iter() {
                        d.store(k, Ordering::Relaxed);
                    }
                    sent.store(k, Ordering::Release);
                    k += 1;
                }
            })
        };
        let s = SlabState::new(&word);
        let mut seen = 0;
        while seen < rounds {
            let k = sent.load(Ordering::Acquire);
            if k == seen {
                std::hint::spin_loop();
                continue;
            }
            assert_eq!(k, seen + 1, "a batch was overwritten before it was read");
            for d in data.iter() {
                assert_eq!(d.load(Ordering::Relaxed), k, "a batch changed while read");
            }
            seen = k;
            s.release();
        }
        writer.join().unwrap();
    }
}
