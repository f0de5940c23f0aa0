//! Bindings for keyed samples: `KeyedFile`, the batch reader of samples made of several members
//! that share a key, in a tar or ZIP archive (`packread.TarReader`, `ZipReader(fields=)`).

use std::sync::Arc;

use pyo3::prelude::*;

use super::detached::Detached;
use super::errors::invalid_argument;
use super::samples::SampleSet;
use super::source::open_with;
use crate::formats::image::open::Labelled;
use crate::formats::keyed::KeyedIndex;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<KeyedFile>()?;
    m.add_function(wrap_pyfunction!(keyed_groups, m)?)?;
    Ok(())
}

/// A sample's key and its fields' `(name, size)`.
type Group = (String, Vec<(String, u64)>);

/// Every sample of the archive `source` (a tar with `tar`, else a ZIP) as
/// `(key, [(field, size)])`, in order, whatever fields each has (what `inspect` reports).
#[pyfunction]
fn keyed_groups(py: Python<'_>, source: &Bound<'_, PyAny>, tar: bool) -> PyResult<Vec<Group>> {
    open_with(py, source, "<archive bytes>", move |s| {
        let zip = if tar {
            crate::formats::zip::ZipIndex::from_tar(s, Default::default(), None)?
        } else {
            crate::formats::zip::ZipIndex::open(s, Default::default())?
        };
        let groups = crate::formats::keyed::group(&zip)?;
        Ok(groups
            .into_iter()
            .map(|g| {
                let fields = g
                    .fields
                    .into_iter()
                    .map(|(f, i)| (f, zip.members()[i].size()))
                    .collect();
                (g.key, fields)
            })
            .collect())
    })
}

/// The keyed samples of one archive (their keys and batch reader are the [`SampleSet`]'s).
#[pyclass(module = "packread._packread", frozen, extends = SampleSet)]
pub struct KeyedFile {
    index: Detached<Arc<KeyedIndex>>,
    skipped: Vec<(String, String)>,
}

#[pymethods]
impl KeyedFile {
    /// The keyed samples of `source` (a path, bytes, an opened object, a file object), read
    /// as `format` (`"tar"` or `"zip"`) with `options`.
    #[new]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        format: &str,
        options: &Bound<'_, PyAny>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let options = super::options::options(options, format)?;
        let crate::open::Format::Keyed(keyed) = options.format else {
            return Err(invalid_argument(py, "not keyed options (fields=)"));
        };
        let (zip, threads, caches) = (options.zip, options.threads, options.remote.caches);
        let set = open_with(py, source, "<archive bytes>", move |s| {
            crate::open::keyed_in(s, &keyed, zip, &caches, threads)
        })?;
        let skipped = set.skipped;
        let labelled = Labelled {
            index: set.index,
            names: set.names,
            labels: None,
            classes: None,
            label_source: None,
        };
        let (base, index) = SampleSet::of(py, labelled)?;
        Ok(PyClassInitializer::from(base).add_subclass(KeyedFile {
            index: Detached::new(index),
            skipped,
        }))
    }

    /// `[(key, batch key)]` of the samples left out for a missing field.
    fn skipped(&self) -> Vec<(String, String)> {
        self.skipped.clone()
    }

    /// `[(name, size)]` of the members of the archive, in order (what `inspect` reports).
    fn members(&self) -> Vec<(String, u64)> {
        self.index
            .zip()
            .members()
            .iter()
            .map(|m| (m.name().to_string(), m.size()))
            .collect()
    }

    /// Whether the archive is a tar.
    #[getter]
    fn is_tar(&self) -> bool {
        self.index.zip().is_tar()
    }
}
