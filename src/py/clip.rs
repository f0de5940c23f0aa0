//! Bindings for clips: `ClipFile`, the batch reader of clips of frame folders on disk or in a
//! ZIP archive (`packread.ClipReader` names, labels and describes them).

use std::sync::Arc;

use pyo3::prelude::*;

use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::samples::SampleSet;
use super::source::open_with;
use crate::batch::Index;
use crate::formats::image::clip::ClipIndex;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ClipFile>()
}

/// Clips of the videos of one source as samples (their names, labels and batch reader are the
/// [`SampleSet`]'s). See `packread.ClipReader`.
#[pyclass(module = "packread._packread", frozen, extends = SampleSet)]
pub struct ClipFile {
    index: Detached<Arc<ClipIndex>>,
}

#[pymethods]
impl ClipFile {
    /// The clips of `source`: a frame tree (a path to a folder), or an archive holding one or
    /// an HDF5 file (a path, bytes, an opened object, a file object), cut as `options` say.
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let options = super::options::options(options, "clips")?;
        let crate::open::Format::Clips(clips) = options.format else {
            return Err(invalid_argument(py, "not clip options"));
        };
        let zip = options.zip;
        let set = match super::samples::folder_of(source) {
            Some(root) => py
                .detach(|| crate::formats::image::videos::from_folder(&root, &clips))
                .py_err(py)?,
            None => open_with(py, source, "<clip bytes>", move |s| {
                crate::open::clips_in(s, &clips, zip, false)
            })?,
        };
        let (base, index) = SampleSet::of(py, set)?;
        Ok(PyClassInitializer::from(base).add_subclass(ClipFile {
            index: Detached::new(index),
        }))
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
}
