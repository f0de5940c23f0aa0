//! Decode pipelines: pure functions from stored bytes to the bytes a sample holds in C order.
//! Every format describes its encoding as a [`Pipeline`]; the executor runs it.

mod bitshuffle;
mod blosc;
mod deflate;
mod hdf5_filters;
mod hdf5_pipeline;
pub mod image;
mod inflate_stream;
mod lz4;
mod npy_stream;
mod transpose;
mod zstd;

#[cfg(test)]
mod proptests;

use crate::stats::{self, Stage};
use std::sync::Arc;

pub use bitshuffle::{
    bitshuffle_block, bitshuffle_decode, bitunshuffle_block_with, BitshuffleInner, Kernel,
};
pub use blosc::blosc_decompress;
#[cfg(any(test, feature = "encoders"))]
pub use blosc::{
    b2nd_compress, blosc2_compress, blosc2_compress_with_dict, blosc_decompress_fresh_context,
};
pub use blosc::{blosc2_frame_decompress, blosc2_frame_size};
#[cfg(feature = "hdf5")]
pub(crate) use blosc::{check_chunk, BloscHeader};
pub use deflate::{inflate, inflate_prefix, Inflater, Wrapper};
pub use hdf5_filters::{
    fletcher32, lzf_decompress, lzf_decompress_prefix, strip_fletcher32, unshuffle,
};
pub use hdf5_pipeline::{
    ChunkDecoder, FilterSpec, FILTER_BITSHUFFLE, FILTER_BLOSC, FILTER_BLOSC2, FILTER_DEFLATE,
    FILTER_FLETCHER32, FILTER_LZ4, FILTER_LZF, FILTER_SHUFFLE, FILTER_ZSTD,
};
pub use inflate_stream::{inflate_stream, StreamPlan};
pub use lz4::{lz4_block, lz4_compress_block, lz4_hdf5};
pub(crate) use npy_stream::npy_stream_to_c;
pub use npy_stream::NpyExpect;
pub use transpose::fortran_to_c;
pub use zstd::zstd_decompress;

use crate::error::{Error, ErrorKind};

/// Why stored bytes did not decode. Codecs know nothing of files or formats; each format
/// turns these into its own error kind in one place ([`Faults::error`]), and the binding turns
/// that kind into a Python exception in one place (`py::errors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Not a valid stream of the codec, or one that decodes to the wrong size.
    Corrupt(String),
    /// A stream that would decode past the size it declares (a decompression bomb).
    Overflow(String),
    /// A checksum (CRC-32, Fletcher-32) that does not match the bytes.
    Checksum(String),
    /// Filter parameters that make no sense (an item size of 0, a block size that is not a
    /// multiple of 8).
    Params(String),
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CodecError::Corrupt(m)
            | CodecError::Overflow(m)
            | CodecError::Checksum(m)
            | CodecError::Params(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for CodecError {}

impl From<String> for CodecError {
    fn from(msg: String) -> Self {
        CodecError::Corrupt(msg)
    }
}

impl From<&str> for CodecError {
    fn from(msg: &str) -> Self {
        CodecError::Corrupt(msg.to_string())
    }
}

/// Which error kinds a format reports decoding failures as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Faults {
    /// Stored bytes that do not decode, or decode to the wrong size (a corrupt stream).
    pub corrupt: ErrorKind,
    /// A stream that inflates past the size it declared (a decompression bomb).
    pub overflow: ErrorKind,
}

impl Faults {
    /// Reports corrupt streams and decompression bombs alike as `kind`.
    pub const fn both(kind: ErrorKind) -> Faults {
        Faults {
            corrupt: kind,
            overflow: kind,
        }
    }

    pub(crate) fn corrupt(&self, msg: impl Into<String>) -> Error {
        Error::new(self.corrupt, "", msg)
    }

    /// The one place a codec's error becomes a format's error: a bomb is `overflow`, anything
    /// else `corrupt` (the file's bytes are bad, whatever the detail).
    pub fn error(&self, e: CodecError) -> Error {
        match e {
            CodecError::Overflow(m) => Error::new(self.overflow, "", m),
            other => Error::new(self.corrupt, "", other.to_string()),
        }
    }
}

/// One decoding step: a transform producing new bytes, or a check of the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Inflates a deflate stream to exactly the length the next stage expects.
    Inflate(Wrapper),
    /// Verifies the CRC-32 of the bytes so far.
    Crc32(u32),
    /// Verifies a CRC-32 that covers bytes before these (`prefix`: the CRC-32 of those, such
    /// as an `.npy` member's header, read earlier) and then the bytes so far.
    Crc32After {
        /// The CRC-32 of the earlier bytes, where the running CRC starts.
        prefix: u32,
        /// The stored CRC-32 of the earlier bytes and these together.
        want: u32,
    },
    /// Turns a whole NPY stream (header + data) into the C-order data, checking the header
    /// against what the reader expects.
    NpyStream(Arc<NpyExpect>),
    /// Reorders an array stored in Fortran order (NPY `fortran_order: True`) into C order.
    FortranToC {
        /// The array's shape, in elements.
        shape: Arc<[usize]>,
        /// Bytes per element.
        itemsize: usize,
    },
    /// Checks and strips HDF5's Fletcher-32 trailer.
    Fletcher32,
    /// Undoes HDF5's byte shuffle of `itemsize`-byte elements.
    Unshuffle {
        /// Bytes per element; 0 (HDF5 stored no element size) fails on any chunk that does
        /// not skip the filter.
        itemsize: usize,
    },
    /// Decodes an LZF block (h5py's LZF filter).
    Lzf,
    /// Decodes the first bytes of an LZF block of `full` bytes, as many as the output holds,
    /// and checks the rest of the block without decoding it (the last step of a
    /// [`Pipeline::prefix`]).
    LzfPrefix {
        /// The whole block's decoded length.
        full: usize,
        /// Whether to walk the rest of the block (false: an earlier decode checked it).
        check: bool,
    },
    /// Decodes a blosc 1.x buffer (any inner codec and shuffle).
    Blosc,
    /// Decodes a blosc2 contiguous frame (one HDF5 blosc2 chunk, b2nd layout or plain); a
    /// b2nd array in it must have `shape` (the HDF5 chunk's, in elements).
    Blosc2 {
        /// The HDF5 chunk's shape, in elements.
        shape: Arc<[usize]>,
    },
    /// Decodes zstd frames.
    Zstd,
    /// Decodes HDF5's LZ4 framing.
    Lz4,
    /// Undoes bitshuffle of `itemsize`-byte elements in blocks of `block` elements (0: the
    /// default), with LZ4 or zstd inside or nothing.
    Bitshuffle {
        /// Bytes per element.
        itemsize: usize,
        /// Elements per block, a multiple of 8 (0: bitshuffle's default for `itemsize`).
        block: usize,
        /// The compressor applied to each transposed block, if any.
        inner: BitshuffleInner,
    },
    /// Ignores the input: the output is this pattern repeated (an HDF5 chunk never written,
    /// which reads as the fill value).
    Fill(Arc<[u8]>),
    /// Decodes an encoded image (JPEG, PNG, WebP) into one fixed-shape sample of a batch.
    Image(Arc<image::ImageStep>),
    /// A filter no decoder here or in libhdf5 knows: a chunk whose mask does not skip it cannot
    /// be read (an `UnsupportedError` naming the filter).
    Missing {
        /// The HDF5 filter id, named in the error.
        id: u32,
    },
}

impl Step {
    fn is_check(&self) -> bool {
        matches!(self, Step::Crc32(_) | Step::Crc32After { .. })
    }

    /// Length this transform produces from `input_len` bytes; `size_hint` is the decoded
    /// length of a compressed stream (the final length unless a later step changes it).
    fn output_len(&self, input_len: usize, size_hint: usize) -> usize {
        match self {
            Step::Fletcher32 => input_len.saturating_sub(4),
            Step::Unshuffle { .. } => input_len,
            Step::Bitshuffle {
                inner: BitshuffleInner::None,
                ..
            } => input_len,
            _ => size_hint,
        }
    }

    /// The stage a step's time counts under ([`crate::stats`]); `None` for images, which
    /// count their decode and geometry themselves.
    fn stage(&self) -> Option<Stage> {
        Some(match self {
            Step::Inflate(_) => Stage::Inflate,
            Step::NpyStream(_) | Step::FortranToC { .. } => Stage::Npy,
            Step::Fletcher32 | Step::Crc32(_) | Step::Crc32After { .. } => Stage::Checksum,
            Step::Unshuffle { .. } => Stage::Shuffle,
            Step::Lzf | Step::LzfPrefix { .. } => Stage::Lzf,
            Step::Blosc => Stage::Blosc,
            Step::Blosc2 { .. } => Stage::Blosc2,
            Step::Zstd => Stage::Zstd,
            Step::Lz4 => Stage::Lz4,
            Step::Bitshuffle { .. } => Stage::Bitshuffle,
            Step::Fill(_) | Step::Missing { .. } => Stage::Fill,
            Step::Image(_) => return None,
        })
    }

    /// [`Step::transform`], timed as its stage.
    fn apply(&self, input: &[u8], out: &mut [u8], faults: Faults) -> Result<(), Error> {
        let timer = stats::start();
        let result = self.transform(input, out, faults);
        if let Some(stage) = self.stage() {
            timer.stop(stage, out.len());
        }
        result
    }

    fn transform(&self, input: &[u8], out: &mut [u8], faults: Faults) -> Result<(), Error> {
        match self {
            Step::Inflate(wrapper) => inflate(input, out, *wrapper).map_err(|e| faults.error(e)),
            Step::NpyStream(expect) => npy_stream_to_c(input, out, expect),
            Step::FortranToC { shape, itemsize } => {
                fortran_to_c(input, out, shape, *itemsize).map_err(|e| faults.error(e))
            }
            Step::Fletcher32 => strip_fletcher32(input, out).map_err(|e| faults.error(e)),
            Step::Unshuffle { itemsize } => {
                unshuffle(input, out, *itemsize).map_err(|e| faults.error(e))
            }
            Step::Lzf => lzf_decompress(input, out).map_err(|e| faults.error(e)),
            Step::LzfPrefix { full, check } => {
                lzf_decompress_prefix(input, out, *full, *check).map_err(|e| faults.error(e))
            }
            Step::Blosc => blosc_decompress(input, out).map_err(|e| faults.error(e)),
            Step::Blosc2 { shape } => {
                blosc2_frame_decompress(input, out, Some(shape)).map_err(|e| faults.error(e))
            }
            Step::Zstd => zstd_decompress(input, out).map_err(|e| faults.error(e)),
            Step::Lz4 => lz4_hdf5(input, out).map_err(|e| faults.error(e)),
            Step::Bitshuffle {
                itemsize,
                block,
                inner,
            } => BITSHUFFLE_TMP.with(|tmp| {
                bitshuffle_decode(input, out, *itemsize, *block, *inner, &mut tmp.borrow_mut())
                    .map_err(|e| faults.error(e))
            }),
            Step::Fill(pattern) => {
                fill(out, pattern);
                Ok(())
            }
            Step::Image(step) => step.apply(input, out),
            Step::Missing { id } => Err(Error::new(
                ErrorKind::Unsupported,
                "",
                format!(
                    "the chunk needs filter {id}, which neither packread nor its libhdf5 decodes"
                ),
            )),
            Step::Crc32(_) | Step::Crc32After { .. } => {
                unreachable!("checks are not transforms")
            }
        }
    }

    fn check(&self, bytes: &[u8], faults: Faults) -> Result<(), Error> {
        let (prefix, want) = match self {
            Step::Crc32(want) => (0, *want),
            Step::Crc32After { prefix, want } => (*prefix, *want),
            _ => unreachable!("transforms are not checks"),
        };
        let timer = stats::start();
        let got = crc32_after(prefix, bytes);
        timer.stop(Stage::Checksum, bytes.len());
        if got != want {
            return Err(faults.error(CodecError::Checksum(format!(
                "CRC-32 mismatch: stored {want:08x}, data has {got:08x}"
            ))));
        }
        Ok(())
    }
}

/// The CRC-32 of `prefix`'s bytes followed by `bytes`, given `prefix` = the CRC-32 of the
/// former (0 for none).
pub fn crc32_after(prefix: u32, bytes: &[u8]) -> u32 {
    // SAFETY: libdeflate reads exactly `bytes.len()` bytes from a live slice.
    unsafe { libdeflate_sys::libdeflate_crc32(prefix, bytes.as_ptr().cast(), bytes.len()) }
}

thread_local! {
    /// Bitshuffle's per-block scratch (a compressed block decodes there, then is transposed).
    static BITSHUFFLE_TMP: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Fills `out` with `pattern` repeated (zeros if the pattern is empty or all zero).
pub fn fill(out: &mut [u8], pattern: &[u8]) {
    if pattern.iter().all(|&b| b == 0) {
        out.fill(0);
    } else {
        for (dst, src) in out.iter_mut().zip(pattern.iter().cycle()) {
            *dst = *src;
        }
    }
}

/// Steps applied in order to the stored bytes. Cheap to clone (shared).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pipeline {
    steps: Option<Arc<[Step]>>,
    /// Length of the first transform's output when it is not the final length (an inflated
    /// NPY member: header + data, before the header is stripped).
    inner_len: Option<usize>,
}

impl Pipeline {
    /// Stored bytes are the sample's bytes.
    pub fn identity() -> Pipeline {
        Pipeline::default()
    }

    /// Runs `steps` in order, transforms and checks alike; no steps is
    /// [`Pipeline::identity`].
    pub fn new(steps: Vec<Step>) -> Pipeline {
        if steps.is_empty() {
            Pipeline::identity()
        } else {
            Pipeline {
                steps: Some(steps.into()),
                inner_len: None,
            }
        }
    }

    /// Sets the length an inflate step produces when a later transform changes the length.
    pub fn with_inner_len(mut self, len: usize) -> Pipeline {
        self.inner_len = Some(len);
        self
    }

    /// Reorders an array of `shape` (in elements of `itemsize` bytes) stored in Fortran
    /// order into C order.
    pub fn fortran_to_c(shape: &[usize], itemsize: usize) -> Pipeline {
        Pipeline::new(vec![Step::FortranToC {
            shape: shape.into(),
            itemsize,
        }])
    }

    /// The same decode of `full` bytes, stopped after the first bytes of its output, as many
    /// as the output buffer given to [`Pipeline::decode`] holds; the rest of the stream is
    /// walked and checked unless `checked` (an earlier decode of the same stream succeeded).
    /// `None` where the last step needs the whole stream (only an LZF block decoded last can
    /// stop early: a shuffle after it spreads every element over the whole chunk).
    pub fn prefix(&self, full: usize, checked: bool) -> Option<Pipeline> {
        let steps = self.steps();
        if !matches!(steps.last(), Some(Step::Lzf)) || self.inner_len.is_some() {
            return None;
        }
        let mut steps = steps.to_vec();
        *steps.last_mut().expect("not empty") = Step::LzfPrefix {
            full,
            check: !checked,
        };
        Some(Pipeline {
            steps: Some(steps.into()),
            inner_len: None,
        })
    }

    /// What the first transform produces, given the final length `out_len`.
    pub fn inner_len(&self, out_len: usize) -> usize {
        self.inner_len.unwrap_or(out_len)
    }

    /// Whether there are no steps at all: the stored bytes are copied as they are, unchecked.
    pub fn is_identity(&self) -> bool {
        self.steps.is_none()
    }

    /// Whether the pipeline only checks bytes (so stored bytes can land in place).
    pub fn only_checks(&self) -> bool {
        self.steps().iter().all(Step::is_check)
    }

    /// The steps in the order they run (none for [`Pipeline::identity`]).
    pub fn steps(&self) -> &[Step] {
        self.steps.as_deref().unwrap_or(&[])
    }

    /// Runs the checks on bytes that were read in place (valid when [`Self::only_checks`]).
    pub fn verify(&self, bytes: &[u8], faults: Faults) -> Result<(), Error> {
        self.steps().iter().try_for_each(|s| s.check(bytes, faults))
    }

    /// Decodes `input` into `out`, which must be exactly the decoded length. `tmp` is scratch
    /// space for intermediate results, reused across calls.
    pub fn decode(
        &self,
        input: &[u8],
        out: &mut [u8],
        tmp: &mut [Vec<u8>; 2],
        faults: Faults,
    ) -> Result<(), Error> {
        let steps = self.steps();
        let transforms = steps.iter().filter(|s| !s.is_check()).count();
        if transforms == 0 {
            if input.len() != out.len() {
                return Err(faults.corrupt(format!(
                    "expected {} bytes, found {}",
                    out.len(),
                    input.len()
                )));
            }
            let timer = stats::start();
            out.copy_from_slice(input);
            timer.stop(Stage::Copy, out.len());
            return self.verify(out, faults);
        }
        // Where the bytes so far are: the input, one of the two scratch buffers, or `out`.
        #[derive(Clone, Copy)]
        enum At {
            Input,
            Tmp(usize),
            Out,
        }
        let [a, b] = tmp;
        let mut at = At::Input;
        let mut len = input.len();
        let mut done = 0;
        for step in steps {
            let current: &[u8] = match at {
                At::Input => input,
                At::Tmp(0) => &a[..len],
                At::Tmp(_) => &b[..len],
                At::Out => &out[..len],
            };
            if step.is_check() {
                step.check(current, faults)?;
                continue;
            }
            done += 1;
            if done == transforms {
                // Re-borrow so `out` can be written while `current` is read.
                let current: &[u8] = match at {
                    At::Input => input,
                    At::Tmp(0) => &a[..len],
                    At::Tmp(_) => &b[..len],
                    At::Out => unreachable!("out is only written by the last transform"),
                };
                step.apply(current, out, faults)?;
                at = At::Out;
                len = out.len();
                continue;
            }
            let next = step.output_len(len, self.inner_len.unwrap_or(out.len()));
            let (dst, src): (&mut Vec<u8>, &[u8]) = match at {
                At::Input => (&mut *a, input),
                At::Tmp(0) => (&mut *b, &a[..len]),
                At::Tmp(_) => (&mut *a, &b[..len]),
                At::Out => unreachable!("out is only written by the last transform"),
            };
            if dst.len() < next {
                dst.resize(next, 0);
            }
            step.apply(src, &mut dst[..next], faults)?;
            at = match at {
                At::Tmp(0) => At::Tmp(1),
                _ => At::Tmp(0),
            };
            len = next;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// ZIP's faults, for codec tests.
    pub(crate) const FAULTS: Faults = Faults {
        corrupt: ErrorKind::BadZip,
        overflow: ErrorKind::LimitExceeded,
    };

    /// `data` as a raw deflate stream (libdeflate), for codec tests.
    pub(crate) fn deflate(data: &[u8]) -> Vec<u8> {
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut out = vec![0; c.deflate_compress_bound(data.len())];
        let n = c.deflate_compress(data, &mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn inflate_then_check() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let stored = deflate(&data);
        let crc = libdeflater::crc32(&data);
        let p = Pipeline::new(vec![Step::Inflate(Wrapper::Raw), Step::Crc32(crc)]);
        let mut out = vec![0; data.len()];
        let mut tmp = Default::default();
        p.decode(&stored, &mut out, &mut tmp, FAULTS).unwrap();
        assert_eq!(out, data);

        let bad = Pipeline::new(vec![Step::Inflate(Wrapper::Raw), Step::Crc32(crc ^ 1)]);
        let e = bad.decode(&stored, &mut out, &mut tmp, FAULTS).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadZip);
        assert!(e.message().contains("CRC-32"));
    }

    #[test]
    fn checks_before_the_last_transform_see_intermediate_bytes() {
        // Crc of the Fortran-ordered stored bytes, then the transpose.
        let stored = [1u8, 4, 2, 5, 3, 6];
        let p = Pipeline::new(vec![
            Step::Crc32(libdeflater::crc32(&stored)),
            Step::FortranToC {
                shape: Arc::from([2usize, 3]),
                itemsize: 1,
            },
        ]);
        let mut out = [0u8; 6];
        p.decode(&stored, &mut out, &mut Default::default(), FAULTS)
            .unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn only_checks_verify_in_place() {
        let p = Pipeline::new(vec![Step::Crc32(libdeflater::crc32(b"abc"))]);
        assert!(p.only_checks());
        p.verify(b"abc", FAULTS).unwrap();
        assert!(p.verify(b"abd", FAULTS).is_err());
    }
}
