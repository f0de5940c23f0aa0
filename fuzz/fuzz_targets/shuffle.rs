//! HDF5's byte unshuffle: any element size, any length (trailing bytes copied), and the
//! round trip with a reference shuffle.
#![no_main]

use libfuzzer_sys::fuzz_target;
use packread::codec::unshuffle;

fuzz_target!(|data: &[u8]| {
    let Some((&size, input)) = data.split_first() else {
        return;
    };
    let itemsize = usize::from(size % 33);
    let mut out = vec![0u8; input.len()];
    if unshuffle(input, &mut out, itemsize).is_err() {
        assert_eq!(itemsize, 0);
        return;
    }
    // Shuffling `out` again (the filter's write side) gives back the input.
    let n = input.len() / itemsize;
    let mut again = out.clone();
    for b in 0..itemsize {
        for e in 0..n {
            again[b * n + e] = out[e * itemsize + b];
        }
    }
    assert_eq!(again, input);
});
