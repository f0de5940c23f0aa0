//! b2nd arrays in blosc2 frames (n-d HDF5 chunks): their metalayer, checked, and their
//! blocks put back in C order by safe code that cannot write outside the output.

use super::super::CodecError;
use super::frame::{corrupt, positive, Cursor, MAX_DIM};

/// A b2nd array's geometry (its metalayer), checked: rank 1 to 8, every extent positive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct B2nd {
    pub shape: Vec<usize>,
    pub chunkshape: Vec<usize>,
    pub blockshape: Vec<usize>,
}

impl B2nd {
    /// Chunk shape rounded up to whole blocks: what each stored chunk decodes to.
    pub(super) fn ext_chunkshape(&self) -> Vec<usize> {
        self.chunkshape
            .iter()
            .zip(&self.blockshape)
            .map(|(&c, &b)| c.div_ceil(b) * b)
            .collect()
    }

    /// Chunks along each dimension.
    pub(super) fn chunk_grid(&self) -> Vec<usize> {
        self.shape
            .iter()
            .zip(&self.chunkshape)
            .map(|(&s, &c)| s.div_ceil(c))
            .collect()
    }
}

pub(super) fn checked_product(dims: &[usize], itemsize: usize) -> Option<usize> {
    dims.iter().try_fold(itemsize, |acc, &d| acc.checked_mul(d))
}

/// The C-order coordinates of linear position `i` on a grid.
pub(super) fn unravel(mut i: usize, grid: &[usize]) -> Vec<usize> {
    let mut coord = vec![0; grid.len()];
    for d in (0..grid.len()).rev() {
        coord[d] = i % grid[d];
        i /= grid[d];
    }
    coord
}

/// Copies the blocks of one decoded chunk (at chunk-grid coordinates `chunk`) to their places in
/// the C-order array `out`, leaving out what lies past the array's edge (padding). Every index
/// is bounded by the checked geometry, and slices check the rest.
///
/// A stored chunk is always its blocks one after another (c-blosc2 >= 2.21.2, as hdf5plugin
/// and PyTables write today, stores a whole chunk as it is only when that is the same bytes;
/// earlier versions also did so for some block shapes where it is not, files their own newer
/// versions misread as well).
pub(super) fn untile_chunk(
    b: &B2nd,
    typesize: usize,
    chunk: &[usize],
    decoded: &[u8],
    out: &mut [u8],
) {
    let nd = b.shape.len();
    let ext = b.ext_chunkshape();
    let mut block_grid = [1usize; MAX_DIM];
    let (mut ostride, mut bstride) = ([1usize; MAX_DIM], [1usize; MAX_DIM]);
    for d in (0..nd).rev() {
        block_grid[d] = ext[d] / b.blockshape[d];
        if d + 1 < nd {
            ostride[d] = ostride[d + 1] * b.shape[d + 1];
            bstride[d] = bstride[d + 1] * b.blockshape[d + 1];
        }
    }
    let nblocks: usize = block_grid[..nd].iter().product();
    let block_bytes: usize = b.blockshape.iter().product::<usize>() * typesize;
    let (mut block, mut origin, mut inside) = ([0usize; MAX_DIM], [0usize; MAX_DIM], [0; MAX_DIM]);
    for k in 0..nblocks {
        // The block's grid coordinates (C order), its first element in the array, and how much
        // of it lies inside both its chunk (not padding) and the array.
        let mut rest = k;
        for d in (0..nd).rev() {
            block[d] = rest % block_grid[d];
            rest /= block_grid[d];
            origin[d] = chunk[d] * b.chunkshape[d] + block[d] * b.blockshape[d];
            let in_chunk = b.chunkshape[d].saturating_sub(block[d] * b.blockshape[d]);
            let in_array = b.shape[d].saturating_sub(origin[d]);
            inside[d] = b.blockshape[d].min(in_chunk).min(in_array);
        }
        if inside[..nd].contains(&0) {
            continue;
        }
        let src_block = &decoded[k * block_bytes..(k + 1) * block_bytes];
        let run = inside[nd - 1] * typesize;
        if nd == 1 {
            let dst = origin[0] * typesize;
            out[dst..dst + run].copy_from_slice(&src_block[..run]);
            continue;
        }
        // Rows along the second-to-last dimension are copied in the inner loop (offsets
        // stepped, not recomputed); an odometer counts the dimensions before it.
        let inner = nd - 2;
        let (src_step, dst_step) = (bstride[inner] * typesize, ostride[inner] * typesize);
        let mut outer = [0usize; MAX_DIM];
        'outer: loop {
            let (mut src, mut dst) = (0usize, origin[nd - 1]);
            for d in 0..inner {
                src += outer[d] * bstride[d];
                dst += (origin[d] + outer[d]) * ostride[d];
            }
            let (src, dst) = (
                src * typesize,
                (dst + origin[inner] * ostride[inner]) * typesize,
            );
            let dst_rows = out[dst..].chunks_mut(dst_step).take(inside[inner]);
            for (o, i) in dst_rows.zip(src_block[src..].chunks(src_step)) {
                o[..run].copy_from_slice(&i[..run]);
            }
            let mut d = inner;
            loop {
                if d == 0 {
                    break 'outer;
                }
                d -= 1;
                outer[d] += 1;
                if outer[d] < inside[d] {
                    break;
                }
                outer[d] = 0;
            }
        }
    }
}

/// Parses the b2nd metalayer: `[version, ndim, shape, chunkshape, blockshape, ...]`.
pub(super) fn b2nd_meta(meta: &[u8], typesize: usize) -> Result<B2nd, CodecError> {
    let c = Cursor {
        bytes: meta,
        part: "b2nd metalayer",
    };
    let head = c.take(0, 3)?;
    if head[0] & 0xF0 != 0x90 {
        return Err(corrupt("b2nd metalayer is not an array"));
    }
    let nd = usize::from(head[2]);
    if !(1..=MAX_DIM).contains(&nd) {
        return Err(corrupt(format!("b2nd array of rank {nd} (1 to {MAX_DIM})")));
    }
    let mut at = 3;
    let mut dims = |width: usize, what: &str| -> Result<Vec<usize>, CodecError> {
        if c.take(at, 1)?[0] != 0x90 | nd as u8 {
            return Err(corrupt(format!("b2nd {what} does not have {nd} entries")));
        }
        at += 1;
        let mut v = Vec::with_capacity(nd);
        for _ in 0..nd {
            let x = if width == 8 {
                c.long(at, what)?
            } else {
                c.int(at, what)?
            };
            at += 1 + width;
            v.push(positive(x, &format!("a b2nd {what} extent"))?);
        }
        Ok(v)
    };
    let shape = dims(8, "shape")?;
    let chunkshape = dims(4, "chunk shape")?;
    let blockshape = dims(4, "block shape")?;
    // The dtype (c-blosc2 allocates and copies the length it claims): a format number and a
    // str32, ending the metalayer. Not needed to decode, but damage here is damage.
    if at < meta.len() {
        let format = c.take(at, 1)?[0];
        let len = u32::from_be_bytes(c.be::<4>(at + 1, 0xdb, "the dtype")?) as usize;
        if format >= 0x80 || at + 6 + len != meta.len() {
            return Err(corrupt(format!(
                "b2nd metalayer: a dtype of {len} bytes in the {} left",
                meta.len() - at - 6
            )));
        }
    }
    if blockshape.iter().zip(&chunkshape).any(|(b, c)| b > c) {
        return Err(corrupt(format!(
            "b2nd blocks {blockshape:?} larger than chunks {chunkshape:?}"
        )));
    }
    let b = B2nd {
        shape,
        chunkshape,
        blockshape,
    };
    if checked_product(&b.shape, typesize).is_none()
        || checked_product(&b.ext_chunkshape(), typesize).is_none()
    {
        return Err(corrupt("b2nd shape overflows"));
    }
    Ok(b)
}
