//! `Pipeline::decode` with arbitrary steps in arbitrary order (as a malformed HDF5 filter
//! pipeline or ZIP member would give) and arbitrary lengths: the output is always exactly the
//! declared size or the decode fails; intermediate buffers never overrun.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use packread::codec::{BitshuffleInner, Faults, Pipeline, Step, Wrapper};
use packread::ErrorKind;

fn step(code: u8, arg: u8) -> Step {
    let itemsize = usize::from(arg % 9);
    match code % 13 {
        0 => Step::Inflate(Wrapper::Raw),
        1 => Step::Inflate(Wrapper::Zlib),
        2 => Step::Crc32(u32::from(arg) * 0x0101_0101),
        3 => Step::Fletcher32,
        4 => Step::Unshuffle { itemsize },
        5 => Step::Lzf,
        6 => Step::Blosc,
        7 => Step::Zstd,
        8 => Step::Lz4,
        9 => Step::Bitshuffle {
            itemsize,
            block: usize::from(arg / 9) * 8,
            inner: BitshuffleInner::None,
        },
        10 => Step::FortranToC {
            shape: Arc::from([usize::from(arg % 5), usize::from(arg / 5 % 5)]),
            itemsize: itemsize.max(1),
        },
        11 => Step::Blosc2 {
            shape: Arc::from([usize::from(arg)]),
        },
        _ => Step::Fill(Arc::from(vec![arg; usize::from(arg % 4)])),
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let count = usize::from(data[2] % 5);
    let Some(codes) = data.get(3..3 + 2 * count) else {
        return;
    };
    let steps: Vec<Step> = codes.chunks(2).map(|c| step(c[0], c[1])).collect();
    let input = &data[3 + 2 * count..];
    let pipeline = Pipeline::new(steps);
    let mut out = vec![0u8; n];
    let mut tmp = Default::default();
    let _ = pipeline.decode(input, &mut out, &mut tmp, Faults::both(ErrorKind::Hdf5));
});
