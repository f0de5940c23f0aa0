//! Bindings for encoded images: `ImageFile`, the batch reader of images in a ZIP archive or in
//! files (`packread.ImageReader` finds them, names them and labels them).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::reader::Reader;
use super::zip::ZipArchive;
use crate::batch::Index;
use crate::codec::image::geometry::{Crop, Element, ImageSpec, Layout};
use crate::codec::image::{Limits, Mode};
use crate::formats::image::{ImageBytes, ImageIndex};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ImageFile>()?;
    m.add(
        "DEFAULT_MAX_PIXELS",
        crate::codec::image::DEFAULT_MAX_PIXELS,
    )?;
    Ok(())
}

/// Encoded images as samples, and (`reader`) their batch reader. See `packread.ImageReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct ImageFile {
    index: Detached<Arc<ImageIndex>>,
    reader: Py<Reader>,
}

#[pymethods]
impl ImageFile {
    /// Images from the members at `members` of `archive` (or from the files `paths`), named
    /// `names`.
    #[new]
    #[pyo3(signature = (archive, members, paths, names, size, crop, resize, scale, ratio, flip, layout, mode, normalize, exif_transpose, max_pixels, seed, skip, num_threads))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        archive: Option<PyRef<'_, ZipArchive>>,
        members: Vec<usize>,
        paths: Vec<PathBuf>,
        names: Vec<String>,
        size: (u32, u32),
        crop: &str,
        resize: u32,
        scale: (f64, f64),
        ratio: (f64, f64),
        flip: bool,
        layout: &str,
        mode: &str,
        normalize: Option<(Vec<f32>, Vec<f32>, String)>,
        exif_transpose: bool,
        max_pixels: u64,
        seed: u64,
        skip: bool,
        num_threads: Option<usize>,
    ) -> PyResult<Self> {
        // Checked by `packread.ImageReader` first; checked again here, where a wrong value
        // would otherwise be a wrong batch.
        let spec = (|| -> PyResult<ImageSpec> {
            let mode =
                Mode::parse(mode).ok_or_else(|| invalid_argument(py, format!("mode {mode:?}")))?;
            let crop = match crop {
                "center" => Crop::Center { resize },
                "random" => Crop::Random { scale, ratio },
                other => return Err(invalid_argument(py, format!("crop {other:?}"))),
            };
            let layout = match layout {
                "NHWC" => Layout::Nhwc,
                "NCHW" => Layout::Nchw,
                other => return Err(invalid_argument(py, format!("layout {other:?}"))),
            };
            let (element, mean, std) = match normalize {
                None => (Element::U8, vec![], vec![]),
                Some((mean, std, dtype)) => {
                    let element = match dtype.as_str() {
                        "float32" => Element::F32,
                        "float16" => Element::F16,
                        other => return Err(invalid_argument(py, format!("dtype {other:?}"))),
                    };
                    if mean.len() != mode.channels() || std.len() != mode.channels() {
                        return Err(invalid_argument(py, "one mean and std per channel"));
                    }
                    (element, mean, std)
                }
            };
            if size.0 == 0 || size.1 == 0 || resize == 0 {
                return Err(invalid_argument(py, "sizes must be positive"));
            }
            Ok(ImageSpec {
                size,
                crop,
                flip,
                layout,
                mode,
                element,
                mean,
                std,
                exif_transpose,
                limits: Limits { max_pixels },
            })
        })()?;
        let bytes = match archive {
            Some(a) => ImageBytes::Zip {
                zip: a.index.clone(),
                members,
            },
            None => py.detach(|| ImageIndex::files(paths)).py_err(py)?,
        };
        let index =
            Arc::new(ImageIndex::new(bytes, names, spec, seed, skip, num_threads).py_err(py)?);
        let reader = Py::new(py, Reader::new(py, index.clone() as Arc<dyn Index>)?)?;
        Ok(ImageFile {
            index: Detached::new(index),
            reader,
        })
    }

    fn __len__(&self) -> usize {
        self.index.len()
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
        if index >= self.index.len() {
            return Err(invalid_argument(py, format!("no sample {index}")));
        }
        let index_ref = &self.index;
        let (r, flip) = py.detach(|| index_ref.crop(index, epoch)).py_err(py)?;
        Ok((r.y, r.x, r.h, r.w, flip))
    }

    /// `{sample index: why}` of every image found not to decode so far (`on_error="skip"`).
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in self.index.errors() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}
