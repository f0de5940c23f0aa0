//! Zstandard frames (HDF5 filter 32015, and inside bitshuffle) through libzstd (`zstd` crate),
//! decoded straight into the chunk's buffer. The buffer's size comes from the chunk shape: a
//! frame without a content size (some writers stream) decodes the same way, and one that
//! would produce more or fewer bytes is an error.

use super::CodecError;
use std::cell::RefCell;

use zstd::zstd_safe::{get_error_name, DCtx};

thread_local! {
    /// One decompression context per thread, reused (creating one costs more than a small
    /// frame's decoding).
    static DCTX: RefCell<DCtx<'static>> = RefCell::new(DCtx::create());
}

/// Decodes the zstd frame(s) `input` into exactly `out`.
pub fn zstd_decompress(input: &[u8], out: &mut [u8]) -> Result<(), CodecError> {
    let n = DCTX
        .with(|d| d.borrow_mut().decompress(out, input))
        .map_err(|code| format!("zstd: {}", get_error_name(code)))?;
    if n != out.len() {
        return Err(CodecError::Corrupt(format!(
            "zstd: frame holds {n} bytes, expected {}",
            out.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn zstd_compress(data: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(data, 3).unwrap()
    }

    #[test]
    fn round_trip_and_errors() {
        let d: Vec<u8> = (0..100_000u32).map(|i| (i / 9 % 17) as u8).collect();
        let c = zstd_compress(&d);
        let mut out = vec![0xCC; d.len()];
        zstd_decompress(&c, &mut out).unwrap();
        assert_eq!(out, d);
        assert!(zstd_decompress(&c, &mut out[..d.len() - 1]).is_err());
        let mut big = vec![0u8; d.len() + 1];
        assert!(zstd_decompress(&c, &mut big).is_err());
        assert!(zstd_decompress(&c[..c.len() - 3], &mut out).is_err());
        assert!(zstd_decompress(&[0u8; 32], &mut out).is_err());
        // A streamed frame without a content size decodes into the known size.
        let mut streamed = Vec::new();
        {
            let mut enc = zstd::stream::Encoder::new(&mut streamed, 3).unwrap();
            enc.include_contentsize(false).unwrap();
            std::io::copy(&mut &d[..], &mut enc).unwrap();
            enc.finish().unwrap();
        }
        out.fill(0);
        zstd_decompress(&streamed, &mut out).unwrap();
        assert_eq!(out, d);
    }
}
