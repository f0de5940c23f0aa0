//! blosc 1.x buffers (PyTables' filter): header checked against the output size before
//! c-blosc sees the bytes; any codec, shuffle mode or block layout.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::blosc_decompress;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let mut out = vec![0u8; n];
    let _ = blosc_decompress(&data[2..], &mut out);
});
