//! One HDF5 chunk through the reader's own codec path: the filter pipeline (ids and parameters
//! as a file's dataset creation properties give them), the chunk's shape and element size, its
//! filter mask and its stored bytes, decoded into a buffer of the chunk's size exactly as
//! `HDF5Reader` does (`ChunkDecoder::new`, then `pipeline(mask).decode`). Covers blosc, blosc2
//! (frames, b2nd metalayers, chunk offsets), bitshuffle, lz4, zstd, deflate, shuffle, LZF and
//! Fletcher-32, and chains of them. Built with the C codecs instrumented too (`make fuzz`: clang
//! with AddressSanitizer and coverage for c-blosc2, lz4, zstd, zlib and libdeflate).
//!
//! Input: itemsize code, rank (1-4), dimensions, filter count (0-3); per filter an id code, a
//! parameter count (0-16) and the parameters (u32 LE); the mask (u32 LE); the chunk's bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{ChunkDecoder, Faults, FilterSpec};
use packread::ErrorKind;

const IDS: [u32; 10] = [1, 2, 3, 32000, 32001, 32004, 32008, 32015, 32026, 307];
const ITEMSIZES: [usize; 6] = [1, 2, 4, 8, 3, 16];
/// Largest chunk decoded (bytes): keeps each input fast.
const MAX_CHUNK: usize = 1 << 20;

struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.data.split_at_checked(4)?;
        self.data = rest;
        Some(u32::from_le_bytes(head.try_into().ok()?))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data };
    let Some(itemsize) = input.byte().map(|b| ITEMSIZES[usize::from(b) % ITEMSIZES.len()]) else {
        return;
    };
    let Some(rank) = input.byte().map(|b| usize::from(b % 4) + 1) else {
        return;
    };
    let mut shape = Vec::with_capacity(rank);
    for _ in 0..rank {
        let Some(d) = input.u32() else { return };
        shape.push(d as usize % 4096 + 1);
    }
    let bytes = shape.iter().try_fold(itemsize, |acc, &d| acc.checked_mul(d));
    if bytes.is_none_or(|b| b > MAX_CHUNK) {
        return;
    }
    let Some(nfilters) = input.byte().map(|b| usize::from(b % 4)) else {
        return;
    };
    let mut filters: Vec<(u32, Vec<u32>)> = Vec::with_capacity(nfilters);
    for _ in 0..nfilters {
        let (Some(id), Some(n)) = (input.byte(), input.byte()) else {
            return;
        };
        let mut params = Vec::new();
        for _ in 0..n % 17 {
            let Some(p) = input.u32() else { return };
            params.push(p);
        }
        filters.push((IDS[usize::from(id) % IDS.len()], params));
    }
    let Some(mask) = input.u32() else { return };
    let specs: Vec<FilterSpec<'_>> = filters
        .iter()
        .map(|(id, params)| FilterSpec {
            id: *id,
            name: "",
            params,
            available: false,
        })
        .collect();
    let Ok(Some(decoder)) = ChunkDecoder::new(&specs, &shape, itemsize, false) else {
        return;
    };
    let mut out = vec![0u8; bytes.unwrap_or(0)];
    let mut tmp = Default::default();
    let _ = decoder
        .pipeline(mask)
        .decode(input.data, &mut out, &mut tmp, Faults::both(ErrorKind::Hdf5));
});
