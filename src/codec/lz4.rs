//! LZ4 as HDF5 stores it (filter 32004): a big-endian u64 total size and u32 block size, then
//! per block a big-endian u32 compressed size and the block (stored raw when that size equals
//! the block's decoded size). Blocks are decoded by liblz4's `LZ4_decompress_safe` (the
//! `lz4-sys` crate, the same library c-blosc links), which bounds both its reads and writes.

use super::CodecError;
use std::ffi::c_char;

/// Decodes one raw LZ4 block into exactly `out`.
pub fn lz4_block(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let (Ok(n_in), Ok(n_out)) = (i32::try_from(input.len()), i32::try_from(out.len())) else {
        return Err("lz4: block larger than 2 GiB".into());
    };
    if out.is_empty() {
        return if input == [0] || input.is_empty() {
            Ok(())
        } else {
            Err("lz4: data for an empty block".into())
        };
    }
    // SAFETY: liblz4 reads at most `n_in` bytes of `input` and writes at most `n_out` bytes.
    let n = unsafe {
        lz4_sys::LZ4_decompress_safe(
            input.as_ptr().cast::<c_char>(),
            out.as_mut_ptr().cast::<c_char>(),
            n_in,
            n_out,
        )
    };
    if n != n_out {
        return Err(CodecError::Corrupt(if n < 0 {
            "lz4: corrupt block".to_string()
        } else {
            format!("lz4: block decodes to {n} bytes, expected {n_out}")
        }));
    }
    Ok(())
}

fn be_u32(b: &[u8], at: usize) -> Option<usize> {
    b.get(at..at + 4)
        .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize)
}

/// Decodes an HDF5 LZ4 chunk into exactly `out`.
pub fn lz4_hdf5(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let head = input.get(..12).ok_or_else(|| {
        format!(
            "lz4: {} stored bytes, shorter than the 12-byte header",
            input.len()
        )
    })?;
    let total = u64::from_be_bytes(head[..8].try_into().expect("8 bytes"));
    let block = be_u32(head, 8).expect("4 bytes");
    if total != out.len() as u64 {
        return Err(CodecError::Corrupt(format!(
            "lz4: header says {total} decoded bytes, the chunk holds {}",
            out.len()
        )));
    }
    if block == 0 && !out.is_empty() {
        return Err("lz4: header has block size 0".into());
    }
    let mut at = 12usize;
    for dst in out.chunks_mut(block.max(1)) {
        let size = be_u32(input, at).ok_or_else(|| format!("lz4: truncated at byte {at}"))?;
        at += 4;
        let src = at
            .checked_add(size)
            .and_then(|end| input.get(at..end))
            .ok_or_else(|| {
                format!(
                    "lz4: block of {size} bytes at byte {at} runs past the {} stored",
                    input.len()
                )
            })?;
        if size == dst.len() {
            dst.copy_from_slice(src);
        } else {
            lz4_block(src, dst)?;
        }
        at += size;
    }
    if at != input.len() {
        return Err(CodecError::Corrupt(format!(
            "lz4: {} stored bytes after the last block",
            input.len() - at
        )));
    }
    Ok(())
}

/// One raw LZ4 block, compressed by liblz4: for tests and benchmarks.
#[doc(hidden)]
pub fn lz4_compress_block(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; data.len() + data.len() / 255 + 64];
    // SAFETY: the output is larger than LZ4_compressBound.
    let n = unsafe {
        lz4_sys::LZ4_compress_default(
            data.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            data.len() as i32,
            out.len() as i32,
        )
    };
    assert!(n > 0);
    out.truncate(n as usize);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// HDF5 LZ4 framing (for tests), storing incompressible blocks raw.
    pub(crate) fn lz4_hdf5_compress(data: &[u8], block: usize) -> Vec<u8> {
        let mut out = (data.len() as u64).to_be_bytes().to_vec();
        out.extend((block as u32).to_be_bytes());
        for b in data.chunks(block) {
            let c = lz4_compress_block(b);
            let c = if c.len() >= b.len() { b.to_vec() } else { c };
            out.extend((c.len() as u32).to_be_bytes());
            out.extend(c);
        }
        out
    }

    #[test]
    fn round_trip_with_raw_blocks() {
        let mut d: Vec<u8> = (0..300_000u32).map(|i| (i / 5 % 7) as u8).collect();
        // An incompressible middle block is stored raw.
        let mut x = 12345u32;
        for b in &mut d[100_000..140_000] {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        let c = lz4_hdf5_compress(&d, 32768);
        let mut out = vec![0xEE; d.len()];
        lz4_hdf5(&c, &mut out).unwrap();
        assert_eq!(out, d);
    }

    #[test]
    fn bad_chunks_are_errors() {
        let d: Vec<u8> = (0..50_000u32).map(|i| (i / 3 % 11) as u8).collect();
        let c = lz4_hdf5_compress(&d, 16384);
        let mut out = vec![0u8; d.len()];
        assert!(lz4_hdf5(&c[..c.len() - 1], &mut out).is_err());
        assert!(lz4_hdf5(&c[..6], &mut out).is_err());
        assert!(lz4_hdf5(&c, &mut out[..d.len() - 1]).is_err());
        let mut bad = c.clone();
        bad[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(lz4_hdf5(&bad, &mut out).is_err());
        let mut bad = c.clone();
        bad[8..12].fill(0);
        assert!(lz4_hdf5(&bad, &mut out).is_err());
        let mut bad = c.clone();
        bad.push(0);
        assert!(lz4_hdf5(&bad, &mut out).is_err());
        let mut bad = c;
        for b in &mut bad[16..40] {
            *b = 0xF0;
        }
        assert!(lz4_hdf5(&bad, &mut out).is_err());
    }
}
