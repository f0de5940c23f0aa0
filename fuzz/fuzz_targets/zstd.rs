//! zstd frames (the HDF5 zstd filter): exactly the declared size or an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::zstd_decompress;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let mut out = vec![0u8; n];
    let _ = zstd_decompress(&data[2..], &mut out);
});
