//! The ZIP indexer on arbitrary bytes: end record, ZIP64 records, central directory, local
//! headers (checked against the directory), NPY headers of members and whole-member reads
//! (inflate, CRC-32), with small limits so that a claimed size cannot make a large allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::formats::zip::{ZipIndex, ZipLimits};

fuzz_target!(|data: &[u8]| {
    let limits = ZipLimits {
        max_members: 4096,
        max_member_bytes: 1 << 20,
        ..ZipLimits::default()
    };
    let source = packread::source::memory("fuzz.zip", data.to_vec());
    let Ok(index) = ZipIndex::open(source, limits) else {
        return;
    };
    for i in 0..index.len().min(64) {
        let _ = index.npy_header(i);
        if let Ok(bytes) = index.read(i) {
            assert_eq!(bytes.len() as u64, index.members()[i].size());
        }
    }
    let _ = packread::formats::npz::contents(&index);
});
