//! Bindings for the readers' statistics ([`crate::stats`]): the counters of this process as
//! one array, their names, and the trace spans.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::stats;

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stats_counters, m)?)?;
    m.add_function(wrap_pyfunction!(stats_names, m)?)?;
    m.add_function(wrap_pyfunction!(set_stats, m)?)?;
    m.add_function(wrap_pyfunction!(stats_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(set_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(take_spans, m)?)?;
    m.add_function(wrap_pyfunction!(thread_number, m)?)?;
    Ok(())
}

/// The sums of this process's counters since it started (a forked child starts from its
/// parent's), as native-endian uint64 bytes in the order of `stats_names()`.
#[pyfunction]
fn stats_counters(py: Python<'_>) -> Bound<'_, PyBytes> {
    let sums = stats::snapshot();
    let bytes: Vec<u8> = sums.iter().flat_map(|v| v.to_ne_bytes()).collect();
    PyBytes::new(py, &bytes)
}

/// The names of the counters: `<stage>_ns`, `<stage>_calls`, `<stage>_bytes` per stage, then
/// the counts of events.
#[pyfunction]
fn stats_names() -> Vec<String> {
    (0..stats::COUNTERS).map(stats::counter_name).collect()
}

/// Turns loading statistics on or off in this process: the counters of packread's core and
/// what datasets record (on by default; `PACKREAD_STATS=0` starts with them off). Off, a
/// dataset's `stats()` stays empty; on costs under 1 % (benches/RESULTS.md).
///
/// >>> packread.set_stats(False)
/// >>> packread.set_stats(True)
#[pyfunction]
fn set_stats(on: bool) {
    stats::set_enabled(on);
}

/// Whether the readers' statistics are counted in this process.
#[pyfunction]
fn stats_enabled() -> bool {
    stats::enabled()
}

/// Turns the recording of trace spans on or off in this process.
#[pyfunction]
fn set_tracing(on: bool) {
    stats::set_tracing(on);
}

/// The spans recorded since the last call: `(thread number, stage, start ns of
/// CLOCK_MONOTONIC, length ns)`.
#[pyfunction]
fn take_spans(py: Python<'_>) -> Vec<(usize, &'static str, u64, u64)> {
    py.detach(stats::take_spans)
        .into_iter()
        .flat_map(|(id, spans)| {
            spans
                .into_iter()
                .map(move |s| (id, s.stage.name(), s.start_ns, s.len_ns))
        })
        .collect()
}

/// The number this thread has in trace spans.
#[pyfunction]
fn thread_number() -> usize {
    stats::thread_number()
}
