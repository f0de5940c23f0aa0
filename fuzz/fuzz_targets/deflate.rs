//! DEFLATE (raw, as in ZIP, and zlib-wrapped, as in HDF5): exactly the declared size or an
//! error; the streaming prefix decoder never returns more than asked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{inflate, inflate_prefix, Wrapper};

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]])) * 4;
    let wrapper = if data[2] & 1 == 0 {
        Wrapper::Raw
    } else {
        Wrapper::Zlib
    };
    let input = &data[3..];
    let mut out = vec![0u8; n];
    let _ = inflate(input, &mut out, wrapper);
    if let Ok(prefix) = inflate_prefix(input, n) {
        assert!(prefix.len() <= n);
    }
});
