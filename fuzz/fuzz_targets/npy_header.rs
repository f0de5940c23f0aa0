//! The NPY header parser (magic, version, length field, literal dict, descr, shape) and the
//! literal parser under it: never a panic, an allocation past the limits, or a header whose
//! data would run past the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::formats::npy::header::{parse_header, Limits};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = parse_header(data, data.len(), "fuzz.npy", &Limits::default()) {
        assert!(h.data_offset <= data.len());
        assert!(h.data_offset + h.data_len <= data.len());
        assert_eq!(
            h.data_len,
            if h.shape.contains(&0) {
                0
            } else {
                h.shape.iter().product::<usize>() * h.dtype.itemsize()
            }
        );
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = packread::dtype::literal::parse(text);
    }
});
