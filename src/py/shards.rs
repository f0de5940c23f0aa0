//! Binding for many files as one reader: `ShardSet`. The shards are opened by the core
//! (`crate::open`), each with every option the reader was given, when a batch first touches
//! it; what was counted of them (`state`) travels as plain values into pickles and the
//! index file that `packread._shards` keeps.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::detached::Detached;
use super::errors::{invalid_argument, IntoPyResult};
use super::reader::kind_name;
use super::reader::Reader;
use crate::batch::shards::Shards;
use crate::batch::{ArraySpec, Batches, Ragged, RaggedKind};
use crate::dtype::literal;
use crate::dtype::DType;
use crate::formats::image::ErrorLog;
use crate::open::{Location, Options, ShardState};
use crate::remote::ObjectStamp;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ShardSet>()
}

/// Files of one format read as one (see `packread._shards`).
#[pyclass(module = "packread._packread", frozen)]
pub struct ShardSet {
    shards: Detached<Arc<Shards>>,
    state: Arc<ShardState>,
    locations: Vec<Location>,
    options: Arc<Options>,
    logs: Arc<Mutex<Vec<(usize, ErrorLog)>>>,
    reader: Py<Reader>,
}

fn kind_of(name: &str) -> Option<RaggedKind> {
    Some(match name {
        "array" => RaggedKind::Values,
        "bytes" => RaggedKind::Bytes,
        "unicode" => RaggedKind::Text,
        "images" => RaggedKind::Images,
        "text" => RaggedKind::Utf8,
        "json" => RaggedKind::Json,
        "arrays" => RaggedKind::Arrays,
        _ => return None,
    })
}

fn dtype_of(text: &str) -> Option<DType> {
    DType::from_descr(literal::parse(text).ok()?).ok()
}

/// An object's stamp as plain values: `(size, etag, modified)`.
type StampValues = (u64, Option<String>, Option<i64>);

/// An array spec as plain values: `(name, descr, shape, ragged)`, `ragged` being `None` or
/// `(kind, descr, shape with None)`.
type SpecValues = (
    String,
    String,
    Vec<usize>,
    Option<(String, String, Vec<Option<usize>>)>,
);

fn spec_values(a: &ArraySpec) -> SpecValues {
    (
        a.name.clone(),
        a.dtype.descr().to_string(),
        a.shape.clone(),
        a.ragged.as_ref().map(|r| {
            (
                kind_name(r.kind).to_string(),
                r.dtype.descr().to_string(),
                r.shape.clone(),
            )
        }),
    )
}

fn spec_of(v: SpecValues) -> Option<ArraySpec> {
    let ragged = match v.3 {
        None => None,
        Some((kind, descr, shape)) => Some(Ragged {
            kind: kind_of(&kind)?,
            dtype: dtype_of(&descr)?,
            shape,
        }),
    };
    Some(ArraySpec {
        name: v.0,
        dtype: dtype_of(&v.1)?,
        shape: v.2,
        ragged,
    })
}

/// One array's spec from its four values, as a list or a tuple.
fn spec_values_of(a: &[Bound<'_, PyAny>]) -> Option<SpecValues> {
    let [name, descr, shape, ragged] = a else {
        return None;
    };
    let ragged = if ragged.is_none() {
        None
    } else {
        let r: Vec<Bound<'_, PyAny>> = ragged.extract().ok()?;
        let [kind, descr, shape] = r.as_slice() else {
            return None;
        };
        Some((
            kind.extract().ok()?,
            descr.extract().ok()?,
            shape.extract().ok()?,
        ))
    };
    Some((
        name.extract().ok()?,
        descr.extract().ok()?,
        shape.extract().ok()?,
        ragged,
    ))
}

/// A state dict as `ShardSet.state` gives it, back into the core's; `None` if it is not one
/// for `shards` shards (an index file edited by hand is rebuilt, never trusted).
fn state_of(obj: &Bound<'_, PyAny>, shards: usize) -> Option<ShardState> {
    let d = obj.cast::<PyDict>().ok()?;
    let get = |k: &str| d.get_item(k).ok().flatten();
    let lengths: Vec<usize> = get("lengths")?.extract().ok()?;
    // Lists or tuples alike: a state read back from JSON holds lists.
    let arrays: Vec<Vec<Bound<'_, PyAny>>> = get("arrays")?.extract().ok()?;
    let arrays = arrays
        .into_iter()
        .map(|a| spec_of(spec_values_of(&a)?))
        .collect::<Option<Vec<_>>>()?;
    let labels: Option<Vec<i64>> = get("labels")?.extract().ok()?;
    let classes: Option<Vec<OsString>> = get("classes")?.extract().ok()?;
    let stamps: Vec<Option<Vec<Bound<'_, PyAny>>>> = get("stamps")?.extract().ok()?;
    let stamps = stamps
        .into_iter()
        .map(|s| match s.as_deref() {
            None => Some(None),
            Some([len, etag, modified]) => Some(Some((
                len.extract::<u64>().ok()?,
                etag.extract::<Option<String>>().ok()?,
                modified.extract::<Option<i64>>().ok()?,
            ))),
            Some(_) => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let first: usize = get("first")?.extract().ok()?;
    // Absent from the index files of earlier releases: nothing was left out then.
    let skipped: Vec<(usize, String, String)> = match get("skipped") {
        Some(v) => v.extract().ok()?,
        None => Vec::new(),
    };
    let samples_per_chunk: usize = get("samples_per_chunk")?.extract().ok()?;
    let total: usize = lengths.iter().sum();
    let ok = lengths.len() == shards
        && stamps.len() == shards
        && !arrays.is_empty()
        && first < shards.max(1)
        && samples_per_chunk >= 1
        && labels.as_ref().is_none_or(|l| l.len() == total)
        && skipped.iter().all(|(k, _, _)| *k < shards);
    ok.then(|| ShardState {
        lengths,
        arrays,
        labels,
        classes,
        stamps: stamps
            .into_iter()
            .map(|s| {
                s.map(|(len, etag, modified)| ObjectStamp {
                    len,
                    etag,
                    modified,
                })
            })
            .collect(),
        first,
        samples_per_chunk,
        skipped,
    })
}

#[pymethods]
impl ShardSet {
    /// The files at `paths` (paths or URLs) read as one, each as `format` (`"hdf5"`, `"zip"`,
    /// `"images"`) with `options`; `state` is what an earlier count gave (from a pickle or an
    /// index file), else every shard is opened once now to count it. At most `max_open` stay
    /// open.
    #[new]
    fn new(
        py: Python<'_>,
        format: &str,
        paths: Vec<OsString>,
        options: &Bound<'_, PyAny>,
        state: Option<&Bound<'_, PyAny>>,
        max_open: usize,
    ) -> PyResult<ShardSet> {
        if paths.is_empty() {
            return Err(invalid_argument(py, "the list of shards is empty"));
        }
        let options = Arc::new(super::options::options(options, format)?);
        let locations: Vec<Location> = paths.into_iter().map(Location::new).collect();
        let logs: Arc<Mutex<Vec<(usize, ErrorLog)>>> = Arc::default();
        let given = match state {
            Some(s) => Some(state_of(s, locations.len()).ok_or_else(|| {
                invalid_argument(py, "the shards' state is not one this reader wrote")
            })?),
            None => None,
        };
        let remote = locations
            .iter()
            .any(|l| l.name.to_str().is_some_and(crate::remote::is_url));
        let (locs, opts, theirs) = (locations.clone(), Arc::clone(&options), Arc::clone(&logs));
        let build = move || -> crate::error::Result<(Shards, Arc<ShardState>)> {
            let (state, kept) = match given {
                Some(s) => (s, Vec::new()),
                None => crate::open::count(&locs, &opts, max_open, &theirs)?,
            };
            let state = Arc::new(state);
            let shards =
                crate::open::shards(locs, opts, Arc::clone(&state), max_open, kept, theirs)?;
            Ok((shards, state))
        };
        let (shards, state) = if remote {
            super::remote::interruptible(py, build)?
        } else {
            py.detach(build).py_err(py)?
        };
        let shards = Arc::new(shards);
        let reader = Py::new(
            py,
            Reader::new(py, Arc::clone(&shards) as Arc<dyn Batches>)?,
        )?;
        Ok(ShardSet {
            shards: Detached::new(shards),
            state,
            locations,
            options,
            logs,
            reader,
        })
    }

    /// Whether `state` is one a reader of `shards` shards could have written.
    #[staticmethod]
    fn valid_state(state: &Bound<'_, PyAny>, shards: usize) -> bool {
        state_of(state, shards).is_some()
    }

    fn __len__(&self) -> usize {
        self.shards.len()
    }

    /// What was counted: `{"lengths", "arrays", "labels", "classes", "stamps", "first",
    /// "samples_per_chunk", "skipped"}`, in plain values (JSON-able).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.state;
        let d = PyDict::new(py);
        d.set_item("lengths", &s.lengths)?;
        let arrays: Vec<SpecValues> = s.arrays.iter().map(spec_values).collect();
        d.set_item("arrays", arrays)?;
        d.set_item("labels", &s.labels)?;
        d.set_item("classes", &s.classes)?;
        let stamps: Vec<Option<StampValues>> = s
            .stamps
            .iter()
            .map(|t| t.as_ref().map(|t| (t.len, t.etag.clone(), t.modified)))
            .collect();
        d.set_item("stamps", stamps)?;
        d.set_item("first", s.first)?;
        d.set_item("samples_per_chunk", s.samples_per_chunk)?;
        d.set_item("skipped", &s.skipped)?;
        Ok(d)
    }

    /// Samples in each shard.
    #[getter]
    fn lengths(&self) -> Vec<usize> {
        self.state.lengths.clone()
    }

    /// Every sample's label, where the shards have labels.
    #[getter]
    fn labels<'py>(&self, py: Python<'py>) -> Option<Bound<'py, numpy::PyArray1<i64>>> {
        self.state
            .labels
            .as_ref()
            .map(|l| numpy::PyArray1::from_slice(py, l))
    }

    /// The classes every shard has, where they name them.
    #[getter]
    fn classes(&self) -> Option<Vec<OsString>> {
        self.state.classes.clone()
    }

    /// Samples stored (and decoded) together.
    #[getter]
    fn samples_per_chunk(&self) -> usize {
        self.state.samples_per_chunk
    }

    /// Shards open now.
    fn open_count(&self) -> usize {
        self.shards.open_count()
    }

    /// The batch reader of the whole.
    fn reader(&self, py: Python<'_>) -> Py<Reader> {
        self.reader.clone_ref(py)
    }

    /// The names of shard `k`'s samples (the shard is opened for them).
    fn shard_names(&self, py: Python<'_>, k: usize) -> PyResult<Vec<OsString>> {
        let Some(location) = self.locations.get(k) else {
            return Err(invalid_argument(py, format!("no shard {k}")));
        };
        let mut location = location.clone();
        location.stamp.clone_from(&self.state.stamps[k]);
        let options = Arc::clone(&self.options);
        py.detach(move || crate::open::open(&location, &options, Some(k)).map(|o| o.names))
            .py_err(py)
    }

    /// `[(shard, key, batch key)]` of the samples left out for a missing field (keyed
    /// samples), as counted.
    fn skipped(&self) -> Vec<(usize, String, String)> {
        self.state.skipped.clone()
    }

    /// `{index in the whole: "file: why"}` of every image found not to decode so far
    /// (`on_error="skip"`).
    fn errors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        let mut all = std::collections::BTreeMap::new();
        for (k, log) in logs.iter() {
            let start = self.shards.range(*k).start as u64;
            let name = crate::source::shown(std::path::Path::new(&self.locations[*k].name));
            for (i, why) in log.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                all.insert(start + i, format!("{name}: {why}"));
            }
        }
        for (k, v) in all {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// How many images were found not to decode so far.
    fn error_count(&self) -> usize {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.iter()
            .map(|(_, l)| l.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// `[(name, dtype, shape, ragged)]`, as `Reader.arrays` gives them.
    fn arrays<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.reader
            .bind(py)
            .call_method0("arrays")?
            .cast_into::<PyList>()
            .map_err(Into::into)
    }
}
