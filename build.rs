//! Builds c-blosc2 (blosc 1.x and 2 decoding: HDF5 filters 32001 and 32026) into the extension,
//! against the one copy of each codec library the rest of packread links: lz4 (`lz4-sys`), zstd
//! (`zstd-sys`) and zlib (`libz-sys`); and two small C files of packread's own, each against
//! the headers of the library it calls: packread's libhdf5 file driver and the JPEG decoder
//! (libjpeg's API).
//!
//! Why not a blosc2 crate as it is: every one on crates.io (`blosc2-sys`, `blosc2-src`,
//! `blosc2-rs-sys`) compiles c-blosc2 together with private copies of lz4, zstd and zlib-ng.
//! Linked beside `lz4-sys`/`zstd-sys`, two archives then define the same symbols; the linker
//! takes each object from whichever archive it meets first, and can mix objects of two zstd
//! builds whose `ZSTD_DCtx` layouts differ (zstd-sys is built with legacy support, which adds
//! fields). And c-blosc 1.x (`blosc-src`) cannot sit beside any c-blosc2: both define
//! `blosclz_decompress`, `fastcopy`, `copy_match`, ... with different code. So packread links
//! c-blosc2 alone (it reads blosc 1.x buffers too), built here.
//!
//! The C sources are c-blosc2's own, unmodified, as shipped in the crates.io package
//! `blosc2-src` (pinned, a build-dependency only so that cargo fetches it; nothing of its own
//! build is linked). Its directory is found with `cargo metadata`. Only c-blosc2's core is
//! compiled (`blosc/`: frames, b2nd, shuffles, blosclz); its plugins (zfp, ndlz, bytedelta)
//! are not: data using them is an error, not a crash.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE_PACKAGE: &str = "blosc2-src";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/codec/blosc2_shim.c");
    let root = c_blosc2_dir();
    let blosc = root.join("blosc");
    let include = root.join("include");
    let deps: Vec<PathBuf> = ["DEP_LZ4_INCLUDE", "DEP_ZSTD_INCLUDE", "DEP_Z_INCLUDE"]
        .iter()
        .map(|v| {
            let p = std::env::var(v).unwrap_or_else(|_| panic!("{v} is not set"));
            // libz-sys may list several directories.
            PathBuf::from(p.split([',', ';']).next().unwrap_or_default())
        })
        .collect();
    let x86 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");

    let base = || {
        let mut b = cc::Build::new();
        b.include(&include)
            .include(&blosc)
            .includes(&deps)
            .define("HAVE_LZ4", None)
            .define("HAVE_ZSTD", None)
            .define("HAVE_ZLIB", None)
            .warnings(false)
            .opt_level(3);
        if x86 {
            // shuffle.c picks SSE2 or AVX2 at run time (cpuid).
            b.define("SHUFFLE_SSE2_ENABLED", "1")
                .define("SHUFFLE_AVX2_ENABLED", "1");
        }
        b
    };

    let mut core = base();
    let mut avx2 = base();
    let mut n_avx2 = 0;
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&blosc)
        .expect("c-blosc2 sources")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    for path in sources {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if ["altivec", "neon", "avx512"]
            .iter()
            .any(|s| name.contains(s))
        {
            continue;
        }
        if name.contains("avx2") {
            if x86 {
                avx2.file(&path);
                n_avx2 += 1;
            }
        } else if name.contains("sse2") {
            if x86 {
                core.file(&path);
            }
        } else {
            core.file(&path);
        }
    }
    core.file("src/codec/blosc2_shim.c");
    core.compile("packread_blosc2");
    if n_avx2 > 0 {
        avx2.flag("-mavx2").compile("packread_blosc2_avx2");
    }
    if std::env::var_os("CARGO_FEATURE_HDF5").is_some() {
        hdf5_driver();
    }
    jpeg_shim();
}

/// JPEG decoding through libjpeg's own API (src/codec/image/jpeg_shim.c says why), built
/// against the headers of the libjpeg-turbo that turbojpeg-sys builds and links.
fn jpeg_shim() {
    println!("cargo:rerun-if-changed=src/codec/image/jpeg_shim.c");
    let include = std::env::var("DEP_TURBOJPEG_INCLUDE").expect("DEP_TURBOJPEG_INCLUDE is not set");
    cc::Build::new()
        .file("src/codec/image/jpeg_shim.c")
        .includes(include.split(','))
        .warnings(true)
        .opt_level(2)
        .compile("packread_jpeg");
}

/// The file driver libhdf5 reads every file through (src/formats/hdf5/driver.c), built against
/// the headers of the libhdf5 that hdf5-sys builds and links.
fn hdf5_driver() {
    println!("cargo:rerun-if-changed=src/formats/hdf5/driver.c");
    let include = std::env::var("DEP_HDF5_INCLUDE").expect("DEP_HDF5_INCLUDE is not set");
    cc::Build::new()
        .file("src/formats/hdf5/driver.c")
        .include(include)
        .warnings(true)
        .opt_level(2)
        .compile("packread_hdf5_driver");
}

/// c-blosc2's source tree inside the `blosc2-src` package.
fn c_blosc2_dir() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let run = |offline: bool| {
        let mut cmd = Command::new(&cargo);
        cmd.args(["metadata", "--format-version", "1"])
            .current_dir(&manifest);
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().ok().filter(|o| o.status.success())
    };
    let out = run(true)
        .or_else(|| run(false))
        .expect("`cargo metadata` failed: cannot locate c-blosc2's sources");
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let manifest_path = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == SOURCE_PACKAGE)
        .and_then(|p| p["manifest_path"].as_str())
        .unwrap_or_else(|| panic!("{SOURCE_PACKAGE} is not in the dependency graph"));
    let dir = Path::new(manifest_path)
        .parent()
        .expect("manifest dir")
        .join("c-blosc2");
    assert!(
        dir.join("blosc").join("blosc2.c").exists(),
        "no c-blosc2 sources in {}",
        dir.display()
    );
    dir
}
