//! Round trips against the reference encoders, on random data of random sizes: every decoder
//! must give back exactly what the codec's own library (libdeflate, c-blosc2, liblz4, libzstd)
//! or the filter's definition (shuffle, Fletcher-32, LZF, bitshuffle) encoded, and refuse an
//! output of the wrong size.

use proptest::prelude::*;

use super::bitshuffle::default_block;
use super::bitshuffle::tests::encode as bitshuffle_encode;
use super::blosc::tests::blosc_compress;
use super::lz4::lz4_compress_block;
use super::lz4::tests::lz4_hdf5_compress;
use super::zstd::tests::zstd_compress;
use super::*;

/// Data of any length up to `max` that compresses a little (runs, small values and noise, as
/// sample data does), made from a seed: cheap to generate even in a debug build.
fn data(max: usize) -> impl Strategy<Value = Vec<u8>> {
    (0..max, any::<u64>(), 0u8..4).prop_map(|(len, seed, mode)| {
        let mut x = seed | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match mode {
                    0 => x as u8,
                    1 => (x % 5) as u8,
                    2 => (i / 97) as u8,
                    _ => {
                        if x % 7 == 0 {
                            x as u8
                        } else {
                            0
                        }
                    }
                }
            })
            .collect()
    })
}

/// HDF5's shuffle, from its definition: byte `b` of element `e` goes to `b * n + e`.
fn shuffle(input: &[u8], itemsize: usize) -> Vec<u8> {
    let n = input.len() / itemsize;
    let mut out = input.to_vec();
    for e in 0..n {
        for b in 0..itemsize {
            out[b * n + e] = input[e * itemsize + b];
        }
    }
    out
}

/// Fletcher-32 as libhdf5 defines it (`H5_checksum_fletcher32`), written independently.
fn fletcher32_reference(data: &[u8]) -> u32 {
    let (mut a, mut b) = (0u32, 0u32);
    for pair in data.chunks(2) {
        let word = if pair.len() == 2 {
            u32::from(pair[0]) << 8 | u32::from(pair[1])
        } else {
            u32::from(pair[0]) << 8
        };
        a = (a + word) % 65535;
        b = (b + a) % 65535;
    }
    b << 16 | a
}

/// A valid LZF stream for `data`: literal runs, and back-references wherever the previous
/// bytes repeat (LZF's two forms: short `len 1..6` and long `len >= 7`).
fn lzf_encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut lit: Vec<u8> = Vec::new();
    let flush = |out: &mut Vec<u8>, lit: &mut Vec<u8>| {
        for run in lit.chunks(32) {
            out.push((run.len() - 1) as u8);
            out.extend_from_slice(run);
        }
        lit.clear();
    };
    let mut i = 0;
    while i < data.len() {
        // Longest match of at least 3 bytes at distance 1..=64.
        let mut best = (0usize, 0usize);
        for off in 1..=i.min(64) {
            let mut len = 0;
            while i + len < data.len() && len < 264 && data[i + len] == data[i + len - off] {
                len += 1;
            }
            if len > best.0 {
                best = (len, off);
            }
        }
        if best.0 >= 3 {
            flush(&mut out, &mut lit);
            let (len, off) = (best.0 - 2, best.1 - 1);
            if len < 7 {
                out.push(((len << 5) | (off >> 8)) as u8);
            } else {
                out.push(((7 << 5) | (off >> 8)) as u8);
                out.push((len - 7) as u8);
            }
            out.push(off as u8);
            i += best.0;
        } else {
            lit.push(data[i]);
            i += 1;
        }
    }
    flush(&mut out, &mut lit);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn deflate_round_trips_with_libdeflate(data in data(20_000), zlib in any::<bool>()) {
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let mut z = vec![0; c.zlib_compress_bound(data.len()).max(c.deflate_compress_bound(data.len()))];
        let (n, wrapper) = if zlib {
            (c.zlib_compress(&data, &mut z).unwrap(), Wrapper::Zlib)
        } else {
            (c.deflate_compress(&data, &mut z).unwrap(), Wrapper::Raw)
        };
        let mut out = vec![0; data.len()];
        inflate(&z[..n], &mut out, wrapper).unwrap();
        prop_assert_eq!(&out, &data);
        let mut short = vec![0; data.len().saturating_sub(1)];
        if !data.is_empty() {
            prop_assert!(inflate(&z[..n], &mut short, wrapper).is_err());
        }
        if !zlib {
            let k = data.len() / 2;
            prop_assert_eq!(inflate_prefix(&z[..n], k).unwrap(), &data[..k]);
        }
    }

    #[test]
    fn unshuffle_inverts_shuffle(data in data(5000), itemsize in 1usize..17) {
        let mut out = vec![0; data.len()];
        unshuffle(&shuffle(&data, itemsize), &mut out, itemsize).unwrap();
        prop_assert_eq!(out, data);
    }

    #[test]
    fn fletcher32_matches_libhdf5s_definition(data in data(5000)) {
        prop_assert_eq!(fletcher32(&data), fletcher32_reference(&data));
        let mut sealed = data.clone();
        sealed.extend(fletcher32(&data).to_le_bytes());
        let mut out = vec![0; data.len()];
        strip_fletcher32(&sealed, &mut out).unwrap();
        prop_assert_eq!(&out, &data);
        if let Some(last) = sealed.first_mut() {
            *last ^= 0x40;
            prop_assert!(matches!(strip_fletcher32(&sealed, &mut out), Err(CodecError::Checksum(_))));
        }
    }

    #[test]
    fn lzf_decodes_what_an_lzf_encoder_wrote(data in data(5000)) {
        let mut out = vec![0; data.len()];
        lzf_decompress(&lzf_encode(&data), &mut out).unwrap();
        prop_assert_eq!(&out, &data);
        let mut long = vec![0; data.len() + 1];
        prop_assert!(lzf_decompress(&lzf_encode(&data), &mut long).is_err());
    }

    #[test]
    fn lzf_prefix_decodes_the_same_first_bytes(data in data(5000), cut in 0.0f64..=1.0) {
        let encoded = lzf_encode(&data);
        let keep = ((data.len() as f64) * cut) as usize;
        let mut out = vec![0; keep];
        lzf_decompress_prefix(&encoded, &mut out, data.len(), true).unwrap();
        let mut again = vec![0; keep];
        lzf_decompress_prefix(&encoded, &mut again, data.len(), false).unwrap();
        prop_assert_eq!(&again, &out);
        prop_assert_eq!(&out[..], &data[..keep]);
        // A block of another size than the stream's is as corrupt as a whole decode says.
        prop_assert!(lzf_decompress_prefix(&encoded, &mut out, data.len() + 1, true).is_err());
        if !data.is_empty() {
            prop_assert!(lzf_decompress_prefix(&encoded, &mut out[..keep.min(data.len() - 1)], data.len() - 1, true).is_err());
        }
        let mut long = vec![0; data.len() + 1];
        prop_assert!(lzf_decompress_prefix(&encoded, &mut long, data.len() + 1, true).is_err());
    }

    #[test]
    fn lz4_round_trips_with_liblz4(data in data(20_000), block in 1usize..5000) {
        let mut out = vec![0; data.len()];
        lz4_block(&lz4_compress_block(&data), &mut out).unwrap();
        prop_assert_eq!(&out, &data);
        let mut out = vec![0; data.len()];
        lz4_hdf5(&lz4_hdf5_compress(&data, block), &mut out).unwrap();
        prop_assert_eq!(&out, &data);
    }

    #[test]
    fn zstd_round_trips_with_libzstd(data in data(20_000)) {
        let mut out = vec![0; data.len()];
        zstd_decompress(&zstd_compress(&data), &mut out).unwrap();
        prop_assert_eq!(&out, &data);
    }

    #[test]
    fn blosc_round_trips_with_c_blosc(
        data in data(20_000),
        typesize in prop_oneof![Just(1usize), Just(2), Just(4), Just(8)],
        shuffle in 0i32..3,
        codec in prop_oneof![Just("blosclz"), Just("lz4"), Just("lz4hc"), Just("zlib"), Just("zstd")],
    ) {
        // Whole elements, as every HDF5 chunk holds: c-blosc2 2.15 writes a run of zeros whose
        // size is not a multiple of the type size as a special chunk its own decoder then
        // refuses (invalid header), a writer quirk no HDF5 file can contain.
        let data = &data[..data.len() / typesize * typesize];
        let mut out = vec![0; data.len()];
        blosc_decompress(&blosc_compress(data, typesize, shuffle, codec), &mut out).unwrap();
        prop_assert_eq!(&out[..], data);
    }

    #[test]
    fn bitshuffle_round_trips(
        data in data(8000),
        itemsize in prop_oneof![Just(1usize), Just(2), Just(4), Just(8), Just(3)],
        block in prop_oneof![Just(0usize), Just(8), Just(64), Just(1024)],
        inner in prop_oneof![Just(BitshuffleInner::None), Just(BitshuffleInner::Lz4), Just(BitshuffleInner::Zstd)],
    ) {
        let data = &data[..data.len() / itemsize * itemsize];
        let block = if block == 0 { default_block(itemsize) } else { block };
        let stored = bitshuffle_encode(data, itemsize, block, inner);
        let mut out = vec![0; data.len()];
        let mut tmp = Vec::new();
        let param = if inner == BitshuffleInner::None { block } else { 0 };
        bitshuffle_decode(&stored, &mut out, itemsize, param, inner, &mut tmp).unwrap();
        prop_assert_eq!(&out, data);
    }

    #[test]
    fn pipeline_undoes_hdf5s_filters_in_reverse(data in data(8000), itemsize in 1usize..9) {
        // Write side: shuffle, deflate (zlib), Fletcher-32; read side reverses it.
        let data = &data[..data.len() / itemsize * itemsize];
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
        let shuffled = shuffle(data, itemsize);
        let mut z = vec![0; c.zlib_compress_bound(shuffled.len())];
        let n = c.zlib_compress(&shuffled, &mut z).unwrap();
        z.truncate(n);
        z.extend(fletcher32(&z).to_le_bytes());
        let p = Pipeline::new(vec![
            Step::Fletcher32,
            Step::Inflate(Wrapper::Zlib),
            Step::Unshuffle { itemsize },
        ]);
        let mut out = vec![0; data.len()];
        let faults = Faults::both(crate::ErrorKind::Hdf5);
        p.decode(&z, &mut out, &mut Default::default(), faults).unwrap();
        prop_assert_eq!(&out, data);
    }
}
