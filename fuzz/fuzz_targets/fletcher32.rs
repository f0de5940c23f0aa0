//! HDF5's Fletcher-32 trailer: a chunk whose trailer matches passes (either byte order, as
//! libhdf5 accepts), anything else is an error, and the data before the trailer is kept.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::{fletcher32, strip_fletcher32};

fuzz_target!(|data: &[u8]| {
    let mut out = vec![0u8; data.len().saturating_sub(4)];
    if strip_fletcher32(data, &mut out).is_ok() {
        assert_eq!(out, data[..data.len() - 4]);
    }
    // The same data with a correct trailer always passes.
    let mut sealed = data.to_vec();
    sealed.extend(fletcher32(data).to_le_bytes());
    let mut out = vec![0u8; data.len()];
    strip_fletcher32(&sealed, &mut out).expect("a correct trailer passes");
    assert_eq!(out, data);
});
