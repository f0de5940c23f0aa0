//! Bindings for encoded images: `ImageFile`, the batch reader of images in a ZIP archive or in
//! files (`packread.ImageReader` finds them, names them and labels them).

use std::sync::Arc;

use pyo3::prelude::*;

use super::detached::Detached;
use super::errors::{invalid_argument, to_py, IntoPyResult};
use super::options::Dict;
use super::samples::SampleSet;
use super::source::open_with;
use crate::batch::Index;
use crate::codec::image::Limits;
use crate::error::{Error, ErrorKind};
use crate::formats::image::ImageIndex;
use crate::formats::zip::ZipLimits;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ImageFile>()?;
    m.add_function(wrap_pyfunction!(image_info, m)?)?;
    m.add(
        "DEFAULT_MAX_PIXELS",
        crate::codec::image::DEFAULT_MAX_PIXELS,
    )?;
    Ok(())
}

/// Encoded images as samples (their names, labels and batch reader are the [`SampleSet`]'s).
/// See `packread.ImageReader`.
#[pyclass(module = "packread._packread", frozen, extends = SampleSet)]
pub struct ImageFile {
    index: Detached<Arc<ImageIndex>>,
}

#[pymethods]
impl ImageFile {
    /// The images of `source`: a folder tree (a path to a folder), or an archive or HDF5 file
    /// (a path, bytes, an opened object, a file object), found, named and labelled as
    /// `options` say.
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let d = Dict::new(options)?;
        let images = super::options::images(&d)?;
        let zip = super::options::zip_limits(&d)?;
        let zip = ZipLimits {
            max_member_bytes: d.get(
                "max_member_bytes",
                crate::formats::image::DEFAULT_MAX_FILE_BYTES,
            )?,
            ..zip
        };
        let set = match super::samples::folder_of(source) {
            Some(root) => py
                .detach(|| crate::formats::image::open::from_folder(&root, &images))
                .py_err(py)?,
            None => open_with(py, source, "<image bytes>", move |s| {
                crate::open::images_in(s, &images, zip, false)
            })?,
        };
        let (base, index) = SampleSet::of(py, set)?;
        Ok(PyClassInitializer::from(base).add_subclass(ImageFile {
            index: Detached::new(index),
        }))
    }

    /// `(top, left, height, width, flipped)` of the crop sample `index` gets in `epoch`.
    fn crop(
        &self,
        py: Python<'_>,
        index: usize,
        epoch: u64,
    ) -> PyResult<(u32, u32, u32, u32, bool)> {
        if index >= Index::len(&**self.index) {
            return Err(invalid_argument(py, format!("no sample {index}")));
        }
        let index_ref = &self.index;
        let (r, flip) = py.detach(|| index_ref.crop(index, epoch)).py_err(py)?;
        Ok((r.y, r.x, r.h, r.w, flip))
    }

    /// The encoded bytes of sample `index`.
    fn encoded<'py>(
        &self,
        py: Python<'py>,
        index: usize,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        if index >= Index::len(&**self.index) {
            return Err(invalid_argument(py, format!("no sample {index}")));
        }
        let index_ref = &self.index;
        let data = py.detach(|| index_ref.encoded(index)).py_err(py)?;
        Ok(pyo3::types::PyBytes::new(py, &data))
    }
}

/// `(format, width, height, cmyk, progressive)` of an encoded image's header (nothing is
/// decoded); a `DecodeError` if it is not a JPEG, PNG or WebP header packread reads, or its
/// size is over `max_pixels`.
#[pyfunction]
#[pyo3(signature = (data, max_pixels = crate::codec::image::DEFAULT_MAX_PIXELS))]
fn image_info(
    py: Python<'_>,
    data: &[u8],
    max_pixels: u64,
) -> PyResult<(&'static str, u32, u32, bool, bool)> {
    let i = crate::codec::image::info(data, &Limits { max_pixels })
        .map_err(|e| to_py(py, Error::new(ErrorKind::Decode, "", e.to_string())))?;
    Ok((i.format.name(), i.width, i.height, i.cmyk, i.progressive))
}
