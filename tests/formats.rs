//! Integration tests of the core on small files written by the real writers (numpy, zipfile,
//! h5py, PyTables; tests/fixtures/make_fixtures.py): every format's indexer and the shared
//! executor, bit for bit against the aranges the fixtures hold, and the errors they give.

use std::path::PathBuf;
use std::sync::Arc;

use packread::batch::{self, Index};
use packread::formats::npy::{self, Limits, NpyIndex};
use packread::formats::npz::{self, Content, NpzIndex};
use packread::formats::zip::{SamplePayload, ZipIndex, ZipLimits, ZipSamples};
use packread::source::{self, memory};
use packread::ErrorKind;

fn local(path: PathBuf) -> Arc<dyn packread::source::Source> {
    source::local(path).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn f4_bytes(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_le_bytes).collect()
}

// --- NPY ---------------------------------------------------------------------------------------

#[test]
fn npy_set_reads_rows_in_order_with_duplicates_and_negatives() {
    let path = fixture("f4_3x4.npy");
    let set = NpyIndex::open_paths(vec![path.clone(), path], &Limits::default(), None).unwrap();
    assert_eq!(set.sample_shape(), &[3, 4]);
    assert_eq!(set.sample_bytes(), 48);
    let mut out = vec![0u8; 3 * 48];
    batch::read(&set, &[1, 0, -1], &[0], &mut [&mut out]).unwrap();
    let one = f4_bytes((0..12).map(|v| v as f32));
    assert_eq!(out, [one.clone(), one.clone(), one].concat());
    let e = batch::read(&set, &[2], &[0], &mut [&mut out[..48]]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Index);
    assert!(e.to_string().contains("f4_3x4.npy"), "{e}");
}

#[test]
fn npy_fortran_file_is_read_in_c_order_by_the_reader() {
    let set = NpyIndex::open_paths(
        vec![fixture("i8be_fortran_2x3.npy")],
        &Limits::default(),
        None,
    )
    .unwrap();
    let mut out = vec![0u8; 48];
    batch::read(&set, &[0], &[0], &mut [&mut out]).unwrap();
    let want: Vec<u8> = (0..6i64).flat_map(i64::to_be_bytes).collect();
    assert_eq!(out, want);
    // A whole-file load keeps the stored (Fortran) layout, as numpy.load does.
    let file = source::local(fixture("i8be_fortran_2x3.npy")).unwrap();
    let (header, start) = npy::read_start(&*file, &Limits::default()).unwrap();
    assert!(header.fortran_order);
    let mut whole = vec![0u8; header.data_len];
    npy::read_data(&file, &header, &start, &mut whole).unwrap();
    let stored: Vec<u8> = [0i64, 3, 1, 4, 2, 5]
        .into_iter()
        .flat_map(i64::to_be_bytes)
        .collect();
    assert_eq!(whole, stored);
}

#[test]
fn npy_set_refuses_files_that_disagree() {
    let e = NpyIndex::open_paths(
        vec![fixture("f4_3x4.npy"), fixture("i8be_fortran_2x3.npy")],
        &Limits::default(),
        None,
    )
    .err()
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::Inconsistent);
    assert!(NpyIndex::open_paths(vec![fixture("raw.zip")], &Limits::default(), None).is_err());
}

// --- ZIP ---------------------------------------------------------------------------------------

#[test]
fn zip_members_stored_and_deflated_are_read_and_crc_checked() {
    let index = Arc::new(ZipIndex::open(local(fixture("raw.zip")), ZipLimits::default()).unwrap());
    let names: Vec<&str> = index.members().iter().map(|m| m.name()).collect();
    assert_eq!(names, ["a.raw", "b.raw"]);
    let a: Vec<u8> = (0..64).collect();
    let b: Vec<u8> = (0..64).rev().collect();
    assert_eq!(index.read(0).unwrap(), a);
    assert_eq!(index.read(1).unwrap(), b);
    let u1 =
        packread::dtype::DType::from_descr(packread::dtype::literal::Literal::Str("|u1".into()))
            .unwrap();
    let payload = SamplePayload::Raw {
        dtype: u1,
        shape: vec![64],
    };
    let samples = ZipSamples::new(index.clone(), vec![0, 1], payload, None).unwrap();
    let mut out = vec![0u8; 3 * 64];
    batch::read(&samples, &[1, 0, 1], &[0], &mut [&mut out]).unwrap();
    assert_eq!(out, [b.clone(), a, b].concat());
    assert_eq!(index.npy_header(0).unwrap(), None);
    assert_eq!(index.position("b.raw").unwrap(), 1);
    assert_eq!(index.position("c.raw").unwrap_err().kind(), ErrorKind::Key);
}

#[test]
fn zip_in_memory_and_damage() {
    let raw = std::fs::read(fixture("raw.zip")).unwrap();
    let index = ZipIndex::open(memory("raw.zip", raw.clone()), ZipLimits::default()).unwrap();
    assert_eq!(index.read(0).unwrap(), (0..64).collect::<Vec<u8>>());
    // Cut off the end record: not a ZIP any more.
    let e = ZipIndex::open(
        memory("cut.zip", raw[..raw.len() - 10].to_vec()),
        ZipLimits::default(),
    )
    .err()
    .unwrap();
    assert_eq!(e.kind(), ErrorKind::BadZip);
    // Flip a stored data byte: the CRC-32 catches it.
    let mut bad = raw.clone();
    let at = bad.windows(3).position(|w| w == [10, 11, 12]).unwrap();
    bad[at] ^= 0xFF;
    let index = ZipIndex::open(memory("bad.zip", bad), ZipLimits::default()).unwrap();
    let e = index.read(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::BadZip);
    assert!(e.to_string().contains("CRC-32"), "{e}");
}

#[test]
fn zip_npy_members_read_in_place_and_checked_against_the_sample_type() {
    let index =
        Arc::new(ZipIndex::open(local(fixture("sample.npz")), ZipLimits::default()).unwrap());
    let i = index.position("image.npy").unwrap();
    let header = index.npy_header(i).unwrap().unwrap();
    assert_eq!(header.shape, vec![2, 3, 4]);
    let layout = index.npy_layout(i).unwrap().expect("a stored member");
    assert_eq!(layout.header, header);
    let label = index.position("label.npy").unwrap();
    let payload = SamplePayload::Npy { reference: i };
    let samples = ZipSamples::new(index.clone(), vec![i, label], payload, None).unwrap();
    assert_eq!(samples.arrays()[0].shape, vec![2, 3, 4]);
    let mut out = vec![0u8; 48];
    batch::read(&samples, &[0, 0], &[0], &mut [&mut out]).unwrap();
    assert_eq!(
        out,
        [(0..24).collect::<Vec<u8>>(), (0..24).collect()].concat()
    );
    let e = batch::read(&samples, &[1], &[0], &mut [&mut out[..24]]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Inconsistent);
    assert!(e.to_string().contains("label.npy"), "{e}");
}

// --- NPZ ---------------------------------------------------------------------------------------

#[test]
fn npz_set_reads_stored_and_deflated_files_alike() {
    let set = NpzIndex::open(
        vec![fixture("sample.npz"), fixture("sample_deflated.npz")],
        ZipLimits::default(),
        None,
    )
    .unwrap();
    let keys: Vec<&str> = set.keys().iter().map(|k| k.name.as_str()).collect();
    assert_eq!(keys, ["image", "label"]);
    let (image, label) = (
        set.position("image").unwrap(),
        set.position("label").unwrap(),
    );
    let mut a = vec![0u8; 3 * 24];
    let mut b = vec![0u8; 3 * 8];
    batch::read(&set, &[1, 0, 1], &[image, label], &mut [&mut a, &mut b]).unwrap();
    let img: Vec<u8> = (0..24).collect();
    assert_eq!(a, [img.clone(), img.clone(), img].concat());
    assert_eq!(b, [7i64.to_le_bytes(); 3].concat());
    assert_eq!(set.position("mask").unwrap_err().kind(), ErrorKind::Key);
    let e = batch::read(&set, &[2], &[image], &mut [&mut a[..24]]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Index);
}

#[test]
fn npz_whole_archive_load() {
    for name in ["sample.npz", "sample_deflated.npz"] {
        let index = ZipIndex::open(local(fixture(name)), ZipLimits::default()).unwrap();
        let contents = npz::contents(&index).unwrap();
        let arrays: Vec<&Content> = contents.iter().collect();
        let mut img = vec![0u8; 24];
        let mut lab = vec![0u8; 8];
        npz::read_arrays(&index, &arrays, &mut [&mut img, &mut lab]).unwrap();
        assert_eq!(img, (0..24).collect::<Vec<u8>>(), "{name}");
        assert_eq!(lab, 7i64.to_le_bytes(), "{name}");
    }
}

// --- HDF5 --------------------------------------------------------------------------------------

/// HDF5 (the default `hdf5` feature; the fuzz targets build the crate without it).
#[cfg(feature = "hdf5")]
mod hdf5 {
    use super::*;
    use packread::formats::hdf5::{Hdf5File, Selection};

    fn u2_rows(rows: &[usize]) -> Vec<u8> {
        rows.iter()
            .flat_map(|&r| (0..6).map(move |c| (r * 6 + c) as u16))
            .flat_map(u16::to_le_bytes)
            .collect()
    }

    fn h5(name: &str, selection: Selection) -> Hdf5File {
        Hdf5File::open(local(fixture(name)), selection, 1 << 20, None).unwrap()
    }

    #[test]
    fn hdf5_every_layout_h5py_writes() {
        let file = h5("h5py.h5", Selection::All);
        assert_eq!(file.len(), 8);
        let rows = [7usize, 0, 3, 3, 5];
        let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        for name in ["chunked", "gzip", "lzf"] {
            let w = file.position(name).unwrap();
            let mut out = vec![0u8; rows.len() * 12];
            batch::read(&file, &idx, &[w], &mut [&mut out]).unwrap();
            assert_eq!(out, u2_rows(&rows), "{name}");
        }
        let w = file.position("contiguous").unwrap();
        let mut out = vec![0u8; 16];
        batch::read(&file, &[-1, 2], &[w], &mut [&mut out]).unwrap();
        let want: Vec<u8> = [7.0f64, 2.0]
            .into_iter()
            .flat_map(f64::to_le_bytes)
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn hdf5_pytables_blosc_carray() {
        let file = h5("pytables.h5", Selection::Names(vec!["x".into()]));
        let mut out = vec![0u8; 2 * 24];
        batch::read(&file, &[6, 1], &[0], &mut [&mut out]).unwrap();
        let want: Vec<u8> = [6usize, 1]
            .iter()
            .flat_map(|&r| (0..6).map(move |c| (r * 6 + c) as i32))
            .flat_map(i32::to_le_bytes)
            .collect();
        assert_eq!(out, want);
    }

    #[test]
    fn hdf5_selection_errors() {
        let open = |s| {
            Hdf5File::open(local(fixture("h5py.h5")), s, 0, None)
                .err()
                .unwrap()
        };
        assert_eq!(
            open(Selection::Names(vec![])).kind(),
            ErrorKind::InvalidArgument
        );
        let twice = Selection::Names(vec!["gzip".into(), "/gzip".into()]);
        assert_eq!(open(twice).kind(), ErrorKind::InvalidArgument);
        assert_eq!(
            open(Selection::Names(vec!["nope".into()])).kind(),
            ErrorKind::Key
        );
        let file = h5("h5py.h5", Selection::All);
        let mut out = vec![0u8; 12];
        let e = batch::read(&file, &[8], &[0], &mut [&mut out]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Index);
        assert!(e.to_string().contains("h5py.h5"), "{e}");
        let e = batch::read(&file, &[0], &[0], &mut [&mut out[..5]]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
}
