//! `SampleSet`, what the bindings of sources whose samples have names and labels share (images,
//! clips): the names, the labels and classes and where they came from, the samples that did not
//! decode, and the batch reader. `ImageFile` and `ClipFile` extend it with their own index.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::reader::Reader;
use crate::batch::{Batches, Index};
use crate::formats::image::open::Labelled;
use crate::formats::image::ErrorLog;
use crate::open::Logged;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SampleSet>()?;
    m.add_class::<ImageErrors>()
}

/// Named, labelled samples of one source and their batch reader.
#[pyclass(module = "packread._packread", frozen, subclass)]
pub struct SampleSet {
    reader: Py<Reader>,
    names: Vec<OsString>,
    labels: Option<Vec<i64>>,
    classes: Option<Vec<OsString>>,
    label_source: Option<String>,
    location: String,
    len: usize,
    errors: ErrorLog,
}

impl SampleSet {
    /// The base of a binding over `set` (its batch reader, names, labels and log), and the
    /// index the binding keeps.
    pub(super) fn of<I: Logged>(py: Python<'_>, set: Labelled<I>) -> PyResult<(SampleSet, Arc<I>)> {
        let reader = Py::new(py, Reader::new(py, set.index.clone() as Arc<dyn Batches>)?)?;
        let base = SampleSet {
            reader,
            names: set.names,
            labels: set.labels,
            classes: set.classes,
            label_source: set.label_source,
            location: Index::location(&*set.index),
            len: Index::len(&*set.index),
            errors: set.index.error_log(),
        };
        Ok((base, set.index))
    }
}

/// The local folder `source` names (a tree read from disk), if it names one.
pub(super) fn folder_of(source: &Bound<'_, PyAny>) -> Option<PathBuf> {
    source
        .extract::<PathBuf>()
        .ok()
        .filter(|p| !p.to_str().is_some_and(crate::remote::is_url) && p.is_dir())
}

#[pymethods]
impl SampleSet {
    /// The samples' names (member names, file paths, `dataset[k]`, videos).
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

    /// Where the labels came from: `"folders"`, a JSON member, a list file, `"hdf5:<dataset>"`.
    #[getter]
    fn label_source(&self) -> Option<String> {
        self.label_source.clone()
    }

    /// How errors name the source.
    #[getter]
    fn location(&self) -> String {
        self.location.clone()
    }

    fn __len__(&self) -> usize {
        self.len
    }

    /// The batch reader of the samples.
    #[getter]
    fn reader(&self, py: Python<'_>) -> Py<Reader> {
        self.reader.clone_ref(py)
    }

    /// `{sample index: why}` of every sample found not to decode so far (`on_error="skip"`).
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        errors_dict(py, &self.errors)
    }

    /// What `errors` reads, kept apart from the source: it stays readable after the source is
    /// closed (a shard closed to keep descriptors bounded).
    #[getter]
    fn error_log(&self) -> ImageErrors {
        ImageErrors {
            log: self.errors.clone(),
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

/// The samples of one source that did not decode (`on_error="skip"`), holding nothing of the
/// source itself.
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
