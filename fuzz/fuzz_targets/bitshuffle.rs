//! bitshuffle (alone, or with LZ4 or zstd inside): any element size, block size and length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{bitshuffle_decode, BitshuffleInner};

fuzz_target!(|data: &[u8]| {
    if data.len() < 5 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 2;
    let itemsize = usize::from(data[2] % 17);
    let block = usize::from(data[3]) * 8;
    let inner = match data[4] % 3 {
        0 => BitshuffleInner::None,
        1 => BitshuffleInner::Lz4,
        _ => BitshuffleInner::Zstd,
    };
    let mut out = vec![0u8; n];
    let mut tmp = Vec::new();
    let _ = bitshuffle_decode(&data[5..], &mut out, itemsize, block, inner, &mut tmp);
});
