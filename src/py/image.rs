//! Bindings for encoded images: `ImageFile`, the batch reader of images in a ZIP archive or in
//! files (`packread.ImageReader` finds them, names them and labels them).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::detached::Detached;
use super::errors::{invalid_argument, to_py, IntoPyResult};
use super::hdf5::HDF5File;
use super::pending::{submit, PendingRead};
use super::reader::Reader;
use super::zip::ZipArchive;
use crate::batch::pool::Work;
use crate::batch::{Index, Rows};
use crate::codec::image::geometry::{Crop, Element, ImageSpec, Layout};
use crate::codec::image::{Limits, Mode};
use crate::error::{Error, ErrorKind};
use crate::formats::image::{ErrorLog, ImageBytes, ImageIndex, SizedBatch};

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ImageFile>()?;
    m.add_class::<ImageErrors>()?;
    m.add_class::<SizedResult>()?;
    m.add_function(wrap_pyfunction!(image_info, m)?)?;
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
    #[pyo3(signature = (archive, members, paths, hdf5, dataset, names, size, crop, resize, scale, ratio, flip, layout, mode, normalize, exif_transpose, max_pixels, seed, skip, num_threads, draft = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        archive: Option<PyRef<'_, ZipArchive>>,
        members: Vec<usize>,
        paths: Vec<PathBuf>,
        hdf5: Option<PyRef<'_, HDF5File>>,
        dataset: usize,
        names: Vec<String>,
        size: Option<(u32, u32)>,
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
        draft: bool,
    ) -> PyResult<Self> {
        // Checked by `packread.ImageReader` first; checked again here, where a wrong value
        // would otherwise be a wrong batch.
        let spec = (|| -> PyResult<ImageSpec> {
            let mode =
                Mode::parse(mode).ok_or_else(|| invalid_argument(py, format!("mode {mode:?}")))?;
            let crop = match (crop, size) {
                (_, None) => Crop::Full,
                ("center", _) => Crop::Center { resize },
                ("random", _) => Crop::Random { scale, ratio },
                (other, _) => return Err(invalid_argument(py, format!("crop {other:?}"))),
            };
            // Images at their own sizes: each sample's spec gets its size when it is read.
            let size = size.unwrap_or((1, 1));
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
                draft,
                limits: Limits { max_pixels },
            })
        })()?;
        let bytes = match (archive, hdf5) {
            (Some(a), _) => ImageBytes::Zip {
                zip: a.index.clone(),
                members,
            },
            (None, Some(h)) => ImageBytes::Hdf5 {
                file: h.file(),
                dataset,
            },
            (None, None) => py.detach(|| ImageIndex::image_files(paths)).py_err(py)?,
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

    /// Starts decoding samples `idx` at their own sizes (`size=None`) on the pool: wait on
    /// the returned read, then take the result.
    fn read_sized(
        &self,
        py: Python<'_>,
        idx: PyReadonlyArray1<'_, i64>,
        epoch: u64,
    ) -> PyResult<(PendingRead, SizedResult)> {
        let idx = idx.as_slice()?.to_vec();
        let rows = Rows::resolve(&idx, self.index.len(), &self.index.location())
            .py_err(py)?
            .in_epoch(epoch);
        let slot: Arc<Mutex<Option<SizedBatch>>> = Arc::default();
        let (index, theirs) = (Arc::clone(&self.index), slot.clone());
        let mut work = Work::new(usize::MAX, u64::MAX);
        if index.waits() {
            work = work.never_inline();
        }
        let read = submit(py, index.threads(), work, Vec::new(), move || {
            let batch = index.read_sized(&rows)?;
            *theirs.lock().unwrap_or_else(|e| e.into_inner()) = Some(batch);
            Ok(())
        });
        Ok((read, SizedResult { slot }))
    }

    /// The encoded bytes of sample `index`.
    fn encoded<'py>(
        &self,
        py: Python<'py>,
        index: usize,
    ) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        if index >= self.index.len() {
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

fn errors_dict<'py>(py: Python<'py>, log: &ErrorLog) -> PyResult<Bound<'py, PyDict>> {
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

/// Images decoded at their own sizes by `read_sized`, once the read has finished.
#[pyclass(module = "packread._packread", frozen)]
pub struct SizedResult {
    slot: Arc<Mutex<Option<SizedBatch>>>,
}

#[pymethods]
impl SizedResult {
    /// `(storage, nbytes, offsets, shapes)`: the elements' bytes are the first `nbytes`
    /// bytes of `storage` (uint64, so that float elements view it aligned), sample `k` is
    /// elements `offsets[k]:offsets[k + 1]` of shape `shapes[k]`. Given once.
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Bound<'py, PyAny>,
        usize,
        Bound<'py, PyAny>,
        Vec<(usize, usize, usize)>,
    )> {
        let batch = super::pending::take_finished(py, &self.slot)?;
        let offsets: Vec<i64> = batch.offsets.iter().map(|&o| o as i64).collect();
        Ok((
            numpy::PyArray1::from_vec(py, batch.storage).into_any(),
            batch.nbytes,
            numpy::PyArray1::from_vec(py, offsets).into_any(),
            batch.shapes.iter().map(|s| (s[0], s[1], s[2])).collect(),
        ))
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
