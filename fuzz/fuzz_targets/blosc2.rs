//! blosc2 contiguous frames (HDF5 filter 32026, as hdf5plugin and PyTables write them): the
//! frame's size query and its decode into a buffer of any size, 1-d frames and b2nd arrays
//! alike. c-blosc2 must never read past the frame nor write past the output, whatever the
//! frame header, chunk offsets or b2nd metalayer claim.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{blosc2_frame_decompress, blosc2_frame_size};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let input = &data[2..];
    if let Ok(size) = blosc2_frame_size(input) {
        // A size the frame declares is only a claim: decoding into it must still be checked.
        let mut out = vec![0u8; size.min(1 << 20)];
        let _ = blosc2_frame_decompress(input, &mut out, None);
    }
    let mut out = vec![0u8; n];
    let _ = blosc2_frame_decompress(input, &mut out, None);
});
