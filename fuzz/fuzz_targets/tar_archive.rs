//! The tar indexer on arbitrary bytes: the header walk (checksums, octal and base-256 sizes,
//! GNU long names, PAX records), the members as stored extents, their grouping into keyed
//! samples, and whole-member reads, with small limits so that a claimed size cannot make a
//! large allocation. Every member the walk accepts lies inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::formats::keyed::group;
use packread::formats::zip::{ZipIndex, ZipLimits};

fuzz_target!(|data: &[u8]| {
    let limits = ZipLimits {
        max_members: 4096,
        max_member_bytes: 1 << 20,
        ..ZipLimits::default()
    };
    let source = packread::source::memory("fuzz.tar", data.to_vec());
    let Ok(index) = ZipIndex::from_tar(source, limits, None) else {
        return;
    };
    for i in 0..index.len().min(64) {
        let start = index.data_start(i).expect("a tar member's data is known");
        let size = index.members()[i].size();
        assert!(start + size <= data.len() as u64);
        if let Ok(bytes) = index.read(i) {
            assert_eq!(&bytes[..], &data[start as usize..(start + size) as usize]);
        }
    }
    let _ = group(&index);
});
