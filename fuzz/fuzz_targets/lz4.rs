//! LZ4: single blocks, and HDF5's LZ4 framing (total size, block size, per-block lengths).
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{lz4_block, lz4_hdf5};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let mut out = vec![0u8; n];
    if data[2] & 1 == 0 {
        let _ = lz4_block(&data[3..], &mut out);
    } else {
        let _ = lz4_hdf5(&data[3..], &mut out);
    }
});
