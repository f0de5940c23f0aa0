//! The header of a blosc chunk, checked before c-blosc2 sees the chunk (see the module).

use super::super::CodecError;

/// Bytes of a blosc chunk header (the part blosc 1.x and blosc2 share).
pub(super) const BLOSC_HEADER: usize = 16;
/// Bytes of a blosc2 chunk header with the filter pipeline (the "extended" header).
pub(super) const BLOSC2_HEADER: usize = 32;
/// Chunk format versions: 1 and 2 are blosc 1.x, 3 to 5 blosc2 (c-blosc2 reads them all).
pub(super) const FORMAT_VERSIONS: std::ops::RangeInclusive<u8> = 1..=5;
/// c-blosc2's largest block (`BLOSC2_MAXBLOCKSIZE`).
pub(super) const MAX_BLOCK: usize = 536_866_816;

/// Header flag bits (c-blosc2's `BLOSC_DOSHUFFLE`, `BLOSC_MEMCPYED`, `BLOSC_DOBITSHUFFLE`).
pub(super) const DOSHUFFLE: u8 = 0x1;
pub(super) const MEMCPYED: u8 = 0x2;
pub(super) const DOBITSHUFFLE: u8 = 0x4;
/// blosc2 flag bits (byte 31 of the extended header).
pub(super) const LAZY_CHUNK: u8 = 0x08;
/// blosc2 flags: a zstd dictionary follows the block starts.
pub(super) const USE_DICT: u8 = 0x01;
/// blosc2's id of the byte-shuffle filter in an extended header's filter pipeline.
pub(super) const SHUFFLE_FILTER: u8 = 1;
/// Largest dictionary c-blosc2 writes or reads (`BLOSC2_MAXDICTSIZE`).
pub(super) const MAX_DICT: usize = 128 * 1024;
pub(super) const INSTRUMENTED: u8 = 0x80;

/// What a chunk holds when it is one value repeated (blosc2's "special" chunks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    Zeros,
    /// NaN of the chunk's type size (4 or 8 bytes).
    Nan,
    /// The `typesize` bytes right after the header, repeated.
    Value,
    /// Written as "not initialised"; packread writes zeros (c-blosc2 would leave the output
    /// as it was, which in a batch buffer is another sample's bytes).
    Uninit,
}

/// What a blosc chunk header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BloscHeader {
    /// Chunk format version (byte 0): 1 and 2 are blosc 1.x, 3 to 5 blosc2.
    pub version: u8,
    /// Flag byte (byte 2): the shuffle, memcpy'ed and don't-split bits, and the codec in the
    /// top three bits (6: the codec is [`BloscHeader::udcodec`]).
    pub flags: u8,
    /// Bytes per element the chunk was shuffled with (byte 3).
    pub typesize: u8,
    /// Bytes the chunk decodes to.
    pub nbytes: usize,
    /// Decoded bytes per block (the last block may hold fewer).
    pub blocksize: usize,
    /// Bytes of the whole stored chunk, header included.
    pub cbytes: usize,
    /// The blosc2 filter pipeline, when the header has one (extended header).
    pub filters: Option<[u8; 6]>,
    /// Each filter's parameter byte (extended header bytes 24-29; zeros without one).
    pub filters_meta: [u8; 6],
    /// The codec named in the extended header when the flags defer to it.
    pub udcodec: u8,
    /// blosc2's flag byte (byte 31 of the extended header: lazy chunk, dictionary, special
    /// kind); 0 without an extended header.
    pub blosc2_flags: u8,
}

impl BloscHeader {
    /// Reads the header at the start of `input`, without judging it (see [`check_chunk`]).
    pub(crate) fn parse(input: &[u8]) -> Result<BloscHeader, CodecError> {
        let h = input.get(..BLOSC_HEADER).ok_or_else(|| {
            format!(
                "blosc: {} stored bytes, shorter than the {BLOSC_HEADER}-byte header",
                input.len()
            )
        })?;
        let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]) as usize;
        let flags = h[2];
        let mut header = BloscHeader {
            version: h[0],
            flags,
            typesize: h[3],
            nbytes: u32_at(4),
            blocksize: u32_at(8),
            cbytes: u32_at(12),
            filters: None,
            filters_meta: [0; 6],
            udcodec: 0,
            blosc2_flags: 0,
        };
        if header.extended() {
            let x = input.get(..BLOSC2_HEADER).ok_or_else(|| {
                format!(
                    "blosc: {} stored bytes, shorter than the {BLOSC2_HEADER}-byte blosc2 header",
                    input.len()
                )
            })?;
            let mut filters = [0u8; 6];
            filters.copy_from_slice(&x[16..22]);
            if header.version == 3 {
                filters[5] = 0; // blosc2's alpha format left the last slot unset
            }
            header.filters = Some(filters);
            header.filters_meta.copy_from_slice(&x[24..30]);
            header.udcodec = x[22];
            header.blosc2_flags = x[31];
        }
        Ok(header)
    }

    /// Whether the header is blosc2's 32-byte one (both shuffle bits set mark it).
    fn extended(&self) -> bool {
        self.flags & (DOSHUFFLE | DOBITSHUFFLE) == DOSHUFFLE | DOBITSHUFFLE
    }

    /// Bytes of this header.
    pub(crate) fn len(&self) -> usize {
        if self.extended() {
            BLOSC2_HEADER
        } else {
            BLOSC_HEADER
        }
    }

    /// The chunk's special kind, if it is one value repeated.
    pub(crate) fn special(&self) -> Result<Option<Special>, CodecError> {
        if !self.extended() {
            return Ok(None);
        }
        Ok(match (self.blosc2_flags >> 4) & 7 {
            0 => None,
            1 => Some(Special::Zeros),
            2 => Some(Special::Nan),
            3 => Some(Special::Value),
            4 => Some(Special::Uninit),
            other => {
                return Err(corrupt(format!(
                    "blosc: unknown special chunk kind {other}"
                )))
            }
        })
    }
}

pub(super) fn corrupt(msg: String) -> CodecError {
    CodecError::Corrupt(msg)
}

/// Checks everything c-blosc2 trusts in the header of the chunk at the start of `input` before
/// it sees the chunk: it must decode to exactly `nbytes` bytes, lie inside `input`, name a
/// codec and filters that are built in, and be a plain (not lazy, not instrumented) chunk.
pub(crate) fn check_chunk(input: &[u8], nbytes: usize) -> Result<BloscHeader, CodecError> {
    let h = BloscHeader::parse(input)?;
    if !FORMAT_VERSIONS.contains(&h.version) {
        return Err(corrupt(format!(
            "blosc: header format version {} (expected {FORMAT_VERSIONS:?})",
            h.version
        )));
    }
    if h.nbytes != nbytes {
        return Err(corrupt(format!(
            "blosc: header says {} decoded bytes, the chunk holds {nbytes}",
            h.nbytes
        )));
    }
    if h.cbytes < h.len() || h.cbytes > input.len() {
        return Err(corrupt(format!(
            "blosc: header says {} compressed bytes, {} are stored",
            h.cbytes,
            input.len()
        )));
    }
    if h.typesize == 0 {
        return Err(corrupt("blosc: header has type size 0".into()));
    }
    if h.blocksize == 0 || h.blocksize > MAX_BLOCK || (nbytes > 0 && h.blocksize > nbytes) {
        return Err(corrupt(format!(
            "blosc: header has block size {} for {nbytes} bytes",
            h.blocksize
        )));
    }
    if h.blosc2_flags & LAZY_CHUNK != 0 {
        return Err(corrupt(
            "blosc: a lazy chunk (its blocks are in a file packread does not have)".into(),
        ));
    }
    if h.blosc2_flags & INSTRUMENTED != 0 {
        return Err(unsupported(
            "an instrumented codec (a development build's output)",
        ));
    }
    if let Some(special) = h.special()? {
        if nbytes % usize::from(h.typesize) != 0 {
            return Err(corrupt(format!(
                "blosc: {nbytes} bytes of one repeated value is not a whole number of {}-byte items",
                h.typesize
            )));
        }
        if special == Special::Value && h.cbytes < BLOSC2_HEADER + usize::from(h.typesize) {
            return Err(corrupt(
                "blosc: a repeated-value chunk without its value".into(),
            ));
        }
        if special == Special::Nan && !matches!(h.typesize, 4 | 8) {
            return Err(corrupt(format!(
                "blosc: a chunk of NaNs with type size {}",
                h.typesize
            )));
        }
        return Ok(h);
    }
    // The codec: the flags' top three bits, or the extended header's codec byte when they
    // say 6 (c-blosc2's numbering there: 0 blosclz, 1 lz4, 2 lz4hc, 4 zlib, 5 zstd).
    let codec_ok = match h.flags >> 5 {
        0 | 1 | 3 | 4 => true,
        6 => h.extended() && matches!(h.udcodec, 0 | 1 | 2 | 4 | 5),
        _ => false,
    };
    if !codec_ok && h.flags & MEMCPYED == 0 {
        let code = if h.flags >> 5 == 6 {
            h.udcodec
        } else {
            h.flags >> 5
        };
        return Err(unsupported(&format!(
            "codec {code}, which is not one of blosc's own (blosclz, lz4, lz4hc, zlib, zstd)"
        )));
    }
    // Filters: none, shuffle, bitshuffle, delta, truncated precision (undone by nothing).
    if let Some(bad) = h.filters.and_then(|f| f.into_iter().find(|&id| id > 4)) {
        return Err(unsupported(&format!(
            "filter {bad}, which is not one of blosc's own (shuffle, bitshuffle, delta, truncated precision)"
        )));
    }
    // c-blosc2 2.23 and later read a shuffle filter's parameter byte, when not 0, as the
    // number of bytes shuffled together (python-blosc2 writes such chunks); the c-blosc2 2.15
    // packread links ignores it and would unshuffle by the type size: other bytes, silently.
    if let Some(filters) = h.filters {
        for (id, meta) in filters.into_iter().zip(h.filters_meta) {
            if id == SHUFFLE_FILTER && meta != 0 && meta != h.typesize {
                return Err(unsupported(&format!(
                    "a shuffle of {meta}-byte groups in {}-byte items (c-blosc2 2.23's \
                     parameter of the shuffle filter), which packread's c-blosc2 2.15 does not undo",
                    h.typesize
                )));
            }
        }
    }
    if h.version <= 2 && h.flags & MEMCPYED == 0 {
        blosc1_streams(input, &h)?;
    }
    if h.extended() && h.blosc2_flags & USE_DICT != 0 {
        dictionary(input, &h)?;
    }
    Ok(h)
}

/// A chunk compressed with a zstd dictionary carries it after the block starts: its size (1 to
/// 128 KiB) and bytes must lie in the chunk, and, for zstd blocks, zstd must accept it.
/// c-blosc2 loads it with `ZSTD_createDDict` and asserts the result is not NULL before
/// decoding (an abort of the whole process when zstd refuses a damaged dictionary).
fn dictionary(input: &[u8], h: &BloscHeader) -> Result<(), CodecError> {
    let blocks = if h.flags & MEMCPYED == 0 {
        h.nbytes.div_ceil(h.blocksize)
    } else {
        0
    };
    let at = BLOSC2_HEADER + 4 * blocks;
    let size = input
        .get(at..at + 4)
        .filter(|_| at + 4 <= h.cbytes)
        .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| corrupt("blosc: the chunk's dictionary size runs past the chunk".into()))?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&n| (1..=MAX_DICT).contains(&n))
        .ok_or_else(|| corrupt(format!("blosc: a dictionary of {size} bytes")))?;
    let dict = input
        .get(at + 4..at + 4 + size)
        .filter(|_| at + 4 + size <= h.cbytes)
        .ok_or_else(|| corrupt("blosc: the chunk's dictionary runs past the chunk".into()))?;
    let zstd = match h.flags >> 5 {
        4 => true,
        6 => h.udcodec == 5,
        _ => false,
    };
    if zstd && h.flags & MEMCPYED == 0 {
        // SAFETY: `dict` is a live slice; zstd copies it into the DDict, freed at once.
        let ddict = unsafe { zstd_sys::ZSTD_createDDict(dict.as_ptr().cast(), dict.len()) };
        if ddict.is_null() {
            return Err(corrupt(
                "blosc: the chunk's zstd dictionary is damaged (zstd refuses it)".into(),
            ));
        }
        // SAFETY: `ddict` came from ZSTD_createDDict just above and is freed once.
        unsafe { zstd_sys::ZSTD_freeDDict(ddict) };
    }
    Ok(())
}

/// A blosc 1.x chunk's compressed streams, walked as c-blosc2 walks them (each block at its
/// start offset, one stream a block or one per byte of the type size), each of which blosc 1.x
/// always writes with a positive size. c-blosc2 reads blosc 1.x chunks with blosc2's rules,
/// where a size of 0 is a block of zeros and a negative one a run of a byte: in a blosc 1.x
/// chunk those are damage (c-blosc 1.x refuses them), not zeros.
fn blosc1_streams(input: &[u8], h: &BloscHeader) -> Result<(), CodecError> {
    let at = |i: usize| -> Result<i64, CodecError> {
        i.checked_add(4)
            .filter(|&end| end <= h.cbytes)
            .and_then(|end| input.get(i..end))
            .map(|b| i64::from(i32::from_le_bytes(b.try_into().expect("4 bytes"))))
            .ok_or_else(|| corrupt(format!("blosc: a stream at byte {i} runs past the chunk")))
    };
    let nblocks = h.nbytes.div_ceil(h.blocksize);
    let dont_split = h.flags & 0x10 != 0;
    for b in 0..nblocks {
        let start = at(BLOSC_HEADER + 4 * b)?;
        let leftover = b + 1 == nblocks && h.nbytes % h.blocksize != 0;
        let streams = if dont_split || leftover {
            1
        } else {
            usize::from(h.typesize)
        };
        let mut pos = usize::try_from(start).unwrap_or(usize::MAX);
        for _ in 0..streams {
            let size = at(pos)?;
            if size <= 0 {
                return Err(corrupt(format!(
                    "blosc: block {b} has a stream of size {size}, which blosc 1.x never writes"
                )));
            }
            pos = pos.saturating_add(4).saturating_add(size as usize);
            if pos > h.cbytes {
                return Err(corrupt(format!("blosc: block {b} runs past the chunk")));
            }
        }
    }
    Ok(())
}

fn unsupported(what: &str) -> CodecError {
    // A chunk of a known format naming something packread does not decode is still bytes it
    // cannot read: reported as corrupt data of the format (an HDF5Error for HDF5 chunks).
    CodecError::Corrupt(format!("blosc: the chunk uses {what}"))
}
