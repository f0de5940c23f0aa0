//! The order an epoch visits samples in: a permutation of `0..n` fixed by `(seed, epoch)`.
//!
//! The generator (SplitMix64), the bounded draw (Lemire's multiply-and-reject) and the shuffle
//! (Fisher-Yates) are written here rather than taken from a crate on purpose: the order is part
//! of a training run's saved state. A run resumed mid-epoch after a library upgrade must visit
//! exactly the samples it had not visited, so the sequence may never change with a dependency's
//! version (the `rand` crates, like numpy's `Generator`, do not promise stable streams).

/// SplitMix64 (Steele, Lea and Flood, 2014): 64 bits of state, passes BigCrush, and the whole
/// definition fits in five lines, so it can be pinned forever.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    /// The stream for one epoch of one seed.
    pub(crate) fn for_epoch(seed: u64, epoch: u64) -> SplitMix64 {
        let mut s = SplitMix64(seed);
        let mixed = s.next_u64();
        let mut e = SplitMix64(epoch ^ mixed);
        SplitMix64(e.next_u64())
    }

    /// The next 64 bits of the stream (the reference SplitMix64 step; pinned by a test).
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }

    /// Fisher-Yates: every permutation of `values` equally likely.
    pub(crate) fn shuffle<T>(&mut self, values: &mut [T]) {
        for i in (1..values.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            values.swap(i, j);
        }
    }
}

/// Fills `out` (length `n`) with a uniform permutation of `0..n`.
pub fn sample_order(seed: u64, epoch: u64, out: &mut [i64]) {
    for (i, v) in out.iter_mut().enumerate() {
        *v = i as i64;
    }
    SplitMix64::for_epoch(seed, epoch).shuffle(out);
}

/// Fills `out` (length `n`) with a permutation of `0..n` that keeps chunks together: the
/// chunks (runs of `chunk` consecutive samples, the last possibly shorter) are shuffled, then
/// cut into windows of `window` chunks, and the samples of each window are shuffled among
/// themselves. Reading in this order touches each chunk within one window only.
pub fn chunk_order(seed: u64, epoch: u64, chunk: usize, window: usize, out: &mut [i64]) {
    let n = out.len();
    let chunk = chunk.max(1);
    let window = window.max(1);
    let mut rng = SplitMix64::for_epoch(seed, epoch);
    let mut chunks: Vec<usize> = (0..n.div_ceil(chunk)).collect();
    rng.shuffle(&mut chunks);
    let mut at = 0;
    for group in chunks.chunks(window) {
        let start = at;
        for &c in group {
            for i in c * chunk..((c + 1) * chunk).min(n) {
                out[at] = i as i64;
                at += 1;
            }
        }
        rng.shuffle(&mut out[start..at]);
    }
    debug_assert_eq!(at, n);
}

/// How an epoch is cut in `"shard"` mode: the shards' lengths, and the batches, ranks and
/// workers they are dealt to.
#[derive(Debug, Clone, Copy)]
pub struct ShardLayout<'a> {
    /// Samples in each shard, in the reader's order.
    pub lengths: &'a [usize],
    /// Samples per batch.
    pub batch: usize,
    /// This rank, of `world`.
    pub rank: usize,
    /// Ranks.
    pub world: usize,
    /// Workers of each rank (1 when the rank reads in its own process).
    pub workers: usize,
    /// Whether the last, partial batches are dropped (else the epoch is padded by repeating).
    pub drop_last: bool,
    /// Shards whose samples are shuffled together.
    pub window: usize,
}

/// The samples rank `layout.rank` reads in one epoch in `"shard"` mode, in batch order
/// (batch `p` is `out[p * batch..]`), so that each worker reads few files at a time:
///
/// 1. the shards are permuted by `(seed, epoch)`, the same permutation on every rank;
/// 2. their samples, in that order, are cut into one contiguous run per rank of equal length
///    (`ceil(n / world)`, padded by repeating from the start; with `drop_last`, whole batches
///    only), as `"sample"` mode cuts its permutation;
/// 3. each rank's run is cut into one contiguous block per worker, as many samples as the
///    batches that worker reads (positions `w, w + workers, ...`);
/// 4. within each block, the samples of every `window` consecutive shards are shuffled.
///
/// Fewer shards holding samples than ranks x workers would have workers share shards or sit
/// idle, so it is an error.
pub fn shard_order(layout: &ShardLayout<'_>, seed: u64, epoch: u64) -> Result<Vec<i64>, String> {
    let ShardLayout {
        lengths,
        batch,
        rank,
        world,
        workers,
        drop_last,
        window,
    } = *layout;
    let (batch, world, workers, window) =
        (batch.max(1), world.max(1), workers.max(1), window.max(1));
    let filled = lengths.iter().filter(|&&n| n > 0).count();
    if filled < world * workers {
        return Err(format!(
            "shuffle_mode='shard' deals whole shards to {world} rank(s) x {workers} worker(s), \
             but only {filled} shard(s) hold samples; use shuffle_mode='sample', or fewer \
             workers"
        ));
    }
    let n: usize = lengths.iter().sum();
    let per_rank = if drop_last {
        (n / (world * batch)) * batch
    } else {
        n.div_ceil(world)
    };
    let mut starts = Vec::with_capacity(lengths.len());
    let mut at = 0usize;
    for &len in lengths {
        starts.push(at);
        at += len;
    }
    let mut shards: Vec<usize> = (0..lengths.len()).collect();
    SplitMix64::for_epoch(seed, epoch).shuffle(&mut shards);
    // This rank's run of the shard-ordered samples (cycled when padding): (shard, sample).
    let first = rank * per_rank;
    let mut run: Vec<(usize, i64)> = Vec::with_capacity(per_rank);
    let mut skip = first % n.max(1);
    'fill: while run.len() < per_rank {
        for &k in &shards {
            if skip >= lengths[k] {
                skip -= lengths[k];
                continue;
            }
            for i in starts[k] + skip..starts[k] + lengths[k] {
                if run.len() == per_rank {
                    break 'fill;
                }
                run.push((k, i as i64));
            }
            skip = 0;
        }
    }
    // Batch p has min(batch, per_rank - p * batch) samples and belongs to worker p % workers.
    let num_batches = if drop_last {
        per_rank / batch
    } else {
        per_rank.div_ceil(batch)
    };
    let size = |p: usize| batch.min(per_rank - p * batch);
    let mut blocks: Vec<Vec<i64>> = Vec::with_capacity(workers);
    let mut taken = 0;
    for w in 0..workers {
        let len: usize = (w..num_batches).step_by(workers).map(size).sum();
        let block = &run[taken..taken + len];
        taken += len;
        let mut rng = SplitMix64::for_epoch(
            seed ^ ((rank as u64) << 32 | w as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            epoch,
        );
        let mut out: Vec<i64> = block.iter().map(|&(_, i)| i).collect();
        // Windows of `window` runs of one shard each, shuffled within.
        let mut start = 0;
        while start < block.len() {
            let mut end = start;
            for _ in 0..window {
                let k = match block.get(end) {
                    Some(&(k, _)) => k,
                    None => break,
                };
                while block.get(end).is_some_and(|&(s, _)| s == k) {
                    end += 1;
                }
            }
            rng.shuffle(&mut out[start..end]);
            start = end;
        }
        blocks.push(out);
    }
    let mut order = Vec::with_capacity(per_rank);
    let mut next = vec![0usize; workers];
    for p in 0..num_batches {
        let w = p % workers;
        let len = size(p);
        order.extend_from_slice(&blocks[w][next[w]..next[w] + len]);
        next[w] += len;
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn is_permutation(v: &[i64]) -> bool {
        let mut s = v.to_vec();
        s.sort_unstable();
        s.iter().enumerate().all(|(i, &x)| x == i as i64)
    }

    #[test]
    fn pinned_sequence() {
        // The published SplitMix64 reference values for seed 0; the order of a saved run
        // depends on them never changing.
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut out = vec![0; 10];
        sample_order(7, 3, &mut out);
        assert_eq!(out, [7, 1, 0, 4, 3, 9, 5, 2, 8, 6]);
    }

    #[test]
    fn epochs_and_seeds_differ() {
        let mut a = vec![0; 1000];
        let mut b = vec![0; 1000];
        sample_order(1, 0, &mut a);
        sample_order(1, 1, &mut b);
        assert_ne!(a, b);
        sample_order(2, 0, &mut b);
        assert_ne!(a, b);
        sample_order(1, 0, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn below_is_uniform_enough() {
        let mut r = SplitMix64::for_epoch(9, 9);
        let mut counts = [0u32; 6];
        for _ in 0..60_000 {
            counts[r.below(6) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn chunk_windows_hold_whole_chunks() {
        let (n, chunk, window) = (100, 10, 3);
        let mut out = vec![0; n];
        chunk_order(5, 2, chunk, window, &mut out);
        assert!(is_permutation(&out));
        // Each window of 30 positions (the last shorter) holds the samples of at most 3 chunks.
        for w in out.chunks(chunk * window) {
            let mut ids: Vec<i64> = w.iter().map(|&i| i / chunk as i64).collect();
            ids.sort_unstable();
            ids.dedup();
            assert!(ids.len() <= window, "{ids:?}");
        }
    }

    fn layout(
        lengths: &[usize],
        batch: usize,
        rank: usize,
        world: usize,
        workers: usize,
        drop_last: bool,
        window: usize,
    ) -> ShardLayout<'_> {
        ShardLayout {
            lengths,
            batch,
            rank,
            world,
            workers,
            drop_last,
            window,
        }
    }

    #[test]
    fn shard_mode_reads_every_sample_once_across_ranks() {
        let lengths = [1, 7, 500, 3, 0, 40, 12];
        let n: usize = lengths.iter().sum();
        for world in 1..4 {
            for workers in 1..3 {
                let mut all = Vec::new();
                for rank in 0..world {
                    let l = layout(&lengths, 8, rank, world, workers, false, 2);
                    let got = shard_order(&l, 3, 1).unwrap();
                    assert_eq!(got.len(), n.div_ceil(world));
                    all.extend(got);
                }
                // Padding repeats samples from the start; without it, a permutation.
                let mut seen = all.clone();
                seen.sort_unstable();
                seen.dedup();
                assert_eq!(seen.len(), n, "world {world} workers {workers}");
                if n % world == 0 {
                    assert_eq!(all.len(), n);
                }
            }
        }
    }

    #[test]
    fn shard_mode_keeps_each_worker_on_few_shards() {
        let lengths = [50usize; 40];
        let l = layout(&lengths, 10, 0, 1, 2, false, 2);
        let order = shard_order(&l, 9, 0).unwrap();
        for (p, b) in order.chunks(10).enumerate() {
            let mut shards: Vec<i64> = b.iter().map(|&i| i / 50).collect();
            shards.sort_unstable();
            shards.dedup();
            // A window of 2 shards, plus one more where a batch crosses a window's end.
            assert!(shards.len() <= 4, "batch {p}: {shards:?}");
        }
        // Worker 0 reads even batches, worker 1 odd ones: their shards differ.
        let shards_of = |w: usize| -> std::collections::BTreeSet<i64> {
            order
                .chunks(10)
                .skip(w)
                .step_by(2)
                .flatten()
                .map(|&i| i / 50)
                .collect()
        };
        assert!(shards_of(0).is_disjoint(&shards_of(1)));
    }

    #[test]
    fn shard_mode_with_drop_last_gives_whole_batches() {
        let lengths = [5usize, 9, 13];
        let l = layout(&lengths, 4, 1, 2, 1, true, 1);
        let got = shard_order(&l, 0, 0).unwrap();
        assert_eq!(got.len(), 12);
    }

    #[test]
    fn too_few_shards_for_ranks_and_workers_is_an_error() {
        let lengths = [5usize, 0, 9];
        let l = layout(&lengths, 4, 0, 2, 2, false, 1);
        let e = shard_order(&l, 0, 0).unwrap_err();
        assert!(e.contains("shuffle_mode='sample'"), "{e}");
    }

    proptest! {
        #[test]
        fn orders_are_permutations(n in 0usize..500, chunk in 1usize..40, window in 1usize..8,
                                   seed: u64, epoch: u64) {
            let mut out = vec![-1; n];
            sample_order(seed, epoch, &mut out);
            prop_assert!(is_permutation(&out));
            chunk_order(seed, epoch, chunk, window, &mut out);
            prop_assert!(is_permutation(&out));
        }
    }
}
