//! Bindings for encoded images: `ImageFile`, the batch reader of images in a ZIP archive or in
//! files (`packread.ImageReader` finds them, names them and labels them).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::detached::Detached;
use super::errors::{invalid_argument, to_py, IntoPyResult};
use super::options::Dict;
use super::reader::Reader;
use super::source::open_with;
use crate::batch::{Batches, Index};
use crate::codec::image::Limits;
use crate::error::{Error, ErrorKind};
use crate::formats::image::{ErrorLog, ImageIndex};
use crate::formats::zip::ZipLimits;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ImageFile>()?;
    m.add_class::<ImageErrors>()?;
    m.add_function(wrap_pyfunction!(image_info, m)?)?;
    m.add(
        "DEFAULT_MAX_PIXELS",
        crate::codec::image::DEFAULT_MAX_PIXELS,
    )?;
    Ok(())
}

/// Encoded images as samples, their names and labels, and (`reader`) their batch reader. See
/// `packread.ImageReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct ImageFile {
    index: Detached<Arc<ImageIndex>>,
    reader: Py<Reader>,
    names: Vec<OsString>,
    labels: Option<Vec<i64>>,
    classes: Option<Vec<OsString>>,
    label_source: Option<String>,
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
    ) -> PyResult<Self> {
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
        let folder: Option<PathBuf> = source
            .extract::<PathBuf>()
            .ok()
            .filter(|p| !p.to_str().is_some_and(crate::remote::is_url) && p.is_dir());
        let set = match folder {
            Some(root) => py
                .detach(|| crate::formats::image::open::from_folder(&root, &images))
                .py_err(py)?,
            None => open_with(py, source, "<image bytes>", move |s| {
                crate::open::images_in(s, &images, zip, false)
            })?,
        };
        let reader = Py::new(py, Reader::new(py, set.index.clone() as Arc<dyn Batches>)?)?;
        Ok(ImageFile {
            index: Detached::new(set.index),
            reader,
            names: set.names,
            labels: set.labels,
            classes: set.classes,
            label_source: set.label_source,
        })
    }

    /// The samples' names: member names, file paths, or `dataset[k]`.
    fn names(&self) -> Vec<OsString> {
        self.names.clone()
    }

    /// Each sample's label (int64), or `None` where the source has none.
    #[getter]
    fn labels<'py>(&self, py: Python<'py>) -> Option<Bound<'py, numpy::PyArray1<i64>>> {
        self.labels
            .as_ref()
            .map(|l| numpy::PyArray1::from_slice(py, l))
    }

    /// The class names by label, where the source names them.
    #[getter]
    fn classes(&self) -> Option<Vec<OsString>> {
        self.classes.clone()
    }

    /// Where the labels came from: `"folders"`, the JSON member, `"hdf5:<dataset>"`.
    #[getter]
    fn label_source(&self) -> Option<String> {
        self.label_source.clone()
    }

    /// How errors name the images.
    #[getter]
    fn location(&self) -> String {
        Index::location(&**self.index)
    }

    fn __len__(&self) -> usize {
        Index::len(&**self.index)
    }

    /// The batch reader of the images.
    #[getter]
    fn reader(&self, py: Python<'_>) -> Py<Reader> {
        self.reader.clone_ref(py)
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

    /// `{sample index: why}` of every image found not to decode so far (`on_error="skip"`).
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        errors_dict(py, &self.index.error_log())
    }

    /// What `errors` reads, kept apart from the file: it stays readable after the file is
    /// closed (a shard closed to keep descriptors bounded).
    #[getter]
    fn error_log(&self) -> ImageErrors {
        ImageErrors {
            log: self.index.error_log(),
        }
    }
}

pub(super) fn errors_dict<'py>(py: Python<'py>, log: &ErrorLog) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let log = log.lock().unwrap_or_else(|p| p.into_inner());
    for (k, v) in log.iter() {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// The images of one `ImageFile` that did not decode (`on_error="skip"`), holding nothing of
/// the file itself.
#[pyclass(module = "packread._packread", frozen)]
pub struct ImageErrors {
    log: ErrorLog,
}

impl ImageErrors {
    pub(super) fn of(log: ErrorLog) -> ImageErrors {
        ImageErrors { log }
    }
}

#[pymethods]
impl ImageErrors {
    /// `{sample index: why}`.
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        errors_dict(py, &self.log)
    }

    fn __len__(&self) -> usize {
        self.log.lock().unwrap_or_else(|p| p.into_inner()).len()
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
