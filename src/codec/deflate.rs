//! DEFLATE through libdeflate: whole-buffer decoding at several times zlib's speed, and the
//! output is exactly the caller's buffer, so a stream that would inflate past its declared
//! size is stopped there. Reading only the start of a stream (an NPY header inside a deflated
//! member) needs a streaming decoder, which libdeflate is not: miniz_oxide does that part.

use std::cell::RefCell;

use libdeflater::{DecompressionError, Decompressor};
use miniz_oxide::inflate::core::{decompress, inflate_flags, DecompressorOxide};
use miniz_oxide::inflate::TINFLStatus;

use super::CodecError;

/// The framing around the deflate stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrapper {
    /// Bare deflate (ZIP members).
    Raw,
    /// zlib header and Adler-32 trailer (HDF5's deflate filter).
    Zlib,
}

thread_local! {
    static DECOMPRESSOR: RefCell<Decompressor> = RefCell::new(Decompressor::new());
}

/// Inflates `input` into all of `out`; anything but exactly `out.len()` bytes is an error.
pub fn inflate(input: &[u8], out: &mut [u8], wrapper: Wrapper) -> Result<(), CodecError> {
    let result = DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        match wrapper {
            Wrapper::Raw => d.deflate_decompress(input, out),
            Wrapper::Zlib => d.zlib_decompress(input, out),
        }
    });
    match result {
        Ok(n) if n == out.len() => Ok(()),
        Ok(n) => Err(CodecError::Corrupt(format!(
            "deflate stream holds {n} bytes, expected {}",
            out.len()
        ))),
        Err(DecompressionError::InsufficientSpace) => Err(CodecError::Overflow(format!(
            "deflate stream inflates past its declared {} bytes",
            out.len()
        ))),
        Err(DecompressionError::BadData) => Err("corrupt deflate stream".into()),
    }
}

/// The first `n` bytes a raw deflate stream inflates to (fewer if it is shorter). `input` may
/// be only the start of the stream.
pub fn inflate_prefix(input: &[u8], n: usize) -> Result<Vec<u8>, CodecError> {
    let mut state = Box::<DecompressorOxide>::default();
    let mut out = vec![0u8; n];
    let flags = inflate_flags::TINFL_FLAG_USING_NON_WRAPPING_OUTPUT_BUF
        | inflate_flags::TINFL_FLAG_HAS_MORE_INPUT;
    let (status, _, written) = decompress(&mut state, input, &mut out, 0, flags);
    match status {
        TINFLStatus::Done | TINFLStatus::HasMoreOutput | TINFLStatus::NeedsMoreInput => {
            out.truncate(written);
            Ok(out)
        }
        _ => Err("corrupt deflate stream".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_of_a_stream() {
        let data: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut z = vec![0; c.deflate_compress_bound(data.len())];
        let len = c.deflate_compress(&data, &mut z).unwrap();
        assert_eq!(inflate_prefix(&z[..len], 100).unwrap(), &data[..100]);
        assert_eq!(inflate_prefix(&z[..len / 2], 100).unwrap(), &data[..100]);
        assert_eq!(inflate_prefix(&z[..len], 60_000).unwrap(), data);
        assert!(inflate_prefix(&[0xff; 64], 10).is_err());
    }
}
