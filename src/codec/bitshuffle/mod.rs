//! Bitshuffle (HDF5 filter 32008): bits transposed within blocks of elements, optionally
//! compressed per block with LZ4 or zstd. There is no maintained Rust crate for it, and the C
//! library is only shipped inside HDF5 plugins, so the framing and the bit transpose are
//! written here from the format (see `bshuf_h5filter.c` of the bitshuffle project):
//!
//! - uncompressed: blocks of `block` elements bit-transposed one after another, the last
//!   partial block rounded down to a multiple of 8 elements, the remaining `n % 8` elements
//!   copied raw;
//! - compressed: a big-endian u64 decoded size and u32 block size in bytes, then for every
//!   block a big-endian u32 compressed size and the block compressed, the last `n % 8`
//!   elements raw at the end.

use super::CodecError;
use super::{lz4::lz4_block, zstd::zstd_decompress};

/// The compressor inside bitshuffle (its `cd_values[4]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitshuffleInner {
    /// 0: the transposed blocks are stored as they are, with no header.
    None,
    /// 2: each transposed block is LZ4-compressed, after a size header.
    Lz4,
    /// 3: each transposed block is zstd-compressed, after a size header.
    Zstd,
}

/// The block size bitshuffle picks when its parameter is 0 (must match its
/// `bshuf_default_block_size` exactly: data was written with it).
pub(super) fn default_block(itemsize: usize) -> usize {
    ((8192 / itemsize.max(1)) / 8 * 8).max(128)
}

/// Which implementation of the bit transpose runs (all give the same bytes; tests run each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// 8x8 bit matrices in a u64, one group of 8 elements at a time.
    Scalar,
    /// 16 groups at a time (SSE2, part of every x86-64).
    Sse2,
    /// 32 groups at a time (AVX2, when the CPU has it).
    Avx2,
}

impl Kernel {
    /// The fastest this CPU runs (checked once; `is_x86_feature_detected` caches it).
    pub fn best() -> Kernel {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                return Kernel::Avx2;
            }
            Kernel::Sse2
        }
        #[cfg(not(target_arch = "x86_64"))]
        Kernel::Scalar
    }

    /// Every kernel this CPU can run, slowest first.
    pub fn available() -> Vec<Kernel> {
        let mut k = vec![Kernel::Scalar];
        if cfg!(target_arch = "x86_64") {
            k.push(Kernel::Sse2);
        }
        if Kernel::best() == Kernel::Avx2 {
            k.push(Kernel::Avx2);
        }
        k
    }
}

/// Undoes the bit transpose of `n = input.len() / itemsize` elements (`n` a multiple of 8):
/// row `8 * j + k` of the input (`n / 8` bytes) holds bit `k` of byte `j` of every element.
pub(super) fn bitunshuffle_block(input: &[u8], out: &mut [u8], itemsize: usize) {
    bitunshuffle_block_with(Kernel::best(), input, out, itemsize)
}

/// Undoes the bit transpose of one block of `input.len() / itemsize` elements (a multiple of
/// 8) into `out`, the same length, with a chosen kernel (one the CPU runs: see
/// [`Kernel::available`]).
pub fn bitunshuffle_block_with(kernel: Kernel, input: &[u8], out: &mut [u8], itemsize: usize) {
    assert_eq!(input.len(), out.len());
    let n = input.len() / itemsize;
    assert_eq!(n % 8, 0);
    let row = n / 8;
    let group = 8 * itemsize;
    for j in 0..itemsize {
        // The 8 bit rows of byte j, each `row` bytes (equal lengths let the loads below go
        // without bounds checks).
        let rows = &input[8 * j * row..8 * (j + 1) * row];
        let (r0, rest) = rows.split_at(row);
        let (r1, rest) = rest.split_at(row);
        let (r2, rest) = rest.split_at(row);
        let (r3, rest) = rest.split_at(row);
        let (r4, rest) = rest.split_at(row);
        let (r5, rest) = rest.split_at(row);
        let (r6, r7) = rest.split_at(row);
        let rows8 = [r0, r1, r2, r3, r4, r5, r6, r7];
        // The widest kernel takes what it can, the narrower ones the rest.
        let mut done = 0;
        #[cfg(target_arch = "x86_64")]
        {
            if kernel == Kernel::Avx2 {
                assert!(std::arch::is_x86_feature_detected!("avx2"));
                // SAFETY: the CPU has AVX2 (checked just above).
                done = unsafe { simd::untranspose_32_groups(&rows8, out, j, itemsize, done) };
            }
            if kernel != Kernel::Scalar {
                done = simd::untranspose_16_groups(&rows8, out, j, itemsize, done);
            }
        }
        for g in done..row {
            // Byte g of the 8 rows: an 8x8 bit matrix, transposed into 8 output bytes.
            let x = transpose_8x8(u64::from_le_bytes([
                r0[g], r1[g], r2[g], r3[g], r4[g], r5[g], r6[g], r7[g],
            ]))
            .to_le_bytes();
            let dst = &mut out[g * group..(g + 1) * group];
            if itemsize == 1 {
                dst.copy_from_slice(&x);
            } else {
                for (k, &b) in x.iter().enumerate() {
                    dst[k * itemsize + j] = b;
                }
            }
        }
    }
}

/// Writes the untransposed groups `g0..g0 + words.len()` (one u64 of 8 element bytes each) as
/// byte `j` of their elements.
#[inline(always)]
fn store_groups(words: &[u64], out: &mut [u8], g0: usize, j: usize, itemsize: usize) {
    if itemsize == 1 {
        let dst = &mut out[g0 * 8..(g0 + words.len()) * 8];
        for (d, w) in dst.chunks_exact_mut(8).zip(words) {
            d.copy_from_slice(&w.to_le_bytes());
        }
    } else {
        let group = 8 * itemsize;
        for (gi, w) in words.iter().enumerate() {
            let g = g0 + gi;
            let dst = &mut out[g * group..(g + 1) * group];
            for (k, b) in w.to_le_bytes().into_iter().enumerate() {
                dst[k * itemsize + j] = b;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd;

/// Transposes the 8x8 bit matrix held in `x` (byte `r` is row `r`, bit `c` column `c`).
fn transpose_8x8(mut x: u64) -> u64 {
    let mut t = (x ^ (x >> 7)) & 0x00AA_00AA_00AA_00AA;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000_CCCC_0000_CCCC;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x0000_0000_F0F0_F0F0;
    x ^ t ^ (t << 28)
}

fn be_u32(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// Decodes a bitshuffle chunk into exactly `out`. `block` is the block size in elements from
/// the filter parameters (0: the default); `tmp` is scratch reused across calls.
pub fn bitshuffle_decode(
    input: &[u8],
    out: &mut [u8],
    itemsize: usize,
    block: usize,
    inner: BitshuffleInner,
    tmp: &mut Vec<u8>,
) -> Result<(), CodecError> {
    if itemsize == 0 {
        return Err(CodecError::Params("bitshuffle: element size 0".into()));
    }
    if out.len() % itemsize != 0 {
        return Err(CodecError::Corrupt(format!(
            "bitshuffle: {} bytes is not a whole number of {itemsize}-byte elements",
            out.len()
        )));
    }
    let n = out.len() / itemsize;
    let (body, mut at, block) = match inner {
        BitshuffleInner::None => {
            if input.len() != out.len() {
                return Err(CodecError::Corrupt(format!(
                    "bitshuffle: {} stored bytes, expected {}",
                    input.len(),
                    out.len()
                )));
            }
            (
                input,
                0,
                if block == 0 {
                    default_block(itemsize)
                } else {
                    block
                },
            )
        }
        _ => {
            let head = input.get(..12).ok_or_else(|| {
                format!(
                    "bitshuffle: {} stored bytes, shorter than the 12-byte header",
                    input.len()
                )
            })?;
            let total = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
            if total != out.len() as u64 {
                return Err(CodecError::Corrupt(format!(
                    "bitshuffle: header says {total} decoded bytes, the chunk holds {}",
                    out.len()
                )));
            }
            let block_bytes = be_u32(head, 8).expect("4 bytes");
            if block_bytes == 0 || block_bytes % itemsize != 0 {
                return Err(CodecError::Corrupt(format!(
                    "bitshuffle: header block size {block_bytes} is not a positive multiple of {itemsize}"
                )));
            }
            (input, 12, block_bytes / itemsize)
        }
    };
    if block % 8 != 0 || block == 0 {
        return Err(CodecError::Corrupt(format!(
            "bitshuffle: block size {block} is not a positive multiple of 8"
        )));
    }
    let mut done = 0; // elements decoded
    while n - done >= 8 {
        let m = block.min((n - done) / 8 * 8);
        let dst = &mut out[done * itemsize..(done + m) * itemsize];
        let bytes = m * itemsize;
        match inner {
            BitshuffleInner::None => {
                bitunshuffle_block(&body[at..at + bytes], dst, itemsize);
                at += bytes;
            }
            _ => {
                let size = be_u32(body, at)
                    .ok_or_else(|| format!("bitshuffle: truncated at byte {at}"))?;
                at += 4;
                let src = at
                    .checked_add(size)
                    .and_then(|end| body.get(at..end))
                    .ok_or_else(|| {
                        format!(
                            "bitshuffle: block of {size} bytes at byte {at} runs past the {} stored",
                            body.len()
                        )
                    })?;
                if tmp.len() < bytes {
                    tmp.resize(bytes, 0);
                }
                let t = &mut tmp[..bytes];
                match inner {
                    BitshuffleInner::Lz4 => lz4_block(src, t)?,
                    _ => zstd_decompress(src, t)?,
                }
                bitunshuffle_block(t, dst, itemsize);
                at += size;
            }
        }
        done += m;
    }
    let rest = (n - done) * itemsize;
    let src = at
        .checked_add(rest)
        .and_then(|end| body.get(at..end))
        .ok_or_else(|| format!("bitshuffle: the last {rest} raw bytes run past the stored data"))?;
    out[done * itemsize..].copy_from_slice(src);
    at += rest;
    if at != body.len() {
        return Err(CodecError::Corrupt(format!(
            "bitshuffle: {} stored bytes after the data",
            body.len() - at
        )));
    }
    Ok(())
}

/// Bitshuffle's forward transform of one block, written the naive way (bit by bit): the
/// reference the decoder is tested against, and the encoder of tests and benchmarks.
#[doc(hidden)]
pub fn bitshuffle_block(input: &[u8], itemsize: usize) -> Vec<u8> {
    let n = input.len() / itemsize;
    let row = n / 8;
    let mut out = vec![0u8; input.len()];
    for i in 0..n {
        for j in 0..itemsize {
            for k in 0..8 {
                let bit = (input[i * itemsize + j] >> k) & 1;
                out[(8 * j + k) * row + i / 8] |= bit << (i % 8);
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::lz4::lz4_compress_block;

    pub(crate) fn encode(
        data: &[u8],
        itemsize: usize,
        block: usize,
        inner: BitshuffleInner,
    ) -> Vec<u8> {
        let n = data.len() / itemsize;
        let mut out = Vec::new();
        if inner != BitshuffleInner::None {
            out.extend((data.len() as u64).to_be_bytes());
            out.extend(((block * itemsize) as u32).to_be_bytes());
        }
        let mut done = 0;
        while n - done >= 8 {
            let m = block.min((n - done) / 8 * 8);
            let t = bitshuffle_block(&data[done * itemsize..(done + m) * itemsize], itemsize);
            match inner {
                BitshuffleInner::None => out.extend(t),
                BitshuffleInner::Lz4 => {
                    let c = lz4_compress_block(&t);
                    out.extend((c.len() as u32).to_be_bytes());
                    out.extend(c);
                }
                BitshuffleInner::Zstd => {
                    let c = zstd::bulk::compress(&t, 3).unwrap();
                    out.extend((c.len() as u32).to_be_bytes());
                    out.extend(c);
                }
            }
            done += m;
        }
        out.extend(&data[done * itemsize..]);
        out
    }

    #[test]
    fn round_trips_for_every_size_and_inner_codec() {
        let mut tmp = Vec::new();
        for itemsize in [1usize, 2, 3, 4, 8, 16] {
            for n in [0usize, 5, 8, 13, 128, 1000, 2051] {
                let data: Vec<u8> = (0..n * itemsize).map(|i| (i * 37 % 251) as u8).collect();
                for inner in [
                    BitshuffleInner::None,
                    BitshuffleInner::Lz4,
                    BitshuffleInner::Zstd,
                ] {
                    for block in [8usize, 128, default_block(itemsize)] {
                        let enc = encode(&data, itemsize, block, inner);
                        let mut out = vec![0x5A; data.len()];
                        let param = if inner == BitshuffleInner::None {
                            block
                        } else {
                            0
                        };
                        bitshuffle_decode(&enc, &mut out, itemsize, param, inner, &mut tmp)
                            .unwrap();
                        assert_eq!(
                            out, data,
                            "itemsize {itemsize} n {n} {inner:?} block {block}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn every_kernel_matches_the_bitwise_reference() {
        let kernels = Kernel::available();
        assert!(kernels.contains(&Kernel::Scalar));
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        for itemsize in [1usize, 2, 3, 4, 8, 16] {
            // Group counts around the 16- and 32-group steps of the SIMD kernels.
            for groups in [1usize, 15, 16, 17, 31, 32, 33, 48, 64, 65, 200, 1024] {
                let n = 8 * groups;
                let data: Vec<u8> = (0..n * itemsize)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng as u8
                    })
                    .collect();
                let shuffled = bitshuffle_block(&data, itemsize);
                for &k in &kernels {
                    let mut out = vec![0xA5; data.len()];
                    bitunshuffle_block_with(k, &shuffled, &mut out, itemsize);
                    assert_eq!(out, data, "{k:?} itemsize {itemsize} groups {groups}");
                }
            }
        }
    }

    #[test]
    fn bad_chunks_are_errors() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i % 7) as u8).collect();
        let mut tmp = Vec::new();
        let mut out = vec![0u8; data.len()];
        let enc = encode(&data, 4, 256, BitshuffleInner::Lz4);
        let lz4 = BitshuffleInner::Lz4;
        assert!(bitshuffle_decode(&enc[..enc.len() - 1], &mut out, 4, 0, lz4, &mut tmp).is_err());
        assert!(bitshuffle_decode(&enc[..8], &mut out, 4, 0, lz4, &mut tmp).is_err());
        assert!(bitshuffle_decode(&enc, &mut out[..4092], 4, 0, lz4, &mut tmp).is_err());
        let mut bad = enc.clone();
        bad[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(bitshuffle_decode(&bad, &mut out, 4, 0, lz4, &mut tmp).is_err());
        let mut bad = enc.clone();
        bad[8..12].copy_from_slice(&12u32.to_be_bytes()); // 3 elements: not a multiple of 8
        assert!(bitshuffle_decode(&bad, &mut out, 4, 0, lz4, &mut tmp).is_err());
        let mut bad = enc;
        bad[8..12].fill(0);
        assert!(bitshuffle_decode(&bad, &mut out, 4, 0, lz4, &mut tmp).is_err());
        let none = BitshuffleInner::None;
        assert!(bitshuffle_decode(&data[1..], &mut out, 4, 0, none, &mut tmp).is_err());
        assert!(bitshuffle_decode(&data, &mut out, 4, 12, none, &mut tmp).is_err());
        assert!(bitshuffle_decode(&data, &mut out, 0, 0, none, &mut tmp).is_err());
    }
}
