//! The Python binding: the only code that knows about Python. It converts arguments, releases
//! the GIL around all I/O (`py.detach`) and maps core errors to Python exceptions.

mod array;
mod buffers;
mod clip;
mod detached;
mod errors;
mod file_object;
mod hdf5;
mod image;
mod keyed;
mod npy;
mod options;
mod order;
mod pending;
mod reader;
mod remote;
mod samples;
mod shards;
mod source;
mod stats;
mod zip;

use pyo3::prelude::*;

#[pymodule]
fn _packread(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Every default is defined once, in the core; the Python package re-exports these.
    m.add(
        "DEFAULT_MAX_HEADER_SIZE",
        crate::formats::npy::DEFAULT_MAX_HEADER_BYTES,
    )?;
    m.add(
        "DEFAULT_MAX_MEMBER_BYTES",
        crate::formats::zip::DEFAULT_MAX_MEMBER_BYTES,
    )?;
    m.add(
        "DEFAULT_CACHE_BYTES",
        crate::formats::hdf5::DEFAULT_CACHE_BYTES,
    )?;
    m.add("MAX_THREADS", crate::batch::pool::MAX_THREADS)?;
    m.add("HEAD_BYTES", crate::open::HEAD_BYTES)?;
    m.add("TAIL_BYTES", crate::open::TAIL_BYTES)?;
    m.add(
        "DEFAULT_MAX_IMAGE_BYTES",
        crate::formats::image::DEFAULT_MAX_FILE_BYTES,
    )?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    npy::register(m)?;
    zip::register(m)?;
    hdf5::register(m)?;
    samples::register(m)?;
    image::register(m)?;
    clip::register(m)?;
    keyed::register(m)?;
    pending::register(m)?;
    reader::register(m)?;
    order::register(m)?;
    shards::register(m)?;
    remote::register(m)?;
    buffers::register(m)?;
    stats::register(m)?;
    Ok(())
}

/// Sets the number of threads packread reads with (0 restores the default).
///
/// >>> packread.set_num_threads(2)
/// >>> packread.get_num_threads()
/// 2
/// >>> packread.set_num_threads(0)
#[pyfunction]
fn set_num_threads(n: usize) {
    crate::batch::pool::set_num_threads(n);
}

/// The number of threads packread reads with.
///
/// >>> packread.get_num_threads() >= 1
/// True
#[pyfunction]
fn get_num_threads() -> usize {
    crate::batch::pool::num_threads()
}
