//! A batch's reads of HDF5 datasets: per dataset, contiguous rows, fill values, or the chunks
//! the tiling says the rows need (straight into the output, via the chunk cache, or scattered),
//! each chunk's filters undone in reverse order as its mask says.

use super::meta::{ChunkLoc, Layout};
use super::select::ReadPath;
use super::Hdf5File;
use crate::batch::tiling::ChunkRead;
use crate::batch::{After, Dest, Extent, Plan, Tag};
use crate::codec::{ChunkDecoder, Pipeline, Step};
use crate::error::Result;

fn fill_extent(fill: &[u8], len: usize, slot: usize, dest: Dest) -> Extent {
    Extent {
        file: 0,
        offset: 0,
        stored_len: 0,
        pipeline: Pipeline::new(vec![Step::Fill(fill.into())]),
        decoded_len: len,
        out: slot as u32,
        dest,
    }
}

/// The extent decoding one stored chunk (its filters undone as its mask says).
fn chunk_extent(loc: ChunkLoc, decoder: &ChunkDecoder, chunk_bytes: usize, slot: usize) -> Extent {
    Extent {
        file: 0,
        offset: loc.addr,
        stored_len: loc.size as usize,
        pipeline: decoder.pipeline(loc.mask),
        decoded_len: chunk_bytes,
        out: slot as u32,
        dest: Dest::At(0),
    }
}

impl Hdf5File {
    /// Plans the reads of dataset `w` for `rows` into output `slot`.
    pub(super) fn plan_dataset(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let sb = ds.sample_bytes;
        match &ds.path {
            ReadPath::Contiguous(addr) => {
                for (k, &i) in rows.iter().enumerate() {
                    let mut e = Extent::raw(0, addr + (i * sb) as u64, sb, Dest::At(k * sb));
                    e.out = slot as u32;
                    plan.push(e, Tag::new(w as u32, addr + (i * sb) as u64));
                }
            }
            ReadPath::Fill => {
                for k in 0..rows.len() {
                    plan.push(
                        fill_extent(&ds.meta.fill, sb, slot, Dest::At(k * sb)),
                        Tag::new(w as u32, 0),
                    );
                }
            }
            ReadPath::Chunked { decoder } => self.plan_chunked(w, slot, rows, decoder, plan)?,
            ReadPath::Library(_) | ReadPath::Unreadable(_) => unreachable!("planned elsewhere"),
        }
        Ok(())
    }

    fn plan_chunked(
        &self,
        w: usize,
        slot: usize,
        rows: &[usize],
        decoder: &ChunkDecoder,
        plan: &mut Plan,
    ) -> Result<()> {
        let ds = &self.datasets[w];
        let Layout::Chunked { chunk, chunks, .. } = &ds.meta.layout else {
            unreachable!("chunked read path on a chunked layout");
        };
        let sb = ds.sample_bytes;
        let c0 = chunk[0];
        let exact = ds.tiling.is_exact();
        for ChunkRead {
            linear,
            uses,
            pieces,
        } in ds.tiling.reads(rows)
        {
            let key = (w as u32, linear);
            // The decoded bytes the batch needs from the chunk: its rows' runs end here.
            let need = pieces.iter().map(|p| p.src + p.len).max().unwrap_or(0);
            if let Some(bytes) = self.cache.get(key, need) {
                plan.after.push(After::Copy {
                    out: slot,
                    bytes,
                    pieces,
                });
                continue;
            }
            let loc = chunks.get(&linear).copied();
            let mut extent = match loc {
                None => fill_extent(&ds.meta.fill, ds.chunk_bytes, slot, Dest::At(0)),
                Some(loc) => chunk_extent(loc, decoder, ds.chunk_bytes, slot),
            };
            let addr = loc.map_or(0, |l| l.addr);
            if exact && uses.len() == 1 {
                extent.dest = Dest::At(uses[0].0 * sb);
                plan.push(extent, Tag::new(w as u32, addr));
                continue;
            }
            // A chunk of several samples read in a random order (the cache mostly misses):
            // decode only up to the last row this batch needs, where the codec can stop.
            let mut len = ds.chunk_bytes;
            if loc.is_some() && need < len && self.cache.mostly_misses() {
                if let Some(prefix) = extent.pipeline.prefix(len, self.cache.was_checked(key)) {
                    extent.pipeline = prefix;
                    extent.decoded_len = need;
                    len = need;
                }
            }
            if c0 > 1 && loc.is_some() && self.cache.fits(len) {
                // Holds several samples: decode once, keep it for the next batch.
                plan.after.push(After::Keep {
                    extent: plan.extents.len(),
                    len,
                    out: slot,
                    pieces,
                    key: Tag::new(key.0, key.1),
                });
                extent.dest = Dest::At(0);
            } else {
                extent.dest = Dest::Scatter(pieces);
            }
            plan.push(extent, Tag::new(w as u32, addr));
        }
        Ok(())
    }
}
