//! Large deflated members (a ZIP member, an `.npy` array inside an NPZ) inflated as a stream:
//! the compressed bytes are read in pieces and the array data is written straight into the
//! output, so a read needs the output and a piece, not the whole compressed stream and the
//! whole inflated member beside it (`numpy.load` streams the same way). The pipelines this
//! applies to are an inflate, checks of the inflated bytes (CRC-32) and optionally an NPY
//! stream whose data needs no reordering; anything else is decoded whole.

use std::sync::Arc;

use super::npy_stream::{npy_stream_header, NpyExpect};
use super::{crc32_after, CodecError, Faults, Inflater, Pipeline, Step, Wrapper};
use crate::error::Error;
use crate::formats::npy::header::header_end;

/// Reads the stored bytes at an offset from the start of the stream into the buffer.
pub(super) type ReadAt<'a> = &'a mut dyn FnMut(u64, &mut [u8]) -> Result<(), Error>;

/// Bytes of compressed input read at a time.
const PIECE: usize = 1 << 20;

/// A pipeline that can be decoded as a stream: what it inflates, checks and strips.
#[derive(Debug)]
pub struct StreamPlan<'p> {
    wrapper: Wrapper,
    /// CRC-32 checks of the inflated bytes: (CRC of the bytes before them, the stored value).
    crcs: Vec<(u32, u32)>,
    npy: Option<&'p Arc<NpyExpect>>,
}

impl Pipeline {
    /// How this pipeline decodes as a stream, if it can: an inflate, then only CRC-32 checks,
    /// then optionally an NPY stream.
    pub fn stream_plan(&self) -> Option<StreamPlan<'_>> {
        let (first, rest) = self.steps().split_first()?;
        let Step::Inflate(wrapper) = first else {
            return None;
        };
        let mut plan = StreamPlan {
            wrapper: *wrapper,
            crcs: Vec::new(),
            npy: None,
        };
        for (i, step) in rest.iter().enumerate() {
            match step {
                Step::Crc32(want) => plan.crcs.push((0, *want)),
                Step::Crc32After { prefix, want } => plan.crcs.push((*prefix, *want)),
                Step::NpyStream(expect) if i + 1 == rest.len() => plan.npy = Some(expect),
                _ => return None,
            }
        }
        Some(plan)
    }
}

/// Where inflated bytes go: the NPY header (held here to be parsed), the output, or past the
/// output (bytes the CRC covers that the array does not: a bomb if the stream goes on).
struct Sink<'o> {
    header: Vec<u8>,
    header_len: Option<usize>,
    out: &'o mut [u8],
    written: usize,
}

/// Inflates the stream `plan` describes into `out`, reading its `stored_len` compressed bytes
/// through `read(offset, buf)`; the whole stream must inflate to exactly `inflated_len` bytes
/// (the member's size). Returns `Ok(false)`, having written nothing, when the member turns out
/// not to stream (an NPY array in Fortran order to be reordered into C order): the caller
/// decodes it whole instead.
pub fn inflate_stream(
    plan: &StreamPlan<'_>,
    stored_len: usize,
    inflated_len: usize,
    read: ReadAt<'_>,
    out: &mut [u8],
    faults: Faults,
) -> Result<bool, Error> {
    stream_in_pieces(PIECE, plan, stored_len, inflated_len, read, out, faults)
}

fn stream_in_pieces(
    piece_len: usize,
    plan: &StreamPlan<'_>,
    stored_len: usize,
    inflated_len: usize,
    read: ReadAt<'_>,
    out: &mut [u8],
    faults: Faults,
) -> Result<bool, Error> {
    let mut inflater = Inflater::new(plan.wrapper);
    let mut crcs: Vec<u32> = plan.crcs.iter().map(|&(prefix, _)| prefix).collect();
    let mut piece = vec![0u8; piece_len.min(stored_len.max(1))];
    let (mut used, mut read_to, mut taken) = (0usize, 0usize, 0u64);
    let mut sink = Sink {
        header: Vec::new(),
        header_len: if plan.npy.is_some() { None } else { Some(0) },
        out,
        written: 0,
    };
    let mut spill = [0u8; 4096];
    let mut total = 0usize;
    while !inflater.is_done() {
        if used == read_to && (taken as usize) < stored_len {
            let n = piece.len().min(stored_len - taken as usize);
            read(taken, &mut piece[..n])?;
            taken += n as u64;
            (used, read_to) = (0, n);
        }
        // Where the next inflated bytes go.
        let dst: &mut [u8] = match sink.header_len {
            None => {
                // The NPY preamble (12 bytes) says how long the header is; until then, and
                // then until the header is whole, bytes gather here.
                let want = if sink.header.len() < 12 {
                    12
                } else {
                    header_end(
                        &sink.header,
                        inflated_len,
                        "",
                        &plan.npy.expect("npy").limits,
                    )?
                };
                if sink.header.len() == want {
                    let expect = plan.npy.expect("npy");
                    let header = npy_stream_header(&sink.header, inflated_len, expect)?;
                    if header.needs_transpose() && !expect.keep_layout {
                        return Ok(false);
                    }
                    if header.data_len != sink.out.len() {
                        return Err(faults.corrupt(format!(
                            "array data is {} bytes, expected {}",
                            header.data_len,
                            sink.out.len()
                        )));
                    }
                    sink.header_len = Some(want);
                    continue;
                }
                let have = sink.header.len();
                sink.header.resize(want, 0);
                &mut sink.header[have..]
            }
            Some(_) if sink.written < sink.out.len() => &mut sink.out[sink.written..],
            Some(_) => &mut spill,
        };
        let room = dst.len();
        let (c, w) = inflater
            .inflate(&piece[used..read_to], dst)
            .map_err(|e| faults.error(e))?;
        for crc in &mut crcs {
            *crc = crc32_after(*crc, &dst[..w]);
        }
        used += c;
        total += w;
        if total > inflated_len {
            return Err(faults.error(CodecError::Overflow(format!(
                "deflate stream inflates past its declared {inflated_len} bytes"
            ))));
        }
        match sink.header_len {
            None => {
                let keep = sink.header.len() - (room - w);
                sink.header.truncate(keep);
            }
            Some(_) if sink.written < sink.out.len() => sink.written += w,
            Some(_) => {}
        }
        if c == 0 && w == 0 && !inflater.is_done() {
            // No progress: input left means a stream that does not decode; none left, one cut
            // short (its output so far all delivered).
            let why = if used < read_to {
                "corrupt deflate stream"
            } else {
                "deflate stream ends before its end marker"
            };
            return Err(faults.error(CodecError::Corrupt(why.into())));
        }
    }
    if total != inflated_len || sink.written != sink.out.len() {
        return Err(faults.error(CodecError::Corrupt(format!(
            "deflate stream holds {total} bytes, expected {inflated_len}"
        ))));
    }
    for (got, &(_, want)) in crcs.iter().zip(&plan.crcs) {
        if *got != want {
            return Err(faults.error(CodecError::Checksum(format!(
                "CRC-32 mismatch: stored {want:08x}, data has {got:08x}"
            ))));
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::tests::{deflate, FAULTS};
    use crate::error::ErrorKind;
    use crate::formats::npy::header::Limits;

    /// An NPY stream of `n` little-endian u16 values, C or Fortran order (2 x n/2).
    fn npy(n: usize, fortran: bool) -> (Vec<u8>, Vec<u8>) {
        let data: Vec<u8> = (0..n as u16)
            .flat_map(|i| (i.wrapping_mul(7919)).to_le_bytes())
            .collect();
        let dict = format!(
            "{{'descr': '<u2', 'fortran_order': {}, 'shape': (2, {}), }}",
            if fortran { "True" } else { "False" },
            n / 2
        );
        let mut head = b"\x93NUMPY\x01\x00".to_vec();
        let pad = (64 - (10 + dict.len() + 1) % 64) % 64;
        let text = format!("{dict}{}\n", " ".repeat(pad));
        head.extend((text.len() as u16).to_le_bytes());
        head.extend(text.as_bytes());
        let mut all = head;
        all.extend(&data);
        (all, data)
    }

    fn run(
        pipeline: &Pipeline,
        stored: &[u8],
        inflated_len: usize,
        out: &mut [u8],
        piece: usize,
    ) -> Result<bool, Error> {
        let plan = pipeline.stream_plan().expect("streams");
        let mut read = |at: u64, buf: &mut [u8]| {
            buf.copy_from_slice(&stored[at as usize..at as usize + buf.len()]);
            Ok(())
        };
        stream_in_pieces(
            piece,
            &plan,
            stored.len(),
            inflated_len,
            &mut read,
            out,
            FAULTS,
        )
    }

    fn expect(n: usize) -> Arc<NpyExpect> {
        Arc::new(NpyExpect {
            dtype: crate::dtype::DType::from_descr(crate::dtype::literal::Literal::Str(
                "<u2".into(),
            ))
            .unwrap(),
            shape: vec![2, n / 2],
            limits: Limits::default(),
            keep_layout: false,
        })
    }

    #[test]
    fn npy_member_streams_into_the_output_and_checks_its_crc() {
        let (member, data) = npy(50_000, false);
        let stored = deflate(&member);
        let crc = libdeflater::crc32(&member);
        let p = Pipeline::new(vec![
            Step::Inflate(Wrapper::Raw),
            Step::Crc32(crc),
            Step::NpyStream(expect(50_000)),
        ]);
        for piece in [1, 7, 4096, 1 << 20] {
            let mut out = vec![0u8; data.len()];
            assert!(run(&p, &stored, member.len(), &mut out, piece).unwrap());
            assert_eq!(out, data, "piece {piece}");
        }
        let mut out = vec![0u8; data.len()];
        let bad = Pipeline::new(vec![
            Step::Inflate(Wrapper::Raw),
            Step::Crc32(crc ^ 1),
            Step::NpyStream(expect(50_000)),
        ]);
        let e = run(&bad, &stored, member.len(), &mut out, 1000).unwrap_err();
        assert!(e.message().contains("CRC-32"), "{e}");
        // Truncated, or a member declared longer or shorter than its stream.
        assert!(run(
            &p,
            &stored[..stored.len() / 2],
            member.len(),
            &mut out,
            1000
        )
        .is_err());
        assert!(run(&p, &stored, member.len() - 1, &mut out, 1000).is_err());
        assert!(run(&p, &stored, member.len() + 1, &mut out, 1000).is_err());
        // A raw member whose stream inflates past its declared size: a bomb, stopped.
        let raw = Pipeline::new(vec![Step::Inflate(Wrapper::Raw)]);
        let mut short = vec![0u8; member.len() - 1];
        let e = run(&raw, &stored, member.len() - 1, &mut short, 1000).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::LimitExceeded, "{e}");
        // Another shape than the reader expects.
        let e = run(
            &Pipeline::new(vec![
                Step::Inflate(Wrapper::Raw),
                Step::NpyStream(expect(40_000)),
            ]),
            &stored,
            member.len(),
            &mut vec![0u8; 80_000],
            1000,
        )
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Inconsistent, "{e}");
    }

    #[test]
    fn fortran_arrays_to_reorder_do_not_stream() {
        let (member, _) = npy(1000, true);
        let stored = deflate(&member);
        let p = Pipeline::new(vec![
            Step::Inflate(Wrapper::Raw),
            Step::NpyStream(expect(1000)),
        ]);
        let mut out = vec![0xAAu8; 2000];
        assert!(!run(&p, &stored, member.len(), &mut out, 100).unwrap());
        assert!(out.iter().all(|&b| b == 0xAA), "nothing written");
    }

    #[test]
    fn only_inflate_checks_and_npy_pipelines_stream() {
        assert!(Pipeline::new(vec![Step::Inflate(Wrapper::Zlib)])
            .stream_plan()
            .is_some());
        assert!(Pipeline::new(vec![Step::Lzf]).stream_plan().is_none());
        assert!(Pipeline::new(vec![
            Step::Inflate(Wrapper::Zlib),
            Step::Unshuffle { itemsize: 2 }
        ])
        .stream_plan()
        .is_none());
        assert!(Pipeline::identity().stream_plan().is_none());
    }
}
