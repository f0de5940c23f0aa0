//! Bindings for clips: `ClipFile`, the batch reader of clips of frame folders on disk or in a
//! ZIP archive (`packread.ClipReader` names, labels and describes them).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::image::{errors_dict, ImageErrors};
use super::reader::Reader;
use super::source::open_with;
use crate::batch::{Batches, Index};
use crate::formats::image::clip::ClipIndex;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ClipFile>()
}

/// Clips of the videos of one source as samples, their names and labels, and (`reader`) their
/// batch reader. See `packread.ClipReader`.
#[pyclass(module = "packread._packread", frozen)]
pub struct ClipFile {
    index: Detached<Arc<ClipIndex>>,
    reader: Py<Reader>,
    names: Vec<OsString>,
    labels: Option<Vec<i64>>,
    classes: Option<Vec<OsString>>,
    label_source: Option<String>,
}

#[pymethods]
impl ClipFile {
    /// The clips of `source`: a frame tree (a path to a folder), or an archive holding one (a
    /// path, bytes, an opened object, a file object), cut as `options` say.
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let options = super::options::options(options, "clips")?;
        let crate::open::Format::Clips(clips) = options.format else {
            return Err(invalid_argument(py, "not clip options"));
        };
        let zip = options.zip;
        let folder: Option<PathBuf> = source
            .extract::<PathBuf>()
            .ok()
            .filter(|p| !p.to_str().is_some_and(crate::remote::is_url) && p.is_dir());
        let set = match folder {
            Some(root) => py
                .detach(|| crate::formats::image::videos::from_folder(&root, &clips))
                .py_err(py)?,
            None => open_with(py, source, "<clip bytes>", move |s| {
                crate::open::clips_in(s, &clips, zip, false)
            })?,
        };
        let reader = Py::new(py, Reader::new(py, set.index.clone() as Arc<dyn Batches>)?)?;
        Ok(ClipFile {
            index: Detached::new(set.index),
            reader,
            names: set.names,
            labels: set.labels,
            classes: set.classes,
            label_source: set.label_source,
        })
    }

    /// Each sample's name: its video's.
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

    /// The class names by label, where class folders name them.
    #[getter]
    fn classes(&self) -> Option<Vec<OsString>> {
        self.classes.clone()
    }

    /// Where the labels came from: `"folders"` or the list file.
    #[getter]
    fn label_source(&self) -> Option<String> {
        self.label_source.clone()
    }

    /// How errors name the clips' source.
    #[getter]
    fn location(&self) -> String {
        Index::location(&**self.index)
    }

    fn __len__(&self) -> usize {
        Index::len(&**self.index)
    }

    /// The batch reader of the clips.
    #[getter]
    fn reader(&self, py: Python<'_>) -> Py<Reader> {
        self.reader.clone_ref(py)
    }

    /// `[(name, frames, samples)]` of every video, in order.
    fn videos(&self) -> Vec<(String, usize, usize)> {
        let index = &**self.index;
        index
            .videos()
            .iter()
            .enumerate()
            .map(|(k, v)| (v.name.clone(), v.frames, index.samples_in(k)))
            .collect()
    }

    /// The names of every frame of video `v`, in order.
    fn video_frames(&self, py: Python<'_>, v: usize) -> PyResult<Vec<String>> {
        if v >= self.index.videos().len() {
            return Err(invalid_argument(py, format!("no video {v}")));
        }
        Ok(self.index.video_frame_names(v))
    }

    /// `(video, frame positions, frame names)` of sample `index` in `epoch`.
    fn frames(
        &self,
        py: Python<'_>,
        index: usize,
        epoch: u64,
    ) -> PyResult<(usize, Vec<usize>, Vec<String>)> {
        let clips = &**self.index;
        if index >= Index::len(clips) {
            return Err(invalid_argument(py, format!("no sample {index}")));
        }
        let (v, _) = clips.video_of(index);
        let first = clips.videos()[v].first;
        let rows = clips.frame_rows(index, epoch);
        let positions = rows.iter().map(|r| r - first).collect();
        Ok((v, positions, clips.frame_names(index, epoch)))
    }

    /// `(top, left, height, width, flipped)` of the crop every frame of sample `index` gets in
    /// `epoch`.
    fn crop(
        &self,
        py: Python<'_>,
        index: usize,
        epoch: u64,
    ) -> PyResult<(u32, u32, u32, u32, bool)> {
        if index >= Index::len(&**self.index) {
            return Err(invalid_argument(py, format!("no sample {index}")));
        }
        let clips = &self.index;
        let (r, flip) = py.detach(|| clips.crop(index, epoch)).py_err(py)?;
        Ok((r.y, r.x, r.h, r.w, flip))
    }

    /// `{sample index: why}` of every clip found not to decode so far (`on_error="skip"`).
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        errors_dict(py, &self.index.error_log())
    }

    /// What `errors` reads, kept apart from the source.
    #[getter]
    fn error_log(&self) -> ImageErrors {
        ImageErrors::of(self.index.error_log())
    }
}
