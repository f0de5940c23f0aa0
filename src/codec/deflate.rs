//! DEFLATE through libdeflate: whole-buffer decoding at several times zlib's speed, and the
//! output is exactly the caller's buffer, so a stream that would inflate past its declared
//! size is stopped there. Reading only the start of a stream (an NPY header inside a deflated
//! member), or a stream too large to hold whole beside its output, needs a streaming decoder,
//! which libdeflate is not: miniz_oxide does those ([`inflate_prefix`], [`Inflater`]).

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

/// A streaming inflater: input in pieces, output into any number of buffers one after
/// another (the 32 KiB window it needs between them is its own). For members so large that
/// holding the whole compressed stream beside the output would double the memory a read
/// needs.
pub struct Inflater {
    state: Box<miniz_oxide::inflate::stream::InflateState>,
    done: bool,
}

impl Inflater {
    /// An inflater at the start of a stream framed as `wrapper` says.
    pub fn new(wrapper: Wrapper) -> Inflater {
        let format = match wrapper {
            Wrapper::Raw => miniz_oxide::DataFormat::Raw,
            Wrapper::Zlib => miniz_oxide::DataFormat::Zlib,
        };
        Inflater {
            state: miniz_oxide::inflate::stream::InflateState::new_boxed(format),
            done: false,
        }
    }

    /// Whether the stream's end has been decoded.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes from `input` into `out`: returns the bytes consumed and written. Stops when
    /// `out` is full, the input is used up or the stream ends.
    pub fn inflate(&mut self, input: &[u8], out: &mut [u8]) -> Result<(usize, usize), CodecError> {
        use miniz_oxide::inflate::stream::inflate;
        use miniz_oxide::{MZError, MZFlush, MZStatus};
        if self.done {
            return Ok((0, 0));
        }
        let r = inflate(&mut self.state, input, out, MZFlush::None);
        match r.status {
            Ok(MZStatus::StreamEnd) => self.done = true,
            Ok(_) => {}
            // No progress possible: more input or more room needed (the caller knows which).
            Err(MZError::Buf) => {}
            Err(_) => return Err("corrupt deflate stream".into()),
        }
        Ok((r.bytes_consumed, r.bytes_written))
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

    #[test]
    fn streams_in_pieces_into_several_buffers() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i * 7 % 253) as u8 ^ (i >> 11) as u8)
            .collect();
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut z = vec![0; c.deflate_compress_bound(data.len())];
        let len = c.deflate_compress(&data, &mut z).unwrap();
        for (piece, split) in [(1usize, 7usize), (1000, 100_000), (1 << 20, 299_999)] {
            let mut inf = Inflater::new(Wrapper::Raw);
            let (mut head, mut tail) = (vec![0u8; split], vec![0u8; data.len() - split]);
            let (mut used, mut written) = (0, 0);
            while !inf.is_done() {
                let end = (used + piece).min(len);
                let (o, at) = if written < split {
                    (&mut head[written..], written)
                } else {
                    (&mut tail[written - split..], written)
                };
                let (c, w) = inf.inflate(&z[used..end], o).unwrap();
                assert!(c > 0 || w > 0 || inf.is_done(), "no progress at {at}");
                used += c;
                written += w;
            }
            assert_eq!(written, data.len());
            assert_eq!([head, tail].concat(), data);
        }
        let mut inf = Inflater::new(Wrapper::Raw);
        assert!(inf.inflate(&[0xff; 64], &mut [0u8; 100]).is_err());
    }
}
