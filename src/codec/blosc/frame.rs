//! blosc2 contiguous frames (HDF5 filter 32026, as hdf5plugin and PyTables write them): one
//! frame per HDF5 chunk, holding one blosc2 chunk (1-d HDF5 chunks), or a b2nd array whose
//! blocks are tiles of the HDF5 chunk (n-d chunks).
//!
//! Parsed here rather than by c-blosc2's frame and b2nd readers, which trust what the frame
//! says: a b2nd rank past 8 overflows their stack arrays, a zero chunk or block dimension
//! divides by zero, and a chunk offset past the frame is followed (damaged files crashed the
//! process that way). Every field is checked here against the frame's bytes and against what
//! the HDF5 chunk holds, c-blosc2 decodes only single chunks whose headers were checked
//! ([`super::check_chunk`]), and the b2nd tiles are put back in C order by safe code
//! that cannot write outside the output. The format: c-blosc2's README_CFRAME_FORMAT.rst and
//! README_B2ND_METALAYER.rst (big-endian msgpack fields in the header, little-endian chunks).

use std::cell::RefCell;

use super::super::CodecError;
use super::b2nd::{b2nd_meta, checked_product, unravel, untile_chunk, B2nd};
use super::{check_chunk, decode_checked};

/// The fixed part of a frame header (up to the metalayers).
const FIXED_HEADER: usize = 87;
/// Largest rank of a b2nd array (c-blosc2's `B2ND_MAX_DIM`).
pub(super) const MAX_DIM: usize = 8;
/// Most chunks a frame may hold (an HDF5 chunk's frame holds one).
const MAX_CHUNKS: usize = 4096;
/// Most metalayers a frame header may list.
const MAX_METALAYERS: usize = 64;

pub(super) fn corrupt(msg: impl Into<String>) -> CodecError {
    CodecError::Corrupt(format!("blosc2: {}", msg.into()))
}

/// Where a chunk of the frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkAt {
    /// At this offset of the frame (already checked to be inside it).
    Stored(usize),
    /// No bytes: the whole chunk is zeros, NaN or uninitialised (an offset's special value).
    Zeros,
    Nan,
}

/// A frame, parsed and checked.
#[derive(Debug)]
pub(super) struct Frame {
    typesize: usize,
    /// Decoded bytes of every chunk but possibly the last.
    chunk_bytes: usize,
    /// Decoded bytes of all chunks together.
    total_bytes: usize,
    chunks: Vec<ChunkAt>,
    /// End of the chunks section: no chunk's bytes reach past it.
    chunks_end: usize,
    pub b2nd: Option<B2nd>,
}

/// Big-endian reads with the bounds of one part of the frame checked (`part` names it in
/// messages).
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) part: &'static str,
}

impl<'a> Cursor<'a> {
    pub(super) fn take(&self, at: usize, len: usize) -> Result<&'a [u8], CodecError> {
        at.checked_add(len)
            .and_then(|end| self.bytes.get(at..end))
            .ok_or_else(|| {
                corrupt(format!(
                    "{}: a field at byte {at} runs past its {} bytes",
                    self.part,
                    self.bytes.len()
                ))
            })
    }

    /// A msgpack value with marker `marker` followed by `N` big-endian bytes.
    pub(super) fn be<const N: usize>(
        &self,
        at: usize,
        marker: u8,
        what: &str,
    ) -> Result<[u8; N], CodecError> {
        let b = self.take(at, 1 + N)?;
        if b[0] != marker {
            return Err(corrupt(format!(
                "{}: {what} is not where it should be",
                self.part
            )));
        }
        Ok(b[1..].try_into().expect("N bytes"))
    }

    pub(super) fn int(&self, at: usize, what: &str) -> Result<i64, CodecError> {
        Ok(i64::from(i32::from_be_bytes(self.be::<4>(at, 0xd2, what)?)))
    }

    pub(super) fn long(&self, at: usize, what: &str) -> Result<i64, CodecError> {
        Ok(i64::from_be_bytes(self.be::<8>(at, 0xd3, what)?))
    }
}

pub(super) fn positive(v: i64, what: &str) -> Result<usize, CodecError> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| corrupt(format!("{what} is {v}")))
}

impl Frame {
    /// Parses and checks the frame `input`: its header, metalayers, chunk offsets and every
    /// chunk's position (inside the frame) and decoded size. Chunk data is not decoded.
    pub(super) fn parse(input: &[u8]) -> Result<Frame, CodecError> {
        let c = Cursor {
            bytes: input,
            part: "frame header",
        };
        if input.len() < FIXED_HEADER || &input[2..10] != b"b2frame\0" {
            return Err(corrupt(format!(
                "not a contiguous frame ({} bytes)",
                input.len()
            )));
        }
        let header_len = positive(c.int(10, "the header size")?, "the frame's header size")?;
        let frame_len = u64::from_be_bytes(c.be::<8>(15, 0xcf, "the frame size")?);
        if header_len < FIXED_HEADER || header_len > input.len() {
            return Err(corrupt(format!(
                "frame header of {header_len} bytes in a frame of {}",
                input.len()
            )));
        }
        if frame_len != input.len() as u64 {
            return Err(corrupt(format!(
                "frame says it is {frame_len} bytes, {} are stored",
                input.len()
            )));
        }
        let general = input[25];
        if input[26] & 0x0F != 0 {
            return Err(corrupt(
                "not a contiguous frame (a sparse frame's directory)",
            ));
        }
        if (general >> 4) & 3 != 1 {
            return Err(corrupt("chunk offsets are not 64-bit"));
        }
        let total = c.long(29, "the uncompressed size")?;
        let chunks_len = c.long(38, "the compressed size")?;
        let typesize = positive(c.int(47, "the type size")?, "the type size")?;
        let chunk_bytes = c.int(57, "the chunk size")?;
        let total_bytes = usize::try_from(total)
            .map_err(|_| corrupt(format!("the frame's uncompressed size is {total}")))?;
        let chunks_len = usize::try_from(chunks_len)
            .ok()
            .filter(|&n| n <= input.len() - header_len)
            .ok_or_else(|| corrupt(format!("{chunks_len} bytes of chunks in the frame")))?;
        let (chunk_bytes, nchunks) = if total_bytes == 0 {
            (0, 0)
        } else {
            let cb = positive(chunk_bytes, "the chunk size")?;
            (cb, total_bytes.div_ceil(cb))
        };
        if nchunks > MAX_CHUNKS {
            return Err(corrupt(format!("frame holds {nchunks} chunks")));
        }
        let b2nd = metalayer(input, header_len, b"b2nd")?
            .or(metalayer(input, header_len, b"caterva")?)
            .map(|m| b2nd_meta(m, typesize))
            .transpose()?;
        let (chunks, index_end) = offsets(input, header_len, chunks_len, nchunks)?;
        trailer(input, index_end)?;
        let frame = Frame {
            typesize,
            chunk_bytes,
            total_bytes,
            chunks,
            chunks_end: header_len + chunks_len,
            b2nd,
        };
        frame.check_geometry()?;
        Ok(frame)
    }

    /// The b2nd geometry must account for exactly the chunks the frame holds, each decoding to
    /// one (block-padded) chunk of the array.
    fn check_geometry(&self) -> Result<(), CodecError> {
        let Some(b) = &self.b2nd else {
            return Ok(());
        };
        let want_chunks: usize = b.chunk_grid().iter().product();
        let ext_bytes = checked_product(&b.ext_chunkshape(), self.typesize)
            .ok_or_else(|| corrupt("b2nd chunk shape overflows"))?;
        if want_chunks != self.chunks.len()
            || ext_bytes != self.chunk_bytes
            || want_chunks.checked_mul(ext_bytes) != Some(self.total_bytes)
        {
            return Err(corrupt(format!(
                "b2nd array {:?} in chunks {:?} of blocks {:?} ({}-byte items) needs {want_chunks} chunks of {ext_bytes} bytes; the frame holds {} of {} ({} in all)",
                b.shape,
                b.chunkshape,
                b.blockshape,
                self.typesize,
                self.chunks.len(),
                self.chunk_bytes,
                self.total_bytes
            )));
        }
        Ok(())
    }

    /// Bytes the frame decodes to: the b2nd array, or all its chunks one after another.
    pub(super) fn decoded_len(&self) -> usize {
        match &self.b2nd {
            Some(b) => checked_product(&b.shape, self.typesize).expect("checked at parse"),
            None => self.total_bytes,
        }
    }

    /// Decoded bytes of chunk `i`.
    fn chunk_len(&self, i: usize) -> usize {
        if i + 1 < self.chunks.len() {
            self.chunk_bytes
        } else {
            self.total_bytes - self.chunk_bytes * i
        }
    }

    /// Decodes chunk `i` into exactly `out`.
    fn decode_chunk(&self, input: &[u8], i: usize, out: &mut [u8]) -> Result<(), CodecError> {
        match self.chunks[i] {
            ChunkAt::Zeros => out.fill(0),
            ChunkAt::Nan if self.typesize == 4 => super::super::fill(out, &f32::NAN.to_le_bytes()),
            ChunkAt::Nan if self.typesize == 8 => super::super::fill(out, &f64::NAN.to_le_bytes()),
            ChunkAt::Nan => return Err(corrupt("a chunk of NaNs of neither 4 nor 8 bytes")),
            ChunkAt::Stored(at) => {
                let chunk = &input[at..self.chunks_end];
                let h = check_chunk(chunk, out.len())
                    .map_err(|e| corrupt(format!("chunk {i} of the frame: {e}")))?;
                if usize::from(h.typesize) != self.typesize && self.b2nd.is_some() {
                    return Err(corrupt(format!(
                        "chunk {i} has {}-byte items, the frame {}",
                        h.typesize, self.typesize
                    )));
                }
                decode_checked(chunk, &h, out)?;
            }
        }
        Ok(())
    }

    /// Decodes the whole frame into exactly `out` ([`Frame::decoded_len`] bytes), in C order.
    /// `expect_shape`: the HDF5 chunk's shape, which a b2nd array must have.
    pub(super) fn decode(
        &self,
        input: &[u8],
        out: &mut [u8],
        expect_shape: Option<&[usize]>,
    ) -> Result<(), CodecError> {
        if out.len() != self.decoded_len() {
            return Err(corrupt(format!(
                "frame decodes to {} bytes, the chunk holds {}",
                self.decoded_len(),
                out.len()
            )));
        }
        let Some(b) = &self.b2nd else {
            let mut rest = out;
            for i in 0..self.chunks.len() {
                let (mine, tail) = rest.split_at_mut(self.chunk_len(i));
                self.decode_chunk(input, i, mine)?;
                rest = tail;
            }
            return Ok(());
        };
        if let Some(want) = expect_shape {
            if want != b.shape.as_slice() {
                return Err(corrupt(format!(
                    "b2nd array of shape {:?}, the HDF5 chunk is {want:?}",
                    b.shape
                )));
            }
        }
        if self.chunks.len() == 1 && b.chunkshape == b.shape && b.blockshape == b.shape {
            // One chunk of one block: already in C order.
            return self.decode_chunk(input, 0, out);
        }
        SCRATCH.with(|cell| {
            let mut scratch = cell.borrow_mut();
            if scratch.len() < self.chunk_bytes {
                scratch.resize(self.chunk_bytes, 0);
            }
            let grid = b.chunk_grid();
            for i in 0..self.chunks.len() {
                let decoded = &mut scratch[..self.chunk_bytes];
                self.decode_chunk(input, i, decoded)?;
                untile_chunk(b, self.typesize, &unravel(i, &grid), decoded, out);
            }
            Ok(())
        })
    }
}

thread_local! {
    /// A decoded b2nd chunk before its blocks are put in place, reused across calls.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The content of metalayer `name` in the frame header, if there is one.
fn metalayer<'a>(
    input: &'a [u8],
    header_len: usize,
    name: &[u8],
) -> Result<Option<&'a [u8]>, CodecError> {
    let c = Cursor {
        bytes: &input[..header_len],
        part: "frame header",
    };
    if header_len == FIXED_HEADER {
        return Ok(None);
    }
    // [0x93, 0xcd idx(2), 0xde n(2), n x (fixstr name, 0xd2 offset), 0xdc n(2), n x bin32]
    let head = c.take(FIXED_HEADER, 6)?;
    if head[0] != 0x93 || head[1] != 0xcd || head[4] != 0xde {
        return Err(corrupt("frame header: the metalayer index is malformed"));
    }
    let n = usize::from(u16::from_be_bytes([
        head[5],
        c.take(FIXED_HEADER + 6, 1)?[0],
    ]));
    if n > MAX_METALAYERS {
        return Err(corrupt(format!("frame header lists {n} metalayers")));
    }
    let mut at = FIXED_HEADER + 7;
    for _ in 0..n {
        let marker = c.take(at, 1)?[0];
        if marker & 0xE0 != 0xA0 {
            return Err(corrupt("frame header: a metalayer name is malformed"));
        }
        let len = usize::from(marker & 0x1F);
        let this = c.take(at + 1, len)?;
        let offset = c.int(at + 1 + len, "a metalayer offset")?;
        at += 1 + len + 5;
        if this != name {
            continue;
        }
        let offset =
            usize::try_from(offset).map_err(|_| corrupt(format!("metalayer offset {offset}")))?;
        let bin = c.take(offset, 5)?;
        if bin[0] != 0xc6 {
            return Err(corrupt("frame header: a metalayer is not stored as binary"));
        }
        let size = u32::from_be_bytes(bin[1..5].try_into().expect("4 bytes")) as usize;
        return c.take(offset + 5, size).map(Some);
    }
    Ok(None)
}

/// The chunks' positions from the frame's offsets chunk (right after the chunks section), each
/// checked to lie inside the chunks section.
fn offsets(
    input: &[u8],
    header_len: usize,
    chunks_len: usize,
    nchunks: usize,
) -> Result<(Vec<ChunkAt>, usize), CodecError> {
    let at = header_len + chunks_len;
    let index = &input[at..];
    let h = check_chunk(index, nchunks * 8)
        .map_err(|e| corrupt(format!("the frame's chunk offsets: {e}")))?;
    let mut raw = vec![0u8; nchunks * 8];
    decode_checked(index, &h, &mut raw)?;
    let chunks = raw
        .chunks_exact(8)
        .enumerate()
        .map(|(i, b)| {
            let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
            if b[7] & 0x80 != 0 {
                return match b[7] & 0x07 {
                    1 | 4 => Ok(ChunkAt::Zeros),
                    2 => Ok(ChunkAt::Nan),
                    other => Err(corrupt(format!("chunk {i}: special offset kind {other}"))),
                };
            }
            usize::try_from(v)
                .ok()
                .filter(|&off| off < chunks_len)
                .map(|off| ChunkAt::Stored(header_len + off))
                .ok_or_else(|| {
                    corrupt(format!(
                        "chunk {i} at offset {v} lies outside the frame's {chunks_len} bytes of chunks"
                    ))
                })
        })
        .collect::<Result<_, _>>()?;
    Ok((chunks, at + h.cbytes))
}

/// Checks the frame's trailer (after the offsets chunk, which ends at `index_end`): its length
/// field (a msgpack uint32 whose value is 22 bytes from the end) must place it there, and it must start and end as a trailer
/// does (a msgpack array, then the fingerprint's fixext). Nothing in it is needed to decode,
/// but a frame whose trailer is damaged is a damaged frame.
fn trailer(input: &[u8], index_end: usize) -> Result<(), CodecError> {
    const LEN_FROM_END: usize = 22;
    const MIN_LEN: usize = 25;
    let n = input.len();
    let len = n
        .checked_sub(LEN_FROM_END + 1)
        .filter(|&at| input[at] == 0xce)
        .map(|at| u32::from_be_bytes(input[at + 1..at + 5].try_into().expect("4 bytes")) as usize);
    let start = len.filter(|&l| l >= MIN_LEN).and_then(|l| n.checked_sub(l));
    match start {
        Some(start)
            if start >= index_end && input[start] & 0xF0 == 0x90 && input[n - 18] == 0xd8 =>
        {
            Ok(())
        }
        _ => Err(corrupt(format!(
            "the frame's trailer is damaged ({} bytes after the chunk offsets)",
            n.saturating_sub(index_end)
        ))),
    }
}

/// Decodes a blosc2 contiguous frame (one HDF5 blosc2 chunk) into exactly `out`, in C order.
/// `expect_shape` is the HDF5 chunk's shape (in elements), which a b2nd array must match.
pub fn blosc2_frame_decompress(
    input: &[u8],
    out: &mut [u8],
    expect_shape: Option<&[usize]>,
) -> Result<(), CodecError> {
    Frame::parse(input)?.decode(input, out, expect_shape)
}

/// The number of bytes a blosc2 contiguous frame decodes to (a claim of the frame, checked
/// for consistency but not against any chunk).
pub fn blosc2_frame_size(input: &[u8]) -> Result<usize, CodecError> {
    Frame::parse(input).map(|f| f.decoded_len())
}

#[cfg(test)]
mod tests {
    use super::super::tests::data;
    use super::super::{b2nd_compress, blosc2_compress};
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_frames_are_errors() {
        let d = data(60_001);
        for codec in ["blosclz", "lz4", "zstd", "zlib"] {
            let f = blosc2_compress(&d, 1, 1, codec, 5, true);
            assert_eq!(&f[2..10], b"b2frame\0", "{codec}");
            assert_eq!(blosc2_frame_size(&f).unwrap(), d.len());
            let mut out = vec![0x11; d.len()];
            blosc2_frame_decompress(&f, &mut out, None).unwrap();
            assert_eq!(out, d, "{codec}");
        }
        let f = blosc2_compress(&d, 1, 1, "lz4", 5, true);
        let mut out = vec![0u8; d.len()];
        assert!(blosc2_frame_decompress(&f, &mut out[..d.len() - 1], None).is_err());
        for cut in [1, 40, f.len() / 2] {
            assert!(blosc2_frame_decompress(&f[..f.len() - cut], &mut out, None).is_err());
        }
        assert!(blosc2_frame_decompress(&[0u8; 200], &mut out, None).is_err());
        assert!(blosc2_frame_decompress(&[], &mut out, None).is_err());
        // A chunk, not a frame.
        let c = blosc2_compress(&d, 1, 1, "lz4", 5, false);
        assert!(blosc2_frame_decompress(&c, &mut out, None).is_err());
        // Garbage in the middle (the chunk's data).
        let mut bad = f.clone();
        let mid = bad.len() / 2;
        bad[mid - 32..mid + 32].fill(0xEE);
        assert!(blosc2_frame_decompress(&bad, &mut out, None).is_err());
        // Every single-byte change decodes to the same bytes or is an error, never a crash.
        for at in 0..f.len().min(400) {
            let mut bad = f.clone();
            bad[at] ^= 0x5A;
            let _ = blosc2_frame_decompress(&bad, &mut out, None);
            let _ = blosc2_frame_size(&bad);
        }
    }

    /// b2nd frames written by c-blosc2 itself decode to the array it was given, for chunks and
    /// blocks that divide the shape or do not, in every rank. (The c-blosc2 compiled here, 2.15,
    /// writes some whole chunks untiled where its blocks are not contiguous in C order, a rule
    /// fixed in 2.21.2; these shapes are written tiled by both. Files from current writers
    /// are checked against h5py and PyTables in tests/python/test_hdf5_blosc2.py.)
    #[test]
    fn b2nd_arrays_untile_as_c_blosc2_tiled_them() {
        let cases: &[(&[i64], &[i32], &[i32])] = &[
            (&[40], &[40], &[16]),
            (&[17, 3, 10, 12], &[17, 3, 10, 12], &[4, 2, 7, 5]),
            (&[4, 2, 7, 5], &[4, 2, 7, 5], &[4, 2, 7, 5]),
            (&[9, 10], &[4, 6], &[3, 4]),
            (&[5, 6, 7], &[5, 6, 7], &[2, 6, 7]),
            (
                &[3, 2, 2, 2, 2, 2, 2, 3],
                &[3, 2, 2, 2, 2, 2, 2, 3],
                &[2, 1, 2, 1, 2, 1, 2, 2],
            ),
        ];
        for (i, &(shape, chunk, block)) in cases.iter().enumerate() {
            let typesize = [1usize, 2, 4, 8][i % 4];
            let n: i64 = shape.iter().product::<i64>() * typesize as i64;
            let d = data(n as usize);
            let f = b2nd_compress(&d, typesize, 1, "zstd", shape, chunk, block);
            let frame = Frame::parse(&f).unwrap();
            assert!(frame.b2nd.is_some());
            assert_eq!(blosc2_frame_size(&f).unwrap(), d.len());
            let mut out = vec![0xCD; d.len()];
            let want: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
            blosc2_frame_decompress(&f, &mut out, Some(&want)).unwrap();
            assert!(
                out == d,
                "shape {shape:?} chunks {chunk:?} blocks {block:?}"
            );
            // The HDF5 chunk's shape must be the array's.
            let mut other = want.clone();
            other.reverse();
            if other != want {
                assert!(blosc2_frame_decompress(&f, &mut out, Some(&other)).is_err());
            }
        }
    }

    /// The damage that crashed c-blosc2's b2nd reader: a rank past 8, zero extents, blocks
    /// larger than chunks, shapes that do not account for the chunk.
    #[test]
    fn damaged_b2nd_metalayers_are_errors() {
        let shape: &[i64] = &[6, 4, 5];
        let d = data(6 * 4 * 5 * 4);
        let f = b2nd_compress(&d, 4, 1, "lz4", shape, &[6, 4, 5], &[4, 2, 5]);
        let meta = f
            .windows(3)
            .position(|w| w == [0x97, 0x00, 0x03])
            .expect("b2nd meta");
        let mut out = vec![0u8; d.len()];
        let refuse = |bad: &[u8], what: &str| {
            let mut out = vec![0u8; d.len()];
            let e = blosc2_frame_decompress(bad, &mut out, None).unwrap_err();
            assert!(e.to_string().contains(what), "{what}: {e}");
            assert!(blosc2_frame_size(bad).is_err(), "{what}");
        };
        for nd in [0u8, 9, 127, 200] {
            let mut bad = f.clone();
            bad[meta + 2] = nd;
            refuse(&bad, "rank");
        }
        // shape[0] (int64 after 0x93 0xd3), chunk[1], block[2] set to zero.
        let shape0 = meta + 4 + 1;
        let chunk1 = meta + 4 + 3 * 9 + 1 + 5 + 1;
        let block2 = meta + 4 + 3 * 9 + 1 + 3 * 5 + 1 + 2 * 5 + 1;
        for at in [shape0 + 4, chunk1, block2] {
            let mut bad = f.clone();
            bad[at..at + 4].fill(0);
            if at == shape0 + 4 {
                bad[at - 4..at].fill(0);
            }
            refuse(&bad, "is 0");
        }
        // A block larger than its chunk; a shape needing more chunks than stored.
        let mut bad = f.clone();
        bad[block2 + 3] = 9;
        refuse(&bad, "larger than chunks");
        let mut bad = f.clone();
        bad[shape0 + 7] = 7;
        refuse(&bad, "needs");
        blosc2_frame_decompress(&f, &mut out, None).unwrap();
        assert_eq!(out, d);
    }
}
