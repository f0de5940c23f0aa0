//! h5py's LZF filter decoder: fills exactly the declared size or fails; never reads before
//! the output's start or writes past its end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::lzf_decompress;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let mut out = vec![0u8; n];
    let _ = lzf_decompress(&data[2..], &mut out);
});
